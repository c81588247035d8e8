/* stitch.c (bench): the cost of stitching workers to their caller: the
 * two-thread GEMM and eltwise rows with the stitch on and off, side by
 * side in one process (rt_set_stitch, a switch for this measurement
 * only), and one fj_origin_run call against a plain call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "runtime/pool.h"

typedef struct gemm_case {
    int n;
    float *a, *b, *c;
} gemm_case;

static void gemm_call(fj_runtime *rt, void *ctx) {
    gemm_case *g = ctx;
    fj_gemm_f32(rt, 'N', 'N', g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n, 0.0f, g->c, g->n);
}

typedef struct elt_case {
    size_t n;
    float *src, *dst;
} elt_case;

static void elt_call(fj_runtime *rt, void *ctx) {
    elt_case *e = ctx;
    fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0.0f, e->src, e->dst, e->n);
}

/* Median time of one call (ns) for each runtime, the two measured in
 * alternation so the shared machine's phases hit both alike. */
static void alternate(const bench_ctx *c, fj_runtime *rt[2], void (*call)(fj_runtime *, void *),
                      void *ctx, int calls, double med[2]) {
    int reps = c->quick ? 5 : 2 * c->reps + 1;
    double *t[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
    if (!t[0] || !t[1]) {
        free(t[0]);
        free(t[1]);
        med[0] = med[1] = 0;
        return;
    }
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < calls; i++) call(rt[v], ctx); /* warm: kernels, pool, pages */
    for (int r = 0; r < reps; r++)
        for (int v0 = 0; v0 < 2; v0++) {
            int v = (r & 1) ? 1 - v0 : v0;
            double t0 = bench_now_ns();
            for (int i = 0; i < calls; i++) call(rt[v], ctx);
            t[v][r] = (bench_now_ns() - t0) / calls;
        }
    for (int v = 0; v < 2; v++) med[v] = bench_median(t[v], reps);
    free(t[0]);
    free(t[1]);
}

static void noop(void *arg) { __asm__ volatile("" ::: "memory"); (void)arg; }

__attribute__((noinline)) static double origin_run_ns(int n, int stitched) {
    fj_origin o;
    fj_origin_capture(&o);
    void (*volatile fn)(void *) = noop;
    double t0 = bench_now_ns();
    for (int i = 0; i < n; i++) {
        if (stitched) fj_origin_run(&o, fn, NULL);
        else fn(NULL);
    }
    return (bench_now_ns() - t0) / n;
}

void bench_stitch(const bench_ctx *c) {
    fj_runtime *rt[2] = {NULL, NULL};
    for (int v = 0; v < 2; v++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = 2;
        if (fj_runtime_create(&o, &rt[v]) != FJ_OK) {
            fprintf(stderr, "stitch: fj_runtime_create: %s\n", fj_last_error());
            fj_runtime_destroy(rt[0]);
            return;
        }
    }
    rt_set_stitch(rt[1], 0);
    static const char *variant[2] = {"stitched", "unstitched"};

    static const int sizes[] = {256, 512};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        gemm_case g = {n, malloc(sizeof(float) * (size_t)n * n),
                       malloc(sizeof(float) * (size_t)n * n), malloc(sizeof(float) * (size_t)n * n)};
        if (!g.a || !g.b || !g.c) break;
        for (int i = 0; i < n * n; i++) {
            g.a[i] = (float)(i % 13) * 0.125f;
            g.b[i] = (float)(i % 7) * 0.25f;
        }
        double med[2];
        alternate(c, rt, gemm_call, &g, n <= 256 ? 50 : 8, med);
        char name[48];
        snprintf(name, sizeof name, "gemm %dx%dx%d 2t", n, n, n);
        for (int v = 0; v < 2; v++)
            bench_row("stitch", name, variant[v], 2.0 * n * n * n / med[v], "GFLOP/s",
                      v == 0 ? med[1] / med[0] : 0);
        free(g.a);
        free(g.b);
        free(g.c);
    }

    static const size_t elts[] = {(size_t)1 << 20, (size_t)4 << 20};
    for (size_t s = 0; s < sizeof elts / sizeof elts[0]; s++) {
        elt_case e = {elts[s], malloc(elts[s] * sizeof(float)), malloc(elts[s] * sizeof(float))};
        if (!e.src || !e.dst) break;
        for (size_t i = 0; i < e.n; i++) e.src[i] = (float)((int)(i % 11) - 5);
        double med[2];
        alternate(c, rt, elt_call, &e, 20, med);
        char name[48];
        snprintf(name, sizeof name, "relu %zu MiB 2t", e.n * sizeof(float) >> 20);
        for (int v = 0; v < 2; v++)
            bench_row("stitch", name, variant[v], 2.0 * (double)e.n * sizeof(float) / med[v],
                      "GB/s", v == 0 ? med[1] / med[0] : 0);
        free(e.src);
        free(e.dst);
    }

    double d[2][9];
    for (int r = 0; r < 9; r++) {
        d[0][r] = origin_run_ns(1 << 16, 1);
        d[1][r] = origin_run_ns(1 << 16, 0);
    }
    bench_row("stitch", "fj_origin_run call", "fj_origin_run", bench_median(d[0], 9), "ns", 0);
    bench_row("stitch", "fj_origin_run call", "plain call", bench_median(d[1], 9), "ns", 0);
    fj_runtime_destroy(rt[0]);
    fj_runtime_destroy(rt[1]);
}
