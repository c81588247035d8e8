/* test_gemm.c: GEMM against a double-precision reference, bad input, threads, unwinding.
 *
 * Both ISAs, every blocking mode (operands packed or read in place, small
 * blocks, other register tiles), fused epilogues, bitwise equality of 1
 * and 2 threads, and fjt_trace_kernel on tiny shapes.
 *
 * FRAMEJIT_FUZZ_ITERS=N sets the random cases per ISA (default 1500) and
 * FRAMEJIT_TEST_SEED=S the seed (default fixed), for longer runs:
 *     FRAMEJIT_FUZZ_ITERS=100000 FRAMEJIT_TEST_SEED=$RANDOM meson test gemm */
/* The build defines FJ_TEST for test programs, which would mangle the
 * builder's FJ_TEST enumerator (framejit/builder.h). */
#undef FJ_TEST

#include <check.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "runtime/gemm_int.h"
#include "runtime/rt.h"

/* ---- random numbers ----------------------------------------------------- */

static _Thread_local uint64_t rng_state; /* per thread: memo_threads draws in four */

static uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static int64_t rnd_to(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }
static float rnd_f(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static long env_long(const char *name, long dflt) {
    const char *e = getenv(name);
    return e && *e ? strtol(e, NULL, 0) : dflt;
}

static void seed(uint64_t salt) {
    rng_state = (uint64_t)env_long("FRAMEJIT_TEST_SEED", 0x5eed) * 0x9e3779b97f4a7c15ull + salt;
    if (!rng_state) rng_state = 1;
}

/* ---- reference and checking --------------------------------------------- */

typedef struct gcase {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int special;          /* 1: NaN in A, 2: Inf in B, 3: NaN everywhere in C (beta = 0) */
    const char *tune;     /* blocking knobs for gemm_test_tune */
} gcase;

typedef struct gbufs {
    float *a, *b, *c0, *c;
    size_t na, nb, nc;
} gbufs;

static const float PAD = 12345.0f; /* C outside the m x n region: must stay */

static void bufs_make(const gcase *t, gbufs *g) {
    g->na = (size_t)((t->ta ? t->k : t->m) * t->lda) + 1;
    g->nb = (size_t)((t->tb ? t->n : t->k) * t->ldb) + 1;
    g->nc = (size_t)(t->m * t->ldc) + 1;
    g->a = malloc(g->na * sizeof(float));
    g->b = malloc(g->nb * sizeof(float));
    g->c0 = malloc(g->nc * sizeof(float));
    g->c = malloc(g->nc * sizeof(float));
    ck_assert(g->a && g->b && g->c0 && g->c);
    for (size_t i = 0; i < g->na; i++) g->a[i] = rnd_f();
    for (size_t i = 0; i < g->nb; i++) g->b[i] = rnd_f();
    for (size_t i = 0; i < g->nc; i++) g->c0[i] = rnd_f();
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = t->n; j < t->ldc; j++) g->c0[i * t->ldc + j] = PAD;
    g->c0[g->nc - 1] = PAD;
    if (t->special == 1 && t->m && t->k) {
        int64_t i = rnd_to(t->m), p = rnd_to(t->k);
        g->a[t->ta ? p * t->lda + i : i * t->lda + p] = NAN;
    }
    if (t->special == 2 && t->n && t->k) {
        int64_t j = rnd_to(t->n), p = rnd_to(t->k);
        g->b[t->tb ? j * t->ldb + p : p * t->ldb + j] = rnd() & 1 ? INFINITY : -INFINITY;
    }
    if (t->special == 3)
        for (int64_t i = 0; i < t->m; i++)
            for (int64_t j = 0; j < t->n; j++) g->c0[i * t->ldc + j] = NAN;
    memcpy(g->c, g->c0, g->nc * sizeof(float));
}

static void bufs_free(gbufs *g) {
    free(g->a);
    free(g->b);
    free(g->c0);
    free(g->c);
}

static double elt_ref(fj_eltwise_op op, double x, double al, double be) {
    switch (op) {
    case FJ_ELT_RELU: case FJ_ELT_LEAKY_RELU: return x > 0 ? x : al * x;
    case FJ_ELT_CLIP: return x < al ? al : x > be ? be : x;
    case FJ_ELT_LINEAR: return al * x + be;
    default: return x;
    }
}

/* Checks got against alpha*op(A)op(B) + beta*C0 (+ bias[j], then act) in
 * double. The tolerance scales with the sum of |terms| and k. */
static void check_result(const gcase *t, const gbufs *g, const float *got, const float *bias,
                         fj_eltwise_op act, float act_alpha, float act_beta, const char *what) {
    for (int64_t i = 0; i < t->m; i++) {
        for (int64_t j = 0; j < t->ldc; j++) {
            float v = got[i * t->ldc + j];
            if (j >= t->n) {
                ck_assert_msg(v == PAD || (isnan(v) && isnan(g->c0[i * t->ldc + j])),
                              "%s: C(%lld,%lld) outside n was written", what, (long long)i,
                              (long long)j);
                continue;
            }
            double s = 0, abs_s = 0;
            for (int64_t p = 0; p < t->k; p++) {
                double x = t->ta ? g->a[p * t->lda + i] : g->a[i * t->lda + p];
                double y = t->tb ? g->b[j * t->ldb + p] : g->b[p * t->ldb + j];
                s += x * y;
                abs_s += fabs(x * y);
            }
            double ref = (double)t->alpha * s, tol = fabs((double)t->alpha) * abs_s;
            if (t->k == 0) ref = tol = 0;
            if (t->beta != 0) {
                double cb = (double)t->beta * g->c0[i * t->ldc + j];
                ref += cb;
                tol += fabs(cb);
            }
            if (bias) {
                ref += bias[j];
                tol += fabs(bias[j]);
            }
            tol = tol * (double)(t->k + 4) * 2.5 * FLT_EPSILON + 1e-30;
            if (act) {
                ref = elt_ref(act, ref, act_alpha, act_beta);
                /* the op's own rounding */
                tol = tol * (act == FJ_ELT_LINEAR ? fabs(act_alpha) + 1 : 1) +
                      fabs(ref) * 2 * FLT_EPSILON;
            }
            if (isnan(ref))
                ck_assert_msg(isnan(v), "%s: C(%lld,%lld) = %g, reference NaN", what,
                              (long long)i, (long long)j, v);
            else if (isinf(ref))
                ck_assert_msg(v == (float)ref, "%s: C(%lld,%lld) = %g, reference %g", what,
                              (long long)i, (long long)j, v, ref);
            else
                ck_assert_msg(fabs(v - ref) <= tol, "%s: C(%lld,%lld) = %.9g, reference %.9g "
                              "(tolerance %.3g)", what, (long long)i, (long long)j, v, ref, tol);
        }
    }
    ck_assert_msg(got[g->nc - 1] == PAD, "%s: wrote past C", what);
}

static void case_str(const gcase *t, char *buf, size_t n) {
    snprintf(buf, n, "%c%c m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld alpha=%g beta=%g "
             "special=%d tune=%s", t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', (long long)t->m,
             (long long)t->n, (long long)t->k, (long long)t->lda, (long long)t->ldb,
             (long long)t->ldc, t->alpha, t->beta, t->special, t->tune ? t->tune : "auto");
}

/* Runs t on rt1 (and on rt2, whose result must be bitwise the same). */
static void run_case(fj_runtime *rt1, fj_runtime *rt2, const gcase *t) {
    char what[256];
    case_str(t, what, sizeof what);
    gemm_test_tune(t->tune);
    gbufs g;
    bufs_make(t, &g);
    static const char tr[2][2] = {{'N', 'n'}, {'T', 't'}};
    char ca = tr[t->ta][rnd() & 1], cb = tr[t->tb][rnd() & 1];
    fj_status s = fj_gemm_f32(rt1, ca, cb, t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b, t->ldb,
                              t->beta, g.c, t->ldc);
    ck_assert_msg(s == FJ_OK, "%s: %s: %s", what, fj_status_str(s), fj_last_error());
    check_result(t, &g, g.c, NULL, 0, 0, 0, what);
    if (rt2) {
        float *c2 = malloc(g.nc * sizeof(float));
        ck_assert_ptr_nonnull(c2);
        memcpy(c2, g.c0, g.nc * sizeof(float));
        s = fj_gemm_f32(rt2, ca, cb, t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b, t->ldb,
                        t->beta, c2, t->ldc);
        ck_assert_msg(s == FJ_OK, "%s (2 threads): %s", what, fj_last_error());
        ck_assert_msg(!memcmp(c2, g.c, g.nc * sizeof(float)),
                      "%s: 1 and 2 threads differ bitwise", what);
        free(c2);
    }
    bufs_free(&g);
    gemm_test_tune(NULL);
}

/* ---- random cases -------------------------------------------------------- */

static const int64_t dims[] = {0,  1,  2,  3,  5,  7,  8,  9,  13, 14, 15,  16,  17,  23, 28,
                               29, 31, 32, 33, 41, 47, 48, 63, 64, 65, 97, 127, 128, 129};
static const float edge[] = {0.0f, 1.0f, -1.0f, 0.5f};

/* Blocking knobs each case runs under: in place and packed operands,
 * small blocks (several k, m and n blocks), other register tiles, and the
 * threading threshold at 1 so that small problems split too. */
static const char *tunes512[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=28,nc=64,mt=1",
    "da=0,db=0,kc=16,mc=28,nc=64,mt=1,shared=1",
    "da=1,db=0,kc=24,mc=14,nc=32,mt=1,shared=1",
    "da=0,db=0,kc=16,mt=1,shared=1,rpt=1",
    "da=0,db=0,kc=24,mc=14,mt=1,shared=1,rpt=16",
    "da=1,db=1,kc=24,mc=14,nc=32,mt=1",
    "da=1,db=0,kc=8,mt=1",
    "mr=6,nv=4,da=0,db=0,mt=1",
    "mr=8,nv=3,kc=40,unroll=4",
    "mr=5,nv=1,unroll=1,kc=20,pfc=0",
    "mr=14,nv=2,da=0,db=0,pfb=512,unroll=2,mt=1",
    "areg=1,da=0,db=1,unroll=8,mt=1",
    "bcopy=0,da=0,db=0,kc=24,mc=28",
    "bpf=1,pfb=256,kc=32,mc=14,nc=64",
};
static const char *tunes2[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=12,nc=32,mt=1",
    "da=0,db=0,kc=16,mc=12,nc=32,mt=1,shared=1",
    "da=1,db=1,kc=24,mc=6,nc=16,mt=1",
    "da=1,db=0,kc=8,mt=1",
    "mr=3,nv=3,da=0,db=0,mt=1",
    "mr=12,nv=1,kc=40,unroll=4",
    "mr=5,nv=1,unroll=1,kc=20,pfc=0",
};

static int64_t rnd_dim(int big) {
    if (big) return 100 + rnd_to(201);
    return rnd() % 3 ? dims[rnd_to(sizeof dims / sizeof dims[0])] : rnd_to(70);
}

static void random_case(gcase *t, int avx512, long it) {
    memset(t, 0, sizeof *t);
    int big = it % 50 == 49; /* a few shapes up to 300 */
    t->ta = (int)(rnd() & 1);
    t->tb = (int)(rnd() & 1);
    t->m = rnd_dim(big);
    t->n = rnd_dim(big);
    t->k = rnd_dim(big);
    int64_t pad = rnd() % 4 == 0 ? rnd_to(20) : 0;
    t->lda = (t->ta ? t->m : t->k) + pad;
    t->ldb = (t->tb ? t->k : t->n) + (rnd() % 4 == 0 ? rnd_to(9) : 0);
    t->ldc = t->n + (rnd() % 3 == 0 ? rnd_to(5) : 0);
    if (t->lda < 1) t->lda = 1;
    if (t->ldb < 1) t->ldb = 1;
    if (t->ldc < 1) t->ldc = 1;
    t->alpha = rnd() % 3 ? edge[rnd_to(4)] : rnd_f() * 2;
    t->beta = rnd() % 3 ? edge[rnd_to(4)] : rnd_f() * 2;
    int sp = (int)rnd_to(12);
    t->special = sp < 3 ? sp + 1 : 0;
    if (t->special == 3) t->beta = 0;
    if (avx512) t->tune = tunes512[rnd_to(sizeof tunes512 / sizeof tunes512[0])];
    else t->tune = tunes2[rnd_to(sizeof tunes2 / sizeof tunes2[0])];
}

static void fuzz(fj_isa isa, uint64_t salt) {
    fj_runtime *rt1 = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt1) return; /* no AVX-512 here */
    seed(salt);
    long iters = env_long("FRAMEJIT_FUZZ_ITERS", 1500);
    for (long it = 0; it < iters; it++) {
        gcase t;
        random_case(&t, isa == FJ_ISA_AVX512, it);
        run_case(rt1, it % 2 ? rt2 : NULL, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}

START_TEST(fuzz_avx512) { fuzz(FJ_ISA_AVX512, 1); }
END_TEST
START_TEST(fuzz_avx2) { fuzz(FJ_ISA_AVX2, 2); }
END_TEST

/* Every alpha/beta edge pair, every transpose, tails of every width. */
START_TEST(edges) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(3);
    int lanes = isa == FJ_ISA_AVX512 ? 16 : 8;
    for (int ai = 0; ai < 4; ai++)
        for (int bi = 0; bi < 4; bi++)
            for (int tr = 0; tr < 4; tr++) {
                gcase t = {.ta = tr & 1, .tb = tr >> 1, .alpha = edge[ai], .beta = edge[bi]};
                t.m = 1 + rnd_to(30);
                t.n = 1 + rnd_to(3 * lanes);
                t.k = rnd_to(40);
                t.lda = (t.ta ? t.m : t.k) + 1;
                t.ldb = (t.tb ? t.k : t.n) + 2;
                t.ldc = t.n + 3;
                run_case(rt, rt2, &t);
            }
    /* Column tails of every width with both operands in place and packed. */
    for (int w = 1; w <= 4 * lanes; w++)
        for (int d = 0; d < 2; d++) {
            gcase t = {.m = 1 + w % 17, .n = w, .k = 1 + w % 9, .alpha = 1, .beta = 0.5f,
                       .tune = d ? "da=1,db=1" : "da=0,db=0"};
            t.lda = t.k;
            t.ldb = t.n;
            t.ldc = t.n;
            run_case(rt, NULL, &t);
        }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* beta = 0 never reads C; k = 0 scales C by beta. */
START_TEST(beta_zero_and_k_zero) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(4);
    for (int kk = 0; kk < 2; kk++)
        for (int b = 0; b < 4; b++) {
            gcase t = {.m = 37, .n = 45, .k = kk ? 19 : 0, .alpha = 2, .beta = edge[b]};
            t.lda = t.k ? t.k : 1;
            t.ldb = t.n;
            t.ldc = t.n + 1;
            t.special = t.beta == 0 ? 3 : 0;
            run_case(rt, NULL, &t);
            /* an infinite alpha must not turn k = 0 into NaN */
            t.alpha = INFINITY;
            if (!t.k) run_case(rt, NULL, &t);
        }
    fj_runtime_destroy(rt);
}
END_TEST

/* Large enough to split across threads and k blocks with default knobs. */
START_TEST(threads_bitwise) {
    fj_runtime *rt1 = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(5);
    static const char *tunes[] = {NULL, "shared=1", "shared=1,rpt=1", "shared=1,rpt=64"};
    for (int tr = 0; tr < 16; tr++) {
        gcase t = {.ta = tr & 1, .tb = tr >> 1 & 1, .m = 301, .n = 277, .k = 293, .alpha = 0.5f,
                   .beta = -1, .tune = tunes[tr >> 2]};
        t.lda = (t.ta ? t.m : t.k) + 3;
        t.ldb = (t.tb ? t.k : t.n);
        t.ldc = t.n + 2;
        run_case(rt1, rt2, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* Default blocking of problems past 256 rows and columns: row strides that
 * fall into a few L1 sets and short k (the 6-row x 4-vector tile), rows
 * in one set read in place by 8-row tiles (12-way L1s), the B panels
 * packed by the kernels' first row tile (whole panels; the tail panel
 * packed apart), several k blocks (C accumulated without alpha), and the
 * alpha = 1 / beta = 0 or 1 stores. Both L1 kinds' choices are made
 * whatever the host's L1 is (ways=8, ways=12). */
START_TEST(wide_blocks) {
    fj_runtime *rt1 = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(7);
    static const int64_t ldas[] = {512, 1536, 0, 1024};
    static const float ab[][2] = {{1, 0}, {1, 1}, {1, 0.5f}, {-2, 0}, {0.5f, 1}};
    for (int c = 0; c < 40; c++) {
        gcase t = {.ta = c % 5 == 3, .tb = c % 7 == 6, .m = 257 + rnd_to(60), .n = 256 + rnd_to(70),
                   .k = c % 3 ? 40 + rnd_to(60) : 520 + rnd_to(100),
                   .alpha = ab[c % 5][0], .beta = ab[c % 5][1],
                   .tune = c & 1 ? (c & 4 ? "ways=8" : "ways=12") : "mt=1"};
        t.lda = ldas[c % 4] ? ldas[c % 4] : (t.ta ? t.m : t.k) + 5;
        if (t.lda < (t.ta ? t.m : t.k)) t.lda += 1024; /* the same L1 spread */
        t.ldb = (t.tb ? t.k : t.n) + (c & 2 ? 16 : 0);
        t.ldc = t.n + (c & 4 ? 1 : 0);
        run_case(rt1, c & 1 ? rt2 : NULL, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* ---- handles with a fused epilogue --------------------------------------- */

static void handle_case(fj_runtime *rt, fj_runtime *rt2, const gcase *t, int has_bias,
                        fj_eltwise_op op, float pa, float pb) {
    char what[320];
    case_str(t, what, sizeof what);
    snprintf(what + strlen(what), sizeof what - strlen(what), " bias=%d op=%d(%g,%g)",
             has_bias, (int)op, pa, pb);
    gemm_test_tune(t->tune);
    fj_gemm_desc d = {t->ta ? 'T' : 'N', t->tb ? 't' : 'n', t->m, t->n, t->k, t->lda, t->ldb,
                      t->ldc, t->alpha, t->beta, has_bias, op, pa, pb};
    fj_gemm *h = NULL, *h2 = NULL;
    fj_status s = fj_gemm_create(rt, &d, &h);
    ck_assert_msg(s == FJ_OK, "%s: create: %s", what, fj_last_error());
    if (rt2) ck_assert_msg(fj_gemm_create(rt2, &d, &h2) == FJ_OK, "%s", fj_last_error());
    gbufs g;
    bufs_make(t, &g);
    float *bias = malloc((size_t)(t->n + 1) * sizeof(float));
    ck_assert_ptr_nonnull(bias);
    for (int64_t j = 0; j <= t->n; j++) bias[j] = rnd_f();
    /* Executed twice: create once, execute many. */
    for (int rep = 0; rep < 2; rep++) {
        memcpy(g.c, g.c0, g.nc * sizeof(float));
        s = fj_gemm_execute(h, g.a, g.b, bias, g.c);
        ck_assert_msg(s == FJ_OK, "%s: execute: %s", what, fj_last_error());
    }
    if (op == 0 || op == FJ_ELT_RELU || op == FJ_ELT_LEAKY_RELU || op == FJ_ELT_CLIP ||
        op == FJ_ELT_LINEAR)
        check_result(t, &g, g.c, has_bias ? bias : NULL, op, pa, pb, what);
    /* Any op: the fused result equals the unfused GEMM (+ bias) followed by
     * fj_eltwise_f32, bitwise (the same emitter code runs in both). */
    float *u = malloc(g.nc * sizeof(float));
    ck_assert_ptr_nonnull(u);
    memcpy(u, g.c0, g.nc * sizeof(float));
    ck_assert(fj_gemm_f32(rt, d.transa, d.transb, t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b,
                          t->ldb, t->beta, u, t->ldc) == FJ_OK);
    for (int64_t i = 0; i < t->m; i++) {
        float *row = u + i * t->ldc;
        if (has_bias)
            for (int64_t j = 0; j < t->n; j++) row[j] += bias[j];
        if (op) ck_assert_msg(fj_eltwise_f32(rt, op, pa, pb, row, row, (size_t)t->n) == FJ_OK,
                              "%s: eltwise: %s", what, fj_last_error());
    }
    ck_assert_msg(!memcmp(u, g.c, g.nc * sizeof(float)), "%s: fused != GEMM then eltwise", what);
    if (h2) {
        memcpy(u, g.c0, g.nc * sizeof(float));
        ck_assert(fj_gemm_execute(h2, g.a, g.b, bias, u) == FJ_OK);
        ck_assert_msg(!memcmp(u, g.c, g.nc * sizeof(float)), "%s: 1 and 2 threads differ", what);
    }
    free(u);
    free(bias);
    bufs_free(&g);
    fj_gemm_destroy(h);
    fj_gemm_destroy(h2);
    gemm_test_tune(NULL);
}

/* The fused epilogue on the default blocking of large row-major problems:
 * A in place with the tallest tile and the kernel packing B (every general
 * register in use before the bias pointer), and the 6 x 64 tile. */
START_TEST(wide_epilogue) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(8);
    for (int c = 0; c < 4; c++) {
        gcase t = {.m = 300, .n = 270 + c, .k = 77 + c, .alpha = c & 1 ? 1.0f : 0.75f,
                   .beta = c & 2 ? 1.0f : 0.0f, .tune = c == 3 ? "mt=1" : NULL};
        t.lda = c & 1 ? 512 : t.k + 5;
        t.ldb = t.n;
        t.ldc = t.n + 1;
        handle_case(rt, c & 1 ? rt2 : NULL, &t, 1, c & 2 ? FJ_ELT_RELU : FJ_ELT_LINEAR, 0.5f,
                    0.25f);
    }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

START_TEST(epilogue) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(6);
    const char **tunes = isa == FJ_ISA_AVX512 ? tunes512 : tunes2;
    int ntunes = isa == FJ_ISA_AVX512 ? (int)(sizeof tunes512 / sizeof tunes512[0])
                                      : (int)(sizeof tunes2 / sizeof tunes2[0]);
    for (int op = 0; op < FJ_ELT__COUNT; op++)
        for (int rep = 0; rep < 6; rep++) {
            gcase t;
            random_case(&t, isa == FJ_ISA_AVX512, rep);
            t.special = 0;
            t.tune = tunes[rep % ntunes];
            float pa = op == FJ_ELT_CLIP ? -0.5f : rep % 2 ? 0.0f : 0.3f;
            float pb = op == FJ_ELT_CLIP ? 0.7f : 0.25f;
            if (op == FJ_ELT_LOG || op == FJ_ELT_SQRT) t.alpha = t.alpha < 0 ? -t.alpha : t.alpha;
            handle_case(rt, rep % 2 ? rt2 : NULL, &t, rep % 3 != 2, (fj_eltwise_op)op, pa,
                        pb);
        }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* ---- bad input ------------------------------------------------------------ */

START_TEST(bad_input) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    float a[64], b[64], c[64], keep[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = 1, c[i] = keep[i] = (float)i;
    FJT_ASSERT_INVALID(fj_gemm_f32(NULL, 'N', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'X', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'C', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 0, 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', -1, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, -2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 2, -2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 3, b, 3, 0, c, 3));   /* lda < k */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'T', 'N', 5, 3, 4, 1, a, 4, b, 3, 0, c, 3));   /* lda < m */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 2, 0, c, 3));   /* ldb < n */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'T', 2, 3, 4, 1, a, 4, b, 3, 0, c, 3));   /* ldb < k */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, 2));   /* ldc < n */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, -3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, 0));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3));
    /* k = 0 still writes C */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 0, 1, a, 1, b, 3, 0, NULL, 3));
    /* Sizes whose byte extents overflow. */
    int64_t big = INT64_MAX / 2;
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', big, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 2, big, 1, a, big, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 3, 2, 2, 1, a, INT64_MAX, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', (int64_t)1 << 31, (int64_t)1 << 31, 1, 1, a, 1, b,
                           (int64_t)1 << 31, 0, c, (int64_t)1 << 62));
    ck_assert_msg(!memcmp(c, keep, sizeof c), "C changed by a failed call");
    /* Empty products are fine with NULL pointers where nothing is read. */
    ck_assert(fj_gemm_f32(rt, 'N', 'N', 0, 3, 4, 1, NULL, 4, NULL, 3, 0, NULL, 3) == FJ_OK);
    ck_assert(fj_gemm_f32(rt, 'N', 'N', 2, 0, 4, 1, NULL, 4, NULL, 1, 0, NULL, 1) == FJ_OK);
    ck_assert(fj_gemm_f32(rt, 'n', 't', 2, 3, 0, 1, NULL, 1, NULL, 1, 0, c, 3) == FJ_OK);
    for (int i = 0; i < 6; i++) ck_assert(c[i] == 0.0f);

    /* Handles. */
    fj_gemm *h = (fj_gemm *)&h;
    fj_gemm_desc d = {'N', 'N', 2, 3, 4, 4, 3, 3, 1, 0, 1, FJ_ELT_RELU, 0, 0};
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &d, NULL));
    FJT_ASSERT_INVALID(fj_gemm_create(NULL, &d, &h));
    ck_assert_ptr_null(h);
    FJT_ASSERT_INVALID(fj_gemm_create(rt, NULL, &h));
    fj_gemm_desc e = d;
    e.post_op = (fj_eltwise_op)999;
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    e = d;
    e.lda = 3;
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    e = d;
    e.transb = 'q';
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    ck_assert(fj_gemm_create(rt, &d, &h) == FJ_OK);
    memcpy(c, keep, sizeof c);
    FJT_ASSERT_INVALID(fj_gemm_execute(NULL, a, b, b, c));
    FJT_ASSERT_INVALID(fj_gemm_execute(h, a, b, NULL, c)); /* has_bias without bias */
    FJT_ASSERT_INVALID(fj_gemm_execute(h, NULL, b, b, c));
    FJT_ASSERT_INVALID(fj_gemm_execute(h, a, b, b, NULL));
    ck_assert_msg(!memcmp(c, keep, sizeof c), "C changed by a failed execute");
    ck_assert(fj_gemm_execute(h, a, b, b, c) == FJ_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) ck_assert(c[i * 3 + j] == 5.0f); /* relu(4 + 1) */
    fj_gemm_destroy(h);
    fj_gemm_destroy(NULL);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- every-instruction unwinding ---------------------------------------- */

typedef struct trace_arg {
    fj_runtime *rt;
    const gcase *t;
    gbufs *g;
    fj_gemm *h;
    const float *bias;
    fj_status s;
} trace_arg;

static void trace_body(void *p) {
    trace_arg *x = p;
    const gcase *t = x->t;
    if (x->h)
        x->s = fj_gemm_execute(x->h, x->g->a, x->g->b, x->bias, x->g->c);
    else
        x->s = fj_gemm_f32(x->rt, t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', t->m, t->n, t->k,
                           t->alpha, x->g->a, t->lda, x->g->b, t->ldb, t->beta, x->g->c, t->ldc);
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

START_TEST(trace_unwind) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(7);
    /* Tiny shapes: the trap flag stops at every instruction. Tails in both
     * dimensions, both operand modes, both beta paths, and a handle. */
    static const struct { int ta, tb, m, n, k; float beta; const char *tune; int handle; } cs[] = {
        {0, 0, 3, 5, 2, 0, NULL, 0},
        {0, 0, 17, 19, 3, 1, "da=1,db=1", 0},
        {1, 1, 5, 9, 2, 0.5f, "da=0,db=0,kc=2", 0},
        {0, 1, 2, 33, 1, 0, "da=1,db=0", 1},
        {1, 0, 4, 3, 2, 1, "da=0,db=0", 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gcase t = {.ta = cs[i].ta, .tb = cs[i].tb, .m = cs[i].m, .n = cs[i].n, .k = cs[i].k,
                   .alpha = 1, .beta = cs[i].beta, .tune = cs[i].tune};
        t.lda = t.ta ? t.m : t.k;
        t.ldb = t.tb ? t.k : t.n;
        t.ldc = t.n;
        gemm_test_tune(t.tune);
        gbufs g;
        bufs_make(&t, &g);
        float bias[64];
        for (int j = 0; j < 64; j++) bias[j] = rnd_f();
        trace_arg x = {rt, &t, &g, NULL, bias, FJ_OK};
        if (cs[i].handle) {
            fj_gemm_desc d = {t.ta ? 'T' : 'N', t.tb ? 'T' : 'N', t.m, t.n, t.k, t.lda, t.ldb,
                              t.ldc, t.alpha, t.beta, 1, FJ_ELT_RELU, 0, 0};
            ck_assert(fj_gemm_create(rt, &d, &x.h) == FJ_OK);
        }
        fjt_trace_result *r = calloc(1, sizeof *r);
        fjt_trace_opts o = {0};
        int ok = fjt_trace_kernel(trace_body, &x, &o, r);
        ck_assert_msg(x.s == FJ_OK, "case %zu: %s", i, fj_last_error());
        ck_assert_msg(ok, "case %zu (%s): %s", i, r->first_name ? r->first_name : "?", r->msg);
        ck_assert_int_gt(r->kernel_steps, 0);
        ck_assert_int_ge(r->rets, 1);
        free(r);
        fj_gemm_destroy(x.h);
        bufs_free(&g);
        gemm_test_tune(NULL);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* The same shape again and again (plans are remembered per thread): alpha
 * and beta change between calls, runtimes of either ISA alternate, and a
 * runtime is replaced by one of the other ISA (maybe at the same address). */
START_TEST(repeat_shapes) {
    seed(8);
    fj_runtime *rt[2] = {fjt_runtime(FJ_ISA_AVX2, 1), fjt_runtime(FJ_ISA_AVX512, 1)};
    static const int64_t dims[][3] = {{16, 16, 16}, {32, 32, 32}, {7, 33, 5}, {64, 64, 64}};
    for (int round = 0; round < 3; round++) {
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int rep = 0; rep < 6; rep++) {
                fj_runtime *r = rt[rep & 1] ? rt[rep & 1] : rt[0];
                gcase t = {.m = dims[d][0], .n = dims[d][1], .k = dims[d][2],
                           .alpha = rep % 3 ? 1.0f : -0.5f, .beta = rep >= 3 ? 1.0f : 0.0f};
                t.lda = t.k;
                t.ldb = t.n;
                t.ldc = t.n;
                char what[256];
                case_str(&t, what, sizeof what);
                gbufs g;
                bufs_make(&t, &g);
                fj_status s = fj_gemm_f32(r, 'N', 'N', t.m, t.n, t.k, t.alpha, g.a, t.lda, g.b,
                                          t.ldb, t.beta, g.c, t.ldc);
                ck_assert_msg(s == FJ_OK, "%s: %s", what, fj_last_error());
                check_result(&t, &g, g.c, NULL, 0, 0, 0, what);
                bufs_free(&g);
            }
        /* Handles of whole-tile shapes (one kernel call per panel) with
         * bias and an activation. */
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
            gcase t = {.m = dims[d][0], .n = dims[d][1], .k = dims[d][2], .alpha = 0.75f,
                       .beta = round == 1 ? 0.5f : 0.0f};
            t.lda = t.k;
            t.ldb = t.n;
            t.ldc = t.n;
            handle_case(rt[0], NULL, &t, 1, FJ_ELT_RELU, 0.0f, 0.0f);
            if (rt[1]) handle_case(rt[1], NULL, &t, round != 1, FJ_ELT_TANH, 0.0f, 0.0f);
        }
        /* Swap the ISAs: the new runtimes may reuse the old addresses. */
        int avx2_first = round & 1;
        fj_runtime_destroy(rt[0]);
        fj_runtime_destroy(rt[1]);
        rt[0] = fjt_runtime(avx2_first ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 1);
        rt[1] = fjt_runtime(avx2_first ? FJ_ISA_AVX512 : FJ_ISA_AVX2, 1);
        if (!rt[0]) rt[0] = fjt_runtime(FJ_ISA_AVX2, 1);
    }
    fj_runtime_destroy(rt[0]);
    fj_runtime_destroy(rt[1]);
}
END_TEST

/* A kernel has only the C updates its plan calls it with (alpha = 1 and
 * beta = 0: C = acc; k blocks after the first: C += acc; otherwise
 * alpha*acc + beta*C). A shape called again with another alpha/beta gets a
 * kernel with both kinds, so alternating calls settle on one kernel: the
 * second round of the same calls generates nothing. */
static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

START_TEST(store_kinds) {
    seed(11);
    static const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, 0}, {1, 0}, {1, 1}, {-2, 0.25f}, {1, 0}};
    for (int isa = 0; isa < 2; isa++)
        for (int deep = 0; deep < 2; deep++) {
            fj_runtime *rt = fjt_runtime(isa ? FJ_ISA_AVX2 : FJ_ISA_AVX512, 1);
            if (!rt) continue;
            /* deep: three k blocks (k 90 in blocks of 32). */
            gcase t = {.m = 37, .n = 45, .k = deep ? 90 : 29, .tune = deep ? "kc=32" : NULL};
            t.lda = t.k + 3;
            t.ldb = t.n + 1;
            t.ldc = t.n + 2;
            gemm_test_tune(t.tune);
            for (int round = 0; round < 2; round++)
                for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
                    t.alpha = ab[i][0];
                    t.beta = ab[i][1];
                    char what[256];
                    case_str(&t, what, sizeof what);
                    gbufs g;
                    bufs_make(&t, &g);
                    fj_status s = fj_gemm_f32(rt, 'N', 'N', t.m, t.n, t.k, t.alpha, g.a, t.lda,
                                              g.b, t.ldb, t.beta, g.c, t.ldc);
                    ck_assert_msg(s == FJ_OK, "%s: %s", what, fj_last_error());
                    check_result(&t, &g, g.c, NULL, 0, 0, 0, what);
                    bufs_free(&g);
                    const char *name = fj_kernel_name(rt->kernels); /* the newest */
                    if (round == 0 && i == 0)
                        ck_assert_msg(ends_with(name, deep ? "_set_add" : "_set"), "%s: %s",
                                      what, name);
                    if (round == 0 && i == 2) /* all three: no suffix */
                        ck_assert_msg(ends_with(name, isa ? "_avx2" : "_avx512"), "%s: %s",
                                      what, name);
                }
            /* set, set_add, all (deep: set_add, all) */
            uint64_t made = atomic_load(&rt->kc_misses);
            ck_assert_msg(made == (deep ? 2u : 3u), "deep %d: %llu kernels made", deep,
                          (unsigned long long)made);
            gemm_test_tune(NULL);
            fj_runtime_destroy(rt);
        }
}
END_TEST

/* References held beyond the kernel table's own one, over all of rt's
 * kernels (only GEMM runs on these runtimes: no pinned eltwise slots). */
static long extra_refs(fj_runtime *rt) {
    long n = 0;
    pthread_mutex_lock(&rt->lock);
    for (struct fj_kernel *k = rt->kernels; k; k = k->next) n += atomic_load(&k->refs) - 1;
    pthread_mutex_unlock(&rt->lock);
    return n;
}

static void small_gemm(fj_runtime *rt, int64_t m, int64_t n, int64_t k) {
    gcase t = {.m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 0.0f, .lda = k, .ldb = n, .ldc = n};
    gbufs g;
    bufs_make(&t, &g);
    fj_status s = fj_gemm_f32(rt, 'N', 'N', m, n, k, 1.0f, g.a, k, g.b, n, 0.0f, g.c, n);
    ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
    check_result(&t, &g, g.c, NULL, 0, 0, 0, "small_gemm");
    bufs_free(&g);
}

static void *gemm_thread(void *rt) {
    small_gemm(rt, 32, 32, 32);
    return NULL;
}

/* fj_gemm_f32 keeps its last kernel per thread (no table lookup on a
 * repeat): exactly one extra reference per thread, dropped when the thread
 * exits, moved when it calls another runtime, never touched once its
 * runtime is gone. */
START_TEST(memo_refs) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX512, 1);
    if (!rt) rt = fjt_runtime(FJ_ISA_AVX2, 1);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, gemm_thread, rt), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(extra_refs(rt), 0);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    small_gemm(rt, 7, 33, 5);
    ck_assert_int_eq(extra_refs(rt), 1);
    /* A handle of the memo's shape holds its own reference. */
    fj_gemm_desc d = {.transa = 'N', .transb = 'N', .m = 7, .n = 33, .k = 5, .lda = 5,
                      .ldb = 33, .ldc = 33, .alpha = 1.0f};
    fj_gemm *h;
    ck_assert_int_eq(fj_gemm_create(rt, &d, &h), FJ_OK);
    ck_assert_int_eq(extra_refs(rt), 2);
    fj_gemm_destroy(h);
    ck_assert_int_eq(extra_refs(rt), 1);
    /* Another runtime: the memo moves there. */
    fj_runtime *rt2 = fjt_runtime(FJ_ISA_AVX2, 1);
    small_gemm(rt2, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 0);
    ck_assert_int_eq(extra_refs(rt2), 1);
    /* Its runtime destroyed under it: the memo is dropped without a touch
     * (ASan would see one), including by a runtime made at its address. */
    fj_runtime_destroy(rt2);
    rt2 = fjt_runtime(FJ_ISA_AVX2, 1);
    small_gemm(rt2, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt2), 1);
    fj_runtime_destroy(rt2);
    small_gemm(rt, 32, 32, 32);
    ck_assert_int_eq(extra_refs(rt), 1);
    fj_runtime_destroy(rt);
}
END_TEST

/* Held kernels keep their arenas from eviction: a runtime whose cache
 * has room for few arenas lets one memo hold a kernel; another thread's
 * calls then look their kernel up each time (and still compute right). */
static pthread_barrier_t hold_bar;

static void *hold_thread(void *rt) {
    small_gemm(rt, 32, 32, 32);
    pthread_barrier_wait(&hold_bar); /* holding */
    pthread_barrier_wait(&hold_bar); /* main has checked */
    return NULL;
}

START_TEST(memo_hold_limit) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = 64 << 10;
    fj_runtime *rt = NULL;
    ck_assert_int_eq(fj_runtime_create(&o, &rt), FJ_OK);
    pthread_barrier_init(&hold_bar, NULL, 2);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, hold_thread, rt), 0);
    pthread_barrier_wait(&hold_bar);
    ck_assert_int_eq(extra_refs(rt), 1);
    for (int i = 0; i < 3; i++) {
        small_gemm(rt, 16, 16, 16); /* the limit: lent for the call, given back */
        ck_assert_int_eq(extra_refs(rt), 1);
    }
    pthread_barrier_wait(&hold_bar);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(extra_refs(rt), 0);
    small_gemm(rt, 24, 16, 16); /* a new plan may hold again */
    ck_assert_int_eq(extra_refs(rt), 1);
    pthread_barrier_destroy(&hold_bar);
    fj_runtime_destroy(rt);
}
END_TEST

/* Threads that call fj_gemm_f32 on a shared runtime and on runtimes of
 * their own, made and destroyed as they go (their memos move between
 * runtimes, some of them dead): right results, and once the threads are
 * gone no reference is left on the shared runtime's kernels. */
static fj_runtime *memo_shared;

static void *memo_churn(void *arg) {
    int id = (int)(intptr_t)arg;
    seed(100 + (uint64_t)id);
    for (int it = 0; it < 12; it++) {
        fj_runtime *own = fjt_runtime(FJ_ISA_AUTO, 1);
        int64_t d = 8 + (id * 7 + it * 5) % 40;
        small_gemm(memo_shared, d, d + 3, d);
        small_gemm(own, d, d, d + 1);
        if (it % 3 == 0) fj_runtime_destroy(own);
        small_gemm(memo_shared, 16, 16, 16);
        if (it % 3 != 0) fj_runtime_destroy(own);
    }
    return NULL;
}

START_TEST(memo_threads) {
    memo_shared = fjt_runtime(FJ_ISA_AUTO, 1);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, memo_churn, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(extra_refs(memo_shared), 0);
    fj_runtime_destroy(memo_shared);
}
END_TEST

/* Two threads making and destroying runtimes side by side: code
 * addresses are never reused, so the code moves on through the address
 * space; libunwind's tables must stay within 32-bit offsets of it (they
 * once ran out of room after ~150 runtimes a thread). */
static void *churn_thread(void *arg) {
    (void)arg;
    seed(91);
    for (int i = 0; i < 400; i++) {
        fj_runtime *r = fjt_runtime(FJ_ISA_AUTO, 1);
        small_gemm(r, 8, 8, 8);
        fj_runtime_destroy(r);
    }
    return NULL;
}

START_TEST(runtime_churn) {
    pthread_t th[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, churn_thread, NULL), 0);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
}
END_TEST

/* Packing buffers are the thread's, made on its first GEMM that needs
 * them. A failure there, or in any other allocation of the call, is an
 * error and C is left as it was; the next call computes. Each size runs
 * on a new thread (no buffer yet), after a warm call on this one (the
 * kernel exists): the fault fires on the thread's first, second, ...
 * allocation until a call succeeds, and one of the failures must have
 * been the buffer's. */
typedef struct scratch_case {
    fj_runtime *rt;
    int64_t n;
    int fault;
} scratch_case;

static void *scratch_thread(void *arg) {
    const scratch_case *sc = arg;
    gcase t = {.m = sc->n, .n = sc->n, .k = sc->n, .alpha = 1.0f, .beta = 0.5f,
               .lda = sc->n + 3, .ldb = sc->n + 1, .ldc = sc->n + 5};
    seed(77 + (uint64_t)sc->n);
    gbufs g;
    bufs_make(&t, &g);
    int packing = 0;
    fj_status s = FJ_ERR_NO_MEMORY;
    for (long countdown = 0; countdown < 64 && s != FJ_OK; countdown++) {
        fj_test_fault_inject(sc->fault, countdown);
        s = fj_gemm_f32(sc->rt, 'N', 'N', t.m, t.n, t.k, t.alpha, g.a, t.lda, g.b, t.ldb,
                        t.beta, g.c, t.ldc);
        fj_test_fault_inject(sc->fault, -1);
        if (s == FJ_OK) break;
        ck_assert_msg(s == FJ_ERR_NO_MEMORY, "%s", fj_last_error());
        packing |= strstr(fj_last_error(), "packing") != NULL;
        ck_assert_msg(memcmp(g.c, g.c0, g.nc * sizeof(float)) == 0,
                      "C written by a call that failed: %s", fj_last_error());
    }
    ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
    ck_assert(packing);
    check_result(&t, &g, g.c, NULL, 0, 0, 0, "scratch after failed allocations");
    bufs_free(&g);
    return NULL;
}

START_TEST(scratch_fault) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    /* Packing buffers of ~600 and ~50 KiB. */
    const scratch_case cases[] = {{rt, 300, FJ_FAULT_ALLOC}, {rt, 100, FJ_FAULT_ALLOC}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gcase t = {.m = cases[i].n, .n = cases[i].n, .k = cases[i].n, .alpha = 1.0f,
                   .lda = cases[i].n + 3, .ldb = cases[i].n + 1, .ldc = cases[i].n + 5};
        gbufs g;
        bufs_make(&t, &g);
        ck_assert_int_eq(fj_gemm_f32(rt, 'N', 'N', t.m, t.n, t.k, 1.0f, g.a, t.lda, g.b, t.ldb,
                                     0.0f, g.c, t.ldc),
                         FJ_OK);
        bufs_free(&g);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, scratch_thread, (void *)&cases[i]), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, bad_input);
    tcase_add_loop_test(tc, edges, 0, 2);
    tcase_add_loop_test(tc, beta_zero_and_k_zero, 0, 2);
    tcase_add_test(tc, threads_bitwise);
    tcase_add_test(tc, wide_blocks);
    tcase_add_test(tc, repeat_shapes);
    tcase_add_test(tc, store_kinds);
    tcase_add_test(tc, memo_refs);
    tcase_add_test(tc, memo_threads);
    tcase_add_test(tc, memo_hold_limit);
    tcase_add_test(tc, runtime_churn);
    tcase_add_test(tc, scratch_fault);
    tcase_add_loop_test(tc, epilogue, 0, 2);
    tcase_add_test(tc, wide_epilogue);
    tcase_add_loop_test(tc, trace_unwind, 0, 2);
    tcase_add_test(tc, fuzz_avx512);
    tcase_add_test(tc, fuzz_avx2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
