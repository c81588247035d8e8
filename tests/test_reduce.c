/* test_reduce.c: fj_reduce_f32 against a double reference over random
 * shapes (every tail width, primes, ld > cols, unaligned), special values,
 * 1 vs 2 threads bitwise, bad input, and every kernel under the trap-flag
 * unwinding check. FRAMEJIT_FUZZ_ITERS / FRAMEJIT_TEST_SEED as elsewhere. */

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
    rng = (e && *e ? strtoull(e, NULL, 0) : 0x2545f4914f6cdd1dull) ^ (uint64_t)salt * 0x9e3779b97f4a7c15ull;
    if (!rng) rng = 1;
}
static long iters(void) { return fjt_iters("FRAMEJIT_FUZZ_ITERS", 200); }
static const char *names[] = {"?", "sum", "max", "min", "mean", "l2"};

/* Reference in double; *tol: the allowed error (float summation of cols
 * terms in a tree of 4 x lanes partial sums: cols * 2^-24 * sum|x|). */
static double ref(int op, const float *x, int64_t n, double *tol) {
    double s = 0, a = 0, m = op == FJ_REDUCE_MAX ? -INFINITY : INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) { nan = 1; continue; }
        s += op == FJ_REDUCE_L2 ? (double)x[i] * x[i] : x[i];
        a += op == FJ_REDUCE_L2 ? (double)x[i] * x[i] : fabs(x[i]);
        if (op == FJ_REDUCE_MAX && x[i] > m) m = x[i];
        if (op == FJ_REDUCE_MIN && x[i] < m) m = x[i];
    }
    double eps = ldexp(1.0, -23) * (double)(n / 64 + 8);
    switch (op) {
    case FJ_REDUCE_MAX: case FJ_REDUCE_MIN: *tol = 0; return m;
    case FJ_REDUCE_SUM: *tol = eps * a; return nan ? NAN : s;
    case FJ_REDUCE_MEAN: *tol = eps * a / (double)n + fabs(s / (double)n) * 0x1p-22; return nan ? NAN : s / (double)n;
    /* L2 sums squares in float (documented): past FLT_MAX it is inf, and
     * each square is rounded to a multiple of 2^-149 at worst (tiny x). */
    default:
        *tol = 0.5 * eps * sqrt(a) + sqrt(s) * 0x1p-22 + sqrt((double)n * 0x1p-149);
        return nan ? NAN : s > FLT_MAX ? INFINITY : sqrt(s);
    }
}

static void check_case(fj_runtime *rt, int op, int64_t rows, int64_t cols, int64_t ld, int off, int special) {
    size_t cap = (size_t)(rows ? (rows - 1) * ld + cols : 0) + off + 1;
    float *buf = malloc(cap * sizeof(float)), *x = buf + off;
    float *dst = malloc((size_t)(rows + 2) * sizeof(float));
    for (size_t i = 0; i < cap; i++) buf[i] = (float)((int)(rnd() % 20001) - 10000) / 997.0f;
    if (special)
        for (int i = 0; i < 4 && cap > (size_t)off; i++) {
            const float sv[] = {NAN, INFINITY, -INFINITY, 1e30f, -0.0f, FLT_TRUE_MIN};
            x[rnd() % (cap - (size_t)off)] = sv[rnd() % 6];
        }
    dst[rows] = dst[rows + 1] = 777.0f;
    ck_assert_msg(fj_reduce_f32(rt, (fj_reduce_op)op, rows, cols, x, ld, dst) == FJ_OK, "%s", fj_last_error());
    for (int64_t r = 0; r < rows; r++) {
        double tol, w = ref(op, x + r * ld, cols, &tol);
        int ok = isnan(w) ? isnan(dst[r]) : (isinf(w) || isinf(dst[r])) ? dst[r] == (float)w
                                                                          : fabs(dst[r] - w) <= tol + fabs(w) * 0x1p-23;
        ck_assert_msg(ok, "%s rows %lld cols %lld ld %lld: row %lld = %.9g, want %.9g (tol %g)", names[op],
                      (long long)rows, (long long)cols, (long long)ld, (long long)r, dst[r], w, tol);
    }
    ck_assert(dst[rows] == 777.0f && dst[rows + 1] == 777.0f);
    free(buf);
    free(dst);
}

START_TEST(random_shapes) {
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    int op = (_i >> 1) + 1;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(_i);
    for (int64_t c = 0; c <= 4 * 16 + 17; c++) check_case(rt, op, 3, c, c + (c % 3), (int)(c % 5), 0);
    const int64_t primes[] = {1, 2, 3, 7, 13, 31, 61, 127, 509, 1021, 2039, 4093};
    for (int i = 0; i < 12; i++) check_case(rt, op, 1 + i % 4, primes[i], primes[i] + i, i % 3, i & 1);
    for (long it = 0; it < iters(); it++) {
        int64_t rows = rnd() % 40, cols = rnd() % 3000;
        check_case(rt, op, rows, cols, cols + rnd() % 9, (int)(rnd() % 16), rnd() % 4 == 0);
    }
    fj_runtime_destroy(rt);
}
END_TEST

START_TEST(threads_bitwise) {
    fj_runtime *r1 = fjt_runtime(FJ_ISA_AUTO, 1), *r2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(99);
    int64_t rows = 3001, cols = 517, ld = 520;
    float *x = malloc((size_t)(rows * ld) * sizeof(float)), *a = malloc(rows * sizeof(float)),
          *b = malloc(rows * sizeof(float));
    for (int64_t i = 0; i < rows * ld; i++) x[i] = (float)((int)(rnd() % 20001) - 10000) / 7.0f;
    for (int op = 1; op < FJ_REDUCE__COUNT; op++) {
        ck_assert_int_eq(fj_reduce_f32(r1, (fj_reduce_op)op, rows, cols, x, ld, a), FJ_OK);
        ck_assert_int_eq(fj_reduce_f32(r2, (fj_reduce_op)op, rows, cols, x, ld, b), FJ_OK);
        ck_assert_msg(memcmp(a, b, rows * sizeof(float)) == 0, "%s: threads change the result", names[op]);
        float sm1[3], sm2[3];
        ck_assert_int_eq(fj_reduce_f32(r1, (fj_reduce_op)op, 3, cols, x + 5, ld, sm1), FJ_OK);
        ck_assert_int_eq(fj_reduce_f32(r2, (fj_reduce_op)op, 3, cols, x + 5, ld, sm2), FJ_OK);
        ck_assert(memcmp(sm1, sm2, sizeof sm1) == 0);
    }
    free(x); free(a); free(b);
    fj_runtime_destroy(r1);
    fj_runtime_destroy(r2);
}
END_TEST

START_TEST(empty_and_bad) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    float x[64] = {0}, d[8];
    for (int i = 0; i < 8; i++) d[i] = 5.0f;
    const float want[] = {0, 0, -INFINITY, INFINITY, NAN, 0};
    for (int op = 1; op < FJ_REDUCE__COUNT; op++) {
        ck_assert_int_eq(fj_reduce_f32(rt, (fj_reduce_op)op, 2, 0, NULL, 0, d), FJ_OK);
        ck_assert(isnan(want[op]) ? isnan(d[0]) : d[0] == want[op]);
    }
    for (int i = 0; i < 8; i++) d[i] = 5.0f;
#define BAD(e) do { ck_assert_int_eq((e), FJ_ERR_INVALID_ARG); ck_assert(fj_last_error()[0]); } while (0)
    BAD(fj_reduce_f32(NULL, FJ_REDUCE_SUM, 2, 4, x, 4, d));
    BAD(fj_reduce_f32(rt, (fj_reduce_op)0, 2, 4, x, 4, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE__COUNT, 2, 4, x, 4, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, -1, 4, x, 4, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, 2, -4, x, 4, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, 2, 4, x, 3, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, 2, 4, NULL, 4, d));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, 2, 4, x, 4, NULL));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, 2, 4, x, 4, x + 3));
    BAD(fj_reduce_f32(rt, FJ_REDUCE_SUM, INT64_MAX / 2, 4, x, INT64_MAX / 4, d));
    for (int i = 0; i < 8; i++) ck_assert(d[i] == 5.0f);
    ck_assert_int_eq(fj_reduce_f32(rt, FJ_REDUCE_SUM, 0, 4, NULL, 4, NULL), FJ_OK);
    fj_runtime_destroy(rt);
}
END_TEST

typedef struct tr_arg { fj_runtime *rt; int op; const float *x; float *d; fj_status s; } tr_arg;
static void tr_body(void *p) {
    tr_arg *a = p;
    a->s = fj_reduce_f32(a->rt, (fj_reduce_op)a->op, 2, 16 * 5 + 3, a->x, 90, a->d);
    __asm__ volatile("" ::: "memory");
}
START_TEST(trace) {
    if (!fjt_can_trace("reduce trace")) return;
    fj_isa isa = (_i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    float x[180], d[2];
    for (int i = 0; i < 180; i++) x[i] = (float)(i % 13) - 6.0f;
    tr_arg a = {rt, (_i >> 1) + 1, x, d, FJ_ERR_INVALID_ARG};
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    int ok = fjt_trace_kernel(tr_body, &a, &o, r);
    ck_assert_int_eq(a.s, FJ_OK);
    ck_assert_msg(ok, "%s: %s", names[a.op], r->msg);
    ck_assert_int_gt(r->kernel_steps, 0);
    ck_assert_int_eq(r->fp_miss, 2 * r->entries + r->rets);
    free(r);
    fj_runtime_destroy(rt);
}
END_TEST

int main(void) {
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    Suite *s = suite_create("reduce");
    TCase *t = tcase_create("reduce");
    tcase_set_timeout(t, 240);
    tcase_add_loop_test(t, random_shapes, 0, 2 * (FJ_REDUCE__COUNT - 1));
    tcase_add_test(t, threads_bitwise);
    tcase_add_test(t, empty_and_bad);
    tcase_add_loop_test(t, trace, 0, 2 * (FJ_REDUCE__COUNT - 1));
    suite_add_tcase(s, t);
    return fjt_run_suite(s);
}
