#!/usr/bin/env bash
# tool_verbose.sh EXAMPLE: FRAMEJIT_VERBOSE=1 prints the CPU description
# (vendor, family/model, caches with size/ways/line/sets/sharing, FMA pipes
# and latency) and the GEMM blocking the model derives for f32 and f64 on
# the runtime's ISA, once per runtime; without it, nothing.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

EXE="$1"
need_exe "$EXE"
make_tmp

check_isa() { # ISA (auto: the best the CPU has)
    local isa="$1" want
    FRAMEJIT_VERBOSE=1 FRAMEJIT_ISA="$isa" "$EXE" >"$TMP/out" 2>"$TMP/err" ||
        { show "$TMP/err"; fail "$EXE failed with FRAMEJIT_ISA=$isa"; }
    want="$(sed -n 's/.*runtime: isa=\([a-z0-9]*\) .*/\1/p' "$TMP/err" | head -1)"
    [[ -n "$want" ]] || { show "$TMP/err"; fail "no 'runtime: isa=' line"; }
    local cpu
    cpu="$(grep -c 'runtime: cpu: .* family 0x[0-9a-f]* model 0x[0-9a-f]* .*L1d [0-9]* KiB [0-9]*-way [0-9]* B lines [0-9]* sets shared by [0-9]*; L2 [0-9]* KiB.*vectors [0-9]*-bit, FMA/cycle 256-bit [0-9]*, 512-bit [0-9]*, latency [0-9]*' "$TMP/err" || true)"
    [[ "$cpu" == 1 ]] || { show "$TMP/err"; fail "$isa: $cpu CPU description lines, 1 expected"; }
    for dt in f32 f64; do
        local n
        n="$(grep -c "runtime: gemm blocking $want $dt: tile [0-9]*x[0-9]* .*kc [0-9]* .*mc [0-9]* .*nc [0-9]*, unroll [0-9]*/[0-9]*, prefetch A [0-9]* B ahead" "$TMP/err" || true)"
        [[ "$n" == 1 ]] || { show "$TMP/err"; fail "$isa: $n '$want $dt' blocking lines, 1 expected"; }
    done
    say "FRAMEJIT_ISA=$isa: CPU and $want blocking printed once"
}

check_isa auto
check_isa avx2

# Not asked for: not printed.
env -u FRAMEJIT_VERBOSE "$EXE" >"$TMP/out" 2>"$TMP/err" || fail "$EXE failed"
if grep -q 'gemm blocking\|runtime: cpu:' "$TMP/err"; then
    show "$TMP/err"
    fail "blocking printed without FRAMEJIT_VERBOSE"
fi
say "quiet without FRAMEJIT_VERBOSE"
