/* gemv_lowp.c: int8 and bf16 GEMM calls with one row or column of C, vector kernels.
 *
 * As gemv.c for f32: the matrix is read in place. One row of C with B
 * along it (m = 1, B not transposed): the vector x matrix kernel's int8
 * and bf16 forms, the columns past the last whole vector through a
 * zero-padded copy. One column of C with A along k (n = 1, A not
 * transposed): the matrix x vector kernel (gemm_lowp_gen.c's gemv form). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gen/gemm_lowp_gen.h"
#include "kernels/gen/gemv_gen.h"
#include "kernels/x64/x64.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_lowp_int.h"
#include "runtime/rt.h"

/* Jobs over a matrix of bytes bytes in nblk blocks: threads from
 * GEMM_VEC_MT_BYTES, one job where the blocks are fewer than the threads. */
static int64_t vec_jobs(fj_runtime *rt, double bytes, int64_t nblk) {
    int threads = bytes < (double)GEMM_VEC_MT_BYTES ? 1 : rt_threads(rt);
    return nblk < threads ? 1 : threads;
}

/* Runs job over jobs (the caller alone for one). */
static void vec_par(fj_runtime *rt, double bytes, int64_t jobs, void (*job)(void *, int64_t),
                    void *ctx) {
    if (jobs > 1) rt_parallel(rt, jobs, (int)jobs, job, ctx, rt_par_wake_from(bytes, GEMM_VEC_MT_BYTES));
    else job(ctx, 0);
}

/* The calling thread's scratch of bytes bytes, or NULL with *s the error. */
static uint8_t *vec_scratch(size_t bytes, fj_status *s) {
    uint8_t *mem = lp_scratch(bytes);
    if (!mem) *s = fj_fail(FJ_ERR_NO_MEMORY, "gemm: out of memory (%zu bytes of scratch)", bytes);
    return mem;
}

/* ---- int8 and bf16: one row of C, B along it ---------------------------- */

/* The vector (k elements of es bytes, step elements apart) in place where
 * contiguous and whole vectors long with no flip, else copied into buf
 * (flip: each byte + 128, s8 to u8) and zero-padded to bbytes. */
static const uint8_t *gemv_vector(const void *src, int64_t step, int64_t k, int es, int flip,
                                  uint8_t *buf, size_t bbytes) {
    const size_t kb = (size_t)k * (size_t)es;
    if (step == 1 && !flip && kb == bbytes) return src;
    if (step == 1) {
        memcpy(buf, src, kb);
    } else {
        for (int64_t kk = 0; kk < k; kk++)
            memcpy(buf + kk * es, (const uint8_t *)src + kk * step * es, (size_t)es);
    }
    if (flip)
        for (size_t i = 0; i < kb; i++) buf[i] ^= 0x80;
    memset(buf + kb, 0, bbytes - kb);
    return buf;
}

/* k bytes of 1 (the u8 side of a dot product that sums the other side),
 * zero-padded to bytes. */
static const uint8_t *ones_vector(uint8_t *buf, int64_t k, size_t bytes) {
    memset(buf, 1, (size_t)k);
    memset(buf + k, 0, bytes - (size_t)k);
    return buf;
}

/* int8: what B's offset bo adds to every sum, mod 2^32, given A's k bytes
 * a (u8, s8 A + 128) and A's offset ao (+ 128): -bo * sum(a) + k * ao * bo,
 * subtracted as bo * sum(a) - k * ao * bo. */
static uint32_t bo_term(const uint8_t *a, int64_t k, uint32_t ao, int32_t bo) {
    if (!bo) return 0;
    uint32_t suma = 0;
    for (int64_t kk = 0; kk < k; kk++) suma += a[kk];
    return (uint32_t)bo * suma - (uint32_t)k * ao * (uint32_t)bo;
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
    return x->m == 1 && !x->tb && x->k > 0 && (double)x->n * (double)x->k >= GEMM_VEC_MIN_ELEMS;
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
            s = gemv_vxm_kernel(rt, &cf, &kern[2 * g + one]);
            if (s == FJ_OK) v.fn[g][one] = (kg_vxm_fn)rt_kernel_fn(kern[2 * g + one]);
        }
    }
    /* Scratch: y (whole chunks), A as f32, the tail panel. */
    const size_t ybytes = (size_t)((x->n + w - 1) / w * w) * 4, xbytes = (size_t)x->k * 4;
    const size_t pbytes = tail ? (size_t)x->k * 2 * (size_t)w : 0;
    uint8_t *cur = s == FJ_OK ? vec_scratch(ybytes + xbytes + pbytes + 3 * 64, &s) : NULL;
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
        v.jobs = vec_jobs(rt, mbytes, v.nblk);
        vec_par(rt, mbytes, v.jobs, vxm16_job, &v);
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
        s = gemv_vxm_kernel(rt, &cf, &kern[g]);
        if (s == FJ_OK) v.fn[g] = (kg_vxm_fn)rt_kernel_fn(kern[g]);
    }
    /* Scratch: sums in the kernel's order, B's column sums, sums in C's
     * order, A's bytes (strided, s8 or k % 4: zero-padded to the last
     * quad), ones, the last quad's rows, the tail panel. */
    const int s8 = x->kind == LP_S8S8, copy = (x->ta && x->lda != 1) || s8 || rem;
    const uint32_t ao = (uint32_t)x->ao + (s8 ? 128u : 0u);
    v.pw = ny;
    const size_t ybytes = (size_t)ny * 4, pbytes = tail ? (size_t)(v.k4 * w) : 0;
    const size_t kb = (size_t)(x->k + 3) & ~(size_t)3, qbytes = rem ? (size_t)(4 * v.pw) : 0;
    const size_t bytes = 3 * ybytes + (copy ? kb : 0) + (ao ? kb : 0) + pbytes + qbytes + 7 * 64;
    uint8_t *cur = s == FJ_OK ? vec_scratch(bytes, &s) : NULL;
    if (s == FJ_OK) {
        v.y = aligned_part(&cur, ybytes);
        v.cs = aligned_part(&cur, ybytes);
        v.s = aligned_part(&cur, ybytes);
        const uint8_t *a8 = gemv_vector(x->a, x->ta ? x->lda : 1, x->k, 1, s8,
                                        copy ? aligned_part(&cur, kb) : NULL, kb);
        v.x8 = a8;
        if (ao) v.ones = ones_vector(aligned_part(&cur, kb), x->k, kb);
        if (rem) {
            int8_t *q = aligned_part(&cur, qbytes);
            memset(q, 0, qbytes);
            for (int64_t r = 0; r < rem; r++)
                memcpy(q + r * v.pw, (const int8_t *)x->b + (v.k4 + r) * x->ldb, (size_t)x->n);
            v.lastq = q;
        }
        v.ao = ao;
        v.aterm = bo_term(a8, x->k, ao, x->bo);
        if (tail) {
            uint8_t *pan = aligned_part(&cur, pbytes);
            vxm_tail_panel(pan, (const uint8_t *)x->b + v.nblk * w, x->ldb, v.k4, (size_t)tail,
                           (size_t)w);
            v.tailp = (const int8_t *)pan;
        }
        v.a.ldm = x->ldb;
        v.a.grp_m = 8 * x->ldb;
        double mbytes = (double)x->n * (double)x->k;
        v.jobs = vec_jobs(rt, mbytes, v.nblk);
        vec_par(rt, mbytes, v.jobs, vxm8_job, &v);
    }
    for (int g = 0; g < 2; g++)
        if (kern[g]) rt_kernel_unref(kern[g]);
    return s;
}

/* ---- matrix x vector ---------------------------------------------------- */

/* The matrix runs along k: n = 1 with A row-major (u8 or s8 with bo == 0,
 * or bf16), or m = 1 with B transposed (B's rows of k, x @ W^T as an
 * inference layer with weights stored out x in calls it). Each row of the
 * matrix is read in place a vector at a time against the vector, so that
 * no operand is packed and no lane of a tile is padding; whole k groups
 * (int8 4, bf16 2: the row tails are masked in dwords). */
int lp_gemv_fits(const lp_call *x) {
    if (x->k <= 0 || x->k % (x->kind == LP_BF16 ? 2 : 4)) return 0;
    if (x->n == 1 && !x->ta) return x->kind == LP_BF16 || x->bo == 0;
    return x->m == 1 && x->tb;
}

typedef struct lp_gemv {
    const lp_call *x;
    kg_lowp_fn fn, fn_tail;  /* blocks of mr rows; the last rows % mr rows */
    kg_lowp_args g;          /* of the first block */
    const uint8_t *mat;      /* the matrix's row 0: A (n = 1) or B (m = 1) */
    int64_t rows, ld;        /* its rows (C's outputs), bytes between them */
    int64_t cstep;           /* elements between C's outputs: ldc, or 1 */
    int co_each;             /* int8: co holds one value an output */
    int64_t nblk, jobs;
    int mr;
    int32_t *sums;           /* the rows' sums (int32 or f32), 8 a block */
    int32_t *rsum;           /* int8, m = 1 with A's offset: B's rows' sums (else NULL) */
    const uint8_t *ones;     /* ... from the kernel with this vector of ones */
    uint32_t aterm;          /* int8: subtracted from every sum (mod 2^32) */
    uint32_t ao;             /* int8, m = 1: A's offset (s8 A: + 128), times rsum */
} lp_gemv;

/* bf16: C = alpha*s (+ beta*C, fused as the tile kernel's store does). */
__attribute__((target("avx2,fma"))) static void gemv_finish_bf16(const lp_gemv *v, int64_t r0,
                                                                 int64_t n, const float *sum) {
    const lp_call *x = v->x;
    const int64_t cs = v->cstep;
    float *c = (float *)x->c + r0 * cs;
    const __m128 b = _mm_set_ss(x->beta);
    for (int64_t i = 0; i < n; i++) {
        __m128 r = _mm_set_ss(x->alpha * sum[i]);
        if (x->beta != 0.0f) r = _mm_fmadd_ss(_mm_set_ss(c[i * cs]), b, r);
        c[i * cs] = _mm_cvtss_f32(r);
    }
}

/* Job j: its blocks (the last job also the rows % mr rows), then their C. */
static void gemv_job(void *ctx, int64_t j) {
    lp_gemv *v = ctx;
    const lp_call *x = v->x;
    int64_t b0 = j * v->nblk / v->jobs, b1 = (j + 1) * v->nblk / v->jobs;
    kg_lowp_args g = v->g;
    for (int part = 0; part < 2; part++) {
        int64_t i0 = part ? v->nblk * v->mr : b0 * v->mr, rows = part ? v->rows - i0 : (b1 - b0) * v->mr;
        if (rows <= 0 || (part && j + 1 < v->jobs)) continue;
        g.a = v->mat + i0 * v->ld;
        g.ntiles = part ? 1 : b1 - b0;
        for (int pass = 0; pass < 1 + (v->rsum != NULL); pass++) {
            g.c = (pass ? v->rsum : v->sums) + i0;
            g.b = pass ? v->ones : v->g.b;
            (part ? v->fn_tail : v->fn)(&g);
        }
    }
    int64_t i1 = j + 1 < v->jobs ? b1 * v->mr : v->rows;
    int64_t r0 = b0 * v->mr, n = i1 - r0;
    uint32_t *sum = (uint32_t *)v->sums + r0;
    if (x->kind == LP_BF16) {
        gemv_finish_bf16(v, r0, n, (const float *)(const void *)sum);
        return;
    }
    if (v->rsum)
        for (int64_t i = 0; i < n; i++) sum[i] -= v->ao * (uint32_t)v->rsum[r0 + i] + v->aterm;
    else if (v->aterm)
        for (int64_t i = 0; i < n; i++) sum[i] -= v->aterm;
    lp_finish_line(x, (const int32_t *)sum, (int32_t *)x->c + r0 * v->cstep, v->cstep, n,
                   x->co + (v->co_each ? r0 : 0), v->co_each);
}

fj_status lp_gemv_call(fj_runtime *rt, const lp_call *x) {
    lp_gemv v;
    memset(&v, 0, sizeof v);
    v.x = x;
    int avx512 = rt->isa == FJ_ISA_AVX512, vbytes = avx512 ? 64 : 32;
    v.mr = 8;
    int bf16 = x->kind == LP_BF16, es = bf16 ? 2 : 1;
    /* swap: m = 1, the matrix is B (s8, the dot products' signed side), the
     * vector A (u8; s8 A + 128) */
    const int swap = !(x->n == 1 && !x->ta);
    char o = x->offsetc;
    if (swap) {
        v.mat = x->b, v.ld = x->ldb * es, v.rows = x->n, v.cstep = 1;
        v.co_each = o == 'R' || o == 'r';
    } else {
        v.mat = x->a, v.ld = x->lda * es, v.rows = x->m, v.cstep = x->ldc;
        v.co_each = o == 'C' || o == 'c';
    }
    int64_t kb = x->k * es, kq = kb / vbytes, rem = kb % vbytes;  /* bytes of a row */
    kg_lowp_cfg c;
    memset(&c, 0, sizeof c);
    c.tag = KG_LOWP_TAG;
    c.isa = rt->isa;
    c.dt = bf16 ? KG_LP_BF16 : KG_LP_U8S8;
    if (bf16) c.dot = avx512 && (rt->features & X64_F_AVX512BF16);
    else c.dot = (rt->features & (avx512 ? X64_F_AVX512VNNI : X64_F_AVXVNNI)) != 0;
    c.nv = 1;
    c.gemv = rem ? 2 : 1;
    c.gemv_s8 = !swap && x->kind == LP_S8S8;
    c.gemv_swap = swap && !bf16;
    v.nblk = v.rows / v.mr;
    fj_kernel *ref[2] = {NULL, NULL};
    fj_status s = FJ_OK;
    if (v.nblk) {
        c.mr = v.mr;
        s = lp_memo_kernel(rt, &c, 3, &v.fn, &ref[0]);
    }
    if (s == FJ_OK && v.rows % v.mr) {
        c.mr = (int32_t)(v.rows % v.mr);
        s = lp_memo_kernel(rt, &c, 4, &v.fn_tail, &ref[1]);
    }
    /* int8: sum_k (a_k - ao)(w_k - bo) with a' = a (+128 for s8 A) the
     * kernels' u8 side and ao' = ao (+128) its offset: the dot product,
     * minus ao' * (the s8 side's sum), minus bo * sum(a') + k * ao' * bo
     * (m = 1; n = 1 has bo 0). The s8 side is the vector for n = 1 (one
     * sum), the matrix's rows for m = 1 (a second pass with ones). */
    const uint32_t aop = (uint32_t)x->ao + (x->kind == LP_S8S8 ? 128u : 0u);
    const int need_rsum = swap && !bf16 && aop != 0;
    const size_t bbytes = (size_t)(kq + (rem != 0)) * (size_t)vbytes;
    const size_t sbytes = (size_t)(v.rows / v.mr + 1) * 32;  /* 8 sums a block */
    const size_t bytes = (1 + need_rsum) * (bbytes + sbytes) + 4 * 64;
    uint8_t *mem = s == FJ_OK ? vec_scratch(bytes, &s) : NULL;
    if (s == FJ_OK) {
        uint8_t *cur = mem, *buf = aligned_part(&cur, bbytes);
        v.sums = aligned_part(&cur, sbytes);
        const void *vec = swap ? x->a : x->b;
        int64_t step = swap ? (x->ta ? x->lda : 1) : (x->tb ? 1 : x->ldb);
        const uint8_t *bv = gemv_vector(vec, step, x->k, es, swap && x->kind == LP_S8S8, buf, bbytes);
        if (need_rsum) {
            v.ones = ones_vector(aligned_part(&cur, bbytes), kb, bbytes);
            v.rsum = aligned_part(&cur, sbytes);
            v.ao = aop;
        }
        /* the constant terms (s8 side's sum for n = 1, a's for m = 1) */
        if (!bf16 && !swap && aop != 0) {
            uint32_t sumb = 0;
            for (int64_t kk = 0; kk < x->k; kk++) sumb += (uint32_t)(int32_t)(int8_t)bv[kk];
            v.aterm = aop * sumb;
        } else if (!bf16 && swap) {
            v.aterm = bo_term(bv, x->k, aop, x->bo);
        }
        v.g.b = bv;
        v.g.kq = kq;
        v.g.lda = v.ld;
        v.g.a_tile = v.mr * v.ld;
        int tl = (int)(rem / 4);
        v.g.kmask[0] = (1u << tl) - 1u;
        for (int l = 0; l < 8; l++) v.g.ymask[0][l] = l < tl ? -1 : 0;
        /* Threads from GEMM_VEC_MT_BYTES of the matrix: the streaming kernel
         * does one multiply-add a byte, a quarter of a tile's rate per op. */
        const double mbytes = (double)v.rows * (double)kb * (1 + need_rsum);
        v.jobs = vec_jobs(rt, mbytes, v.nblk);
        vec_par(rt, mbytes, v.jobs, gemv_job, &v);
    }
    for (int i = 0; i < 2; i++)
        if (ref[i]) rt_kernel_unref(ref[i]);
    return s;
}
