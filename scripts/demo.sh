#!/usr/bin/env bash
# demo.sh BUILD_DIR [SECONDS]: what framejit's unwinding looks like to a user.
#
# 1. perf: runs examples/callchain (main -> outer -> inner -> JIT relu kernel)
#    under `perf record -g` and prints how many samples landed in JIT
#    kernels, how many of those unwound to main, and the top call paths;
#    then again with two threads (GEMM and a large relu split over a
#    framejit worker), with the share of JIT samples reaching main on
#    every thread;
# 2. gdb: the stack of a faulting kernel (examples/crash) as gdb shows it;
# 3. libunwind and backtrace(): the same stack from a SIGSEGV handler.
# Called by `scripts/dev demo`, which builds first.
set -euo pipefail

BUILD="$(cd "${1:?usage: demo.sh BUILD_DIR [SECONDS]}" && pwd)"
SECONDS_RUN="${2:-3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLCHAIN="$BUILD/examples/callchain"
CRASH="$BUILD/examples/crash"
export TOOL_TEST=demo
# shellcheck source=tests/tools/lib.sh
source "$ROOT/tests/tools/lib.sh"
make_tmp

for exe in "$CALLCHAIN" "$CRASH"; do
    [[ -x "$exe" ]] || { echo "demo: $exe was not built" >&2; exit 1; }
done

banner() { printf '\n==== %s ====\n' "$*"; }

# ---- 1. perf -----------------------------------------------------------------
banner "perf record -g -- callchain $SECONDS_RUN"
if why="$(perf_usable)"; then
    perf record -g -o "$TMP/perf.data" -- "$CALLCHAIN" "$SECONDS_RUN" \
        >"$TMP/cc.out" 2>"$TMP/cc.err" || { cat "$TMP/cc.err"; exit 1; }
    cat "$TMP/cc.out"
    grep '^callchain: kernel' "$TMP/cc.err" || true
    pid="$(sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$TMP/cc.out")"
    perf script -i "$TMP/perf.data" -F pid,ip,sym,dso 2>/dev/null >"$TMP/perf.script"
    res="$(analyze_perf_script "$TMP/cc.err" "$pid" <"$TMP/perf.script")"
    jit="${res#*jit=}"; jit="${jit%% *}"
    ok="${res#*ok=}"; ok="${ok%% *}"
    total="${res#*total=}"; total="${total%% *}"
    echo
    echo "samples of callchain:        $total"
    echo "samples in JIT kernels:      $jit ($(awk -v a="$jit" -v b="$total" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }') of all)"
    echo "JIT samples that reach main: $ok ($(awk -v a="$ok" -v b="$jit" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }'), through inner and outer)"
    kname="${res#*kname=}"; kname="${kname%% *}"
    echo "JIT samples named by perf:   $kname ($(awk -v a="$kname" -v b="$jit" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }'), from the arena file the program left)"
    if [[ -e "/tmp/perf-$pid.map" ]]; then
        echo "(a /tmp/perf-$pid.map exists: FRAMEJIT_PERFMAP was set)"
    else
        echo "no /tmp/perf-$pid.map was written: perf needed no map file"
    fi

    banner "top call paths of callchain's samples (caller first)"
    # Folded stacks from perf script, main first; a JIT leaf is shown by its
    # perf symbol, or as [JIT code] when perf has no name for it.
    awk -v pid="$pid" '
        function flush() {
            if (in_s && mine && path != "") { count[path]++; n++ }
            in_s = 0; path = ""
        }
        /^[ \t]*$/ { flush(); next }
        /^ *[0-9]+(\/[0-9]+)? *$/ { flush(); in_s = 1; h = $1; sub(/\/.*/, "", h); mine = (h == pid); done = 0; next }
        in_s && !done {
            line = $0; sub(/^[ \t]*[0-9a-fA-F]+ /, "", line)
            dso = ""
            if (match(line, / \((\(deleted\)|[^()])*\)$/)) {
                dso = substr(line, RSTART + 2, RLENGTH - 3); line = substr(line, 1, RSTART - 1)
            }
            if (dso == "[kernel.kallsyms]") next
            if (line == "[unknown]" && (dso ~ /^\/dev\/shm\/framejit|^\/memfd:framejit|^\/tmp\/perf-|^\/\/anon/ || dso == "[unknown]"))
                line = "[JIT code]"
            sub(/\+0x[0-9a-f]+$/, "", line)
            path = (path == "") ? line : line " <- " path
            if (line == "main") done = 1
        }
        END {
            flush()
            for (p in count) printf "%6.2f%%  %s\n", 100 * count[p] / n, p
        }' "$TMP/perf.script" | sed 's/ <- /  ->  /g' | sort -rn | head -5

    banner "perf report --stdio --no-children -g caller --sort dso,sym (trimmed)"
    perf report -i "$TMP/perf.data" --stdio --no-children -g caller --percent-limit 2 \
        --sort dso,sym --comm callchain 2>/dev/null |
        grep -v '^#' | sed '/^$/N;/^\n$/D' | head -24

    banner "FRAMEJIT_THREADS=2 perf record -g -- callchain $SECONDS_RUN (a worker thread too)"
    FRAMEJIT_THREADS=2 perf record -g -o "$TMP/perf2.data" -- "$CALLCHAIN" "$SECONDS_RUN" \
        >"$TMP/cc2.out" 2>"$TMP/cc2.err" || { cat "$TMP/cc2.err"; exit 1; }
    cat "$TMP/cc2.out"
    pid="$(sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$TMP/cc2.out")"
    perf script -i "$TMP/perf2.data" -F pid,tid,ip,sym,dso 2>/dev/null >"$TMP/perf2.script"
    res="$(analyze_perf_script "$TMP/cc2.err" "$pid" bytid <"$TMP/perf2.script")"
    line="$(head -1 <<<"$res")"
    jit="${line#*jit=}"; jit="${jit%% *}"
    ok="${line#*ok=}"; ok="${ok%% *}"
    echo
    echo "JIT samples, all threads:    $jit, $ok reach main ($(awk -v a="$ok" -v b="$jit" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }'), through inner and outer)"
    tail -n +2 <<<"$res" | while read -r t tj to; do
        t="${t#tid=}"; tj="${tj#jit=}"; to="${to#ok=}"
        name="$(if [[ "$t" == "$pid" ]]; then echo "callchain (main)"; else echo "worker"; fi)"
        printf '  thread %-8s %-17s %6d JIT samples, %6d reach main (%s)\n' "$t" "$name" "$tj" "$to" \
            "$(awk -v a="$to" -v b="$tj" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }')"
    done
    echo "a worker's sample, leaf first:"
    awk 'BEGIN { RS = "" } /fj_worker_run/ { print; exit }' "$TMP/perf2.script" |
        tail -n +2 | awk '{ $1 = ""; print "   " $0 }' | head -14
else
    echo "perf cannot record here: $why"
    echo "(perf needs perf_event_open: run as root, or lower"
    echo " /proc/sys/kernel/perf_event_paranoid, or grant CAP_PERFMON)"
fi

# ---- 2. gdb ------------------------------------------------------------------
banner "gdb -batch -ex run -ex bt --args crash"
if command -v gdb >/dev/null 2>&1; then
    gdb -nx -batch -iex 'set debuginfod enabled off' -ex 'set pagination off' \
        -ex run -ex bt --args "$CRASH" 2>&1 |
        grep -E '^(#[0-9]+ |Program received|Thread .* received)' || true
else
    echo "gdb is not installed"
fi

# ---- 3. libunwind and backtrace() from a signal handler -------------------------
banner "crash --handler (libunwind and backtrace() from a SIGSEGV handler)"
"$CRASH" --handler || true
