/* peak.c (bench): measured f32 FMA peak (register-only loop) and copy bandwidth. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* 12 independent FMA chains: more than latency (4) x ports (2), so the
 * loop is bound by FMA throughput alone. Registers only, no memory. The
 * same loop for zmm and ymm: R is the register prefix. */
#define FJB_ZERO(n) "vxorps %%xmm" #n ", %%xmm" #n ", %%xmm" #n "\n\t"
#define FJB_FMA(R, n) "vfmadd231ps %%" R "12, %%" R "13, %%" R #n "\n\t"
#define FJB_FMA_LOOP(fn, R)                                                                   \
    static void fn(long iters) {                                                              \
        __asm__ volatile(FJB_ZERO(0) FJB_ZERO(1) FJB_ZERO(2) FJB_ZERO(3) FJB_ZERO(4)          \
                         FJB_ZERO(5) FJB_ZERO(6) FJB_ZERO(7) FJB_ZERO(8) FJB_ZERO(9)          \
                         FJB_ZERO(10) FJB_ZERO(11) FJB_ZERO(12) FJB_ZERO(13)                  \
                         "1:\n\t"                                                             \
                         FJB_FMA(R, 0) FJB_FMA(R, 1) FJB_FMA(R, 2) FJB_FMA(R, 3)              \
                         FJB_FMA(R, 4) FJB_FMA(R, 5) FJB_FMA(R, 6) FJB_FMA(R, 7)              \
                         FJB_FMA(R, 8) FJB_FMA(R, 9) FJB_FMA(R, 10) FJB_FMA(R, 11)            \
                         "dec %0\n\t"                                                          \
                         "jnz 1b\n\t"                                                          \
                         "vzeroupper\n\t"                                                      \
                         : "+r"(iters)                                                        \
                         :                                                                    \
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",    \
                           "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");         \
    }
FJB_FMA_LOOP(fma_loop_zmm, "zmm")
FJB_FMA_LOOP(fma_loop_ymm, "ymm")

typedef struct peak_job {
    int zmm;
    long iters;
    double ns;
} peak_job;

/* Thread CPU time, not wall time: on a shared machine the peak is what a
 * core does while it runs our thread, not how often it gets to. */
static void *peak_thread(void *p) {
    peak_job *j = p;
    double t0 = bench_cpu_ns();
    if (j->zmm) fma_loop_zmm(j->iters);
    else fma_loop_ymm(j->iters);
    j->ns = bench_cpu_ns() - t0;
    return NULL;
}

/* GFLOP/s of `threads` threads each running the loop; the slowest thread
 * sets the time (that is what a parallel GEMM waits for). */
static double peak_once(int zmm, int threads, long iters) {
    peak_job j[8];
    pthread_t t[8];
    if (threads > 8) threads = 8;
    for (int i = 0; i < threads; i++) j[i] = (peak_job){zmm, iters, 0};
    for (int i = 1; i < threads; i++) pthread_create(&t[i], NULL, peak_thread, &j[i]);
    peak_thread(&j[0]);
    double ns = j[0].ns;
    for (int i = 1; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (j[i].ns > ns) ns = j[i].ns;
    }
    double flops = (double)iters * 12 * (zmm ? 16 : 8) * 2 * threads;
    return flops / ns;
}

double bench_fma_peak(int zmm, int threads) {
    static double cache[2][9];
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    if (cache[zmm != 0][threads] > 0) return cache[zmm != 0][threads];
    /* The best of several: the peak is what the core can do, and the
     * shared machine only ever takes some of it away. */
    double best = 0;
    peak_once(zmm, threads, 2000000); /* warm up (clocks, AVX-512 license) */
    for (int r = 0; r < 7; r++) {
        double g = peak_once(zmm, threads, 4000000);
        if (g > best) best = g;
    }
    cache[zmm != 0][threads] = best;
    return best;
}

/* One run of the FMA loop on the calling thread lasting about ms: its
 * GFLOP/s by wall clock and by the thread's CPU time. The GEMM section runs
 * one just before each timed block, so that %peak compares the two at the
 * same moment of a machine whose speed moves. */
void bench_fma_sample(int zmm, double ms, double *gf_wall, double *gf_cpu) {
    static long iters_per_ms[2];
    long *ipm = &iters_per_ms[zmm != 0];
    if (!*ipm) {
        double t0 = bench_now_ns();
        zmm ? fma_loop_zmm(200000) : fma_loop_ymm(200000);
        double dt = bench_now_ns() - t0;
        *ipm = (long)(200000 * 1e6 / (dt > 1 ? dt : 1)) + 1;
    }
    long iters = (long)(ms * (double)*ipm) + 1;
    double t0 = bench_now_ns(), c0 = bench_cpu_ns();
    if (zmm) fma_loop_zmm(iters);
    else fma_loop_ymm(iters);
    double wall = bench_now_ns() - t0, cpu = bench_cpu_ns() - c0;
    double flops = (double)iters * 12 * (zmm ? 16 : 8) * 2;
    *gf_wall = flops / (wall > 1 ? wall : 1);
    *gf_cpu = flops / (cpu > 1 ? cpu : 1);
}

static double copy_bw(size_t bytes, int reps) {
    char *src = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
    if (!src || !dst) { free(src); free(dst); return 0; }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    double v[32];
    if (reps > 32) reps = 32;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ns();
        memcpy(dst, src, bytes);
        v[r] = 2.0 * (double)bytes / (bench_now_ns() - t0); /* read + write */
    }
    free(src);
    free(dst);
    return bench_median(v, reps);
}

void bench_peak(const bench_ctx *c) {
    printf("# peak: isa %s (the machine's zmm and ymm loops whatever it); register-only FMA "
           "loop (12 chains), thread CPU time, best of 7; memcpy bandwidth (read + write bytes, "
           "wall time), median of %d\n", bench_isa(), c->reps);
    bench_row("peak", "fma f32 zmm 1 thread", "machine", bench_fma_peak(1, 1), "GFLOP/s", 0);
    bench_row("peak", "fma f32 zmm 2 threads", "machine", bench_fma_peak(1, 2), "GFLOP/s", 0);
    bench_row("peak", "fma f32 ymm 1 thread", "machine", bench_fma_peak(0, 1), "GFLOP/s", 0);
    bench_row("peak", "memcpy 256 MiB", "machine", copy_bw((size_t)256 << 20, c->reps), "GB/s", 0);
    bench_row("peak", "memcpy 1 MiB (L2)", "machine", copy_bw((size_t)1 << 20, c->reps), "GB/s", 0);
}
