/* eltwise.c: fj_eltwise_f32: validation, kernel lookup/generation, call. */
#include "runtime/rt.h"

#include <stdio.h>

#include "kernels/builder_int.h"

/* The kernel for variant v, generated on first use. */
static fj_status elt_kernel(fj_runtime *rt, kg_elt v, fj_kernel **out) {
    fj_kernel *k = atomic_load_explicit(&rt->elt[v], memory_order_acquire);
    if (k) { *out = k; return FJ_OK; }
    pthread_mutex_lock(&rt->lock);
    /* Generation runs under the lock so that concurrent first calls make
     * one kernel, not several. */
    fj_status s = FJ_OK;
    k = atomic_load_explicit(&rt->elt[v], memory_order_acquire);
    if (!k) {
        char name[64];
        snprintf(name, sizeof name, "fj_eltwise_%s_f32_%s", kg_elt_name(v),
                 rt->isa == FJ_ISA_AVX512 ? "avx512" : "avx2");
        fj_builder *b;
        pthread_mutex_unlock(&rt->lock);
        s = kb_new(name, KG_ELT_NARGS, rt->isa, rt->features, rt, &b);
        if (s == FJ_OK) {
            kg_eltwise(b, v);
            s = rt_finish(rt, b, &k);
        }
        pthread_mutex_lock(&rt->lock);
        if (s == FJ_OK) {
            fj_kernel *other = atomic_load(&rt->elt[v]);
            if (other) {
                /* Lost a race: keep the first, drop ours. */
                pthread_mutex_unlock(&rt->lock);
                fj_kernel_release(k);
                pthread_mutex_lock(&rt->lock);
                k = other;
            } else {
                atomic_store_explicit(&rt->elt[v], k, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&rt->lock);
    *out = k;
    return s;
}

fj_status fj_eltwise_f32(fj_runtime *rt, fj_eltwise_op op, float alpha, float beta,
                         const float *src, float *dst, size_t n) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: runtime is NULL");
    kg_elt v;
    switch (op) {
    case FJ_ELT_RELU: v = alpha == 0.0f ? KG_ELT_RELU : KG_ELT_LEAKY_RELU; break;
    default: return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: unknown op %d", (int)op);
    }
    if (n == 0) return FJ_OK;
    if (!src || !dst)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: %s is NULL with n = %zu",
                       !src ? "src" : "dst", n);
    if (n > SIZE_MAX / sizeof(float) / 2)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: n = %zu is too large", n);
    uintptr_t s0 = (uintptr_t)src, d0 = (uintptr_t)dst, bytes = n * sizeof(float);
    if (s0 != d0 && s0 < d0 + bytes && d0 < s0 + bytes)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: src and dst overlap without being "
                       "the same array (only in-place is allowed)");
    fj_kernel *k;
    fj_status s = elt_kernel(rt, v, &k);
    if (s != FJ_OK) return s;
    const float params[2] = {alpha, beta};
    ((kg_elt_fn)k->fn)(src, dst, n, params);
    /* Keeps this call from becoming a tail call: the caller's frame (and
     * ours) must stay on the stack for every unwinder. */
    __asm__ volatile("" ::: "memory");
    return FJ_OK;
}
