/* bench.h: the pieces of framejit-bench. Each section (one file each)
 * measures one family side by side with its references in the same run,
 * and reports rows through bench_row. Nothing here is ever a test. */
#ifndef FJ_BENCH_H
#define FJ_BENCH_H

#include <framejit.h>
#include <stddef.h>

typedef struct bench_ctx {
    int reps;               /* repetitions per measurement (median) */
    int quick;              /* --quick: fewer sizes and reps */
    const char *filter;     /* run only sections whose name contains this */
} bench_ctx;

/* Monotonic time in ns. */
double bench_now_ns(void);
/* The calling thread's CPU time in ns (what it ran, not what the shared
 * machine took from it). */
double bench_cpu_ns(void);
/* Median of v[0..n) (sorts v). */
double bench_median(double *v, int n);
/* Which of n variants runs i-th in repetition r: the rows of a Williams
 * design (with odd n each row also reversed, alternately), so that over n
 * (odd n: 2n) repetitions every variant runs right after every other one
 * equally often and first after the pause equally often: a block can run
 * slower right after a particular library's (docs/performance.md), and a
 * plain rotation puts the same variant there nearly every time. */
static inline int bench_order(int r, int i, int n) {
    int row = r % (n % 2 ? 2 * n : n), rev = n % 2 ? row % 2 : 0, shift = n % 2 ? row / 2 : row;
    int j = rev ? n - 1 - i : i;
    int w = j == 0 ? 0 : j % 2 ? (j + 1) / 2 : n - j / 2;
    return (w + shift) % n;
}
/* Calls that make a ~20 ms block, from one warm call's nanoseconds. */
static inline long bench_calls_20ms(double one_ns) {
    return (long)(2e7 / (one_ns > 1 ? one_ns : 1)) + 1;
}
/* Fresh runtimes per generation row: a row is the difference of two calls
 * (the first and a warm one), and the warm one's own time swings on a
 * shared host (a 256^3 GEMM's ~80 us by tens of us), so a median needs
 * more of them than the timing rows; a fresh runtime costs well under a
 * millisecond. */
static inline int bench_gen_reps(const bench_ctx *c) { return c->quick ? c->reps : 31; }
/* Kernel generation as the generation rows measure it: in each of
 * bench_gen_reps fresh one-thread runtimes (its own first-use costs paid
 * by an abs call first), the first call(rt, ctx) minus a warm one (the
 * median of BENCH_WARM_CALLS calls that follow, see bench_warm_ns);
 * medians by wall clock and by the thread's CPU time (the host's
 * preemptions left out: generation is all on the calling thread), in us.
 * Returns how many runtimes were measured (0: none, outputs untouched). */
int bench_gen_fresh(const bench_ctx *c, void (*call)(fj_runtime *rt, void *ctx), void *ctx,
                    double *wall_us, double *cpu_us);
/* A warm call's wall and CPU time in ns: the medians of BENCH_WARM_CALLS
 * calls of call(rt, ctx) in a row. One call alone is a poor reference:
 * a 256^3 GEMM's single calls run ~150 us or ~30 us longer (a fifth of
 * them, slow phases of the host), so first-minus-one-warm-call moved by
 * +-30 us from runtime to runtime and its median leaned on how many slow
 * warm calls it met. */
enum { BENCH_WARM_CALLS = 5 };
void bench_warm_ns(void (*call)(fj_runtime *rt, void *ctx), fj_runtime *rt, void *ctx,
                   double *wall_ns, double *cpu_ns);

/* A call's wall time right after the calling thread slept 3 ms, then 30
 * ms (the workers of both libraries idle meanwhile: framejit's nap,
 * libgomp's threads spin ~17 ms, then sleep), for each of nv variants,
 * alternated, median over 21 pauses (5 with quick); rows "<name> after
 * <pause> ms" in us, each variant's ratio against variant 1 (oneDNN's time
 * over its own: above 1 faster). run(v, ctx) makes variant v's call. */
void bench_after_pause(const char *section, const char *name, int quick, int nv,
                       const char *const *vnames, int (*run)(int v, void *ctx), void *ctx);

/* 1 if list (comma-separated "MxNxK", or "N" for NxNxN) names the shape
 * m x n x k: the GEMM sections' FJ_BENCH_*_SHAPES filters. */
int bench_shape_listed(const char *list, int m, int n, int k);
/* 1 unless FJ_BENCH_GEMM_THREADS names another thread count (0: none),
 * for the GEMM sections' one- and two-thread rows. */
int bench_threads_listed(int threads);
/* oneDNN (Debian's build) threads with OpenMP: sets its thread count
 * through libgomp, found at run time so the bench does not link it. */
void bench_omp_threads(int threads);

/* One result row: section, case, variant ("framejit", "onednn", "c" ...),
 * the measured value and its unit ("ns", "GB/s", "GFLOP/s", "us", "%"),
 * and an optional ratio against the section's reference (0 = none). */
void bench_row(const char *section, const char *name, const char *variant, double value,
               const char *unit, double ratio);

/* The ISA framejit's runtimes use in this run ("avx512" or "avx2": the
 * CPU's best, or what --isa / FRAMEJIT_ISA caps it to), for the sections'
 * header lines. */
const char *bench_isa(void);

/* Sections. */
void bench_eltwise(const bench_ctx *c);
void bench_encode(const bench_ctx *c);
void bench_peak(const bench_ctx *c);
void bench_gemm(const bench_ctx *c);
void bench_gemm_f64(const bench_ctx *c);
void bench_unwind(const bench_ctx *c);
void bench_profiling(const bench_ctx *c);
void bench_cache(const bench_ctx *c);
void bench_reduce(const bench_ctx *c);
void bench_stitch(const bench_ctx *c);
void bench_lowp(const bench_ctx *c);
#ifdef FJ_BENCH_DNNL
#include <dnnl.h>
/* oneDNN's kernel generation: CPU time of make (one primitive created on
 * eng), with oneDNN's primitive cache off so that each creation makes its
 * kernel again; median over `reps` creations after an untimed one, in
 * us; 0 if make fails (dnnl_gen.c). */
double bench_dnnl_create_us(int reps, dnnl_status_t (*make)(void *ctx, dnnl_engine_t eng,
                                                            dnnl_primitive_t *prim),
                            void *ctx);
#endif
/* Measured FMA peak (GFLOP/s) of `threads` threads, zmm or ymm (peak.c). */
double bench_fma_peak(int zmm, int threads);
/* One ~ms run of the FMA loop on this thread: GFLOP/s by wall clock and by
 * thread CPU time (peak.c). */
void bench_fma_sample(int zmm, double ms, double *gf_wall, double *gf_cpu);

#endif
