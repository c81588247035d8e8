/* test_gemm_f64.c: fj_gemm_f64 and its handles against a long-double reference on random
 * shapes, strides, transposes, alpha/beta, NaN/Inf and blockings, on AVX-512 and AVX2. */
#undef FJ_TEST

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "gemmcase.h"
#include "runtime/prims/gemm_int.h"

static const int64_t dims[] = {0,  1,  2,  3,  4,  5,  7,  8,  9,  13, 14, 15, 16, 17,
                               23, 24, 28, 29, 31, 32, 33, 41, 47, 48, 63, 64, 65, 97};

/* Blocking knobs, as in test_gemm.c: in-place and packed operands, small
 * blocks, other tiles, threads from tiny problems on. */
static const char *tunes512[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=28,nc=32,mt=1",
    "da=0,db=0,kc=16,mc=28,nc=32,mt=1,shared=1",
    "da=1,db=0,kc=24,mc=14,nc=16,mt=1,shared=1",
    "da=0,db=0,kc=24,mc=14,mt=1,shared=1,rpt=16",
    "da=1,db=1,kc=24,mc=14,nc=16,mt=1",
    "mr=6,nv=4,da=0,db=0,mt=1",
    "mr=8,nv=3,kc=40,unroll=4",
    "mr=5,nv=1,unroll=1,kc=20,pfc=0",
    "mr=14,nv=2,da=0,db=0,pfb=512,unroll=2,mt=1",
    "bcopy=0,da=0,db=0,kc=24,mc=28",
    "bpf=1,pfb=256,kc=32,mc=14,nc=32",
};
static const char *tunes2[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=12,nc=16,mt=1",
    "da=0,db=0,kc=16,mc=12,nc=16,mt=1,shared=1",
    "da=1,db=1,kc=24,mc=6,nc=8,mt=1",
    "da=1,db=0,kc=8,mt=1",
    "mr=3,nv=3,da=0,db=0,mt=1",
    "mr=12,nv=1,kc=40,unroll=4",
};

static const gcase_lists lists = {dims, sizeof dims / sizeof dims[0], tunes512, tunes2,
                                  sizeof tunes512 / sizeof tunes512[0],
                                  sizeof tunes2 / sizeof tunes2[0], 1, NULL, 0};

static void fuzz(fj_isa isa, uint64_t salt) { gcase_fuzz(isa, salt, &lists, run_dcase); }

START_TEST(fuzz_avx512) { fuzz(FJ_ISA_AVX512, 101); }
END_TEST
START_TEST(fuzz_avx2) { fuzz(FJ_ISA_AVX2, 102); }
END_TEST

/* Larger shapes (several k, m and n blocks with the default knobs), on
 * two threads bitwise as on one. */
START_TEST(large) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt1 = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt1) return;
    static const int64_t shapes[][3] = {{300, 257, 700}, {129, 600, 1100}, {513, 64, 300}};
    seed(200 + (uint64_t)_i);
    for (int s = 0; s < 3; s++) {
        gcase t = {.ta = _i >> 1 & 1, .tb = _i >> 2 & 1, .m = shapes[s][0], .n = shapes[s][1],
                   .k = shapes[s][2], .alpha = 0.75, .beta = s == 1 ? 0.0 : -0.5};
        t.lda = t.ta ? t.m : t.k;
        t.ldb = t.tb ? t.k : t.n;
        t.ldc = t.n + 3;
        run_dcase(rt1, rt2, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* beta = 0 never reads C; k = 0 scales C by beta (alpha not applied, so
 * an infinite alpha gives no NaN); m or n = 0 touches nothing. */
START_TEST(degenerate) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    double a[12], b[12], c[12];
    for (int i = 0; i < 12; i++) a[i] = b[i] = 1.0, c[i] = NAN;
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 3, 4, 3, 1.0, a, 3, b, 4, 0.0, c, 4), FJ_OK);
    for (int i = 0; i < 12; i++) ck_assert(c[i] == 3.0);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 3, 4, 0, INFINITY, a, 1, b, 4, 2.0, c, 4), FJ_OK);
    for (int i = 0; i < 12; i++) ck_assert(c[i] == 6.0);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 0, 4, 3, 1.0, NULL, 3, NULL, 4, 0.0, NULL, 4),
                     FJ_OK);
    ck_assert_int_eq(fj_gemm_f64(rt, 'T', 'T', 3, 0, 3, 1.0, NULL, 3, NULL, 3, 0.0, NULL, 1),
                     FJ_OK);
    for (int i = 0; i < 12; i++) ck_assert(c[i] == 6.0);
    fj_runtime_destroy(rt);
}
END_TEST

/* Bad input: an error with a message, C as it was. */
START_TEST(errors) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    double a[64], b[64], c[64], keep[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = c[i] = keep[i] = i;
    ck_assert_int_eq(fj_gemm_f64(NULL, 'N', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_f64(rt, 'X', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "fj_gemm_f64"));
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'C', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', -1, 2, 2, 1, a, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 2, 2, 3, 1, a, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG); /* lda < k */
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'T', 2, 2, 3, 1, a, 3, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG); /* ldb < k */
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 2, 3, 2, 1, a, 2, b, 3, 0, c, 2),
                     FJ_ERR_INVALID_ARG); /* ldc < n */
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 2, 2, 2, 1, NULL, 2, b, 2, 0, c, 2),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, NULL, 2),
                     FJ_ERR_INVALID_ARG);
    /* C overlapping A or B, by one double (8 bytes, not 4) */
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 4, 4, 4, 1, a, 4, b, 4, 0, a + 15, 4),
                     FJ_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "overlaps a"));
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 4, 4, 4, 1, a, 4, c, 4, 0, c + 15, 4),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 4, 4, 4, 1, a, 4, b, 4, 0, a + 16, 4), FJ_OK);
    /* interleaved columns of one array: no shared element, fine */
    ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 4, 4, 4, 1, b, 8, b + 4, 8, 0, c, 4), FJ_OK);
    for (int i = 0; i < 16; i++) ck_assert(b[i] == keep[i]);
    fj_runtime_destroy(rt);
}
END_TEST

/* The f64 post-ops (x: C after alpha, beta and the bias). */
static long double act_ref(fj_eltwise_op op, long double x, double al, double be) {
    switch (op) {
    case FJ_ELT_RELU: case FJ_ELT_LEAKY_RELU: return x > 0 ? x : al * x;
    case FJ_ELT_CLIP: return x < al ? al : x > be ? be : x;
    case FJ_ELT_LINEAR: return al * x + be;
    case FJ_ELT_SQUARE: return x * x;
    default: return x;
    }
}

static const struct {
    fj_eltwise_op op;
    double a, b;
} acts[] = {
    {0, 0, 0},
    {FJ_ELT_RELU, 0, 0},
    {FJ_ELT_LEAKY_RELU, 0.125, 0},
    {FJ_ELT_LEAKY_RELU, 3.0, 0},
    {FJ_ELT_CLIP, -0.75, 0.5},
    {FJ_ELT_LINEAR, 1.5, -0.25},
    {FJ_ELT_SQUARE, 0, 0},
};
#define NACTS (sizeof acts / sizeof acts[0])

/* got = act(alpha*op(A)op(B) + beta*C0 + bias) within the GEMM's
 * tolerance carried through the op. */
static void dcheck_act(const gcase *t, const dbufs *g, const double *got, const double *bias,
                       fj_eltwise_op op, double al, double be, const char *what) {
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < t->n; j++) {
            long double abs_s, s = ddot_ref(t, g, i, j, &abs_s);
            long double ref = t->alpha * s, tol = fabsl((long double)t->alpha) * abs_s;
            if (t->k == 0) ref = tol = 0;
            if (t->beta != 0) {
                ref += (long double)t->beta * g->c0[i * t->ldc + j];
                tol += fabsl((long double)t->beta * g->c0[i * t->ldc + j]);
            }
            if (bias) {
                ref += bias[j];
                tol += fabsl((long double)bias[j]);
            }
            tol = tol * (long double)(t->k + 4) * 2.5L * DBL_EPSILON + 1e-300L;
            long double r = act_ref(op, ref, al, be);
            if (op == FJ_ELT_SQUARE) tol = tol * (2 * fabsl(ref) + tol);
            else if (op == FJ_ELT_LINEAR || op == FJ_ELT_LEAKY_RELU) tol *= fabsl((long double)al) + 1;
            tol += fabsl(r) * 2 * DBL_EPSILON;
            double v = got[i * t->ldc + j];
            ck_assert_msg(fabsl((long double)v - r) <= tol, "%s: C(%lld,%lld) = %.17g, reference "
                          "%.17Lg (tolerance %.3Lg)", what, (long long)i, (long long)j, v, r, tol);
        }
}

/* Handles: the fused bias and post-ops, executed twice; the other ops are
 * refused; the element types are not mixed. */
START_TEST(handles) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(300 + (uint64_t)_i);
    for (int it = 0; it < 84; it++) {
        gcase t;
        gcase_random(&t, &lists, isa == FJ_ISA_AVX512, it);
        t.special = 0;
        t.tune = NULL;
        if (it % 10 == 9) {
            t.m = 200 + rnd_to(100);
            t.k = 300;
            t.lda = t.ta ? t.m : t.k;
            t.ldb = t.tb ? t.k : t.n;
            if (t.ldb < 1) t.ldb = 1;
        }
        int has_bias = it & 1;
        fj_eltwise_op op = acts[it % NACTS].op;
        double pa = acts[it % NACTS].a, pb = acts[it % NACTS].b;
        char what[320];
        dcase_str(&t, what, sizeof what);
        snprintf(what + strlen(what), sizeof what - strlen(what), " bias=%d op=%d(%g,%g)",
                 has_bias, (int)op, pa, pb);
        fj_gemm_f64_desc d = {t.ta ? 'T' : 'N', t.tb ? 't' : 'n', t.m, t.n, t.k, t.lda, t.ldb,
                              t.ldc, t.alpha, t.beta, has_bias, op, pa, pb};
        fj_gemm *h = NULL, *h2 = NULL;
        ck_assert_msg(fj_gemm_f64_create(rt, &d, &h) == FJ_OK, "%s: %s", what, fj_last_error());
        ck_assert(fj_gemm_f64_create(rt2, &d, &h2) == FJ_OK);
        dbufs g;
        dbufs_make(&t, &g);
        for (int rep = 0; rep < 2; rep++) {
            memcpy(g.c, g.c0, g.nc * sizeof(double));
            ck_assert_msg(fj_gemm_f64_execute(h, g.a, g.b, g.bias, g.c) == FJ_OK, "%s: %s", what,
                          fj_last_error());
        }
        if (op) dcheck_act(&t, &g, g.c, has_bias ? g.bias : NULL, op, pa, pb, what);
        else dcheck(&t, &g, g.c, has_bias ? g.bias : NULL, what);
        for (int64_t i = 0; i < t.m; i++)
            for (int64_t j = t.n; j < t.ldc; j++)
                ck_assert_msg(g.c[i * t.ldc + j] == GEMMCASE_PAD, "%s: padding written", what);
        double *c2 = malloc(g.nc * sizeof(double));
        memcpy(c2, g.c0, g.nc * sizeof(double));
        ck_assert(fj_gemm_f64_execute(h2, g.a, g.b, g.bias, c2) == FJ_OK);
        ck_assert_msg(!memcmp(c2, g.c, g.nc * sizeof(double)), "%s: threads differ", what);
        if (t.m && t.n)
            ck_assert_int_eq(fj_gemm_execute(h, (const float *)g.a, (const float *)g.b, NULL,
                                             (float *)c2), FJ_ERR_INVALID_ARG);
        free(c2);
        dbufs_free(&g);
        fj_gemm_destroy(h);
        fj_gemm_destroy(h2);
    }
    /* NaN through relu and clip stays NaN */
    {
        double a[4] = {NAN, 1, 1, 1}, b[4] = {1, 1, 1, 1}, c[4];
        for (int op = 0; op < 2; op++) {
            fj_gemm_f64_desc d = {'N', 'N', 2, 2, 2, 2, 2, 2, 1.0, 0.0, 0,
                                  op ? FJ_ELT_CLIP : FJ_ELT_RELU, op ? -1.0 : 0.0, 1.0};
            fj_gemm *h = NULL;
            ck_assert_int_eq(fj_gemm_f64_create(rt, &d, &h), FJ_OK);
            ck_assert_int_eq(fj_gemm_f64_execute(h, a, b, NULL, c), FJ_OK);
            ck_assert(isnan(c[0]) && isnan(c[1]) && c[2] == (op ? 1.0 : 2.0));
            fj_gemm_destroy(h);
        }
    }
    /* not an op: refused */
    {
        fj_gemm_f64_desc d = {'N', 'N', 8, 8, 8, 8, 8, 8, 1.0, 0.0, 0, FJ_ELT__COUNT, -0.5, 0};
        fj_gemm *h = NULL;
        ck_assert_int_eq(fj_gemm_f64_create(rt, &d, &h), FJ_ERR_INVALID_ARG);
        ck_assert_ptr_null(h);
    }
    fj_gemm *h = NULL;
    fj_gemm_desc d32 = {'N', 'N', 8, 8, 8, 8, 8, 8, 1.0f, 0.0f, 0, 0, 0, 0};
    ck_assert_int_eq(fj_gemm_create(rt, &d32, &h), FJ_OK);
    double x[64] = {0}, y[64] = {0}, z[64] = {0};
    ck_assert_int_eq(fj_gemm_f64_execute(h, x, y, NULL, z), FJ_ERR_INVALID_ARG);
    fj_gemm_destroy(h);
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* f32 and f64 calls alternating on one thread with the same shape: the
 * per-thread memo tells them apart. */
START_TEST(memo_mixed) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    float af[16 * 16], bf[16 * 16], cf[16 * 16];
    double ad[16 * 16], bd[16 * 16], cd[16 * 16];
    for (int i = 0; i < 256; i++) af[i] = bf[i] = 0.5f, ad[i] = bd[i] = 0.25;
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(fj_gemm_f32(rt, 'N', 'N', 16, 16, 16, 1, af, 16, bf, 16, 0, cf, 16),
                         FJ_OK);
        ck_assert_int_eq(fj_gemm_f64(rt, 'N', 'N', 16, 16, 16, 1, ad, 16, bd, 16, 0, cd, 16),
                         FJ_OK);
        for (int i = 0; i < 256; i++) ck_assert(cf[i] == 4.0f && cd[i] == 1.0);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm_f64");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, fuzz_avx512);
    tcase_add_test(t, fuzz_avx2);
    tcase_add_loop_test(t, large, 0, 8);
    tcase_add_loop_test(t, degenerate, 0, 2);
    tcase_add_test(t, errors);
    tcase_add_loop_test(t, handles, 0, 2);
    tcase_add_test(t, memo_mixed);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
