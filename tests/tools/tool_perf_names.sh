#!/usr/bin/env bash
# tool_perf_names.sh CALLCHAIN: perf names JIT kernels from the code cache's
# self-describing /dev/shm arena files, with no perf map and no jitdump.
#
# Pass:
#   1. perf record -g -p PID (attached while the program runs) and
#   2. perf record -a -g (system-wide): >= 100 JIT samples, >= 99% of them
#      named by their kernel's name (fj_eltwise_relu_f32_*), and no
#      /tmp/perf-PID.map or jitdump file exists;
#   3. perf record --call-graph dwarf -p PID: >= 99% of JIT samples named and
#      >= 95% reach main; the process maps the arena's metadata read-only
#      right after the code, where perf's DWARF unwinder reads .eh_frame_hdr
#      (docs/profiling.md);
#   4. FRAMEJIT_JITDUMP=1 + perf record -k 1 -- callchain + perf inject --jit
#      (the program exits before perf does): >= 99% of JIT samples named;
#   5. after each clean exit the arena file is no longer a live one: kept
#      read-only (0400) for tools that read it later, or already pruned.
# Also printed here, asserted in tool_after_exit.sh: perf record -g --
# callchain, where the program exits before perf reads its file.
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

export JITDUMPDIR="$TMP/jitdump-home"   # where a jitdump would go: must stay empty
MIN_SAMPLES=100
status=0

field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b ? 100 * a / b : 0 }'; }

# no_leftovers PID MODE: no map, no jitdump, no live arena file after exit.
no_leftovers() {
    local pid="$1" mode="$2"
    if [[ -e "/tmp/perf-$pid.map" ]]; then
        say "$mode: FAIL: /tmp/perf-$pid.map exists without FRAMEJIT_PERFMAP"; status=1
        rm -f "/tmp/perf-$pid.map"
    fi
    if [[ -e "$JITDUMPDIR" ]]; then
        say "$mode: FAIL: a jitdump was written without FRAMEJIT_JITDUMP: $(find "$JITDUMPDIR" -type f | head -3)"
        status=1
    fi
    local live
    live="$(find /dev/shm -maxdepth 1 -name "framejit-$pid-*" ! -perm 0400 2>/dev/null)"
    if [[ -n "$live" ]]; then
        say "$mode: FAIL: $live is not marked kept (0400) after a clean exit"; status=1
    else
        say "$mode: no /tmp/perf-$pid.map, no jitdump; /dev/shm/framejit-$pid-* kept read-only or pruned"
    fi
}

# check MODE PID KERNELS SCRIPT MIN_NAMED_PERMILLE MIN_MAIN_PERMILLE(0: report only)
check() {
    local mode="$1" pid="$2" kernels="$3" script="$4" min_named="$5" min_main="$6"
    local res jit ok kname total
    res="$(analyze_perf_script "$kernels" "$pid" < "$script")"
    jit="$(field jit "$res")"; ok="$(field ok "$res")"
    kname="$(field kname "$res")"; total="$(field total "$res")"
    say "$mode: $total samples, $jit in JIT kernels; named by kernel: $kname ($(pct "$kname" "$jit")%); reach main: $ok ($(pct "$ok" "$jit")%)"
    if ((jit < MIN_SAMPLES)); then
        say "$mode: FAIL: fewer than $MIN_SAMPLES JIT samples"; head -30 "$script" | sed 's/^/    | /'
        status=1; return
    fi
    if ((min_named > 0 && kname * 1000 < jit * min_named)); then
        say "$mode: FAIL: under $((min_named / 10))% of JIT samples carry the kernel's name"
        head -30 "$script" | sed 's/^/    | /'; status=1
    fi
    if ((min_main > 0 && ok * 1000 < jit * min_main)); then
        say "$mode: FAIL: under $((min_main / 10))% of JIT samples reach main"
        awk 'BEGIN { RS = "" } !/[ \t]main /' "$script" | head -30 | sed 's/^/    | /'; status=1
    fi
}

pid_of() { sed -n 's/^callchain: pid \([0-9]*\):.*/\1/p' "$1"; }

# attach MODE PERF_ARGS...: runs callchain 5 in the background and records it
# for 2 s with perf attached (-p) or system-wide (when PERF_ARGS has -a).
attach() {
    local mode="$1"; shift
    "$CALLCHAIN" 5 >"$TMP/$mode.out" 2>"$TMP/$mode.err" &
    local bg=$!
    sleep 0.5
    grep -qE 'r--[ps].*/dev/shm/framejit' "/proc/$bg/maps" 2>/dev/null && META_VIEW=1 || META_VIEW=0
    local target=(-p "$bg")
    [[ " $* " == *" -a "* ]] && target=()
    perf record "$@" "${target[@]}" -o "$TMP/$mode.data" -- sleep 2 >/dev/null 2>"$TMP/$mode.perf" ||
        { show "$TMP/$mode.perf"; wait "$bg" || true; fail "$mode: perf record failed"; }
    wait "$bg" || { show "$TMP/$mode.err"; fail "$mode: callchain failed"; }
    [[ "$(pid_of "$TMP/$mode.out")" == "$bg" ]] || fail "$mode: callchain's pid is not $bg"
    perf script -i "$TMP/$mode.data" -F pid,ip,sym,dso --pid "$bg" 2>/dev/null >"$TMP/$mode.script"
    PID="$bg"
}

# ---- 1. per process, frame pointers ------------------------------------------
attach fp-attach -g
check "perf record -g -p" "$PID" "$TMP/fp-attach.err" "$TMP/fp-attach.script" 990 990
no_leftovers "$PID" "perf record -g -p"

# ---- 2. system-wide, frame pointers ------------------------------------------
attach fp-system -a -g
check "perf record -a -g" "$PID" "$TMP/fp-system.err" "$TMP/fp-system.script" 990 990
no_leftovers "$PID" "perf record -a -g"

# ---- 3. DWARF call graphs ------------------------------------------------------
attach dwarf --call-graph dwarf
if ((!META_VIEW)); then
    say "perf record --call-graph dwarf -p: FAIL: the process maps no read-only view of the arena metadata (perf's DWARF unwinder reads .eh_frame_hdr there)"
    status=1
fi
check "perf record --call-graph dwarf -p" "$PID" "$TMP/dwarf.err" "$TMP/dwarf.script" 990 950
no_leftovers "$PID" "perf record --call-graph dwarf -p"

# ---- 4. jitdump: the program exits before perf record does -----------------------
FRAMEJIT_JITDUMP=1 perf record -k 1 -g -o "$TMP/jd.data" -- "$CALLCHAIN" 1.5 \
    >"$TMP/jd.out" 2>"$TMP/jd.err" || { show "$TMP/jd.err"; fail "jitdump: perf record failed"; }
pid="$(pid_of "$TMP/jd.out")"
dump="$(find "$JITDUMPDIR" -name "jit-$pid.dump" | head -1)"
[[ -n "$dump" ]] || fail "jitdump: no jit-$pid.dump under \$JITDUMPDIR"
perf inject --jit -i "$TMP/jd.data" -o "$TMP/jd.inj.data" 2>"$TMP/jd.inject" ||
    { show "$TMP/jd.inject"; fail "perf inject --jit failed"; }
perf script -i "$TMP/jd.inj.data" -F pid,ip,sym,dso 2>/dev/null >"$TMP/jd.script"
check "FRAMEJIT_JITDUMP=1 + perf inject --jit" "$pid" "$TMP/jd.err" "$TMP/jd.script" 990 990
rm -rf "$JITDUMPDIR"
[[ -z "$(find /dev/shm -maxdepth 1 -name "framejit-$pid-*" ! -perm 0400 2>/dev/null)" ]] ||
    { say "jitdump run: FAIL: a live arena file left behind"; status=1; }

# ---- informational: the program exits before perf record reads its file ----------
perf record -g -o "$TMP/exit.data" -- "$CALLCHAIN" 1 >"$TMP/exit.out" 2>"$TMP/exit.err" ||
    fail "perf record -- callchain failed"
perf script -i "$TMP/exit.data" -F pid,ip,sym,dso 2>/dev/null >"$TMP/exit.script"
check "perf record -g -- callchain (informational)" "$(pid_of "$TMP/exit.out")" \
    "$TMP/exit.err" "$TMP/exit.script" 0 990
no_leftovers "$(pid_of "$TMP/exit.out")" "perf record -g -- callchain"

if ((status == 0)); then say "PASS"; fi
exit "$status"
