/* reduce.c (bench): row reductions (sum, max, L2) and softmax/log_softmax
 * over rows at a few shapes, framejit with 1 and 2 threads against a plain
 * C loop (one thread) and, when built with it, oneDNN's reduction and
 * softmax primitives (created once, executed in the loop; their OpenMP
 * pool is set to the same thread count). Interleaved repetitions; each
 * repetition keeps the best of a few short blocks (robust against a loaded
 * machine), and the median over repetitions is reported. Plus kernel
 * generation per primitive: the first call in a fresh runtime minus a warm
 * call, beside oneDNN's primitive creation with its primitive cache off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef FJ_BENCH_DNNL
#include <dnnl.h>
/* oneDNN's OpenMP runtime, when the process has one (weak: optional). */
extern void omp_set_num_threads(int n) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));
#endif

typedef enum { K_SUM, K_MAX, K_L2, K_SOFTMAX, K_LOGSOFTMAX } kind;
static const char *const kind_name[] = {"sum", "max", "l2", "softmax", "log_softmax"};

typedef struct shape {
    int64_t rows, cols;
} shape;

enum { GEN_ROWS = 64, GEN_COLS = 256 }; /* the generation rows' shape */

/* ---- plain C references (what a user would write; one thread) ---------- */

__attribute__((noinline)) static void c_ref(kind k, const float *s, float *d, int64_t rows,
                                            int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *x = s + r * cols;
        float *y = d + r * cols;
        float a = 0.0f, m = -INFINITY;
        switch (k) {
        case K_SUM:
            for (int64_t i = 0; i < cols; i++) a += x[i];
            d[r] = a;
            break;
        case K_MAX:
            for (int64_t i = 0; i < cols; i++) m = x[i] > m ? x[i] : m;
            d[r] = m;
            break;
        case K_L2:
            for (int64_t i = 0; i < cols; i++) a += x[i] * x[i];
            d[r] = sqrtf(a);
            break;
        case K_SOFTMAX:
        case K_LOGSOFTMAX:
            for (int64_t i = 0; i < cols; i++) m = x[i] > m ? x[i] : m;
            if (k == K_SOFTMAX) {
                for (int64_t i = 0; i < cols; i++) a += (y[i] = expf(x[i] - m));
                for (int64_t i = 0; i < cols; i++) y[i] /= a;
            } else {
                for (int64_t i = 0; i < cols; i++) a += expf(x[i] - m);
                float l = logf(a) + m;
                for (int64_t i = 0; i < cols; i++) y[i] = x[i] - l;
            }
            break;
        }
    }
}

static void fj_run(fj_runtime *rt, kind k, const float *s, float *d, int64_t rows, int64_t cols) {
    static const fj_reduce_op rop[] = {FJ_REDUCE_SUM, FJ_REDUCE_MAX, FJ_REDUCE_L2};
    if (k <= K_L2) fj_reduce_f32(rt, rop[k], rows, cols, s, cols, d);
    else fj_softmax_f32(rt, k == K_LOGSOFTMAX, rows, cols, s, cols, d, cols);
}

/* ---- oneDNN ----------------------------------------------------------------- */

#ifdef FJ_BENCH_DNNL
typedef struct dnn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_memory_t src, dst;
} dnn;

static void dnn_free(dnn *d) {
    if (d->prim) dnnl_primitive_destroy(d->prim);
    if (d->src) dnnl_memory_destroy(d->src);
    if (d->dst) dnnl_memory_destroy(d->dst);
    if (d->st) dnnl_stream_destroy(d->st);
    if (d->eng) dnnl_engine_destroy(d->eng);
    memset(d, 0, sizeof *d);
}

/* The primitive for kind k over rows x cols (its descriptors made and
 * dropped), and the memory descriptors of its source and destination. */
static dnnl_status_t dnn_prim(dnnl_engine_t eng, kind k, int64_t rows, int64_t cols,
                              dnnl_primitive_t *prim, dnnl_memory_desc_t *smd,
                              dnnl_memory_desc_t *dmd) {
    dnnl_dims_t sd = {rows, cols}, dd = {rows, 1};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(smd, 2, sd, dnnl_f32, dnnl_ab);
    if (st != dnnl_success) return st;
    dnnl_primitive_desc_t pd = NULL;
    if (k <= K_L2) {
        if ((st = dnnl_memory_desc_init_by_tag(dmd, 2, dd, dnnl_f32, dnnl_ab)) != dnnl_success)
            return st;
        static const int alg[] = {dnnl_reduction_sum, dnnl_reduction_max, dnnl_reduction_norm_lp_sum};
        dnnl_reduction_desc_t rd;
        st = dnnl_reduction_desc_init(&rd, (dnnl_alg_kind_t)alg[k], smd, dmd, 2.0f, 0.0f);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &rd, NULL, eng, NULL);
    } else {
        *dmd = *smd;
        if (k == K_SOFTMAX) {
            dnnl_softmax_desc_t sm;
            st = dnnl_softmax_forward_desc_init(&sm, dnnl_forward_inference, smd, 1);
            if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &sm, NULL, eng, NULL);
        } else {
            dnnl_logsoftmax_desc_t sm;
            st = dnnl_logsoftmax_forward_desc_init(&sm, dnnl_forward_inference, smd, 1);
            if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &sm, NULL, eng, NULL);
        }
    }
    if (st != dnnl_success) return st;
    st = dnnl_primitive_create(prim, pd);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* The generation rows' primitive (ctx: the kind), for bench_dnnl_create_us. */
static dnnl_status_t dnn_make_gen(void *ctx, dnnl_engine_t eng, dnnl_primitive_t *prim) {
    dnnl_memory_desc_t smd, dmd;
    return dnn_prim(eng, *(const kind *)ctx, GEN_ROWS, GEN_COLS, prim, &smd, &dmd);
}

static int dnn_make(dnn *d, kind k, float *src, float *dst, int64_t rows, int64_t cols) {
    memset(d, 0, sizeof *d);
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags) != dnnl_success) return 0;
    dnnl_memory_desc_t smd, dmd;
    if (dnn_prim(d->eng, k, rows, cols, &d->prim, &smd, &dmd) != dnnl_success) return 0;
    int ok = dnnl_memory_create(&d->src, &smd, d->eng, src) == dnnl_success;
    ok = ok && dnnl_memory_create(&d->dst, &dmd, d->eng, dst) == dnnl_success;
    return ok;
}

static void dnn_run(dnn *d) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, d->src}, {DNNL_ARG_DST, d->dst}};
    dnnl_primitive_execute(d->prim, d->st, 2, args);
    dnnl_stream_wait(d->st);
}
#endif

/* ---- timing ------------------------------------------------------------------ */

enum { NV = 3, BLOCKS = 4 }; /* variants: framejit, onednn, plain C */

typedef struct run_ctx {
    fj_runtime *rt;
    kind k;
    const float *src;
    float *dst;
    int64_t rows, cols;
#ifdef FJ_BENCH_DNNL
    dnn *d;
#endif
} run_ctx;

static void run_one(const run_ctx *c, int v) {
    if (v == 0) fj_run(c->rt, c->k, c->src, c->dst, c->rows, c->cols);
#ifdef FJ_BENCH_DNNL
    else if (v == 1) dnn_run(c->d);
#endif
    else c_ref(c->k, c->src, c->dst, c->rows, c->cols);
}

/* ns per call of variant v: the best of BLOCKS blocks of `calls` calls. */
static double best_block(const run_ctx *c, int v, size_t calls) {
    double best = 1e300;
    for (int b = 0; b < BLOCKS; b++) {
        double t0 = bench_now_ns();
        for (size_t i = 0; i < calls; i++) run_one(c, v);
        double t = (bench_now_ns() - t0) / (double)calls;
        if (t < best) best = t;
    }
    return best;
}

static void run_case(const bench_ctx *bc, fj_runtime *rt, int threads, kind k, shape sh,
                     int with_c) {
    size_t n = (size_t)(sh.rows * sh.cols);
    float *src = aligned_alloc(64, n * sizeof(float)), *dst = aligned_alloc(64, n * sizeof(float));
    if (!src || !dst) { free(src); free(dst); return; }
    for (size_t i = 0; i < n; i++) src[i] = (float)((int)(i % 2001) - 1000) / 250.0f;
    memset(dst, 0, n * sizeof(float));
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.rt = rt, c.k = k, c.src = src, c.dst = dst, c.rows = sh.rows, c.cols = sh.cols;
    int have[NV] = {1, 0, with_c};
#ifdef FJ_BENCH_DNNL
    dnn d;
    if (omp_set_num_threads) omp_set_num_threads(threads);
    have[1] = dnn_make(&d, k, src, dst, sh.rows, sh.cols);
    c.d = &d;
#endif
    /* warm up every variant, then size the blocks (~2 ms each) on framejit */
    size_t calls[NV];
    for (int v = 0; v < NV; v++) {
        if (!have[v]) continue;
        run_one(&c, v);
        double t0 = bench_now_ns();
        run_one(&c, v);
        double t = bench_now_ns() - t0;
        calls[v] = (size_t)(2e6 / (t > 1 ? t : 1)) + 1;
    }
    double res[NV][64];
    for (int rep = 0; rep < bc->reps; rep++)
        for (int v = 0; v < NV; v++)
            if (have[v]) res[v][rep] = best_block(&c, v, calls[v]);
    double med[NV] = {0};
    for (int v = 0; v < NV; v++)
        if (have[v]) med[v] = bench_median(res[v], bc->reps);
    char name[64], var[32];
    snprintf(name, sizeof name, "%s %lldx%lld", kind_name[k], (long long)sh.rows,
             (long long)sh.cols);
    snprintf(var, sizeof var, "framejit %dT", threads);
    bench_row("reduce", name, var, med[0], "ns", 0);
    double bytes = (double)n * sizeof(float) * (k >= K_SOFTMAX ? 2.0 : 1.0);
    snprintf(var, sizeof var, "framejit %dT GB/s", threads);
    bench_row("reduce", name, var, bytes / med[0], "GB/s", 0);
    if (have[1]) {
        snprintf(var, sizeof var, "onednn %dT", threads);
        bench_row("reduce", name, var, med[1], "ns", med[1] / med[0]);
    }
    if (have[2]) bench_row("reduce", name, "plain C 1T", med[2], "ns", med[2] / med[0]);
#ifdef FJ_BENCH_DNNL
    dnn_free(&d);
#endif
    free(src);
    free(dst);
}

/* ---- generation --------------------------------------------------------- */

typedef struct gen_ctx {
    kind k;
    float *src, *dst;
} gen_ctx;

static void gen_call(fj_runtime *rt, void *ctx) {
    const gen_ctx *g = ctx;
    fj_run(rt, g->k, g->src, g->dst, GEN_ROWS, GEN_COLS);
}

/* framejit: the first call of kind k in a fresh runtime minus a warm call
 * (bench_gen_fresh). oneDNN: creating the primitive (descriptor,
 * primitive descriptor, primitive: where it makes its kernel) with its
 * primitive cache off (bench_dnnl_create_us). */
static void gen_time(const bench_ctx *bc, kind k, float *src, float *dst) {
    gen_ctx g = {k, src, dst};
    double wall, fj_cpu;
    if (!bench_gen_fresh(bc, gen_call, &g, &wall, &fj_cpu)) return;
    char name[64];
    snprintf(name, sizeof name, "generate %s", kind_name[k]);
    bench_row("reduce", name, "framejit", wall, "us", 0);
    bench_row("reduce", name, "framejit cpu", fj_cpu, "us", 0);
#ifdef FJ_BENCH_DNNL
    const double med = bench_dnnl_create_us(bench_gen_reps(bc), dnn_make_gen, &k);
    if (med > 0)
        bench_row("reduce", name, "onednn create cpu", med, "us", fj_cpu > 0 ? med / fj_cpu : 0);
#endif
}

void bench_reduce(const bench_ctx *c) {
#ifdef FJ_BENCH_DNNL
    int omp_threads = omp_get_max_threads ? omp_get_max_threads() : 0;
#endif
    printf("# reduce: rows of a row-major matrix; isa %s; median of %d (each the best of %d "
           "blocks); ratio = other time / framejit time; plain C is one thread\n", bench_isa(),
           c->reps, BLOCKS);
    const shape shapes[] = {{1024, 1024}, {64, 4096}, {4096, 64}};
    const kind kinds[] = {K_SUM, K_MAX, K_L2, K_SOFTMAX, K_LOGSOFTMAX};
    for (int threads = 1; threads <= 2; threads++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = threads;
        fj_runtime *rt;
        if (fj_runtime_create(&o, &rt) != FJ_OK) {
            fprintf(stderr, "bench reduce: %s\n", fj_last_error());
            return;
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (c->quick && s > 0) break;
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                run_case(c, rt, threads, kinds[k], shapes[s], threads == 1);
        }
        fj_runtime_destroy(rt);
    }
    float *src = malloc(sizeof(float) * GEN_ROWS * GEN_COLS),
          *dst = malloc(sizeof(float) * GEN_ROWS * GEN_COLS);
#ifdef FJ_BENCH_DNNL
    if (omp_set_num_threads) omp_set_num_threads(1);
#endif
    if (src && dst) {
        for (int i = 0; i < GEN_ROWS * GEN_COLS; i++) src[i] = (float)(i % 17) * 0.25f;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) gen_time(c, kinds[k], src, dst);
    }
    free(src);
    free(dst);
#ifdef FJ_BENCH_DNNL
    if (omp_set_num_threads && omp_threads > 0) omp_set_num_threads(omp_threads);
#endif
}
