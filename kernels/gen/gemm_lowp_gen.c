/* gemm_lowp_gen.c: int8 and bf16 GEMM kernels: a loop over row tiles around an mr x nv-vector register tile.
 *
 * One call handles one column panel of C (nv vectors) against ntiles
 * packed row tiles of A:
 *
 *   for each row tile:
 *       acc[mr][nv] = 0
 *       for each k group g (4 int8 or 2 bf16 of consecutive k):
 *           b[v] = B panel group g, vector v
 *           for each row i: x = broadcast dword A(i, group g)
 *               acc[i][v] += dot(x, b[v])
 *       store (see gemm_lowp_gen.h)
 *
 * dot is one instruction with AVX512_VNNI / AVX-VNNI (vpdpbusd) or
 * AVX512_BF16 (vdpbf16ps). Without them: int8 takes vpmaddubsw (u8 x s8
 * pairs summed into words, saturating to int16) and vpmaddwd against
 * words of 1 (word pairs into dwords), then vpaddd; bf16 splits each dword
 * into its even element (shifted left 16: an f32) and its odd one (the
 * high half masked), then two FMAs. Row tails are a run-time row count,
 * column tails store masks, as in the f32 kernels. */
#include "kernels/gen/gemm_lowp_gen.h"

#include <stddef.h>
#include <stdio.h>

#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_gen.h"

#define OFF(f) ((int32_t)offsetof(kg_lowp_args, f))

void kg_lowp_name(const kg_lowp_cfg *c, char *buf, size_t n) {
    int lanes = c->isa == FJ_ISA_AVX512 ? 16 : 8;
    if (c->gemv) {
        snprintf(buf, n, "fj_gemm_%s_gemv_%dr_%s_%s%s",
                 c->dt == KG_LP_F32 ? "f32" : c->dt == KG_LP_F64 ? "f64" : c->dt == KG_LP_BF16 ? "bf16bf16f32" : c->gemv_s8 ? "s8s8s32" : c->gemv_swap ? "u8s8s32_bt" : "u8s8s32", c->mr,
                 c->dt == KG_LP_F32 || c->dt == KG_LP_F64 ? "fma" : c->dot ? "dot" : "widen",
                 c->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", c->gemv == 2 ? "_tail" : "");
        return;
    }
    static const char *outs[] = {"f32", "q8", "bf16"};
    snprintf(buf, n, "fj_gemm_%s_%dx%d_%s_%s%s%s%s%s%s%s%s%s", c->dt == KG_LP_BF16 ? "bf16bf16f32" : "u8s8s32",
             c->mr, c->nv * lanes, c->dot ? "dot" : "widen",
             c->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", c->add ? (c->a_rows ? (c->a_half ? "_rah_add" : "_ra_add") : "_add") : c->a_rows ? (c->a_half ? "_rah" : "_ra") : "",
             c->b_rows ? "_rb" : "", c->scale ? "_alpha" : "",
             c->post ? "_to_" : "", c->post ? outs[c->out % 3] : "",
             c->post && c->scale_pc ? "_pcs" : "", c->post && c->has_bias ? "_bias" : "",
             c->post && c->act ? "_act" : "");
}

/* Vector registers the k loop needs (the epilogue reuses its B, broadcast
 * and temporary registers). */
static int loop_regs(const kg_lowp_cfg *c) {
    int n = c->mr * c->nv + c->nv + 1;
    if (c->b_rows) n += 2;                              /* the two interleave indexes */
    if (!c->dot && c->dt == KG_LP_U8S8) n += 2;         /* product temporary, words of 1 */
    if (!c->dot && c->dt == KG_LP_BF16) n += c->nv + 2; /* odd halves of B and A, high mask */
    return n;
}

fj_status kg_lowp_check(const kg_lowp_cfg *c) {
    if (c->isa != FJ_ISA_AVX512 && c->isa != FJ_ISA_AVX2)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: isa %d", c->isa);
    const int fp = c->dt == KG_LP_F32 || c->dt == KG_LP_F64;
    if (c->dt != KG_LP_U8S8 && c->dt != KG_LP_BF16 && (!fp || !c->gemv || c->dot))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: type %d%s", c->dt,
                       fp ? " (f32, f64: matrix x vector kernels without dot)" : "");
    if (c->scale && (c->dt != KG_LP_BF16 || c->post || c->gemv))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: alpha scales only bf16's plain store");
    if (c->gemv_swap && (!c->gemv || c->gemv_s8 || c->dt != KG_LP_U8S8))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemv kernel: swapped sides need int8 with u8 A");
    if (c->gemv && (c->gemv > 2 || (c->gemv_s8 && c->dt != KG_LP_U8S8) || c->mr < 1 || c->mr > 8 || c->nv != 1 || c->post || c->add ||
                    c->a_rows || (c->dt == KG_LP_BF16 && c->dot && c->isa != FJ_ISA_AVX512)))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemv kernel: 1-8 rows, one vector, plain store");
    if (c->gemv) return FJ_OK;  /* at most mr + 7 <= 15 vector registers */
    if (c->mr < 1 || c->mr > 16 || c->nv < 1 || c->nv > 4)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: tile %dx%d vectors", c->mr, c->nv);
    int nvec = c->isa == FJ_ISA_AVX512 ? 32 : 16;
    /* The epilogue needs three spare registers (row term, C, AVX2 mask):
     * the k loop's B and broadcast ones, and with one B vector one more. */
    if (loop_regs(c) + (c->nv < 2) > nvec)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: a %dx%d-vector tile needs %d vector "
                       "registers, the ISA has %d", c->mr, c->nv, loop_regs(c), nvec);
    /* AVX2 has no bf16 dot product (vdpbf16ps ymm needs AVX512_BF16 + VL). */
    if (c->post && (c->add || c->out < KG_LP_OUT_F32 || c->out > KG_LP_OUT_BF16 ||
                    c->act < 0 || c->act >= FJ_ELT__COUNT ||
                    (c->dt == KG_LP_BF16 && c->out == KG_LP_OUT_Q8)))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: epilogue out %d act %d", c->out,
                       c->act);
    if (c->post && c->act) {
        /* accumulators + the epilogue's 3 + the activation's own */
        int need = c->mr * c->nv + 3 + kg_elt_vregs((fj_isa)c->isa, (fj_eltwise_op)c->act,
                                                    c->act_alpha);
        if (need > nvec || kg_elt_kregs((fj_isa)c->isa, (fj_eltwise_op)c->act, c->act_alpha) +
                               c->nv > 7)
            return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: %dx%d tile with activation %d "
                           "needs %d vector registers", c->mr, c->nv, c->act, need);
    }
    if (c->b_rows && (c->dt != KG_LP_BF16 || !c->dot || c->isa != FJ_ISA_AVX512 || c->nv % 2 ||
                      c->post || c->gemv))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: in-place B needs bf16 dot products, "
                       "an even vector count, no post");
    if (c->a_rows && (c->mr > 8 || c->post))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: in-place A needs mr <= 8, no post");
    if (c->a_half && (!c->a_rows || c->dt != KG_LP_BF16 || c->b_rows))
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: a half k group needs bf16 A in place");
    if (c->dt == KG_LP_BF16 && c->dot && c->isa != FJ_ISA_AVX512)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: bf16 dot product needs AVX-512");
    return FJ_OK;
}

typedef struct gen {
    fj_builder *b;
    const kg_lowp_cfg *c;
    int avx512, vb;
    fj_reg acc[16][4], bv[4], bo[4], x, xo, t, ones, hi;
    fj_reg br, ldb, idx[2];  /* b_rows: B's row k, its row stride, the interleave indexes */
} gen;

static fj_opnd V(const gen *g, fj_reg r) { return fj_vec(g->b, r); }

/* One k group of the tile: B loads, broadcasts, dot products (the group
 * ad bytes into A's rows or tile, bd bytes into the B panel). half (a
 * GPR, or id 0): A in place, each row's one element read alone into half
 * and broadcast as a dword whose other word is zero. */
static void k_group(gen *g, fj_reg ap, fj_reg bp, fj_reg a4, fj_reg lda, fj_reg lda3, int32_t ad,
                    int32_t bd, fj_reg half) {
    fj_builder *b = g->b;
    const kg_lowp_cfg *c = g->c;
    int bf16 = c->dt == KG_LP_BF16;
    for (int v = 0; c->b_rows && v < c->nv; v++) {
        /* words of rows k (bv) and k+1 (memory) for 16 columns, paired; kept in the panel */
        int32_t o = v / 2 * 64;
        fj_emit(b, FJ_VMOVDQU32, V(g, g->bv[v]), fj_mem(512, g->br, o));
        fj_emit(b, FJ_VPERMT2W, V(g, g->bv[v]), V(g, g->idx[v & 1]), fj_memx(512, g->br, g->ldb, 1, o));
        fj_emit(b, FJ_VMOVDQU32, fj_mem(512, bp, bd + v * 64), V(g, g->bv[v]));
    }
    if (c->b_rows) fj_emit(b, FJ_LEA, fj_r64(g->br), fj_memx(64, g->br, g->ldb, 2, 0));
    for (int v = 0; !c->b_rows && v < c->nv; v++) {
        fj_emit(b, g->avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, V(g, g->bv[v]),
                fj_mem((uint16_t)g->vb, bp, bd + v * g->vb / 8));
        if (bf16 && !c->dot) {
            /* odd element: the high half; even: shifted into the high half */
            fj_emit(b, FJ_VANDPS, V(g, g->bo[v]), V(g, g->bv[v]), V(g, g->hi));
            fj_emit(b, FJ_VPSLLD, V(g, g->bv[v]), V(g, g->bv[v]), fj_imm(16));
        }
    }
    for (int i = 0; i < c->mr; i++) {
        const uint16_t bits = half.id ? 16 : 32;
        fj_opnd am = fj_mem(bits, ap, ad + i * 4);
        if (c->a_rows) {
            /* rows 0-3 from a, 4-7 from a + 4*lda: [base + {0, lda, 2*lda, lda3}] */
            fj_reg base = i < 4 ? ap : a4;
            int r = i & 3;
            am = r == 0 ? fj_mem(bits, base, ad) : r == 3 ? fj_memx(bits, base, lda3, 1, ad)
                                                         : fj_memx(bits, base, lda, (uint8_t)r, ad);
        }
        if (!half.id) {
            fj_emit(b, FJ_VPBROADCASTD, V(g, g->x), am);
        } else {
            fj_emit(b, FJ_MOVZX, fj_r32(half), am);
            if (g->avx512) {
                fj_emit(b, FJ_VPBROADCASTD, V(g, g->x), fj_r32(half));
            } else {
                fj_emit(b, FJ_VMOVD, fj_xmm(g->x), fj_r32(half));
                fj_emit(b, FJ_VPBROADCASTD, V(g, g->x), fj_xmm(g->x));
            }
        }
        if (bf16 && !c->dot) {
            fj_emit(b, FJ_VANDPS, V(g, g->xo), V(g, g->x), V(g, g->hi));
            fj_emit(b, FJ_VPSLLD, V(g, g->x), V(g, g->x), fj_imm(16));
        }
        for (int v = 0; v < c->nv; v++) {
            fj_opnd acc = V(g, g->acc[i][v]);
            if (c->dot) {
                fj_emit(b, bf16 ? FJ_VDPBF16PS : FJ_VPDPBUSD, acc, V(g, g->x), V(g, g->bv[v]));
            } else if (bf16) {
                fj_emit(b, FJ_VFMADD231PS, acc, V(g, g->xo), V(g, g->bo[v]));
                fj_emit(b, FJ_VFMADD231PS, acc, V(g, g->x), V(g, g->bv[v]));
            } else {
                /* u8 (x) times s8 (B) in pairs, saturated to int16; then
                 * the pairs of words summed into dwords. */
                fj_emit(b, FJ_VPMADDUBSW, V(g, g->t), V(g, g->x), V(g, g->bv[v]));
                fj_emit(b, FJ_VPMADDWD, V(g, g->t), V(g, g->t), V(g, g->ones));
                fj_emit(b, FJ_VPADDD, acc, acc, V(g, g->t));
            }
        }
    }
}

/* Stores row i of the tile at cr (column vectors v, masked). */
static void store_row(gen *g, fj_reg p, fj_reg cr, fj_reg ct, fj_reg rt, const fj_reg *km, int i,
                      const fj_reg *tmp, fj_reg alpha, fj_reg beta) {
    fj_builder *b = g->b;
    const kg_lowp_cfg *c = g->c;
    int bf16 = c->dt == KG_LP_BF16;
    /* bf16: tmp[0] holds alpha, tmp[2] (AVX-512) or xo (AVX2) beta */
    fj_reg rb = tmp[0], cv = tmp[1], mk = tmp[2];
    if (!bf16) fj_emit(b, FJ_VPBROADCASTD, V(g, rb), fj_mem(32, rt, i * 4));
    for (int v = 0; v < c->nv; v++) {
        fj_opnd acc = V(g, g->acc[i][v]);
        fj_opnd cm = fj_mem((uint16_t)g->vb, cr, v * g->vb / 8);
        if (!g->avx512)
            fj_emit(b, FJ_VMOVDQU, V(g, mk), fj_mem(256, p, OFF(ymask) + v * 32));
        if (c->add) {
            if (g->avx512) fj_emit(b, FJ_VMOVDQU32, fj_masked(V(g, cv), km[v], 1), cm);
            else fj_emit(b, FJ_VMASKMOVPS, V(g, cv), V(g, mk), cm);
        }
        if (bf16) {
            if (c->scale) fj_emit(b, FJ_VMULPS, acc, acc, V(g, alpha));
            if (c->add) fj_emit(b, FJ_VFMADD231PS, acc, V(g, cv), V(g, beta));
        } else {
            fj_emit(b, FJ_VPADDD, acc, acc, fj_mem((uint16_t)g->vb, ct, v * g->vb / 8));
            fj_emit(b, FJ_VPADDD, acc, acc, V(g, rb));
            if (c->add) fj_emit(b, FJ_VPADDD, acc, acc, V(g, cv));
        }
        if (g->avx512) fj_emit(b, FJ_VMOVDQU32, fj_masked(cm, km[v], 0), acc);
        else fj_emit(b, FJ_VMASKMOVPS, cm, V(g, mk), acc);
    }
}

/* Bytes of one C element the kernel stores. */
static int c_bytes(const kg_lowp_cfg *c) {
    if (!c->post || c->out == KG_LP_OUT_F32 || c->isa != FJ_ISA_AVX512) return 4;
    return c->out == KG_LP_OUT_Q8 ? 1 : 2;
}

/* Memory operand of a float/int32 argument field, as a {1toN} broadcast
 * (AVX-512) or, on AVX2, loaded into tmp first. */
static fj_opnd arg_bcast(gen *g, fj_reg p, int32_t off, fj_reg tmp, int is_int) {
    if (g->avx512) return fj_bcst(fj_mem(32, p, off));
    fj_emit(g->b, is_int ? FJ_VPBROADCASTD : FJ_VBROADCASTSS, V(g, tmp), fj_mem(32, p, off));
    return V(g, tmp);
}

/* The quantized epilogue of row i (see kg_lowp_cfg.post). */
static void store_row_post(gen *g, fj_reg p, fj_reg cr, fj_reg ct, fj_reg rt, fj_reg sp,
                           fj_reg bp, const fj_reg *km, int i, fj_reg t1, fj_reg t2, fj_reg mk,
                           kg_elt_state *act) {
    fj_builder *b = g->b;
    const kg_lowp_cfg *c = g->c;
    int bf16 = c->dt == KG_LP_BF16, vbytes = g->vb / 8, lanes = g->vb / 32;
    int ces = c_bytes(c);
    for (int v = 0; v < c->nv; v++) {
        fj_opnd acc = V(g, g->acc[i][v]);
        if (!bf16) {
            fj_emit(b, FJ_VPADDD, acc, acc, fj_mem((uint16_t)g->vb, ct, v * vbytes));
            if (g->avx512) {
                fj_emit(b, FJ_VPADDD, acc, acc, fj_bcst(fj_mem(32, rt, i * 4)));
            } else {
                fj_emit(b, FJ_VPBROADCASTD, V(g, t1), fj_mem(32, rt, i * 4));
                fj_emit(b, FJ_VPADDD, acc, acc, V(g, t1));
            }
            fj_emit(b, FJ_VCVTDQ2PS, acc, acc);
            if (c->scale_pc) fj_emit(b, FJ_VMULPS, acc, acc, fj_mem((uint16_t)g->vb, sp, v * vbytes));
            else if (g->avx512) fj_emit(b, FJ_VMULPS, acc, acc, fj_bcst(fj_mem(32, sp, 0)));
            else {
                fj_emit(b, FJ_VBROADCASTSS, V(g, t1), fj_mem(32, sp, 0));
                fj_emit(b, FJ_VMULPS, acc, acc, V(g, t1));
            }
        }
        if (c->has_bias) fj_emit(b, FJ_VADDPS, acc, acc, fj_mem((uint16_t)g->vb, bp, v * vbytes));
        if (act) kg_elt_apply(act, g->acc[i][v]);
        if (c->out == KG_LP_OUT_Q8) {
            fj_emit(b, FJ_VMULPS, acc, acc, arg_bcast(g, p, OFF(out_scale), t1, 0));
            /* max/min return the second operand for NaN: NaN becomes lo */
            fj_emit(b, FJ_VMAXPS, acc, acc, arg_bcast(g, p, OFF(lo), t1, 0));
            fj_emit(b, FJ_VMINPS, acc, acc, arg_bcast(g, p, OFF(hi), t1, 0));
            fj_emit(b, FJ_VCVTPS2DQ, acc, acc);
            fj_emit(b, FJ_VPADDD, acc, acc, arg_bcast(g, p, OFF(zp), t1, 1));
        } else if (c->out == KG_LP_OUT_BF16) {
            /* round to nearest even: + 0x7fff + bit 16, keep the high half */
            static const uint32_t one = 1, half = 0x7fff;
            fj_emit(b, FJ_VPSRLD, V(g, t2), acc, fj_imm(16));
            if (g->avx512) {
                fj_emit(b, FJ_VANDPS, V(g, t2), V(g, t2), fj_bcst(fj_const_data(b, &one, 4, 4, 32)));
                fj_emit(b, FJ_VPADDD, acc, acc, fj_bcst(fj_const_data(b, &half, 4, 4, 32)));
            } else {
                fj_emit(b, FJ_VPBROADCASTD, V(g, t1), fj_const_data(b, &one, 4, 4, 32));
                fj_emit(b, FJ_VANDPS, V(g, t2), V(g, t2), V(g, t1));
                fj_emit(b, FJ_VPBROADCASTD, V(g, t1), fj_const_data(b, &half, 4, 4, 32));
                fj_emit(b, FJ_VPADDD, acc, acc, V(g, t1));
            }
            fj_emit(b, FJ_VPADDD, acc, acc, V(g, t2));
            fj_emit(b, FJ_VPSRLD, acc, acc, fj_imm(16));
        }
        int32_t off = v * lanes * ces;
        if (g->avx512) {
            if (ces == 1) fj_emit(b, FJ_VPMOVDB, fj_masked(fj_mem(128, cr, off), km[v], 0), acc);
            else if (ces == 2) fj_emit(b, FJ_VPMOVDW, fj_masked(fj_mem(256, cr, off), km[v], 0), acc);
            else fj_emit(b, FJ_VMOVDQU32, fj_masked(fj_mem(512, cr, off), km[v], 0), acc);
        } else {
            fj_emit(b, FJ_VMOVDQU, V(g, mk), fj_mem(256, p, OFF(ymask) + v * 32));
            fj_emit(b, FJ_VMASKMOVPS, fj_mem(256, cr, off), V(g, mk), acc);
        }
    }
}

/* The matrix x vector kernel (see kg_lowp_args): per chunk, one load of
 * b and per row one load of A and one dot product into the row's own
 * accumulator; the lanes are summed by the caller. */
/* The k loop's constants where there is no dot-product instruction: the
 * 16-bit ones vpmaddwd sums pairs with (int8), the high-half mask that
 * widens bf16 to f32. */
static void loop_consts(gen *g, const kg_lowp_cfg *c) {
    fj_builder *b = g->b;
    int bf16 = c->dt == KG_LP_BF16;
    if (!c->dot && c->dt == KG_LP_U8S8) {
        static const uint32_t one16 = 0x00010001u;
        fj_emit(b, FJ_VPBROADCASTD, V(g, g->ones), fj_const_data(b, &one16, 4, 4, 32));
    }
    if (!c->dot && bf16) {
        static const uint32_t himask = 0xffff0000u;
        fj_emit(b, FJ_VPBROADCASTD, V(g, g->hi), fj_const_data(b, &himask, 4, 4, 32));
    }
}

/* The index vectors of the AVX-512 row-sum tree (vpermt2ps: bit 4 picks
 * the second table): level l's pair (x, y) becomes lo(x, y) + hi(x, y),
 * which halves the lanes each row holds: 16 -> 8 (two rows a vector),
 * 8 -> 4 (four rows), 4 -> 2 (eight rows), 2 -> 1 (lanes 0-7: the rows). */
static void gemv_tree_idx(gen *g, fj_reg idx[8]) {
    static const uint32_t tab[8][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
        {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
        {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
        {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
        {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31},
        {0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0},
        {1, 3, 5, 7, 9, 11, 13, 15, 1, 1, 1, 1, 1, 1, 1, 1},
    };
    for (int i = 0; i < 8; i++) {
        idx[i] = fj_vreg(g->b);
        fj_emit(g->b, FJ_VMOVDQU32, fj_zmm(idx[i]), fj_const_data(g->b, tab[i], 64, 64, 512));
    }
}

/* The rows' vectors summed across lanes in registers (mod 2^32, or in
 * f32), row i's sum left in dword i of row[0]; rows past mr are the zero
 * register, whose sums stay zero (and which stays zero). t: a scratch.
 * AVX-512: the vpermt2ps tree. AVX2: horizontal adds pair rows within
 * 128-bit lanes twice (four rows' partial sums a lane), then the two
 * lanes of rows 0-3 and 4-7 are crossed and added. */
static void gemv_tree(gen *g, fj_reg row[8], const fj_reg idx[8], fj_reg t) {
    fj_builder *b = g->b;
    int fp = g->c->dt != KG_LP_U8S8;
    fj_op add = fp ? FJ_VADDPS : FJ_VPADDD;
    if (!g->avx512) {
        fj_op hadd = fp ? FJ_VHADDPS : FJ_VPHADDD;
        for (int i = 0; i < 8; i += 2) fj_emit(b, hadd, fj_ymm(row[i]), fj_ymm(row[i]), fj_ymm(row[i + 1]));
        for (int i = 0; i < 8; i += 4) fj_emit(b, hadd, fj_ymm(row[i]), fj_ymm(row[i]), fj_ymm(row[i + 2]));
        fj_emit(b, FJ_VPERM2F128, fj_ymm(t), fj_ymm(row[0]), fj_ymm(row[4]), fj_imm(0x20));
        fj_emit(b, FJ_VPERM2F128, fj_ymm(row[0]), fj_ymm(row[0]), fj_ymm(row[4]), fj_imm(0x31));
        fj_emit(b, add, fj_ymm(row[0]), fj_ymm(row[0]), fj_ymm(t));
        return;
    }
    for (int lv = 0; lv < 4; lv++) {
        int step = 1 << lv;  /* the last level pairs row 0's vector with itself */
        for (int i = 0; i < 8; i += 2 * step) {
            fj_reg x = row[i], y = lv < 3 ? row[i + step] : row[i];
            fj_emit(b, FJ_VMOVAPS, fj_zmm(t), fj_zmm(x));
            fj_emit(b, FJ_VPERMT2PS, fj_zmm(t), fj_zmm(idx[2 * lv]), fj_zmm(y));
            fj_emit(b, FJ_VPERMT2PS, fj_zmm(x), fj_zmm(idx[2 * lv + 1]), fj_zmm(y));
            fj_emit(b, add, fj_zmm(x), fj_zmm(x), fj_zmm(t));
        }
    }
}

/* The f64 tree: the same pairing in three levels (8 lanes, then 4 and 2
 * a row; vpermt2pd, bit 3 picks the second table), row i's sum in qword i
 * of row[0]. AVX2: horizontal adds pair rows 0-1 and 2-3 within lanes,
 * the lanes are crossed and added: rows 0-3 in row[0], 4-7 in row[4]. */
static void gemv_tree_idx64(gen *g, fj_reg idx[6]) {
    static const uint64_t tab[6][8] = {
        {0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15},
        {0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15},
        {0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15},
    };
    for (int i = 0; i < 6; i++) {
        idx[i] = fj_vreg(g->b);
        fj_emit(g->b, FJ_VMOVDQU32, fj_zmm(idx[i]), fj_const_data(g->b, tab[i], 64, 64, 512));
    }
}

static void gemv_tree64(gen *g, fj_reg row[8], const fj_reg idx[6], fj_reg t) {
    fj_builder *b = g->b;
    if (!g->avx512) {
        for (int h = 0; h < 8; h += 4) {
            fj_emit(b, FJ_VHADDPD, fj_ymm(row[h]), fj_ymm(row[h]), fj_ymm(row[h + 1]));
            fj_emit(b, FJ_VHADDPD, fj_ymm(row[h + 2]), fj_ymm(row[h + 2]), fj_ymm(row[h + 3]));
            fj_emit(b, FJ_VPERM2F128, fj_ymm(t), fj_ymm(row[h]), fj_ymm(row[h + 2]), fj_imm(0x20));
            fj_emit(b, FJ_VPERM2F128, fj_ymm(row[h]), fj_ymm(row[h]), fj_ymm(row[h + 2]), fj_imm(0x31));
            fj_emit(b, FJ_VADDPD, fj_ymm(row[h]), fj_ymm(row[h]), fj_ymm(t));
        }
        return;
    }
    for (int lv = 0; lv < 3; lv++) {
        int step = 1 << lv;
        for (int i = 0; i < 8; i += 2 * step) {
            fj_reg x = row[i], y = row[i + step];
            fj_emit(b, FJ_VMOVAPS, fj_zmm(t), fj_zmm(x));
            fj_emit(b, FJ_VPERMT2PD, fj_zmm(t), fj_zmm(idx[2 * lv]), fj_zmm(y));
            fj_emit(b, FJ_VPERMT2PD, fj_zmm(x), fj_zmm(idx[2 * lv + 1]), fj_zmm(y));
            fj_emit(b, FJ_VADDPD, fj_zmm(x), fj_zmm(x), fj_zmm(t));
        }
    }
}

static void gemv(fj_builder *b, const kg_lowp_cfg *c) {
    gen g0 = {0}, *g = &g0;
    g->b = b;
    g->c = c;
    g->avx512 = c->isa == FJ_ISA_AVX512;
    g->vb = g->avx512 ? 512 : 256;
    int vbytes = g->vb / 8, tail = c->gemv == 2;
    fj_reg p = fj_arg(b, 0);
    fj_reg ap = fj_gpr(b), a = fj_gpr(b), a4 = fj_gpr(b), bp = fj_gpr(b), cp = fj_gpr(b);
    fj_reg k = fj_gpr(b), nt = fj_gpr(b), lda = fj_gpr(b), lda3 = fj_gpr(b);
    for (int i = 0; i < c->mr; i++) g->acc[i][0] = fj_vreg(b);
    g->bv[0] = fj_vreg(b);
    g->x = fj_vreg(b);
    int bf16 = c->dt == KG_LP_BF16, f64 = c->dt == KG_LP_F64, fp = c->dt == KG_LP_F32 || f64;
    if (!c->dot && c->dt == KG_LP_U8S8) { g->t = fj_vreg(b); g->ones = fj_vreg(b); }
    if (!c->dot && bf16) { g->bo[0] = fj_vreg(b); g->xo = fj_vreg(b); g->hi = fj_vreg(b); }
    fj_reg km = {0}, ym = {0}, flip = {0};
    if (c->gemv_s8) {
        static const uint32_t f80 = 0x80808080u;
        flip = fj_vreg(b);
        fj_emit(b, FJ_VPBROADCASTD, V(g, flip), fj_const_data(b, &f80, 4, 4, 32));
    }
    if (tail && g->avx512) {
        km = fj_kreg(b);
        fj_emit(b, FJ_KMOVW, fj_k(km), fj_mem(16, p, OFF(kmask)));
    } else if (tail) {
        ym = fj_vreg(b);
        fj_emit(b, FJ_VMOVDQU, V(g, ym), fj_mem(256, p, OFF(ymask)));
    }
    loop_consts(g, c);
    fj_reg idx[8] = {{0}}, row[8], z = {0};
    if (g->avx512 && f64) gemv_tree_idx64(g, idx);
    else if (g->avx512) gemv_tree_idx(g, idx);
    if (c->mr < 8) {
        z = fj_vreg(b);
        fj_emit(b, FJ_VXORPS, V(g, z), V(g, z), V(g, z));
    }
    for (int i = 0; i < 8; i++) row[i] = i < c->mr ? g->acc[i][0] : z;
    fj_emit(b, FJ_MOV, fj_r64(ap), fj_mem(64, p, OFF(a)));
    fj_emit(b, FJ_MOV, fj_r64(cp), fj_mem(64, p, OFF(c)));
    fj_emit(b, FJ_MOV, fj_r64(nt), fj_mem(64, p, OFF(ntiles)));
    fj_emit(b, FJ_MOV, fj_r64(lda), fj_mem(64, p, OFF(lda)));
    fj_emit(b, FJ_LEA, fj_r64(lda3), fj_memx(64, lda, lda, 2, 0));
    fj_label tile = fj_label_new(b), kloop = fj_label_new(b), kdone = fj_label_new(b);
    fj_label_bind(b, tile);
    for (int i = 0; i < c->mr; i++) {
        fj_opnd r = V(g, g->acc[i][0]);
        fj_emit(b, FJ_VXORPS, r, r, r);
    }
    fj_emit(b, FJ_MOV, fj_r64(a), fj_r64(ap));
    fj_emit(b, FJ_LEA, fj_r64(a4), fj_memx(64, ap, lda, 4, 0));
    fj_emit(b, FJ_MOV, fj_r64(bp), fj_mem(64, p, OFF(b)));
    fj_emit(b, FJ_MOV, fj_r64(k), fj_mem(64, p, OFF(kq)));
    fj_emit(b, FJ_TEST, fj_r64(k), fj_r64(k));
    fj_emit(b, FJ_JE, fj_lbl(kdone));
    for (int part = 0; part < 1 + tail; part++) {
        if (!part) fj_label_bind(b, kloop);
        else fj_label_bind(b, kdone);
        fj_emit(b, g->avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, V(g, g->bv[0]), fj_mem((uint16_t)g->vb, bp, 0));
        if (bf16 && !c->dot) {
            /* odd element: the high half; even: shifted into the high half */
            fj_emit(b, FJ_VANDPS, V(g, g->bo[0]), V(g, g->bv[0]), V(g, g->hi));
            fj_emit(b, FJ_VPSLLD, V(g, g->bv[0]), V(g, g->bv[0]), fj_imm(16));
        }
        for (int i = 0; i < c->mr; i++) {
            /* rows 0-3 from a, 4-7 from a + 4*lda: [base + {0, lda, 2*lda, lda3}] */
            fj_reg base = i < 4 ? a : a4;
            int r = i & 3;
            fj_opnd am = r == 0 ? fj_mem((uint16_t)g->vb, base, 0)
                                : r == 3 ? fj_memx((uint16_t)g->vb, base, lda3, 1, 0)
                                         : fj_memx((uint16_t)g->vb, base, lda, (uint8_t)r, 0);
            if (!part) fj_emit(b, g->avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, V(g, g->x), am);
            else if (g->avx512) fj_emit(b, FJ_VMOVDQU32, fj_masked(V(g, g->x), km, 1), am);
            else fj_emit(b, FJ_VMASKMOVPS, V(g, g->x), V(g, ym), am);
            if (flip.id) fj_emit(b, FJ_VXORPS, V(g, g->x), V(g, g->x), V(g, flip)); /* s8 + 128 */
            fj_opnd acc = V(g, g->acc[i][0]);
            /* int8: the u8 side first (the row, or with gemv_swap the vector) */
            fj_opnd us = V(g, c->gemv_swap ? g->bv[0] : g->x), ss = V(g, c->gemv_swap ? g->x : g->bv[0]);
            if (fp) {
                fj_emit(b, f64 ? FJ_VFMADD231PD : FJ_VFMADD231PS, acc, V(g, g->x), V(g, g->bv[0]));
            } else if (c->dot && !bf16) {
                fj_emit(b, FJ_VPDPBUSD, acc, us, ss);
            } else if (c->dot) {
                fj_emit(b, FJ_VDPBF16PS, acc, V(g, g->x), V(g, g->bv[0]));
            } else if (bf16) {
                fj_emit(b, FJ_VANDPS, V(g, g->xo), V(g, g->x), V(g, g->hi));
                fj_emit(b, FJ_VPSLLD, V(g, g->x), V(g, g->x), fj_imm(16));
                fj_emit(b, FJ_VFMADD231PS, acc, V(g, g->xo), V(g, g->bo[0]));
                fj_emit(b, FJ_VFMADD231PS, acc, V(g, g->x), V(g, g->bv[0]));
            } else {
                fj_emit(b, FJ_VPMADDUBSW, V(g, g->t), us, ss);
                fj_emit(b, FJ_VPMADDWD, V(g, g->t), V(g, g->t), V(g, g->ones));
                fj_emit(b, FJ_VPADDD, acc, acc, V(g, g->t));
            }
        }
        if (part) break;
        fj_emit(b, FJ_ADD, fj_r64(a), fj_imm(vbytes));
        fj_emit(b, FJ_ADD, fj_r64(a4), fj_imm(vbytes));
        fj_emit(b, FJ_ADD, fj_r64(bp), fj_imm(vbytes));
        fj_emit(b, FJ_DEC, fj_r64(k));
        fj_emit(b, FJ_JNE, fj_lbl(kloop));
        if (!tail) fj_label_bind(b, kdone);
    }
    /* x is free after the k loop; 8 sums a tile (kernels of at most 4
     * rows: 4, so that blocks of 4 rows leave their sums side by side) */
    const int four = c->mr <= 4;
    if (f64 && g->avx512) {
        gemv_tree64(g, row, idx, g->x);
        if (four) fj_emit(b, FJ_VMOVUPD, fj_mem(256, cp, 0), fj_ymm(row[0]));
        else fj_emit(b, FJ_VMOVUPD, fj_mem(512, cp, 0), fj_zmm(row[0]));
    } else if (f64) {
        gemv_tree64(g, row, idx, g->x);
        fj_emit(b, FJ_VMOVUPD, fj_mem(256, cp, 0), fj_ymm(row[0]));
        if (!four) fj_emit(b, FJ_VMOVUPD, fj_mem(256, cp, 32), fj_ymm(row[4]));
    } else {
        gemv_tree(g, row, idx, g->x);
        if (four) fj_emit(b, FJ_VMOVUPS, fj_mem(128, cp, 0), fj_xmm(row[0]));
        else fj_emit(b, g->avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, fj_mem(256, cp, 0), fj_ymm(row[0]));
    }
    fj_emit(b, FJ_ADD, fj_r64(cp), fj_imm((f64 ? 64 : 32) >> four));
    fj_emit(b, FJ_ADD, fj_r64(ap), fj_mem(64, p, OFF(a_tile)));
    fj_emit(b, FJ_DEC, fj_r64(nt));
    fj_emit(b, FJ_JNE, fj_lbl(tile));
    fj_return(b, fj_none());
}

void kg_lowp(fj_builder *b, const void *ctx) {
    const kg_lowp_cfg *c = ctx;
    if (c->gemv) {
        gemv(b, c);
        return;
    }
    gen g0 = {0}, *g = &g0;
    g->b = b;
    g->c = c;
    g->avx512 = c->isa == FJ_ISA_AVX512;
    g->vb = g->avx512 ? 512 : 256;
    int bf16 = c->dt == KG_LP_BF16;
    int lanes = g->vb / 32;

    fj_reg p = fj_arg(b, 0);
    fj_reg ap = fj_gpr(b), a = fj_gpr(b), bp = fj_gpr(b), cp = fj_gpr(b);
    fj_reg cr = fj_gpr(b), k = fj_gpr(b), nt = fj_gpr(b), rows = fj_gpr(b);
    fj_reg ct = {0}, rt = {0}, sp = {0}, bip = {0};
    if (!bf16) { ct = fj_gpr(b); rt = fj_gpr(b); }
    fj_reg a4 = {0}, lda = {0}, lda3 = {0};
    if (c->a_rows) {
        a4 = fj_gpr(b);
        lda = fj_gpr(b);
        lda3 = fj_gpr(b);
    }
    if (c->b_rows) {
        g->br = fj_gpr(b);
        g->ldb = fj_gpr(b);
    }
    if (c->post && !bf16) sp = fj_gpr(b);
    if (c->post && c->has_bias) bip = fj_gpr(b);
    for (int i = 0; i < c->mr; i++)
        for (int v = 0; v < c->nv; v++) g->acc[i][v] = fj_vreg(b);
    for (int v = 0; v < c->nv; v++) g->bv[v] = fj_vreg(b);
    g->x = fj_vreg(b);
    if (c->b_rows) {
        /* word i of vector v: word 16*(v&1) + i/2 of row k (i even) or of row k+1 (i odd) */
#define KP(j) j, 32 + (j)
#define KP4(j) KP(j), KP(j + 1), KP(j + 2), KP(j + 3)
        static const uint16_t ix[2][32] = {{KP4(0), KP4(4), KP4(8), KP4(12)},
                                           {KP4(16), KP4(20), KP4(24), KP4(28)}};
#undef KP4
#undef KP
        for (int h = 0; h < 2; h++) {
            g->idx[h] = fj_vreg(b);
            fj_emit(b, FJ_VMOVDQU32, V(g, g->idx[h]), fj_const_data(b, ix[h], 64, 64, 512));
        }
        fj_emit(b, FJ_MOV, fj_r64(g->ldb), fj_mem(64, p, OFF(ldb)));
    }
    if (!c->dot && !bf16) { g->t = fj_vreg(b); g->ones = fj_vreg(b); }
    if (!c->dot && bf16) {
        for (int v = 0; v < c->nv; v++) g->bo[v] = fj_vreg(b);
        g->xo = fj_vreg(b);
        g->hi = fj_vreg(b);
    }
    fj_reg km[4] = {{0}};
    if (g->avx512)
        for (int v = 0; v < c->nv; v++) {
            km[v] = fj_kreg(b);
            fj_emit(b, FJ_KMOVW, fj_k(km[v]), fj_mem(16, p, OFF(kmask) + 4 * v));
        }

    fj_emit(b, FJ_MOV, fj_r64(ap), fj_mem(64, p, OFF(a)));
    fj_emit(b, FJ_MOV, fj_r64(cp), fj_mem(64, p, OFF(c)));
    fj_emit(b, FJ_MOV, fj_r64(nt), fj_mem(64, p, OFF(ntiles)));
    if (!bf16) {
        fj_emit(b, FJ_MOV, fj_r64(ct), fj_mem(64, p, OFF(colterm)));
        fj_emit(b, FJ_MOV, fj_r64(rt), fj_mem(64, p, OFF(rowterm)));
    }
    if (sp.id) fj_emit(b, FJ_MOV, fj_r64(sp), fj_mem(64, p, OFF(scale)));
    if (bip.id) fj_emit(b, FJ_MOV, fj_r64(bip), fj_mem(64, p, OFF(bias)));
    fj_label tile = fj_label_new(b), kloop = fj_label_new(b);
    fj_label_bind(b, tile);
    /* Loop constants, per tile: the quantized epilogue reuses their registers. */
    loop_consts(g, c);
    for (int i = 0; i < c->mr; i++)
        for (int v = 0; v < c->nv; v++) {
            fj_opnd r = V(g, g->acc[i][v]);
            fj_emit(b, FJ_VXORPS, r, r, r);
        }
    fj_emit(b, FJ_MOV, fj_r64(a), fj_r64(ap));
    if (c->a_rows) {
        fj_emit(b, FJ_MOV, fj_r64(lda), fj_mem(64, p, OFF(lda)));
        fj_emit(b, FJ_LEA, fj_r64(lda3), fj_memx(64, lda, lda, 2, 0));
        fj_emit(b, FJ_LEA, fj_r64(a4), fj_memx(64, ap, lda, 4, 0));
    }
    fj_emit(b, FJ_MOV, fj_r64(bp), fj_mem(64, p, OFF(b)));
    if (c->b_rows) fj_emit(b, FJ_MOV, fj_r64(g->br), fj_mem(64, p, OFF(b_src)));
    /* Two k groups an iteration (half the loop overhead), then an odd last one. */
    int32_t astep = c->a_rows ? 4 : c->mr * 4, bstep = c->nv * lanes * 4;
    fj_label kodd = fj_label_new(b), kdone = fj_label_new(b);
    /* a_half: kq - 1 whole groups (odd when kq is even), then the half one */
    fj_emit(b, FJ_MOV, fj_r64(k), fj_mem(64, p, OFF(kq)));
    if (c->a_half) fj_emit(b, FJ_DEC, fj_r64(k));
    fj_emit(b, FJ_SHR, fj_r64(k), fj_imm(1));
    fj_emit(b, FJ_JE, fj_lbl(kodd));
    fj_label_bind(b, kloop);
    for (int u = 0; u < 2; u++) k_group(g, a, bp, a4, lda, lda3, u * astep, u * bstep, (fj_reg){0});
    fj_emit(b, FJ_ADD, fj_r64(a), fj_imm(2 * astep));
    if (c->a_rows) fj_emit(b, FJ_ADD, fj_r64(a4), fj_imm(2 * astep));
    fj_emit(b, FJ_ADD, fj_r64(bp), fj_imm(2 * bstep));
    fj_emit(b, FJ_DEC, fj_r64(k));
    fj_emit(b, FJ_JNE, fj_lbl(kloop));
    fj_label_bind(b, kodd);
    fj_emit(b, FJ_TEST, fj_mem(64, p, OFF(kq)), fj_imm(1));
    fj_emit(b, c->a_half ? FJ_JNE : FJ_JE, fj_lbl(kdone));
    k_group(g, a, bp, a4, lda, lda3, 0, 0, (fj_reg){0});
    if (c->a_half) {
        fj_emit(b, FJ_ADD, fj_r64(a), fj_imm(astep));
        fj_emit(b, FJ_ADD, fj_r64(a4), fj_imm(astep));
        fj_emit(b, FJ_ADD, fj_r64(bp), fj_imm(bstep));
    }
    fj_label_bind(b, kdone);
    if (c->a_half) k_group(g, a, bp, a4, lda, lda3, 0, 0, k);

    /* Rows to store: mr, or last_rows in the last tile. */
    fj_emit(b, FJ_MOV, fj_r64(rows), fj_imm(c->mr));
    fj_emit(b, FJ_CMP, fj_r64(nt), fj_imm(1));
    fj_emit(b, FJ_CMOVE, fj_r64(rows), fj_mem(64, p, OFF(last_rows)));
    if (c->post) {
        /* The k loop's registers are dead here: the epilogue and the
         * activation take them over (released and handed out again). */
        for (int v = 0; v < c->nv; v++) fj_release(b, g->bv[v]);
        fj_release(b, g->x);
        if (g->t.id) fj_release(b, g->t);
        if (g->ones.id) fj_release(b, g->ones);
        if (g->hi.id) {
            for (int v = 0; v < c->nv; v++) fj_release(b, g->bo[v]);
            fj_release(b, g->xo);
            fj_release(b, g->hi);
        }
        fj_reg t1 = fj_vreg(b), t2 = fj_vreg(b), mk = g->avx512 ? (fj_reg){0} : fj_vreg(b);
        kg_elt_state *act = c->act ? kg_elt_prepare(b, (fj_eltwise_op)c->act, c->act_alpha,
                                                    c->act_beta) : NULL;
        fj_emit(b, FJ_MOV, fj_r64(cr), fj_r64(cp));
        fj_label pend = fj_label_new(b);
        for (int i = 0; i < c->mr; i++) {
            if (i > 0) {
                fj_emit(b, FJ_CMP, fj_r64(rows), fj_imm(i));
                fj_emit(b, FJ_JLE, fj_lbl(pend));
            }
            store_row_post(g, p, cr, ct, rt, sp, bip, km, i, t1, t2, mk, act);
            if (i + 1 < c->mr) fj_emit(b, FJ_ADD, fj_r64(cr), fj_mem(64, p, OFF(ldc)));
        }
        fj_label_bind(b, pend);
        if (act) kg_elt_finish(act);
        fj_emit(b, FJ_ADD, fj_r64(ap), fj_mem(64, p, OFF(a_tile)));
        fj_emit(b, FJ_ADD, fj_r64(cp), fj_mem(64, p, OFF(c_tile)));
        if (!bf16) fj_emit(b, FJ_ADD, fj_r64(rt), fj_imm(c->mr * 4));
        fj_emit(b, FJ_DEC, fj_r64(nt));
        fj_emit(b, FJ_JNE, fj_lbl(tile));
        fj_return(b, fj_none());
        return;
    }
    /* Epilogue registers: the k loop's B and broadcast registers. */
    fj_reg tmp[5];
    for (int v = 0; v < c->nv; v++) tmp[v] = g->bv[v];
    tmp[c->nv] = g->x;
    if (c->nv < 2) tmp[2] = fj_vreg(b);
    fj_reg alpha = tmp[0], beta = g->avx512 ? tmp[2] : g->xo;
    if (bf16) {
        if (c->scale) fj_emit(b, FJ_VBROADCASTSS, V(g, alpha), fj_mem(32, p, OFF(alpha)));
        if (c->add) fj_emit(b, FJ_VBROADCASTSS, V(g, beta), fj_mem(32, p, OFF(beta)));
    }
    fj_emit(b, FJ_MOV, fj_r64(cr), fj_r64(cp));
    fj_label tile_end = fj_label_new(b);
    for (int i = 0; i < c->mr; i++) {
        if (i > 0) {
            fj_emit(b, FJ_CMP, fj_r64(rows), fj_imm(i));
            fj_emit(b, FJ_JLE, fj_lbl(tile_end));
        }
        store_row(g, p, cr, ct, rt, km, i, tmp, alpha, beta);
        if (i + 1 < c->mr) fj_emit(b, FJ_ADD, fj_r64(cr), fj_mem(64, p, OFF(ldc)));
    }
    fj_label_bind(b, tile_end);
    fj_emit(b, FJ_ADD, fj_r64(ap), fj_mem(64, p, OFF(a_tile)));
    fj_emit(b, FJ_ADD, fj_r64(cp), fj_mem(64, p, OFF(c_tile)));
    if (!bf16) fj_emit(b, FJ_ADD, fj_r64(rt), fj_imm(c->mr * 4));
    fj_emit(b, FJ_DEC, fj_r64(nt));
    fj_emit(b, FJ_JNE, fj_lbl(tile));
    fj_return(b, fj_none());
}
