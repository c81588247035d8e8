/* test_gemm_lowp.c: fj_gemm_u8s8s32, fj_gemm_s8s8s32 and fj_gemm_bf16bf16f32 against C references
 * (int8 bit-exact, bf16 within a bound) on random shapes, strides, transposes, offsets and
 * alpha/beta, on every ISA path: AVX-512 with and without VNNI/BF16, AVX2 with and without AVX-VNNI. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "kernels/x64/x64.h"
#include "runtime/rt.h"

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
static int64_t rn(int64_t n) { return (int64_t)(rnd() % (uint64_t)n); }

/* The ISA paths: isa, cpu_disable, and whether the int8 path saturates
 * (no dot product instruction). */
typedef struct path {
    const char *name;
    fj_isa isa;
    unsigned disable;
} path;
static const path paths[] = {
    {"avx512", FJ_ISA_AVX512, 0},
    {"avx512-novnni-nobf16", FJ_ISA_AVX512, FJ_CPU_NO_VNNI | FJ_CPU_NO_BF16},
    {"avx2", FJ_ISA_AVX2, 0},
    {"avx2-novnni", FJ_ISA_AVX2, FJ_CPU_NO_VNNI},
};
enum { NPATHS = sizeof paths / sizeof paths[0] };

/* The runtime of path i, or NULL (printing why) where the CPU lacks it. */
static fj_runtime *path_rt(int i, int threads, int *saturates, int *bf16dot) {
    const path *p = &paths[i];
    if (p->isa == FJ_ISA_AVX512 && !fjt_have_avx512()) {
        fprintf(stderr, "gemm_lowp: path %s skipped: no AVX-512\n", p->name);
        return NULL;
    }
    fj_options o;
    fj_options_init(&o);
    o.isa = p->isa;
    o.threads = threads;
    o.cpu_disable = p->disable;
    fj_runtime *rt = NULL;
    if (fj_runtime_create(&o, &rt) != FJ_OK) {
        fprintf(stderr, "gemm_lowp: path %s skipped: %s\n", p->name, fj_last_error());
        return NULL;
    }
    /* The runtime's effective features: the CPU's less what cpu_disable and
     * FRAMEJIT_CPU_DISABLE take away (the generators see only these). */
    uint32_t f = rt->features;
    int vnni = (f & (p->isa == FJ_ISA_AVX512 ? X64_F_AVX512VNNI : X64_F_AVXVNNI)) != 0;
    if (p->isa == FJ_ISA_AVX2 && !(p->disable & FJ_CPU_NO_VNNI) && !vnni)
        fprintf(stderr, "gemm_lowp: path %s runs without AVX-VNNI (the CPU lacks it or "
                "FRAMEJIT_CPU_DISABLE removes it)\n", p->name);
    *saturates = !vnni;
    *bf16dot = p->isa == FJ_ISA_AVX512 && (f & X64_F_AVX512BF16);
    return rt;
}

/* ---- int8 ---------------------------------------------------------------- */

static int32_t sat_round(double v) {
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)round(v);
}
static int16_t sat16(int32_t v) { return (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v); }

typedef struct icase {
    int s8a, ta, tb;
    char oc;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int ao, bo;
    int full;  /* full-range inputs (else: no pair saturates) */
} icase;

/* The documented result: exact, or with the pair sums of x = A (+128 for
 * s8 A) times B saturated to int16 when sat. */
static void ref_int8(const icase *t, const uint8_t *a, const int8_t *b, const int32_t *c0,
                     const int32_t *co, int sat, int32_t *c) {
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < t->n; j++) {
            uint32_t p = 0, colsum = 0, rowsum = 0;
            for (int64_t kk = 0; kk < t->k; kk += 2) {
                int32_t pair = 0;
                for (int64_t q = kk; q < kk + 2 && q < t->k; q++) {
                    int32_t av = t->ta ? a[q * t->lda + i] : a[i * t->lda + q];
                    if (t->s8a) av = (int8_t)av;
                    int32_t bv = t->tb ? b[j * t->ldb + q] : b[q * t->ldb + j];
                    pair += (av + (t->s8a ? 128 : 0)) * bv;
                    colsum += (uint32_t)bv;
                    rowsum += (uint32_t)av;
                }
                p += (uint32_t)(sat ? sat16(pair) : pair);
            }
            int32_t ao = t->s8a ? (int8_t)t->ao : (uint8_t)t->ao, bo = (int8_t)t->bo;
            uint32_t acc = p - (t->s8a ? 128u * colsum : 0u) - (uint32_t)ao * colsum -
                           (uint32_t)bo * rowsum + (uint32_t)t->k * (uint32_t)ao * (uint32_t)bo;
            int32_t cov = t->oc == 'F' ? co[0] : t->oc == 'R' ? co[j] : co[i];
            int32_t cin = c0[i * t->ldc + j];
            uint32_t r;
            if (t->alpha == 1.0f && (t->beta == 0.0f || t->beta == 1.0f)) {
                r = acc + (t->beta == 1.0f ? (uint32_t)cin : 0u);
            } else {
                double v = (double)t->alpha * (double)(int32_t)acc;
                if (t->beta != 0.0f) v += (double)t->beta * (double)cin;
                r = (uint32_t)sat_round(v);
            }
            c[i * t->ldc + j] = (int32_t)(r + (uint32_t)cov);
        }
}

static const int64_t dims[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 97};
enum { NDIMS = sizeof dims / sizeof dims[0] };

/* Sizes m x n x k for t, its leading dimensions drawn. */
static void set_dims(icase *t, int64_t m, int64_t n, int64_t k) {
    t->m = m;
    t->n = n;
    t->k = k;
    int64_t acol = t->ta ? m : k, bcol = t->tb ? k : n;
    t->lda = acol + (rn(3) ? 0 : rn(9));
    t->ldb = bcol + (rn(3) ? 0 : rn(9));
    t->ldc = n + (rn(3) ? 0 : rn(9));
}

static void rand_icase(icase *t) {
    t->s8a = (int)rn(2);
    t->ta = (int)rn(2);
    t->tb = (int)rn(2);
    t->oc = "FCR"[rn(3)];
    int64_t m = dims[rn(NDIMS)], n = dims[rn(NDIMS)], k = dims[rn(NDIMS)];
    if (rn(8) == 0) k = 100 + rn(300);
    set_dims(t, m, n, k);
    static const float al[] = {1.0f, 1.0f, 1.0f, 0.5f, -2.0f, 0.75f, 1.3f, 1e9f, 0.0f};
    static const float be[] = {0.0f, 1.0f, 0.0f, 1.0f, 0.5f, -1.0f, 2.0f, 0.25f};
    t->alpha = al[rn(9)];
    t->beta = be[rn(8)];
    t->ao = rn(3) ? 0 : (int)rn(256);
    t->bo = rn(3) ? 0 : (int)rn(256);
    t->full = (int)rn(2);
}

/* Runs t on rt; returns mismatches (and reports the first). */
static long run_icase(fj_runtime *rt, const icase *t, int sat, const char *pname) {
    int64_t arow = t->ta ? t->k : t->m, brow = t->tb ? t->n : t->k;
    size_t na = (size_t)(arow * t->lda), nb = (size_t)(brow * t->ldb), nc = (size_t)(t->m * t->ldc);
    uint8_t *a = malloc(na + 1);
    int8_t *b = malloc(nb + 1);
    int32_t *c0 = malloc(nc * 4 + 4), *c = malloc(nc * 4 + 4), *r = malloc(nc * 4 + 4);
    int32_t *co = malloc((size_t)(t->m + t->n + 1) * 4);
    /* Saturation-free inputs: A < 128 (u8) or |B| <= 64 (s8 A). */
    for (size_t i = 0; i < na; i++)
        a[i] = (uint8_t)(t->full || t->s8a ? rnd() : rnd() & 127);
    for (size_t i = 0; i < nb; i++)
        b[i] = (int8_t)(t->full || !t->s8a ? (int)(rnd() & 255) - 128 : (int)rn(129) - 64);
    for (size_t i = 0; i < nc; i++) c0[i] = c[i] = (int32_t)(rnd() % 200001) - 100000;
    if (rn(10) == 0)
        for (size_t i = 0; i < nc; i++) c0[i] = c[i] = (int32_t)(rnd() << 1 | (rnd() & 1));
    for (int64_t i = 0; i < t->m + t->n + 1; i++) co[i] = (int32_t)(rnd() % 2001) - 1000;
    memcpy(r, c0, nc * 4);
    ref_int8(t, a, b, c0, co, sat, r);
    fj_status s = t->s8a
        ? fj_gemm_s8s8s32(rt, t->ta ? 'T' : 'N', t->tb ? 't' : 'n', t->oc, t->m, t->n, t->k,
                          t->alpha, (const int8_t *)a, t->lda, (int8_t)t->ao, b, t->ldb,
                          (int8_t)t->bo, t->beta, c, t->ldc, co)
        : fj_gemm_u8s8s32(rt, t->ta ? 'T' : 'N', t->tb ? 't' : 'n', t->oc, t->m, t->n, t->k,
                          t->alpha, a, t->lda, (uint8_t)t->ao, b, t->ldb, (int8_t)t->bo, t->beta,
                          c, t->ldc, co);
    ck_assert_msg(s == FJ_OK, "%s: %s", pname, fj_last_error());
    long bad = 0;
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < t->ldc; j++) {
            size_t o = (size_t)(i * t->ldc + j);
            int32_t want = j < t->n ? r[o] : c0[o];
            if (c[o] != want && bad++ == 0)
                fprintf(stderr, "%s %s %c%c oc=%c %lldx%lldx%lld ld %lld/%lld/%lld alpha %g beta %g "
                        "ao %d bo %d full %d: C(%lld,%lld) = %d, want %d\n", pname,
                        t->s8a ? "s8s8" : "u8s8", t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', t->oc,
                        (long long)t->m, (long long)t->n, (long long)t->k, (long long)t->lda,
                        (long long)t->ldb, (long long)t->ldc, t->alpha, t->beta, t->ao, t->bo,
                        t->full, (long long)i, (long long)j, c[o], want);
        }
    free(a); free(b); free(c0); free(c); free(r); free(co);
    return bad;
}

START_TEST(int8_random) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1 + _i % 2, &sat, &bfd);
    if (!rt) return;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000), bad = 0;
    rs = 0x1234567ull + (uint64_t)_i * 977;
    for (long it = 0; it < iters; it++) {
        icase t;
        rand_icase(&t);
        /* Exact, and on a saturating path also the documented model */
        bad += run_icase(rt, &t, sat && t.full, paths[_i].name) != 0;
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld of %ld cases differ", paths[_i].name, bad, iters);
}
END_TEST

/* FJT_LOWP_ITERS / 5 + 1 random cases of path i shaped by shape (it ==
 * iters: the last, large one), seeded with seed; the path's runtime has
 * two threads on odd paths. */
static void shaped_runs(int i, uint64_t seed, void (*shape)(icase *t, int last)) {
    int sat, bfd;
    fj_runtime *rt = path_rt(i, 1 + i % 2, &sat, &bfd);
    if (!rt) return;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 5 + 1, bad = 0;
    rs = seed;
    for (long it = 0; it <= iters; it++) {
        icase t;
        rand_icase(&t);
        shape(&t, it == iters);
        bad += run_icase(rt, &t, sat && t.full, paths[i].name) != 0;
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld of %ld cases differ", paths[i].name, bad, iters + 1);
}

/* Matrix x vector (u8 or s8 A, one column of B, bo 0: the unpacked path):
 * whole and partial vectors of k, partial row blocks, strided and
 * transposed b, offsets, alpha/beta; the last case is large enough for
 * two threads to split it. */
static void gemv_shape(icase *t, int last) {
    t->ta = 0;
    t->bo = 0;
    int64_t m = rn(4) ? dims[rn(NDIMS)] : 100 + rn(300), k = 4 * (1 + rn(rn(2) ? 20 : 200));
    if (last) m = 2100, k = 1028;
    set_dims(t, m, 1, k);
}

START_TEST(int8_gemv) { shaped_runs(_i, 0x7654321ull + (uint64_t)_i * 131, gemv_shape); }
END_TEST

/* Matrix x vector with B as the matrix (one row of C, B transposed: x @
 * W^T): B's rows against A, B s8 the signed side and A (u8, s8 + 128) the
 * unsigned one; A's offset (a second pass for B's row sums), B's offset,
 * C's offsets, strided A, alpha/beta; k not a multiple of 4 a quarter of
 * the time (the tile path). The last case splits over two threads. */
static void gemv_bt_shape(icase *t, int last) {
    t->tb = 1;
    int64_t n = rn(4) ? dims[rn(NDIMS)] + 8 * rn(20) : 100 + rn(900);
    int64_t k = rn(4) ? 4 * (1 + rn(rn(2) ? 20 : 300)) : 1 + rn(600);
    if (last) n = 3000, k = 1028;
    set_dims(t, 1, n, k);
}

START_TEST(int8_gemv_bt) { shaped_runs(_i, 0x2468ace1ull + (uint64_t)_i * 97, gemv_bt_shape); }
END_TEST

/* Vector x matrix (one row of C, B along it: B read in place): whole and
 * partial 64/32-column blocks, 8- and 4-row groups, k not a multiple of 4
 * (the last rows' zero-padded quad), strided and transposed A, u8 and s8
 * A, A's offset (B's column sums), B's offset, C's offsets, alpha/beta.
 * The last case splits over two threads. */
static void vxm_shape(icase *t, int last) {
    t->tb = 0;
    if (rn(2)) t->ao = 0, t->s8a = 0;
    int64_t n = rn(4) ? dims[rn(NDIMS)] + 64 * rn(8) : 100 + rn(900);
    int64_t k = rn(3) ? 4 * (1 + rn(rn(2) ? 20 : 300)) : 1 + rn(rn(2) ? 30 : 600);
    if (last) n = 3000, k = 1027, t->ao = 0, t->s8a = 0;
    set_dims(t, 1, n, k);
}

START_TEST(int8_vxm) { shaped_runs(_i, 0x5151515ull + (uint64_t)_i * 337, vxm_shape); }
END_TEST

/* The saturation is real on the fallback paths (the model is not vacuous):
 * u8 A of 255 and B of 127 saturate every pair. */
START_TEST(int8_saturation_documented) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1, &sat, &bfd);
    if (!rt) return;
    enum { K = 8 };
    uint8_t a[K];
    int8_t b[K];
    int32_t c = 0, co = 0;
    memset(a, 255, sizeof a);
    memset(b, 127, sizeof b);
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'F', 1, 1, K, 1.0f, a, K, 0, b, 1, 0, 0.0f,
                                     &c, 1, &co), FJ_OK);
    ck_assert_int_eq(c, sat ? 4 * 32767 : K * 255 * 127);
    fj_runtime_destroy(rt);
}
END_TEST

START_TEST(int8_bad_args) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    uint8_t a[16] = {0};
    int8_t b[16] = {0};
    int32_t c[16] = {0}, co[4] = {0};
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'X', 2, 2, 2, 1, a, 2, 0, b, 2, 0, 0, c, 2, co),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'Q', 'N', 'F', 2, 2, 2, 1, a, 2, 0, b, 2, 0, 0, c, 2, co),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'F', 2, 2, 2, 1, a, 1, 0, b, 2, 0, 0, c, 2, co),
                     FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_s8s8s32(rt, 'N', 'N', 'F', 2, 2, 2, 1, (int8_t *)a, 2, 0, b, 2, 0, 0,
                                     c, 2, NULL), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'F', -1, 2, 2, 1, a, 2, 0, b, 2, 0, 0, c, 2, co),
                     FJ_ERR_INVALID_ARG);
    /* C overlapping B */
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'F', 2, 2, 2, 1, a, 2, 0, (int8_t *)c, 2, 0, 0,
                                     c, 2, co), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(fj_gemm_bf16bf16f32(rt, 'N', 'N', 2, 2, 2, 1, (uint16_t *)a, 2, NULL, 2, 0,
                                         (float *)c, 2), FJ_ERR_INVALID_ARG);
    /* k = 0: C = beta*C + co */
    c[0] = 10;
    ck_assert_int_eq(fj_gemm_u8s8s32(rt, 'N', 'N', 'F', 1, 1, 0, 1, a, 1, 0, b, 1, 0, 1, c, 1, co + 1),
                     FJ_OK);
    ck_assert_int_eq(c[0], 10);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- bf16 ------------------------------------------------------------------ */

static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* A normal bf16 value of magnitude in [2^-4, 2^4), or zero now and then. */
static uint16_t rand_bf16(void) {
    if (rn(16) == 0) return 0;
    uint32_t sign = rnd() & 1, e = 127 - 4 + (uint32_t)rn(8), mant = rnd() & 127;
    return (uint16_t)(sign << 15 | e << 7 | mant);
}

/* One random bf16 case of size m x n x k on rt (transposes, strides, alpha,
 * beta drawn here); returns the elements out of bound (and reports the first). */
static long run_bcase(fj_runtime *rt, const char *pname, int64_t m, int64_t n, int64_t k) {
    long bad = 0;
    int ta = (int)rn(2), tb = (int)rn(2);
    int64_t lda = (ta ? m : k) + (rn(3) ? 0 : rn(9)), ldb = (tb ? k : n) + (rn(3) ? 0 : rn(9));
    int64_t ldc = n + (rn(3) ? 0 : rn(9));
    static const float al[] = {1.0f, 0.5f, -1.5f, 2.0f};
    static const float be[] = {0.0f, 1.0f, -0.5f, 0.0f};
    float alpha = al[rn(4)], beta = be[rn(4)];
    int64_t arow = ta ? k : m, brow = tb ? n : k;
    uint16_t *a = malloc((size_t)(arow * lda) * 2), *b = malloc((size_t)(brow * ldb) * 2);
    float *c = malloc((size_t)(m * ldc) * 4), *c0 = malloc((size_t)(m * ldc) * 4);
    for (int64_t i = 0; i < arow * lda; i++) a[i] = rand_bf16();
    for (int64_t i = 0; i < brow * ldb; i++) b[i] = rand_bf16();
    for (int64_t i = 0; i < m * ldc; i++) c[i] = c0[i] = (float)((int)rn(2001) - 1000) / 64.0f;
    if (beta == 0.0f && rn(4) == 0)
        for (int64_t i = 0; i < m * ldc; i++) c[i] = c0[i] = NAN;
    ck_assert_msg(fj_gemm_bf16bf16f32(rt, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a,
                                      lda, b, ldb, beta, c, ldc) == FJ_OK,
                  "%s", fj_last_error());
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[i * ldc + j];
            if (j >= n) {
                if (memcmp(&got, &c0[i * ldc + j], 4)) bad++;
                continue;
            }
            double s = 0, sa = 0;
            for (int64_t q = 0; q < k; q++) {
                double p = (double)bf2f(ta ? a[q * lda + i] : a[i * lda + q]) *
                           (double)bf2f(tb ? b[j * ldb + q] : b[q * ldb + j]);
                s += p;
                sa += fabs(p);
            }
            double want = (double)alpha * s + (beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j]);
            /* f32 sums of exact products: (k + 2) roundings of at most
             * 2^-24 of the running magnitudes, then alpha, beta and the
             * final add. */
            double mag = fabs((double)alpha) * sa + (beta == 0.0f ? 0.0 : fabs((double)beta * c0[i * ldc + j]));
            double bound = (double)(k + 4) * ldexp(1.0, -23) * mag;
            if (!(fabs((double)got - want) <= bound) && bad++ == 0)
                fprintf(stderr, "%s bf16 %c%c %lldx%lldx%lld alpha %g beta %g: C(%lld,%lld) = %.9g, "
                        "want %.9g (bound %.3g)\n", pname, ta ? 'T' : 'N',
                        tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta,
                        (long long)i, (long long)j, got, want, bound);
        }
    free(a); free(b); free(c); free(c0);
    return bad;
}

START_TEST(bf16_random) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1 + _i % 2, &sat, &bfd);
    if (!rt) return;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 2, bad = 0;
    rs = 0x7654321ull + (uint64_t)_i * 131;
    for (long it = 0; it < iters; it++) {
        int64_t m = dims[rn(NDIMS)], n = dims[rn(NDIMS)], k = dims[rn(NDIMS)];
        if (rn(8) == 0) k = 100 + rn(300);
        bad += run_bcase(rt, paths[_i].name, m, n, k);
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld elements out of bound", paths[_i].name, bad);
}
END_TEST

/* FJT_LOWP_ITERS / 5 + 1 random bf16 cases of path i with the shape
 * shape draws (last: the large one), seeded with seed. */
static void bf16_shaped_runs(int i, uint64_t seed, void (*shape)(int64_t *m, int64_t *n, int64_t *k, int last)) {
    int sat, bfd;
    fj_runtime *rt = path_rt(i, 1 + i % 2, &sat, &bfd);
    if (!rt) return;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 5 + 1, bad = 0;
    rs = seed;
    for (long it = 0; it <= iters; it++) {
        int64_t m, n, k;
        shape(&m, &n, &k, it == iters);
        bad += run_bcase(rt, paths[i].name, m, n, k);
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld elements out of bound", paths[i].name, bad);
}

/* bf16 matrix x vector (n = 1, row-major A with even k: the unpacked
 * path; transposed A takes the tile path), the last case on two threads. */
static void bf16_gemv_shape(int64_t *m, int64_t *n, int64_t *k, int last) {
    *m = rn(4) ? dims[rn(NDIMS)] : 100 + rn(300);
    *n = 1;
    *k = 2 * (1 + rn(rn(2) ? 40 : 400));
    if (last) *m = 2100, *k = 1026;
}

START_TEST(bf16_gemv) { bf16_shaped_runs(_i, 0x2468aceull + (uint64_t)_i * 71, bf16_gemv_shape); }
END_TEST

/* bf16 vector x matrix (m = 1, B not transposed: B read in place, any k):
 * blocks of 4 (AVX2 2) chunks, whole chunks after them and a tail panel,
 * 8-row groups and the last k % 8 rows; transposed B (drawn half the time)
 * takes the matrix x vector kernel with B's rows as the matrix (k even)
 * or the tile path. The last case splits over two threads. */
static void bf16_vxm_shape(int64_t *m, int64_t *n, int64_t *k, int last) {
    *m = 1;
    *n = rn(4) ? dims[rn(NDIMS)] + 32 * rn(9) : 100 + rn(900);
    *k = 1 + rn(rn(2) ? 60 : 400);
    if (*n * *k < 4096) *k = 4096 / *n + 1 + rn(50);
    if (last) *n = 3000, *k = 1027;
}

START_TEST(bf16_vxm) { bf16_shaped_runs(_i, 0x13579bdull + (uint64_t)_i * 53, bf16_vxm_shape); }
END_TEST

/* Sizes that run on two threads (2mnk of at least 4M operations): every
 * split of rows and column panels into jobs, and the wide packers. */
static const int64_t big_dims[] = {61, 97, 130, 161, 200};

START_TEST(random_threads) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 2, &sat, &bfd);
    if (!rt) return;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 40, bad = 0, bbad = 0;
    rs = 0x5eed1ull + (uint64_t)_i * 313;
    for (long it = 0; it < iters; it++) {
        icase t;
        rand_icase(&t);
        set_dims(&t, big_dims[rn(5)], big_dims[rn(5)], 250 + rn(200));
        bad += run_icase(rt, &t, sat && t.full, paths[_i].name) != 0;
        bbad += run_bcase(rt, paths[_i].name, big_dims[rn(5)], big_dims[rn(5)], 250 + rn(200));
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld of %ld int8 cases differ", paths[_i].name, bad, iters);
    ck_assert_msg(bbad == 0, "%s: %ld bf16 elements out of bound", paths[_i].name, bbad);
}
END_TEST

/* Results do not depend on the thread count. */
START_TEST(threads_same) {
    fj_runtime *r1 = fjt_runtime(FJ_ISA_AUTO, 1), *r2 = fjt_runtime(FJ_ISA_AUTO, 2);
    int64_t m = 301, n = 190, k = 77;
    uint8_t *a = malloc((size_t)(m * k));
    int8_t *b = malloc((size_t)(k * n));
    int32_t *c1 = malloc((size_t)(m * n) * 4), *c2 = malloc((size_t)(m * n) * 4), co = 7;
    for (int64_t i = 0; i < m * k; i++) a[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < k * n; i++) b[i] = (int8_t)rnd();
    ck_assert_int_eq(fj_gemm_u8s8s32(r1, 'N', 'N', 'F', m, n, k, 0.7f, a, k, 3, b, n, -2, 0.0f, c1,
                                     n, &co), FJ_OK);
    ck_assert_int_eq(fj_gemm_u8s8s32(r2, 'N', 'N', 'F', m, n, k, 0.7f, a, k, 3, b, n, -2, 0.0f, c2,
                                     n, &co), FJ_OK);
    ck_assert(!memcmp(c1, c2, (size_t)(m * n) * 4));
    free(a); free(b); free(c1); free(c2);
    /* bf16, 64 columns: two threads take a narrower tile (one panel each) */
    int64_t bm = 301, bn = 64, bk = 200;
    uint16_t *ba = malloc((size_t)(bm * bk) * 2), *bb = malloc((size_t)(bk * bn) * 2);
    float *f1 = malloc((size_t)(bm * bn) * 4), *f2 = malloc((size_t)(bm * bn) * 4);
    for (int64_t i = 0; i < bm * bk; i++) ba[i] = rand_bf16();
    for (int64_t i = 0; i < bk * bn; i++) bb[i] = rand_bf16();
    ck_assert_int_eq(fj_gemm_bf16bf16f32(r1, 'N', 'N', bm, bn, bk, 0.75f, ba, bk, bb, bn, 0.0f, f1,
                                         bn), FJ_OK);
    ck_assert_int_eq(fj_gemm_bf16bf16f32(r2, 'N', 'N', bm, bn, bk, 0.75f, ba, bk, bb, bn, 0.0f, f2,
                                         bn), FJ_OK);
    ck_assert(!memcmp(f1, f2, (size_t)(bm * bn) * 4));
    free(ba); free(bb); free(f1); free(f2);
    fj_runtime_destroy(r1);
    fj_runtime_destroy(r2);
}
END_TEST

/* ---- handles with the quantized epilogue ----------------------------------- */

static float q_ref(float y, float os, int sgn, int zp) {
    float lo = (float)((sgn ? -128 : 0) - zp), hi = (float)((sgn ? 127 : 255) - zp);
    float v = y * os;
    v = v > lo ? v : lo;  /* NaN: lo */
    v = v < hi ? v : hi;
    return nearbyintf(v) + (float)zp;
}

START_TEST(int8_handle_random) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1 + _i % 2, &sat, &bfd);
    if (!rt) return;
    rs = 0xabcdefull + (uint64_t)_i * 7;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 5, bad = 0;
    static const fj_eltwise_op acts[] = {0, 0, FJ_ELT_RELU, FJ_ELT_GELU_TANH, FJ_ELT_TANH};
    for (long it = 0; it < iters; it++) {
        fj_gemm_lowp_desc d;
        memset(&d, 0, sizeof d);
        int s8a = (int)rn(2);
        d.a_type = s8a ? FJ_DT_S8 : FJ_DT_U8;
        d.b_type = FJ_DT_S8;
        static const fj_dtype outs[] = {FJ_DT_F32, FJ_DT_U8, FJ_DT_S8};
        d.c_type = outs[rn(3)];
        d.transa = rn(2) ? 'T' : 'N';
        d.transb = rn(2) ? 'T' : 'N';
        d.m = dims[rn(NDIMS)];
        d.n = dims[rn(NDIMS)];
        d.k = dims[rn(NDIMS)];
        int ta = d.transa == 'T', tb = d.transb == 'T';
        d.lda = (ta ? d.m : d.k) + (rn(3) ? 0 : rn(5));
        d.ldb = (tb ? d.k : d.n) + (rn(3) ? 0 : rn(5));
        d.ldc = d.n + (rn(3) ? 0 : rn(5));
        d.ao = rn(2) ? 0 : (s8a ? (int)rn(256) - 128 : (int)rn(256));
        d.bo = rn(2) ? 0 : (int)rn(256) - 128;
        d.scale_per_column = (int)rn(2);
        d.has_bias = (int)rn(2);
        d.post_op = acts[rn(5)];
        d.out_scale = 0.5f + (float)rn(100) / 50.0f;
        d.out_zero = d.c_type == FJ_DT_U8 ? (int)rn(256) : d.c_type == FJ_DT_S8 ? (int)rn(256) - 128 : 0;
        fj_gemm_lowp *g = NULL;
        ck_assert_msg(fj_gemm_lowp_create(rt, &d, &g) == FJ_OK, "%s", fj_last_error());
        int64_t arow = ta ? d.k : d.m, brow = tb ? d.n : d.k;
        uint8_t *a = malloc((size_t)(arow * d.lda) + 1);
        int8_t *b = malloc((size_t)(brow * d.ldb) + 1);
        float *sc = malloc((size_t)d.n * 4), *bias = malloc((size_t)d.n * 4);
        float *y = malloc((size_t)(d.m * d.n) * 4);
        int ec = d.c_type == FJ_DT_F32 ? 4 : 1;
        uint8_t *c = malloc((size_t)(d.m * d.ldc) * (size_t)ec), *c0 = malloc((size_t)(d.m * d.ldc) * (size_t)ec);
        for (int64_t i = 0; i < arow * d.lda; i++) a[i] = (uint8_t)(sat ? rnd() & 127 : rnd());
        for (int64_t i = 0; i < brow * d.ldb; i++)
            b[i] = (int8_t)(sat && s8a ? (int)rn(129) - 64 : (int)(rnd() & 255) - 128);
        if (sat && s8a) for (int64_t i = 0; i < arow * d.lda; i++) a[i] = (uint8_t)rnd();
        for (int64_t j = 0; j < d.n; j++) {
            sc[j] = (float)(1 + rn(64)) / 4096.0f;
            bias[j] = (float)((int)rn(2001) - 1000) / 100.0f;
        }
        for (int64_t i = 0; i < d.m * d.ldc * ec; i++) c[i] = c0[i] = (uint8_t)rnd();
        ck_assert_msg(fj_gemm_lowp_execute(g, a, b, sc, bias, c) == FJ_OK, "%s", fj_last_error());
        /* reference: y before the activation, then fj_eltwise_f32 (the same code) */
        for (int64_t i = 0; i < d.m; i++)
            for (int64_t j = 0; j < d.n; j++) {
                uint32_t acc = 0;
                for (int64_t q = 0; q < d.k; q++) {
                    int32_t av = ta ? a[q * d.lda + i] : a[i * d.lda + q];
                    if (s8a) av = (int8_t)av;
                    int32_t bv = tb ? b[j * d.ldb + q] : b[q * d.ldb + j];
                    acc += (uint32_t)((av - d.ao) * (bv - d.bo));
                }
                float t = (float)(int32_t)acc * sc[d.scale_per_column ? j : 0];
                if (d.has_bias) t += bias[j];
                y[i * d.n + j] = t;
            }
        if (d.post_op)
            ck_assert_int_eq(fj_eltwise_f32(rt, d.post_op, d.post_alpha, d.post_beta, y, y,
                                            (size_t)(d.m * d.n)), FJ_OK);
        long e = 0;
        for (int64_t i = 0; i < d.m; i++)
            for (int64_t j = 0; j < d.ldc; j++) {
                size_t o = (size_t)(i * d.ldc + j);
                if (j >= d.n) {
                    e += memcmp(c + o * (size_t)ec, c0 + o * (size_t)ec, (size_t)ec) != 0;
                    continue;
                }
                float want = y[i * d.n + j], got;
                if (d.c_type == FJ_DT_F32) memcpy(&got, c + o * 4, 4);
                else {
                    want = q_ref(want, d.out_scale, d.c_type == FJ_DT_S8, d.out_zero);
                    got = d.c_type == FJ_DT_S8 ? (float)(int8_t)c[o] : (float)c[o];
                }
                if (memcmp(&got, &want, 4) && e++ == 0)
                    fprintf(stderr, "%s handle %s out %d %c%c %lldx%lldx%lld act %d pcs %d bias %d "
                            "ao %d bo %d: C(%lld,%lld) = %.9g, want %.9g\n", paths[_i].name,
                            s8a ? "s8" : "u8", (int)d.c_type, d.transa, d.transb, (long long)d.m,
                            (long long)d.n, (long long)d.k, (int)d.post_op, d.scale_per_column,
                            d.has_bias, d.ao, d.bo, (long long)i, (long long)j, got, want);
            }
        bad += e != 0;
        free(a); free(b); free(sc); free(bias); free(y); free(c); free(c0);
        fj_gemm_lowp_destroy(g);
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld of %ld handle cases differ", paths[_i].name, bad, iters);
}
END_TEST

static float bf_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + (u >> 16 & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(bf16_handle_random) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1 + _i % 2, &sat, &bfd);
    if (!rt) return;
    rs = 0x5151ull + (uint64_t)_i * 3;
    long iters = fjt_iters("FJT_LOWP_ITERS", 1000) / 5, bad = 0;
    for (long it = 0; it < iters; it++) {
        fj_gemm_lowp_desc d;
        memset(&d, 0, sizeof d);
        d.a_type = d.b_type = FJ_DT_BF16;
        d.c_type = rn(2) ? FJ_DT_F32 : FJ_DT_BF16;
        d.transa = rn(2) ? 'T' : 'N';
        d.transb = rn(2) ? 'T' : 'N';
        d.m = dims[rn(NDIMS)];
        d.n = dims[rn(NDIMS)];
        d.k = dims[rn(NDIMS)];
        int ta = d.transa == 'T', tb = d.transb == 'T';
        d.lda = (ta ? d.m : d.k) + (rn(3) ? 0 : rn(5));
        d.ldb = (tb ? d.k : d.n) + (rn(3) ? 0 : rn(5));
        d.ldc = d.n + (rn(3) ? 0 : rn(5));
        d.has_bias = (int)rn(2);
        d.post_op = rn(2) ? FJ_ELT_RELU : 0;
        fj_gemm_lowp *g = NULL;
        ck_assert_msg(fj_gemm_lowp_create(rt, &d, &g) == FJ_OK, "%s", fj_last_error());
        int64_t arow = ta ? d.k : d.m, brow = tb ? d.n : d.k;
        uint16_t *a = malloc((size_t)(arow * d.lda) * 2), *b = malloc((size_t)(brow * d.ldb) * 2);
        float *bias = malloc((size_t)d.n * 4);
        int ec = d.c_type == FJ_DT_F32 ? 4 : 2;
        uint8_t *c = malloc((size_t)(d.m * d.ldc * ec)), *c0 = malloc((size_t)(d.m * d.ldc * ec));
        for (int64_t i = 0; i < arow * d.lda; i++) a[i] = rand_bf16();
        for (int64_t i = 0; i < brow * d.ldb; i++) b[i] = rand_bf16();
        for (int64_t j = 0; j < d.n; j++) bias[j] = (float)((int)rn(2001) - 1000) / 64.0f;
        for (int64_t i = 0; i < d.m * d.ldc * ec; i++) c[i] = c0[i] = (uint8_t)rnd();
        ck_assert_msg(fj_gemm_lowp_execute(g, a, b, NULL, bias, c) == FJ_OK, "%s", fj_last_error());
        long e = 0;
        for (int64_t i = 0; i < d.m; i++)
            for (int64_t j = 0; j < d.ldc; j++) {
                size_t o = (size_t)(i * d.ldc + j);
                if (j >= d.n) {
                    e += memcmp(c + o * (size_t)ec, c0 + o * (size_t)ec, (size_t)ec) != 0;
                    continue;
                }
                double s = 0, sa = 0;
                for (int64_t q = 0; q < d.k; q++) {
                    double pr = (double)bf2f(ta ? a[q * d.lda + i] : a[i * d.lda + q]) *
                                (double)bf2f(tb ? b[j * d.ldb + q] : b[q * d.ldb + j]);
                    s += pr;
                    sa += fabs(pr);
                }
                if (d.has_bias) { s += bias[j]; sa += fabs(bias[j]); }
                if (d.post_op && s < 0) s = 0;
                double bound = (double)(d.k + 4) * ldexp(1.0, -23) * sa;
                float got;
                if (ec == 4) memcpy(&got, c + o * 4, 4);
                else got = bf2f((uint16_t)(c[o * 2] | c[o * 2 + 1] << 8));
                if (ec == 2) bound += fabs((double)bf_round((float)s) - s) + ldexp(fabs(s), -8);
                if (!(fabs((double)got - s) <= bound) && e++ == 0)
                    fprintf(stderr, "%s bf16 handle out %d: C(%lld,%lld) = %.9g want %.9g (bound %.3g)\n",
                            paths[_i].name, (int)d.c_type, (long long)i, (long long)j, got, s, bound);
            }
        bad += e != 0;
        free(a); free(b); free(bias); free(c); free(c0);
        fj_gemm_lowp_destroy(g);
    }
    fj_runtime_destroy(rt);
    ck_assert_msg(bad == 0, "%s: %ld of %ld bf16 handle cases out of bound", paths[_i].name, bad, iters);
}
END_TEST

START_TEST(handle_bad_args) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    fj_gemm_lowp_desc d;
    memset(&d, 0, sizeof d);
    d.a_type = FJ_DT_U8; d.b_type = FJ_DT_S8; d.c_type = FJ_DT_BF16;
    d.transa = d.transb = 'N';
    d.m = d.n = d.k = 4; d.lda = d.ldb = d.ldc = 4;
    fj_gemm_lowp *g = NULL;
    ck_assert_int_eq(fj_gemm_lowp_create(rt, &d, &g), FJ_ERR_INVALID_ARG);
    d.c_type = FJ_DT_U8; d.out_zero = 300;
    ck_assert_int_eq(fj_gemm_lowp_create(rt, &d, &g), FJ_ERR_INVALID_ARG);
    d.out_zero = 0; d.b_type = FJ_DT_U8;
    ck_assert_int_eq(fj_gemm_lowp_create(rt, &d, &g), FJ_ERR_INVALID_ARG);
    d.b_type = FJ_DT_S8; d.ldc = 3;
    ck_assert_int_eq(fj_gemm_lowp_create(rt, &d, &g), FJ_ERR_INVALID_ARG);
    d.ldc = 4;
    ck_assert_int_eq(fj_gemm_lowp_create(rt, &d, &g), FJ_OK);
    uint8_t a[16] = {0}, c[16];
    int8_t b[16] = {0};
    ck_assert_int_eq(fj_gemm_lowp_execute(g, a, b, NULL, NULL, c), FJ_ERR_INVALID_ARG);
    fj_gemm_lowp_destroy(g);
    fj_runtime_destroy(rt);
}
END_TEST

/* k = 0 handles with A and B NULL (allowed there): the epilogue of zero
 * sums, bias[j] (int8: scale * 0 + bias), and no read of A or B, on every
 * path and transpose. */
START_TEST(handle_k0) {
    int sat, bfd;
    fj_runtime *rt = path_rt(_i, 1, &sat, &bfd);
    if (!rt) return;
    for (int v = 0; v < 8; v++) {
        fj_gemm_lowp_desc d;
        memset(&d, 0, sizeof d);
        int bf16 = v & 1;
        d.a_type = bf16 ? FJ_DT_BF16 : FJ_DT_U8;
        d.b_type = bf16 ? FJ_DT_BF16 : FJ_DT_S8;
        d.c_type = FJ_DT_F32;
        d.transa = v & 2 ? 'T' : 'N';
        d.transb = v & 4 ? 'T' : 'N';
        d.m = 5; d.n = 37; d.k = 0;
        d.lda = d.transa == 'T' ? d.m : 1;
        d.ldb = d.transb == 'T' ? 1 : d.n;
        d.ldc = d.n;
        d.has_bias = 1;
        fj_gemm_lowp *g = NULL;
        ck_assert_msg(fj_gemm_lowp_create(rt, &d, &g) == FJ_OK, "%s", fj_last_error());
        float c[5 * 37], bias[37], scale = 2.0f;
        for (int j = 0; j < 37; j++) bias[j] = (float)j - 3.5f;
        ck_assert_msg(fj_gemm_lowp_execute(g, NULL, NULL, &scale, bias, c) == FJ_OK, "%s",
                      fj_last_error());
        for (int i = 0; i < 5 * 37; i++)
            ck_assert_msg(c[i] == bias[i % 37], "%s k=0 case %d: C[%d] = %g", paths[_i].name, v, i,
                          c[i]);
        fj_gemm_lowp_destroy(g);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm_lowp");
    TCase *t = tcase_create("lowp");
    tcase_set_timeout(t, 600);
    tcase_add_loop_test(t, int8_random, 0, NPATHS);
    tcase_add_loop_test(t, int8_saturation_documented, 0, NPATHS);
    tcase_add_loop_test(t, int8_gemv, 0, NPATHS);
    tcase_add_loop_test(t, int8_gemv_bt, 0, NPATHS);
    tcase_add_loop_test(t, int8_vxm, 0, NPATHS);
    tcase_add_test(t, int8_bad_args);
    tcase_add_loop_test(t, bf16_random, 0, NPATHS);
    tcase_add_loop_test(t, bf16_gemv, 0, NPATHS);
    tcase_add_loop_test(t, bf16_vxm, 0, NPATHS);
    tcase_add_loop_test(t, random_threads, 0, NPATHS);
    tcase_add_test(t, threads_same);
    tcase_add_loop_test(t, int8_handle_random, 0, NPATHS);
    tcase_add_loop_test(t, bf16_handle_random, 0, NPATHS);
    tcase_add_test(t, handle_bad_args);
    tcase_add_loop_test(t, handle_k0, 0, NPATHS);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
