#!/usr/bin/env bash
# tool_after_exit.sh CALLCHAIN: kernel names and CFI after the process is
# gone, and the bound on what stays behind for that.
#
# Pass:
#   1. perf record -g -- callchain (perf reads the arena file after the
#      program exited): >= 100 JIT samples, >= 99% named by the kernel's name;
#   2. perf record --call-graph dwarf -- callchain: >= 99% named, >= 95% reach
#      main; no /tmp/perf-PID.map and no jitdump file in either;
#   2b. the same as 1 with callchain linked statically against libframejit.a
#      (built here with cc; skipped with the reason when there is no archive);
#   3. leftovers: 50 short runs with FRAMEJIT_KEEP_MB=1 leave only read-only
#      (0400) files, at most 1 MiB of them in all, the newest run's among
#      them; a run after FRAMEJIT_KEEP_SECONDS=1 have passed removes every
#      one of them; FRAMEJIT_KEEP_SECONDS=0 leaves nothing at exit.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

CALLCHAIN="$1"
need_exe "$CALLCHAIN"
make_tmp
unset FRAMEJIT_KEEP_SECONDS FRAMEJIT_KEEP_MB FRAMEJIT_CORE_CODE FRAMEJIT_CODE_FILE
export JITDUMPDIR="$TMP/jitdump-home"   # where a jitdump would go: must stay empty
status=0

field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b ? 100 * a / b : 0 }'; }
pid_of() { sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$1"; }

# launch MODE MIN_NAMED_PERMILLE MIN_MAIN_PERMILLE PERF_ARGS...
launch() {
    local mode="$1" min_named="$2" min_main="$3"; shift 3
    perf record "$@" -o "$TMP/$mode.data" -- "$CALLCHAIN" 1.5 >"$TMP/$mode.out" \
        2>"$TMP/$mode.err" || { show "$TMP/$mode.err"; fail "$mode: perf record failed"; }
    local pid res jit ok kname
    pid="$(pid_of "$TMP/$mode.out")"
    perf script -i "$TMP/$mode.data" -F pid,ip,sym,dso 2>/dev/null >"$TMP/$mode.script"
    res="$(analyze_perf_script "$TMP/$mode.err" "$pid" <"$TMP/$mode.script")"
    jit="$(field jit "$res")"; ok="$(field ok "$res")"; kname="$(field kname "$res")"
    say "$mode: $jit JIT samples; named by kernel: $kname ($(pct "$kname" "$jit")%); reach main: $ok ($(pct "$ok" "$jit")%)"
    if ((jit < 100)); then
        say "$mode: FAIL: fewer than 100 JIT samples"; head -30 "$TMP/$mode.script" | show /dev/stdin
        status=1; return
    fi
    if ((kname * 1000 < jit * min_named)); then
        say "$mode: FAIL: under $((min_named / 10))% of JIT samples carry the kernel's name"
        head -30 "$TMP/$mode.script" | show /dev/stdin; status=1
    fi
    if ((ok * 1000 < jit * min_main)); then
        say "$mode: FAIL: under $((min_main / 10))% of JIT samples reach main"
        awk 'BEGIN { RS = "" } !/[ \t]main /' "$TMP/$mode.script" | head -30 | show /dev/stdin
        status=1
    fi
    if [[ -e "/tmp/perf-$pid.map" || -e "$JITDUMPDIR" ]]; then
        say "$mode: FAIL: a perf map or jitdump file was written"; status=1
    fi
}

rc=0
why="$(perf_usable)" || rc=$?
if ((rc == 1)); then
    say "perf part skipped: $why"
elif ((rc != 0)); then
    fail "$why"
else
    launch "perf record -g -- callchain" 990 990 -g
    launch "perf record --call-graph dwarf -- callchain" 990 950 --call-graph dwarf
    perf report -i "$TMP/perf record -g -- callchain.data" --stdio --no-children \
        --sort dso,sym --percent-limit 5 -g none 2>/dev/null | grep -v '^#' | grep . | show /dev/stdin
    archive="$(dirname "$(dirname "$CALLCHAIN")")/libframejit.a"
    src="$(dirname "$0")/../../examples/callchain.c"
    if [[ ! -e "$archive" ]]; then
        say "static part skipped: no $archive (a shared-only build)"
    elif ! "${CC:-cc}" -O1 -fno-omit-frame-pointer "$src" -I"$(dirname "$0")/../../include" \
            "$archive" -lmimalloc -ldl -lpthread -lm -o "$TMP/callchain-static" 2>"$TMP/static.cc"; then
        show "$TMP/static.cc"; fail "cannot link callchain statically"
    else
        CALLCHAIN="$TMP/callchain-static" launch "perf record -g -- callchain (static)" 990 990 -g
    fi
fi

# ---- 3. leftovers -------------------------------------------------------------
# kept_of PIDS_FILE: "FILES BYTES" allocated by the arena files of those pids.
kept_of() {
    local n=0 bytes=0 p f
    while read -r p; do
        for f in /dev/shm/framejit-"$p"-*; do
            [[ -e "$f" ]] || continue
            if [[ "$(stat -c %a "$f")" != 400 ]]; then
                say "leftovers: FAIL: $f of an exited process is not read-only"; status=1
            fi
            n=$((n + 1)); bytes=$((bytes + $(stat -c '%b * %B' "$f")))
        done
    done <"$1"
    echo "$n $bytes"
}
: >"$TMP/pids"
for i in $(seq 50); do
    FRAMEJIT_KEEP_MB=1 "$CALLCHAIN" 0.01 >"$TMP/short.out" 2>"$TMP/short.err" ||
        { show "$TMP/short.err"; fail "leftovers: run $i failed"; }
    pid_of "$TMP/short.out" >>"$TMP/pids"
done
read -r n bytes <<<"$(kept_of "$TMP/pids")"
say "leftovers: 50 runs with FRAMEJIT_KEEP_MB=1 left $n files, $((bytes / 1024)) KiB"
if ((bytes > 1 << 20)); then say "leftovers: FAIL: more than FRAMEJIT_KEEP_MB=1"; status=1; fi
last="$(tail -1 "$TMP/pids")"
compgen -G "/dev/shm/framejit-$last-*" >/dev/null ||
    { say "leftovers: FAIL: the last run's arena file was not kept"; status=1; }
sleep 2.2
FRAMEJIT_KEEP_SECONDS=1 "$CALLCHAIN" 0.01 >"$TMP/later.out" 2>"$TMP/later.err" ||
    { show "$TMP/later.err"; fail "leftovers: the later run failed"; }
read -r n bytes <<<"$(kept_of "$TMP/pids")"
say "leftovers: a run 2 s later with FRAMEJIT_KEEP_SECONDS=1: $n of those files left"
((n == 0)) || { say "leftovers: FAIL: files older than FRAMEJIT_KEEP_SECONDS were not removed"; status=1; }
pid_of "$TMP/later.out" >"$TMP/later.pid"
rm -f /dev/shm/framejit-"$(cat "$TMP/later.pid")"-*
FRAMEJIT_KEEP_SECONDS=0 "$CALLCHAIN" 0.01 >"$TMP/off.out" 2>"$TMP/off.err" ||
    { show "$TMP/off.err"; fail "leftovers: the FRAMEJIT_KEEP_SECONDS=0 run failed"; }
pid_of "$TMP/off.out" >"$TMP/off.pid"
read -r n bytes <<<"$(kept_of "$TMP/off.pid")"
((n == 0)) || { say "leftovers: FAIL: FRAMEJIT_KEEP_SECONDS=0 left a file"; status=1; }

if ((status == 0)); then say "PASS"; fi
exit "$status"
