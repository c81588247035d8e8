/* gemv_gen.h: generator of the f32/f64 vector x matrix kernel (y = x^T M, M row-major along y). */
#ifndef FJ_KG_GEMV_H
#define FJ_KG_GEMV_H

#include <stddef.h>
#include <stdint.h>
#include "base/base.h"
#include "framejit/builder.h"

/* Everything that changes the generated code; also the kernel cache key
 * (only 32-bit fields: no padding). */
typedef struct kg_vxm_cfg {
    int32_t tag;  /* KG_VXM_TAG */
    int32_t isa;  /* fj_isa */
    int32_t rows; /* rows of M a call adds (1-8) */
    int32_t nv;   /* vectors of y a block (AVX-512 1-16, AVX2 1-4) */
    int32_t tail; /* 1: the block's last vector has only the lanes of kmask / ymask */
    int32_t f64;  /* 1: M, x and y are doubles (lanes of 64 bits) */
    int32_t i8;   /* 1: M s8, x u8, y int32 (kg_vxm8 below); rows 4 or 8, nv 1, no tail */
    int32_t dot;  /* i8: vpdpbusd; 0: vpmaddubsw + vpmaddwd (pairs of k saturate in int16) */
    int32_t bf16; /* 1: M bf16 widened to f32 (kg_vxm16_pos below), x and y f32; no tail */
} kg_vxm_cfg;

#define KG_VXM_TAG 0x56584d33 /* "VXM3" */

/* For each of ngrp groups of rows rows of M, in order (a group's first
 * row grp_m bytes after the previous group's, its x values rows elements
 * after the previous group's), and each of nblk blocks of nv vectors of y
 * (nv*lanes consecutive elements, es = 4 or 8 bytes each; with tail, the
 * last vector's masked lanes are neither read nor written):
 *   y[j] += x[0]*M(0, j) + x[1]*M(1, j) + ... + x[rows-1]*M(rows-1, j)
 * (in the element type, added in that order), M(r, j) at m + r*ldm bytes
 * + j*es, the first block's j = 0; blocks nv*lanes*es bytes apart in M and
 * y. A group reads its rows side by side, left to right (streams the
 * prefetchers follow), y staying in L1 between groups. Offsets are read
 * by the generated code (offsetof). */
typedef struct kg_vxm_args {
    const void *m;
    int64_t ldm;          /* bytes between rows of M */
    const void *x;        /* rows values */
    void *y;
    int64_t nblk;         /* >= 1 */
    int64_t ngrp;         /* groups of rows rows, >= 1 */
    int64_t grp_m;        /* bytes from a group's first row of M to the next's */
    uint32_t kmask;       /* tail, AVX-512: lanes of the last vector */
    int32_t ymask[8];     /* tail, AVX2: the same as -1/0 dwords (both of a double's) */
} kg_vxm_args;

/* i8: the same over quads of rows: for each block of one vector of bytes
 * of each row (W = 64 or 32 columns) and each quad q of rows r..r+3 (x's
 * bytes u8, M's s8), y[j] += x[r]*M(r, j) + ... + x[r+3]*M(r+3, j) in
 * int32 (mod 2^32; without dot each pair (r, r+1), (r+2, r+3) summed in
 * int16 with saturation first). y holds a block's W sums as 4 vectors in
 * the unpacks' order: column 16L + 4v + i at dword (W/4)*v + 4L + i of
 * the block (kg_vxm8_pos). */
static inline int64_t kg_vxm8_pos(int64_t j, int w) {
    int64_t blk = j / w, c = j % w;
    return blk * w + (c % 16) / 4 * (w / 4) + c / 16 * 4 + c % 4;
}

/* bf16: as f32, each vector of bf16 loaded from a row (w = 32 or 16
 * columns) widened by word unpacks with zero into two f32 vectors; y
 * holds column 8L + 4v + i of a w-column chunk at float (w/2)*v + 4L + i
 * of the chunk; blocks of nv such chunks. */
static inline int64_t kg_vxm16_pos(int64_t j, int w) {
    int64_t blk = j / w, c = j % w;
    return blk * w + (c % 8) / 4 * (w / 2) + c / 8 * 4 + c % 4;
}

typedef void (*kg_vxm_fn)(const kg_vxm_args *args);
enum { KG_VXM_NARGS = 1 };

FJ_INTERNAL fj_status kg_vxm_check(const kg_vxm_cfg *c);
FJ_INTERNAL void kg_vxm_name(const kg_vxm_cfg *c, char *buf, size_t n);
/* rt_gen_fn for kg_vxm_cfg. */
FJ_INTERNAL void kg_vxm(fj_builder *b, const void *cfg);

#endif
