#!/usr/bin/env bash
# tool_stitch.sh CALLCHAIN OMP_POOL: perf's frame-pointer call graphs of
# JIT samples on worker threads reach the submitting thread's main.
#
# Runs, under `perf record -g`:
#   - callchain with FRAMEJIT_THREADS=2 and =4 (GEMM and a large relu split
#     over framejit's own workers), per process and system-wide (-a);
#   - omp_pool: an OpenMP team of 2 and of 4 threads and a plain pthread
#     pool of 4 threads running kernels through fj_origin_run, and framejit
#     handing its own parallel work to OpenMP (fj_options.parallel_for).
# Then `omp_pool signal 3` walks its OpenMP workers from a signal handler
# (see examples/omp_pool.c) and must exit 0.
#
# Pass, for each run: >= 100 JIT samples, on at least two threads, >= 50
# of them off the main thread; >= 99% of all JIT samples have inner, outer
# and main in their chain, and so do >= 99% of every thread's (a thread
# with under 100 JIT samples may miss at most one).
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CALLCHAIN="$1"
OMP_POOL="$2"
need_exe "$CALLCHAIN"
need_exe "$OMP_POOL"
make_tmp

rc=0
why="$(perf_usable)" || rc=$?
((rc != 1)) || skip "$why"
((rc == 0)) || fail "$why"

status=0

# check NAME PID KERNELS SCRIPT
check() {
    local name="$1" pid="$2" kernels="$3" script="$4" res line
    res="$(analyze_perf_script "$kernels" "$pid" bytid <"$script")"
    line="$(head -1 <<<"$res")"
    local jit ok
    jit="$(sed -n 's/.*jit=\([0-9]*\).*/\1/p' <<<"$line")"
    ok="$(sed -n 's/.*ok=\([0-9]*\).*/\1/p' <<<"$line")"
    say "$name: $jit JIT samples, $ok reach inner/outer/main ($(awk -v a="$ok" -v b="$jit" 'BEGIN { printf "%.2f%%", b ? 100 * a / b : 0 }'))"
    local bad=0 threads=0 off_main=0 t tj to
    while read -r t tj to; do
        t="${t#tid=}"; tj="${tj#jit=}"; to="${to#ok=}"
        threads=$((threads + 1))
        [[ "$t" == "$pid" ]] || off_main=$((off_main + tj))
        say "$name:   thread $t$([[ "$t" == "$pid" ]] && echo ' (main)'): $tj JIT samples, $to reach main"
        if ((tj >= 100 && to * 1000 < tj * 990)) || ((tj < 100 && tj - to > 1)); then bad=1; fi
    done < <(tail -n +2 <<<"$res")
    local why=""
    ((jit >= 100)) || why="fewer than 100 JIT samples"
    ((threads >= 2)) || why="JIT samples on $threads thread(s), not on workers"
    ((off_main >= 50)) || why="only $off_main JIT samples off the main thread"
    ((ok * 1000 >= jit * 990)) || why="under 99% of the JIT samples reach main"
    ((bad == 0)) || why="a thread has under 99% of its JIT samples reaching main"
    if [[ -n "$why" ]]; then
        say "$name: FAIL: $why; some samples that do not reach main:"
        awk 'BEGIN { RS = "" } /framejit|perf-[0-9]+\.map|\[unknown\]/ && (!/inner/ || !/outer/ || !/[ \t]main /)' \
            "$script" | grep -v '^$' | head -40 | sed 's/^/    | /'
        status=1
    fi
}

pid_of() { sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$1"; }

# per_process NAME ENV... -- CMD...
per_process() {
    local name="$1"; shift
    local envs=()
    while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" perf record -g -o "$TMP/$name.data" -- "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" ||
        { show "$TMP/$name.err"; fail "$name: perf record failed"; }
    cat "$TMP/$name.out"
    local pid
    pid="$(pid_of "$TMP/$name.out")"
    [[ -n "$pid" ]] || { show "$TMP/$name.out"; show "$TMP/$name.err"; fail "$name: no pid printed"; }
    perf script -i "$TMP/$name.data" -F pid,tid,ip,sym,dso 2>/dev/null >"$TMP/$name.script"
    check "$name" "$pid" "$TMP/$name.err" "$TMP/$name.script"
}

per_process callchain-t2 FRAMEJIT_THREADS=2 -- "$CALLCHAIN" 2
per_process callchain-t4 FRAMEJIT_THREADS=4 -- "$CALLCHAIN" 2
per_process omp-t2 OMP_WAIT_POLICY=passive -- "$OMP_POOL" omp 2 2
per_process omp-t4 OMP_WAIT_POLICY=passive -- "$OMP_POOL" omp 4 2
per_process pthread-t4 -- "$OMP_POOL" pthread 4 2
per_process ompfor-t4 OMP_WAIT_POLICY=passive -- "$OMP_POOL" ompfor 4 2

# system_wide NAME THREADS: perf record -a -g -- sleep 2 while callchain runs.
system_wide() {
    local name="$1" threads="$2"
    FRAMEJIT_THREADS="$threads" "$CALLCHAIN" 4 >"$TMP/$name.out" 2>"$TMP/$name.err" &
    local bg=$!
    sleep 0.5
    perf record -a -g -o "$TMP/$name.data" -- sleep 2 >/dev/null 2>"$TMP/$name.perf.err" ||
        { show "$TMP/$name.perf.err"; wait "$bg" || true; fail "$name: perf record -a failed"; }
    wait "$bg" || { show "$TMP/$name.err"; fail "$name: callchain failed"; }
    cat "$TMP/$name.out"
    [[ "$(pid_of "$TMP/$name.out")" == "$bg" ]] || fail "$name: callchain's pid is not $bg"
    perf script -i "$TMP/$name.data" -F pid,tid,ip,sym,dso --pid "$bg" 2>/dev/null >"$TMP/$name.script"
    check "$name" "$bg" "$TMP/$name.err" "$TMP/$name.script"
}

system_wide system-wide-t2 2
system_wide system-wide-t4 4

# ---- DWARF walks from a signal handler on OpenMP workers running kernels
# under fj_origin_run: backtrace(), _Unwind_Backtrace and unw_backtrace end
# at the thread's start without reaching the other thread's frames.
if OMP_WAIT_POLICY=passive "$OMP_POOL" signal 3 >"$TMP/signal.out" 2>&1; then
    show "$TMP/signal.out"
else
    show "$TMP/signal.out"
    say "omp_pool signal: FAIL"
    status=1
fi

if ((status == 0)); then say "PASS"; fi
exit "$status"
