/* gemm.c (bench): f32 GEMM vs oneDNN dnnl_sgemm and OpenBLAS, 1 and 2 threads.
 *
 * Also the kernel generation time of a new shape. FJ_BENCH_GEMM_SHAPES="256,64x64x1024"
 * limits the run to those shapes (N alone: NxNxN); FJ_BENCH_GEMM_THREADS=1 (or 2)
 * keeps only the one-thread (two-thread) rows, =0 neither. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#ifdef FJ_BENCH_DNNL
#include <dnnl.h>
#endif
#ifdef FJ_BENCH_OPENBLAS
#include <cblas.h>
#endif

typedef struct shape {
    int m, n, k;
} shape;

static const shape shapes[] = {
    {16, 16, 16},    {32, 32, 32},    {64, 64, 64},       {128, 128, 128}, {256, 256, 256},
    {512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}, {64, 64, 1024}, {1024, 1024, 64},
    {1, 1024, 1024}, {1024, 1, 1024}, /* a vector times a matrix, a matrix times a vector */
};

enum { V_FJ, V_DNNL, V_OBLAS, V_OSKX, V_N };
static const char *vname[V_N] = {"framejit", "onednn", "openblas", "openblas skx"};

/* Debian's OpenBLAS is built for every x86-64 core it knows and picks one
 * when it loads: the one OPENBLAS_CORETYPE names, else its own detection.
 * The rows show it as it picks by itself ("openblas") and with its
 * SkylakeX kernels ("openblas skx"), in one process: after
 * gotoblas_dynamic_quit() forgets the choice, gotoblas_dynamic_init()
 * chooses again from OPENBLAS_CORETYPE (and runs that core's setup), and
 * `gotoblas`, the chosen core's table of kernels and blocking, is switched
 * before each call. An OpenBLAS built for one core has none of these
 * symbols: its rows are the loaded core, without "openblas skx". */
#ifdef FJ_BENCH_OPENBLAS
typedef struct oblas_cores {
    void **table;         /* &gotoblas */
    void *loaded, *own, *skx;
    char own_name[32], skx_name[32], loaded_name[32];
} oblas_cores;
static oblas_cores ob;

static void *oblas_choose(void (*quit)(void), void (*init)(void), const char *core, char *name,
                          size_t n) {
    quit();
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    init();
    snprintf(name, n, "%s", openblas_get_corename());
    return *ob.table;
}

static void oblas_setup(void) {
    static int done;
    if (done) return;
    done = 1;
    ob.table = (void **)dlsym(RTLD_DEFAULT, "gotoblas");
    void (*init)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    void (*quit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    snprintf(ob.loaded_name, sizeof ob.loaded_name, "%s", openblas_get_corename());
    snprintf(ob.own_name, sizeof ob.own_name, "%s", ob.loaded_name);
    if (!ob.table || !*ob.table || !init || !quit) {
        ob.table = NULL;
        return;
    }
    ob.loaded = *ob.table;
    const char *env = getenv("OPENBLAS_CORETYPE");
    char *saved = env ? strdup(env) : NULL;
    /* An AVX2 run (--isa avx2, or an AVX2-only CPU) compares with
     * OpenBLAS's Haswell kernels (AVX2 + FMA) and has no SkylakeX row. */
    const int ymm = !strcmp(bench_isa(), "avx2");
    ob.own = oblas_choose(quit, init, ymm ? "Haswell" : NULL, ob.own_name, sizeof ob.own_name);
    ob.skx = ymm ? NULL : oblas_choose(quit, init, "SkylakeX", ob.skx_name, sizeof ob.skx_name);
    if (saved) setenv("OPENBLAS_CORETYPE", saved, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    free(saved);
    /* A core it does not know falls back to another one: no SkylakeX row
     * under a wrong name. */
    if (!ob.skx || strcmp(ob.skx_name, "SkylakeX") != 0) ob.skx = NULL;
    *ob.table = ob.own;
}
#endif

typedef struct gemm_bufs {
    shape s;
    float *a, *b, *c;
} gemm_bufs;

static int variant_present(int v) {
    switch (v) {
    case V_FJ: return 1;
#ifdef FJ_BENCH_DNNL
    case V_DNNL: return 1;
#endif
#ifdef FJ_BENCH_OPENBLAS
    case V_OBLAS: return 1;
    case V_OSKX: return ob.skx != NULL;
#endif
    default: return 0;
    }
}

static int run_variant(int v, fj_runtime *rt, const gemm_bufs *g) {
    const shape *s = &g->s;
    switch (v) {
    case V_FJ:
        return fj_gemm_f32(rt, 'N', 'N', s->m, s->n, s->k, 1.0f, g->a, s->k, g->b, s->n, 0.0f,
                           g->c, s->n) == FJ_OK;
#ifdef FJ_BENCH_DNNL
    case V_DNNL:
        return dnnl_sgemm('N', 'N', s->m, s->n, s->k, 1.0f, g->a, s->k, g->b, s->n, 0.0f, g->c,
                          s->n) == dnnl_success;
#endif
#ifdef FJ_BENCH_OPENBLAS
    case V_OBLAS:
    case V_OSKX:
        if (ob.table) *ob.table = v == V_OSKX ? ob.skx : ob.own;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->m, s->n, s->k, 1.0f, g->a, s->k,
                    g->b, s->n, 0.0f, g->c, s->n);
        return 1;
#endif
    default: return 0;
    }
}

/* OpenBLAS's worker threads (its pthreads build) spin, yielding, for
 * ~2^28 cycles after a call before they sleep: ~100 ms, past the pause
 * between blocks. Alive in the next variant's block, they took its
 * second core: oneDNN's two-thread 256^3 fell to 5 GFLOP/s in two of three
 * runs (370 without), framejit's to 0.7x oneDNN in some. So after each of
 * its two-thread blocks OpenBLAS's threads are shut down (its next call
 * starts them again, inside its own timed block: ~0.1 ms of a 20 ms
 * block). Found at run time: an OpenBLAS without it keeps its threads. */
static void openblas_quiet(void) {
    static void (*shutdown)(void);
    static int looked;
    if (!looked) {
        looked = 1;
        shutdown = (void (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    }
    if (shutdown) shutdown();
}

static void set_threads(int t) {
    bench_omp_threads(t);
#ifdef FJ_BENCH_OPENBLAS
    openblas_set_num_threads(t);
#endif
}

static float *rand_buf(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((int)((i * 2654435761u) >> 7) % 2001 - 1000) / 1000.0f;
    return p;
}

static void one_shape(const bench_ctx *c, fj_runtime *rt, int threads, shape s) {
    gemm_bufs g = {s, rand_buf((size_t)s.m * s.k), rand_buf((size_t)s.k * s.n),
                   rand_buf((size_t)s.m * s.n)};
    if (!g.a || !g.b || !g.c) {
        fprintf(stderr, "bench gemm: out of memory\n");
        goto out;
    }
    double flops = 2.0 * s.m * s.n * s.k;
    long calls[V_N];
    double t[V_N][32], cpu[V_N][32], pk[V_N][32], pk_cpu[V_N][32];
    const int zmm = fj_runtime_isa(rt) == FJ_ISA_AVX512;
    int reps = c->reps > 32 ? 32 : c->reps;
    set_threads(threads);
    /* Two passes: framejit and oneDNN, then OpenBLAS's variants. A block
     * right after an OpenBLAS block can run much slower whichever library
     * it is, even after the pause and OpenBLAS's threads shut down
     * (docs/performance.md), so OpenBLAS never runs between the two
     * compared here; its own figures come from the blocks after. */
    for (int pass = 0; pass < 2; pass++) {
        int present[V_N], np = 0;
        for (int v = 0; v < V_N; v++)
            if (variant_present(v) && (v == V_OBLAS || v == V_OSKX) == pass) present[np++] = v;
        for (int i = 0; i < np; i++) {
            int v = present[i];
            /* Warm-up (kernel generation, library thread start), then size
             * a repetition to ~20 ms. */
            if (!run_variant(v, rt, &g)) {
                fprintf(stderr, "bench gemm: %s failed: %s\n", vname[v], fj_last_error());
                goto out;
            }
            double t0 = bench_now_ns();
            run_variant(v, rt, &g);
            double one = bench_now_ns() - t0;
            calls[v] = bench_calls_20ms(one);
        }
        /* Interleaved: each repetition runs every variant of the pass once,
         * in a balanced order (bench_order), so noise from the shared
         * machine hits all of them alike. With 2 threads a short pause
         * before each block lets the previous library's worker threads stop
         * spinning instead of competing with the next variant for the
         * cores: libgomp spins 300,000 pause instructions (GOMP_SPINCOUNT)
         * before it sleeps, ~17 ms where a pause takes 140 cycles, so the
         * pause is longer than that. */
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < np; i++) {
                int v = present[bench_order(r, i, np)];
                struct timespec pause = {0, threads > 1 ? 30000000 : 0};
                if (threads > 1) nanosleep(&pause, NULL);
                /* The FMA loop right before each block: a shared host can
                 * move the core between speeds every few tens of ms (one ran
                 * a register-only loop at ~157 or ~138 GFLOP/s), so %peak
                 * compares each block with the peak of that moment, not
                 * with the best one. */
                bench_fma_sample(zmm, 5.0, &pk[v][r], &pk_cpu[v][r]);
                /* Several threads: what the core does while it runs the loop
                 * (a wall-clock sample of the caller alone says little about
                 * the other thread, preempted or not), times the threads. */
                if (threads > 1) pk[v][r] = pk_cpu[v][r];
                double t0 = bench_now_ns(), c0 = bench_cpu_ns();
                for (long j = 0; j < calls[v]; j++) run_variant(v, rt, &g);
                t[v][r] = (bench_now_ns() - t0) / (double)calls[v];
                cpu[v][r] = (bench_cpu_ns() - c0) / (double)calls[v];
                if (threads > 1 && pass) openblas_quiet();
            }
    }
    double gf[V_N] = {0}, gc[V_N] = {0}, pf[V_N] = {0}, pc[V_N] = {0}, q[32];
    for (int v = 0; v < V_N; v++)
        if (variant_present(v)) {
            gf[v] = flops / bench_median(t[v], reps);
            gc[v] = flops / bench_median(cpu[v], reps);
            for (int r = 0; r < reps; r++) q[r] = flops / t[v][r] / (threads * pk[v][r]);
            pf[v] = bench_median(q, reps);
            for (int r = 0; r < reps; r++) q[r] = flops / cpu[v][r] / (threads * pk_cpu[v][r]);
            pc[v] = bench_median(q, reps);
        }
    char name[64], var[48];
    snprintf(name, sizeof name, "%dx%dx%d %dt", s.m, s.n, s.k, threads);
    for (int v = 0; v < V_N; v++) {
        if (!variant_present(v)) continue;
        bench_row("gemm", name, vname[v], gf[v], "GFLOP/s",
                  gf[V_DNNL] > 0 ? gf[v] / gf[V_DNNL] : 0);
        snprintf(var, sizeof var, "%s %%peak", vname[v]);
        bench_row("gemm", name, var, 100.0 * pf[v], "%", 0);
    }
    for (int r = 0; r < reps; r++) q[r] = threads * pk[V_FJ][r];
    bench_row("gemm", name, "fma peak beside framejit", bench_median(q, reps), "GFLOP/s", 0);
    /* One thread runs on the calling thread in every library, so its
     * CPU time is the same work without the time other processes of the
     * shared machine took from it. */
    if (threads == 1)
        for (int v = 0; v < V_N; v++) {
            if (!variant_present(v)) continue;
            snprintf(var, sizeof var, "%s cpu", vname[v]);
            bench_row("gemm", name, var, gc[v], "GFLOP/s", gc[V_DNNL] > 0 ? gc[v] / gc[V_DNNL] : 0);
            snprintf(var, sizeof var, "%s cpu %%peak", vname[v]);
            bench_row("gemm", name, var, 100.0 * pc[v], "%", 0);
        }
out:
    free(g.a);
    free(g.b);
    free(g.c);
}

#ifdef FJ_BENCH_DNNL
/* oneDNN's kernel generation for a new GEMM shape: a matmul primitive
 * (dnnl_sgemm has no creation step: it makes its kernels on its first
 * call in a process), with a bias and an activation post-op when act is
 * set (what an fj_gemm handle with both computes). */
typedef struct dnn_mm {
    shape s;
    int act;   /* dnnl_alg_kind_t, or 0 */
} dnn_mm;

static dnnl_status_t dnn_make_matmul(void *ctx, dnnl_engine_t eng, dnnl_primitive_t *prim) {
    const dnn_mm *q = ctx;
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_dims_t da = {q->s.m, q->s.k}, db = {q->s.k, q->s.n}, dc = {q->s.m, q->s.n},
                dbias = {1, q->s.n};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_f32, dnnl_ab);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_f32, dnnl_ab);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(&bias, 2, dbias, dnnl_f32, dnnl_ab);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (st == dnnl_success && q->act) {
        st = dnnl_primitive_attr_create(&attr);
        if (st == dnnl_success) st = dnnl_post_ops_create(&po);
        if (st == dnnl_success)
            st = dnnl_post_ops_append_eltwise(po, 1.0f, (dnnl_alg_kind_t)q->act, 0.0f, 0.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&md, &a, &b, q->act ? &bias : NULL, &c);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
    if (st == dnnl_success) st = dnnl_primitive_create(prim, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

static double dnn_matmul_gen_us(shape s, int reps, int act) {
    dnn_mm q = {s, act};
    return bench_dnnl_create_us(reps, dnn_make_matmul, &q);
}
#endif

static void call_fj(fj_runtime *rt, void *g) { run_variant(V_FJ, rt, g); }

/* Kernel generation for a new shape: the first call in a fresh runtime
 * minus a warm call of the same shape (bench_warm_ns), median over fresh
 * runtimes, by wall clock and by the thread's CPU time (one thread: all
 * of it). With
 * `used`, the runtime has run another shape first (a 16^3 GEMM, whose
 * kernel is another one): the new shape's cost without the runtime's own
 * first-use costs. Without, the runtime's creation is reported too: it
 * maps its first arena's pages ahead for the first kernel, so part of what
 * a first call used to pay is there. */
static void gen_time(const bench_ctx *c, shape s, int used) {
    gemm_bufs g = {s, rand_buf((size_t)s.m * s.k), rand_buf((size_t)s.k * s.n),
                   rand_buf((size_t)s.m * s.n)};
    gemm_bufs w = {{16, 16, 16}, rand_buf(256), rand_buf(256), rand_buf(256)};
    double v[32], vc[32], mk[32];
    int reps = bench_gen_reps(c) > 32 ? 32 : bench_gen_reps(c), n = 0;
    for (int r = 0; r < reps && g.a && g.b && g.c && w.a && w.b && w.c; r++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = 1;
        fj_runtime *rt;
        double m0 = bench_now_ns();
        if (fj_runtime_create(&o, &rt) != FJ_OK) break;
        mk[n] = (bench_now_ns() - m0) / 1e3;
        if (used) run_variant(V_FJ, rt, &w);
        double t0 = bench_now_ns(), c0 = bench_cpu_ns();
        run_variant(V_FJ, rt, &g);
        double t1 = bench_now_ns(), c1 = bench_cpu_ns(), ww, wc;
        bench_warm_ns(call_fj, rt, &g, &ww, &wc);
        vc[n] = ((c1 - c0) - wc) / 1e3;
        v[n++] = ((t1 - t0) - ww) / 1e3;
        fj_runtime_destroy(rt);
    }
    if (n) {
        char name[64];
        snprintf(name, sizeof name, "first call - warm %dx%dx%d%s", s.m, s.n, s.k,
                 used ? " (used rt)" : "");
        bench_row("gemm", name, "framejit", bench_median(v, n), "us", 0);
        const double fj_cpu = bench_median(vc, n);
        bench_row("gemm", name, "framejit cpu", fj_cpu, "us", 0);
#ifdef FJ_BENCH_DNNL
        const double d = used ? 0 : dnn_matmul_gen_us(s, reps, 0);
        if (d > 0)
            bench_row("gemm", name, "onednn matmul create cpu", d, "us",
                      fj_cpu > 0 ? d / fj_cpu : 0);
#endif
        if (!used) {
            snprintf(name, sizeof name, "runtime create (before %dx%dx%d)", s.m, s.n, s.k);
            bench_row("gemm", name, "framejit", bench_median(mk, n), "us", 0);
        }
    }
    free(g.a);
    free(g.b);
    free(g.c);
    free(w.a);
    free(w.b);
    free(w.c);
}

/* Kernel generation for a GEMM handle with a bias and an activation (the
 * fused epilogue): fj_gemm_create in a fresh runtime (planning and the
 * kernel), CPU time, median over fresh runtimes; beside oneDNN's matmul
 * with a bias and the activation as a post-op, created with its
 * primitive cache off. */
static void handle_gen_time(const bench_ctx *c, shape s, fj_eltwise_op act, const char *act_name,
                            int dnnl_act) {
    double vc[32];
    int reps = bench_gen_reps(c) > 32 ? 32 : bench_gen_reps(c), n = 0;
    fj_gemm_desc d = {.transa = 'N', .transb = 'N', .m = s.m, .n = s.n, .k = s.k, .lda = s.k,
                      .ldb = s.n, .ldc = s.n, .alpha = 1.0f, .beta = 0.0f, .has_bias = 1,
                      .post_op = act};
    for (int r = 0; r < reps; r++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = 1;
        fj_runtime *rt;
        fj_gemm *g;
        if (fj_runtime_create(&o, &rt) != FJ_OK) break;
        double c0 = bench_cpu_ns();
        fj_status st = fj_gemm_create(rt, &d, &g);
        double c1 = bench_cpu_ns();
        if (st == FJ_OK) {
            vc[n++] = (c1 - c0) / 1e3;
            fj_gemm_destroy(g);
        }
        fj_runtime_destroy(rt);
        if (st != FJ_OK) break;
    }
    if (!n) return;
    char name[64];
    snprintf(name, sizeof name, "create %dx%dx%d + bias + %s", s.m, s.n, s.k, act_name);
    const double fj_cpu = bench_median(vc, n);
    bench_row("gemm", name, "framejit cpu", fj_cpu, "us", 0);
#ifdef FJ_BENCH_DNNL
    const double dn = dnn_matmul_gen_us(s, reps, dnnl_act);
    if (dn > 0) bench_row("gemm", name, "onednn matmul create cpu", dn, "us", dn / fj_cpu);
#else
    (void)dnnl_act;
#endif
}

/* A new thread's first large call: the runtime has the kernel already,
 * and the thread makes (and first touches) its packing buffers then. The
 * first call on a new thread minus its second one, median over new
 * threads, by wall clock (the page faults are in the kernel's time). */
typedef struct first_ctx {
    fj_runtime *rt;
    const gemm_bufs *g;
    double us;
} first_ctx;

static void *first_call_thread(void *arg) {
    first_ctx *f = arg;
    double t0 = bench_now_ns();
    run_variant(V_FJ, f->rt, f->g);
    double t1 = bench_now_ns();
    run_variant(V_FJ, f->rt, f->g);
    double t2 = bench_now_ns();
    f->us = ((t1 - t0) - (t2 - t1)) / 1e3;
    return NULL;
}

static void thread_first_call(const bench_ctx *c, fj_runtime *rt, shape s) {
    gemm_bufs g = {s, rand_buf((size_t)s.m * s.k), rand_buf((size_t)s.k * s.n),
                   rand_buf((size_t)s.m * s.n)};
    double v[32];
    int n = 0, reps = c->quick ? 3 : 9;
    if (g.a && g.b && g.c && run_variant(V_FJ, rt, &g))
        for (int r = 0; r < reps; r++) {
            first_ctx f = {rt, &g, 0};
            pthread_t th;
            if (pthread_create(&th, NULL, first_call_thread, &f) != 0) break;
            pthread_join(th, NULL);
            v[n++] = f.us;
        }
    if (n) {
        char name[64];
        snprintf(name, sizeof name, "first call - warm %dx%dx%d (new thread)", s.m, s.n, s.k);
        bench_row("gemm", name, "framejit", bench_median(v, n), "us", 0);
    }
    free(g.a);
    free(g.b);
    free(g.c);
}

/* A two-thread call after the caller slept 3 or 30 ms (a request served
 * every few ms): how soon the idle workers of each library take part. */
typedef struct pause_ctx {
    fj_runtime *rt;
    const gemm_bufs *g;
} pause_ctx;

static int pause_run(int v, void *ctx) {
    const pause_ctx *p = ctx;
    return run_variant(v == 0 ? V_FJ : V_DNNL, p->rt, p->g);
}

static void after_pause(const bench_ctx *c, fj_runtime *rt, shape s) {
    gemm_bufs g = {s, rand_buf((size_t)s.m * s.k), rand_buf((size_t)s.k * s.n),
                   rand_buf((size_t)s.m * s.n)};
    static const char *const vn[2] = {"framejit", "onednn"};
    pause_ctx p = {rt, &g};
    char name[64];
    snprintf(name, sizeof name, "%dx%dx%d 2t", s.m, s.n, s.k);
    bench_omp_threads(2);
    if (g.a && g.b && g.c)
        bench_after_pause("gemm", name, c->quick, variant_present(V_DNNL) ? 2 : 1, vn, pause_run,
                          &p);
    free(g.a);
    free(g.b);
    free(g.c);
}

/* ---- frame-pointer tax (measurement builds only) ------------------------
 * With -Dfp_tax_probe=true, a runtime created with FRAMEJIT_FP_TAX_PROBE=1
 * builds its GEMM kernels with rbp as one more GPR and no frame pointer.
 * Three fresh one-thread runtimes run each shape in rounds of three short
 * adjacent blocks (~2 ms each, the order rotating from round to round),
 * timed by the calling thread's CPU time: two normal ones (fp, twin) and
 * the probe (nofp). Each round gives a ratio, fp time / nofp time: its
 * blocks saw nearly the same machine, so the slow drifts of a shared host
 * (which move a whole-run median by a few %) cancel in it. The tax is the
 * median ratio - 1, with a distribution-free 95% interval for that median
 * from the order statistics of the ratios. The same figure for fp against
 * twin, two runtimes with the same kernel, is the method's own error on
 * this host (in one process, where the kernels, the code cache and the
 * buffers happen to sit): a tax within it is not told apart from none. */
#if FJ_FP_TAX_PROBE
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median - 1 of the sorted ratios r[0..n) as a row, with its interval. */
static void tax_rows(const char *name, const char *what, double *r, int n) {
    qsort(r, (size_t)n, sizeof r[0], cmp_double);
    /* Ranks (1-based) lo..hi bracket the median with >= 95% confidence:
     * n/2 -+ 1.96 sqrt(n)/2 (normal approximation of the binomial; n >=
     * 11 here). */
    double half = 0.98 * sqrt((double)n);
    int lo = (int)floor(n / 2.0 - half), hi = (int)ceil(n / 2.0 + 1 + half);
    if (lo < 1) lo = 1;
    if (hi > n) hi = n;
    double med = n & 1 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
    char v[48];
    bench_row("gemm", name, what, 100.0 * (med - 1.0), "%", med);
    snprintf(v, sizeof v, "%s 95%% low", what);
    bench_row("gemm", name, v, 100.0 * (r[lo - 1] - 1.0), "%", 0);
    snprintf(v, sizeof v, "%s 95%% high", what);
    bench_row("gemm", name, v, 100.0 * (r[hi - 1] - 1.0), "%", 0);
}
#endif

static void fp_tax(const bench_ctx *c) {
#if FJ_FP_TAX_PROBE
    enum { FP, TWIN, NOFP };
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt[3] = {0};
    fj_status st = FJ_OK;
    for (int v = 0; v < 3 && st == FJ_OK; v++) {
        if (v == NOFP) setenv("FRAMEJIT_FP_TAX_PROBE", "1", 1);
        st = fj_runtime_create(&o, &rt[v]);
        unsetenv("FRAMEJIT_FP_TAX_PROBE");
    }
    if (st != FJ_OK) {
        fprintf(stderr, "bench gemm fp tax: %s\n", fj_last_error());
        goto out;
    }
    const char *only = getenv("FJ_BENCH_GEMM_SHAPES");
    printf("# gemm: frame-pointer tax, 1 thread: rbp frame vs rbp as a GPR (probe build), "
           "rounds of three adjacent ~2 ms blocks (frame, frame again in a twin runtime, "
           "no frame), thread CPU time; tax = median over rounds of fp time / nofp time - 1, "
           "[95%% interval of that median]; \"A/A\" the same for the two runtimes with the "
           "frame (the method's own error)\n");
    enum { MAX_ROUNDS = 201 };
    const double block_ns = 2e6, budget_ns = c->quick ? 4.5e8 : 1.5e9;
    const int min_rounds = c->quick ? 11 : 41;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        shape s = shapes[i];
        if (c->quick && (s.m > 1024 || s.m == 16)) continue;
        if (only && !bench_shape_listed(only, s.m, s.n, s.k)) continue;
        gemm_bufs g = {s, rand_buf((size_t)s.m * s.k), rand_buf((size_t)s.k * s.n),
                       rand_buf((size_t)s.m * s.n)};
        static double t[3][MAX_ROUNDS], tax[MAX_ROUNDS], aa[MAX_ROUNDS];
        long calls = 1;
        int rounds = 0, ok = g.a && g.b && g.c;
        for (int v = 0; v < 3 && ok; v++) ok = run_variant(V_FJ, rt[v], &g); /* generate */
        if (ok) {
            double t0 = bench_cpu_ns();
            run_variant(V_FJ, rt[FP], &g);
            double one = bench_cpu_ns() - t0;
            if (one < 1) one = 1;
            calls = (long)(block_ns / one) + 1;
            rounds = (int)(budget_ns / (3.0 * (double)calls * one));
            /* The big shapes take one call a block (20-150 ms): at least
             * min_rounds of them anyway, or their interval spans +-3%. */
            rounds = rounds < min_rounds ? min_rounds : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
        }
        for (int r = 0; r < rounds && ok; r++)
            for (int j = 0; j < 3; j++) {
                int v = (r + j) % 3;
                double c0 = bench_cpu_ns();
                for (long n = 0; n < calls; n++) run_variant(V_FJ, rt[v], &g);
                t[v][r] = (bench_cpu_ns() - c0) / (double)calls;
            }
        if (ok) {
            for (int r = 0; r < rounds; r++) {
                tax[r] = t[FP][r] / t[NOFP][r];
                aa[r] = t[FP][r] / t[TWIN][r];
            }
            double flops = 2.0 * s.m * s.n * s.k;
            char name[64];
            snprintf(name, sizeof name, "fp tax %dx%dx%d 1t", s.m, s.n, s.k);
            bench_row("gemm", name, "framejit rbp frame", flops / bench_median(t[FP], rounds),
                      "GFLOP/s", 0);
            bench_row("gemm", name, "framejit rbp as GPR",
                      flops / bench_median(t[NOFP], rounds), "GFLOP/s", 0);
            printf("# gemm: %s: %d rounds of %ld call%s a block\n", name, rounds, calls,
                   calls == 1 ? "" : "s");
            tax_rows(name, "tax", tax, rounds);
            tax_rows(name, "A/A", aa, rounds);
        } else {
            fprintf(stderr, "bench gemm fp tax: %dx%dx%d failed: %s\n", s.m, s.n, s.k,
                    fj_last_error());
        }
        free(g.a);
        free(g.b);
        free(g.c);
    }
out:
    for (int v = 0; v < 3; v++) fj_runtime_destroy(rt[v]);
#else
    (void)c;
    printf("# gemm: frame-pointer tax rows need a build configured with -Dfp_tax_probe=true\n");
    bench_row("gemm", "fp tax", "option off", 0, "%", 0);
#endif
}

void bench_gemm(const bench_ctx *c) {
    fj_runtime *rt[3] = {0};
    for (int t = 1; t <= 2; t++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = t;
        if (fj_runtime_create(&o, &rt[t]) != FJ_OK) {
            fprintf(stderr, "bench gemm: %s\n", fj_last_error());
            goto out;
        }
    }
    int avx512 = fj_runtime_isa(rt[1]) == FJ_ISA_AVX512;
    const char *only = getenv("FJ_BENCH_GEMM_SHAPES"); /* e.g. "256,1024" (M=N=K) */
    printf("# gemm: row-major NN, alpha 1, beta 0; isa %s; median of %d interleaved "
           "repetitions; ratio = GFLOP/s / oneDNN's GFLOP/s; %%peak: against a 5 ms run of a "
           "register-only %s FMA loop (x threads) just before each block, median of the "
           "per-block ratios\n", avx512 ? "avx512" : "avx2", c->reps, avx512 ? "zmm" : "ymm");
#ifdef FJ_BENCH_OPENBLAS
    oblas_setup();
    if (ob.table && !avx512)
        printf("# gemm: OpenBLAS: \"openblas\" its %s kernels (AVX2 + FMA, as the run)\n",
               ob.own_name);
    else if (ob.table)
        printf("# gemm: OpenBLAS: \"openblas\" its own choice of core on this CPU (%s), "
               "\"openblas skx\" its %s kernels%s%s%s\n", ob.own_name,
               ob.skx ? ob.skx_name : "SkylakeX (not in this build)",
               getenv("OPENBLAS_CORETYPE") ? "; OPENBLAS_CORETYPE=" : "",
               getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "",
               getenv("OPENBLAS_CORETYPE") ? " in the environment not applied" : "");
    else
        printf("# gemm: OpenBLAS core %s, as loaded (a build for one core: no other core "
               "to measure)\n", ob.loaded_name);
#endif
    /* (FJ_BENCH_GEMM_THREADS=0 leaves the generation and frame-pointer tax
     * rows only.) */
    for (int t = 1; t <= 2; t++) {
        if (!bench_threads_listed(t)) continue;
        /* The standalone figure (best of 7 short runs: the core's fast
         * state); %peak uses the loop's runs beside each block instead. */
        double peak = bench_fma_peak(avx512, 1) * t;
        bench_row("gemm", t == 1 ? "fma peak 1t" : "fma peak 2t (2 x 1t)", "machine", peak,
                  "GFLOP/s", 0);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            shape s = shapes[i];
            if (c->quick && (s.m > 1024 || s.m == 16)) continue;
            if (only && !bench_shape_listed(only, s.m, s.n, s.k)) continue;
            one_shape(c, rt[t], t, s);
        }
    }
    /* The same pause as before a two-thread block: the generation rows run
     * on one thread, and the last block's worker threads still spin. */
    struct timespec pause = {0, 30000000};
    nanosleep(&pause, NULL);
    gen_time(c, (shape){256, 256, 256}, 0);
    gen_time(c, (shape){64, 64, 64}, 0);
    gen_time(c, (shape){100, 60, 70}, 0);
    gen_time(c, (shape){256, 256, 256}, 1);
    gen_time(c, (shape){100, 60, 70}, 1);
#ifdef FJ_BENCH_DNNL
#define DA(x) x
#else
#define DA(x) 0
#endif
    handle_gen_time(c, (shape){256, 256, 256}, FJ_ELT_RELU, "relu", DA(dnnl_eltwise_relu));
    handle_gen_time(c, (shape){256, 256, 256}, FJ_ELT_GELU_ERF, "gelu_erf",
                    DA(dnnl_eltwise_gelu_erf));
#undef DA
    thread_first_call(c, rt[1], (shape){1024, 1024, 1024});
    if (bench_threads_listed(2)) {
        printf("# gemm: a call after a pause: wall time of one two-thread call right after "
               "the caller slept that long, median of %d pauses, the libraries alternated; "
               "ratio = oneDNN's time / framejit's\n", c->quick ? 5 : 21);
        static const shape ps[] = {{256, 256, 256}, {1024, 1024, 64}, {1024, 1024, 1024}};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            if (!only || bench_shape_listed(only, ps[i].m, ps[i].n, ps[i].k))
                after_pause(c, rt[2], ps[i]);
    }
    fp_tax(c);
out:
#ifdef FJ_BENCH_OPENBLAS
    if (ob.table) *ob.table = ob.loaded;
#endif
    fj_runtime_destroy(rt[1]);
    fj_runtime_destroy(rt[2]);
}
