/* kcache.h: the runtime's kernels keyed by descriptor: one kernel per key,
 * generated once even when many threads ask at the same time, held by
 * reference counts so that a kernel in use is never freed, and evicted
 * (whole code arenas, least recently used first) when the code cache is
 * full and nobody holds them. */
#ifndef FJ_KCACHE_H
#define FJ_KCACHE_H

#include <stddef.h>
#include "base/base.h"

/* Emits the kernel body for ctx into b (errors stay sticky in b). */
typedef void (*rt_gen_fn)(fj_builder *b, const void *ctx);

typedef struct rt_kdesc {
    const void *key;      /* every byte that changes the code (primitive kind
                             and its parameters); the runtime's ISA is implied */
    size_t key_len;
    const char *name;     /* kernel name, e.g. fj_gemm_f32_16x96_avx512; NULL:
                             name_fn writes it (only when the kernel is made,
                             so a lookup that hits formats nothing) */
    int nargs;
    rt_gen_fn gen;
    const void *ctx;      /* for gen and name_fn */
    void (*name_fn)(const void *ctx, char *buf, size_t n);
} rt_kdesc;

/* The kernel for d's key, generated on first use; the caller holds a
 * reference until rt_kernel_unref. */
FJ_INTERNAL fj_status rt_kernel_acquire(fj_runtime *rt, const rt_kdesc *d, fj_kernel **out);
FJ_INTERNAL void rt_kernel_ref(fj_kernel *k);
FJ_INTERNAL void rt_kernel_unref(fj_kernel *k);
/* The kernel's entry point. */
FJ_INTERNAL void *rt_kernel_fn(const fj_kernel *k);

/* Called by fj_runtime_create once the code cache exists: installs the
 * eviction hooks (kernels nobody holds are evicted, least recently
 * acquired arena first) and gives rt its serial. */
FJ_INTERNAL void rt_kcache_init(fj_runtime *rt);
/* Called by fj_runtime_destroy: drops the cache's references (and ends
 * rt_khold_drop's claim on rt's kernels). */
FJ_INTERNAL void rt_kcache_clear(fj_runtime *rt);
/* fork (runtime/fork.c): the live runtimes' list lock (FJ_FORK_* phases)
 * and its first runtime (under that lock; rt->live_next goes on); in the
 * child, rt_kcache_fork_child forgets keys whose generation was in flight
 * on another thread. */
FJ_INTERNAL void rt_live_fork(int phase);
FJ_INTERNAL fj_runtime *rt_live_first(void);
FJ_INTERNAL void rt_kcache_fork_child(fj_runtime *rt);

/* A reference kept across calls in a thread-local memo, so that a hot
 * path (a small GEMM in a loop) reuses its kernel without the table and
 * its lock. The held reference keeps the kernel from eviction; the memo
 * may outlive its runtime, so it is checked against the runtime's serial
 * before use and dropped through a registry of live runtimes. */
typedef struct rt_khold {
    const fj_runtime *rt;
    uint64_t serial;
    fj_kernel *k;
} rt_khold;

/* Drops h's old reference (see rt_khold_drop), then keeps k if rt allows
 * one more held kernel: a held kernel keeps its whole arena from
 * eviction, so a runtime lets memos hold kernels in at most a quarter of
 * its arenas' worth. Returns 1 when h took the caller's reference to k,
 * 0 when h stays empty (the caller keeps its reference). */
FJ_INTERNAL int rt_khold_set(rt_khold *h, fj_runtime *rt, fj_kernel *k);
/* Drops h's reference if its runtime still exists (a destroyed runtime
 * freed the kernel already); h is empty afterwards. */
FJ_INTERNAL void rt_khold_drop(rt_khold *h);

/* For tests and framejit-bench (which link the static library; hidden in
 * the shared one):
 * rt_kernel_acquire with a builder callback, i.e. a cached, evictable
 * kernel for key (gen builds it on a miss through the public builder API).
 * Release with fj_kernel_release. */
FJ_INTERNAL fj_status fj_test_kernel_get(fj_runtime *rt, const void *key, size_t key_len,
                                         const char *name, int nargs,
                                         void (*gen)(fj_builder *b, const void *ctx),
                                         const void *ctx, fj_kernel **out);

#endif
