/* reduce_gen.c: row reductions (sum, max, min, mean, L2 norm) over the last
 * axis, AVX-512 and AVX2, and the row-reduction pieces softmax reuses.
 *
 * Each row is reduced in one fixed order: four vector accumulators over
 * blocks of 4 vectors, then single vectors into the first, the masked tail
 * into the second (its masked-off lanes hold the identity), the four
 * combined as (a0 + a1) + (a2 + a3), then a lane tree (vpermps halving).
 * The order depends only on cols, never on the thread that runs the row,
 * so results do not depend on the thread count.
 *
 * max/min follow fmaxf/fminf: NaN elements are skipped (a row of only
 * NaN gives -inf / +inf); sum, mean and L2 propagate NaN. L2 sums the
 * squares in float (no hypot-style scaling): it is inf once the sum of
 * squares passes FLT_MAX (elements around 1.8e19 and up). */
#include "kernels/gen/reduce_gen.h"

#include <math.h>
#include <string.h>

#include "kernels/gen/eltwise_gen.h"

static fj_opnd V(fj_builder *b, fj_reg r) { return fj_vec(b, r); }

static float ident(fj_reduce_op op) {
    return op == FJ_REDUCE_MAX ? -INFINITY : op == FJ_REDUCE_MIN ? INFINITY : 0.0f;
}

/* acc := acc (op) x; x may be clobbered. */
static void combine(fj_builder *b, fj_reduce_op op, fj_reg acc, fj_reg x, int square) {
    switch (op) {
    case FJ_REDUCE_MAX: fj_emit(b, FJ_VMAXPS, V(b, acc), V(b, x), V(b, acc)); break;
    case FJ_REDUCE_MIN: fj_emit(b, FJ_VMINPS, V(b, acc), V(b, x), V(b, acc)); break;
    default:
        if (square) fj_emit(b, FJ_VFMADD231PS, V(b, acc), V(b, x), V(b, x));
        else fj_emit(b, FJ_VADDPS, V(b, acc), V(b, acc), V(b, x));
        break;
    }
}

void kg_hreduce(fj_builder *b, fj_reduce_op op, fj_reg acc, fj_reg t, fj_reg idx) {
    /* lane permutations: upper half onto lower half, then quarters ... */
    static const int32_t p16[4][16] = {
        {8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15},
        {4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7},
        {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
    static const int32_t p8[3][8] = {
        {4, 5, 6, 7, 4, 5, 6, 7}, {2, 3, 2, 3, 2, 3, 2, 3}, {1, 1, 1, 1, 1, 1, 1, 1}};
    int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    int steps = avx512 ? 4 : 3;
    for (int i = 0; i < steps; i++) {
        const void *tbl = avx512 ? (const void *)p16[i] : (const void *)p8[i];
        fj_emit(b, FJ_VMOVUPS, V(b, idx), fj_const_data(b, tbl, avx512 ? 64 : 32, avx512 ? 64 : 32, 0));
        fj_emit(b, FJ_VPERMPS, V(b, t), V(b, idx), V(b, acc));
        combine(b, op == FJ_REDUCE_L2 || op == FJ_REDUCE_MEAN ? FJ_REDUCE_SUM : op, acc, t, 0);
    }
    /* only lane 0 has seen every lane: broadcast it */
    fj_emit(b, FJ_VBROADCASTSS, V(b, acc), fj_xmm(acc));
}

void kg_row_reduce(fj_builder *b, fj_reduce_op op, fj_reg p, fj_reg c, fj_reg acc[4], fj_reg x,
                   fj_reg tmpv, fj_reg mask, fj_reg tmp, int square) {
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    const int L = fj_builder_vbits(b) / 32, vb = L * 4;
    const float id = ident(op);
    fj_opnd idc = fj_const_f32(b, id);
    for (int i = 0; i < 4; i++) {
        if (id == 0.0f) fj_emit(b, FJ_VXORPS, fj_xmm(acc[i]), fj_xmm(acc[i]), fj_xmm(acc[i]));
        else fj_emit(b, FJ_VBROADCASTSS, V(b, acc[i]), idc);
    }
    fj_label l4 = fj_label_new(b), lrest = fj_label_new(b), l1 = fj_label_new(b),
             ltail = fj_label_new(b), ldone = fj_label_new(b);
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(4 * L));
    fj_emit(b, FJ_JB, fj_lbl(lrest));
    fj_label_bind(b, l4);
    for (int i = 0; i < 4; i++) {
        if (square || op == FJ_REDUCE_MAX || op == FJ_REDUCE_MIN) {
            fj_emit(b, FJ_VMOVUPS, V(b, x), fj_mem(0, p, i * vb));
            combine(b, op, acc[i], x, square);
        } else {
            fj_emit(b, FJ_VADDPS, V(b, acc[i]), V(b, acc[i]), fj_mem(0, p, i * vb));
        }
    }
    fj_emit(b, FJ_ADD, fj_r64(p), fj_imm(4 * vb));
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(4 * L));
    fj_emit(b, FJ_JAE, fj_lbl(l4));
    fj_label_bind(b, lrest);
    fj_emit(b, FJ_ADD, fj_r64(c), fj_imm(4 * L));
    fj_emit(b, FJ_CMP, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_JB, fj_lbl(ltail));
    fj_label_bind(b, l1);
    fj_emit(b, FJ_VMOVUPS, V(b, x), fj_mem(0, p, 0));
    combine(b, op, acc[0], x, square);
    fj_emit(b, FJ_ADD, fj_r64(p), fj_imm(vb));
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_CMP, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_JAE, fj_lbl(l1));
    fj_label_bind(b, ltail);
    fj_emit(b, FJ_TEST, fj_r64(c), fj_r64(c));
    fj_emit(b, FJ_JE, fj_lbl(ldone));
    kg_tail_mask(b, c, mask, tmp);
    kg_tail_load(b, x, p, mask, id, tmpv);
    combine(b, op, acc[1], x, square);
    fj_label_bind(b, ldone);
    combine(b, op == FJ_REDUCE_L2 || op == FJ_REDUCE_MEAN ? FJ_REDUCE_SUM : op, acc[0], acc[1], 0);
    combine(b, op == FJ_REDUCE_L2 || op == FJ_REDUCE_MEAN ? FJ_REDUCE_SUM : op, acc[2], acc[3], 0);
    combine(b, op == FJ_REDUCE_L2 || op == FJ_REDUCE_MEAN ? FJ_REDUCE_SUM : op, acc[0], acc[2], 0);
    (void)avx512;
}

void kg_tail_mask(fj_builder *b, fj_reg c, fj_reg mask, fj_reg tmp) {
    if (fj_builder_isa(b) == FJ_ISA_AVX512) {
        fj_emit(b, FJ_MOV, fj_r32(tmp), fj_imm(-1));
        fj_emit(b, FJ_BZHI, fj_r32(tmp), fj_r32(tmp), fj_r32(c));
        fj_emit(b, FJ_KMOVW, fj_k(mask), fj_r32(tmp));
    } else {
        /* 8 all-ones lanes then 8 zero lanes: the window at table + 32 - 4c
         * has exactly c leading all-ones lanes. */
        static const int32_t window[16] = {-1, -1, -1, -1, -1, -1, -1, -1};
        fj_opnd tbl = fj_const_data(b, window, sizeof window, 32, 0);
        tbl.val += 32;
        fj_emit(b, FJ_LEA, fj_r64(tmp), tbl);
        fj_emit(b, FJ_SHL, fj_r64(c), fj_imm(2));
        fj_emit(b, FJ_SUB, fj_r64(tmp), fj_r64(c));
        fj_emit(b, FJ_SHR, fj_r64(c), fj_imm(2));
        fj_emit(b, FJ_VMOVUPS, fj_ymm(mask), fj_mem(0, tmp, 0));
    }
}

void kg_tail_load(fj_builder *b, fj_reg x, fj_reg p, fj_reg mask, float fill, fj_reg t) {
    if (fj_builder_isa(b) == FJ_ISA_AVX512) {
        if (fill == 0.0f) {
            fj_emit(b, FJ_VMOVUPS, fj_masked(V(b, x), mask, 1), fj_mem(0, p, 0));
        } else {
            fj_emit(b, FJ_VBROADCASTSS, V(b, x), fj_const_f32(b, fill));
            fj_emit(b, FJ_VMOVUPS, fj_masked(V(b, x), mask, 0), fj_mem(0, p, 0));
        }
    } else {
        fj_emit(b, FJ_VMASKMOVPS, V(b, x), V(b, mask), fj_mem(0, p, 0));
        if (fill != 0.0f) {
            /* masked-off lanes are 0 after vmaskmovps: or in fill & ~mask */
            uint32_t f[8];
            for (int i = 0; i < 8; i++) memcpy(&f[i], &fill, 4);
            fj_emit(b, FJ_VANDNPS, V(b, t), V(b, mask), fj_const_data(b, f, 32, 32, 0));
            fj_emit(b, FJ_VORPS, V(b, x), V(b, x), V(b, t));
        }
    }
}

void kg_tail_store(fj_builder *b, fj_reg p, fj_reg x, fj_reg mask) {
    if (fj_builder_isa(b) == FJ_ISA_AVX512)
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_mem(0, p, 0), mask, 0), V(b, x));
    else
        fj_emit(b, FJ_VMASKMOVPS, fj_mem(0, p, 0), V(b, mask), V(b, x));
}

void kg_reduce(fj_builder *b, fj_reduce_op op) {
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1), rows = fj_arg(b, 2), shp = fj_arg(b, 3);
    fj_reg cols = fj_gpr(b), ld = fj_gpr(b), p = fj_gpr(b), c = fj_gpr(b), tmp = fj_gpr(b);
    fj_reg acc[4], x = fj_vreg(b), t = fj_vreg(b), idx = fj_vreg(b), scale = fj_vreg(b);
    for (int i = 0; i < 4; i++) acc[i] = fj_vreg(b);
    fj_reg mask = avx512 ? fj_kreg(b) : fj_vreg(b);
    fj_emit(b, FJ_MOV, fj_r64(cols), fj_mem(64, shp, 0));
    fj_emit(b, FJ_MOV, fj_r64(ld), fj_mem(64, shp, 8));
    fj_emit(b, FJ_SHL, fj_r64(ld), fj_imm(2));
    if (op == FJ_REDUCE_MEAN) fj_emit(b, FJ_VBROADCASTSS, V(b, scale), fj_mem(32, shp, 16)); /* (float)cols */
    fj_release(b, shp);
    fj_label lrow = fj_label_new(b), lend = fj_label_new(b);
    fj_emit(b, FJ_TEST, fj_r64(rows), fj_r64(rows));
    fj_emit(b, FJ_JLE, fj_lbl(lend));
    fj_label_bind(b, lrow);
    fj_emit(b, FJ_MOV, fj_r64(p), fj_r64(src));
    fj_emit(b, FJ_MOV, fj_r64(c), fj_r64(cols));
    kg_row_reduce(b, op, p, c, acc, x, t, mask, tmp, op == FJ_REDUCE_L2);
    kg_hreduce(b, op, acc[0], t, idx);
    if (op == FJ_REDUCE_MEAN) fj_emit(b, FJ_VDIVPS, fj_xmm(acc[0]), fj_xmm(acc[0]), fj_xmm(scale));
    if (op == FJ_REDUCE_L2) fj_emit(b, FJ_VSQRTPS, fj_xmm(acc[0]), fj_xmm(acc[0]));
    fj_emit(b, FJ_VMOVSS, fj_mem(32, dst, 0), fj_xmm(acc[0]));
    fj_emit(b, FJ_ADD, fj_r64(src), fj_r64(ld));
    fj_emit(b, FJ_ADD, fj_r64(dst), fj_imm(4));
    fj_emit(b, FJ_SUB, fj_r64(rows), fj_imm(1));
    fj_emit(b, FJ_JNE, fj_lbl(lrow));
    fj_label_bind(b, lend);
    fj_return(b, fj_none());
}
