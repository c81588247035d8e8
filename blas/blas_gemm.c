/* blas_gemm.c: sgemm_, dgemm_, cblas_sgemm and cblas_dgemm computed by framejit.
 *
 * Arguments are checked as reference BLAS does (the same order and info
 * numbers, reported through xerbla_ / cblas_xerbla by their ordinary
 * symbols, so a program's own handler wins), degenerate calls are answered
 * as reference BLAS answers them, and the rest goes to fj_gemm_f32/f64 on
 * a runtime made on first use. Column-major C = op(A) op(B) is row-major
 * C^T = op(B)^T op(A)^T: the operands swap, their flags stay. A call
 * framejit refuses (C overlapping A or B) goes to the system BLAS. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "blas/blas_int.h"
#include "framejit.h"

/* Reference BLAS's error handler; CBLAS's. Called through the dynamic
 * symbol (never bound inside this library), so a program's override wins;
 * the generated forwarders provide them otherwise. */
void xerbla_(const char *srname, const int *info, size_t len);
void cblas_xerbla(int p, const char *rout, const char *form, ...);

enum { ROW_MAJOR = 101, COL_MAJOR = 102, NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113 };

/* ---- the runtime ------------------------------------------------------ */

static fj_runtime *rt;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

/* Threads: FRAMEJIT_THREADS (the runtime reads it itself), else the usual
 * OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else all cores. */
static void rt_init(void) {
    fj_options o;
    fj_options_init(&o);
    static const char *const vars[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
    for (int i = 0; i < 2 && !o.threads; i++) {
        const char *e = getenv(vars[i]);
        long v = e ? strtol(e, NULL, 10) : 0;
        if (v > 0 && v < 4096) o.threads = (int)v;
    }
    if (fj_runtime_create(&o, &rt) != FJ_OK) rt = NULL; /* everything goes to the fallback */
}

static fj_runtime *blas_rt(void) {
    pthread_once(&rt_once, rt_init);
    return rt;
}

/* ---- reference checks ------------------------------------------------- */

/* 'N' or 'T' for a Fortran flag ('C' is 'T' for real types), 0 if bad. */
static char trans_flag(char t) {
    switch (t) {
    case 'N': case 'n': return 'N';
    case 'T': case 't': case 'C': case 'c': return 'T';
    default: return 0;
    }
}

static int max1(int x) { return x > 1 ? x : 1; }

/* Reference xGEMM's info for these arguments (0: fine): transa, transb,
 * m, n, k, lda, ldb, ldc are parameters 1, 2, 3, 4, 5, 8, 10, 13. */
static int gemm_info(char ta, char tb, int m, int n, int k, int lda, int ldb, int ldc) {
    if (!ta) return 1;
    if (!tb) return 2;
    if (m < 0) return 3;
    if (n < 0) return 4;
    if (k < 0) return 5;
    if (lda < max1(ta == 'N' ? m : k)) return 8;
    if (ldb < max1(tb == 'N' ? k : n)) return 10;
    if (ldc < max1(m)) return 13;
    return 0;
}

/* ---- one body per element type ------------------------------------------ */

/* Column-major xGEMM after the checks: the reference's quick returns and
 * alpha = 0 (C = beta*C, A and B not read; beta = 0 writes zeros), else
 * framejit, else the system BLAS. */
#define GEMM_BODY(T, fj_fn, real_name)                                                      \
    static void gemm_col_##T(char ta, char tb, int m, int n, int k, T alpha, const T *a,    \
                             int lda, const T *b, int ldb, T beta, T *c, int ldc) {          \
        if (m == 0 || n == 0 || ((alpha == 0 || k == 0) && beta == 1)) return;              \
        if (alpha == 0) {                                                                    \
            for (int j = 0; j < n; j++)                                                      \
                for (int i = 0; i < m; i++)                                                  \
                    c[(size_t)j * ldc + i] = beta == 0 ? 0 : beta * c[(size_t)j * ldc + i];  \
            return;                                                                          \
        }                                                                                    \
        fj_runtime *r = blas_rt();                                                           \
        if (r && fj_fn(r, tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc) == FJ_OK)    \
            return;                                                                          \
        void (*f)(const char *, const char *, const int *, const int *, const int *,         \
                  const T *, const T *, const int *, const T *, const int *, const T *, T *, \
                  const int *, size_t, size_t) =                                             \
            (__typeof__(f))fjb_real(real_name);                                              \
        if (f) f(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);      \
        __asm__ volatile("" ::: "memory");                                                   \
    }

GEMM_BODY(float, fj_gemm_f32, "sgemm_")
GEMM_BODY(double, fj_gemm_f64, "dgemm_")

/* ---- Fortran ABI ------------------------------------------------------ */

#define FORTRAN_GEMM(T, name, NAME)                                                          \
    void name(const char *transa, const char *transb, const int *m, const int *n,           \
              const int *k, const T *alpha, const T *a, const int *lda, const T *b,         \
              const int *ldb, const T *beta, T *c, const int *ldc, size_t la, size_t lb) {  \
        (void)la;                                                                            \
        (void)lb;                                                                            \
        char ta = trans_flag(*transa), tb = trans_flag(*transb);                             \
        int info = gemm_info(ta, tb, *m, *n, *k, *lda, *ldb, *ldc);                          \
        if (info) {                                                                          \
            xerbla_(NAME, &info, 6);                                                         \
            return;                                                                          \
        }                                                                                    \
        gemm_col_##T(ta, tb, *m, *n, *k, *alpha, a, *lda, b, *ldb, *beta, c, *ldc);           \
        __asm__ volatile("" ::: "memory");                                                   \
    }

FORTRAN_GEMM(float, sgemm_, "SGEMM ")
FORTRAN_GEMM(double, dgemm_, "DGEMM ")

/* ---- CBLAS ------------------------------------------------------------ */

/* Reference CBLAS's RowMajorStrg: set while a row-major call reports, so
 * that its cblas_xerbla renumbers the swapped parameters. */
static void row_major_flag(int on) {
    int *f = dlsym(RTLD_DEFAULT, "RowMajorStrg");
    if (!f) f = fjb_real("RowMajorStrg");
    if (f) *f = on;
}

static char cblas_flag(int t) {
    return t == NO_TRANS ? 'N' : t == TRANS || t == CONJ_TRANS ? 'T' : 0;
}

/* As reference CBLAS: the layout, then TransA and TransB (C parameters 1,
 * 2, 3), then the Fortran routine's checks on the column-major call (row
 * major: B's and A's places swapped), info + 1 reported. */
#define CBLAS_GEMM(T, name, rout)                                                            \
    void name(int layout, int transa, int transb, const int m, const int n, const int k,    \
              const T alpha, const T *a, const int lda, const T *b, const int ldb,          \
              const T beta, T *c, const int ldc) {                                          \
        char ta = cblas_flag(transa), tb = cblas_flag(transb);                               \
        if (layout != ROW_MAJOR && layout != COL_MAJOR) {                                    \
            cblas_xerbla(1, rout, "Illegal layout setting, %d\n", layout);                   \
            return;                                                                          \
        }                                                                                    \
        int row = layout == ROW_MAJOR;                                                       \
        if (!ta) {                                                                           \
            row_major_flag(row);                                                             \
            cblas_xerbla(2, rout, "Illegal TransA setting, %d\n", transa);                   \
            row_major_flag(0);                                                               \
            return;                                                                          \
        }                                                                                    \
        if (!tb) {                                                                           \
            row_major_flag(row);                                                             \
            cblas_xerbla(3, rout, "Illegal TransB setting, %d\n", transb);                   \
            row_major_flag(0);                                                               \
            return;                                                                          \
        }                                                                                    \
        int info = row ? gemm_info(tb, ta, n, m, k, ldb, lda, ldc)                           \
                       : gemm_info(ta, tb, m, n, k, lda, ldb, ldc);                          \
        if (info) {                                                                          \
            row_major_flag(row);                                                             \
            cblas_xerbla(info + 1, rout " ", "");                                            \
            row_major_flag(0);                                                               \
            return;                                                                          \
        }                                                                                    \
        if (row) gemm_col_##T(tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);         \
        else gemm_col_##T(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);             \
        __asm__ volatile("" ::: "memory");                                                   \
    }

CBLAS_GEMM(float, cblas_sgemm, "cblas_sgemm")
CBLAS_GEMM(double, cblas_dgemm, "cblas_dgemm")
