#!/usr/bin/env bash
# tool_perf.sh CALLCHAIN: perf's frame-pointer call graphs go through JIT
# kernels to main, in per-process and in system-wide mode, with no perf map.
#
# Pass: >= 100 samples in JIT kernels and >= 99% of them have inner, outer
# and main (in that order) in their call chain, in both modes; and no
# /tmp/perf-PID.map was written (the library must not write one by default).
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CALLCHAIN="$1"
need_exe "$CALLCHAIN"
make_tmp

rc=0
why="$(perf_usable)" || rc=$?
((rc != 1)) || skip "$why"
((rc == 0)) || fail "$why"

MIN_SAMPLES=100
MIN_PERMILLE=990
status=0

# check MODE PID KERNELS SCRIPT_OUT
check() {
    local mode="$1" pid="$2" kernels="$3" script="$4" res jit ok named total
    res="$(analyze_perf_script "$kernels" "$pid" < "$script")"
    jit="$(sed -n 's/.*jit=\([0-9]*\).*/\1/p' <<<"$res")"
    ok="$(sed -n 's/.*ok=\([0-9]*\).*/\1/p' <<<"$res")"
    named="$(sed -n 's/.*named=\([0-9]*\).*/\1/p' <<<"$res")"
    total="$(sed -n 's/.*total=\([0-9]*\).*/\1/p' <<<"$res")"
    local pct="n/a"
    ((jit > 0)) && pct="$(awk -v a="$ok" -v b="$jit" 'BEGIN { printf "%.2f%%", 100 * a / b }')"
    say "$mode: pid $pid: $total samples, $jit in JIT kernels, $ok of them reach inner/outer/main ($pct)"
    # Informational: perf names kernels from the arena files' symbols.
    say "$mode: $named of the JIT samples have a kernel name in perf (others show [unknown])"
    if ((jit < MIN_SAMPLES)); then
        say "$mode: FAIL: fewer than $MIN_SAMPLES JIT samples"
        say "$mode: kernels callchain found:"; show "$kernels"
        say "$mode: first samples:"; head -40 "$script" | sed 's/^/    | /'
        status=1
    elif ((ok * 1000 < jit * MIN_PERMILLE)); then
        say "$mode: FAIL: under 99% of JIT samples reach main; some that do not:"
        awk 'BEGIN { RS = "" } !/inner/ || !/outer/ || !/[ \t]main /' "$script" |
            grep -v '^$' | head -40 | sed 's/^/    | /'
        status=1
    fi
    if [[ -e "/tmp/perf-$pid.map" ]]; then
        say "$mode: FAIL: /tmp/perf-$pid.map exists: the library wrote a perf map without FRAMEJIT_PERFMAP"
        rm -f "/tmp/perf-$pid.map"
        status=1
    fi
}

pid_of() { sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$1"; }

# ---- 1. per process: perf record -g -- callchain 2 -------------------------
perf record -g -o "$TMP/proc.data" -- "$CALLCHAIN" 2 >"$TMP/proc.out" 2>"$TMP/proc.err" ||
    { show "$TMP/proc.err"; fail "perf record -- callchain failed"; }
cat "$TMP/proc.out"
grep '^callchain: kernel' "$TMP/proc.err" | sed 's/^/    /' || true
pid="$(pid_of "$TMP/proc.out")"
[[ -n "$pid" ]] || { show "$TMP/proc.out"; show "$TMP/proc.err"; fail "callchain printed no pid"; }
perf script -i "$TMP/proc.data" -F pid,ip,sym,dso 2>/dev/null >"$TMP/proc.script"
check "per-process" "$pid" "$TMP/proc.err" "$TMP/proc.script"

# ---- 2. system-wide: perf record -a -g -- sleep 3, callchain in the background
"$CALLCHAIN" 4 >"$TMP/sys.out" 2>"$TMP/sys.err" &
bg=$!
sleep 0.3
perf record -a -g -o "$TMP/sys.data" -- sleep 3 >/dev/null 2>"$TMP/sys.perf.err" ||
    { show "$TMP/sys.perf.err"; wait "$bg" || true; fail "perf record -a failed"; }
wait "$bg" || { show "$TMP/sys.err"; fail "callchain failed in the background"; }
cat "$TMP/sys.out"
[[ "$(pid_of "$TMP/sys.out")" == "$bg" ]] || fail "callchain's pid is not $bg"
perf script -i "$TMP/sys.data" -F pid,ip,sym,dso --pid "$bg" 2>/dev/null >"$TMP/sys.script"
check "system-wide" "$bg" "$TMP/sys.err" "$TMP/sys.script"

if ((status == 0)); then say "PASS"; fi
exit "$status"
