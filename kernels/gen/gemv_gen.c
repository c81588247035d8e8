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
    if (c->rows < 1 || c->rows > 8 || c->nv < 1 || c->nv > nv_max || (c->tail != 0 && c->tail != 1) ||
        (c->f64 != 0 && c->f64 != 1) || (c->i8 != 0 && c->i8 != 1))
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

/* The int8 kernel: each quad of rows' vectors interleaved into dwords of
 * four k (byte then word unpacks, within 128-bit lanes, as the packers
 * do), then one dot product of x's quad per vector of y. */
static void vxm8(fj_builder *b, const kg_vxm_cfg *c) {
    const int avx512 = c->isa == FJ_ISA_AVX512, vb = avx512 ? 512 : 256, vbytes = vb / 8;
    const int quads = c->rows / 4;
    fj_reg p = fj_arg(b, 0);
    fj_reg g = fj_gpr(b), m = fj_gpr(b), m4 = fj_gpr(b), yp = fj_gpr(b), ldm = fj_gpr(b);
    fj_reg ldm3 = fj_gpr(b), nb = fj_gpr(b), xp = fj_gpr(b), ng = fj_gpr(b);
    fj_reg acc[4], bq[4], t[4], xq[2], ones = {0};
    for (int i = 0; i < 4; i++) acc[i] = fj_vreg(b), bq[i] = fj_vreg(b), t[i] = fj_vreg(b);
    for (int i = 0; i < quads; i++) xq[i] = fj_vreg(b);
    const fj_op mov = avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU;
#define W(r) fj_vec(b, (r))
    if (!c->dot) {
        static const uint32_t one16 = 0x00010001u;
        ones = fj_vreg(b);
        fj_emit(b, FJ_VPBROADCASTD, W(ones), fj_const_data(b, &one16, 4, 4, 32));
    }
    fj_emit(b, FJ_MOV, fj_r64(g), fj_mem(64, p, OFF(m)));
    fj_emit(b, FJ_MOV, fj_r64(xp), fj_mem(64, p, OFF(x)));
    fj_emit(b, FJ_MOV, fj_r64(ldm), fj_mem(64, p, OFF(ldm)));
    fj_emit(b, FJ_MOV, fj_r64(ng), fj_mem(64, p, OFF(ngrp)));
    fj_emit(b, FJ_LEA, fj_r64(ldm3), fj_memx(64, ldm, ldm, 2, 0));
    fj_label grp = fj_label_new(b), blk = fj_label_new(b);
    fj_label_bind(b, grp);
    for (int i = 0; i < quads; i++) fj_emit(b, FJ_VPBROADCASTD, W(xq[i]), fj_mem(32, xp, 4 * i));
    fj_emit(b, FJ_MOV, fj_r64(m), fj_r64(g));
    fj_emit(b, FJ_LEA, fj_r64(m4), fj_memx(64, g, ldm, 4, 0));
    fj_emit(b, FJ_MOV, fj_r64(yp), fj_mem(64, p, OFF(y)));
    fj_emit(b, FJ_MOV, fj_r64(nb), fj_mem(64, p, OFF(nblk)));
    fj_label_bind(b, blk);
    for (int v = 0; v < 4; v++) fj_emit(b, mov, W(acc[v]), fj_mem((uint16_t)vb, yp, v * vbytes));
    for (int qd = 0; qd < quads; qd++) {
        fj_reg base = qd ? m4 : m;
        fj_emit(b, mov, W(bq[0]), fj_mem((uint16_t)vb, base, 0));
        fj_emit(b, mov, W(bq[1]), fj_memx((uint16_t)vb, base, ldm, 1, 0));
        fj_emit(b, mov, W(bq[2]), fj_memx((uint16_t)vb, base, ldm, 2, 0));
        fj_emit(b, mov, W(bq[3]), fj_memx((uint16_t)vb, base, ldm3, 1, 0));
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
    for (int v = 0; v < 4; v++) fj_emit(b, mov, fj_mem((uint16_t)vb, yp, v * vbytes), W(acc[v]));
#undef W
    fj_emit(b, FJ_ADD, fj_r64(m), fj_imm(vbytes));
    fj_emit(b, FJ_ADD, fj_r64(m4), fj_imm(vbytes));
    fj_emit(b, FJ_ADD, fj_r64(yp), fj_imm(4 * vbytes));
    fj_emit(b, FJ_DEC, fj_r64(nb));
    fj_emit(b, FJ_JNE, fj_lbl(blk));
    fj_emit(b, FJ_ADD, fj_r64(g), fj_mem(64, p, OFF(grp_m)));
    fj_emit(b, FJ_ADD, fj_r64(xp), fj_imm(c->rows));
    fj_emit(b, FJ_DEC, fj_r64(ng));
    fj_emit(b, FJ_JNE, fj_lbl(grp));
    fj_return(b, fj_none());
}

void kg_vxm(fj_builder *b, const void *ctx) {
    const kg_vxm_cfg *c = ctx;
    if (c->i8) {
        vxm8(b, c);
        return;
    }
    const int avx512 = c->isa == FJ_ISA_AVX512, vb = avx512 ? 512 : 256, vbytes = vb / 8;
    const int nv = c->nv, last = nv - 1, rows = c->rows, es = c->f64 ? 8 : 4;
    const vxm_ops *o = c->f64 ? &ops_f64 : &ops_f32;
    fj_reg p = fj_arg(b, 0);
    fj_reg g = fj_gpr(b), m = fj_gpr(b), m4 = fj_gpr(b), yp = fj_gpr(b), ldm = fj_gpr(b);
    fj_reg ldm3 = fj_gpr(b), nb = fj_gpr(b), xp = fj_gpr(b), ng = fj_gpr(b);
    fj_reg acc[16], bc[8], t = {0}, ym = {0}, km = {0};
    for (int v = 0; v < nv; v++) acc[v] = fj_vreg(b);
    /* AVX2: M's vectors loaded into t, then FMAs of registers (the FMA
     * with a memory operand ran the 1x1024x1024 stream ~15% slower). */
    if (!avx512) t = fj_vreg(b);
    if (c->tail && avx512) {
        km = fj_kreg(b);
        fj_emit(b, FJ_KMOVW, fj_k(km), fj_mem(16, p, OFF(kmask)));
    } else if (c->tail) {
        ym = fj_vreg(b);
        fj_emit(b, FJ_VMOVDQU, fj_ymm(ym), fj_mem(256, p, OFF(ymask)));
    }
    fj_emit(b, FJ_MOV, fj_r64(g), fj_mem(64, p, OFF(m)));
    fj_emit(b, FJ_MOV, fj_r64(xp), fj_mem(64, p, OFF(x)));
    fj_emit(b, FJ_MOV, fj_r64(ldm), fj_mem(64, p, OFF(ldm)));
    fj_emit(b, FJ_MOV, fj_r64(ng), fj_mem(64, p, OFF(ngrp)));
    fj_emit(b, FJ_LEA, fj_r64(ldm3), fj_memx(64, ldm, ldm, 2, 0));
    /* Each group: its rows' x values broadcast, then the blocks from y's
     * start; the next group's rows follow grp_m bytes on. */
    fj_label grp = fj_label_new(b);
    fj_label_bind(b, grp);
    for (int r = 0; r < rows; r++) {
        bc[r] = fj_vreg(b);
        fj_emit(b, o->bcast, fj_vec(b, bc[r]), fj_mem((uint16_t)(8 * es), xp, es * r));
    }
    fj_emit(b, FJ_MOV, fj_r64(m), fj_r64(g));
    fj_emit(b, FJ_LEA, fj_r64(m4), fj_memx(64, g, ldm, 4, 0));
    fj_emit(b, FJ_MOV, fj_r64(yp), fj_mem(64, p, OFF(y)));
    fj_emit(b, FJ_MOV, fj_r64(nb), fj_mem(64, p, OFF(nblk)));
    fj_label blk = fj_label_new(b);
    fj_label_bind(b, blk);
    for (int v = 0; v < nv; v++)
        y_move(b, c, o, 1, fj_mem((uint16_t)vb, yp, v * vbytes), acc[v], v, km, ym);
    for (int r = 0; r < rows; r++) {
        /* rows 0-3 from m, 4-7 from m + 4*ldm: [base + {0, ldm, 2*ldm, ldm3}] */
        fj_reg base = r < 4 ? m : m4;
        int q = r & 3;
        for (int v = 0; v < nv; v++) {
            int32_t d = v * vbytes;
            fj_opnd src = q == 0 ? fj_mem((uint16_t)vb, base, d)
                          : q == 3 ? fj_memx((uint16_t)vb, base, ldm3, 1, d)
                                   : fj_memx((uint16_t)vb, base, ldm, (uint8_t)q, d);
            if (c->tail && v == last && avx512) {
                /* masked-off lanes are not read (no fault past M's end) and stay zero */
                fj_emit(b, o->fma, fj_masked(fj_zmm(acc[v]), km, 0), fj_zmm(bc[r]), src);
            } else if (c->tail && v == last) {
                fj_emit(b, o->maskmov, fj_ymm(t), fj_ymm(ym), src);
                fj_emit(b, o->fma, fj_ymm(acc[v]), fj_ymm(bc[r]), fj_ymm(t));
            } else if (!avx512) {
                fj_emit(b, o->mov, fj_ymm(t), src);
                fj_emit(b, o->fma, fj_ymm(acc[v]), fj_ymm(bc[r]), fj_ymm(t));
            } else {
                fj_emit(b, o->fma, fj_zmm(acc[v]), fj_zmm(bc[r]), src);
            }
        }
    }
    for (int v = 0; v < nv; v++)
        y_move(b, c, o, 0, fj_mem((uint16_t)vb, yp, v * vbytes), acc[v], v, km, ym);
    fj_emit(b, FJ_ADD, fj_r64(m), fj_imm(nv * vbytes));
    fj_emit(b, FJ_ADD, fj_r64(m4), fj_imm(nv * vbytes));
    fj_emit(b, FJ_ADD, fj_r64(yp), fj_imm(nv * vbytes));
    fj_emit(b, FJ_DEC, fj_r64(nb));
    fj_emit(b, FJ_JNE, fj_lbl(blk));
    fj_emit(b, FJ_ADD, fj_r64(g), fj_mem(64, p, OFF(grp_m)));
    fj_emit(b, FJ_ADD, fj_r64(xp), fj_imm(rows * es));
    fj_emit(b, FJ_DEC, fj_r64(ng));
    fj_emit(b, FJ_JNE, fj_lbl(grp));
    fj_return(b, fj_none());
}
