/* gemv_gen.c: the f32/f64 vector x matrix kernel: y = x^T M for M row-major along y (1 x k times k x n).
 *
 * For each group of up to 8 rows of M in turn, the rows weighted by their
 * x values (broadcast once a group) are added to y: for each block of nv
 * vectors of y it loads the block, adds the rows' parts of it (rows side
 * by side) and stores it, left to right. M is read once, in place, as a
 * few sequential streams (one per row; a block sweeping all of k instead
 * walks down M a few hundred bytes a row, which the prefetchers follow
 * badly), while y stays in L1. A call's last block may have a masked last
 * vector (tail): masked loads and stores, nothing past y's or a row's end
 * is touched. */
#include "kernels/gen/gemv_gen.h"

#include <stddef.h>
#include <stdio.h>

#include "kernels/builder/builder_int.h"

#define OFF(f) ((int32_t)offsetof(kg_vxm_args, f))

fj_status kg_vxm_check(const kg_vxm_cfg *c) {
    if (c->isa != FJ_ISA_AVX512 && c->isa != FJ_ISA_AVX2)
        return fj_fail(FJ_ERR_INVALID_ARG, "vector x matrix kernel: isa %d", c->isa);
    int nv_max = c->isa == FJ_ISA_AVX512 ? 16 : 4; /* with 8 broadcasts: 24 / 14 registers */
    if (c->i8 && (c->rows % 4 || c->nv != 1 || c->tail || c->f64 || (c->dot != 0 && c->dot != 1)))
        return fj_fail(FJ_ERR_INVALID_ARG, "int8 vector x matrix kernel: %d rows (4 or 8), %d "
                       "vectors (1), tail %d", c->rows, c->nv, c->tail);
    if (c->bf16 && (c->i8 || c->f64 || c->tail || c->nv > (c->isa == FJ_ISA_AVX512 ? 4 : 2)))
        return fj_fail(FJ_ERR_INVALID_ARG, "bf16 vector x matrix kernel: %d vectors (AVX-512 1-4, "
                       "AVX2 1-2), tail %d", c->nv, c->tail);
    if (c->rows < 1 || c->rows > 8 || c->nv < 1 || c->nv > nv_max || (c->tail != 0 && c->tail != 1) ||
        (c->f64 != 0 && c->f64 != 1) || (c->i8 != 0 && c->i8 != 1) || (c->bf16 != 0 && c->bf16 != 1))
        return fj_fail(FJ_ERR_INVALID_ARG, "vector x matrix kernel: %d rows, %d vectors (1-%d), "
                       "tail %d, f64 %d", c->rows, c->nv, nv_max, c->tail, c->f64);
    return FJ_OK;
}

void kg_vxm_name(const kg_vxm_cfg *c, char *buf, size_t n) {
    const int avx512 = c->isa == FJ_ISA_AVX512;
    if (c->i8) {
        snprintf(buf, n, "fj_gemm_u8s8s32_vxm_%dx%d_%s_%s", c->rows, avx512 ? 64 : 32,
                 c->dot ? "dot" : "widen", avx512 ? "avx512" : "avx2");
        return;
    }
    if (c->bf16) {
        snprintf(buf, n, "fj_gemm_bf16bf16f32_vxm_%dx%d_widen_%s", c->rows, c->nv * (avx512 ? 32 : 16),
                 avx512 ? "avx512" : "avx2");
        return;
    }
    snprintf(buf, n, "fj_gemm_%s_vxm_%dx%d_%s%s", c->f64 ? "f64" : "f32", c->rows,
             c->nv * (avx512 ? 16 : 8) >> c->f64, avx512 ? "avx512" : "avx2", c->tail ? "_tail" : "");
}

/* The element type's instructions. */
typedef struct vxm_ops {
    fj_op mov, maskmov, bcast, fma;
} vxm_ops;
static const vxm_ops ops_f32 = {FJ_VMOVUPS, FJ_VMASKMOVPS, FJ_VBROADCASTSS, FJ_VFMADD231PS};
static const vxm_ops ops_f64 = {FJ_VMOVUPD, FJ_VMASKMOVPD, FJ_VBROADCASTSD, FJ_VFMADD231PD};

/* y's vector v to or from acc; with tail the last vector only the lanes
 * of km (AVX-512: loaded lanes past them zero) or ym (AVX2). */
static void y_move(fj_builder *b, const kg_vxm_cfg *c, const vxm_ops *o, int load, fj_opnd y,
                   fj_reg acc, int v, fj_reg km, fj_reg ym) {
    int masked = c->tail && v == c->nv - 1;
    if (masked && c->isa == FJ_ISA_AVX512) {
        if (load) fj_emit(b, o->mov, fj_masked(fj_zmm(acc), km, 1), y);
        else fj_emit(b, o->mov, fj_masked(y, km, 0), fj_zmm(acc));
    } else if (masked) {
        if (load) fj_emit(b, o->maskmov, fj_ymm(acc), fj_ymm(ym), y);
        else fj_emit(b, o->maskmov, y, fj_ymm(ym), fj_ymm(acc));
    } else {
        if (load) fj_emit(b, o->mov, fj_vec(b, acc), y);
        else fj_emit(b, o->mov, y, fj_vec(b, acc));
    }
}

/* The loops every kernel shares: groups of rows (x's values broadcast,
 * the group's rows from g), blocks of y within each (M's rows from m and
 * m4 = m + 4*ldm, y from yp). */
typedef struct vxm_loop {
    fj_reg p, g, m, m4, yp, ldm, ldm3, nb, xp, ng;
    fj_label grp, blk;
    int32_t bias; /* bytes m, m4 and yp point past the block's start */
} vxm_loop;

/* Registers and arguments (loop_groups then starts the group loop). */
static void loop_begin(fj_builder *b, vxm_loop *l) {
    l->p = fj_arg(b, 0);
    l->g = fj_gpr(b), l->m = fj_gpr(b), l->m4 = fj_gpr(b), l->yp = fj_gpr(b), l->ldm = fj_gpr(b);
    l->ldm3 = fj_gpr(b), l->nb = fj_gpr(b), l->xp = fj_gpr(b), l->ng = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(l->g), fj_mem(64, l->p, OFF(m)));
    fj_emit(b, FJ_MOV, fj_r64(l->xp), fj_mem(64, l->p, OFF(x)));
    fj_emit(b, FJ_MOV, fj_r64(l->ldm), fj_mem(64, l->p, OFF(ldm)));
    fj_emit(b, FJ_MOV, fj_r64(l->ng), fj_mem(64, l->p, OFF(ngrp)));
    fj_emit(b, FJ_LEA, fj_r64(l->ldm3), fj_memx(64, l->ldm, l->ldm, 2, 0));
    l->grp = fj_label_new(b);
    l->blk = fj_label_new(b);
    l->bias = 0;
}

/* The group loop's head (the caller's broadcasts follow). */
static void loop_groups(fj_builder *b, vxm_loop *l) { fj_label_bind(b, l->grp); }

/* The block loop's head: the group's rows and y from their starts. The
 * head sits 16 bytes past a 32-byte boundary: on a 32-byte boundary the
 * AVX2 1x1024x1024 stream ran 10-15% slower in about half of the bench's
 * processes on Zen 5, at 8, 16, 24, 48 or 56 bytes past a 64-byte line
 * in almost none; across a page boundary too, which placement avoids for
 * every kernel's loops (docs/performance.md). */
static void loop_blocks(fj_builder *b, vxm_loop *l) {
    fj_emit(b, FJ_LEA, fj_r64(l->m), fj_mem(64, l->g, l->bias));
    fj_emit(b, FJ_LEA, fj_r64(l->m4), fj_memx(64, l->g, l->ldm, 4, l->bias));
    fj_emit(b, FJ_MOV, fj_r64(l->yp), fj_mem(64, l->p, OFF(y)));
    if (l->bias) fj_emit(b, FJ_ADD, fj_r64(l->yp), fj_imm(l->bias));
    fj_emit(b, FJ_MOV, fj_r64(l->nb), fj_mem(64, l->p, OFF(nblk)));
    kb_align_next(b, 32, 16);
    fj_label_bind(b, l->blk);
}

/* Row r of the group (r < 8), d bytes into the block: rows 0-3 from m,
 * 4-7 from m4, [base + {0, ldm, 2*ldm, ldm3}]. */
static fj_opnd row_src(const vxm_loop *l, int r, int vb, int32_t d) {
    fj_reg base = r < 4 ? l->m : l->m4;
    d -= l->bias;
    int q = r & 3;
    return q == 0 ? fj_mem((uint16_t)vb, base, d)
           : q == 3 ? fj_memx((uint16_t)vb, base, l->ldm3, 1, d)
                    : fj_memx((uint16_t)vb, base, l->ldm, (uint8_t)q, d);
}

/* y's bytes d into the block. */
static fj_opnd y_at(const vxm_loop *l, int vb, int32_t d) {
    return fj_mem((uint16_t)vb, l->yp, d - l->bias);
}

/* Both loops' tails: M mstep bytes on and y ystep a block; the next group
 * grp_m bytes on, x xstep bytes. */
static void loop_end(fj_builder *b, const vxm_loop *l, int mstep, int ystep, int xstep) {
    fj_emit(b, FJ_ADD, fj_r64(l->m), fj_imm(mstep));
    fj_emit(b, FJ_ADD, fj_r64(l->m4), fj_imm(mstep));
    fj_emit(b, FJ_ADD, fj_r64(l->yp), fj_imm(ystep));
    fj_emit(b, FJ_DEC, fj_r64(l->nb));
    fj_emit(b, FJ_JNE, fj_lbl(l->blk));
    fj_emit(b, FJ_ADD, fj_r64(l->g), fj_mem(64, l->p, OFF(grp_m)));
    fj_emit(b, FJ_ADD, fj_r64(l->xp), fj_imm(xstep));
    fj_emit(b, FJ_DEC, fj_r64(l->ng));
    fj_emit(b, FJ_JNE, fj_lbl(l->grp));
    fj_return(b, fj_none());
}

#define W(r) fj_vec(b, (r))

/* The int8 kernel: each quad of rows' vectors interleaved into dwords of
 * four k (byte then word unpacks, within 128-bit lanes, as the packers
 * do), then one dot product of x's quad per vector of y. */
static void vxm8(fj_builder *b, const kg_vxm_cfg *c) {
    const int avx512 = c->isa == FJ_ISA_AVX512, vb = avx512 ? 512 : 256, vbytes = vb / 8;
    const int quads = c->rows / 4;
    fj_reg acc[4], bq[4], t[4], xq[2], ones = {0};
    for (int i = 0; i < 4; i++) acc[i] = fj_vreg(b), bq[i] = fj_vreg(b), t[i] = fj_vreg(b);
    for (int i = 0; i < quads; i++) xq[i] = fj_vreg(b);
    const fj_op mov = avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU;
    if (!c->dot) {
        static const uint32_t one16 = 0x00010001u;
        ones = fj_vreg(b);
        fj_emit(b, FJ_VPBROADCASTD, W(ones), fj_const_data(b, &one16, 4, 4, 32));
    }
    vxm_loop l;
    loop_begin(b, &l);
    loop_groups(b, &l);
    for (int i = 0; i < quads; i++) fj_emit(b, FJ_VPBROADCASTD, W(xq[i]), fj_mem(32, l.xp, 4 * i));
    loop_blocks(b, &l);
    for (int v = 0; v < 4; v++) fj_emit(b, mov, W(acc[v]), y_at(&l, vb, v * vbytes));
    for (int qd = 0; qd < quads; qd++) {
        for (int i = 0; i < 4; i++) fj_emit(b, mov, W(bq[i]), row_src(&l, 4 * qd + i, vb, 0));
        fj_emit(b, FJ_VPUNPCKLBW, W(t[0]), W(bq[0]), W(bq[1]));
        fj_emit(b, FJ_VPUNPCKHBW, W(t[1]), W(bq[0]), W(bq[1]));
        fj_emit(b, FJ_VPUNPCKLBW, W(t[2]), W(bq[2]), W(bq[3]));
        fj_emit(b, FJ_VPUNPCKHBW, W(t[3]), W(bq[2]), W(bq[3]));
        fj_emit(b, FJ_VPUNPCKLWD, W(bq[0]), W(t[0]), W(t[2]));
        fj_emit(b, FJ_VPUNPCKHWD, W(bq[1]), W(t[0]), W(t[2]));
        fj_emit(b, FJ_VPUNPCKLWD, W(bq[2]), W(t[1]), W(t[3]));
        fj_emit(b, FJ_VPUNPCKHWD, W(bq[3]), W(t[1]), W(t[3]));
        for (int v = 0; v < 4; v++) {
            if (c->dot) {
                fj_emit(b, FJ_VPDPBUSD, W(acc[v]), W(xq[qd]), W(bq[v]));
            } else {
                fj_emit(b, FJ_VPMADDUBSW, W(t[v]), W(xq[qd]), W(bq[v]));
                fj_emit(b, FJ_VPMADDWD, W(t[v]), W(t[v]), W(ones));
                fj_emit(b, FJ_VPADDD, W(acc[v]), W(acc[v]), W(t[v]));
            }
        }
    }
    for (int v = 0; v < 4; v++) fj_emit(b, mov, y_at(&l, vb, v * vbytes), W(acc[v]));
    loop_end(b, &l, vbytes, 4 * vbytes, c->rows);
}

/* The bf16 kernel: each row's vectors of bf16 widened to f32 (word
 * unpacks with a zero vector put each bf16 in a dword's high half), then
 * FMAs with the row's x value, as the f32 kernel. */
static void vxm16(fj_builder *b, const kg_vxm_cfg *c) {
    const int avx512 = c->isa == FJ_ISA_AVX512, vb = avx512 ? 512 : 256, vbytes = vb / 8;
    const int nv = c->nv, rows = c->rows;
    fj_reg acc[8], bc[8], ld = fj_vreg(b), t0 = fj_vreg(b), t1 = fj_vreg(b), zero = fj_vreg(b);
    for (int v = 0; v < 2 * nv; v++) acc[v] = fj_vreg(b);
    fj_emit(b, FJ_VXORPS, W(zero), W(zero), W(zero));
    vxm_loop l;
    loop_begin(b, &l);
    loop_groups(b, &l);
    for (int r = 0; r < rows; r++) {
        bc[r] = fj_vreg(b);
        fj_emit(b, FJ_VBROADCASTSS, W(bc[r]), fj_mem(32, l.xp, 4 * r));
    }
    loop_blocks(b, &l);
    for (int v = 0; v < 2 * nv; v++)
        fj_emit(b, FJ_VMOVUPS, W(acc[v]), y_at(&l, vb, v * vbytes));
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) {
            fj_emit(b, avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, W(ld), row_src(&l, r, vb, v * vbytes));
            fj_emit(b, FJ_VPUNPCKLWD, W(t0), W(zero), W(ld));
            fj_emit(b, FJ_VPUNPCKHWD, W(t1), W(zero), W(ld));
            fj_emit(b, FJ_VFMADD231PS, W(acc[2 * v]), W(bc[r]), W(t0));
            fj_emit(b, FJ_VFMADD231PS, W(acc[2 * v + 1]), W(bc[r]), W(t1));
        }
    for (int v = 0; v < 2 * nv; v++)
        fj_emit(b, FJ_VMOVUPS, y_at(&l, vb, v * vbytes), W(acc[v]));
    loop_end(b, &l, nv * vbytes, 2 * nv * vbytes, 4 * rows);
}

#undef W

void kg_vxm(fj_builder *b, const void *ctx) {
    const kg_vxm_cfg *c = ctx;
    if (c->i8) {
        vxm8(b, c);
        return;
    }
    if (c->bf16) {
        vxm16(b, c);
        return;
    }
    const int avx512 = c->isa == FJ_ISA_AVX512, vb = avx512 ? 512 : 256, vbytes = vb / 8;
    const int nv = c->nv, last = nv - 1, rows = c->rows, es = c->f64 ? 8 : 4;
    const vxm_ops *o = c->f64 ? &ops_f64 : &ops_f32;
    fj_reg acc[16], bc[8], t = {0}, ym = {0}, km = {0};
    for (int v = 0; v < nv; v++) acc[v] = fj_vreg(b);
    /* AVX2: M's vectors loaded into t, then FMAs of registers (the FMA
     * with a memory operand ran the 1x1024x1024 stream ~15% slower). */
    if (!avx512) t = fj_vreg(b);
    vxm_loop l;
    loop_begin(b, &l);
    if (c->tail && avx512) {
        km = fj_kreg(b);
        fj_emit(b, FJ_KMOVW, fj_k(km), fj_mem(16, l.p, OFF(kmask)));
    } else if (c->tail) {
        ym = fj_vreg(b);
        fj_emit(b, FJ_VMOVDQU, fj_ymm(ym), fj_mem(256, l.p, OFF(ymask)));
    }
    /* Each group: its rows' x values broadcast, then the blocks from y's
     * start; the next group's rows follow grp_m bytes on. */
    loop_groups(b, &l);
    for (int r = 0; r < rows; r++) {
        bc[r] = fj_vreg(b);
        fj_emit(b, o->bcast, fj_vec(b, bc[r]), fj_mem((uint16_t)(8 * es), l.xp, es * r));
    }
    /* The layout of oneDNN's kernel for these calls: M's and y's pointers
     * 128 bytes into the block (every displacement of a 256-byte block a
     * signed byte) and each vector of y loaded beside row 0's. With the
     * pointers at the block's start and y loaded first, the AVX2 loop ran
     * 8-10% slower on Zen 5 (docs/performance.md). */
    l.bias = 128;
    loop_blocks(b, &l);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) {
            fj_opnd src = row_src(&l, r, vb, v * vbytes);
            const int masked = c->tail && v == last;
            if (avx512 && r == 0) y_move(b, c, o, 1, y_at(&l, vb, v * vbytes), acc[v], v, km, ym);
            if (avx512) {
                /* masked-off lanes are not read (no fault past M's end) and stay zero */
                fj_emit(b, o->fma, masked ? fj_masked(fj_zmm(acc[v]), km, 0) : fj_zmm(acc[v]),
                        fj_zmm(bc[r]), src);
                continue;
            }
            if (masked) fj_emit(b, o->maskmov, fj_ymm(t), fj_ymm(ym), src);
            else fj_emit(b, o->mov, fj_ymm(t), src);
            if (r == 0) y_move(b, c, o, 1, y_at(&l, vb, v * vbytes), acc[v], v, km, ym);
            fj_emit(b, o->fma, fj_ymm(acc[v]), fj_ymm(bc[r]), fj_ymm(t));
        }
    for (int v = 0; v < nv; v++)
        y_move(b, c, o, 0, y_at(&l, vb, v * vbytes), acc[v], v, km, ym);
    loop_end(b, &l, nv * vbytes, nv * vbytes, rows * es);
}
