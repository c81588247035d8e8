/* reduce.c: fj_reduce_f32: validation, the pinned kernel, rows split over
 * the thread pool in fixed chunks (each row reduced by one kernel call in
 * one fixed order, so the thread count never changes a result). */
#include "runtime/prims/eltslot.h"
#include "runtime/publish.h"

#include <math.h>
#include <string.h>

#include "kernels/gen/reduce_gen.h"
#include "runtime/pool.h"
#include "runtime/prims/span.h"

/* Work (elements) below which everything stays on the calling thread, and
 * the work per chunk above it. */
enum { RED_PAR_MIN = 1 << 16, RED_CHUNK = 1 << 15 };

typedef struct red_ctx {
    kg_reduce_fn fn;
    const float *src;
    float *dst;
    int64_t rows, per, ld;
    const int64_t *shape;
} red_ctx;

static void red_chunk(void *p, int64_t i) {
    const red_ctx *c = p;
    int64_t r0 = i * c->per, n = c->rows - r0 < c->per ? c->rows - r0 : c->per;
    c->fn(c->src + r0 * c->ld, c->dst + r0, n, c->shape);
    __asm__ volatile("" ::: "memory");
}

static int overlap(uintptr_t a, uintptr_t na, uintptr_t b, uintptr_t nb) {
    return na && nb && a < b + nb && b < a + na;
}

fj_status fj_reduce_f32(fj_runtime *rt, fj_reduce_op op, int64_t rows, int64_t cols,
                        const float *src, int64_t ld, float *dst) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: runtime is NULL");
    if ((unsigned)op - 1u >= (unsigned)FJ_REDUCE__COUNT - 1u)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: unknown op %d", (int)op);
    if (rows < 0 || cols < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: rows = %lld, cols = %lld (must be >= 0)",
                       (long long)rows, (long long)cols);
    if (ld < cols)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: ld = %lld < cols = %lld",
                       (long long)ld, (long long)cols);
    if (rows == 0) return FJ_OK;
    if (!dst) return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: dst is NULL with rows = %lld",
                             (long long)rows);
    if (cols > 0 && !src)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: src is NULL with %lld x %lld",
                       (long long)rows, (long long)cols);
    uintptr_t sb, db;
    if (!rt_span(rows, cols, ld, &sb) || !rt_span(rows, 1, 1, &db))
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: %lld x %lld (ld %lld) is too large",
                       (long long)rows, (long long)cols, (long long)ld);
    if (overlap((uintptr_t)src, sb, (uintptr_t)dst, db))
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_reduce_f32: dst overlaps src");
    if (cols == 0) {
        float v = op == FJ_REDUCE_MAX ? -INFINITY : op == FJ_REDUCE_MIN ? INFINITY
                  : op == FJ_REDUCE_MEAN ? NAN : 0.0f;
        for (int64_t r = 0; r < rows; r++) dst[r] = v;
        return FJ_OK;
    }
    fj_kernel *k;
    fj_status s = rt_elt_slot(rt, RT_SLOT_REDUCE0 + op - 1, &k);
    if (s != FJ_OK) return s;
    int64_t shape[3] = {cols, ld, 0};
    float fc = (float)cols;
    memcpy(&shape[2], &fc, sizeof fc);
    kg_reduce_fn fn = (kg_reduce_fn)k->fn;
    uint64_t t0 = rt_exec_begin();
    int64_t per = RED_CHUNK / cols + 1;
    if (rt->opts.threads > 1 && rows > 1 && rows * cols >= RED_PAR_MIN && rows > per) {
        red_ctx c = {fn, src, dst, rows, per, ld, shape};
        rt_parallel(rt, (rows + per - 1) / per, rt->opts.threads, red_chunk, &c, 0);
    } else {
        fn(src, dst, rows, shape);
    }
    rt_exec_end(t0, k->entry->name, "rows=%lld cols=%lld", (long long)rows, (long long)cols);
    __asm__ volatile("" ::: "memory");
    return FJ_OK;
}
