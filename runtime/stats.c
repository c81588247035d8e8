/* stats.c: fj_cache_stats_get: the kernel cache's counters (kcache.c) and
 * the code cache's occupancy (codecache/). */
#include "runtime/rt.h"

fj_status fj_cache_stats_get(fj_runtime *rt, fj_cache_stats *out) {
    if (!rt || !out)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_cache_stats_get: %s is NULL",
                       !rt ? "runtime" : "out");
    cc_stats cs;
    cc_get_stats(rt->cache, &cs);
    out->hits = atomic_load_explicit(&rt->kc_hits, memory_order_relaxed);
    out->misses = atomic_load_explicit(&rt->kc_misses, memory_order_relaxed);
    out->evictions = atomic_load_explicit(&rt->kc_evictions, memory_order_relaxed);
    out->live_kernels = cs.live_kernels;
    out->bytes_used = cs.live_bytes;
    out->bytes_reserved = cs.mapped_bytes;
    return FJ_OK;
}
