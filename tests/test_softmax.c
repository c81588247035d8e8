/* test_softmax.c: fj_softmax_f32 (softmax and log_softmax) against a
 * double reference over random shapes, in place, large/negative/-inf
 * inputs, 1 vs 2 threads bitwise, bad input, and the trap-flag check. */

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"

int main(void);

static uint64_t rng;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static void seed(int salt) {
    const char *e = getenv("FRAMEJIT_TEST_SEED");
    rng = (e && *e ? strtoull(e, NULL, 0) : 0x853c49e6748fea9bull) ^ (uint64_t)salt * 0x9e3779b97f4a7c15ull;
    if (!rng) rng = 1;
}
static long iters(void) { return fjt_iters("FRAMEJIT_FUZZ_ITERS", 200); }
static double max_err;
static double log_(double v) { return log(v); }

/* Roundings in the longest chain of the kernel's row sum: two vector
 * accumulators of L lanes each take every (2L)th term, then they are
 * added and reduced across lanes in log2(L) steps. Summing positive terms,
 * each rounding adds at most 2^-24 of the sum, so this bounds the sum's
 * relative error in units of 2^-24 (a term left out or counted twice
 * costs far more: of the order of 1/cols). */
static double sum_roundings(fj_runtime *rt, int64_t cols) {
    int lanes = fj_runtime_isa(rt) == FJ_ISA_AVX512 ? 16 : 8;
    return (double)((cols + 2 * lanes - 1) / (2 * lanes)) + 1 + (lanes == 16 ? 4 : 3);
}

/* One case; checks against double: softmax within 2.5 ulp (exp, the
 * division and the product) plus the sum's bound, relative, + 1e-9
 * absolute; log_softmax within 4e-7 (1 + |y|) plus the rounding of x - m
 * and the sum's bound, absolute (log s moves by the sum's relative
 * error). */
static void check_case(fj_runtime *rt, int log, int64_t rows, int64_t cols, int64_t lds, int64_t ldd,
                       int inplace, float scale) {
    if (inplace) ldd = lds;
    size_t ns = (size_t)(rows * lds + 1), nd = (size_t)(rows * ldd + 1);
    float *x = malloc(ns * sizeof(float)), *keep = malloc(ns * sizeof(float));
    float *y = inplace ? x : malloc(nd * sizeof(float));
    for (size_t i = 0; i < ns; i++) x[i] = scale * (float)((int)(rnd() % 20001) - 10000) / 10000.0f;
    memcpy(keep, x, ns * sizeof(float));
    if (!inplace) for (size_t i = 0; i < nd; i++) y[i] = 321.0f;
    ck_assert_msg(fj_softmax_f32(rt, log, rows, cols, x, lds, y, ldd) == FJ_OK, "%s", fj_last_error());
    const double sum_ulps = sum_roundings(rt, cols);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = keep + r * lds;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++) m = fmax(m, xr[j]);
        for (int64_t j = 0; j < cols; j++) s += exp((double)xr[j] - m);
        for (int64_t j = 0; j < cols; j++) {
            double w = log ? (double)xr[j] - m - log_(s) : exp((double)xr[j] - m) / s;
            double got = y[r * ldd + j], err = fabs(got - w);
            double tol = log ? 4e-7 * (1 + fabs(w)) + 0x1p-23 * (fabs(xr[j]) + fabs(m)) +
                                   sum_ulps * 0x1p-24
                             : (2.5 + sum_ulps) * 0x1p-24 * w + 1e-9;
            double rel = log ? err / (1 + fabs(w)) : err / (w + 1e-30);
            if (rel > max_err && err > 1e-9) max_err = rel;
            ck_assert_msg(err <= tol, "%s %lldx%lld lds %lld ldd %lld in-place %d: [%lld][%lld] = %.9g, want %.9g",
                          log ? "log_softmax" : "softmax", (long long)rows, (long long)cols,
                          (long long)lds, (long long)ldd, inplace, (long long)r, (long long)j, got, w);
        }
        if (!inplace) for (int64_t j = cols; j < ldd && r * ldd + j < (int64_t)nd; j++) ck_assert(y[r * ldd + j] == 321.0f);
    }
    free(x); free(keep);
    if (!inplace) free(y);
}

START_TEST(random_shapes) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int log = (_i >> 1) & 1;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(_i);
    max_err = 0;
    for (int64_t c = 1; c <= 2 * 16 + 17; c++) check_case(rt, log, 2, c, c + c % 3, c + 1, (int)(c & 1), 10);
    const int64_t primes[] = {1, 3, 13, 61, 127, 509, 1021, 4093};
    for (int i = 0; i < 8; i++) check_case(rt, log, 1 + i % 3, primes[i], primes[i] + 2, primes[i], i & 1, i % 2 ? 80 : 1);
    for (long it = 0; it < iters(); it++) {
        int64_t rows = 1 + rnd() % 20, cols = 1 + rnd() % 2000;
        check_case(rt, log, rows, cols, cols + rnd() % 5, cols + rnd() % 5, rnd() % 3 == 0,
                   (float)(1 + rnd() % 100));
    }
    printf("%s %s: max relative error %.3g\n", log ? "log_softmax" : "softmax",
           isa == FJ_ISA_AVX512 ? "avx512" : "avx2", max_err);
    /* -inf entries (masked attention): exp gives 0, the rest still sums to 1 */
    float row[37];
    for (int j = 0; j < 37; j++) row[j] = j % 3 ? -INFINITY : (float)j;
    float out[37];
    ck_assert_int_eq(fj_softmax_f32(rt, log, 1, 37, row, 37, out, 37), FJ_OK);
    for (int j = 0; j < 37; j++)
        ck_assert(j % 3 ? (log ? out[j] == -INFINITY : out[j] == 0.0f) : isfinite(out[j]));
    fj_runtime_destroy(rt);
}
END_TEST

START_TEST(threads_bitwise) {
    fj_runtime *r1 = fjt_runtime(FJ_ISA_AUTO, 1), *r2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(5);
    int64_t rows = 700, cols = 333;
    float *x = malloc(rows * cols * sizeof(float)), *a = malloc(rows * cols * sizeof(float)),
          *b = malloc(rows * cols * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 37.0f;
    for (int log = 0; log < 2; log++) {
        ck_assert_int_eq(fj_softmax_f32(r1, log, rows, cols, x, cols, a, cols), FJ_OK);
        ck_assert_int_eq(fj_softmax_f32(r2, log, rows, cols, x, cols, b, cols), FJ_OK);
        ck_assert(memcmp(a, b, rows * cols * sizeof(float)) == 0);
    }
    free(x); free(a); free(b);
    fj_runtime_destroy(r1);
    fj_runtime_destroy(r2);
}
END_TEST

START_TEST(bad_input) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = 1.0f, y[i] = 9.0f;
#define BAD(e) do { ck_assert_int_eq((e), FJ_ERR_INVALID_ARG); ck_assert(fj_last_error()[0]); } while (0)
    BAD(fj_softmax_f32(NULL, 0, 2, 4, x, 4, y, 4));
    BAD(fj_softmax_f32(rt, 0, -2, 4, x, 4, y, 4));
    BAD(fj_softmax_f32(rt, 0, 2, -4, x, 4, y, 4));
    BAD(fj_softmax_f32(rt, 0, 2, 4, x, 3, y, 4));
    BAD(fj_softmax_f32(rt, 0, 2, 4, x, 4, y, 3));
    BAD(fj_softmax_f32(rt, 0, 2, 4, NULL, 4, y, 4));
    BAD(fj_softmax_f32(rt, 0, 2, 4, x, 4, NULL, 4));
    BAD(fj_softmax_f32(rt, 1, 2, 4, y + 1, 4, y, 4));
    BAD(fj_softmax_f32(rt, 1, 2, 4, y, 4, y, 5));
    BAD(fj_softmax_f32(rt, 0, INT64_MAX / 2, 4, x, INT64_MAX / 4, y, 4));
    for (int i = 0; i < 64; i++) ck_assert(y[i] == 9.0f);
    ck_assert_int_eq(fj_softmax_f32(rt, 0, 0, 4, NULL, 4, NULL, 4), FJ_OK);
    ck_assert_int_eq(fj_softmax_f32(rt, 0, 3, 0, NULL, 0, NULL, 0), FJ_OK);
    fj_runtime_destroy(rt);
}
END_TEST

typedef struct tr_arg { fj_runtime *rt; int log; const float *x; float *y; fj_status s; } tr_arg;
static void tr_body(void *p) {
    tr_arg *a = p;
    a->s = fj_softmax_f32(a->rt, a->log, 2, 16 * 4 + 19, a->x, 90, a->y, 90);
    __asm__ volatile("" ::: "memory");
}
START_TEST(trace) {
    if (!fjt_can_trace("softmax trace")) return;
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    float x[180], y[180];
    for (int i = 0; i < 180; i++) x[i] = (float)(i % 13) - 6.0f;
    tr_arg a = {rt, _i >> 1, x, y, FJ_ERR_INVALID_ARG};
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    int ok = fjt_trace_kernel(tr_body, &a, &o, r);
    ck_assert_int_eq(a.s, FJ_OK);
    ck_assert_msg(ok, "%s", r->msg);
    ck_assert_int_gt(r->kernel_steps, 0);
    ck_assert_int_eq(r->fp_miss, 2 * r->entries + r->rets);
    free(r);
    fj_runtime_destroy(rt);
}
END_TEST

int main(void) {
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    Suite *s = suite_create("softmax");
    TCase *t = tcase_create("softmax");
    tcase_set_timeout(t, 240);
    tcase_add_loop_test(t, random_shapes, 0, 4);
    tcase_add_test(t, threads_bitwise);
    tcase_add_test(t, bad_input);
    tcase_add_loop_test(t, trace, 0, 4);
    suite_add_tcase(s, t);
    return fjt_run_suite(s);
}
