/* gemmcase.c: GEMM test cases for the Check suites (gemmcase.h). */
/* The build defines FJ_TEST for test programs, which would mangle the
 * builder's FJ_TEST enumerator (framejit/builder.h). */
#undef FJ_TEST

#include "gemmcase.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "runtime/prims/gemm_int.h"

/* ---- random numbers ----------------------------------------------------- */

static _Thread_local uint64_t rng_state; /* per thread: memo_threads draws in four */

uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
int64_t rnd_to(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }
double rnd_d(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }
float rnd_f(void) { return (float)rnd_d(); }

long env_long(const char *name, long dflt) {
    const char *e = getenv(name);
    return e && *e ? strtol(e, NULL, 0) : dflt;
}

void seed(uint64_t salt) {
    rng_state = (uint64_t)env_long("FRAMEJIT_TEST_SEED", 0x5eed) * 0x9e3779b97f4a7c15ull + salt;
    if (!rng_state) rng_state = 1;
}

/* ---- reference and checking --------------------------------------------- */


static int64_t rnd_dim(const int64_t *dims, size_t ndims, int big) {
    if (big) return 100 + rnd_to(201);
    return rnd() % 3 ? dims[rnd_to((int64_t)ndims)] : rnd_to(70);
}

void gcase_random(gcase *t, const gcase_lists *l, int avx512, long it) {
    static const double edge[] = {0.0, 1.0, -1.0, 0.5};
    memset(t, 0, sizeof *t);
    int big = it % 50 == 49; /* a few shapes up to 300 */
    t->ta = (int)(rnd() & 1);
    t->tb = (int)(rnd() & 1);
    t->m = rnd_dim(l->dims, l->ndims, big);
    t->n = rnd_dim(l->dims, l->ndims, big);
    t->k = rnd_dim(l->dims, l->ndims, big);
    t->lda = (t->ta ? t->m : t->k) + (rnd() % 4 == 0 ? rnd_to(20) : 0);
    t->ldb = (t->tb ? t->k : t->n) + (rnd() % 4 == 0 ? rnd_to(9) : 0);
    t->ldc = t->n + (rnd() % 3 == 0 ? rnd_to(5) : 0);
    if (t->lda < 1) t->lda = 1;
    if (t->ldb < 1) t->ldb = 1;
    if (t->ldc < 1) t->ldc = 1;
    t->alpha = rnd() % 3 ? edge[rnd_to(4)] : (l->f64 ? rnd_d() : rnd_f()) * 2;
    t->beta = rnd() % 3 ? edge[rnd_to(4)] : (l->f64 ? rnd_d() : rnd_f()) * 2;
    int sp = (int)rnd_to(12);
    t->special = sp < 3 ? sp + 1 : 0;
    if (t->special == 3) t->beta = 0;
    t->tune = avx512 ? l->tunes512[rnd_to((int64_t)l->n512)] : l->tunes2[rnd_to((int64_t)l->n2)];
}

void gcase_fuzz(fj_isa isa, uint64_t salt, const gcase_lists *l,
                void (*run)(fj_runtime *rt1, fj_runtime *rt2, const gcase *t)) {
    fj_runtime *rt1 = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt1) return; /* no AVX-512 here */
    seed(salt);
    long iters = fjt_iters("FRAMEJIT_FUZZ_ITERS", l->iters ? l->iters : 1500);
    for (long it = 0; it < iters; it++) {
        gcase t;
        if (l->draw) l->draw(&t);
        else gcase_random(&t, l, isa == FJ_ISA_AVX512, it);
        run(rt1, it % 2 ? rt2 : NULL, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}

static void put(void *p, size_t i, int es, double v) {
    if (es == 8) ((double *)p)[i] = v;
    else ((float *)p)[i] = (float)v;
}

void gcase_fill(const gcase *t, int es, void *a, size_t na, void *b, size_t nb, void *c0,
                size_t nc) {
    for (size_t i = 0; i < na; i++) put(a, i, es, rnd_d());
    for (size_t i = 0; i < nb; i++) put(b, i, es, rnd_d());
    for (size_t i = 0; i < nc; i++) put(c0, i, es, rnd_d());
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = t->n; j < t->ldc; j++) put(c0, (size_t)(i * t->ldc + j), es, GEMMCASE_PAD);
    put(c0, nc - 1, es, GEMMCASE_PAD);
    if (t->special == 1 && t->m && t->k) {
        int64_t i = rnd_to(t->m), p = rnd_to(t->k);
        put(a, (size_t)(t->ta ? p * t->lda + i : i * t->lda + p), es, NAN);
    }
    if (t->special == 2 && t->n && t->k) {
        int64_t j = rnd_to(t->n), p = rnd_to(t->k);
        put(b, (size_t)(t->tb ? j * t->ldb + p : p * t->ldb + j), es,
            rnd() & 1 ? INFINITY : -INFINITY);
    }
    if (t->special == 3)
        for (int64_t i = 0; i < t->m; i++)
            for (int64_t j = 0; j < t->n; j++) put(c0, (size_t)(i * t->ldc + j), es, NAN);
}

void bufs_make(const gcase *t, gbufs *g) {
    g->na = (size_t)((t->ta ? t->k : t->m) * t->lda) + 1;
    g->nb = (size_t)((t->tb ? t->n : t->k) * t->ldb) + 1;
    g->nc = (size_t)(t->m * t->ldc) + 1;
    g->a = malloc(g->na * sizeof(float));
    g->b = malloc(g->nb * sizeof(float));
    g->c0 = malloc(g->nc * sizeof(float));
    g->c = malloc(g->nc * sizeof(float));
    ck_assert(g->a && g->b && g->c0 && g->c);
    gcase_fill(t, 4, g->a, g->na, g->b, g->nb, g->c0, g->nc);
    memcpy(g->c, g->c0, g->nc * sizeof(float));
}

void bufs_free(gbufs *g) {
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
void check_result(const gcase *t, const gbufs *g, const float *got, const float *bias,
                  fj_eltwise_op act, float act_alpha, float act_beta, const char *what) {
    for (int64_t i = 0; i < t->m; i++) {
        for (int64_t j = 0; j < t->ldc; j++) {
            float v = got[i * t->ldc + j];
            if (j >= t->n) {
                ck_assert_msg(v == GEMMCASE_PAD || (isnan(v) && isnan(g->c0[i * t->ldc + j])),
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
    ck_assert_msg(got[g->nc - 1] == GEMMCASE_PAD, "%s: wrote past C", what);
}

void case_str(const gcase *t, char *buf, size_t n) {
    snprintf(buf, n, "%c%c m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld alpha=%g beta=%g "
             "special=%d tune=%s", t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', (long long)t->m,
             (long long)t->n, (long long)t->k, (long long)t->lda, (long long)t->ldb,
             (long long)t->ldc, t->alpha, t->beta, t->special, t->tune ? t->tune : "auto");
}

/* Runs t on rt1 (and on rt2, whose result must be bitwise the same). */
void run_case(fj_runtime *rt1, fj_runtime *rt2, const gcase *t) {
    char what[256];
    case_str(t, what, sizeof what);
    gemm_test_tune(t->tune);
    gbufs g;
    bufs_make(t, &g);
    static const char tr[2][2] = {{'N', 'n'}, {'T', 't'}};
    char ca = tr[t->ta][rnd() & 1], cb = tr[t->tb][rnd() & 1];
    fj_status s = fj_gemm_f32(rt1, ca, cb, t->m, t->n, t->k, (float)t->alpha, g.a, t->lda, g.b,
                              t->ldb, (float)t->beta, g.c, t->ldc);
    ck_assert_msg(s == FJ_OK, "%s: %s: %s", what, fj_status_str(s), fj_last_error());
    check_result(t, &g, g.c, NULL, 0, 0, 0, what);
    if (rt2) {
        float *c2 = malloc(g.nc * sizeof(float));
        ck_assert_ptr_nonnull(c2);
        memcpy(c2, g.c0, g.nc * sizeof(float));
        s = fj_gemm_f32(rt2, ca, cb, t->m, t->n, t->k, (float)t->alpha, g.a, t->lda, g.b, t->ldb,
                        (float)t->beta, c2, t->ldc);
        ck_assert_msg(s == FJ_OK, "%s (2 threads): %s", what, fj_last_error());
        ck_assert_msg(!memcmp(c2, g.c, g.nc * sizeof(float)),
                      "%s: 1 and 2 threads differ bitwise", what);
        free(c2);
    }
    bufs_free(&g);
    gemm_test_tune(NULL);
}

void handle_case(fj_runtime *rt, fj_runtime *rt2, const gcase *t, int has_bias,
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

typedef struct trace_arg {
    fj_runtime *rt;
    const gcase *t;
    gbufs *g;
    fj_gemm *h;
    const float *bias;
    fj_status s;
    dbufs *d;             /* f64: fj_gemm_f64 on these */
} trace_arg;

static void trace_body(void *p) {
    trace_arg *x = p;
    const gcase *t = x->t;
    if (x->d)
        x->s = fj_gemm_f64(x->rt, t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', t->m, t->n, t->k,
                           t->alpha, x->d->a, t->lda, x->d->b, t->ldb, t->beta, x->d->c, t->ldc);
    else if (x->h)
        x->s = fj_gemm_execute(x->h, x->g->a, x->g->b, x->bias, x->g->c);
    else
        x->s = fj_gemm_f32(x->rt, t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', t->m, t->n, t->k,
                           (float)t->alpha, x->g->a, t->lda, x->g->b, t->ldb, (float)t->beta,
                           x->g->c, t->ldc);
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

int gcase_trace(fj_runtime *rt, const gcase *t, gbufs *g, fj_gemm *h, const float *bias,
                fjt_trace_result *r, fj_status *s) {
    trace_arg x = {rt, t, g, h, bias, FJ_OK, NULL};
    fjt_trace_opts o = {0};
    int ok = fjt_trace_kernel(trace_body, &x, &o, r);
    *s = x.s;
    return ok;
}

int gcase_dtrace(fj_runtime *rt, const gcase *t, dbufs *d, fjt_trace_result *r, fj_status *s) {
    trace_arg x = {rt, t, NULL, NULL, NULL, FJ_OK, d};
    fjt_trace_opts o = {0};
    int ok = fjt_trace_kernel(trace_body, &x, &o, r);
    *s = x.s;
    return ok;
}

/* ---- f64 ---------------------------------------------------------------- */

void dbufs_make(const gcase *t, dbufs *g) {
    g->na = (size_t)((t->ta ? t->k : t->m) * t->lda) + 1;
    g->nb = (size_t)((t->tb ? t->n : t->k) * t->ldb) + 1;
    g->nc = (size_t)(t->m * t->ldc) + 1;
    g->a = malloc(g->na * sizeof(double));
    g->b = malloc(g->nb * sizeof(double));
    g->c0 = malloc(g->nc * sizeof(double));
    g->c = malloc(g->nc * sizeof(double));
    g->bias = malloc((size_t)(t->n + 1) * sizeof(double));
    ck_assert(g->a && g->b && g->c0 && g->c && g->bias);
    gcase_fill(t, 8, g->a, g->na, g->b, g->nb, g->c0, g->nc);
    for (int64_t j = 0; j <= t->n; j++) g->bias[j] = rnd_d();
    memcpy(g->c, g->c0, g->nc * sizeof(double));
}

void dbufs_free(dbufs *g) {
    free(g->a);
    free(g->b);
    free(g->c0);
    free(g->c);
    free(g->bias);
}

void dcase_str(const gcase *t, char *buf, size_t n) {
    snprintf(buf, n, "f64 ");
    case_str(t, buf + 4, n - 4);
}

long double ddot_ref(const gcase *t, const dbufs *g, int64_t i, int64_t j, long double *abs_s) {
    long double s = 0, as = 0;
    for (int64_t p = 0; p < t->k; p++) {
        long double x = t->ta ? g->a[p * t->lda + i] : g->a[i * t->lda + p];
        long double y = t->tb ? g->b[j * t->ldb + p] : g->b[p * t->ldb + j];
        s += x * y;
        as += fabsl(x * y);
    }
    *abs_s = as;
    return s;
}

/* got against alpha*op(A)op(B) + beta*C0 (+ bias) summed in long double;
 * the tolerance scales with the sum of |terms| and k (double rounding). */
void dcheck(const gcase *t, const dbufs *g, const double *got, const double *bias,
                   const char *what) {
    for (int64_t i = 0; i < t->m; i++) {
        for (int64_t j = 0; j < t->ldc; j++) {
            double v = got[i * t->ldc + j];
            if (j >= t->n) {
                ck_assert_msg(v == GEMMCASE_PAD, "%s: C(%lld,%lld) outside n was written", what,
                              (long long)i, (long long)j);
                continue;
            }
            long double abs_s, s = ddot_ref(t, g, i, j, &abs_s);
            long double ref = (long double)t->alpha * s, tol = fabsl((long double)t->alpha) * abs_s;
            if (t->k == 0) ref = tol = 0;
            if (t->beta != 0) {
                long double cb = (long double)t->beta * g->c0[i * t->ldc + j];
                ref += cb;
                tol += fabsl(cb);
            }
            if (bias) {
                ref += bias[j];
                tol += fabsl((long double)bias[j]);
            }
            tol = tol * (long double)(t->k + 4) * 2.5L * DBL_EPSILON + 1e-300L;
            if (isnan((double)ref))
                ck_assert_msg(isnan(v), "%s: C(%lld,%lld) = %g, reference NaN", what,
                              (long long)i, (long long)j, v);
            else if (isinf((double)ref))
                ck_assert_msg(v == (double)ref, "%s: C(%lld,%lld) = %g, reference %Lg", what,
                              (long long)i, (long long)j, v, ref);
            else
                ck_assert_msg(fabsl((long double)v - ref) <= tol,
                              "%s: C(%lld,%lld) = %.17g, reference %.17Lg (tolerance %.3Lg)",
                              what, (long long)i, (long long)j, v, ref, tol);
        }
    }
    ck_assert_msg(got[g->nc - 1] == GEMMCASE_PAD, "%s: wrote past C", what);
}

/* t on rt1, checked; on rt2 (if any) bitwise the same. */
void run_dcase(fj_runtime *rt1, fj_runtime *rt2, const gcase *t) {
    char what[256];
    dcase_str(t, what, sizeof what);
    gemm_test_tune(t->tune);
    dbufs g;
    dbufs_make(t, &g);
    static const char tr[2][2] = {{'N', 'n'}, {'T', 't'}};
    char ca = tr[t->ta][rnd() & 1], cb = tr[t->tb][rnd() & 1];
    fj_status s = fj_gemm_f64(rt1, ca, cb, t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b, t->ldb,
                              t->beta, g.c, t->ldc);
    ck_assert_msg(s == FJ_OK, "%s: %s: %s", what, fj_status_str(s), fj_last_error());
    dcheck(t, &g, g.c, NULL, what);
    if (rt2) {
        double *c2 = malloc(g.nc * sizeof(double));
        ck_assert_ptr_nonnull(c2);
        memcpy(c2, g.c0, g.nc * sizeof(double));
        s = fj_gemm_f64(rt2, ca, cb, t->m, t->n, t->k, t->alpha, g.a, t->lda, g.b, t->ldb,
                        t->beta, c2, t->ldc);
        ck_assert_msg(s == FJ_OK, "%s (2 threads): %s", what, fj_last_error());
        ck_assert_msg(!memcmp(c2, g.c, g.nc * sizeof(double)),
                      "%s: 1 and 2 threads differ bitwise", what);
        free(c2);
    }
    dbufs_free(&g);
    gemm_test_tune(NULL);
}
