#!/usr/bin/env bash
# tool_pprof.sh BUILD_DIR: gperftools' pprof names JIT kernels after the
# program has exited.
#
# Builds prof_relu.c (next to this script) with -lprofiler against the
# build's libframejit, runs it with CPUPROFILE=FILE (main -> outer -> inner
# -> relu kernel; main destroys the runtime before the profiler writes the
# profile at exit), then `google-pprof --text PROG PROFILE`. pprof reads the
# kernels' symbols from the arena file the program left in /dev/shm (kept
# read-only after exit, its views still mapped when the profile is made). Pass: the kernel's line
# (fj_eltwise_relu_f32_*) holds >= 50% of the samples as flat time, outer's
# cumulative share is at least that, and no raw address is above 5%.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$SRC/../.." && pwd)"
make_tmp
unset FRAMEJIT_KEEP_SECONDS FRAMEJIT_KEEP_MB FRAMEJIT_CODE_FILE
CC="${CC:-cc}"

command -v google-pprof >/dev/null 2>&1 || skip "google-pprof (google-perftools) is not installed"
[[ -e /usr/include/gperftools/profiler.h ]] || skip "gperftools headers (libgoogle-perftools-dev) are not installed"
"$CC" -O1 -fno-omit-frame-pointer "$SRC/prof_relu.c" -I"$ROOT/include" -L"$BUILD" -lframejit \
    -lprofiler -Wl,-rpath,"$BUILD" -o "$TMP/prof_relu" 2>"$TMP/cc.err" ||
    { show "$TMP/cc.err"; fail "cannot build prof_relu with -lprofiler"; }

CPUPROFILE="$TMP/prof.out" CPUPROFILE_FREQUENCY=1000 "$TMP/prof_relu" >"$TMP/run.out" 2>&1 ||
    { show "$TMP/run.out"; fail "prof_relu failed"; }
google-pprof --text "$TMP/prof_relu" "$TMP/prof.out" >"$TMP/pprof.out" 2>"$TMP/pprof.err" ||
    { show "$TMP/pprof.err"; fail "google-pprof --text failed"; }
show "$TMP/pprof.out"
flat="$(awk '$6 ~ /^fj_eltwise_relu_f32/ { sub(/%/, "", $2); print int($2); exit }' "$TMP/pprof.out")"
raw="$(awk '$6 ~ /^0x/ { sub(/%/, "", $2); if ($2 + 0 > 5) n++ } END { print n + 0 }' "$TMP/pprof.out")"
status=0
if [[ -z "$flat" ]]; then
    say "FAIL: pprof does not name the relu kernel"; status=1
elif ((flat < 50)); then
    say "FAIL: the named kernel holds only $flat% of the samples"; status=1
else
    say "pprof names the kernel: fj_eltwise_relu_f32_* $flat% flat"
fi
# The kernel's samples continue to its callers (pprof unwinds with libunwind).
cum_outer="$(awk '$6 == "outer" { sub(/%/, "", $5); print int($5); exit }' "$TMP/pprof.out")"
if [[ -n "$flat" ]] && ((${cum_outer:-0} < flat)); then
    say "FAIL: outer's cumulative share (${cum_outer:-none}%) is below the kernel's $flat%"; status=1
fi
((raw == 0)) || { say "FAIL: $raw unnamed addresses above 5%"; status=1; }
if ((status == 0)); then say "PASS"; fi
exit "$status"
