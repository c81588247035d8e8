/* test_eltwise.c: fj_eltwise_f32 for all 15 ops on both ISAs: accuracy
 * against double libm over dense sweeps (the measured maxima are printed),
 * special values, every size/tail/offset/in-place, threads, bad input, the
 * fused-epilogue emitter, and every kernel under the trap-flag unwinding
 * check. FRAMEJIT_FUZZ_ITERS (default 200), FRAMEJIT_FUZZ_SCALE (times
 * 200) and FRAMEJIT_TEST_SEED make the random part longer or different. */

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "kernels/gen/eltwise_gen.h"
#include "runtime/prims/eltslot.h"

int main(void);

static fj_runtime *make_rt(fj_isa isa) { return fjt_runtime(isa, 1); }
static fj_isa isa_of(int i) { return (i & 1) ? FJ_ISA_AVX2 : FJ_ISA_AVX512; }
static const char *isa_name(fj_isa i) { return i == FJ_ISA_AVX512 ? "avx512" : "avx2"; }

static uint64_t rng;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xffffff) / 16777216.0f; }
static long fuzz_iters(void) { return fjt_iters("FRAMEJIT_FUZZ_ITERS", 200); }
static void seed(int salt) {
    const char *e = getenv("FRAMEJIT_TEST_SEED");
    rng = (e && *e ? strtoull(e, NULL, 0) : 0x9e3779b97f4a7c15ull) ^ (uint64_t)salt * 0x100000001b3ull;
    if (!rng) rng = 1;
}

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- reference ------------------------------------------------------------- */

static const char *op_name(int op) {
    static const char *n[] = {"?", "relu", "leaky_relu", "clip", "linear", "abs", "square", "sqrt",
                              "exp", "log", "tanh", "sigmoid", "gelu_tanh", "gelu_erf", "swish",
                              "hardswish"};
    return op > 0 && op < FJ_ELT__COUNT ? n[op] : "?";
}

/* op(x) in double; infinities give the limits (the kernels' convention). */
static double ref(int op, double a, double b, double x) {
    if (isnan(x)) return x;
    switch (op) {
    /* max(x, 0) for a == 0, keeping -0 and NaN: vmaxps returns its second
     * operand for equal zeros and for NaN, and the kernel passes x there
     * so that NaN comes out as NaN. */
    case FJ_ELT_RELU: return x > 0 || x == 0 ? x : a == 0 ? 0.0 : a * x;
    case FJ_ELT_LEAKY_RELU: return x > 0 ? x : a * x;
    case FJ_ELT_CLIP: return fmin(fmax(x, a), b);
    case FJ_ELT_LINEAR: return a * x + b;
    case FJ_ELT_ABS: return fabs(x);
    case FJ_ELT_SQUARE: return x * x;
    case FJ_ELT_SQRT: return sqrt(x);
    case FJ_ELT_EXP: return exp(x);
    case FJ_ELT_LOG: return log(x);
    case FJ_ELT_TANH: return tanh(x);
    case FJ_ELT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case FJ_ELT_GELU_TANH:
        if (isinf(x)) return x > 0 ? x : -0.0;
        return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case FJ_ELT_GELU_ERF:
        if (isinf(x)) return x > 0 ? x : -0.0;
        return 0.5 * x * erfc(-x / sqrt(2.0));
    case FJ_ELT_SWISH:
        if (isinf(x)) return a == 0 ? 0.5 * x : (a * x > 0 ? x : copysign(0.0, x));
        /* given z = fl(alpha x), as the kernels see it (see eltwise_math.c) */
        return x / (1.0 + exp(-(double)(float)(a * x)));
    case FJ_ELT_HARDSWISH:
        if (isinf(x)) return x > 0 ? x : -0.0;
        return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    default: return NAN;
    }
}

/* |got - want| in units of the float ulp at want (2^-149 at least). */
static double ulp_err(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isinf(want) || fabs(want) > FLT_MAX) {
        float w = (float)want;
        return got == w ? 0 : INFINITY;
    }
    if (isnan(got) || isinf(got)) return INFINITY;
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    return fabs((double)got - want) / ulp;
}

/* ---- accuracy sweeps ---------------------------------------------------------- */

typedef struct acc_stat {
    double max_ulp, max_abs;   /* over the normal range (finite x, normal result) */
    float worst_x;
    long n, specials_bad;
} acc_stat;

/* Ops whose criterion is an absolute error (gelu): for x <= GELU_ABS_X
 * (above, gelu(x) ~ x and the error is relative). */
#define GELU_ABS_X 12.0
static int gelu(int op) { return op == FJ_ELT_GELU_TANH || op == FJ_ELT_GELU_ERF; }

static void measure(fj_runtime *rt, int op, float a, float b, const float *x, size_t n,
                    acc_stat *st) {
    float *y = malloc(n * sizeof *y);
    ck_assert_ptr_nonnull(y);
    ck_assert_msg(fj_eltwise_f32(rt, (fj_eltwise_op)op, a, b, x, y, n) == FJ_OK, "%s: %s",
                  op_name(op), fj_last_error());
    for (size_t i = 0; i < n; i++) {
        double w = ref(op, a, b, x[i]);
        st->n++;
        /* Signed zeros: where the reference gives one, so must the kernel
         * (tanh(-0) = -0; an odd function must not lose the sign). */
        if (x[i] == 0 && w == 0 && !gelu(op) && !signbit(y[i]) != !signbit(w)) {
            if (!st->specials_bad) st->worst_x = x[i];
            st->specials_bad++;
            continue;
        }
        if (!isfinite(x[i]) || !isfinite(w) || fabs(w) > FLT_MAX) {
            /* Specials must be exact: NaN for NaN, the same infinity/zero
             * (gelu(-inf): a tiny negative number, see eltwise_math.c). */
            int ok = isnan(w) ? isnan(y[i]) : y[i] == (float)w;
            if (gelu(op) && w == 0) ok = fabsf(y[i]) < 1e-20f;
            if (!ok) {
                if (!st->specials_bad) st->worst_x = x[i];
                st->specials_bad++;
            }
            continue;
        }
        if (gelu(op)) {
            double ae = fabs((double)y[i] - w);
            if (x[i] <= GELU_ABS_X) {
                if (ae > st->max_abs) st->max_abs = ae;
            } else {
                double u = ulp_err(y[i], w);
                if (u > st->max_ulp) { st->max_ulp = u; st->worst_x = x[i]; }
            }
            continue;
        }
        /* swish: alpha x below ln FLT_MIN makes e^-|alpha x| denormal, and
         * its lost bits show in x e / d: measured as denormal results. */
        if (op == FJ_ELT_SWISH && fabs(a * x[i]) > 87.0) {
            double ae = fabs((double)y[i] - w);
            if (ae > 1e-36 && ae > st->max_abs) st->max_abs = ae;
            continue;
        }
        if (fabs(w) < FLT_MIN) {
            /* denormal results: absolute, in units of the smallest denormal */
            double u = ulp_err(y[i], w);
            if (u > 2.0 && u > st->max_abs) st->max_abs = u;
            continue;
        }
        double u = ulp_err(y[i], w);
        if (u > st->max_ulp) { st->max_ulp = u; st->worst_x = x[i]; }
    }
    free(y);
}

/* Max ulp allowed on the normal range (gelu: see GELU_ABS). */
static double ulp_bound(int op) {
    switch (op) {
    case FJ_ELT_EXP: case FJ_ELT_LOG: case FJ_ELT_TANH: case FJ_ELT_SIGMOID: return 2.0;
    case FJ_ELT_SWISH: return 3.5; /* every float scanned: 3.41 */
    case FJ_ELT_HARDSWISH: return 2.5;
    case FJ_ELT_GELU_TANH: case FJ_ELT_GELU_ERF: return 3.0; /* |x| > GELU_ABS_X */
    default: return 0.5001; /* correctly rounded */
    }
}
#define GELU_ABS 1e-6

static const float alphas[FJ_ELT__COUNT] = {0, 0, 0.1f, -1.5f, 1.7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.3f, 0};
static const float betas[FJ_ELT__COUNT] = {0, 0, 0, 2.5f, -0.3f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* loop index: bit 0 ISA, rest: op - 1 */
START_TEST(accuracy) {
    fj_isa isa = isa_of(_i);
    int op = (_i >> 1) + 1;
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    seed(_i);
    /* Every 4093rd bit pattern (all signs, binades, NaNs, infinities), then
     * a dense uniform sample where the op is interesting. */
    size_t n1 = (size_t)(4294967296ull / 4093) + 1, n2 = 1 << 20, n = n1 + n2 + 64;
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    size_t k = 0;
    for (uint64_t u = 0; u < 4294967296ull; u += 4093) x[k++] = f_of((uint32_t)u);
    float lo = -20, hi = 20;
    if (op == FJ_ELT_EXP) lo = -104, hi = 89;
    if (op == FJ_ELT_LOG) lo = 0, hi = 4;
    if (op == FJ_ELT_SIGMOID || op == FJ_ELT_SWISH) lo = -90, hi = 90;
    if (op == FJ_ELT_TANH) lo = -10, hi = 10;
    for (size_t i = 0; i < n2; i++) x[k++] = rndf(lo, hi);
    /* values near the seams: 1 (log), 0, the clamps, exact exp overflow */
    const float seams[] = {1.0f, nextafterf(1, 0), nextafterf(1, 2), 0.75f, 1.5f,
                           nextafterf(0.75f, 0), 88.7228317f, 88.7228394f, -87.3365479f,
                           -103.972084f, 9.01f, -9.01f, 10.0f, 3.0f, -3.0f, 6.0f, 1e-20f,
                           -1e-20f, 1e-7f, -1e-7f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                           FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, -0.0f, INFINITY, -INFINITY,
                           NAN, -NAN, 0.34657359f, -0.34657359f};
    for (size_t i = 0; i < sizeof seams / sizeof seams[0]; i++) x[k++] = seams[i];
    acc_stat st = {0};
    measure(rt, op, alphas[op], betas[op], x, k, &st);
    printf("accuracy %-10s %-6s: max %.3f ulp (x = %.9g), max abs %.3g%s, %ld values, %ld bad "
           "specials\n", op_name(op), isa_name(isa), st.max_ulp, (double)st.worst_x, st.max_abs,
           gelu(op) ? " (x <= 12)" : " (denormal results, in 2^-149 units, if > 2)", st.n,
           st.specials_bad);
    ck_assert_msg(st.specials_bad == 0, "%s %s: %ld special values wrong (first x = %g)",
                  op_name(op), isa_name(isa), st.specials_bad, (double)st.worst_x);
    ck_assert_msg(st.max_ulp <= ulp_bound(op), "%s %s: %.3f ulp at x = %.9g (bound %.2f)",
                  op_name(op), isa_name(isa), st.max_ulp, (double)st.worst_x, ulp_bound(op));
    if (gelu(op)) ck_assert_msg(st.max_abs <= GELU_ABS, "%s %s: abs error %.3g", op_name(op),
                                isa_name(isa), st.max_abs);
    else ck_assert_msg(st.max_abs <= 4.0, "%s %s: denormal results off by %.3g units",
                       op_name(op), isa_name(isa), st.max_abs);
    free(x);
    fj_runtime_destroy(rt);
}
END_TEST

/* relu's slope and clip/linear/swish's parameters are read at run time:
 * several values through one kernel. */
START_TEST(parameters) {
    fj_isa isa = isa_of(_i);
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    seed(77 + _i);
    enum { N = 1000 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = rndf(-50, 50);
    x[0] = -INFINITY; x[1] = INFINITY; x[2] = NAN; x[3] = -0.0f;
    const float ps[][2] = {{0, 0}, {0.5f, 1}, {-2, 3}, {1e-3f, -1e3f}, {3, 3}, {-0.0f, 0.0f}};
    const int ops[] = {FJ_ELT_RELU, FJ_ELT_LEAKY_RELU, FJ_ELT_CLIP, FJ_ELT_LINEAR, FJ_ELT_SWISH};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
            float a = ps[p][0], b = ps[p][1];
            ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)ops[o], a, b, x, y, N), FJ_OK);
            for (int i = 0; i < N; i++) {
                double w = ref(ops[o], a, b, x[i]);
                /* relu(-inf) with slope 0: max gives 0; oneDNN's formula NaN */
                if (ops[o] == FJ_ELT_RELU && a == 0 && isinf(x[i])) w = x[i] > 0 ? x[i] : 0;
                double u = ulp_err(y[i], w);
                if (ops[o] == FJ_ELT_SWISH && fabs(a * x[i]) > 87.0) /* e^-|z| denormal */
                    u = fabs(y[i] - w) < 1e-36 ? 0 : u;
                ck_assert_msg(u <= (ops[o] == FJ_ELT_SWISH ? 3.5 : 0.5001),
                              "%s %s alpha %g beta %g: f(%g) = %.9g, want %.9g", isa_name(isa),
                              op_name(ops[o]), a, b, x[i], y[i], w);
            }
        }
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- sizes, offsets, in place ------------------------------------------------- */

#define GUARD 32
#define CANARY 1234.5f

/* One call at (n, soff, doff, inplace), compared bit for bit with the same
 * values computed in one aligned call (the lanes are independent, so the
 * main loop, single vectors and the masked tail must agree), with
 * canaries around dst. */
static void size_case(fj_runtime *rt, int op, size_t n, size_t soff, size_t doff, int inplace,
                      const float *want_pool, const float *x_pool, size_t pool) {
    size_t cap = n + 2 * GUARD + 32;
    float *sbuf = malloc(cap * sizeof(float)), *dbuf = malloc(cap * sizeof(float));
    ck_assert(sbuf && dbuf);
    for (size_t i = 0; i < cap; i++) sbuf[i] = dbuf[i] = CANARY;
    float *src = sbuf + GUARD + soff, *dst = inplace ? src : dbuf + GUARD + doff;
    size_t base = rnd() % pool;
    for (size_t i = 0; i < n; i++) src[i] = x_pool[(base + i) % pool];
    fj_status s = fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], src, dst, n);
    ck_assert_msg(s == FJ_OK, "n=%zu: %s", n, fj_last_error());
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        float w = want_pool[(base + i) % pool];
        if (memcmp(&dst[i], &w, 4) != 0 && !(isnan(dst[i]) && isnan(w))) bad = i;
    }
    ck_assert_msg(bad == n, "%s %s n=%zu soff=%zu doff=%zu inplace=%d: dst[%zu] = %.9g, want %.9g",
                  op_name(op), isa_name(fj_runtime_isa(rt)), n, soff, doff, inplace, bad,
                  bad < n ? dst[bad] : 0.0f, bad < n ? want_pool[(base + bad) % pool] : 0.0f);
    float *buf = inplace ? sbuf : dbuf;
    int over = 0;
    for (float *p = buf; p < dst; p++) over |= *p != CANARY;
    for (float *p = dst + n; p < buf + cap; p++) over |= *p != CANARY;
    ck_assert_msg(!over, "%s n=%zu: wrote outside dst", op_name(op), n);
    free(sbuf);
    free(dbuf);
}

/* loop index: bit 0 ISA, rest op - 1 */
START_TEST(sizes) {
    fj_isa isa = isa_of(_i);
    int op = (_i >> 1) + 1;
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    seed(1000 + _i);
    enum { POOL = 4096 + 7 };
    float *xp = malloc(POOL * sizeof(float)), *wp = malloc(POOL * sizeof(float));
    for (int i = 0; i < POOL; i++) {
        uint32_t r = rnd();
        xp[i] = r % 8 == 0 ? f_of(rnd() << 16 | rnd()) : rndf(-30, 30);
    }
    ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], xp, wp, POOL), FJ_OK);
    /* every tail width and loop exit: 0 .. 3 unrolled blocks of the widest ISA */
    for (size_t n = 0; n <= 3 * 8 * 16 + 17; n++)
        size_case(rt, op, n, n % 7, (n * 3) % 11, 0, wp, xp, POOL);
    const size_t primes[] = {1, 2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 251, 509, 1021, 2039, 4093};
    for (size_t i = 0; i < sizeof primes / sizeof primes[0]; i++)
        size_case(rt, op, primes[i], 1, 3, (int)(i & 1), wp, xp, POOL);
    long iters = fuzz_iters();
    for (long it = 0; it < iters / 4; it++)
        size_case(rt, op, rnd() % 5000, rnd() % 16, rnd() % 16, rnd() % 4 == 0, wp, xp, POOL);
    free(xp);
    free(wp);
    fj_runtime_destroy(rt);
}
END_TEST

/* Both ISAs: within the op's bound of each other's reference (not
 * necessarily bitwise: the 2^n scaling differs), and threads agree. */
START_TEST(threads_agree) {
    fj_runtime *r1 = fjt_runtime(FJ_ISA_AUTO, 1), *r2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(555);
    size_t n = (1u << 20) + 12345; /* above the parallel threshold */
    float *x = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float)),
          *y2 = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rndf(-10, 10);
    const int ops[] = {FJ_ELT_RELU, FJ_ELT_EXP, FJ_ELT_GELU_ERF};
    for (size_t o = 0; o < 3; o++) {
        ck_assert_int_eq(fj_eltwise_f32(r1, (fj_eltwise_op)ops[o], 0, 0, x, y1, n), FJ_OK);
        ck_assert_int_eq(fj_eltwise_f32(r2, (fj_eltwise_op)ops[o], 0, 0, x, y2, n), FJ_OK);
        ck_assert_msg(memcmp(y1, y2, n * sizeof(float)) == 0, "%s: 1 and 2 threads differ",
                      op_name(ops[o]));
    }
    /* in place, threaded */
    memcpy(y1, x, n * sizeof(float));
    ck_assert_int_eq(fj_eltwise_f32(r2, FJ_ELT_EXP, 0, 0, y1, y1, n), FJ_OK);
    ck_assert_int_eq(fj_eltwise_f32(r1, FJ_ELT_EXP, 0, 0, x, y2, n), FJ_OK);
    ck_assert(memcmp(y1, y2, n * sizeof(float)) == 0);
    free(x);
    free(y1);
    free(y2);
    fj_runtime_destroy(r1);
    fj_runtime_destroy(r2);
}
END_TEST

/* Large arrays go through the large kernels (into another array: the
 * streaming ones, from dst's first 64-byte boundary on): bitwise what the
 * plain kernels give (run here in pieces below the threshold), for every
 * misalignment of dst, in place too, 1 and 2 threads, nothing written
 * outside dst. loop index: bit 0 ISA, bit 1 threads, rest an op of the
 * list. */
START_TEST(streaming) {
    static const int ops[] = {FJ_ELT_RELU, FJ_ELT_LINEAR, FJ_ELT_EXP, FJ_ELT_TANH,
                              FJ_ELT_GELU_ERF, FJ_ELT_HARDSWISH};
    fj_isa isa = isa_of(_i);
    int threads = 1 + (_i >> 1 & 1), op = ops[_i >> 2];
    fj_runtime *rt = fjt_runtime(isa, threads), *plain = make_rt(isa);
    if (!rt || !plain) {
        if (rt) fj_runtime_destroy(rt);
        if (plain) fj_runtime_destroy(plain);
        return;
    }
    seed(4242 + _i);
    size_t n = (1u << 20) + 4093, pad = 32; /* above the threshold, odd tail */
    float *x = malloc(n * sizeof *x), *want = malloc((n + 2 * pad) * sizeof *want),
          *got = malloc((n + 2 * pad) * sizeof *got);
    ck_assert(x && want && got);
    for (size_t i = 0; i < n; i++)
        x[i] = i % 97 == 0 ? f_of(rnd() << 16 | rnd()) : rndf(-12, 12);
    for (size_t mis = 0; mis < 16; mis++) {
        float *w = want + pad + mis, *g = got + pad + mis;
        for (size_t i = 0; i < n + 2 * pad; i++) want[i] = got[i] = -7.0f;
        for (size_t at = 0; at < n; at += 65536) {
            size_t len = n - at < 65536 ? n - at : 65536;
            ck_assert_int_eq(fj_eltwise_f32(plain, (fj_eltwise_op)op, alphas[op], betas[op],
                                            x + at, w + at, len), FJ_OK);
        }
        ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], x, g, n),
                         FJ_OK);
        ck_assert_msg(memcmp(want, got, (n + 2 * pad) * sizeof *got) == 0,
                      "%s %s %d threads, dst misaligned by %zu floats: differs from the plain "
                      "kernel (or wrote outside dst)", op_name(op), isa_name(isa), threads, mis);
        /* in place (the large kernels with plain stores), same bits */
        if (mis % 5 == 0) {
            memcpy(g, x, n * sizeof *g);
            ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], g, g,
                                            n), FJ_OK);
            ck_assert_msg(memcmp(want, got, (n + 2 * pad) * sizeof *got) == 0,
                          "%s %s %d threads, in place at misalignment %zu: differs from the "
                          "plain kernel", op_name(op), isa_name(isa), threads, mis);
        }
    }
    free(x);
    free(want);
    free(got);
    fj_runtime_destroy(rt);
    fj_runtime_destroy(plain);
}
END_TEST

/* ---- bad input -------------------------------------------------------------------- */

START_TEST(bad_input) {
    fj_runtime *rt = make_rt(isa_of(_i));
    if (!rt) return;
    float src[64], buf[100];
    for (int i = 0; i < 64; i++) src[i] = 1.0f;
    for (int i = 0; i < 100; i++) buf[i] = 7.0f;
    for (int op = 1; op < FJ_ELT__COUNT; op++) {
        FJT_ASSERT_INVALID(fj_eltwise_f32(NULL, (fj_eltwise_op)op, 0, 0, src, buf, 64));
        FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)op, 0, 0, NULL, buf, 64));
        FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)op, 0, 0, src, NULL, 64));
        FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)op, 0, 0, buf, buf + 1, 64));
        FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)op, 0, 0, buf + 30, buf, 64));
        FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)op, 0, 0, src, buf, SIZE_MAX / 4));
    }
    FJT_ASSERT_INVALID(fj_eltwise_f32(rt, FJ_ELT__COUNT, 0, 0, src, buf, 64));
    FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)0, 0, 0, src, buf, 64));
    FJT_ASSERT_INVALID(fj_eltwise_f32(rt, (fj_eltwise_op)-5, 0, 0, src, buf, 0));
    for (int i = 0; i < 100; i++) ck_assert_msg(buf[i] == 7.0f, "dst touched by a failed call");
    ck_assert_int_eq(fj_eltwise_f32(rt, FJ_ELT_EXP, 0, 0, NULL, NULL, 0), FJ_OK);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- the emitter on its own (as a GEMM epilogue uses it) ---------------------------- */

/* Builds k(const float *src, float *dst) applying op to one vector with
 * constants baked in, prepared several times over to check that finish
 * returns every register. */
START_TEST(emitter) {
    fj_isa isa = isa_of(_i);
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    for (int op = 1; op < FJ_ELT__COUNT; op++) {
        fj_builder *b;
        ck_assert_int_eq(fj_builder_create(rt, "elt_emitter_test", 2, &b), FJ_OK);
        fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1);
        fj_reg x = fj_vreg(b);
        int lanes = fj_builder_vbits(b) / 32;
        ck_assert_int_ge(kg_elt_vregs(isa, (fj_eltwise_op)op, alphas[op]), 0);
        for (int rep = 0; rep < 12; rep++) { /* leaks would run out of registers */
            kg_elt_state *s = kg_elt_prepare(b, (fj_eltwise_op)op, alphas[op], betas[op]);
            ck_assert_ptr_nonnull(s);
            fj_emit(b, FJ_VMOVUPS, fj_vec(b, x), fj_mem(0, src, 0));
            kg_elt_apply(s, x);
            fj_emit(b, FJ_VMOVUPS, fj_mem(0, dst, 0), fj_vec(b, x));
            kg_elt_finish(s);
        }
        fj_return(b, fj_none());
        fj_kernel *k;
        ck_assert_msg(fj_builder_finish(b, &k) == FJ_OK, "%s: %s", op_name(op), fj_last_error());
        float in[16], out[16], want[16];
        for (int i = 0; i < 16; i++) in[i] = (float)(i - 7) * 0.37f;
        ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], in, want, 16), FJ_OK);
        ((void (*)(const float *, float *))fj_kernel_entry(k))(in, out);
        for (int i = 0; i < lanes; i++)
            ck_assert_msg(out[i] == want[i] || (isnan(out[i]) && isnan(want[i])),
                          "%s %s: emitter %.9g, kernel %.9g", op_name(op), isa_name(isa), out[i],
                          want[i]);
        fj_kernel_release(k);
    }
    /* Too many states at once, or no registers left: NULL and a sticky
     * error, never a crash. */
    fj_builder *b;
    ck_assert_int_eq(fj_builder_create(rt, "elt_exhaust", 0, &b), FJ_OK);
    kg_elt_state *st[40];
    int got = 0;
    for (int i = 0; i < 40; i++)
        if ((st[i] = kg_elt_prepare(b, FJ_ELT_GELU_ERF, 0, 0))) got++;
    ck_assert_int_lt(got, 40);
    for (int i = 0; i < 40; i++) kg_elt_finish(st[i]);
    fj_kernel *k = (fj_kernel *)1;
    ck_assert_int_ne(fj_builder_finish(b, &k), FJ_OK);
    ck_assert_ptr_null(kg_elt_prepare(NULL, FJ_ELT_EXP, 0, 0));
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- every instruction unwinds ----------------------------------------------------- */

typedef struct tr_arg {
    fj_runtime *rt;
    int op;
    kg_elt_fn fn;          /* a kernel to call directly, or NULL: fj_eltwise_f32 */
    const float *src;
    float *dst;
    size_t n;
    fj_status s;
} tr_arg;

static void tr_body(void *p) {
    tr_arg *a = p;
    const float params[2] = {alphas[a->op], betas[a->op]};
    if (a->fn) {
        a->fn(a->src, a->dst, a->n, params);
        a->s = FJ_OK;
    } else {
        a->s = fj_eltwise_f32(a->rt, (fj_eltwise_op)a->op, alphas[a->op], betas[a->op], a->src,
                              a->dst, a->n);
    }
    __asm__ volatile("" ::: "memory");
}

/* Through fj_eltwise_f32 (the plain kernels), and the large kernels
 * called directly on a short aligned array (fj_eltwise_f32 runs them only
 * on millions of elements, too many to single-step; they must write what
 * the plain kernels write). loop index: bit 0 ISA, bits 1-2 which kernel
 * (0 plain, 1 streaming, 2 large in place), rest op - 1. */
START_TEST(trace) {
    if (!fjt_can_trace("eltwise trace")) return;
    fj_isa isa = isa_of(_i);
    int kind = _i >> 1 & 3, op = (_i >> 3) + 1;
    if (kind == 3) return;
    fj_runtime *rt = make_rt(isa);
    if (!rt) return;
    int lanes = isa == FJ_ISA_AVX512 ? 16 : 8;
    /* one unrolled block (8 or 4 vectors, 16 for the cheap large ones),
     * one single vector, a tail */
    size_t n = (size_t)(16 * lanes + lanes + 3);
    _Alignas(64) float src[300], dst[300], want[300];
    for (size_t i = 0; i < n; i++) src[i] = (float)((int)(i % 11) - 5) * 0.7f;
    tr_arg a = {rt, op, NULL, src, dst, n, FJ_ERR_INVALID_ARG};
    if (kind) {
        fj_kernel *k;
        int v = kg_elt_variant((fj_eltwise_op)op, alphas[op]);
        kg_elt first = kind == 1 ? KG_ELT_STREAM0 : KG_ELT_LARGE0;
        ck_assert_int_eq(rt_elt_slot(rt, (kg_elt)(first + v), &k), FJ_OK);
        a.fn = (kg_elt_fn)fj_kernel_entry(k);
    }
    fjt_trace_opts o = {.root = (const void *)main};
    fjt_trace_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    int ok = fjt_trace_kernel(tr_body, &a, &o, r);
    ck_assert_msg(a.s == FJ_OK, "%s: %s", op_name(op), fj_last_error());
    ck_assert_msg(ok, "%s %s (kernel kind %d): %s (libunwind bad %ld, libgcc bad %ld, rbp bad "
                  "%ld)", op_name(op), isa_name(isa), kind, r->msg, r->lu_bad, r->gcc_bad,
                  r->fp_bad);
    ck_assert_int_gt(r->kernel_steps, 0);
    ck_assert_int_eq(r->fp_miss, 2 * r->entries + r->rets);
    free(r);
    if (kind) {
        ck_assert_int_eq(fj_eltwise_f32(rt, (fj_eltwise_op)op, alphas[op], betas[op], src,
                                        want, n), FJ_OK);
        ck_assert_msg(memcmp(want, dst, n * sizeof(float)) == 0, "%s %s (kernel kind %d): "
                      "differs from the plain kernel", op_name(op), isa_name(isa), kind);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* Every pinned kernel's name, as perf, gdb and fj_symbolize show it:
 * "fj_eltwise_<op>_f32_[stream_|large_]<isa>" for eltwise variants,
 * "fj_<op>_f32_<isa>" for reductions and softmax. */
START_TEST(slot_names) {
    fj_isa isa = isa_of(_i);
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    static const char *const kinds[] = {"", "stream_", "large_"};
    for (int v = 0; v < RT_SLOT__N; v++) {
        fj_kernel *k;
        ck_assert_int_eq(rt_elt_slot(rt, v, &k), FJ_OK);
        int kind;
        char want[96];
        if (v < KG_ELT__N) {
            kg_elt_base((kg_elt)v, &kind);
            snprintf(want, sizeof want, "fj_eltwise_%s_f32_%s%s", kg_elt_name((kg_elt)v),
                     kinds[kind], isa_name(isa));
        } else {
            snprintf(want, sizeof want, "fj_%s_f32_%s", rt_slot_name(v), isa_name(isa));
        }
        uintptr_t off = 1;
        const char *got = fj_symbolize(k->fn, &off);
        ck_assert_msg(got && !strcmp(got, want) && off == 0, "slot %d: '%s' at +%lu, want '%s'",
                      v, got ? got : "(none)", (unsigned long)off, want);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("eltwise");
    TCase *t = tcase_create("eltwise");
    tcase_set_timeout(t, 240);
    int nops = FJ_ELT__COUNT - 1;
    tcase_add_loop_test(t, accuracy, 0, 2 * nops);
    tcase_add_loop_test(t, parameters, 0, 2);
    tcase_add_loop_test(t, sizes, 0, 2 * nops);
    tcase_add_test(t, threads_agree);
    tcase_add_loop_test(t, streaming, 0, 4 * 6);
    tcase_add_loop_test(t, bad_input, 0, 2);
    tcase_add_loop_test(t, emitter, 0, 2);
    tcase_add_loop_test(t, trace, 0, 8 * nops);
    tcase_add_loop_test(t, slot_names, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
