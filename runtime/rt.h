/* rt.h: the runtime object and kernel handles (internal to runtime/). */
#ifndef FJ_RT_H
#define FJ_RT_H

#include <pthread.h>
#include <stdatomic.h>

#include "codecache/cc.h"
#include "kernels/gen/eltwise_gen.h"
#include "kernels/x64/cpu_desc.h"
#include "runtime/prims/gemm_model.h"
#include "unwindinfo/uw.h"

struct fj_kernel {
    fj_runtime *rt;
    cc_entry *entry;
    void *fn;
    size_t code_size;
    struct fj_kernel *prev, *next;   /* the runtime's list of live kernels */
    atomic_long refs;                /* users + (the cache, while cached) */
};

typedef struct rt_kslot rt_kslot;
typedef struct rt_pool rt_pool;

/* The runtime's pinned kernels (rt->elt[], eltslot.h): the element-wise
 * variants first (kg_elt: plain, streaming and large), then the row
 * reductions and softmax, each a generator of its own. */
enum {
    RT_SLOT_REDUCE0 = KG_ELT__N, /* + (fj_reduce_op - 1) */
    RT_SLOT_SOFTMAX = RT_SLOT_REDUCE0 + FJ_REDUCE__COUNT - 1,
    RT_SLOT_LOGSOFTMAX,
    RT_SLOT__N
};
typedef int rt_slot;

struct fj_runtime {
    fj_options opts;
    uint64_t serial;         /* unique per runtime ever created (rt_khold) */
    struct fj_runtime *live_next; /* the live runtimes' list (kcache.c) */
    fj_isa isa;
    uint32_t features;       /* X64_F_* of the CPU */
    unsigned uw_backends;    /* UW_* */
    int verify;
    int perfmap, jitdump;    /* FRAMEJIT_PERFMAP / FRAMEJIT_JITDUMP, read at creation */
    char *dump_dir;          /* FRAMEJIT_DUMP, or NULL */
    atomic_uint dump_seq;
    cc_cache *cache;
    pthread_mutex_t lock;    /* kernel list and the eltwise slots */
    /* Held across cc_place + uw_arena_add: kernels reach their arena's
     * unwind registration in address order. The code cache's hooks never
     * take it. */
    pthread_mutex_t place_lock;
    struct fj_kernel *kernels;
    /* The pinned kernels (RT_SLOT_*), published with release stores so
     * the hot path reads them without the lock. */
    _Atomic(struct fj_kernel *) elt[RT_SLOT__N];
    /* Kernels by descriptor key (kcache.c), under kc_lock. */
    pthread_mutex_t kc_lock;
    pthread_cond_t kc_cond;
    rt_kslot **kc_buckets;
    size_t kc_nbuckets, kc_count;
    /* [cache] LRU clock (under kc_lock) and counters for fj_cache_stats_get. */
    uint64_t kc_tick;
    atomic_uint_least64_t kc_hits, kc_misses, kc_evictions;
    /* Kernels held by thread-local memos (rt_khold), and how many may be:
     * each keeps its arena from eviction. */
    atomic_int khold_n;
    int khold_max;
    /* Thread pool, created on first parallel call (pool.c). */
    pthread_mutex_t pool_lock;
    rt_pool *pool;
    int no_stitch;           /* rt_set_stitch(rt, 0): measurement only */
    const kc_cpu_desc *cpu;  /* the CPU's description (read once per process) */
    gemm_model gemm[2];      /* GEMM blocking for isa: f32, f64 (gemm_model.c) */
};

/* Frees a kernel: unpublishes its code. Its unwind info stays registered
 * with its arena until the arena is retired (addresses are never reused,
 * so it can describe nothing else meanwhile). */
FJ_INTERNAL void rt_kernel_free(fj_kernel *k);
/* The code cache's retire hook: destroys the arena's unwind registration. */
FJ_INTERNAL void rt_arena_retire(void *ctx, const cc_arena_info *a);
/* The first arena's ELF image and unwind registration, made at runtime
 * creation. */
FJ_INTERNAL void rt_arena_early(fj_runtime *rt);

/* Installs the fork handlers (fork.c), once per process. */
FJ_INTERNAL void rt_fork_init(void);

/* Assembles b, verifies, places, registers unwind info; frees b. */
FJ_INTERNAL fj_status rt_finish(fj_runtime *rt, fj_builder *b, fj_kernel **out);

#endif
