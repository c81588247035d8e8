/* eltwise.c: fj_eltwise_f32 (validation, pinned kernel, call; large arrays
 * split over the thread pool) and the pinned kernel slots it shares with
 * reductions and softmax.
 *
 * The warm path is a handful of compares, one acquire load of the pinned
 * kernel and the call: no lock, no hash, no allocation. */
#include "runtime/prims/eltslot.h"
#include "runtime/publish.h"

#include <string.h>

#include "kernels/gen/reduce_gen.h"
#include "kernels/gen/softmax_gen.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"

/* ---- pinned slots ----------------------------------------------------------- */

void rt_elt_gen(fj_builder *b, const void *ctx) {
    rt_slot v = *(const rt_slot *)ctx;
    if (v < KG_ELT__N) kg_eltwise(b, (kg_elt)v);
    else if (v < RT_SLOT_SOFTMAX) kg_reduce(b, (fj_reduce_op)(v - RT_SLOT_REDUCE0 + 1));
    else kg_softmax(b, v == RT_SLOT_LOGSOFTMAX);
}

const char *rt_slot_name(rt_slot v) {
    static const char *const rows[] = {"reduce_sum", "reduce_max", "reduce_min", "reduce_mean",
                                       "reduce_l2", "softmax", "logsoftmax"};
    _Static_assert(sizeof rows / sizeof rows[0] == RT_SLOT__N - RT_SLOT_REDUCE0,
                   "a name for every reduction and softmax slot");
    if (v < KG_ELT__N) return kg_elt_name((kg_elt)v);
    return (unsigned)(v - RT_SLOT_REDUCE0) < RT_SLOT__N - RT_SLOT_REDUCE0 ? rows[v - RT_SLOT_REDUCE0]
                                                                          : "?";
}

/* Appends s at *at, within name[0..n-1] (always terminated). */
static void name_put(char *name, size_t n, size_t *at, const char *s) {
    size_t l = strlen(s);
    if (l > n - 1 - *at) l = n - 1 - *at;
    memcpy(name + *at, s, l);
    *at += l;
    name[*at] = 0;
}

fj_status rt_elt_slot_slow(fj_runtime *rt, rt_slot v, fj_kernel **out) {
    const char *isa = rt->isa == FJ_ISA_AVX512 ? "avx512" : "avx2";
    /* Put together by hand: snprintf is a visible share of making a
     * small kernel. */
    char name[64];
    size_t at = 0;
    static const char *const kinds[] = {"", "stream_", "large_"};
    int kind = KG_ELT_PLAIN;
    const int elt = v < KG_ELT__N;
    if (elt) kg_elt_base((kg_elt)v, &kind);
    const char *const parts[] = {elt ? "fj_eltwise_" : "fj_", rt_slot_name(v), "_f32_",
                                 elt ? kinds[kind] : "", isa};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        name_put(name, sizeof name, &at, parts[i]);
    /* Generated through the kernel cache, which makes concurrent first
     * calls wait for one generation instead of racing. */
    const uint8_t key[4] = {'e', 'l', 't', (uint8_t)v};
    rt_kdesc d = {key, sizeof key, name, KG_ELT_NARGS, rt_elt_gen, &v, NULL};
    fj_kernel *k;
    fj_status s = rt_kernel_acquire(rt, &d, &k);
    if (s != FJ_OK) return s;
    /* Pin our reference; if another thread pinned first it is the same
     * kernel (same key), and ours is dropped. */
    fj_kernel *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&rt->elt[v], &expect, k, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        rt_kernel_unref(k);
        k = expect;
    }
    *out = k;
    return FJ_OK;
}

/* ---- fj_eltwise_f32 ------------------------------------------------------------ */

/* Arrays from this size on are split over the pool (when it has threads),
 * in fixed chunks of CHUNK elements (a multiple of every vector width). */
enum { PAR_MIN = 1 << 20, CHUNK = 1 << 16 };

typedef struct par_ctx {
    kg_elt_fn fn;
    const float *src;
    float *dst;
    size_t n;
    const float *params;
} par_ctx;

static void par_chunk(void *p, int64_t i) {
    const par_ctx *c = p;
    size_t at = (size_t)i * CHUNK, len = c->n - at < CHUNK ? c->n - at : CHUNK;
    c->fn(c->src + at, c->dst + at, len, c->params);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep our frame */
}

/* Largest n: 2n floats of bytes must not wrap (the overlap test below). */
#define N_MAX (SIZE_MAX / sizeof(float) / 2)

/* The slow half of the argument checks: the fast path only knows that
 * something is off (or n == 0); this says what, in the documented order. */
__attribute__((noinline, cold)) static fj_status check_slow(fj_runtime *rt, fj_eltwise_op op,
                                                            const float *src, float *dst,
                                                            size_t n) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: runtime is NULL");
    if (kg_elt_variant(op, 0.0f) < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: unknown op %d", (int)op);
    if (n == 0) return FJ_OK;
    if (!src) return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: src is NULL with n = %zu", n);
    if (!dst) return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: dst is NULL with n = %zu", n);
    if (n > N_MAX) return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: n = %zu is too large", n);
    return fj_fail(FJ_ERR_INVALID_ARG, "fj_eltwise_f32: src and dst overlap without being "
                   "the same array (only in-place is allowed)");
}

/* First call of a variant (generates it), or an array large enough to be
 * split over the pool. */
__attribute__((noinline)) static fj_status run_slow(fj_runtime *rt, kg_elt v, float alpha,
                                                    float beta, const float *src, float *dst,
                                                    size_t n) {
    fj_kernel *k;
    fj_status s = rt_elt_slot(rt, v, &k);
    if (s != FJ_OK) return s;
    const float params[2] = {alpha, beta};
    kg_elt_fn fn = (kg_elt_fn)k->fn;
    /* A large array into another one: dst's lines would be read from
     * memory only to be overwritten, so from 64-byte alignment on the
     * stores stream past the caches (from PAR_MIN floats on: smaller
     * arrays stay in the caches, where plain stores win). In place, the
     * loads bring the lines in anyway and plain stores are faster. Both
     * large kernels prefetch src. */
    const int par = n >= PAR_MIN && rt->opts.threads > 1;
    if (n >= PAR_MIN) {
        int stream = src != dst && !((uintptr_t)dst & 3);
        fj_kernel *kl;
        s = rt_elt_slot(rt, (kg_elt)((stream ? KG_ELT_STREAM0 : KG_ELT_LARGE0) + v), &kl);
        if (s != FJ_OK) return s;
        size_t head = stream ? ((64 - ((uintptr_t)dst & 63)) & 63) / sizeof(float) : 0;
        if (head) fn(src, dst, head, params);
        src += head;
        dst += head;
        n -= head;
        fn = (kg_elt_fn)kl->fn;
    }
    if (par) {
        par_ctx c = {fn, src, dst, n, params};
        rt_parallel(rt, (int64_t)((n + CHUNK - 1) / CHUNK), rt->opts.threads, par_chunk, &c, 0);
    } else {
        fn(src, dst, n, params);
    }
    __asm__ volatile("" ::: "memory"); /* no tail call: keep our frame */
    return FJ_OK;
}

fj_status fj_eltwise_f32(fj_runtime *rt, fj_eltwise_op op, float alpha, float beta,
                         const float *src, float *dst, size_t n) {
    /* The variant without branches: op - 1, plus one for relu with a
     * nonzero slope (bits other than the sign; NaN included, as alpha == 0
     * would say). */
    uint32_t ab;
    memcpy(&ab, &alpha, sizeof ab);
    unsigned v = (unsigned)op - 1u + ((op == FJ_ELT_RELU) & ((ab << 1) != 0));
    uintptr_t s0 = (uintptr_t)src, d0 = (uintptr_t)dst, bytes = n * sizeof(float);
    /* n - 1 >= N_MAX: n == 0 or too large. Overlap: |s0 - d0| < bytes as
     * one unsigned compare (bytes <= SIZE_MAX / 2); in place (s0 == d0)
     * passes below. */
    if (__builtin_expect(!rt || v >= (unsigned)KG_ELT__NELT || n - 1 >= N_MAX || !src || !dst, 0))
        return check_slow(rt, op, src, dst, n);
    if (__builtin_expect(s0 - d0 + (bytes - 1) < 2 * bytes - 1, 0) && s0 != d0)
        return check_slow(rt, op, src, dst, n);
    /* Warm and small: one acquire load, the call. */
    fj_kernel *k = atomic_load_explicit(&rt->elt[v], memory_order_acquire);
    fj_status s;
    uint64_t t0 = rt_exec_begin(); /* FRAMEJIT_VERBOSE=2 only: one load when off */
    if (__builtin_expect(k != NULL, 1) && n < PAR_MIN) {
        const float params[2] = {alpha, beta};
        ((kg_elt_fn)k->fn)(src, dst, n, params);
        s = FJ_OK;
    } else {
        s = run_slow(rt, (kg_elt)v, alpha, beta, src, dst, n);
    }
    rt_exec_end(t0, "fj_eltwise_f32", "op=%d n=%zu", (int)op, n);
    /* Keeps these calls from becoming tail calls: the caller's frame (and
     * ours) must stay on the stack for every unwinder. */
    __asm__ volatile("" ::: "memory");
    return s;
}
