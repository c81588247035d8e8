#!/usr/bin/env bash
# tool_stitch_gdb.sh CALLCHAIN OMP_POOL: gdb's `thread apply all bt` (and
# elfutils' eu-stack) on a
# busy process whose threads run stitched work (framejit's workers, an
# OpenMP team under fj_origin_run) prints every thread, each from its own
# stack to its thread start: no "corrupt stack" / "previous frame inner"
# stop, and no worker's backtrace wanders into main (gdb unwinds with
# DWARF CFI, which keeps to the thread's own stack).
#
# Attaches three times to each program; passes when every attach printed
# a backtrace for every thread of /proc/PID/task, none has the messages
# above, and the worker threads' backtraces end in clone3 without main.
# Then stops a worker inside the stitched work with a breakpoint (an
# attach rarely finds one there: gdb stops the threads one by one, and a
# worker finishes its chunk meanwhile): its backtrace goes through
# fj_worker_run (fj_origin_run for OpenMP) to clone3.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CALLCHAIN="$1"
OMP_POOL="$2"
need_exe "$CALLCHAIN"
need_exe "$OMP_POOL"
make_tmp

command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
"$CALLCHAIN" 5 >/dev/null 2>&1 &
probe=$!
sleep 0.3
if ! gdb -nx -batch -p "$probe" -ex 'info threads' >"$TMP/probe" 2>&1 ||
    grep -qiE 'ptrace: Operation not permitted|Could not attach' "$TMP/probe"; then
    kill "$probe" 2>/dev/null || true
    wait "$probe" 2>/dev/null || true
    skip "gdb cannot attach here: $(head -3 "$TMP/probe" | tr '\n' ' ')"
fi
kill "$probe" 2>/dev/null || true
wait "$probe" 2>/dev/null || true

status=0

# attach NAME PID: one `thread apply all bt`, checked.
attach() {
    local name="$1" pid="$2" out="$TMP/$1.gdb"
    local want
    want="$(ls "/proc/$pid/task" | wc -l)"
    gdb -nx -batch -iex 'set debuginfod enabled off' -ex 'set pagination off' \
        -p "$pid" -ex 'thread apply all bt' >"$out" 2>&1 || true
    local got
    got="$(grep -cE '^Thread [0-9]+ ' "$out" || true)"
    # One block per thread: "Thread N (...):" then its frames.
    local bad
    bad="$(awk '
        /^Thread [0-9]+ / { if (blk != "") check(); blk = $0; main = 0; clone = 0; worker = ($0 ~ /fj-worker|omp_pool/ && $0 !~ /LWP '"$pid"'\)/); next }
        /^#[0-9]+ / { if ($0 ~ / main \(/) main = 1; if ($0 ~ /clone3|clone \(/) clone = 1 }
        function check() { if (worker && (main || !clone)) { print "worker thread with " (main ? "main in its backtrace" : "no clone3 at its end") ": " blk } }
        END { if (blk != "") check() }' "$out")"
    say "$name: gdb printed $got of $want threads"
    if ((got < want)); then
        say "$name: FAIL: not every thread was printed"; show "$out"; status=1; return
    fi
    if grep -qiE 'corrupt stack|previous frame inner|previous frame identical' "$out"; then
        say "$name: FAIL: gdb stopped a backtrace:"; show "$out"; status=1; return
    fi
    if [[ -n "$bad" ]]; then
        say "$name: FAIL: $bad"; show "$out"; status=1; return
    fi
}

# run NAME ENV -- CMD...: attaches while it runs.
run() {
    local name="$1"; shift
    local envs=()
    while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$@" >"$TMP/$name.out" 2>&1 &
    local pid=$!
    sleep 0.5
    for i in 1 2 3; do attach "$name-$i" "$pid"; sleep 0.2; done
    wait "$pid" || { show "$TMP/$name.out"; fail "$name: the program failed"; }
}

run callchain-t4 FRAMEJIT_THREADS=4 -- "$CALLCHAIN" 3
run omp-t4 OMP_WAIT_POLICY=passive -- "$OMP_POOL" omp 4 3

# stop NAME FUNCTION TRAMPOLINE CMD...: gdb stops a worker thread (not
# thread 1) in FUNCTION, which runs under TRAMPOLINE; its backtrace must go
# through the trampoline to clone3, without main, and every thread's
# backtrace must be free of the messages above.
stop() {
    local name="$1" fn="$2" tramp="$3" out="$TMP/$1.stop"
    shift 3
    timeout 120 gdb -nx -batch -iex 'set debuginfod enabled off' -ex 'set pagination off' \
        -ex 'set breakpoint pending on' -ex "break $fn if \$_thread > 1" -ex run \
        -ex 'echo ==== bt\n' -ex bt -ex 'echo ==== all\n' -ex 'thread apply all bt' -ex kill \
        --args "$@" >"$out" 2>&1 || true
    grep -q "hit Breakpoint" "$out" || { show "$out"; say "$name: FAIL: no worker stopped in $fn"; status=1; return; }
    local bt
    bt="$(sed -n '/^==== bt/,/^==== all/p' "$out")"
    say "$name: the worker stopped in $fn, as gdb shows it:"
    sed 's/^/    | /' <<<"$bt" | cut -c1-160
    if ! grep -q "$tramp" <<<"$bt" || ! grep -q 'clone3' <<<"$bt" || grep -qE ' main \(' <<<"$bt"; then
        say "$name: FAIL: the backtrace does not go through $tramp to clone3 on its own stack"
        status=1
    fi
    if grep -qiE 'corrupt stack|previous frame inner|previous frame identical' "$out"; then
        say "$name: FAIL: gdb stopped a backtrace:"; show "$out"; status=1
    fi
}

stop callchain-stop block_rows fj_worker_run env FRAMEJIT_THREADS=4 "$CALLCHAIN" 1
stop omp-stop work fj_origin_run "$OMP_POOL" omp 4 1

# ---- eu-stack (elfutils, DWARF): every worker ends at __clone3 without main,
# and some attach finds a worker inside fj_worker_run.
if command -v eu-stack >/dev/null 2>&1; then
    # An attach catches a worker inside its share only some of the time (the
    # rest it waits for the next job): at least 10 attaches, then more until
    # one does, at most 60.
    FRAMEJIT_THREADS=4 "$CALLCHAIN" 30 >"$TMP/eu.out" 2>&1 &
    pid=$!
    sleep 0.5
    inside=0 attaches=0
    for i in $(seq 1 60); do
        ((i > 10 && inside > 0)) && break
        attaches=$i
        eu-stack -p "$pid" >"$TMP/eu.$i" 2>&1 || true
        res="$(awk -v pid="$pid" '
            function check() { if (tid != "" && tid != pid) { n++; if (!clone || main) bad = bad " " tid; if (tramp) in_tramp = 1 } }
            /^TID [0-9]+:/ { check(); tid = $2; sub(/:/, "", tid); clone = 0; main = 0; tramp = 0; next }
            / __clone3$/ { clone = 1 }
            / main$/ { main = 1 }
            / fj_worker_run$/ { tramp = 1 }
            END { check(); printf "%d %d%s\n", n, in_tramp, bad }' "$TMP/eu.$i")"
        read -r nw tr bad <<<"$res"
        if ((nw < 3)) || [[ -n "${bad:-}" ]]; then
            say "eu-stack: FAIL: attach $i: $nw worker stacks, bad:${bad:-}"; show "$TMP/eu.$i"; status=1; break
        fi
        ((tr)) && inside=$((inside + 1))
        sleep 0.2
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    say "eu-stack: $attaches attaches, every worker ended at __clone3 without main; $inside found a worker inside fj_worker_run"
    if ((inside == 0)); then say "eu-stack: FAIL: never inside fj_worker_run"; status=1; fi
else
    say "eu-stack is not installed (elfutils): that part skipped"
fi

if ((status == 0)); then say "PASS"; fi
exit "$status"
