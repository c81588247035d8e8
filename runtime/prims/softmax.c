/* softmax.c: fj_softmax_f32: validation, the pinned kernel, rows split
 * over the thread pool in fixed chunks (a row's result never depends on
 * the thread count). */
#include "runtime/prims/eltslot.h"
#include "runtime/publish.h"

#include "kernels/gen/softmax_gen.h"
#include "runtime/pool.h"
#include "runtime/prims/span.h"

enum { SM_PAR_MIN = 1 << 15, SM_CHUNK = 1 << 14 };

typedef struct sm_ctx {
    kg_softmax_fn fn;
    const float *src;
    float *dst;
    int64_t rows, per;
    const int64_t *shape;
} sm_ctx;

static void sm_chunk(void *p, int64_t i) {
    const sm_ctx *c = p;
    int64_t r0 = i * c->per, n = c->rows - r0 < c->per ? c->rows - r0 : c->per;
    c->fn(c->src + r0 * c->shape[1], c->dst + r0 * c->shape[2], n, c->shape);
    __asm__ volatile("" ::: "memory");
}

fj_status fj_softmax_f32(fj_runtime *rt, int log, int64_t rows, int64_t cols, const float *src,
                         int64_t ld_src, float *dst, int64_t ld_dst) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: runtime is NULL");
    if (rows < 0 || cols < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: rows = %lld, cols = %lld (must be >= 0)",
                       (long long)rows, (long long)cols);
    if (ld_src < cols || ld_dst < cols)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: ld_src = %lld, ld_dst = %lld, "
                       "cols = %lld (ld >= cols)", (long long)ld_src, (long long)ld_dst,
                       (long long)cols);
    if (rows == 0 || cols == 0) return FJ_OK;
    if (!src || !dst)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: %s is NULL with %lld x %lld",
                       !src ? "src" : "dst", (long long)rows, (long long)cols);
    uintptr_t sb, db;
    if (!rt_span(rows, cols, ld_src, &sb) || !rt_span(rows, cols, ld_dst, &db))
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: %lld x %lld is too large",
                       (long long)rows, (long long)cols);
    uintptr_t s0 = (uintptr_t)src, d0 = (uintptr_t)dst;
    /* Conservative: the spans must not meet unless it is exactly in place. */
    if (!(s0 == d0 && ld_src == ld_dst) && s0 < d0 + db && d0 < s0 + sb)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_softmax_f32: src and dst overlap without being the "
                       "same array with the same ld");
    fj_kernel *k;
    fj_status s = rt_elt_slot(rt, log ? RT_SLOT_LOGSOFTMAX : RT_SLOT_SOFTMAX, &k);
    if (s != FJ_OK) return s;
    const int64_t shape[3] = {cols, ld_src, ld_dst};
    kg_softmax_fn fn = (kg_softmax_fn)k->fn;
    uint64_t t0 = rt_exec_begin();
    int64_t per = SM_CHUNK / cols + 1;
    if (rt->opts.threads > 1 && rows > per && rows * cols >= SM_PAR_MIN) {
        sm_ctx c = {fn, src, dst, rows, per, shape};
        rt_parallel(rt, (rows + per - 1) / per, rt->opts.threads, sm_chunk, &c, 0);
    } else {
        fn(src, dst, rows, shape);
    }
    rt_exec_end(t0, k->entry->name, "rows=%lld cols=%lld", (long long)rows, (long long)cols);
    __asm__ volatile("" ::: "memory");
    return FJ_OK;
}
