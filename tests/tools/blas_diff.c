/* blas_diff.c: libframejit_blas.so's sgemm_, dgemm_, cblas_sgemm and cblas_dgemm against the
 * reference BLAS (dlopen'ed by path) on random calls, degenerate calls and argument errors.
 *
 * Usage: blas_diff REFERENCE_LIBBLAS [ITERATIONS]. Linked against the shim; defines its own
 * xerbla_ and cblas_xerbla, which the shim must call (a program's override wins). Prints a
 * summary; exits 1 on the first mismatch. */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROW = 101, COL = 102, NT = 111, TR = 112, CT = 113 };

/* The shim's routines (linked). */
void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *,
            const int *, size_t, size_t);
void dgemm_(const char *, const char *, const int *, const int *, const int *, const double *,
            const double *, const int *, const double *, const int *, const double *, double *,
            const int *, size_t, size_t);
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int,
                 double, double *, int);

typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *, const int *,
                         const float *, float *, const int *, size_t, size_t);
typedef void (*dgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const double *, const double *, const int *, const double *,
                         const int *, const double *, double *, const int *, size_t, size_t);
typedef void (*cdgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                          const double *, int, double, double *, int);
typedef void (*csgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                          int, float, float *, int);

static sgemm_fn ref_sgemm;
static dgemm_fn ref_dgemm;
static csgemm_fn ref_csgemm;
static cdgemm_fn ref_cdgemm;

/* ---- error handlers (ours, not the library's) ---------------------------- */

static int xerbla_calls, xerbla_info;
static char xerbla_name[16];
static int cxerbla_calls, cxerbla_info;
static char cxerbla_rout[32];

void xerbla_(const char *srname, const int *info, size_t len) {
    xerbla_calls++;
    xerbla_info = *info;
    snprintf(xerbla_name, sizeof xerbla_name, "%.*s", (int)(len < 15 ? len : 15), srname);
}

void cblas_xerbla(int p, const char *rout, const char *form, ...) {
    (void)form;
    cxerbla_calls++;
    cxerbla_info = p;
    snprintf(cxerbla_rout, sizeof cxerbla_rout, "%s", rout);
}

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "blas_diff: FAIL %s:%d: ", __FILE__, __LINE__);                  \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int rnd_to(int n) { return n > 0 ? (int)(rnd() % (uint64_t)n) : 0; }
static double rnd_u(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

/* ---- one random call, both types, both ABIs ----------------------------- */

typedef struct call {
    int layout;  /* 0: Fortran, else ROW / COL */
    char ta, tb; /* Fortran flags (N, n, T, t, C, c) */
    int m, n, k, lda, ldb, ldc;
    double alpha, beta;
    int special; /* 1: NaN in C with beta 0; 2: Inf in A with alpha 0; 3: Inf in B */
} call;

static int cblas_trans(char t) { return t == 'N' || t == 'n' ? NT : t == 'T' || t == 't' ? TR : CT; }
static int notrans(char t) { return t == 'N' || t == 'n'; }

/* Rows and columns of the stored A, B, C (column-major for Fortran and
 * COL; row-major for ROW: then "rows" are the leading-dimension-major). */
static void dims(const call *c, int *ar, int *ac, int *br, int *bc, int *cr, int *cc) {
    int row = c->layout == ROW;
    /* In storage order: outer count, inner count (inner <= ld). */
    int a_rows = notrans(c->ta) ? c->m : c->k, a_cols = notrans(c->ta) ? c->k : c->m;
    int b_rows = notrans(c->tb) ? c->k : c->n, b_cols = notrans(c->tb) ? c->n : c->k;
    if (row) {
        *ar = a_rows, *ac = a_cols, *br = b_rows, *bc = b_cols, *cr = c->m, *cc = c->n;
    } else {
        *ar = a_cols, *ac = a_rows, *br = b_cols, *bc = b_rows, *cr = c->n, *cc = c->m;
    }
}

#define RUN_TYPE(T, EPS, fort, cbl, rfort, rcbl, label)                                      \
    static void run_##T(const call *c, long *count) {                                       \
        int ar, ac, br, bc, cr, cc;                                                          \
        dims(c, &ar, &ac, &br, &bc, &cr, &cc);                                               \
        size_t na = (size_t)(ar > 0 ? ar : 1) * (size_t)c->lda + 1;                          \
        size_t nb = (size_t)(br > 0 ? br : 1) * (size_t)c->ldb + 1;                          \
        size_t nc = (size_t)(cr > 0 ? cr : 1) * (size_t)c->ldc + 1;                          \
        T *a = malloc(na * sizeof(T)), *b = malloc(nb * sizeof(T));                          \
        T *c1 = malloc(nc * sizeof(T)), *c2 = malloc(nc * sizeof(T));                        \
        CHECK(a && b && c1 && c2, "out of memory");                                          \
        for (size_t i = 0; i < na; i++) a[i] = (T)rnd_u();                                   \
        for (size_t i = 0; i < nb; i++) b[i] = (T)rnd_u();                                   \
        for (size_t i = 0; i < nc; i++) c1[i] = (T)rnd_u();                                  \
        if (c->special == 1)                                                                 \
            for (size_t i = 0; i < nc; i++) c1[i] = NAN;                                     \
        if (c->special == 2 && ar && ac) a[rnd_to(ar) * c->lda + rnd_to(ac)] = INFINITY;     \
        if (c->special == 3 && br && bc) b[rnd_to(br) * c->ldb + rnd_to(bc)] = -INFINITY;    \
        memcpy(c2, c1, nc * sizeof(T));                                                      \
        T al = (T)c->alpha, be = (T)c->beta;                                                 \
        if (!c->layout) {                                                                    \
            fort(&c->ta, &c->tb, &c->m, &c->n, &c->k, &al, a, &c->lda, b, &c->ldb, &be, c1,  \
                 &c->ldc, 1, 1);                                                             \
            rfort(&c->ta, &c->tb, &c->m, &c->n, &c->k, &al, a, &c->lda, b, &c->ldb, &be, c2, \
                  &c->ldc, 1, 1);                                                            \
        } else {                                                                             \
            int ta = cblas_trans(c->ta), tb = cblas_trans(c->tb);                            \
            cbl(c->layout, ta, tb, c->m, c->n, c->k, al, a, c->lda, b, c->ldb, be, c1,       \
                c->ldc);                                                                     \
            rcbl(c->layout, ta, tb, c->m, c->n, c->k, al, a, c->lda, b, c->ldb, be, c2,      \
                 c->ldc);                                                                    \
        }                                                                                    \
        /* The bound: |alpha| sum |a||b| + |beta c|, rounded k + 2 times in T. */            \
        for (int i = 0; i < cr; i++)                                                         \
            for (int j = 0; j < c->ldc; j++) {                                               \
                T x = c1[(size_t)i * c->ldc + j], y = c2[(size_t)i * c->ldc + j];            \
                if (j >= cc) {                                                               \
                    CHECK(!memcmp(&x, &y, sizeof x), "%s: padding (%d,%d) written", label, i, \
                          j);                                                                \
                    continue;                                                                \
                }                                                                            \
                if (isnan(y) || isinf(y)) {                                                  \
                    CHECK(isnan(y) ? isnan(x) : x == y, "%s: (%d,%d) = %g, reference %g",    \
                          label, i, j, (double)x, (double)y);                                \
                    continue;                                                                \
                }                                                                            \
                double tol = ((double)c->k + 4) * 4 * EPS *                                  \
                             (fabs(c->alpha) * (double)(c->k + 1) + fabs(c->beta) + 1e-300);  \
                CHECK(fabs((double)x - (double)y) <= tol,                                    \
                      "%s: layout %d %c%c m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g "      \
                      "beta=%g special=%d: (%d,%d) = %.17g, reference %.17g",                 \
                      label, c->layout, c->ta, c->tb, c->m, c->n, c->k, c->lda, c->ldb,      \
                      c->ldc, c->alpha, c->beta, c->special, i, j, (double)x, (double)y);     \
            }                                                                                \
        CHECK(!memcmp(&c1[nc - 1], &c2[nc - 1], sizeof(T)), "%s: wrote past C", label);      \
        (*count)++;                                                                          \
        free(a);                                                                             \
        free(b);                                                                             \
        free(c1);                                                                            \
        free(c2);                                                                            \
    }

RUN_TYPE(float, FLT_EPSILON, sgemm_, cblas_sgemm, ref_sgemm, ref_csgemm, "sgemm")
RUN_TYPE(double, DBL_EPSILON, dgemm_, cblas_dgemm, ref_dgemm, ref_cdgemm, "dgemm")

static const double edge[] = {0.0, 1.0, -1.0, 0.5};

static void random_call(call *c) {
    static const char fl[] = "NnTtCc";
    memset(c, 0, sizeof *c);
    c->layout = (int[]){0, ROW, COL}[rnd_to(3)];
    c->ta = fl[rnd_to(6)];
    c->tb = fl[rnd_to(6)];
    int big = rnd_to(40) == 0;
    c->m = big ? 100 + rnd_to(200) : rnd_to(5) == 0 ? rnd_to(3) : rnd_to(70);
    c->n = big ? 100 + rnd_to(200) : rnd_to(5) == 0 ? rnd_to(3) : rnd_to(70);
    c->k = big ? 100 + rnd_to(300) : rnd_to(5) == 0 ? rnd_to(3) : rnd_to(70);
    int ar, ac, br, bc, cr, cc;
    c->lda = c->ldb = c->ldc = 1;
    dims(c, &ar, &ac, &br, &bc, &cr, &cc);
    /* Minimum leading dimensions half the time. */
    c->lda = (ac > 1 ? ac : 1) + (rnd() & 1 ? rnd_to(7) : 0);
    c->ldb = (bc > 1 ? bc : 1) + (rnd() & 1 ? rnd_to(7) : 0);
    c->ldc = (cc > 1 ? cc : 1) + (rnd() & 1 ? rnd_to(5) : 0);
    c->alpha = rnd() % 3 ? edge[rnd_to(4)] : rnd_u() * 2;
    c->beta = rnd() % 3 ? edge[rnd_to(4)] : rnd_u() * 2;
    int sp = rnd_to(10);
    c->special = sp < 3 ? sp + 1 : 0;
    if (c->special == 1) c->beta = 0;
    if (c->special == 2) c->alpha = 0;
}

/* ---- argument errors ------------------------------------------------------ */

static void expect_fortran(const char *what, int info, const char *name) {
    CHECK(xerbla_calls == 1 && xerbla_info == info && !strcmp(xerbla_name, name),
          "%s: xerbla_ calls %d, info %d (want %d), name '%s' (want '%s')", what, xerbla_calls,
          xerbla_info, info, xerbla_name, name);
    xerbla_calls = 0;
}

static void expect_cblas(const char *what, int info, const char *rout) {
    CHECK(cxerbla_calls == 1 && cxerbla_info == info && !strcmp(cxerbla_rout, rout),
          "%s: cblas_xerbla calls %d, info %d (want %d), rout '%s' (want '%s')", what,
          cxerbla_calls, cxerbla_info, info, cxerbla_rout, rout);
    cxerbla_calls = 0;
}

static void errors(void) {
    double a[64], b[64], c[64], keep[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = c[i] = keep[i] = i;
    double one = 1, zero = 0;
    /* One bad argument per call, then two (the first in reference order wins). */
    struct {
        char ta, tb;
        int m, n, k, lda, ldb, ldc, info;
    } f[] = {
        {'X', 'N', 2, 2, 2, 2, 2, 2, 1}, {'N', 'x', 2, 2, 2, 2, 2, 2, 2},
        {'N', 'N', -1, 2, 2, 2, 2, 2, 3}, {'N', 'N', 2, -1, 2, 2, 2, 2, 4},
        {'N', 'N', 2, 2, -1, 2, 2, 2, 5}, {'N', 'N', 3, 2, 2, 2, 2, 3, 8},
        {'T', 'N', 2, 2, 3, 2, 3, 2, 8},  {'N', 'N', 2, 2, 3, 2, 2, 2, 10},
        {'N', 'T', 2, 3, 2, 2, 2, 3, 10}, {'N', 'N', 3, 2, 2, 3, 2, 2, 13},
        {'X', 'N', -1, 2, 2, 0, 2, 2, 1}, {'N', 'N', -1, -1, 2, 2, 2, 2, 3},
        {'N', 'N', 2, 2, 2, 1, 1, 1, 8},  {'N', 'N', 0, 0, 0, 0, 1, 1, 8},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "dgemm_ error case %zu", i);
        dgemm_(&f[i].ta, &f[i].tb, &f[i].m, &f[i].n, &f[i].k, &one, a, &f[i].lda, b, &f[i].ldb,
               &zero, c, &f[i].ldc, 1, 1);
        expect_fortran(what, f[i].info, "DGEMM ");
        float af[16] = {0}, cf[16] = {0}, onef = 1, zf = 0;
        sgemm_(&f[i].ta, &f[i].tb, &f[i].m, &f[i].n, &f[i].k, &onef, af, &f[i].lda, af,
               &f[i].ldb, &zf, cf, &f[i].ldc, 1, 1);
        expect_fortran(what, f[i].info, "SGEMM ");
    }
    for (int i = 0; i < 64; i++) CHECK(c[i] == keep[i], "an erroneous call wrote C");
    /* CBLAS: layout, TransA, TransB first; then the Fortran checks + 1 (row
     * major: on the swapped call, as reference CBLAS reports them). */
    cblas_dgemm(7, NT, NT, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("layout", 1, "cblas_dgemm");
    cblas_dgemm(COL, 7, NT, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("TransA", 2, "cblas_dgemm");
    cblas_dgemm(ROW, NT, 99, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("TransB", 3, "cblas_dgemm");
    cblas_dgemm(COL, NT, NT, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("col M", 4, "cblas_dgemm ");
    cblas_dgemm(ROW, NT, NT, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("row M", 5, "cblas_dgemm ");
    cblas_dgemm(COL, NT, NT, 3, 2, 2, 1, a, 2, b, 2, 0, c, 3);
    expect_cblas("col lda", 9, "cblas_dgemm ");
    cblas_dgemm(ROW, NT, NT, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2);
    expect_cblas("row lda", 11, "cblas_dgemm ");
    cblas_dgemm(ROW, NT, NT, 2, 3, 2, 1, a, 2, b, 3, 0, c, 2);
    expect_cblas("row ldc", 14, "cblas_dgemm ");
    cblas_sgemm(COL, NT, CT, 2, 2, 2, 1, (float *)a, 2, (float *)b, 1, 0, (float *)c, 2);
    expect_cblas("sgemm col ldb", 11, "cblas_sgemm ");
    for (int i = 0; i < 64; i++) CHECK(c[i] == keep[i], "an erroneous CBLAS call wrote C");
    CHECK(xerbla_calls == 0, "CBLAS errors went to xerbla_");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: blas_diff REFERENCE_LIBBLAS [ITERATIONS]\n");
        return 2;
    }
    void *ref = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(ref, "cannot open the reference BLAS %s: %s", argv[1], dlerror());
    ref_sgemm = (sgemm_fn)dlsym(ref, "sgemm_");
    ref_dgemm = (dgemm_fn)dlsym(ref, "dgemm_");
    ref_csgemm = (csgemm_fn)dlsym(ref, "cblas_sgemm");
    ref_cdgemm = (cdgemm_fn)dlsym(ref, "cblas_dgemm");
    CHECK(ref_sgemm && ref_dgemm && ref_csgemm && ref_cdgemm, "reference lacks a gemm");
    CHECK((void *)ref_dgemm != (void *)dgemm_, "the reference is the shim");
    long iters = argc > 2 ? atol(argv[2]) : 2000, ns = 0, nd = 0;
    errors();
    for (long it = 0; it < iters; it++) {
        call c;
        random_call(&c);
        if (it & 1) run_float(&c, &ns);
        else run_double(&c, &nd);
    }
    CHECK(xerbla_calls == 0 && cxerbla_calls == 0, "a valid call reported an error");
    printf("blas_diff: %ld sgemm and %ld dgemm calls (Fortran and CBLAS, both layouts) match "
           "the reference; error reporting as the reference\n", ns, nd);
    return 0;
}
