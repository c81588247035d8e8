#!/usr/bin/env bash
# tool_core.sh CRASH: a core dumped by a faulting JIT kernel is usable.
#
# Runs CRASH (main -> outer -> inner -> relu kernel that reads a PROT_NONE
# page) with `ulimit -c unlimited` in a scratch directory, under the default
# FRAMEJIT_* settings and the system's coredump_filter. Pass:
#   1. eu-stack --core names frame #0 after the kernel (it reads the kernel's
#      symbols from the arena file the crashed process left in /dev/shm,
#      found through the core's file notes and checked by build-id);
#   2. with that file removed, gdb -batch -ex bt -ex 'x/i $pc' PROG CORE names
#      the kernel in frame #0 (gdb's JIT objects are in the core's heap), then
#      inner, outer and main, and shows the faulting instruction: a memory
#      read (the code bytes are in the core itself, not zeros);
# Printed, not asserted: x/i $pc of a core made with FRAMEJIT_CORE_CODE=0
# (zeros under the default coredump_filter: the shared view is not dumped).
# Skips when cores do not come to a file of ours: core_pattern pipes them
# to a handler (systemd-coredump, apport) or names an absolute path.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CRASH="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
need_exe "$CRASH"
make_tmp
unset FRAMEJIT_CORE_CODE FRAMEJIT_KEEP_SECONDS FRAMEJIT_KEEP_MB FRAMEJIT_CODE_FILE

pattern="$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo '?')"
case "$pattern" in
    '|'*) skip "core_pattern pipes cores to a handler this test does not own: $pattern" ;;
    /*) skip "core_pattern writes cores to a fixed place this test does not own: $pattern" ;;
    '?') skip "cannot read /proc/sys/kernel/core_pattern" ;;
esac
ulimit -c unlimited 2>/dev/null || skip "cannot raise the core size limit (ulimit -c)"
command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
say "core_pattern '$pattern', coredump_filter $(cat /proc/self/coredump_filter)"

# crash_core DIR [ENV...]: runs CRASH in DIR, prints the core's path.
crash_core() {
    local dir="$1"; shift
    mkdir -p "$dir"
    (cd "$dir" && env "$@" "$CRASH" >out 2>err) && fail "crash did not crash" || true
    local core
    core="$(find "$dir" -maxdepth 1 -name 'core*' -type f | head -1)"
    [[ -n "$core" ]] || { show "$dir/err"; fail "no core file in $dir (core_pattern '$pattern')"; }
    echo "$core"
}
gdb_core() {
    gdb -nx -batch -iex 'set debuginfod enabled off' -ex 'set pagination off' \
        -ex bt -ex 'x/i $pc' "$CRASH" "$1" 2>&1
}
status=0

core="$(crash_core "$TMP/default")"
say "core: $core ($(($(stat -c %s "$core") >> 20)) MiB)"

# ---- 1. eu-stack --------------------------------------------------------------
if command -v eu-stack >/dev/null 2>&1; then
    eu-stack --core "$core" -e "$CRASH" >"$TMP/eu.out" 2>&1 || true
    show "$TMP/eu.out"
    if grep -qE '^#0 +0x[0-9a-f]+ fj_eltwise_relu_f32' "$TMP/eu.out"; then
        say "eu-stack --core: frame #0 named"
    else
        say "FAIL: eu-stack --core does not name frame #0 fj_eltwise_relu_f32_*"; status=1
    fi
else
    say "eu-stack part skipped: eu-stack (elfutils) is not installed"
fi

# ---- 2. gdb, with the arena file gone -------------------------------------------
rm -f /dev/shm/framejit-"$(readelf -n "$core" 2>/dev/null | sed -n 's@.*/dev/shm/framejit-\([0-9]*\)-.*@\1@p' | head -1)"-*
gdb_core "$core" >"$TMP/gdb.out"
show "$TMP/gdb.out"
awk '/^#0 .* fj_eltwise_relu_f32/ { s = 1 } s == 1 && / inner / { s = 2 } s == 2 && / outer / { s = 3 }
     s == 3 && / main / { s = 4 } END { exit s == 4 ? 0 : 1 }' "$TMP/gdb.out" ||
    { say "FAIL: gdb's bt is not relu kernel, inner, outer, main"; status=1; }
insn="$(grep -E '^=> 0x[0-9a-f]+ <fj_eltwise_relu_f32[^>]*>:' "$TMP/gdb.out" || true)"
if [[ -z "$insn" ]]; then
    say "FAIL: x/i \$pc names no relu kernel"; status=1
elif grep -qE '\(bad\)|add +%al,\(%rax\)|Cannot access memory' <<<"$insn" ||
     ! grep -q '(%r' <<<"$insn"; then
    say "FAIL: x/i \$pc does not show the faulting read (code bytes not in the core?): $insn"; status=1
else
    say "gdb: faulting instruction from the core: ${insn#=> }"
fi

# ---- FRAMEJIT_CORE_CODE=0: the shared view ---------------------------------------
core0="$(crash_core "$TMP/shared" FRAMEJIT_CORE_CODE=0)"
rm -f /dev/shm/framejit-"$(readelf -n "$core0" 2>/dev/null | sed -n 's@.*/dev/shm/framejit-\([0-9]*\)-.*@\1@p' | head -1)"-*
insn0="$(gdb_core "$core0" | grep -E '^=> ' || true)"
say "FRAMEJIT_CORE_CODE=0 (informational): x/i \$pc shows: ${insn0#=> }"

if ((status == 0)); then say "PASS"; fi
exit "$status"
