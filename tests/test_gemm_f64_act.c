/* test_gemm_f64_act.c: every f64 handle post-op against a long-double reference, in ulps. */
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

/* The handle computes C = 1 * A B + 1 * C0 (+ bias 0) with k = 1, A = 1,
 * B = 0: C is C0 exactly (-0 becomes +0), so the post-op sees known values
 * and its error is measured alone, in ulps of the double result. */

#define GELU_C1 1.5957691216057307117597842397375
#define GELU_C2 0.071354816272600469681

typedef struct opcase {
    fj_eltwise_op op;
    double a, b;
    double lo, hi;   /* where the random arguments mostly fall */
    double ulps;     /* the bound, as in include/framejit.h */
} opcase;

static const opcase cases[] = {
    {FJ_ELT_RELU, 0, 0, -10, 10, 0.5},
    {FJ_ELT_RELU, -0.25, 0, -10, 10, 0.5},
    {FJ_ELT_LEAKY_RELU, 0.125, 0, -10, 10, 0.5},
    {FJ_ELT_LEAKY_RELU, 3.0, 0, -10, 10, 0.5},
    {FJ_ELT_LEAKY_RELU, -0.5, 0, -10, 10, 0.5},
    {FJ_ELT_LEAKY_RELU, -3.0, 0, -10, 10, 0.5},
    {FJ_ELT_CLIP, -0.75, 0.5, -2, 2, 0.5},
    {FJ_ELT_LINEAR, 1.5, -0.25, -10, 10, 0.5},
    {FJ_ELT_ABS, 0, 0, -10, 10, 0.5},
    {FJ_ELT_SQUARE, 0, 0, -1e5, 1e5, 0.5},
    {FJ_ELT_SQRT, 0, 0, -1, 1e6, 0.5},
    {FJ_ELT_EXP, 0, 0, -750, 712, 2.0},
    {FJ_ELT_LOG, 0, 0, -1, 1e4, 2.0},
    {FJ_ELT_TANH, 0, 0, -22, 22, 3.0},
    {FJ_ELT_SIGMOID, 0, 0, -760, 40, 2.5},
    {FJ_ELT_SWISH, 1.0, 0, -760, 760, 3.5},
    {FJ_ELT_SWISH, -1.5, 0, -500, 500, 3.5},
    {FJ_ELT_SWISH, 0.0, 0, -10, 10, 3.5},
    {FJ_ELT_GELU_TANH, 0, 0, -40, 10, 3.5},
    {FJ_ELT_GELU_ERF, 0, 0, -42, 10, 7.0},
    {FJ_ELT_HARDSWISH, 0, 0, -8, 8, 2.5},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const double specials[] = {
    0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, -NAN, DBL_MAX, -DBL_MAX, DBL_MIN,
    -DBL_MIN, 4.9406564584124654e-324, -4.9406564584124654e-324, 1e-310, -1e-310, 709.78,
    709.79, 710.0, -708.4, -745.1, -745.2, -746.0, 19.0, 19.5, -20.0, 21.0, 3.0, -3.0, 1e-20,
    -1e-20, 0.5, -0.5, 36.0, -36.0, 1e300, -1e300, 2.9802322387695312e-08,
};

static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static double value(const opcase *c) {
    int r = (int)rnd_to(100);
    if (r < 45) return c->lo + (c->hi - c->lo) * urand();
    if (r < 60) return 4 * urand() - 2;
    if (r < 75) return (rnd() & 1 ? -1 : 1) * ldexp(1 + urand(), (int)rnd_to(80) - 64);
    if (r < 85) {
        uint64_t u = rnd();
        double d;
        memcpy(&d, &u, 8);
        return isfinite(d) ? d : 1.0;
    }
    return specials[rnd_to((int64_t)(sizeof specials / sizeof specials[0]))];
}

/* x sigmoid(z) with the kernel's form: xc e / (1 + e) below 0, x / (1 + e)
 * above, e = e^-|z|, xc = x clamped to +-DBL_MAX. */
static long double xsig(double x, double z) {
    double xc = fmin(fmax(x, -DBL_MAX), DBL_MAX);
    if (isnan(x) || isnan(z)) return NAN;
    long double e = expl(-fabsl((long double)z));
    return z < 0 ? (long double)xc * e / (1 + e) : (long double)x / (1 + e);
}

static long double ref(const opcase *c, double x) {
    long double X = x;
    switch (c->op) {
    case FJ_ELT_RELU: case FJ_ELT_LEAKY_RELU:
        /* plain relu is max(x, 0): -inf gives 0, not 0 * -inf */
        if (c->a == 0 && !isnan(x)) return x > 0 ? X : 0;
        return x > 0 ? X : c->a * X;
    case FJ_ELT_CLIP: return isnan(x) ? NAN : x < c->a ? c->a : x > c->b ? c->b : X;
    case FJ_ELT_LINEAR: return c->a * X + c->b;
    case FJ_ELT_ABS: return fabsl(X);
    case FJ_ELT_SQUARE: return X * X;
    case FJ_ELT_SQRT: return sqrtl(X);
    case FJ_ELT_EXP: return expl(X);
    case FJ_ELT_LOG: return logl(X);
    case FJ_ELT_TANH: return tanhl(X);
    case FJ_ELT_SIGMOID: return xsig(1.0, x);
    case FJ_ELT_SWISH: {
        double xc = fmin(fmax(x, -DBL_MAX), DBL_MAX);
        return xsig(x, xc * c->a);
    }
    case FJ_ELT_GELU_TANH: {
        /* v as the kernel rounds it (the definition's error of a rounded
         * argument is the caller's, as for swish's alpha x) */
        double xc = fmin(fmax(x, -DBL_MAX), DBL_MAX);
        return xsig(x, xc * fma(xc * xc, GELU_C2, GELU_C1));
    }
    case FJ_ELT_GELU_ERF:
        if (isinf(x)) return x > 0 ? X : 0;
        return X * erfcl(-X / sqrtl(2)) / 2;
    case FJ_ELT_HARDSWISH:
        if (x <= -3) return 0;
        return X * fminl(fmaxl(X + 3, 0), 6) / 6;
    default: return NAN;
    }
}

/* |got - r| in units of the last place of r rounded to double (the
 * denormal ulp below DBL_MIN); 0 when both are the same NaN/inf/zero. */
static double ulp_err(double got, long double r) {
    double rd = (double)r;
    if (isnan(rd)) return isnan(got) ? 0 : INFINITY;
    if (isinf(rd) || isinf(got)) return got == rd ? 0 : INFINITY;
    int e = rd == 0 ? -1022 : ilogb(rd);
    if (e < -1022) e = -1022;
    return (double)(fabsl((long double)got - r) / ldexpl(1, e - 52));
}

static const char *op_name(fj_eltwise_op op) {
    static const char *n[] = {"none", "relu", "leaky_relu", "clip", "linear", "abs", "square",
                              "sqrt", "exp", "log", "tanh", "sigmoid", "gelu_tanh", "gelu_erf",
                              "swish", "hardswish"};
    return (unsigned)op < FJ_ELT__COUNT ? n[op] : "?";
}

/* Loop index: bit 0 the ISA, the rest the op case. */
START_TEST(every_op) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    const opcase *c = &cases[_i >> 1];
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(700 + (uint64_t)_i);
    double worst = 0, worst_x = 0;
    for (int it = 0; it < 12; it++) {
        int64_t m = 1 + rnd_to(40), n = 1 + rnd_to(70), ldc = n + rnd_to(5);
        int has_bias = it & 1;
        double *a = malloc((size_t)m * sizeof(double)), *b = calloc((size_t)n, sizeof(double));
        double *bias = calloc((size_t)n, sizeof(double));
        double *c0 = malloc((size_t)(m * ldc) * sizeof(double));
        double *cc = malloc((size_t)(m * ldc) * sizeof(double));
        ck_assert(a && b && bias && c0 && cc);
        for (int64_t i = 0; i < m; i++) a[i] = 1.0;
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = value(c);
        memcpy(cc, c0, (size_t)(m * ldc) * sizeof(double));
        fj_gemm_f64_desc d = {'N', 'N', m, n, 1, 1, n, ldc, 1.0, 1.0, has_bias, c->op, c->a, c->b};
        fj_gemm *h = NULL;
        ck_assert_msg(fj_gemm_f64_create(rt, &d, &h) == FJ_OK, "%s: %s", op_name(c->op),
                      fj_last_error());
        ck_assert_int_eq(fj_gemm_f64_execute(h, a, b, bias, cc), FJ_OK);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                double x = c0[i * ldc + j], got = cc[i * ldc + j];
                if (j >= n) {
                    ck_assert(memcmp(&got, &x, 8) == 0);
                    continue;
                }
                if (x == 0) x = 0.0; /* 0 + -0 */
                long double r = ref(c, x);
                double e = ulp_err(got, r);
                ck_assert_msg(e <= c->ulps, "%s(%g, %g) isa %d: f(%.17g) = %.17g, reference "
                              "%.21Lg (%.3g ulp, bound %g)", op_name(c->op), c->a, c->b, (int)isa,
                              x, got, r, e, c->ulps);
                if (e > worst) worst = e, worst_x = x;
            }
        fj_gemm_destroy(h);
        free(a);
        free(b);
        free(bias);
        free(c0);
        free(cc);
    }
    if (getenv("FJ_TEST_VERBOSE"))
        fprintf(stderr, "%-10s %6g isa %d: max %.3f ulp at %.17g\n", op_name(c->op), c->a,
                (int)isa, worst, worst_x);
    fj_runtime_destroy(rt);
}
END_TEST

/* The same through a real product and several threads: the result
 * matches the single-threaded handle bit for bit. */
START_TEST(threads_agree) {
    fj_isa isa = _i & 1 ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(800 + (uint64_t)_i);
    const int64_t m = 150, n = 77, k = 33;
    double *a = malloc(m * k * sizeof(double)), *b = malloc(k * n * sizeof(double));
    double *bias = malloc(n * sizeof(double)), *c1 = malloc(m * n * sizeof(double));
    double *c2 = malloc(m * n * sizeof(double));
    for (int64_t i = 0; i < m * k; i++) a[i] = 2 * urand() - 1;
    for (int64_t i = 0; i < k * n; i++) b[i] = 2 * urand() - 1;
    for (int64_t i = 0; i < n; i++) bias[i] = urand();
    for (size_t ci = 0; ci < NCASES; ci++) {
        const opcase *c = &cases[ci];
        fj_gemm_f64_desc d = {'N', 'N', m, n, k, k, n, n, 1.25, 0.0, 1, c->op, c->a, c->b};
        fj_gemm *h1 = NULL, *h2 = NULL;
        ck_assert_int_eq(fj_gemm_f64_create(rt, &d, &h1), FJ_OK);
        ck_assert_int_eq(fj_gemm_f64_create(rt2, &d, &h2), FJ_OK);
        ck_assert_int_eq(fj_gemm_f64_execute(h1, a, b, bias, c1), FJ_OK);
        ck_assert_int_eq(fj_gemm_f64_execute(h2, a, b, bias, c2), FJ_OK);
        ck_assert_msg(!memcmp(c1, c2, m * n * sizeof(double)), "%s: threads differ",
                      op_name(c->op));
        fj_gemm_destroy(h1);
        fj_gemm_destroy(h2);
    }
    free(a);
    free(b);
    free(bias);
    free(c1);
    free(c2);
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* Every op makes a handle; a value past the list is refused. */
START_TEST(all_ops) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    for (int op = 0; op <= FJ_ELT__COUNT; op++) {
        fj_gemm_f64_desc d = {'N', 'N', 8, 8, 8, 8, 8, 8, 1.0, 0.0, 0, (fj_eltwise_op)op, 0.5, 1};
        fj_gemm *h = NULL;
        ck_assert_int_eq(fj_gemm_f64_create(rt, &d, &h),
                         op < FJ_ELT__COUNT ? FJ_OK : FJ_ERR_INVALID_ARG);
        fj_gemm_destroy(h);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm_f64_act");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, every_op, 0, (int)(2 * NCASES));
    tcase_add_loop_test(t, threads_agree, 0, 2);
    tcase_add_test(t, all_ops);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
