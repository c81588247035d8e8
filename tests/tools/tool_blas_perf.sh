#!/usr/bin/env bash
# tool_blas_perf.sh SHIM_DIR: perf -g on numpy float64 matmuls under
# LD_PRELOAD=libframejit_blas.so.
#
# Pass: framejit executed the matmuls (FRAMEJIT_VERBOSE=2), >= 100 samples
# fall in JIT kernels, and >= 99% of them walk (frame pointers) through
# fj_gemm_f64 to the shim's cblas_dgemm and on into numpy's module. Reported,
# not asserted: the share that reaches the interpreter (Py_BytesMain or
# main). Debian builds numpy and python3 without frame pointers, so a
# frame-pointer walk ends inside numpy's module: the share is ~0 here.
set -euo pipefail
# shellcheck source=tests/tools/lib.sh
source "$(dirname "$0")/lib.sh"

SHIM="$1/blas/libframejit_blas.so"
SCRIPT="$(dirname "$0")/numpy_matmul.py"
[[ -f "$SHIM" ]] || fail "no $SHIM"
make_tmp

rc=0
why="$(perf_usable)" || rc=$?
((rc != 1)) || skip "$why"
((rc == 0)) || fail "$why"

# Debian's python3 (python3-numpy is installed for it, not for other pythons on PATH).
PY=/usr/bin/python3
[[ -x "$PY" ]] || fail "no $PY"
"$PY" -c 'import numpy' 2>"$TMP/np.err" || { show "$TMP/np.err"; fail "numpy does not import (scripts/dev installs python3-numpy)"; }

export FRAMEJIT_THREADS=1
LD_PRELOAD="$SHIM" FRAMEJIT_VERBOSE=2 "$PY" "$SCRIPT" 20 >"$TMP/v.out" 2>"$TMP/v.err" ||
    { show "$TMP/v.err" | tail; fail "python under the shim failed"; }
n="$(grep -c 'exec,fj_gemm_f64,' "$TMP/v.err" || true)"
say "numpy's 20 matmuls: $n fj_gemm_f64 executions logged"
((n >= 20)) || fail "framejit did not compute numpy's matmuls ($n executions)"

perf record -g -o "$TMP/perf.data" -- env LD_PRELOAD="$SHIM" "$PY" "$SCRIPT" 600 \
    >"$TMP/rec.out" 2>"$TMP/rec.err" || { show "$TMP/rec.err"; fail "perf record failed"; }
perf script -i "$TMP/perf.data" -F pid,ip,sym,dso >"$TMP/script.txt" 2>/dev/null ||
    fail "perf script failed"

# Per sample (blank-line separated, leaf first): a JIT sample's leaf user
# frame is in a framejit arena file (or perf's map for anonymous code).
read -r jit ours numpy interp < <(awk '
    BEGIN { RS = ""; FS = "\n" }
    {
        leaf = ""
        for (i = 2; i <= NF; i++) if ($i !~ /kernel\.kallsyms/) { leaf = $i; break }
        if (leaf !~ /framejit-|perf-[0-9]+\.map/) next
        jit++
        if ($0 ~ /fj_gemm_f64/ && $0 ~ /cblas_dgemm/) ours++
        if ($0 ~ /cblas_dgemm/ && $0 ~ /_multiarray_umath/) numpy++
        if ($0 ~ /Py_BytesMain|[ \t]main[ \t(]|__libc_start/) interp++
    }
    END { printf "%d %d %d %d\n", jit, ours, numpy, interp }' "$TMP/script.txt")
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", b ? 100 * a / b : 0 }'; }
say "JIT samples: $jit"
say "  through fj_gemm_f64 to the shim's cblas_dgemm: $ours ($(pct "$ours" "$jit"))"
say "  on into numpy's module: $numpy ($(pct "$numpy" "$jit"))"
say "  to the interpreter (Py_BytesMain/main/__libc_start_*): $interp ($(pct "$interp" "$jit"))" \
    "(reported only: numpy and python3 have no frame pointers)"
((jit >= 100)) || fail "only $jit JIT samples"
((ours * 100 >= jit * 99)) || fail "JIT samples that reach cblas_dgemm: $(pct "$ours" "$jit") < 99%"
((numpy * 100 >= jit * 99)) || fail "JIT samples that reach numpy: $(pct "$numpy" "$jit") < 99%"
say "PASS"
