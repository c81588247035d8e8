/* eltwise.c (bench): element-wise kernels against oneDNN's eltwise
 * primitive (created once, executed in the loop) and a plain C loop (libm),
 * one thread, interleaved repetitions (each the best of a few short blocks),
 * medians; plus kernel generation time (first call in a fresh runtime
 * minus a warm call), beside oneDNN's primitive creation with its
 * primitive cache off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef FJ_BENCH_DNNL
#include <dnnl.h>
/* oneDNN's OpenMP runtime, when the process has one (weak: optional): one
 * thread like framejit here (idle OpenMP workers spinning on a loaded
 * machine would otherwise be measured too). */
extern void omp_set_num_threads(int n) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));
#endif

typedef struct elt_case {
    const char *name;
    fj_eltwise_op op;
    float alpha, beta;
    int dnnl_alg;   /* dnnl_alg_kind_t, or 0 */
} elt_case;

/* The plain C loops a user would write (the compiler may vectorize). */
__attribute__((noinline)) static void c_loop(fj_eltwise_op op, const float *s, float *d, size_t n) {
    switch (op) {
    case FJ_ELT_RELU: for (size_t i = 0; i < n; i++) d[i] = s[i] > 0.0f ? s[i] : 0.0f; break;
    case FJ_ELT_EXP: for (size_t i = 0; i < n; i++) d[i] = expf(s[i]); break;
    case FJ_ELT_TANH: for (size_t i = 0; i < n; i++) d[i] = tanhf(s[i]); break;
    case FJ_ELT_LOG: for (size_t i = 0; i < n; i++) d[i] = logf(s[i]); break;
    case FJ_ELT_SIGMOID: for (size_t i = 0; i < n; i++) d[i] = 1.0f / (1.0f + expf(-s[i])); break;
    case FJ_ELT_GELU_TANH:
        for (size_t i = 0; i < n; i++) {
            float x = s[i];
            d[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
        }
        break;
    case FJ_ELT_GELU_ERF:
        for (size_t i = 0; i < n; i++) d[i] = 0.5f * s[i] * (1.0f + erff(s[i] * 0.70710678f));
        break;
    case FJ_ELT_SWISH: for (size_t i = 0; i < n; i++) d[i] = s[i] / (1.0f + expf(-s[i])); break;
    default: for (size_t i = 0; i < n; i++) d[i] = s[i]; break;
    }
}

#ifdef FJ_BENCH_DNNL
typedef struct dnn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_memory_t src, dst;
} dnn;

/* The eltwise primitive of alg over n floats (its descriptors made and
 * dropped) and its memory descriptor. */
static dnnl_status_t dnn_prim(dnnl_engine_t eng, int alg, float alpha, float beta, size_t n,
                              dnnl_primitive_t *prim, dnnl_memory_desc_t *md) {
    dnnl_dims_t dims = {(dnnl_dim_t)n};
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(md, 1, dims, dnnl_f32, dnnl_a);
    if (st == dnnl_success)
        st = dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, (dnnl_alg_kind_t)alg, md,
                                            alpha, beta);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &ed, NULL, eng, NULL);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_create(prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static int dnn_make(dnn *d, int alg, float alpha, float beta, float *src, float *dst, size_t n) {
    memset(d, 0, sizeof *d);
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags) != dnnl_success) return 0;
    dnnl_memory_desc_t md;
    if (dnn_prim(d->eng, alg, alpha, beta, n, &d->prim, &md) != dnnl_success) return 0;
    int ok = dnnl_memory_create(&d->src, &md, d->eng, src) == dnnl_success;
    ok = ok && dnnl_memory_create(&d->dst, &md, d->eng, dst) == dnnl_success;
    return ok;
}

static dnnl_status_t dnn_make_elt(void *ctx, dnnl_engine_t eng, dnnl_primitive_t *prim) {
    const elt_case *ec = ctx;
    dnnl_memory_desc_t md;
    return dnn_prim(eng, ec->dnnl_alg, ec->alpha, ec->beta, 1024, prim, &md);
}

static void dnn_run(dnn *d) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, d->src}, {DNNL_ARG_DST, d->dst}};
    dnnl_primitive_execute(d->prim, d->st, 2, args);
    dnnl_stream_wait(d->st);
}

static void dnn_free(dnn *d) {
    if (d->prim) dnnl_primitive_destroy(d->prim);
    if (d->src) dnnl_memory_destroy(d->src);
    if (d->dst) dnnl_memory_destroy(d->dst);
    if (d->st) dnnl_stream_destroy(d->st);
    if (d->eng) dnnl_engine_destroy(d->eng);
}
#endif

static void run_case(const bench_ctx *c, fj_runtime *rt, const elt_case *ec, size_t bytes) {
    size_t n = bytes / sizeof(float);
    float *src = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
    for (size_t i = 0; i < n; i++)
        src[i] = ec->op == FJ_ELT_LOG ? 0.01f + (float)(i % 1000) * 0.1f
                                      : (float)((int)(i % 2001) - 1000) / 100.0f;
    memset(dst, 0, bytes);
    /* ~20 ms per repetition per variant */
    double per = (double)bytes * (ec->op == FJ_ELT_RELU ? 0.05 : 0.3);
    size_t calls = (size_t)(2e7 / per) + 1;
    double fj[64], cl[64], dn[64];
    int have_dnn = 0;
#ifdef FJ_BENCH_DNNL
    dnn d;
    have_dnn = ec->dnnl_alg && dnn_make(&d, ec->dnnl_alg, ec->alpha, ec->beta, src, dst, n);
    if (have_dnn) dnn_run(&d);
#endif
    fj_eltwise_f32(rt, ec->op, ec->alpha, ec->beta, src, dst, n); /* generate + warm */
    c_loop(ec->op, src, dst, n);
    size_t ccalls = calls / 4 + 1; /* libm loops are slow: fewer calls */
    /* Each repetition: BLOCKS short blocks per variant, interleaved, the
     * best block kept (a loaded machine preempts some blocks, rarely all). */
    enum { BLOCKS = 4 };
    calls = calls / BLOCKS + 1;
    ccalls = ccalls / BLOCKS + 1;
    for (int rep = 0; rep < c->reps; rep++) {
        fj[rep] = dn[rep] = cl[rep] = 1e300;
        for (int blk = 0; blk < BLOCKS; blk++) {
            double t0 = bench_now_ns();
            for (size_t i = 0; i < calls; i++)
                fj_eltwise_f32(rt, ec->op, ec->alpha, ec->beta, src, dst, n);
            double t1 = bench_now_ns();
#ifdef FJ_BENCH_DNNL
            if (have_dnn)
                for (size_t i = 0; i < calls; i++) dnn_run(&d);
#endif
            double t2 = bench_now_ns();
            for (size_t i = 0; i < ccalls; i++) c_loop(ec->op, src, dst, n);
            double t3 = bench_now_ns();
            fj[rep] = fmin(fj[rep], (t1 - t0) / (double)calls);
            dn[rep] = fmin(dn[rep], (t2 - t1) / (double)calls);
            cl[rep] = fmin(cl[rep], (t3 - t2) / (double)ccalls);
        }
    }
    double f = bench_median(fj, c->reps), r = bench_median(cl, c->reps);
    char name[64];
    snprintf(name, sizeof name, "%s %zu KiB", ec->name, bytes / 1024);
    bench_row("eltwise", name, "framejit", f, "ns", 0);
    bench_row("eltwise", name, "framejit GB/s", 2.0 * (double)bytes / f, "GB/s", 0);
    if (have_dnn) {
        double o = bench_median(dn, c->reps);
        bench_row("eltwise", name, "onednn", o, "ns", o / f);
    }
    bench_row("eltwise", name, "plain C (libm)", r, "ns", r / f);
#ifdef FJ_BENCH_DNNL
    if (ec->dnnl_alg) dnn_free(&d);
#endif
    free(src);
    free(dst);
}

typedef struct gen_ctx {
    const elt_case *ec;
    float src[1024], dst[1024];
} gen_ctx;

static void gen_call(fj_runtime *rt, void *ctx) {
    gen_ctx *g = ctx;
    fj_eltwise_f32(rt, g->ec->op, g->ec->alpha, g->ec->beta, g->src, g->dst, 1024);
}

/* Generation (bench_gen_fresh), beside oneDNN's primitive creation. */
static void gen_time(const bench_ctx *c, const elt_case *ec) {
    gen_ctx g = {.ec = ec};
    for (int i = 0; i < 1024; i++) g.src[i] = 0.5f;
    double wall, fj_cpu;
    if (!bench_gen_fresh(c, gen_call, &g, &wall, &fj_cpu)) return;
    char name[64];
    snprintf(name, sizeof name, "generate %s", ec->name);
    bench_row("eltwise", name, "framejit", wall, "us", 0);
    bench_row("eltwise", name, "framejit cpu", fj_cpu, "us", 0);
#ifdef FJ_BENCH_DNNL
    const double d =
        ec->dnnl_alg ? bench_dnnl_create_us(bench_gen_reps(c), dnn_make_elt, (void *)ec) : 0;
    if (d > 0)
        bench_row("eltwise", name, "onednn create cpu", d, "us", fj_cpu > 0 ? d / fj_cpu : 0);
#endif
}

void bench_eltwise(const bench_ctx *c) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt;
    if (fj_runtime_create(&o, &rt) != FJ_OK) {
        fprintf(stderr, "bench eltwise: %s\n", fj_last_error());
        return;
    }
#ifdef FJ_BENCH_DNNL
    int omp_threads = omp_get_max_threads ? omp_get_max_threads() : 0;
    if (omp_set_num_threads) omp_set_num_threads(1);
#endif
    printf("# eltwise: isa %s, 1 thread, median of %d (each the best of 4 blocks); ratio = "
           "other time / framejit time\n",
           fj_runtime_isa(rt) == FJ_ISA_AVX512 ? "avx512" : "avx2", c->reps);
#ifdef FJ_BENCH_DNNL
#define A(x) x
#else
#define A(x) 0
#endif
    const elt_case cases[] = {
        {"relu", FJ_ELT_RELU, 0, 0, A(dnnl_eltwise_relu)},
        {"exp", FJ_ELT_EXP, 0, 0, A(dnnl_eltwise_exp)},
        {"tanh", FJ_ELT_TANH, 0, 0, A(dnnl_eltwise_tanh)},
        {"gelu_tanh", FJ_ELT_GELU_TANH, 0, 0, A(dnnl_eltwise_gelu_tanh)},
        {"gelu_erf", FJ_ELT_GELU_ERF, 0, 0, A(dnnl_eltwise_gelu_erf)},
        {"sigmoid", FJ_ELT_SIGMOID, 0, 0, A(dnnl_eltwise_logistic)},
        {"log", FJ_ELT_LOG, 0, 0, A(dnnl_eltwise_log)},
        {"swish", FJ_ELT_SWISH, 1, 0, A(dnnl_eltwise_swish)},
    };
    const size_t sizes[] = {4096, 256 * 1024, (size_t)64 << 20};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (c->quick && k > 4) break;
        for (size_t s = 0; s < 3; s++) {
            if (s == 2 && (c->quick || k > 4)) continue;
            run_case(c, rt, &cases[k], sizes[s]);
        }
    }
    /* Generation of every case (the first five in a quick run). */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!c->quick || k < 5) gen_time(c, &cases[k]);
    fj_runtime_destroy(rt);
#ifdef FJ_BENCH_DNNL
    if (omp_set_num_threads && omp_threads > 0) omp_set_num_threads(omp_threads);
#endif
}
