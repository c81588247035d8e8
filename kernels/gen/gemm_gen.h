/* gemm_gen.h: generator of f32 and f64 GEMM kernels (row-tile loop around a register tile). */
#ifndef FJ_KG_GEMM_H
#define FJ_KG_GEMM_H

#include <stdint.h>
#include "base/base.h"
#include "framejit/builder.h"

/* Element type of A, B and C (es: its size in bytes, 4 or 8). */
enum {
    KG_DT_F32 = 0,
    KG_DT_F64,
};
/* Where the kernel reads A(i, k) (the broadcast operand) from. */
enum {
    KG_GA_PACKED = 0,  /* a + (k*mr + i)*es: packed micro-panels (compile-time stride) */
    KG_GA_ROWS,        /* a + i*lda + k*es: row-major A read in place ('N') */
    KG_GA_COLS,        /* a + k*lda + i*es: column-major A read in place ('T') */
};
/* Where the kernel reads B(k, j) (the vector operand) from. */
enum {
    KG_GB_PACKED = 0,  /* b + (k*nv*lanes + j)*es: a zero-padded packed panel */
    KG_GB_ROWS,        /* b + k*ldb + j*es: row-major B read in place (full panels only) */
};

/* Everything that changes the generated code; it is also the kernel
 * cache key (no padding bytes: only 32-bit fields). */
typedef struct kg_gemm_cfg {
    int32_t tag;        /* KG_GEMM_TAG: keeps GEMM keys apart from other kernels' */
    int32_t isa;        /* fj_isa of the builder the kernel is meant for */
    int32_t mr, nv;     /* register tile: mr rows x nv vectors */
    int32_t amode, bmode;
    int32_t unroll;     /* k steps per main-loop iteration */
    int32_t pf_a;       /* prefetch distance in bytes ahead of packed A, 0 = none */
    int32_t pf_c;       /* prefetch the C tile at the start of each tile:
                           1 into L1, 2 into L2 (its rows are often 4 KiB
                           apart: 14 of them do not stay in one L1 set) */
    int32_t pf_b;       /* prefetch distance in bytes ahead of packed B, 0 = none */
    int32_t a_reg;      /* AVX-512: broadcast A into a register (vbroadcastss)
                           instead of an embedded {1to16} FMA operand */
    int32_t b_copy;     /* packed B: the kernel can pack B itself (copy_b) */
    int32_t has_bias;   /* post stage adds bias[j] */
    int32_t act;        /* fj_eltwise_op of the post stage, 0 = none */
    float act_alpha, act_beta;
    int32_t stores;     /* the C updates without post the kernel has, KG_STORES(kind)
                           bits; 0: all three. Calling it with another kind of
                           store is undefined (no code for it). */
    int32_t dt;         /* KG_DT_*: f64 kernels need a_reg on AVX-512, and their act
                           is one of kg_gemm_act64's (its alpha, beta read at run time) */
    int32_t tail_rows;  /* 1..mr-1: a last tile of at most this many rows runs a k
                           loop over those rows only (spread over min(mr/tail_rows,
                           unroll) sets of accumulators); 0: every tile computes mr */
    int32_t full_panels; /* AVX2: every call's panel is nv*lanes wide (no column
                           tail): C is stored with plain moves, not under masks */
} kg_gemm_cfg;

#define KG_GEMM_TAG 0x47454d31 /* "GEM1" */

/* The kernel's one argument (the pointers typed float point to doubles
 * for f64 kernels; every stride and tile step is in bytes). For each of ntiles row tiles (mr rows each,
 * last_rows in the last one; a_tile bytes apart in A, c_tile in C) it
 * computes acc = A_tile * B over kc, then
 *     C = alpha * acc + (beta_zero ? 0 : beta * C)       (C never read if beta_zero)
 *     if post: C = act(C + bias[j])
 * storing only the lanes enabled by the masks. Offsets are read by the
 * generated code: keep this layout in sync with the offsetof()s in gemm.c. */
typedef struct kg_gemm_args {
    const float *a;          /* first row tile of A */
    const float *b;          /* B panel (kc x nv*lanes); copy_b calls write it */
    float *c;                /* C(0, 0) of the first tile */
    const float *bias;       /* bias + j0 (post only) */
    int64_t kc;              /* >= 0 */
    int64_t ntiles;          /* >= 1 */
    int64_t last_rows;       /* 1..mr */
    int64_t a_tile, c_tile;  /* bytes between row tiles */
    int64_t lda, ldb, ldc;   /* bytes */
    float alpha, beta;
    int32_t beta_zero, post;
    uint32_t kmask[4];       /* AVX-512: lanes of vector v to load/store */
    uint32_t kmask_c[4];     /* AVX-512: lanes of C to read (0 if beta_zero) */
    const float *b_src;      /* copy_b: B(0, 0) of the panel, row-major, ldb apart */
    int32_t copy_b;          /* b_copy kernels: the first tile reads B from b_src
                                (a full panel) and writes the packed panel to
                                b as it goes; the other tiles read b */
    int32_t store;           /* KG_STORE_*: alpha/beta special cases (no post) */
    int64_t b_src_pf;        /* copy_b: prefetch distance ahead of b_src, bytes */
    double alpha_d, beta_d;  /* f64 kernels' alpha and beta (f32 ones read alpha, beta) */
    double act_a, act_b;     /* f64 kernels' post-op alpha and beta (f32: in the code) */
    int32_t ymask[4][8];     /* AVX2: the kmask lanes as -1/0 lane masks (last: an
                                AVX-512 call copies the fields before them only) */
} kg_gemm_args;

/* C update of kg_gemm_args.store when post is 0. */
enum {
    KG_STORE_GENERAL = 0, /* C = alpha*acc + beta*C (beta_zero: C not read) */
    KG_STORE_SET,         /* alpha = 1, beta = 0: C = acc */
    KG_STORE_ADD,         /* alpha = 1, beta = 1: C += acc */
};
#define KG_STORES(kind) (1 << (kind))
#define KG_STORES_ALL (KG_STORES(KG_STORE_GENERAL) | KG_STORES(KG_STORE_SET) | KG_STORES(KG_STORE_ADD))

typedef void (*kg_gemm_fn)(const kg_gemm_args *args);
enum { KG_GEMM_NARGS = 1 };

/* Whether an f64 kernel has the post-op act with this alpha: every
 * fj_eltwise_op (kernels/gen/gemm_act64.c). */
FJ_INTERNAL int kg_gemm_act64(int act, double alpha);
/* The f64 post-op's scratch: vector and (AVX-512) mask registers. */
FJ_INTERNAL int kg_act64_vregs(int act, int avx512);
FJ_INTERNAL int kg_act64_kregs(int act, int avx512);
/* x := act(x) in packed doubles; ca, cb hold alpha and beta; key is the
 * kernel's act_alpha (which form relu/leaky_relu take); t holds
 * kg_act64_vregs scratch vectors, k kg_act64_kregs masks (k[0], k[1]
 * read in any case). */
FJ_INTERNAL void kg_act64_emit(fj_builder *b, int avx512, int act, float key, fj_reg x,
                               fj_reg ca, fj_reg cb, const fj_reg *t, const fj_reg *k);
/* 0 if cfg can be generated for the builder's ISA, else FJ_ERR_INVALID_ARG
 * with a message (register budget, modes). */
FJ_INTERNAL fj_status kg_gemm_check(const kg_gemm_cfg *cfg);
/* Emits the kernel for cfg (an rt_gen_fn: ctx is the cfg). */
FJ_INTERNAL void kg_gemm(fj_builder *b, const void *cfg);
/* "fj_gemm_f32_14x32_pp_avx512" ("fj_gemm_f64_..." for f64) (+ "_bias", "_relu" ...; "_set", "_add",
 * "_ab" for a kernel with only some of the stores) into buf. */
FJ_INTERNAL void kg_gemm_name(const kg_gemm_cfg *cfg, char *buf, size_t n);

#endif
