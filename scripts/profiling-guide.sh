#!/usr/bin/env bash
# profiling-guide.sh [BUILD_DIR]: regenerates the outputs shown in
# docs/profiling.md by running every step of the guide on this machine.
#
# Each block between "<!-- output:NAME -->" and "<!-- /output -->" in the
# document is replaced by what the step printed. Build first
# (scripts/dev build, or BUILD_DIR=... scripts/dev build). Needs perf (as
# root or with perf_event_paranoid <= 1), gdb and readelf; a step whose
# tool is missing says so in its block. Paths of the build and scratch
# directories are shortened to build/ and $TMP/ in the document.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
DOC="$ROOT/docs/profiling.md"
CALLCHAIN="$BUILD/examples/callchain"
CRASH="$BUILD/examples/crash"
BENCH="$BUILD/bench/framejit-bench"
export TOOL_TEST=profiling-guide
# shellcheck source=tests/tools/lib.sh
source "$ROOT/tests/tools/lib.sh"
make_tmp
for exe in "$CALLCHAIN" "$CRASH" "$BENCH"; do
    [[ -x "$exe" ]] || { echo "profiling-guide: $exe was not built" >&2; exit 1; }
done
declare -A OUT

# clean: machine paths out, the rest as printed.
clean() {
    sed -e "s|$BUILD|build|g" -e "s|$ROOT|.|g" -e "s|$TMP|\$TMP|g" -e "s|$HOME|~|g" \
        -e 's/[[:space:]]*$//'
}

# trim_report: perf report --stdio without comments and blank runs.
trim_report() { grep -v '^#' | sed '/^$/N;/^\n$/D' | sed '/^$/d'; }

PERF_OK=1
why="$(perf_usable)" || PERF_OK=0

# bg_callchain SECONDS [ENV...]: starts callchain; sets BG.
bg_callchain() {
    local s="$1"; shift
    env "$@" "$CALLCHAIN" "$s" >"$TMP/bg.out" 2>"$TMP/bg.err" &
    BG=$!
    sleep 0.5
}

if ((PERF_OK)); then
    # ---- system-wide, frame pointers -------------------------------------------
    bg_callchain 6
    perf record -a -g -o "$TMP/sys.data" -- sleep 3 2>&1 | clean >"$TMP/sys.rec"
    wait "$BG"
    OUT[perf-system]="$( {
        echo "\$ perf record -a -g -- sleep 3      # callchain (pid $BG) running"
        cat "$TMP/sys.rec"
        echo "\$ perf report --stdio --no-children --comm callchain --sort dso,sym --percent-limit 1"
        perf report -i "$TMP/sys.data" --stdio --no-children --comm callchain --sort dso,sym \
            --percent-limit 1 2>/dev/null | trim_report | head -24
    } | clean)"
    OUT[perf-caller]="$( {
        echo "\$ perf report --stdio --no-children --comm callchain -g caller --sort sym --percent-limit 5"
        perf report -i "$TMP/sys.data" --stdio --no-children --comm callchain -g caller \
            --sort sym --percent-limit 5 2>/dev/null | trim_report | head -16
    } | clean)"

    # ---- worker threads: stitched to the caller --------------------------------
    bg_callchain 5 FRAMEJIT_THREADS=2
    perf record -a -g -o "$TMP/thr.data" -- sleep 2 2>&1 | clean >"$TMP/thr.rec"
    wait "$BG"
    OUT[perf-threads]="$( {
        echo "\$ FRAMEJIT_THREADS=2 build/examples/callchain 5 &"
        echo "\$ perf record -a -g -- sleep 2"
        cat "$TMP/thr.rec"
        echo "\$ perf report --stdio --no-children --sort comm,pid --comm callchain,fj-worker-1 -g none"
        perf report -i "$TMP/thr.data" --stdio --no-children --sort comm,pid \
            --comm callchain,fj-worker-1 -g none 2>/dev/null | trim_report | sed -n '1,4p'
        echo "\$ perf script -F tid,ip,sym,dso --comm fj-worker-1   # a sample in a kernel on the worker"
        perf script -i "$TMP/thr.data" -F tid,ip,sym,dso --comm fj-worker-1 2>/dev/null |
            awk 'BEGIN { RS = "" } /framejit-/ && /fj_worker_run/ && !done { print; done = 1 }'
        perf script -i "$TMP/thr.data" -F pid,tid,ip,sym,dso --pid "$BG" 2>/dev/null >"$TMP/thr.script"
        grep '^callchain: kernel' "$TMP/bg.err" >"$TMP/thr.kernels" || true
        analyze_perf_script "$TMP/thr.kernels" "$BG" bytid <"$TMP/thr.script" | tail -n +2 |
            while read -r t tj to; do
                echo "thread ${t#tid=}$([[ "${t#tid=}" == "$BG" ]] && echo ' (main)'): ${tj#jit=} JIT samples, ${to#ok=} with inner, outer and main in their chain"
            done
    } | clean)"

    # ---- DWARF call graphs -----------------------------------------------------------
    bg_callchain 4
    perf record --call-graph dwarf -p "$BG" -o "$TMP/dw.data" -- sleep 1 >/dev/null 2>&1
    grep -E ' r--[ps] .*/dev/shm/framejit' "/proc/$BG/maps" >/dev/null 2>&1 && META=1 || META=0
    wait "$BG"
    OUT[perf-dwarf]="$( {
        echo "\$ perf record --call-graph dwarf -p $BG -- sleep 1"
        echo "\$ perf report --stdio --no-children --sort dso,sym --percent-limit 2"
        perf report -i "$TMP/dw.data" --stdio --no-children --sort dso,sym --percent-limit 2 \
            2>/dev/null | trim_report | head -14
        echo "(read-only metadata view mapped: $([[ $META == 1 ]] && echo yes || echo no))"
    } | clean)"

    # ---- the program exits before perf record does -----------------------------------------
    perf record -g -o "$TMP/exit.data" -- "$CALLCHAIN" 1 >/dev/null 2>&1
    OUT[perf-exit]="$( {
        echo "\$ perf record -g -- build/examples/callchain 1"
        echo "\$ perf report --stdio --no-children --sort dso,sym --percent-limit 5 -g none"
        perf report -i "$TMP/exit.data" --stdio --no-children --sort dso,sym --percent-limit 5 \
            -g none 2>/dev/null | trim_report | head -6
    } | clean)"

    mkdir -p "$TMP/jd"
    JITDUMPDIR="$TMP/jd" FRAMEJIT_JITDUMP=1 perf record -k 1 -g -o "$TMP/jd.data" -- \
        "$CALLCHAIN" 1 >/dev/null 2>&1
    perf inject --jit -i "$TMP/jd.data" -o "$TMP/jd.inj" >/dev/null 2>&1
    OUT[perf-jitdump]="$( {
        echo "\$ FRAMEJIT_JITDUMP=1 perf record -k 1 -g -- build/examples/callchain 1"
        echo "\$ perf inject --jit -i perf.data -o perf.jit.data"
        echo "\$ perf report -i perf.jit.data --stdio --no-children --sort dso,sym --percent-limit 5"
        perf report -i "$TMP/jd.inj" --stdio --no-children --sort dso,sym --percent-limit 5 \
            2>/dev/null | trim_report | head -12
        echo "\$ ls \$JITDUMPDIR/.debug/jit/*/"
        ls "$TMP"/jd/.debug/jit/*/ | sed 's/-[0-9]*\(\.dump\|-[0-9]*\.so\)$/-PID\1/' | sort -u
    } | clean)"
else
    for k in perf-system perf-caller perf-threads perf-dwarf perf-exit perf-jitdump; do
        OUT[$k]="(perf cannot record on the machine that generated this: $why)"
    done
fi

# ---- the file itself ----------------------------------------------------------------------
bg_callchain 1.5
f="$(ls /dev/shm/framejit-"$BG"-* 2>/dev/null | head -1)"
OUT[readelf]="$( {
    echo "\$ readelf -lsW $f"
    readelf -lsW "$f" 2>&1 | sed -n '/^Program Headers/,/^ *04/p;/^Symbol table/,$p'
    echo "\$ readelf -n $f | grep 'Build ID'"
    readelf -n "$f" 2>&1 | grep 'Build ID'
} | clean)"
wait "$BG"

# ---- gdb ----------------------------------------------------------------------------------------
if command -v gdb >/dev/null 2>&1; then
    OUT[gdb]="$( {
        echo "\$ gdb -batch -ex run -ex bt --args build/examples/crash"
        gdb -nx -batch -iex 'set debuginfod enabled off' -ex 'set pagination off' \
            -ex run -ex bt --args "$CRASH" 2>&1 |
            grep -E '^(#[0-9]+ |Program received|Thread .* received)' | head -12
    } | clean)"
else
    OUT[gdb]="(gdb is not installed on the machine that generated this)"
fi

# ---- crash handler: libunwind and backtrace() ------------------------------------------------------
OUT[handler]="$( { echo "\$ build/examples/crash --handler"; "$CRASH" --handler 2>&1 | head -30; } | clean)"

# ---- FRAMEJIT_VERBOSE and FRAMEJIT_DUMP ----------------------------------------------------------
OUT[verbose]="$( {
    echo "\$ FRAMEJIT_VERBOSE=1 build/examples/callchain 0.1"
    FRAMEJIT_VERBOSE=1 "$CALLCHAIN" 0.1 2>&1 | grep '^framejit:'
    echo "\$ FRAMEJIT_VERBOSE=2 build/examples/callchain 0.1 2>&1 | grep -E 'image|exec,' | head -4"
    # sed, not head: an early close would end the pipeline with SIGPIPE.
    FRAMEJIT_VERBOSE=2 "$CALLCHAIN" 0.1 2>&1 | grep -E 'image|exec,' | sed -n '1,4p'
} | clean)"
mkdir -p "$TMP/dump"
FRAMEJIT_DUMP="$TMP/dump" "$CALLCHAIN" 0.1 >/dev/null 2>&1
OUT[dump]="$( {
    echo "\$ FRAMEJIT_DUMP=\$TMP/dump build/examples/callchain 0.1; ls \$TMP/dump"
    ls "$TMP/dump"
    o="$(ls "$TMP"/dump/*.o | head -1)"
    echo "\$ objdump -d \$TMP/dump/$(basename "$o") | head -12"
    objdump -d "$o" 2>&1 | sed '/^$/d' | head -12
} | clean)"

# ---- costs -----------------------------------------------------------------------------------------------
OUT[bench]="$( {
    echo "\$ build/bench/framejit-bench --only profiling"
    "$BENCH" --only profiling 2>&1
} | clean)"
OUT[bench-relu]="$( {
    echo "\$ build/bench/framejit-bench --only eltwise --quick | grep -E '^#|relu'"
    "$BENCH" --only eltwise --quick 2>&1 | grep -E '^#|relu'
} | clean)"

# ---- splice into the document ---------------------------------------------------------------------------
for k in "${!OUT[@]}"; do printf '%s\n' "${OUT[$k]}" >"$TMP/out.$k"; done
awk -v dir="$TMP" '
    /^<!-- output:[a-z-]+ -->$/ {
        print; name = $0; sub(/^<!-- output:/, "", name); sub(/ -->$/, "", name)
        print "```"
        f = dir "/out." name
        while ((getline line < f) > 0) print line
        close(f)
        print "```"
        skip = 1; next
    }
    /^<!-- \/output -->$/ { skip = 0 }
    !skip { print }
' "$DOC" >"$TMP/doc.md"
# Today's date and machine description for the header line.
sed -i "s|^<!-- generated: .* -->$|<!-- generated: $(date -u +%Y-%m-%d), $(uname -sr), $(perf --version 2>/dev/null || echo 'no perf') -->|" "$TMP/doc.md"
cp "$TMP/doc.md" "$DOC"
echo "profiling-guide: updated $DOC"
