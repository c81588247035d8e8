/* gemm_f64.c (bench): f64 GEMM, fj_gemm_f64 vs OpenBLAS cblas_dgemm, 1 and 2 threads.
 *
 * The GEMM section's shapes, row-major NN, alpha 1, beta 0; the two run
 * interleaved in one process (median of the repetitions), ratio =
 * framejit's GFLOP/s / OpenBLAS's. FJ_BENCH_GEMM_SHAPES and
 * FJ_BENCH_GEMM_THREADS select shapes and thread counts as for "gemm". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#ifdef FJ_BENCH_OPENBLAS
#include <cblas.h>
#endif

typedef struct dshape {
    int m, n, k;
} dshape;

static const dshape shapes[] = {
    {16, 16, 16},    {32, 32, 32},    {64, 64, 64},       {128, 128, 128}, {256, 256, 256},
    {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}, {64, 64, 1024}, {1024, 1024, 64},
    {1, 1024, 1024}, {1024, 1, 1024},
};

enum { D_FJ, D_OBLAS, D_N };
static const char *dname[D_N] = {"framejit", "openblas"};

static double *rand_dbuf(size_t n) {
    double *p = aligned_alloc(64, (n * sizeof(double) + 63) & ~(size_t)63);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = (double)((int)((i * 2654435761u) >> 7) % 2001 - 1000) / 1000.0;
    return p;
}

typedef struct dbufs {
    dshape s;
    double *a, *b, *c;
} dbufs;

static int run(int v, fj_runtime *rt, const dbufs *g) {
    const dshape *s = &g->s;
    if (v == D_FJ)
        return fj_gemm_f64(rt, 'N', 'N', s->m, s->n, s->k, 1.0, g->a, s->k, g->b, s->n, 0.0,
                           g->c, s->n) == FJ_OK;
#ifdef FJ_BENCH_OPENBLAS
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->m, s->n, s->k, 1.0, g->a, s->k,
                g->b, s->n, 0.0, g->c, s->n);
    return 1;
#else
    return 0;
#endif
}

/* OpenBLAS's workers spin after a call: shut them down after its
 * two-thread blocks so that they do not take framejit's second core. */
static void oblas_quiet(void) {
    static void (*shutdown)(void);
    static int looked;
    if (!looked) {
        looked = 1;
        shutdown = (void (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    }
    if (shutdown) shutdown();
}

static void one(const bench_ctx *c, fj_runtime *rt, int threads, dshape s) {
    dbufs g = {s, rand_dbuf((size_t)s.m * s.k), rand_dbuf((size_t)s.k * s.n),
               rand_dbuf((size_t)s.m * s.n)};
    int nv = D_N;
#ifndef FJ_BENCH_OPENBLAS
    nv = 1;
#endif
    double flops = 2.0 * s.m * s.n * s.k, t[D_N][32], gf[D_N] = {0};
    long calls[D_N];
    int reps = c->reps > 32 ? 32 : c->reps;
    if (!g.a || !g.b || !g.c) goto out;
#ifdef FJ_BENCH_OPENBLAS
    openblas_set_num_threads(threads);
#endif
    for (int v = 0; v < nv; v++) {
        if (!run(v, rt, &g)) {
            fprintf(stderr, "bench gemm_f64: %s failed: %s\n", dname[v], fj_last_error());
            goto out;
        }
        double t0 = bench_now_ns();
        run(v, rt, &g);
        double d = bench_now_ns() - t0;
        calls[v] = bench_calls_20ms(d);
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nv; i++) {
            int v = bench_order(r, i, nv);
            struct timespec pause = {0, 30000000};
            if (threads > 1) nanosleep(&pause, NULL);
            double t0 = bench_now_ns();
            for (long j = 0; j < calls[v]; j++) run(v, rt, &g);
            t[v][r] = (bench_now_ns() - t0) / (double)calls[v];
            if (threads > 1 && v == D_OBLAS) oblas_quiet();
        }
    char name[64];
    snprintf(name, sizeof name, "%dx%dx%d %dt", s.m, s.n, s.k, threads);
    for (int v = 0; v < nv; v++) gf[v] = flops / bench_median(t[v], reps);
    for (int v = 0; v < nv; v++)
        bench_row("gemm_f64", name, dname[v], gf[v], "GFLOP/s",
                  nv > 1 && gf[D_OBLAS] > 0 ? gf[v] / gf[D_OBLAS] : 0);
out:
    free(g.a);
    free(g.b);
    free(g.c);
}

void bench_gemm_f64(const bench_ctx *c) {
    const char *only = getenv("FJ_BENCH_GEMM_SHAPES");
    printf("# gemm_f64: row-major NN, alpha 1, beta 0; isa %s; median of %d interleaved "
           "repetitions; ratio = framejit GFLOP/s / OpenBLAS cblas_dgemm GFLOP/s%s\n", bench_isa(),
           c->reps,
#ifdef FJ_BENCH_OPENBLAS
           ""
#else
           " (OpenBLAS not built in: framejit only)"
#endif
    );
    for (int t = 1; t <= 2; t++) {
        if (!bench_threads_listed(t)) continue;
        fj_options o;
        fj_options_init(&o);
        o.threads = t;
        fj_runtime *rt = NULL;
        if (fj_runtime_create(&o, &rt) != FJ_OK) {
            fprintf(stderr, "bench gemm_f64: %s\n", fj_last_error());
            return;
        }
        if (t == 1)
            printf("# gemm_f64: isa %s; OpenBLAS core %s, as loaded (its own choice, or OPENBLAS_CORETYPE)\n",
                   fj_runtime_isa(rt) == FJ_ISA_AVX512 ? "avx512" : "avx2",
#ifdef FJ_BENCH_OPENBLAS
                   openblas_get_corename()
#else
                   "-"
#endif
            );
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (only && !bench_shape_listed(only, shapes[i].m, shapes[i].n, shapes[i].k)) continue;
            if (c->quick && shapes[i].m * (double)shapes[i].n * shapes[i].k > 6e8) continue;
            one(c, rt, t, shapes[i]);
        }
        fj_runtime_destroy(rt);
    }
}
