/* gemv.c: fj_gemm_f32 calls with one row or one column of C (m = 1 or n = 1), matrix x vector kernels.
 *
 * A product with m = 1 or n = 1 reads its matrix operand once and does
 * one multiply-add per element of it: packing that matrix (the tile
 * path's first step) costs more than the product, and a register tile
 * whose other side is one row or column leaves most of its lanes idle.
 * Here the matrix is read in place by one of two kernels:
 *
 *   the matrix runs along C (m = 1 with B not transposed, n = 1 with A
 *   transposed): the vector x matrix kernel (gemv_gen.c), blocks of C's
 *   elements down all rows;
 *   the matrix runs along k (n = 1 with A not transposed, m = 1 with B
 *   transposed): the matrix x vector kernel (gemm_lowp_gen.c, f32 FMAs),
 *   8 rows at a time along k, each row's lanes summed in registers.
 *
 * The vector operand is copied when it is strided (and padded for the
 * second kind); C = alpha*y + beta*C follows (beta = 0: C is not read).
 * Threads take whole blocks, every element is computed by the same
 * instructions whatever the thread count. */
#include <stdint.h>
#include <string.h>

#include "kernels/gen/gemv_gen.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_lowp_int.h"
#include "runtime/prims/span.h"
#include "runtime/publish.h"
#include "runtime/rt.h"

/* Matrices from this many elements take these kernels (smaller calls are
 * a few hundred nanoseconds on the tile path's memo either way). */
enum { VEC_MIN_ELEMS = 4096 };
int gemm_vec_shape(int dt, int64_t m, int64_t n, int64_t k) {
    return dt == KG_DT_F32 && (m == 1 || n == 1) && k > 0 &&
           (double)(m > n ? m : n) * (double)k >= VEC_MIN_ELEMS;
}

typedef struct vec_run {
    /* y = x^T M (vxm) or M x (mxv): M's rows, the vector, the output */
    int vxm;
    const float *mat;
    int64_t ldm;          /* elements */
    const float *x;
    int64_t len, k;       /* elements of y; the products' length */
    float *y;             /* scratch, len (+ padding) */
    float *c;
    int64_t ldc;          /* elements between C's outputs */
    float alpha, beta;
    int lanes, mr, nv;
    int64_t nblk, jobs;   /* whole blocks (vxm: nv vectors; mxv: mr rows) */
    /* kernels of whole blocks and of the last partial one; vxm: [0] of 8
     * rows, [1] of the last k % 8 */
    void *fn[2], *fn_tail[2];
    kg_vxm_args va;
    kg_lowp_args ma;
} vec_run;

static fj_status vxm_kernel(fj_runtime *rt, const kg_vxm_cfg *c, fj_kernel **out) {
    fj_status s = kg_vxm_check(c);
    if (s != FJ_OK) return s;
    char name[96];
    kg_vxm_name(c, name, sizeof name);
    rt_kdesc d = {c, sizeof *c, name, KG_VXM_NARGS, kg_vxm, c};
    return rt_kernel_acquire(rt, &d, out);
}

/* C(i0 .. i1) from y. */
static void vec_finish(const vec_run *v, int64_t i0, int64_t i1) {
    float *c = v->c;
    const int64_t ldc = v->ldc;
    for (int64_t i = i0; i < i1; i++) {
        float r = v->alpha == 1.0f ? v->y[i] : v->alpha * v->y[i];
        c[i * ldc] = v->beta == 0.0f ? r : r + v->beta * c[i * ldc];
    }
}

/* Job j: its whole blocks (the last job also the partial one), then C. */
static void vec_job(void *ctx, int64_t j) {
    const vec_run *v = ctx;
    int64_t b0 = j * v->nblk / v->jobs, b1 = (j + 1) * v->nblk / v->jobs;
    int64_t per = v->vxm ? (int64_t)v->nv * v->lanes : v->mr;
    int last = j + 1 == v->jobs;
    int64_t y0 = b0 * per, y1 = last ? v->len : b1 * per;
    if (v->vxm) {
        /* y = 0, then 8 rows of M at a time added to the job's columns */
        memset(v->y + y0, 0, (size_t)(y1 - y0) * sizeof(float));
        for (int64_t r = 0; r < v->k; r += 8) {
            int g = v->k - r < 8;
            for (int part = 0; part < 2; part++) {
                int64_t e0 = part ? v->nblk * per : y0;
                int64_t nb = part ? (last && e0 < v->len) : b1 - b0;
                if (nb <= 0) continue;
                kg_vxm_args a = v->va;
                a.m = v->mat + r * v->ldm + e0;
                a.x = v->x + r;
                a.y = v->y + e0;
                a.nblk = nb;
                ((kg_vxm_fn)(part ? v->fn_tail[g] : v->fn[g]))(&a);
            }
        }
    } else {
        for (int part = 0; part < 2; part++) {
            int64_t e0 = part ? v->nblk * per : y0;
            int64_t nb = part ? (last && e0 < v->len) : b1 - b0;
            if (nb <= 0) continue;
            kg_lowp_args a = v->ma;
            a.a = v->mat + e0 * v->ldm;
            a.c = v->y + e0;
            a.ntiles = nb;
            ((kg_lowp_fn)(part ? v->fn_tail[0] : v->fn[0]))(&a);
        }
    }
    vec_finish(v, y0, y1);
}

fj_status gemm_vec_f32(fj_runtime *rt, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float beta, float *c, int64_t ldc) {
    /* C may share no memory with A or B (as on the tile path). */
    const rt_mat cm = {(uintptr_t)c, m, n, ldc};
    const rt_mat am = {(uintptr_t)a, ta ? k : m, ta ? m : k, lda};
    const rt_mat bm = {(uintptr_t)b, tb ? n : k, tb ? k : n, ldb};
    const char *what = rt_mat_overlap(&cm, &am) ? "a" : rt_mat_overlap(&cm, &bm) ? "b" : NULL;
    if (what)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_gemm_f32: c overlaps %s (C may share no memory "
                       "with A, B or the bias)", what);
    vec_run v;
    memset(&v, 0, sizeof v);
    v.alpha = alpha;
    v.beta = beta;
    v.k = k;
    const int avx512 = rt->isa == FJ_ISA_AVX512;
    v.lanes = avx512 ? 16 : 8;
    /* The vector operand (k elements, vs apart) and the matrix. */
    const float *vec;
    int64_t vs;
    if (m == 1) {
        vec = a, vs = ta ? lda : 1;
        v.len = n, v.c = c, v.ldc = 1;
        v.vxm = !tb, v.mat = b, v.ldm = ldb;
    } else {
        vec = b, vs = tb ? 1 : ldb;
        v.len = m, v.c = c, v.ldc = ldc;
        v.vxm = ta, v.mat = a, v.ldm = lda;
    }
    /* Scratch: y (len, rounded up to 8 sums a block of rows), then the
     * vector (zero-padded to whole vectors for mxv). */
    const int64_t ylen = (v.len + 8) & ~(int64_t)7, xlen = (k + v.lanes) & ~(int64_t)(v.lanes - 1);
    const int copy = !v.vxm || vs != 1;
    float *scr = gemm_scratch((size_t)(ylen + (copy ? xlen : 0)) + 16);
    if (!scr)
        return fj_fail(FJ_ERR_NO_MEMORY, "fj_gemm_f32: out of memory (%lld floats of scratch)",
                       (long long)(ylen + xlen));
    v.y = scr;
    float *xc = scr + ylen;
    xc = (float *)(((uintptr_t)xc + 63) & ~(uintptr_t)63);
    if (copy) {
        for (int64_t i = 0; i < k; i++) xc[i] = vec[i * vs];
        for (int64_t i = k; i < xlen; i++) xc[i] = 0.0f;
        v.x = xc;
    } else {
        v.x = vec;
    }
    fj_kernel *kern[4] = {NULL, NULL, NULL, NULL};
    fj_status s = FJ_OK;
    int64_t tail;
    if (v.vxm) {
        v.nv = avx512 ? 8 : 4;
        int64_t per = (int64_t)v.nv * v.lanes;
        v.nblk = v.len / per;
        tail = v.len % per;
        int rl = (int)(tail % v.lanes);
        v.va.kmask = rl ? (1u << rl) - 1u : 0;
        for (int l = 0; l < 8; l++) v.va.ymask[l] = l < rl ? -1 : 0;
        v.va.ldm = v.ldm * 4;
        /* [g]: 8 rows, then the last k % 8 */
        for (int g = 0; g < 2 && s == FJ_OK; g++) {
            int rows = g ? (int)(k % 8) : 8;
            if (!rows || (!g && k < 8)) continue;
            kg_vxm_cfg cf = {.tag = KG_VXM_TAG, .isa = rt->isa, .rows = rows, .nv = v.nv};
            if (v.nblk) s = vxm_kernel(rt, &cf, &kern[2 * g]);
            cf.nv = (int)((tail + v.lanes - 1) / v.lanes);
            cf.tail = rl != 0;
            if (s == FJ_OK && tail) s = vxm_kernel(rt, &cf, &kern[2 * g + 1]);
        }
    } else {
        v.mr = 8;
        v.nblk = v.len / v.mr;
        tail = v.len % v.mr;
        int rem = (int)(k % v.lanes);
        kg_lowp_cfg cf = {.tag = KG_LOWP_TAG, .isa = rt->isa, .dt = KG_LP_F32, .mr = v.mr,
                          .nv = 1, .gemv = rem ? 2 : 1};
        if (v.nblk) s = lp_get_kernel(rt, &cf, &kern[0]);
        if (s == FJ_OK && tail) {
            cf.mr = (int32_t)tail;
            s = lp_get_kernel(rt, &cf, &kern[1]);
        }
        v.ma.b = v.x;
        v.ma.kq = k / v.lanes;
        v.ma.lda = v.ldm * 4;
        v.ma.a_tile = v.mr * v.ldm * 4;
        v.ma.kmask[0] = (1u << rem) - 1u;
        for (int l = 0; l < 8; l++) v.ma.ymask[0][l] = l < rem ? -1 : 0;
    }
    if (s == FJ_OK) {
        for (int g = 0; g < 2; g++) {
            v.fn[g] = kern[2 * g] ? rt_kernel_fn(kern[2 * g]) : NULL;
            v.fn_tail[g] = kern[2 * g + 1] ? rt_kernel_fn(kern[2 * g + 1]) : NULL;
        }
        double bytes = (double)v.len * (double)k * 4.0;
        int threads = bytes < (double)GEMM_VEC_MT_BYTES ? 1 : rt_threads(rt);
        v.jobs = v.nblk < threads ? 1 : threads;
        uint64_t t0 = rt_exec_begin();
        if (v.jobs > 1)
            rt_parallel(rt, v.jobs, (int)v.jobs, vec_job, &v,
                        rt_par_wake_from(bytes, GEMM_VEC_MT_BYTES));
        else
            vec_job(&v, 0);
        rt_exec_end(t0, "fj_gemm_f32", "m=%lld n=%lld k=%lld", (long long)m, (long long)n,
                    (long long)k);
    }
    for (int i = 0; i < 4; i++)
        if (kern[i]) rt_kernel_unref(kern[i]);
    return s;
}
