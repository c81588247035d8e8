/* eltwise.c (bench): element-wise kernels against a plain C loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* The plain C loop a user would write; the compiler may vectorize it. */
__attribute__((noinline)) static void relu_c(const float *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
}

static void relu_size(const bench_ctx *c, fj_runtime *rt, size_t bytes) {
    size_t n = bytes / sizeof(float);
    float *src = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
    for (size_t i = 0; i < n; i++) src[i] = (float)((int)(i % 17) - 8);
    memset(dst, 0, bytes);
    size_t calls = (size_t)(2e7 / (double)bytes) + 1; /* ~10 ms per repetition */
    double fj[32], ref[32];
    fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, dst, n); /* generate + warm */
    relu_c(src, dst, n);
    for (int rep = 0; rep < c->reps; rep++) {
        /* Interleaved so that noise from the shared machine hits both. */
        double t0 = bench_now_ns();
        for (size_t i = 0; i < calls; i++) fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, dst, n);
        double t1 = bench_now_ns();
        for (size_t i = 0; i < calls; i++) relu_c(src, dst, n);
        double t2 = bench_now_ns();
        fj[rep] = (t1 - t0) / (double)calls;
        ref[rep] = (t2 - t1) / (double)calls;
    }
    double f = bench_median(fj, c->reps), r = bench_median(ref, c->reps);
    char name[64];
    snprintf(name, sizeof name, "relu %zu B", bytes);
    bench_row("eltwise", name, "plain C", r, "ns", 0);
    bench_row("eltwise", name, "framejit", f, "ns", r / f);
    bench_row("eltwise", name, "framejit GB/s", 2.0 * (double)bytes / f, "GB/s", 0);
    free(src);
    free(dst);
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
    printf("# eltwise: isa %s, 1 thread, median of %d; ratio = plain C time / framejit time\n",
           fj_runtime_isa(rt) == FJ_ISA_AVX512 ? "avx512" : "avx2", c->reps);
    relu_size(c, rt, 4096);
    relu_size(c, rt, 256 * 1024);
    if (!c->quick) relu_size(c, rt, (size_t)64 << 20);
    fj_runtime_destroy(rt);
}
