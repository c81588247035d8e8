/* gemm_lowp_gen.h: generator of int8 (u8 x s8 -> s32) and bf16 (bf16 x bf16 -> f32) GEMM kernels. */
#ifndef FJ_KG_GEMM_LOWP_H
#define FJ_KG_GEMM_LOWP_H

#include <stdint.h>
#include "base/base.h"

/* Input types of a low-precision kernel. */
enum {
    KG_LP_U8S8 = 1,  /* A u8, B s8, int32 accumulators (s8 A arrives shifted by +128) */
    KG_LP_BF16,      /* A and B bf16, f32 accumulators */
    KG_LP_F32,       /* A and the vector f32 (matrix x vector only, dot = 0: FMAs) */
    KG_LP_F64,       /* the same in f64 (8 sums a tile stored as doubles) */
};

/* Everything that changes the generated code; also the kernel cache key
 * (only 32-bit fields: no padding). */
typedef struct kg_lowp_cfg {
    int32_t tag;   /* KG_LOWP_TAG */
    int32_t isa;   /* fj_isa */
    int32_t dt;    /* KG_LP_* */
    int32_t dot;   /* 1: vpdpbusd / vdpbf16ps; 0: the fallback sequence
                      (vpmaddubsw + vpmaddwd; bf16 widened to f32 + FMA) */
    int32_t mr, nv;
    int32_t add;   /* int8: C += result (else C = result); bf16: beta != 0 (C is read) */
    int32_t scale; /* bf16 plain store: acc times alpha (alpha != 1; alpha 1 leaves acc
                      as it is, bit for bit, without the multiplies) */
    int32_t b_rows;  /* bf16 dot (AVX-512), a_rows, nv even, no post: B read in place
                        (row-major, b_src, rows ldb bytes apart, k even, all nv*16
                        columns inside B): each k group's two rows interleaved
                        into the panel at b as the first tile uses them; the
                        later tiles read the panel */
    int32_t a_rows;  /* A read in place: row-major, row i of the tile at a + i*lda
                        (k groups 4 bytes apart, k a multiple of the group; mr <= 8,
                        no post) instead of the packed tile */
    int32_t a_half;  /* bf16, a_rows, k odd: the last of kq groups holds one element
                        of A (read alone, the pair's other half zero: rows end at k);
                        B's group is padded as the packer pads it */
    /* The quantized epilogue (post = 1) instead of the plain store:
     *   y = act(scale * float(r) + bias[j])      int8 (r as above, without co)
     *   y = act(acc + bias[j])                    bf16
     * stored as f32, or q = clamp(rint(y*out_scale), lo, hi) + zp as
     * bytes, or y rounded to bf16 (nearest even). AVX2 kernels store q and
     * bf16 as dwords (the caller narrows them). */
    int32_t post;
    int32_t out;       /* KG_LP_OUT_* */
    int32_t scale_pc;  /* scale[j] per column (else scale[0]) */
    int32_t has_bias;
    int32_t act;       /* fj_eltwise_op, 0 = none */
    float act_alpha, act_beta;
    /* Matrix x vector (one column of B): 1 or 2 instead of the tile; see
     * kg_lowp_args. 2: a masked last chunk after the whole ones. */
    int32_t gemv;
    int32_t gemv_s8;   /* gemv, int8: A is s8, flipped to u8 (+128) as loaded */
    int32_t gemv_swap; /* gemv, int8: the matrix's rows are the s8 side of the dot
                          products and the vector the u8 side (m = 1, B transposed) */
} kg_lowp_cfg;

enum { KG_LP_OUT_F32 = 0, KG_LP_OUT_Q8, KG_LP_OUT_BF16 };

#define KG_LOWP_TAG 0x4c4f5731 /* "LOW1" */

/* A k group is the 4 bytes one dword lane of the dot instruction takes:
 * 4 int8 or 2 bf16 values of consecutive k. Packed layouts:
 *   A tile:  for each k group g, mr rows: a + (g*mr + i)*4
 *   B panel: for each k group g, nv*lanes columns: b + (g*nv*lanes + j)*4
 * both zero-padded (rows, columns and k). For each of ntiles row tiles the
 * kernel computes acc = A_tile * B_panel over kq groups, then
 *   int8: r = acc + colterm[j] + rowterm[i]; C = r (add: C += r), mod 2^32
 *   bf16: C = alpha*acc (alpha: scale, else 1; add: + beta*C)
 * storing rows < last_rows of the last tile and the lanes of kmask / ymask.
 * Offsets are read by the generated code (offsetof). */
typedef struct kg_lowp_args {
    const void *a;           /* first row tile of packed A */
    const void *b;           /* packed B panel */
    void *c;                 /* C(0, j0) of the first tile (int32 or f32) */
    const int32_t *colterm;  /* int8: nv*lanes terms of the panel's columns */
    const int32_t *rowterm;  /* int8: mr terms per tile, from the first tile's */
    int64_t kq;              /* k groups, >= 1 */
    int64_t ntiles;          /* >= 1 */
    int64_t last_rows;       /* 1..mr */
    int64_t a_tile, c_tile;  /* bytes between row tiles */
    int64_t ldc;             /* bytes */
    float alpha, beta;       /* bf16 */
    uint32_t kmask[4];       /* AVX-512: lanes of vector v to store */
    int32_t ymask[4][8];     /* AVX2: the same as -1/0 lane masks */
    const float *scale;      /* post: scales of the panel's columns (or the one scale) */
    const float *bias;       /* post: bias of the panel's columns */
    float out_scale;         /* post, Q8: y*out_scale, clamped to [lo, hi], rounded, + zp */
    float lo, hi;
    int32_t zp;
    int64_t lda;             /* a_rows: bytes between rows of A */
    const void *b_src;       /* b_rows: B(0, j0) */
    int64_t ldb;             /* b_rows: bytes between rows of B */
} kg_lowp_args;

/* The matrix x vector kernel (cfg.gemv, mr rows a block, A (u8, s8,
 * bf16, f32 or f64) in place, a = row 0 of the first block, rows lda bytes
 * apart): for each of ntiles blocks and each row i
 *   s_i = sum over chunks q of dot(A(i, chunk q), b chunk q)
 * where a chunk is a vector of A's row (64 or 32 bytes): kq whole chunks,
 * then with gemv == 2 one more whose A dword lanes are kmask / ymask[0]
 * (both dwords of a double; b zero-padded to whole chunks). The lanes are
 * summed in registers (mod 2^32, or in f32/f64) and 8 sums a block are
 * stored at c + block*32 (f64: block*64), row i's in element i (elements
 * past mr zero); kernels of at most 4 rows store 4 sums a block
 * (c + block*16, f64 block*32). a_tile: bytes between blocks
 * (mr*lda). */
typedef void (*kg_lowp_fn)(const kg_lowp_args *args);
enum { KG_LOWP_NARGS = 1 };

/* 0 if cfg can be generated, else FJ_ERR_INVALID_ARG with a message. */
FJ_INTERNAL fj_status kg_lowp_check(const kg_lowp_cfg *cfg);
/* Emits the kernel for cfg (an rt_gen_fn: ctx is the cfg). */
FJ_INTERNAL void kg_lowp(fj_builder *b, const void *cfg);
/* "fj_gemm_u8s8s32_8x48_vnni_avx512" ("_add"), "fj_gemm_bf16_..." into buf. */
FJ_INTERNAL void kg_lowp_name(const kg_lowp_cfg *cfg, char *buf, size_t n);

#endif
