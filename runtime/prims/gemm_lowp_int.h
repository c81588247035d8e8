/* gemm_lowp_int.h: the int8/bf16 GEMM driver's call and run descriptions, shared by its driver and packers. */
#ifndef FJ_GEMM_LOWP_INT_H
#define FJ_GEMM_LOWP_INT_H

#include <stdint.h>

#include "kernels/gen/gemm_lowp_gen.h"
#include "runtime/prims/gemm_int.h"

enum { LP_INT8, LP_S8S8, LP_BF16 };

typedef struct lp_call {
    int kind;                /* LP_* */
    int ta, tb;              /* transposed */
    char offsetc;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *a, *b;
    void *c;
    int32_t ao, bo;
    const int32_t *co;
} lp_call;

/* A handle's epilogue (kg_lowp_cfg.post) and its per-call operands. */
typedef struct lp_post {
    const kg_lowp_cfg *cfg;  /* the handle's kernel configuration */
    kg_lowp_fn fn;
    const float *scale, *bias;  /* padded copies (panel-wide loads stay inside) */
    float out_scale, lo, hi;
    int32_t zp;
    int narrow_after;        /* AVX2 u8/s8/bf16 out: the kernel wrote dwords to scratch */
    int out;                 /* KG_LP_OUT_* */
    int out_signed;          /* Q8: s8 */
} lp_post;

/* The runtime's kernel for c (checked, generated on first use); the
 * caller holds a reference. */
FJ_INTERNAL fj_status lp_get_kernel(fj_runtime *rt, const kg_lowp_cfg *c, fj_kernel **out);
/* The next 64-byte aligned part of bytes bytes of a scratch at *cur
 * (each part needs up to 63 bytes of slack). */
static inline void *aligned_part(uint8_t **cur, size_t bytes) {
    uint8_t *p = (uint8_t *)(((uintptr_t)*cur + 63) & ~(uintptr_t)63);
    *cur = p + bytes;
    return p;
}

/* The calling thread's packing scratch (the f32 GEMM's, kept for the
 * thread's life): memory freed after each call comes back from the
 * allocator unmapped after an idle spell (mimalloc decommits freed pages
 * after 25 ms), and the next call pays a page fault per 4 KiB again. */
static inline uint8_t *lp_scratch(size_t bytes) { return (uint8_t *)gemm_scratch((bytes + 3) / 4); }

/* n elements of an int8 call's C, ldc apart, from their sums s (offsets
 * of A and B applied): C = s + beta*C + co (mod 2^32) with alpha 1 and
 * beta 0 or 1, else sat(rnd(alpha*s + beta*C)) + co; co's i-th at co[i*cs]
 * (cs 0: co[0] for all). */
FJ_INTERNAL void lp_finish_line(const lp_call *x, const int32_t *s, int32_t *c, int64_t ldc,
                                int64_t n, const int32_t *co, int64_t cs);
/* The kernel of cfg through this thread's memo slot slot: *fn to call;
 * *ref a reference the caller drops after the call (NULL when the memo
 * holds the kernel). */
FJ_INTERNAL fj_status lp_memo_kernel(fj_runtime *rt, const kg_lowp_cfg *cfg, int slot,
                                     kg_lowp_fn *fn, fj_kernel **ref);
/* gemv_lowp.c: int8 and bf16 calls with one row of C and B along it (m = 1,
 * B not transposed) read B in place with the vector x matrix kernels;
 * those with one column of C and A along k (n = 1, A not transposed) read
 * A in place with the matrix x vector kernels. */
FJ_INTERNAL int lp_vxm_fits(const lp_call *x);
FJ_INTERNAL fj_status lp_vxm_call(fj_runtime *rt, const lp_call *x);
FJ_INTERNAL int lp_gemv_fits(const lp_call *x);
FJ_INTERNAL fj_status lp_gemv_call(fj_runtime *rt, const lp_call *x);

typedef struct lp_run {
    const lp_call *x;
    const lp_post *post;
    kg_lowp_cfg cfg;
    kg_lowp_fn fn;
    kg_lowp_fn fn_rows;      /* the in-place A kernel (row-major A, whole k groups), or NULL */
    kg_lowp_fn fn_tail;      /* with fn_rows: the in-place kernel of the last tile's m % mr rows */
    kg_lowp_fn fn_bpack;     /* with fn_rows: the in-place A and B kernel (a full panel's first tile), or NULL */
    int avx512;              /* the runtime's ISA: the packers may use AVX-512BW */
    int es;                  /* input element bytes: 1 or 2 */
    int kgrp;                /* elements per k group: 4 or 2 */
    int lanes, nr;           /* columns per vector, per panel */
    int need_rowsum;         /* int8 with bo != 0 */
    int need_colsum;         /* int8 with ao (+128 for s8 A) != 0 */
    int64_t kq;              /* k groups */
    int64_t mtiles, npan;
    int64_t pa_t0;           /* the first packed A tile (A in place before it) */
    int64_t tiles_per_blk;   /* row block: its A in L2 while the panels sweep it */
    int ni, nj;              /* jobs: ni row groups x nj column groups of panels */
    uint8_t *pa, *pb;        /* packed A (all tiles), packed B (ni copies of every panel) */
    int64_t a_tile, b_pan;   /* bytes per tile / panel */
    int32_t *colterm;        /* int8: ni copies of npan*nr terms */
    int32_t *rowterm, *rowsum;  /* int8: mtiles*mr */
    int32_t *scratch;        /* general alpha/beta or AVX2 narrowing: m x n (ld n) */
    int general;
} lp_run;

/* Packs row tile t of A (mr rows, zero-padded) and, with need_rowsum, its row sums. */
FJ_INTERNAL void lp_pack_a_tile(void *run, int64_t t);
/* Packs column panel q of B into dst (b_pan bytes, zero-padded) and, with
 * need_colsum, the int8 column sums of its nr columns into colsum. */
FJ_INTERNAL void lp_pack_b_panel(const lp_run *r, int64_t q, uint8_t *dst, int32_t *colsum);

#endif
