/* softmax_gen.c: row-wise softmax and log_softmax, AVX-512 and AVX2.
 *
 * Per row, three passes in a fixed order (results independent of threads):
 *   1. m = max of the row (reduce.c's row reduction; NaN skipped there, but
 *      a NaN still reaches the sum below and makes the row NaN),
 *   2. s = sum of e^(x - m) (x - m <= 0: no overflow; the largest term is 1
 *      so s >= 1), softmax also stores e^(x - m) into dst,
 *   3. softmax: dst *= 1/s; log_softmax: dst = x - (m + log s).
 * exp and log are the eltwise emitter's (same code, same accuracy). Pass 3
 * reads what pass 2 wrote (softmax) or src (log_softmax), so src == dst
 * works. */
#include "kernels/gen/softmax_gen.h"

#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_gen.h"
#include "kernels/gen/reduce_gen.h"

#define V(r) fj_vec(b, (r))

void kg_softmax(fj_builder *b, int log) {
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    const int L = fj_builder_vbits(b) / 32, vb = 4 * L;
    fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1), rows = fj_arg(b, 2), shp = fj_arg(b, 3);
    fj_reg cols = fj_gpr(b), lds = fj_gpr(b), ldd = fj_gpr(b), p = fj_gpr(b), q = fj_gpr(b),
           c = fj_gpr(b), tmp = fj_gpr(b);
    fj_reg acc[4], x = fj_vreg(b), y = fj_vreg(b), t = fj_vreg(b), m = fj_vreg(b);
    for (int i = 0; i < 4; i++) acc[i] = fj_vreg(b);
    fj_reg mask = avx512 ? fj_kreg(b) : fj_vreg(b);
    fj_emit(b, FJ_MOV, fj_r64(cols), fj_mem(64, shp, 0));
    fj_emit(b, FJ_MOV, fj_r64(lds), fj_mem(64, shp, 8));
    fj_emit(b, FJ_MOV, fj_r64(ldd), fj_mem(64, shp, 16));
    fj_emit(b, FJ_SHL, fj_r64(lds), fj_imm(2));
    fj_emit(b, FJ_SHL, fj_r64(ldd), fj_imm(2));
    fj_release(b, shp);
    fj_label lrow = fj_label_new(b), lend = fj_label_new(b);
    fj_emit(b, FJ_TEST, fj_r64(rows), fj_r64(rows));
    fj_emit(b, FJ_JLE, fj_lbl(lend));
    fj_emit(b, FJ_TEST, fj_r64(cols), fj_r64(cols));
    fj_emit(b, FJ_JLE, fj_lbl(lend));
    fj_label_bind(b, lrow);

    /* 1. the row max, in every lane of m */
    fj_emit(b, FJ_MOV, fj_r64(p), fj_r64(src));
    fj_emit(b, FJ_MOV, fj_r64(c), fj_r64(cols));
    kg_row_reduce(b, FJ_REDUCE_MAX, p, c, acc, x, t, mask, tmp, 0);
    kg_hreduce(b, FJ_REDUCE_MAX, acc[0], t, y);
    fj_emit(b, FJ_VMOVAPS, V(m), V(acc[0]));

    /* 2. s = sum e^(x - m): two vectors per iteration into acc[0], acc[1].
     * exp's constants go into the registers left: no loads in the loop,
     * and register-only instructions replay on the cheapest path. On
     * AVX-512 the two chains of an iteration are interleaved (two scratch
     * sets) and one recording serves both, the last vector and the tail. */
    const int lanes = avx512 ? 2 : 1;
    /* alpha 1 (exp has none): the answer kept for it, not a dry run of
     * the emitter each time */
    const int spare =
        kb_free_vregs(b) - lanes * kg_elt_vregs(fj_builder_isa(b), FJ_ELT_EXP, 1.0f);
    const kg_elt_cfg ecfg = {.const_regs = spare > 0 ? spare : 0, .lanes = lanes};
    kg_elt_state *e = kg_elt_prepare_cfg(b, FJ_ELT_EXP, 0, 0, &ecfg);
    if (!e) return;
    fj_emit(b, FJ_VXORPS, fj_xmm(acc[0]), fj_xmm(acc[0]), fj_xmm(acc[0]));
    fj_emit(b, FJ_VXORPS, fj_xmm(acc[1]), fj_xmm(acc[1]), fj_xmm(acc[1]));
    fj_emit(b, FJ_MOV, fj_r64(p), fj_r64(src));
    fj_emit(b, FJ_MOV, fj_r64(q), fj_r64(dst));
    fj_emit(b, FJ_MOV, fj_r64(c), fj_r64(cols));
    fj_label l2 = fj_label_new(b), l2rest = fj_label_new(b), l2tail = fj_label_new(b),
             l2done = fj_label_new(b);
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(2 * L));
    fj_emit(b, FJ_JB, fj_lbl(l2rest));
    fj_label_bind(b, l2);
    fj_emit(b, FJ_VMOVUPS, V(x), fj_mem(0, p, 0));
    fj_emit(b, FJ_VMOVUPS, V(y), fj_mem(0, p, vb));
    fj_emit(b, FJ_VSUBPS, V(x), V(x), V(m));
    fj_emit(b, FJ_VSUBPS, V(y), V(y), V(m));
    const fj_reg xy[2] = {x, y};
    kg_elt_apply_n(e, xy, 2);
    if (!log) {
        fj_emit(b, FJ_VMOVUPS, fj_mem(0, q, 0), V(x));
        fj_emit(b, FJ_VMOVUPS, fj_mem(0, q, vb), V(y));
    }
    fj_emit(b, FJ_VADDPS, V(acc[0]), V(acc[0]), V(x));
    fj_emit(b, FJ_VADDPS, V(acc[1]), V(acc[1]), V(y));
    fj_emit(b, FJ_ADD, fj_r64(p), fj_imm(2 * vb));
    fj_emit(b, FJ_ADD, fj_r64(q), fj_imm(2 * vb));
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(2 * L));
    fj_emit(b, FJ_JAE, fj_lbl(l2));
    fj_label_bind(b, l2rest);
    fj_emit(b, FJ_ADD, fj_r64(c), fj_imm(2 * L));
    fj_emit(b, FJ_CMP, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_JB, fj_lbl(l2tail));
    fj_emit(b, FJ_VMOVUPS, V(x), fj_mem(0, p, 0));
    fj_emit(b, FJ_VSUBPS, V(x), V(x), V(m));
    kg_elt_apply(e, x);
    if (!log) fj_emit(b, FJ_VMOVUPS, fj_mem(0, q, 0), V(x));
    fj_emit(b, FJ_VADDPS, V(acc[0]), V(acc[0]), V(x));
    fj_emit(b, FJ_ADD, fj_r64(p), fj_imm(vb));
    fj_emit(b, FJ_ADD, fj_r64(q), fj_imm(vb));
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(L));
    fj_label_bind(b, l2tail);
    fj_emit(b, FJ_TEST, fj_r64(c), fj_r64(c));
    fj_emit(b, FJ_JE, fj_lbl(l2done));
    kg_tail_mask(b, c, mask, tmp);
    kg_tail_load(b, x, p, mask, 0.0f, t);
    fj_emit(b, FJ_VSUBPS, V(x), V(x), V(m));
    kg_elt_apply(e, x);
    /* masked-off lanes computed e^-m: zero them before they are summed */
    if (avx512) fj_emit(b, FJ_VMOVAPS, fj_masked(V(x), mask, 1), V(x));
    else fj_emit(b, FJ_VANDPS, V(x), V(x), V(mask));
    if (!log) kg_tail_store(b, q, x, mask);
    fj_emit(b, FJ_VADDPS, V(acc[1]), V(acc[1]), V(x));
    fj_label_bind(b, l2done);
    kg_elt_finish(e);
    fj_emit(b, FJ_VADDPS, V(acc[0]), V(acc[0]), V(acc[1]));
    kg_hreduce(b, FJ_REDUCE_SUM, acc[0], t, y);

    /* 3. scale (softmax) or shift (log_softmax) */
    if (log) {
        kg_elt_state *l = kg_elt_prepare(b, FJ_ELT_LOG, 0, 0);
        if (!l) return;
        kg_elt_apply(l, acc[0]);
        kg_elt_finish(l);
        fj_emit(b, FJ_VADDPS, V(acc[0]), V(acc[0]), V(m)); /* m + log s */
        fj_emit(b, FJ_MOV, fj_r64(p), fj_r64(src));
    } else {
        fj_emit(b, FJ_VBROADCASTSS, V(t), fj_const_f32(b, 1.0f));
        fj_emit(b, FJ_VDIVPS, V(acc[0]), V(t), V(acc[0]));
        fj_emit(b, FJ_MOV, fj_r64(p), fj_r64(dst));
    }
    fj_emit(b, FJ_MOV, fj_r64(q), fj_r64(dst));
    fj_emit(b, FJ_MOV, fj_r64(c), fj_r64(cols));
    fj_label l3 = fj_label_new(b), l3tail = fj_label_new(b), l3done = fj_label_new(b);
    const fj_op f = log ? FJ_VSUBPS : FJ_VMULPS;
    fj_emit(b, FJ_CMP, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_JB, fj_lbl(l3tail));
    fj_label_bind(b, l3);
    fj_emit(b, FJ_VMOVUPS, V(x), fj_mem(0, p, 0));
    fj_emit(b, f, V(x), V(x), V(acc[0]));
    fj_emit(b, FJ_VMOVUPS, fj_mem(0, q, 0), V(x));
    fj_emit(b, FJ_ADD, fj_r64(p), fj_imm(vb));
    fj_emit(b, FJ_ADD, fj_r64(q), fj_imm(vb));
    fj_emit(b, FJ_SUB, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_CMP, fj_r64(c), fj_imm(L));
    fj_emit(b, FJ_JAE, fj_lbl(l3));
    fj_label_bind(b, l3tail);
    fj_emit(b, FJ_TEST, fj_r64(c), fj_r64(c));
    fj_emit(b, FJ_JE, fj_lbl(l3done));
    kg_tail_mask(b, c, mask, tmp);
    kg_tail_load(b, x, p, mask, 0.0f, t);
    fj_emit(b, f, V(x), V(x), V(acc[0]));
    kg_tail_store(b, q, x, mask);
    fj_label_bind(b, l3done);

    fj_emit(b, FJ_ADD, fj_r64(src), fj_r64(lds));
    fj_emit(b, FJ_ADD, fj_r64(dst), fj_r64(ldd));
    fj_emit(b, FJ_SUB, fj_r64(rows), fj_imm(1));
    fj_emit(b, FJ_JNE, fj_lbl(lrow));
    fj_label_bind(b, lend);
    fj_return(b, fj_none());
}
