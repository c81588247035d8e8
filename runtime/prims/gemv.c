/* gemv.c: GEMM calls with one row or column of C (f32/f64 m = 1 or n = 1; int8/bf16 m = 1), vector kernels.
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
 * instructions whatever the thread count. int8 and bf16 calls with m = 1
 * (int8/bf16 n = 1 is gemm_lowp.c's) use the vector x matrix kernel's
 * int8 and bf16 forms, the columns past the last whole vector through a
 * zero-padded copy. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gen/gemv_gen.h"
#include "kernels/x64/x64.h"
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
    return (dt == KG_DT_F32 || dt == KG_DT_F64) && (m == 1 || n == 1) && k > 0 &&
           (double)(m > n ? m : n) * (double)k >= VEC_MIN_ELEMS;
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

static fj_status vxm_kernel(fj_runtime *rt, const kg_vxm_cfg *c, fj_kernel **out) {
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
            if (v.nblk) s = vxm_kernel(rt, &cf, &kern[2 * g]);
            cf.nv = (int)((tail + v.lanes - 1) / v.lanes);
            cf.tail = rl != 0;
            if (s == FJ_OK && tail) s = vxm_kernel(rt, &cf, &kern[2 * g + 1]);
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

/* ---- int8 and bf16: one row of C, B along it ---------------------------- */

/* Jobs over a matrix of bytes bytes in nblk blocks: threads from
 * GEMM_VEC_MT_BYTES, one job where the blocks are fewer than the threads. */
static int64_t vxm_jobs(fj_runtime *rt, double bytes, int64_t nblk) {
    int threads = bytes < (double)GEMM_VEC_MT_BYTES ? 1 : rt_threads(rt);
    return nblk < threads ? 1 : threads;
}

static void vxm_run(fj_runtime *rt, double bytes, int64_t jobs, void (*job)(void *, int64_t),
                    void *ctx) {
    if (jobs > 1) rt_parallel(rt, jobs, (int)jobs, job, ctx, rt_par_wake_from(bytes, GEMM_VEC_MT_BYTES));
    else job(ctx, 0);
}

/* The calling thread's scratch of bytes bytes, or NULL with *s the error. */
static uint8_t *vxm_scratch(size_t bytes, fj_status *s) {
    uint8_t *mem = lp_scratch(bytes);
    if (!mem) *s = fj_fail(FJ_ERR_NO_MEMORY, "gemm: out of memory (%zu bytes of scratch)", bytes);
    return mem;
}

/* The last columns of k rows (tail bytes each, rows ld bytes apart) into
 * a panel w bytes a row, zero-padded. */
static void vxm_tail_panel(uint8_t *pan, const uint8_t *src, int64_t ld, int64_t k, size_t tail,
                           size_t w) {
    for (int64_t kk = 0; kk < k; kk++) {
        memcpy(pan + kk * (int64_t)w, src + kk * ld, tail);
        memset(pan + kk * (int64_t)w + tail, 0, w - tail);
    }
}

/* int8: with x = A (s8 A: A + 128) and ao its offset
 * (s8: + 128), acc[j] = sum_k (x_k - ao)(B_kj - bo) = sum_k x_k B_kj -
 * ao * colsum_j - bo * sum_k x_k + k * ao * bo (mod 2^32), colsum_j = sum_k
 * B_kj from a second pass of the kernel with x of ones (ao 0: none); the
 * last k % 4 rows of B copied with zero rows into a quad. bf16: any k. */
int lp_vxm_fits(const lp_call *x) {
    return x->m == 1 && !x->tb && x->k > 0 && (double)x->n * (double)x->k >= VEC_MIN_ELEMS;
}

/* ---- bf16 ---------------------------------------------------------------- */

typedef struct vxm16_run {
    const lp_call *x;
    kg_vxm_fn fn[2][2];   /* [groups of 8 rows, the last k % 8][blocks of nv chunks, one chunk] */
    kg_vxm_args a;
    const float *xf;      /* A's k values as f32 */
    const uint16_t *tailp; /* the last n % w columns, w a row, zero-padded */
    float *y;
    int64_t nblk, nsingle, jobs;  /* blocks of nv chunks; whole chunks after them */
    int w, nv;            /* columns a chunk (one vector of bf16); chunks a block */
} vxm16_run;

/* C = alpha*y (+ beta*C, fused as the tile kernel's store does). */
__attribute__((target("avx2,fma"))) static void vxm16_finish(const vxm16_run *v, int64_t c0,
                                                             int64_t c1) {
    const lp_call *x = v->x;
    float *c = (float *)x->c;
    const __m128 be = _mm_set_ss(x->beta);
    for (int64_t j = c0; j < c1; j++) {
        __m128 r = _mm_set_ss(x->alpha * v->y[kg_vxm16_pos(j, v->w)]);
        if (x->beta != 0.0f) r = _mm_fmadd_ss(_mm_set_ss(c[j]), be, r);
        c[j] = _mm_cvtss_f32(r);
    }
}

/* Job j: its blocks (the last job also the whole chunks after them and the
 * tail panel), then C's columns of them. */
static void vxm16_job(void *ctx, int64_t j) {
    const vxm16_run *v = ctx;
    const lp_call *x = v->x;
    const int w = v->w, bw = v->nv * w;
    int64_t b0 = j * v->nblk / v->jobs, b1 = (j + 1) * v->nblk / v->jobs;
    int last = j + 1 == v->jobs;
    int64_t c0 = b0 * bw, c1 = last ? x->n : b1 * bw;
    int64_t yend = last ? (x->n + w - 1) / w * w : c1;
    memset(v->y + c0, 0, (size_t)(yend - c0) * 4);
    for (int part = 0; part < 3; part++) {
        int64_t e0 = part == 0 ? c0 : v->nblk * bw + (part == 2 ? v->nsingle * w : 0);
        int64_t nb = part == 0 ? b1 - b0 : !last ? 0 : part == 1 ? v->nsingle : x->n % w != 0;
        if (nb <= 0) continue;
        kg_vxm_args a = v->a;
        const uint16_t *mat = part == 2 ? v->tailp : (const uint16_t *)x->b + e0;
        if (part == 2) a.ldm = 2 * (int64_t)w, a.grp_m = 16 * (int64_t)w;
        a.y = v->y + e0;
        a.nblk = nb;
        for (int g = 0; g < 2; g++) {
            int64_t r = g ? x->k / 8 * 8 : 0, ngrp = g ? x->k % 8 != 0 : x->k / 8;
            if (!ngrp) continue;
            a.m = (const char *)mat + r * a.ldm;
            a.x = v->xf + r;
            a.ngrp = ngrp;
            v->fn[g][part != 0](&a);
        }
    }
    vxm16_finish(v, c0, c1);
}

static fj_status lp_vxm16_call(fj_runtime *rt, const lp_call *x) {
    vxm16_run v;
    memset(&v, 0, sizeof v);
    v.x = x;
    const int avx512 = rt->isa == FJ_ISA_AVX512;
    v.w = avx512 ? 32 : 16;
    v.nv = avx512 ? 4 : 2;
    const int w = v.w;
    v.nblk = x->n / (v.nv * w);
    v.nsingle = (x->n - v.nblk * v.nv * w) / w;
    const int64_t tail = x->n % w;
    fj_kernel *kern[4] = {NULL, NULL, NULL, NULL};
    fj_status s = FJ_OK;
    for (int g = 0; g < 2 && s == FJ_OK; g++) {
        int rows = g ? (int)(x->k % 8) : 8;
        if (!rows || (!g && x->k < 8)) continue;
        for (int one = 0; one < 2 && s == FJ_OK; one++) {
            if (!one && !v.nblk) continue;
            kg_vxm_cfg cf = {.tag = KG_VXM_TAG, .isa = rt->isa, .rows = rows, .nv = one ? 1 : v.nv,
                             .bf16 = 1};
            s = vxm_kernel(rt, &cf, &kern[2 * g + one]);
            if (s == FJ_OK) v.fn[g][one] = (kg_vxm_fn)rt_kernel_fn(kern[2 * g + one]);
        }
    }
    /* Scratch: y (whole chunks), A as f32, the tail panel. */
    const size_t ybytes = (size_t)((x->n + w - 1) / w * w) * 4, xbytes = (size_t)x->k * 4;
    const size_t pbytes = tail ? (size_t)x->k * 2 * (size_t)w : 0;
    uint8_t *cur = s == FJ_OK ? vxm_scratch(ybytes + xbytes + pbytes + 3 * 64, &s) : NULL;
    if (s == FJ_OK) {
        v.y = aligned_part(&cur, ybytes);
        float *xf = aligned_part(&cur, xbytes);
        const uint16_t *a16 = x->a;
        const int64_t as = x->ta ? x->lda : 1;
        for (int64_t kk = 0; kk < x->k; kk++) {
            uint32_t u = (uint32_t)a16[kk * as] << 16;
            memcpy(&xf[kk], &u, 4);
        }
        v.xf = xf;
        if (tail) {
            uint8_t *pan = aligned_part(&cur, pbytes);
            vxm_tail_panel(pan, (const uint8_t *)x->b + (x->n - tail) * 2, x->ldb * 2, x->k,
                           (size_t)tail * 2, (size_t)w * 2);
            v.tailp = (const uint16_t *)(const void *)pan;
        }
        v.a.ldm = x->ldb * 2;
        v.a.grp_m = 8 * v.a.ldm;
        double mbytes = (double)x->n * (double)x->k * 2.0;
        v.jobs = vxm_jobs(rt, mbytes, v.nblk);
        vxm_run(rt, mbytes, v.jobs, vxm16_job, &v);
    }
    for (int i = 0; i < 4; i++)
        if (kern[i]) rt_kernel_unref(kern[i]);
    return s;
}

/* ---- int8 ---------------------------------------------------------------- */

typedef struct vxm8_run {
    const lp_call *x;
    kg_vxm_fn fn[2];      /* groups of 8 rows; of 4 (k4 % 8 == 4, and the last k % 4 rows) */
    kg_vxm_args a;        /* of the first block */
    const uint8_t *x8;    /* A's k bytes as u8 (s8 A: + 128) */
    const uint8_t *ones;  /* k bytes of 1 where B's column sums are needed, else NULL */
    const int8_t *tailp;  /* the last n % w columns, w bytes a row, zero-padded */
    const int8_t *lastq;  /* k % 4: B's last k % 4 rows and zero rows, pw bytes a row */
    int64_t k4, pw;       /* rows read in place (k rounded down to 4); lastq's row */
    int32_t *y, *cs, *s;  /* sums and B's column sums in the kernel's order; C's order */
    int64_t nblk, jobs;
    int w;
    uint32_t ao;          /* A's offset (s8 A: + 128) */
    uint32_t aterm;       /* bo * sum of A - k * ao * bo */
} vxm8_run;

/* Job j: its blocks of w columns (the last job also the tail panel), then
 * C's columns of them. */
static void vxm8_job(void *ctx, int64_t j) {
    const vxm8_run *v = ctx;
    const lp_call *x = v->x;
    int64_t b0 = j * v->nblk / v->jobs, b1 = (j + 1) * v->nblk / v->jobs;
    int last = j + 1 == v->jobs, w = v->w;
    int64_t c0 = b0 * w, c1 = last ? x->n : b1 * w;
    int64_t yend = last && x->n % w ? (v->nblk + 1) * w : b1 * w;
    /* A's sums, then (with A's offset) B's column sums: the same kernel
     * with x of ones */
    for (int pass = 0; pass < 1 + (v->ones != NULL); pass++) {
        int32_t *y = pass ? v->cs : v->y;
        memset(y + c0, 0, (size_t)(yend - c0) * 4);
        for (int part = 0; part < 2; part++) {
            int64_t nb = part ? (last && x->n % w) : b1 - b0;
            if (nb <= 0) continue;
            kg_vxm_args a = v->a;
            const int8_t *m = part ? v->tailp : (const int8_t *)x->b + c0;
            if (part) a.ldm = w, a.grp_m = 8 * (int64_t)w;
            a.y = y + (part ? v->nblk * w : c0);
            a.nblk = nb;
            for (int g = 0; g < 2; g++) {
                int64_t r = g ? v->k4 / 8 * 8 : 0, ngrp = g ? v->k4 % 8 != 0 : v->k4 / 8;
                if (!ngrp) continue;
                a.m = m + r * a.ldm;
                a.x = (pass ? v->ones : v->x8) + r;
                a.ngrp = ngrp;
                v->fn[g](&a);
            }
        }
        if (v->lastq) {
            /* the last k % 4 rows, zero-padded to a quad, over all of the
             * job's columns (the tail panel's too: it follows the blocks) */
            kg_vxm_args a = v->a;
            a.m = v->lastq + c0;
            a.ldm = v->pw;
            a.grp_m = 4 * v->pw;
            a.x = (pass ? v->ones : v->x8) + v->k4;
            a.y = y + c0;
            a.nblk = b1 - b0 + (last && x->n % w);
            a.ngrp = 1;
            if (a.nblk > 0) v->fn[1](&a);
        }
    }
    for (int64_t jj = c0; jj < c1; jj++) {
        int64_t q = kg_vxm8_pos(jj, w);
        uint32_t r = (uint32_t)v->y[q] - v->aterm;
        if (v->ones) r -= v->ao * (uint32_t)v->cs[q];
        v->s[jj] = (int32_t)r;
    }
    const int per_col = x->offsetc == 'R' || x->offsetc == 'r';
    lp_finish_line(x, v->s + c0, (int32_t *)x->c + c0, 1, c1 - c0, x->co + (per_col ? c0 : 0),
                   per_col);
}

fj_status lp_vxm_call(fj_runtime *rt, const lp_call *x) {
    if (x->kind == LP_BF16) return lp_vxm16_call(rt, x);
    vxm8_run v;
    memset(&v, 0, sizeof v);
    v.x = x;
    const int avx512 = rt->isa == FJ_ISA_AVX512;
    v.w = avx512 ? 64 : 32;
    const int w = v.w;
    v.nblk = x->n / w;
    const int64_t tail = x->n % w, ny = (v.nblk + 1) * w;
    const int dot = (rt->features & (avx512 ? X64_F_AVX512VNNI : X64_F_AVXVNNI)) != 0;
    fj_kernel *kern[2] = {NULL, NULL};
    fj_status s = FJ_OK;
    v.k4 = x->k / 4 * 4;
    const int64_t rem = x->k % 4;
    for (int g = 0; g < 2 && s == FJ_OK; g++) {
        int rows = g ? 4 : 8;
        if (g ? v.k4 % 8 == 0 && !rem : v.k4 < 8) continue;
        kg_vxm_cfg cf = {.tag = KG_VXM_TAG, .isa = rt->isa, .rows = rows, .nv = 1, .i8 = 1, .dot = dot};
        s = vxm_kernel(rt, &cf, &kern[g]);
        if (s == FJ_OK) v.fn[g] = (kg_vxm_fn)rt_kernel_fn(kern[g]);
    }
    /* Scratch: sums in the kernel's order, B's column sums, sums in C's
     * order, A's bytes (strided, s8 or k % 4: zero-padded to the last
     * quad), ones, the last quad's rows, the tail panel. */
    const int s8 = x->kind == LP_S8S8, copy = (x->ta && x->lda != 1) || s8 || rem;
    const uint32_t ao = (uint32_t)x->ao + (s8 ? 128u : 0u);
    v.pw = ny;
    const size_t ybytes = (size_t)ny * 4, pbytes = tail ? (size_t)(v.k4 * w) : 0;
    const size_t kb = (size_t)x->k + 4, qbytes = rem ? (size_t)(4 * v.pw) : 0;
    const size_t bytes = 3 * ybytes + (copy ? kb : 0) + (ao ? kb : 0) + pbytes + qbytes + 7 * 64;
    uint8_t *cur = s == FJ_OK ? vxm_scratch(bytes, &s) : NULL;
    if (s == FJ_OK) {
        v.y = aligned_part(&cur, ybytes);
        v.cs = aligned_part(&cur, ybytes);
        v.s = aligned_part(&cur, ybytes);
        const uint8_t *a8 = x->a;
        const int64_t as = x->ta ? x->lda : 1;
        if (copy) {
            uint8_t *xc = aligned_part(&cur, kb);
            for (int64_t kk = 0; kk < x->k; kk++) xc[kk] = (uint8_t)(a8[kk * as] ^ (s8 ? 0x80 : 0));
            memset(xc + x->k, 0, 4);
            a8 = xc;
        }
        v.x8 = a8;
        if (ao) {
            uint8_t *ones = aligned_part(&cur, kb);
            memset(ones, 1, (size_t)x->k);
            memset(ones + x->k, 0, 4);
            v.ones = ones;
        }
        if (rem) {
            int8_t *q = aligned_part(&cur, qbytes);
            memset(q, 0, qbytes);
            for (int64_t r = 0; r < rem; r++)
                memcpy(q + r * v.pw, (const int8_t *)x->b + (v.k4 + r) * x->ldb, (size_t)x->n);
            v.lastq = q;
        }
        uint32_t suma = 0;
        for (int64_t kk = 0; kk < x->k; kk++) suma += a8[kk];
        v.ao = ao;
        v.aterm = (uint32_t)x->bo * suma - (uint32_t)x->k * ao * (uint32_t)x->bo;
        if (tail) {
            uint8_t *pan = aligned_part(&cur, pbytes);
            vxm_tail_panel(pan, (const uint8_t *)x->b + v.nblk * w, x->ldb, v.k4, (size_t)tail,
                           (size_t)w);
            v.tailp = (const int8_t *)pan;
        }
        v.a.ldm = x->ldb;
        v.a.grp_m = 8 * x->ldb;
        double mbytes = (double)x->n * (double)x->k;
        v.jobs = vxm_jobs(rt, mbytes, v.nblk);
        vxm_run(rt, mbytes, v.jobs, vxm8_job, &v);
    }
    for (int g = 0; g < 2; g++)
        if (kern[g]) rt_kernel_unref(kern[g]);
    return s;
}
