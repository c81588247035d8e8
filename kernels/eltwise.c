/* eltwise.c: element-wise kernels (relu, leaky relu) for AVX-512 and AVX2.
 *
 * Main loop: 4 vectors per iteration, then single vectors, then one masked
 * tail (AVX-512 opmask from bzhi; AVX2 vmaskmovps with a mask loaded from a
 * sliding window over a constant table). Masked loads do not fault on
 * masked-off lanes, so the tail never reads past src + n. */
#include "kernels/eltwise.h"

const char *kg_elt_name(kg_elt v) {
    switch (v) {
    case KG_ELT_RELU: return "relu";
    case KG_ELT_LEAKY_RELU: return "leaky_relu";
    default: return "?";
    }
}

typedef struct elt_ctx {
    fj_builder *b;
    kg_elt v;
    fj_reg zero, alpha;
} elt_ctx;

/* x := op(x), using t as scratch. */
static void op_vec(elt_ctx *c, fj_reg x, fj_reg t, fj_reg k) {
    fj_builder *b = c->b;
    if (c->v == KG_ELT_RELU) {
        /* max(0, x): vmaxps returns its second source when either is NaN,
         * so NaN inputs come out as NaN. */
        fj_emit(b, FJ_VMAXPS, fj_vec(b, x), fj_vec(b, c->zero), fj_vec(b, x));
        return;
    }
    fj_emit(b, FJ_VMULPS, fj_vec(b, t), fj_vec(b, x), fj_vec(b, c->alpha));
    if (fj_builder_isa(b) == FJ_ISA_AVX512) {
        /* k = x > 0 (ordered: NaN gives alpha*NaN = NaN) */
        fj_emit(b, FJ_VCMPPS, fj_k(k), fj_vec(b, x), fj_vec(b, c->zero), fj_imm(0x1e));
        fj_emit(b, FJ_VBLENDMPS, fj_masked(fj_vec(b, x), k, 0), fj_vec(b, t), fj_vec(b, x));
    } else {
        fj_reg mk = fj_vreg(b);
        fj_emit(b, FJ_VCMPPS, fj_vec(b, mk), fj_vec(b, x), fj_vec(b, c->zero), fj_imm(0x1e));
        fj_emit(b, FJ_VBLENDVPS, fj_vec(b, x), fj_vec(b, t), fj_vec(b, x), fj_vec(b, mk));
        fj_release(b, mk);
    }
}

void kg_eltwise(fj_builder *b, kg_elt v) {
    const int avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    const int lanes = fj_builder_vbits(b) / 32, vbytes = lanes * 4, U = 4;
    fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1), n = fj_arg(b, 2), prm = fj_arg(b, 3);
    elt_ctx c = {b, v, fj_vreg(b), {0}};
    fj_reg x[4], t[4], k = {0};
    for (int i = 0; i < U; i++) x[i] = fj_vreg(b);
    for (int i = 0; i < U; i++) t[i] = v == KG_ELT_RELU ? x[i] : fj_vreg(b);
    if (avx512) k = fj_kreg(b);

    fj_emit(b, FJ_VXORPS, fj_xmm(c.zero), fj_xmm(c.zero), fj_xmm(c.zero));
    if (v != KG_ELT_RELU) {
        c.alpha = fj_vreg(b);
        fj_emit(b, FJ_VBROADCASTSS, fj_vec(b, c.alpha), fj_mem(32, prm, 0));
    }
    fj_release(b, prm);

    fj_label l_unroll = fj_label_new(b), l_single = fj_label_new(b), l_one = fj_label_new(b),
             l_tail = fj_label_new(b), l_done = fj_label_new(b);

    /* Unrolled: U vectors per iteration. */
    fj_label_bind(b, l_unroll);
    fj_emit(b, FJ_CMP, fj_r64(n), fj_imm(U * lanes));
    fj_emit(b, FJ_JB, fj_lbl(l_single));
    for (int i = 0; i < U; i++) fj_emit(b, FJ_VMOVUPS, fj_vec(b, x[i]), fj_mem(0, src, i * vbytes));
    for (int i = 0; i < U; i++) op_vec(&c, x[i], t[i], k);
    for (int i = 0; i < U; i++) fj_emit(b, FJ_VMOVUPS, fj_mem(0, dst, i * vbytes), fj_vec(b, x[i]));
    fj_emit(b, FJ_ADD, fj_r64(src), fj_imm(U * vbytes));
    fj_emit(b, FJ_ADD, fj_r64(dst), fj_imm(U * vbytes));
    fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(U * lanes));
    fj_emit(b, FJ_JMP, fj_lbl(l_unroll));

    /* Whole vectors. */
    fj_label_bind(b, l_single);
    fj_emit(b, FJ_CMP, fj_r64(n), fj_imm(lanes));
    fj_emit(b, FJ_JB, fj_lbl(l_tail));
    fj_label_bind(b, l_one);
    fj_emit(b, FJ_VMOVUPS, fj_vec(b, x[0]), fj_mem(0, src, 0));
    op_vec(&c, x[0], t[0], k);
    fj_emit(b, FJ_VMOVUPS, fj_mem(0, dst, 0), fj_vec(b, x[0]));
    fj_emit(b, FJ_ADD, fj_r64(src), fj_imm(vbytes));
    fj_emit(b, FJ_ADD, fj_r64(dst), fj_imm(vbytes));
    fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(lanes));
    fj_emit(b, FJ_CMP, fj_r64(n), fj_imm(lanes));
    fj_emit(b, FJ_JAE, fj_lbl(l_one));

    /* Tail: 0 < n < lanes elements under a mask. */
    fj_label_bind(b, l_tail);
    fj_emit(b, FJ_TEST, fj_r64(n), fj_r64(n));
    fj_emit(b, FJ_JE, fj_lbl(l_done));
    fj_reg tmp = fj_gpr(b);
    if (avx512) {
        fj_reg km = fj_kreg(b);
        fj_emit(b, FJ_MOV, fj_r32(tmp), fj_imm(-1));
        fj_emit(b, FJ_BZHI, fj_r32(tmp), fj_r32(tmp), fj_r32(n));
        fj_emit(b, FJ_KMOVW, fj_k(km), fj_r32(tmp));
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_vec(b, x[0]), km, 1), fj_mem(0, src, 0));
        op_vec(&c, x[0], t[0], k);
        fj_emit(b, FJ_VMOVUPS, fj_masked(fj_mem(0, dst, 0), km, 0), fj_vec(b, x[0]));
    } else {
        /* 8 all-ones lanes then 8 zero lanes: the window starting at
         * table + 32 - 4n has exactly n leading all-ones lanes. */
        static const int32_t window[16] = {-1, -1, -1, -1, -1, -1, -1, -1};
        fj_opnd tbl = fj_const_data(b, window, sizeof window, 32, 0);
        fj_reg m = fj_vreg(b);
        tbl.val += 32;
        fj_emit(b, FJ_LEA, fj_r64(tmp), tbl);
        fj_emit(b, FJ_SHL, fj_r64(n), fj_imm(2));
        fj_emit(b, FJ_SUB, fj_r64(tmp), fj_r64(n));
        fj_emit(b, FJ_VMOVUPS, fj_vec(b, m), fj_mem(0, tmp, 0));
        fj_emit(b, FJ_VMASKMOVPS, fj_vec(b, x[0]), fj_vec(b, m), fj_mem(0, src, 0));
        op_vec(&c, x[0], t[0], k);
        fj_emit(b, FJ_VMASKMOVPS, fj_mem(0, dst, 0), fj_vec(b, m), fj_vec(b, x[0]));
    }
    fj_label_bind(b, l_done);
    fj_return(b, fj_none());
}
