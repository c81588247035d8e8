#!/usr/bin/env bash
# tool_blas.sh BLAS_DIFF SHIM_DIR: libframejit_blas.so as a drop-in BLAS.
#
# Pass: blas_diff (linked to the shim) matches the reference BLAS (Debian's
# libblas3) on random sgemm_/dgemm_/cblas_sgemm/cblas_dgemm calls and
# reports errors as it does, on AVX-512 (when the CPU has it) and AVX2;
# the reference level-3 test programs xblat3s and xblat3d (libblas-test)
# pass all their tests, both with LD_PRELOAD=libframejit_blas.so and with
# the shim as the libblas.so.3 a program loads, and FRAMEJIT_VERBOSE=2
# shows framejit executing thousands of their GEMMs (not the fallback).
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

BLAS_DIFF="$1"
SHIM_DIR="$2"
SHIM="$SHIM_DIR/blas/libframejit_blas.so"
need_exe "$BLAS_DIFF"
[[ -f "$SHIM" ]] || fail "no $SHIM"
make_tmp

# Debian's reference BLAS, whatever libblas.so.3 points to.
MULTIARCH="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
REFDIR="/usr/lib/$MULTIARCH/blas"
REF="$REFDIR/libblas.so.3"
[[ -f "$REF" ]] || fail "no reference BLAS at $REF (scripts/dev installs libblas3)"

# ---- differential test, both ISAs ----
isas=(avx2)
grep -qw avx512f /proc/cpuinfo && isas=(avx512 avx2)
for isa in "${isas[@]}"; do
    FRAMEJIT_ISA="$isa" FRAMEJIT_VERBOSE=2 "$BLAS_DIFF" "$REF" 3000 >"$TMP/diff.out" 2>"$TMP/diff.err" ||
        { show "$TMP/diff.err" | tail -20; fail "blas_diff ($isa) failed"; }
    cat "$TMP/diff.out"
    n="$(grep -cE 'exec,fj_gemm_f(32|64),' "$TMP/diff.err" || true)"
    k="$(grep -cE "fj_gemm_f(32|64)_[0-9a-z_]*_$isa" "$TMP/diff.err" || true)"
    say "$isa: framejit executed $n GEMMs of blas_diff's calls; made $k $isa kernels"
    ((n >= 1000)) || fail "$isa: only $n framejit GEMM executions logged"
    ((k >= 1)) || fail "$isa: no $isa GEMM kernel was made"
done

# ---- the reference test programs ----
# run_blat PROG IN MODE: runs the program in TMP (it writes its summary
# there), checks its summary and counts framejit's executions.
run_blat() {
    local prog="$1" in="$2" mode="$3" ty sum n passed
    [[ -x "$REFDIR/$prog" && -f "$REFDIR/$in" ]] ||
        fail "no $REFDIR/$prog or $in (scripts/dev installs libblas-test)"
    ty="$([[ "$prog" == xblat3s ]] && echo f32 || echo f64)"
    sum="$(sed -n "1s/^'\([^']*\)'.*/\1/p" "$REFDIR/$in")"
    rm -rf "$TMP/run" && mkdir "$TMP/run"
    (
        cd "$TMP/run"
        if [[ "$mode" == preload ]]; then
            LD_PRELOAD="$SHIM" FRAMEJIT_VERBOSE=2 "$REFDIR/$prog" <"$REFDIR/$in" >stdout 2>stderr
        else
            # The shim as libblas.so.3: the name the program asks the loader for.
            mkdir alt && ln -s "$SHIM" alt/libblas.so.3
            LD_LIBRARY_PATH="$TMP/run/alt:$SHIM_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
                FRAMEJIT_VERBOSE=2 "$REFDIR/$prog" <"$REFDIR/$in" >stdout 2>stderr
        fi
    ) || { show "$TMP/run/stderr" | tail -20; fail "$prog ($mode) exited with an error"; }
    [[ -f "$TMP/run/$sum" ]] || fail "$prog ($mode) wrote no $sum"
    if grep -qiE 'fail|suspect|fatal' "$TMP/run/$sum"; then
        show "$TMP/run/$sum"
        fail "$prog ($mode): the summary reports failures"
    fi
    passed="$(grep -c 'PASSED THE COMPUTATIONAL TESTS' "$TMP/run/$sum" || true)"
    n="$(grep -c "exec,fj_gemm_$ty," "$TMP/run/stderr" || true)"
    grep -E 'GEMM +PASSED' "$TMP/run/$sum" | sed "s/^/$TOOL_TEST: $prog ($mode): /"
    say "$prog ($mode): $passed of 6 routines passed their computational tests; framejit executed $n of the GEMMs"
    ((passed == 6)) || { show "$TMP/run/$sum"; fail "$prog ($mode): $passed of 6 routines passed"; }
    grep -q 'GEMM  PASSED THE TESTS OF ERROR-EXITS' "$TMP/run/$sum" ||
        fail "$prog ($mode): xGEMM's error exits did not pass"
    # The test calls xGEMM 17496 times; fewer than half of those calls reach
    # the kernels (m, n = 0, alpha = 0 and beta = 1 are answered without).
    ((n >= 5000)) || fail "$prog ($mode): only $n framejit executions logged"
    if [[ "$mode" == alternative ]] && ! grep -q 'alt/libblas.so.3\|framejit' "$TMP/run/stderr"; then
        fail "$prog ($mode): the shim was not loaded"
    fi
}

for prog in xblat3s:sblat3.in xblat3d:dblat3.in; do
    for mode in preload alternative; do
        run_blat "${prog%%:*}" "${prog#*:}" "$mode"
    done
done
say "PASS"
