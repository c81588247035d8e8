/* gemv.c: f32/f64 GEMM calls with one row or column of C (m = 1 or n = 1), vector kernels.
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
 *   transposed): the matrix x vector kernel (gemm_lowp_gen.c, f32 or f64
 *   FMAs), 4 rows at a time along k, each row's lanes summed in registers.
 *
 * The vector operand is copied when it is strided (and padded for the
 * second kind); C = alpha*y + beta*C follows (beta = 0: C is not read).
 * Threads take whole blocks, every element is computed by the same
 * instructions whatever the thread count. int8 and bf16 calls of these
 * shapes are gemv_lowp.c's. */
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

int gemm_vec_shape(int dt, int64_t m, int64_t n, int64_t k) {
    return (dt == KG_DT_F32 || dt == KG_DT_F64) && (m == 1 || n == 1) && k > 0 &&
           (double)(m > n ? m : n) * (double)k >= GEMM_VEC_MIN_ELEMS;
}

typedef struct vec_run {
    /* y = x^T M (vxm) or M x (mxv): M's rows, the vector, the output */
    int vxm, f64;
    size_t es;            /* bytes an element: 4 or 8 */
    const char *mat;
    int64_t ldm;          /* elements */
    const char *x;
    int64_t len, k;       /* elements of y; the products' length */
    char *y;              /* scratch, len (+ padding), or C itself */
    char *ytail;          /* mxv with y = C: the partial block's 4 sums */
    char *c;
    int64_t ldc;          /* elements between C's outputs */
    double alpha, beta;   /* (f32 calls: float values) */
    int lanes, mr, nv, rows;  /* vxm: rows a group */
    int64_t nblk, jobs;   /* whole blocks (vxm: nv vectors; mxv: mr rows) */
    /* kernels of whole blocks and of the last partial one; vxm: [0] of
     * rows rows, [1] of the last k % rows */
    void *fn[2], *fn_tail[2];
    kg_vxm_args va;
    kg_lowp_args ma;
} vec_run;

static void vxm_name(const void *c, char *buf, size_t n) { kg_vxm_name(c, buf, n); }

fj_status gemv_vxm_kernel(fj_runtime *rt, const kg_vxm_cfg *c, fj_kernel **out) {
    fj_status s = kg_vxm_check(c);
    if (s != FJ_OK) return s;
    rt_kdesc d = {c, sizeof *c, NULL, KG_VXM_NARGS, kg_vxm, c, vxm_name};
    return rt_kernel_acquire(rt, &d, out);
}

/* C(i0 .. i1) from y, in the element type (alpha 1 and beta 0 neither
 * multiply nor read C: NaN in C stays out, y passes bit for bit). y may
 * be C itself (beta 0, C contiguous). */
static void vec_finish(const vec_run *v, int64_t i0, int64_t i1) {
    const int64_t ldc = v->ldc;
    if (v->y == v->c && v->alpha == 1.0) return;
    if (v->f64) {
        const double *y = (const double *)v->y, al = v->alpha, be = v->beta;
        double *c = (double *)v->c;
        for (int64_t i = i0; i < i1; i++) {
            double r = al == 1.0 ? y[i] : al * y[i];
            c[i * ldc] = be == 0.0 ? r : r + be * c[i * ldc];
        }
        return;
    }
    const float *y = (const float *)v->y, al = (float)v->alpha, be = (float)v->beta;
    float *c = (float *)v->c;
    for (int64_t i = i0; i < i1; i++) {
        float r = al == 1.0f ? y[i] : al * y[i];
        c[i * ldc] = be == 0.0f ? r : r + be * c[i * ldc];
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
        /* y = 0, then the groups of 8 rows of M added to the job's
         * columns (one call over all of them), then the last k % 8 rows;
         * the whole blocks, then the partial one: each element adds the
         * rows in order. */
        memset(v->y + y0 * v->es, 0, (size_t)(y1 - y0) * v->es);
        const int64_t kg = v->k / v->rows;
        for (int g = 0; g < 2; g++) {
            int64_t r = g ? kg * v->rows : 0, ngrp = g ? (v->k % v->rows != 0) : kg;
            if (!ngrp) continue;
            for (int part = 0; part < 2; part++) {
                int64_t e0 = part ? v->nblk * per : y0;
                int64_t nb = part ? (last && e0 < v->len) : b1 - b0;
                if (nb <= 0) continue;
                kg_vxm_args a = v->va;
                a.m = v->mat + (r * v->ldm + e0) * (int64_t)v->es;
                a.x = v->x + r * (int64_t)v->es;
                a.y = v->y + e0 * (int64_t)v->es;
                a.nblk = nb;
                a.ngrp = ngrp;
                a.grp_m = v->rows * v->ldm * (int64_t)v->es;
                ((kg_vxm_fn)(part ? v->fn_tail[g] : v->fn[g]))(&a);
            }
        }
    } else {
        for (int part = 0; part < 2; part++) {
            int64_t e0 = part ? v->nblk * per : y0;
            int64_t nb = part ? (last && e0 < v->len) : b1 - b0;
            if (nb <= 0) continue;
            kg_lowp_args a = v->ma;
            a.a = v->mat + e0 * v->ldm * (int64_t)v->es;
            a.c = part && v->ytail ? v->ytail : v->y + e0 * (int64_t)v->es;
            a.ntiles = nb;
            ((kg_lowp_fn)(part ? v->fn_tail[0] : v->fn[0]))(&a);
            /* the partial block stores 4 sums whatever its rows: C takes its own */
            if (part && v->ytail)
                memcpy(v->y + e0 * (int64_t)v->es, v->ytail, (size_t)(v->len - e0) * v->es);
        }
    }
    vec_finish(v, y0, y1);
}

fj_status gemm_vec(fj_runtime *rt, int dt, int ta, int tb, int64_t m, int64_t n, int64_t k,
                   double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                   double beta, void *c, int64_t ldc) {
    const int f64 = dt == KG_DT_F64;
    const size_t es = f64 ? 8 : 4;
    const char *fname = f64 ? "fj_gemm_f64" : "fj_gemm_f32";
    /* C may share no memory with A or B (as on the tile path); rt_mat
     * counts floats: a double is two of them. */
    const int64_t w = f64 ? 2 : 1;
    const rt_mat cm = {(uintptr_t)c, m, n * w, ldc * w};
    const rt_mat am = {(uintptr_t)a, ta ? k : m, (ta ? m : k) * w, lda * w};
    const rt_mat bm = {(uintptr_t)b, tb ? n : k, (tb ? k : n) * w, ldb * w};
    const char *what = rt_mat_overlap(&cm, &am) ? "a" : rt_mat_overlap(&cm, &bm) ? "b" : NULL;
    if (what)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: c overlaps %s (C may share no memory "
                       "with A, B or the bias)", fname, what);
    vec_run v;
    memset(&v, 0, sizeof v);
    v.f64 = f64;
    v.es = es;
    v.alpha = alpha;
    v.beta = beta;
    v.k = k;
    const int avx512 = rt->isa == FJ_ISA_AVX512;
    v.lanes = (avx512 ? 16 : 8) >> f64;
    /* The vector operand (k elements, vs apart) and the matrix. */
    const char *vec;
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
     * vector where it is strided or (mxv) not whole vectors: a copy,
     * zero-padded to whole vectors for mxv. */
    const int64_t ylen = (v.len + 8) & ~(int64_t)7, xlen = (k + v.lanes) & ~(int64_t)(v.lanes - 1);
    const int copy = vs != 1 || (!v.vxm && k % v.lanes != 0);
    const size_t floats = (size_t)(ylen + (copy ? xlen : 0)) * (es / 4) + 16;
    char *scr = (char *)gemm_scratch(floats);
    if (!scr)
        return fj_fail(FJ_ERR_NO_MEMORY, "%s: out of memory (%zu bytes of scratch)", fname,
                       floats * 4);
    /* beta 0 and C contiguous: the kernels write C itself (vxm zeroes it
     * first and touches nothing past y's end; mxv's partial block goes
     * through ytail), as oneDNN's do, instead of scratch copied to C after. */
    const int direct = beta == 0.0 && v.ldc == 1;
    v.y = direct ? (char *)c : scr;
    v.ytail = direct && !v.vxm ? scr : NULL;
    char *xc = scr + ylen * (int64_t)es;
    xc = (char *)(((uintptr_t)xc + 63) & ~(uintptr_t)63);
    if (copy) {
        if (f64) {
            double *xd = (double *)xc;
            for (int64_t i = 0; i < k; i++) xd[i] = ((const double *)vec)[i * vs];
            for (int64_t i = k; i < xlen; i++) xd[i] = 0.0;
        } else {
            float *xf = (float *)xc;
            for (int64_t i = 0; i < k; i++) xf[i] = ((const float *)vec)[i * vs];
            for (int64_t i = k; i < xlen; i++) xf[i] = 0.0f;
        }
        v.x = xc;
    } else {
        v.x = vec;
    }
    fj_kernel *kern[4] = {NULL, NULL, NULL, NULL};
    fj_status s = FJ_OK;
    int64_t tail;
    const double bytes = (double)v.len * (double)k * (double)es;
    const int threads = bytes < (double)GEMM_VEC_MT_BYTES ? 1 : rt_threads(rt);
    if (v.vxm) {
        /* 8 rows a group; blocks of 16 zmm (1 KiB of a row, as oneDNN's
         * kernel) or 4 ymm (the registers AVX2 has left), narrower where
         * that leaves a thread without a block (an element's sum is the
         * same whatever the block) */
        v.rows = 8;
        v.nv = avx512 ? 16 : 4;
        while (v.nv > 1 && v.len / ((int64_t)v.nv * v.lanes) < threads) v.nv /= 2;
        int64_t per = (int64_t)v.nv * v.lanes;
        v.nblk = v.len / per;
        tail = v.len % per;
        int rl = (int)(tail % v.lanes);
        v.va.kmask = rl ? (1u << rl) - 1u : 0;
        for (int l = 0; l < 8; l++) v.va.ymask[l] = l >> f64 < rl ? -1 : 0;
        v.va.ldm = v.ldm * (int64_t)es;
        /* [g]: 8 rows, then the last k % 8 */
        for (int g = 0; g < 2 && s == FJ_OK; g++) {
            int rows = g ? (int)(k % v.rows) : v.rows;
            if (!rows || (!g && k < v.rows)) continue;
            kg_vxm_cfg cf = {.tag = KG_VXM_TAG, .isa = rt->isa, .rows = rows, .nv = v.nv, .f64 = f64};
            if (v.nblk) s = gemv_vxm_kernel(rt, &cf, &kern[2 * g]);
            cf.nv = (int)((tail + v.lanes - 1) / v.lanes);
            cf.tail = rl != 0;
            if (s == FJ_OK && tail) s = gemv_vxm_kernel(rt, &cf, &kern[2 * g + 1]);
        }
    } else {
        /* Blocks of 4 rows (4 streams of A at a time): 8 measured the same
         * in processes where both libraries ran fast and 5-10% slower in
         * those where both ran slow (the same code and data: the state
         * follows the process), on every ISA and type (docs/performance.md). */
        v.mr = 4;
        v.nblk = v.len / v.mr;
        tail = v.len % v.mr;
        int rem = (int)(k % v.lanes);
        kg_lowp_cfg cf = {.tag = KG_LOWP_TAG, .isa = rt->isa, .dt = f64 ? KG_LP_F64 : KG_LP_F32, .mr = v.mr,
                          .nv = 1, .gemv = rem ? 2 : 1};
        if (v.nblk) s = lp_get_kernel(rt, &cf, &kern[0]);
        if (s == FJ_OK && tail) {
            cf.mr = (int32_t)tail;
            s = lp_get_kernel(rt, &cf, &kern[1]);
        }
        v.ma.b = v.x;
        v.ma.kq = k / v.lanes;
        v.ma.lda = v.ldm * (int64_t)es;
        v.ma.a_tile = v.mr * v.ma.lda;
        /* dword lanes: both of a double's */
        v.ma.kmask[0] = (1u << (rem << f64)) - 1u;
        for (int l = 0; l < 8; l++) v.ma.ymask[0][l] = l >> f64 < rem ? -1 : 0;
    }
    if (s == FJ_OK) {
        for (int g = 0; g < 2; g++) {
            v.fn[g] = kern[2 * g] ? rt_kernel_fn(kern[2 * g]) : NULL;
            v.fn_tail[g] = kern[2 * g + 1] ? rt_kernel_fn(kern[2 * g + 1]) : NULL;
        }
        v.jobs = v.nblk < threads ? 1 : threads;
        uint64_t t0 = rt_exec_begin();
        if (v.jobs > 1)
            rt_parallel(rt, v.jobs, (int)v.jobs, vec_job, &v,
                        rt_par_wake_from(bytes, GEMM_VEC_MT_BYTES));
        else
            vec_job(&v, 0);
        rt_exec_end(t0, fname, "m=%lld n=%lld k=%lld", (long long)m, (long long)n,
                    (long long)k);
    }
    for (int i = 0; i < 4; i++)
        if (kern[i]) rt_kernel_unref(kern[i]);
    return s;
}
