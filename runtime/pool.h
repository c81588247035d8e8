/* pool.h: the runtime's thread pool. Built with frame pointers (unlike
 * libgomp, whose GOMP_parallel keeps data in rbp), and the calling thread
 * always runs a share itself so its samples carry the caller's stack. */
#ifndef FJ_POOL_H
#define FJ_POOL_H

#include <sched.h>
#include <stdint.h>
#include "base/base.h"

/* Runs fn(ctx, i) for every i in [0, nchunks). Chunks are claimed
 * dynamically by the caller and up to nthreads - 1 workers; what a chunk
 * computes must not depend on who runs it (fixed partitioning keeps
 * results independent of the thread count). nthreads <= 1 or nchunks == 1
 * runs everything on the calling thread. Returns when all chunks are done.
 * Not reentrant from inside fn. flags: RT_PAR_WAKE for a job worth tens
 * of microseconds of a thread or more: a worker napping when it comes is
 * woken at once (a futex wake, a few microseconds of the caller's time,
 * more than a small job gains from the worker) instead of at its nap's
 * end. */
typedef void (*rt_chunk_fn)(void *ctx, int64_t i);
enum { RT_PAR_WAKE = 1 };
FJ_INTERNAL void rt_parallel(fj_runtime *rt, int64_t nchunks, int nthreads, rt_chunk_fn fn,
                             void *ctx, unsigned flags);
/* The flags for `work` where threads start at `threshold` (both in one
 * unit: flops, bytes...): RT_PAR_WAKE from 64 times it (about half a
 * million cycles of one thread), where the caller's wake costs little
 * next to a nap (up to 1 ms) of the worker's help. */
static inline unsigned rt_par_wake_from(double work, double threshold) {
    return work >= 64.0 * threshold ? RT_PAR_WAKE : 0u;
}
/* The runtime's thread count (fj_options.threads / FRAMEJIT_THREADS). */
FJ_INTERNAL int rt_threads(const fj_runtime *rt);

typedef struct rt_pool rt_pool;
FJ_INTERNAL fj_status rt_pool_create(int workers, rt_pool **out);
FJ_INTERNAL void rt_pool_destroy(rt_pool *p);
/* In a forked child: frees an inherited pool whose threads stayed in the
 * parent (nothing to wake or join; its locks may be held by them). */
FJ_INTERNAL void rt_pool_forget(rt_pool *p);
/* Moves the calling thread off `cpu` if its CPU mask allows another one
 * (narrows the mask, then restores it: the thread stays where it landed).
 * Returns 1 if it narrowed the mask. */
FJ_INTERNAL int rt_cpu_leave(int cpu);
/* Narrows the calling thread's CPU mask to leave out `cpu` (kept so: the
 * thread moves off it now if it is there) and returns 1, with the mask it
 * had in *saved; 0 (nothing changed) if cpu was not in it or is the only
 * one. */
FJ_INTERNAL int rt_cpu_avoid(int cpu, cpu_set_t *saved);
/* Stitching (stitch_x86_64.S): rt_origin_capture is fj_origin_capture
 * under the library's own name; fj_worker_run(o, fn, ctx, i) runs
 * fn(ctx, i) on a frame record that continues into o's frames (the name
 * is what profiles show for the worker's side). rt_stitch_end marks the
 * end of the trampolines' code, for tests. */
FJ_INTERNAL void rt_origin_capture(fj_origin *o);
FJ_INTERNAL void fj_worker_run(const fj_origin *o, rt_chunk_fn fn, void *ctx, int64_t i);
FJ_INTERNAL extern const char rt_stitch_end[];
/* Measurement only (bench): turns the stitch off (0) or on for rt's
 * parallel work; on by default. Not while rt runs parallel work. */
FJ_INTERNAL void rt_set_stitch(fj_runtime *rt, int on);
/* Test hook: how many of rt's workers sleep on the condvar (-1: no pool). */
FJ_INTERNAL int rt_pool_test_sleepers(fj_runtime *rt);
/* Test hook: how many naps RT_PAR_WAKE jobs have cut short (-1: no pool). */
FJ_INTERNAL long rt_pool_test_rung(fj_runtime *rt);

#endif
