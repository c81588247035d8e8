/* eltslot.h: the runtime's pinned kernels for eltwise, reduction and
 * softmax (rt->elt[], indexed by rt_slot): read without a lock on the hot
 * path, generated once through the kernel cache on first use. */
#ifndef FJ_ELTSLOT_H
#define FJ_ELTSLOT_H

#include "runtime/rt.h"

/* The generator of slot v's kernel (ctx: an rt_slot): eltwise, reduction
 * or softmax, KG_ELT_NARGS arguments. */
FJ_INTERNAL void rt_elt_gen(fj_builder *b, const void *ctx);
/* What slot v computes, as its kernel's name says it ("relu",
 * "reduce_sum", "logsoftmax"...). */
FJ_INTERNAL const char *rt_slot_name(rt_slot v);
/* The kernel of slot v, generated on first use. */
FJ_INTERNAL fj_status rt_elt_slot_slow(fj_runtime *rt, rt_slot v, fj_kernel **out);

static inline fj_status rt_elt_slot(fj_runtime *rt, rt_slot v, fj_kernel **out) {
    fj_kernel *k = atomic_load_explicit(&rt->elt[v], memory_order_acquire);
    if (__builtin_expect(k != NULL, 1)) {
        *out = k;
        return FJ_OK;
    }
    return rt_elt_slot_slow(rt, v, out);
}

#endif
