/* callchain.c: main -> outer -> inner -> JIT kernels, in a loop, for
 * profilers to look at.
 *
 *     callchain [SECONDS [THREADS]]        (default 3 seconds, 1 thread)
 *
 * Runs fj_eltwise_f32(FJ_ELT_RELU) on 16K floats on the calling thread
 * until SECONDS have passed. Profile it with
 *
 *     perf record -g -- ./callchain 2 && perf report --no-children
 *
 * and every sample in the kernel carries inner, outer and main: the kernel
 * has a frame-pointer frame, so perf's default unwinder walks through it.
 *
 * With more than one thread (THREADS, or FRAMEJIT_THREADS, which
 * overrides it) each round also runs a 256^3 GEMM and a relu on 4 MiB,
 * both split over framejit's worker threads. Their samples on the workers
 * carry inner, outer and main too: the workers run under a frame record
 * that continues into this thread's frames (see fj_origin in framejit.h).
 *
 * At the end it prints the number of calls on stdout, and on stderr one line
 * per kernel it finds in the process's JIT code mappings:
 *
 *     callchain: kernel 0x7f...-0x7f... fj_eltwise_relu_f32_...
 *
 * (the tool-level tests use these ranges to tell JIT samples from others).
 */
#include <framejit.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_FLOATS (16 * 1024)
#define N_LARGE (1024 * 1024) /* large enough for eltwise to go parallel */
#define GEMM_N 256

/* The parallel part of a round (NULL when running on one thread). */
typedef struct par_work {
    float *a, *b, *c, *large;
} par_work;

static fj_status parallel_round(fj_runtime *rt, par_work *w) {
    fj_status s = fj_gemm_f32(rt, 'N', 'N', GEMM_N, GEMM_N, GEMM_N, 1.0f, w->a, GEMM_N, w->b,
                              GEMM_N, 0.0f, w->c, GEMM_N);
    if (s == FJ_OK)
        s = fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0.0f, w->large, w->large, N_LARGE);
    return s;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* noinline + noclone: the three frames must exist under their own names
 * (no inlining, no inner.constprop.0 clones), and each uses its callee's
 * result, so no call is a tail call (a tail call removes the caller from
 * every unwinder's view). */
__attribute__((noinline, noclone)) static long inner(fj_runtime *rt, float *buf, size_t n,
                                                     double seconds, par_work *w) {
    long calls = 0;
    double end = now_sec() + seconds;
    do {
        /* 64 calls per clock read: the clock is cheap, but not free. */
        for (int i = 0; i < 64; i++) {
            fj_status s = fj_eltwise_f32(rt, FJ_ELT_RELU, 0.0f, 0.0f, buf, buf, n);
            if (s == FJ_OK && w && i % 8 == 0) s = parallel_round(rt, w);
            if (s != FJ_OK) {
                fprintf(stderr, "callchain: fj_eltwise_f32: %s: %s\n", fj_status_str(s),
                        fj_last_error());
                return -1;
            }
            calls++;
            /* relu is idempotent: refresh some negatives so the data stays live. */
            buf[(size_t)calls % n] = -(float)(calls & 7);
        }
    } while (now_sec() < end);
    __asm__ volatile("" ::: "memory");
    return calls;
}

__attribute__((noinline, noclone)) static long outer(fj_runtime *rt, float *buf, size_t n,
                                                     double seconds, par_work *w) {
    long calls = inner(rt, buf, n, seconds, w);
    __asm__ volatile("" ::: "memory");
    return calls;
}

/* Prints every framejit kernel in the executable mappings that are not
 * ordinary files (anonymous, /dev/shm arena files, memfds): the code cache
 * lives there. fj_symbolize is a lock-free lookup, so probing a mapping
 * every 16 bytes is cheap; a kernel's range is the run of bytes it names. */
static void print_kernels(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8] = {0}, path[768] = {0};
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %767[^\n]", &lo, &hi, perms, path) < 3)
            continue;
        if (perms[2] != 'x') continue;
        int jit = path[0] == 0 || strncmp(path, "/dev/shm/", 9) == 0 ||
                  strncmp(path, "/memfd:", 7) == 0 || strncmp(path, "[anon", 5) == 0;
        if (!jit) continue;
        if (hi - lo > ((unsigned long)256 << 20)) hi = lo + ((unsigned long)256 << 20);
        for (uintptr_t p = lo; p < hi;) {
            uintptr_t off;
            const char *name = fj_symbolize((const void *)p, &off);
            if (!name) {
                p += 16; /* kernels start on 16-byte boundaries */
                continue;
            }
            uintptr_t start = p - off, end = p;
            while (end < hi && fj_symbolize((const void *)end, NULL) == name) end++;
            fprintf(stderr, "callchain: kernel 0x%lx-0x%lx %s\n", (unsigned long)start,
                    (unsigned long)end, name);
            found++;
            p = end;
        }
    }
    fclose(f);
    if (!found) fprintf(stderr, "callchain: no kernel found in the JIT mappings\n");
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (seconds <= 0 || threads < 1) {
        fprintf(stderr, "usage: %s [SECONDS [THREADS]]\n", argv[0]);
        return 2;
    }
    const char *te = getenv("FRAMEJIT_THREADS");
    int parallel = (te && *te ? atoi(te) : threads) != 1;

    fj_options opts;
    fj_options_init(&opts);
    opts.threads = threads; /* 1: all samples on this thread, under main's stack */
    fj_runtime *rt;
    fj_status s = fj_runtime_create(&opts, &rt);
    if (s != FJ_OK) {
        fprintf(stderr, "callchain: fj_runtime_create: %s: %s\n", fj_status_str(s),
                fj_last_error());
        return 1;
    }

    float *buf = malloc(N_FLOATS * sizeof *buf);
    if (!buf) {
        fj_runtime_destroy(rt);
        return 1;
    }
    for (size_t i = 0; i < N_FLOATS; i++) buf[i] = (float)((int)(i % 17) - 8);
    par_work work = {0}, *w = NULL;
    if (parallel) {
        size_t g = (size_t)GEMM_N * GEMM_N;
        work.a = malloc(g * sizeof(float));
        work.b = malloc(g * sizeof(float));
        work.c = malloc(g * sizeof(float));
        work.large = malloc(N_LARGE * sizeof(float));
        if (!work.a || !work.b || !work.c || !work.large) {
            fprintf(stderr, "callchain: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < g; i++) {
            work.a[i] = (float)(i % 7) * 0.25f;
            work.b[i] = (float)(i % 5) * 0.5f;
        }
        for (size_t i = 0; i < N_LARGE; i++) work.large[i] = (float)((int)(i % 13) - 6);
        w = &work;
    }

    double t0 = now_sec();
    long calls = outer(rt, buf, N_FLOATS, seconds, w);
    double dt = now_sec() - t0;
    __asm__ volatile("" ::: "memory");
    if (calls < 0) {
        free(buf);
        fj_runtime_destroy(rt);
        return 1;
    }

    printf("callchain: pid %ld: %ld relu calls on %d floats in %.2f s (%.2f us/call)\n",
           (long)getpid(), calls, N_FLOATS, dt, calls ? dt * 1e6 / (double)calls : 0.0);
    fflush(stdout);
    print_kernels();

    free(work.a);
    free(work.b);
    free(work.c);
    free(work.large);
    free(buf);
    fj_runtime_destroy(rt);
    return 0;
}
