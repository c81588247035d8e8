#!/usr/bin/env bash
# tool_gdb.sh CRASH: gdb names a faulting JIT kernel and unwinds through it.
#
# Runs `gdb -batch -ex run -ex bt --args CRASH`; passes when frame #0 is the
# relu kernel (its name starts with fj_eltwise_relu_f32: gdb learned it from
# the GDB JIT interface) and inner, outer and main follow in that order
# (gdb unwound with the kernel's registered CFI).
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CRASH="$1"
need_exe "$CRASH"
make_tmp

command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
# gdb must be able to ptrace a child here.
if ! gdb -nx -batch -ex run --args true >"$TMP/probe" 2>&1 ||
    grep -qiE 'ptrace: Operation not permitted|Could not trace' "$TMP/probe"; then
    skip "gdb cannot run programs here: $(head -3 "$TMP/probe" | tr '\n' ' ')"
fi

gdb -nx -batch \
    -iex 'set debuginfod enabled off' \
    -ex 'set pagination off' \
    -ex run -ex bt \
    --args "$CRASH" >"$TMP/gdb.out" 2>&1 || true
say "gdb output:"
show "$TMP/gdb.out"

grep -q 'SIGSEGV' "$TMP/gdb.out" || fail "the program did not stop with SIGSEGV"

# Frame lines: "#N  0xADDR in NAME (...) at ..." or "#N  NAME (...) at ...".
grep -E '^#[0-9]+ ' "$TMP/gdb.out" |
    sed -E 's/^#([0-9]+) +(0x[0-9a-f]+ in )?([^ (]+).*/\1 \3/' >"$TMP/frames"
frame0="$(awk '$1 == 0 { print $2 }' "$TMP/frames")"
[[ "$frame0" == fj_eltwise_relu_f32* ]] ||
    fail "frame #0 is '$frame0', not the relu kernel (fj_eltwise_relu_f32*)"

# inner, outer and main, in this order, after frame #0.
order="$(awk '$2 ~ /^(inner|outer|main)$/ { printf "%s ", $2 }' "$TMP/frames")"
[[ "$order" == "inner outer main " ]] ||
    fail "expected inner, outer, main after the kernel; found: '${order}'"
say "frame #0 $frame0, then inner, outer, main"
say "PASS"
