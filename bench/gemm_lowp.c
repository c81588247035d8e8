/* gemm_lowp.c (bench): int8 and bf16 GEMM vs oneDNN (dnnl_gemm_u8s8s32, a bf16 matmul primitive), 1 and 2 threads.
 *
 * Rows: GOPS (2*m*n*k per call), the ratio to oneDNN measured in the same
 * process with interleaved repetitions, and % of the dot-product peak:
 * the f32 FMA loop's rate measured beside each block times 4 for int8
 * (a vpdpbusd does 4 multiply-adds per f32 lane) and 2 for bf16
 * (vdpbf16ps: 2), i.e. assuming the dot instruction issues at the FMA's
 * rate. FJ_BENCH_LOWP_SHAPES="256,64x64x1024" limits the shapes,
 * FJ_BENCH_GEMM_THREADS=1 or 2 the thread counts and FJ_BENCH_LOWP_TYPES
 * ("int8" or "bf16") the types. The int8 results are also compared with
 * oneDNN's element by element. Shapes named MxNxK-bt have B transposed
 * (B stored n x k: x @ W^T with W out x in, the batch-1 inference layer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#ifdef FJ_BENCH_DNNL
#include <dnnl.h>
#endif

typedef struct lshape {
    int m, n, k;
    int tb;  /* B transposed */
} lshape;

static const lshape lshapes[] = {
    {64, 64, 64, 0}, {256, 256, 256, 0}, {1024, 1024, 1024, 0}, {64, 64, 1024, 0},
    {1024, 1024, 64, 0}, {1024, 1, 1024, 0}, {1, 1024, 1024, 0}, {1, 1024, 1024, 1},
};

typedef struct lbufs {
    lshape s;
    int bf16;
    uint8_t *a;   /* u8 or bf16 */
    uint8_t *b;   /* s8 or bf16 */
    void *c;      /* int32 or f32 */
    int32_t co;
#ifdef FJ_BENCH_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t mm;
    dnnl_memory_t ma, mb, mc;
#endif
} lbufs;

static int run_fj(fj_runtime *rt, lbufs *g) {
    lshape s = g->s;
    const char tb = s.tb ? 'T' : 'N';
    const int64_t ldb = s.tb ? s.k : s.n;
    if (g->bf16)
        return fj_gemm_bf16bf16f32(rt, 'N', tb, s.m, s.n, s.k, 1.0f, (const uint16_t *)g->a, s.k,
                                   (const uint16_t *)g->b, ldb, 0.0f, g->c, s.n) == FJ_OK;
    return fj_gemm_u8s8s32(rt, 'N', tb, 'F', s.m, s.n, s.k, 1.0f, g->a, s.k, 0,
                           (const int8_t *)g->b, ldb, 0, 0.0f, g->c, s.n, &g->co) == FJ_OK;
}

#ifdef FJ_BENCH_DNNL
/* The bf16 matmul primitive (src, weights bf16; dst f32), created once. */
static int dnn_bf16_setup(lbufs *g) {
    lshape s = g->s;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {s.m, s.k}, db = {s.k, s.n}, dc = {s.m, s.n};
    if (dnnl_engine_create(&g->eng, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_stream_create(&g->st, g->eng, dnnl_stream_default_flags) != dnnl_success) return 0;
    if (dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, s.tb ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab) != dnnl_success)
        return 0;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success) return 0;
    if (dnnl_primitive_desc_create(&pd, &md, NULL, g->eng, NULL) != dnnl_success) return 0;
    dnnl_status_t st = dnnl_primitive_create(&g->mm, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) return 0;
    return dnnl_memory_create(&g->ma, &a, g->eng, g->a) == dnnl_success &&
           dnnl_memory_create(&g->mb, &b, g->eng, g->b) == dnnl_success &&
           dnnl_memory_create(&g->mc, &c, g->eng, g->c) == dnnl_success;
}

static int run_dnnl(lbufs *g) {
    lshape s = g->s;
    if (!g->bf16)
        return dnnl_gemm_u8s8s32('N', s.tb ? 'T' : 'N', 'F', s.m, s.n, s.k, 1.0f, g->a, s.k, 0,
                                 (const int8_t *)g->b, s.tb ? s.k : s.n, 0, 0.0f, g->c, s.n,
                                 &g->co) == dnnl_success;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, g->ma}, {DNNL_ARG_WEIGHTS, g->mb},
                               {DNNL_ARG_DST, g->mc}};
    if (dnnl_primitive_execute(g->mm, g->st, 3, args) != dnnl_success) return 0;
    return dnnl_stream_wait(g->st) == dnnl_success;
}

static void dnn_free(lbufs *g) {
    if (g->mm) dnnl_primitive_destroy(g->mm);
    if (g->ma) dnnl_memory_destroy(g->ma);
    if (g->mb) dnnl_memory_destroy(g->mb);
    if (g->mc) dnnl_memory_destroy(g->mc);
    if (g->st) dnnl_stream_destroy(g->st);
    if (g->eng) dnnl_engine_destroy(g->eng);
}
#endif

static int run_v(int v, fj_runtime *rt, lbufs *g) {
#ifdef FJ_BENCH_DNNL
    if (v == 1) return run_dnnl(g);
#endif
    (void)v;
    return run_fj(rt, g);
}

static void one(const bench_ctx *c, fj_runtime *rt, int threads, lshape s, int bf16) {
    int nv = 1;
#ifdef FJ_BENCH_DNNL
    nv = 2;
#endif
    size_t es = bf16 ? 2 : 1;
    lbufs g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.bf16 = bf16;
    g.co = 0;
    g.a = aligned_alloc(64, ((size_t)s.m * s.k * es + 63) & ~(size_t)63);
    g.b = aligned_alloc(64, ((size_t)s.k * s.n * es + 63) & ~(size_t)63);
    g.c = aligned_alloc(64, ((size_t)s.m * s.n * 4 + 63) & ~(size_t)63);
    int32_t *ref = malloc((size_t)s.m * s.n * 4);
    const char *ty = bf16 ? "bf16bf16f32" : "u8s8s32";
    if (!g.a || !g.b || !g.c || !ref) goto out;
    for (size_t i = 0; i < (size_t)s.m * s.k; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) >> 9;
        if (bf16) ((uint16_t *)g.a)[i] = (uint16_t)(0x3e00 + (h & 0x3ff) + (h & 1 ? 0x8000 : 0));
        else g.a[i] = (uint8_t)h;
    }
    for (size_t i = 0; i < (size_t)s.k * s.n; i++) {
        uint32_t h = (uint32_t)(i * 2246822519u) >> 11;
        if (bf16) ((uint16_t *)g.b)[i] = (uint16_t)(0x3e00 + (h & 0x3ff) + (h & 2 ? 0x8000 : 0));
        else g.b[i] = (uint8_t)h;
    }
#ifdef FJ_BENCH_DNNL
    if (bf16 && !dnn_bf16_setup(&g)) {
        fprintf(stderr, "bench lowp: oneDNN bf16 matmul unavailable\n");
        nv = 1;
    }
#endif
    bench_omp_threads(threads);
    long calls[2] = {1, 1};
    for (int v = 0; v < nv; v++) {
        if (!run_v(v, rt, &g)) {
            fprintf(stderr, "bench lowp: %s %s failed: %s\n", ty, v ? "onednn" : "framejit",
                    fj_last_error());
            goto out;
        }
        if (v == 0) memcpy(ref, g.c, (size_t)s.m * s.n * 4);
        else if (!bf16) {
            long diff = 0;
            for (size_t i = 0; i < (size_t)s.m * s.n; i++) diff += ref[i] != ((int32_t *)g.c)[i];
            printf("# lowp: %s %dx%dx%d: %ld of %ld elements differ from oneDNN's\n", ty, s.m,
                   s.n, s.k, diff, (long)s.m * s.n);
        }
        double t0 = bench_now_ns();
        run_v(v, rt, &g);
        double o = bench_now_ns() - t0;
        calls[v] = bench_calls_20ms(o);
    }
    int reps = c->reps > 32 ? 32 : c->reps;
    double t[2][32], pk[2][32], pkc[2][32];
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nv; i++) {
            int v = bench_order(r, i, nv);
            struct timespec pause = {0, threads > 1 ? 30000000 : 0};
            if (threads > 1) nanosleep(&pause, NULL);
            bench_fma_sample(fj_runtime_isa(rt) == FJ_ISA_AVX512, 5.0, &pk[v][r], &pkc[v][r]);
            if (threads > 1) pk[v][r] = pkc[v][r];
            double t0 = bench_now_ns();
            for (long q = 0; q < calls[v]; q++) run_v(v, rt, &g);
            t[v][r] = (bench_now_ns() - t0) / (double)calls[v];
        }
    double ops = 2.0 * s.m * s.n * s.k, gops[2] = {0}, pf[2] = {0}, q[32];
    double mult = bf16 ? 2.0 : 4.0;
    for (int v = 0; v < nv; v++) {
        gops[v] = ops / bench_median(t[v], reps);
        for (int r = 0; r < reps; r++) q[r] = ops / t[v][r] / (threads * pk[v][r] * mult);
        pf[v] = bench_median(q, reps);
    }
    static const char *vn[2] = {"framejit", "onednn"};
    char name[64], var[48];
    snprintf(name, sizeof name, "%s %dx%dx%d%s %dt", ty, s.m, s.n, s.k, s.tb ? "-bt" : "", threads);
    for (int v = 0; v < nv; v++) {
        bench_row("lowp", name, vn[v], gops[v], "GOPS", nv > 1 ? gops[v] / gops[1] : 0);
        snprintf(var, sizeof var, "%s %%peak", vn[v]);
        bench_row("lowp", name, var, 100.0 * pf[v], "%", 0);
    }
out:
#ifdef FJ_BENCH_DNNL
    dnn_free(&g);
#endif
    free(g.a);
    free(g.b);
    free(g.c);
    free(ref);
}

/* int8 on two threads after the caller slept 3 or 30 ms (as the gemm
 * section's rows). */
typedef struct pause_ctx {
    fj_runtime *rt;
    lbufs *g;
} pause_ctx;

static int pause_run(int v, void *ctx) {
    pause_ctx *p = ctx;
    return run_v(v, p->rt, p->g);
}

static void after_pause(const bench_ctx *c, fj_runtime *rt, lshape s) {
    lbufs g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.a = calloc((size_t)s.m * s.k, 1);
    g.b = calloc((size_t)s.k * s.n, 1);
    g.c = calloc((size_t)s.m * s.n, 4);
    static const char *const vn[2] = {"framejit", "onednn"};
    int nv = 1;
#ifdef FJ_BENCH_DNNL
    nv = 2;
#endif
    pause_ctx p = {rt, &g};
    char name[64];
    snprintf(name, sizeof name, "u8s8s32 %dx%dx%d 2t", s.m, s.n, s.k);
    bench_omp_threads(2);
    if (g.a && g.b && g.c) bench_after_pause("lowp", name, c->quick, nv, vn, pause_run, &p);
    free(g.a);
    free(g.b);
    free(g.c);
}

void bench_lowp(const bench_ctx *c) {
    const char *only = getenv("FJ_BENCH_LOWP_SHAPES");
    const char *ty = getenv("FJ_BENCH_LOWP_TYPES");
    printf("# lowp: row-major NN, alpha 1, beta 0 (int8: offsets 0, co 'F' 0); isa %s; ratio = "
           "GOPS / oneDNN's; %%peak: against the f32 FMA loop beside each block x4 (int8) or x2 "
           "(bf16)\n", bench_isa());
    for (int t = 1; t <= 2; t++) {
        if (!bench_threads_listed(t)) continue;
        fj_options o;
        fj_options_init(&o);
        o.threads = t;
        fj_runtime *rt = NULL;
        if (fj_runtime_create(&o, &rt) != FJ_OK) {
            fprintf(stderr, "bench lowp: %s\n", fj_last_error());
            return;
        }
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            if (ty && !strstr(ty, bf16 ? "bf16" : "int8")) continue;
            for (size_t i = 0; i < sizeof lshapes / sizeof lshapes[0]; i++) {
                if (only && !bench_shape_listed(only, lshapes[i].m, lshapes[i].n, lshapes[i].k)) continue;
                one(c, rt, t, lshapes[i], bf16);
            }
        }
        const lshape big = {1024, 1024, 1024, 0};
        if (t == 2 && (!ty || strstr(ty, "int8")) &&
            (!only || bench_shape_listed(only, big.m, big.n, big.k))) {
            printf("# lowp: a call after a pause, as in the gemm section\n");
            after_pause(c, rt, big);
        }
        fj_runtime_destroy(rt);
    }
}
