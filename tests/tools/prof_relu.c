/* prof_relu.c: main -> outer -> inner -> JIT relu kernel for a second, for
 * tool_pprof.sh, which links it with -lprofiler and runs it with
 * CPUPROFILE=FILE: the profiler starts when the program loads and writes
 * the profile (with the process's mappings as they are then) at exit,
 * after main has destroyed the runtime. */
#include <framejit.h>
#include <gperftools/profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { N = 16384 };
static float src[N], dst[N];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void inner(fj_runtime *rt) {
    if (fj_eltwise_f32(rt, FJ_ELT_RELU, 0, 0, src, dst, N) != FJ_OK) abort();
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

__attribute__((noinline)) static void outer(fj_runtime *rt) {
    inner(rt);
    __asm__ volatile("" ::: "memory");
}

int main(void) {
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt;
    if (fj_runtime_create(&o, &rt) != FJ_OK) {
        fprintf(stderr, "prof_relu: %s\n", fj_last_error());
        return 1;
    }
    for (int i = 0; i < N; i++) src[i] = (float)(i % 7) - 3.0f;
    ProfilerFlush(); /* a profiler symbol: -lprofiler stays linked */
    /* The clock is read once per 64 calls: its vDSO code, which pprof
     * cannot name, stays far below the test's 5% bound for raw addresses. */
    for (double t0 = now(); now() - t0 < 1.0;)
        for (int i = 0; i < 64; i++) outer(rt);
    fj_runtime_destroy(rt);
    return 0;
}
