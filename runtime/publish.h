/* publish.h: profiling support in the runtime: the self-describing arena
 * files, the opt-in perf map and jitdump files (publish.c), and the
 * FRAMEJIT_VERBOSE lines for kernels and executions (verbose.c). */
#ifndef FJ_RT_PUBLISH_H
#define FJ_RT_PUBLISH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "codecache/cc.h"
#include "unwindinfo/uw.h"

/* ---- publish.c -------------------------------------------------------------
 * Called once per kernel, after it is placed (e) and its unwind info is
 * registered, before it is handed out; f describes it (f->size code bytes
 * at code). Adds it to the ELF image of e's arena file (in place: constant
 * cost; removed kernels are dropped by an occasional compaction, see
 * publish.c); appends to /tmp/perf-PID.map with FRAMEJIT_PERFMAP=1 and to
 * the jitdump file with FRAMEJIT_JITDUMP=1. Never fails: problems are
 * logged (FRAMEJIT_VERBOSE=1) and the kernel is unaffected. Thread-safe. */
FJ_INTERNAL void rt_image_kernel(const cc_entry *e, const uw_func *f, const uint8_t *code,
                                 int perfmap, int jitdump);

/* The image of arena ai laid out before its first kernel (the runtime's
 * first arena, at the runtime's creation), so that kernel is only
 * appended. Best effort: if it cannot, the first kernel does it. */
FJ_INTERNAL void rt_image_arena_early(const cc_arena_info *ai);

/* What the image writer did so far in this process (tests, bench). */
typedef struct rt_image_stats {
    uint64_t images;        /* image versions written (kernels added, compactions) */
    uint64_t failures;      /* kernels that could not be described */
    uint64_t rewrites;      /* whole-metadata rewrites (room grown, compactions) */
    uint64_t compactions;   /* rewrites that dropped removed kernels */
    uint64_t meta_bytes;    /* metadata bytes of the newest version written */
    uint64_t kernels;       /* kernels in it */
} rt_image_stats;
FJ_INTERNAL void rt_image_get_stats(rt_image_stats *st);
/* The image writer's lock around fork (FJ_FORK_* phases, fork.c). */
FJ_INTERNAL void rt_image_fork(int phase);

/* ---- verbose.c -------------------------------------------------------------
 * FRAMEJIT_VERBOSE=1: rt_verbose_kernel prints one CSV line per kernel
 *     kernel,NAME,ISA,CODE_BYTES,GEN_MICROSECONDS,ARENA
 * where ARENA is file:/dev/shm/framejit-PID-SEQ.so, memfd:arena-ID or
 * anonymous:arena-ID. FRAMEJIT_VERBOSE=2 also prints, per execution,
 *     exec,WHAT,MICROSECONDS,DETAIL
 * from
 *     uint64_t t0 = rt_exec_begin();
 *     ... run the kernel(s) ...
 *     rt_exec_end(t0, name, "n=%zu", n);
 * Off (the default), rt_exec_begin is one relaxed load of a cached level
 * and a not-taken branch, and rt_exec_end a test of t0 == 0. */
FJ_INTERNAL void rt_verbose_kernel(const cc_entry *e, const char *isa, size_t code_bytes,
                                   double gen_us);
/* ARENA field for e into buf; returns buf. */
FJ_INTERNAL const char *rt_verbose_arena(const cc_entry *e, char *buf, size_t n);

FJ_INTERNAL extern atomic_int rt_exec_level; /* -1: not read yet */
FJ_INTERNAL uint64_t rt_exec_begin_slow(void);
FJ_INTERNAL void rt_exec_log(uint64_t t0, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Start time (ns, never 0) when FRAMEJIT_VERBOSE >= 2, else 0. */
static inline uint64_t rt_exec_begin(void) {
    if (__builtin_expect(atomic_load_explicit(&rt_exec_level, memory_order_relaxed) == 0, 1))
        return 0;
    return rt_exec_begin_slow();
}
#define rt_exec_end(t0, what, ...)                                                          \
    do {                                                                                    \
        if (__builtin_expect((t0) != 0, 0)) rt_exec_log((t0), (what), __VA_ARGS__);          \
    } while (0)

#endif
