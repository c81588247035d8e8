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

#define OFF(f) ((int32_t)offsetof(kg_lowp_args, f))

void kg_lowp_name(const kg_lowp_cfg *c, char *buf, size_t n) {
    int lanes = c->isa == FJ_ISA_AVX512 ? 16 : 8;
    snprintf(buf, n, "fj_gemm_%s_%dx%d_%s_%s%s", c->dt == KG_LP_BF16 ? "bf16bf16f32" : "u8s8s32",
             c->mr, c->nv * lanes, c->dot ? "dot" : "widen",
             c->isa == FJ_ISA_AVX512 ? "avx512" : "avx2", c->add ? "_add" : "");
}

/* Vector registers the k loop needs (the epilogue reuses its B, broadcast
 * and temporary registers). */
static int loop_regs(const kg_lowp_cfg *c) {
    int n = c->mr * c->nv + c->nv + 1;
    if (!c->dot && c->dt == KG_LP_U8S8) n += 2;         /* product temporary, words of 1 */
    if (!c->dot && c->dt == KG_LP_BF16) n += c->nv + 2; /* odd halves of B and A, high mask */
    return n;
}

fj_status kg_lowp_check(const kg_lowp_cfg *c) {
    if (c->isa != FJ_ISA_AVX512 && c->isa != FJ_ISA_AVX2)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: isa %d", c->isa);
    if (c->dt != KG_LP_U8S8 && c->dt != KG_LP_BF16)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: type %d", c->dt);
    if (c->mr < 1 || c->mr > 16 || c->nv < 1 || c->nv > 4)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: tile %dx%d vectors", c->mr, c->nv);
    int nvec = c->isa == FJ_ISA_AVX512 ? 32 : 16;
    /* The epilogue needs three spare registers (row term, C, AVX2 mask). */
    if (loop_regs(c) > nvec || c->nv + 1 < 3)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: a %dx%d-vector tile needs %d vector "
                       "registers, the ISA has %d", c->mr, c->nv, loop_regs(c), nvec);
    /* AVX2 has no bf16 dot product (vdpbf16ps ymm needs AVX512_BF16 + VL). */
    if (c->dt == KG_LP_BF16 && c->dot && c->isa != FJ_ISA_AVX512)
        return fj_fail(FJ_ERR_INVALID_ARG, "lowp gemm kernel: bf16 dot product needs AVX-512");
    return FJ_OK;
}

typedef struct gen {
    fj_builder *b;
    const kg_lowp_cfg *c;
    int avx512, vb;
    fj_reg acc[16][4], bv[4], bo[4], x, xo, t, ones, hi;
} gen;

static fj_opnd V(const gen *g, fj_reg r) { return fj_vec(g->b, r); }

/* One k group of the tile: B loads, broadcasts, dot products. */
static void k_group(gen *g, fj_reg ap, fj_reg bp) {
    fj_builder *b = g->b;
    const kg_lowp_cfg *c = g->c;
    int bf16 = c->dt == KG_LP_BF16;
    for (int v = 0; v < c->nv; v++) {
        fj_emit(b, g->avx512 ? FJ_VMOVDQU32 : FJ_VMOVDQU, V(g, g->bv[v]),
                fj_mem((uint16_t)g->vb, bp, v * g->vb / 8));
        if (bf16 && !c->dot) {
            /* odd element: the high half; even: shifted into the high half */
            fj_emit(b, FJ_VANDPS, V(g, g->bo[v]), V(g, g->bv[v]), V(g, g->hi));
            fj_emit(b, FJ_VPSLLD, V(g, g->bv[v]), V(g, g->bv[v]), fj_imm(16));
        }
    }
    for (int i = 0; i < c->mr; i++) {
        fj_emit(b, FJ_VPBROADCASTD, V(g, g->x), fj_mem(32, ap, i * 4));
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
            fj_emit(b, FJ_VMULPS, acc, acc, V(g, alpha));
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

void kg_lowp(fj_builder *b, const void *ctx) {
    const kg_lowp_cfg *c = ctx;
    gen g0 = {0}, *g = &g0;
    g->b = b;
    g->c = c;
    g->avx512 = c->isa == FJ_ISA_AVX512;
    g->vb = g->avx512 ? 512 : 256;
    int bf16 = c->dt == KG_LP_BF16;
    int lanes = g->vb / 32;

    fj_reg p = fj_arg(b, 0);
    fj_reg ap = fj_gpr(b), a = fj_gpr(b), bp0 = fj_gpr(b), bp = fj_gpr(b), cp = fj_gpr(b);
    fj_reg cr = fj_gpr(b), k = fj_gpr(b), nt = fj_gpr(b), rows = fj_gpr(b), ldc = fj_gpr(b);
    fj_reg ct = {0}, rt = {0};
    if (!bf16) { ct = fj_gpr(b); rt = fj_gpr(b); }
    for (int i = 0; i < c->mr; i++)
        for (int v = 0; v < c->nv; v++) g->acc[i][v] = fj_vreg(b);
    for (int v = 0; v < c->nv; v++) g->bv[v] = fj_vreg(b);
    g->x = fj_vreg(b);
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
    fj_emit(b, FJ_MOV, fj_r64(bp0), fj_mem(64, p, OFF(b)));
    fj_emit(b, FJ_MOV, fj_r64(cp), fj_mem(64, p, OFF(c)));
    fj_emit(b, FJ_MOV, fj_r64(nt), fj_mem(64, p, OFF(ntiles)));
    fj_emit(b, FJ_MOV, fj_r64(ldc), fj_mem(64, p, OFF(ldc)));
    if (!bf16) {
        fj_emit(b, FJ_MOV, fj_r64(ct), fj_mem(64, p, OFF(colterm)));
        fj_emit(b, FJ_MOV, fj_r64(rt), fj_mem(64, p, OFF(rowterm)));
    }
    if (!c->dot && !bf16) {
        static const uint32_t one16 = 0x00010001u;
        fj_emit(b, FJ_VPBROADCASTD, V(g, g->ones), fj_const_data(b, &one16, 4, 4, 32));
    }
    if (!c->dot && bf16) {
        static const uint32_t himask = 0xffff0000u;
        fj_emit(b, FJ_VPBROADCASTD, V(g, g->hi), fj_const_data(b, &himask, 4, 4, 32));
    }

    fj_label tile = fj_label_new(b), kloop = fj_label_new(b);
    fj_label_bind(b, tile);
    for (int i = 0; i < c->mr; i++)
        for (int v = 0; v < c->nv; v++) {
            fj_opnd r = V(g, g->acc[i][v]);
            fj_emit(b, FJ_VXORPS, r, r, r);
        }
    fj_emit(b, FJ_MOV, fj_r64(a), fj_r64(ap));
    fj_emit(b, FJ_MOV, fj_r64(bp), fj_r64(bp0));
    fj_emit(b, FJ_MOV, fj_r64(k), fj_mem(64, p, OFF(kq)));
    fj_label_bind(b, kloop);
    k_group(g, a, bp);
    fj_emit(b, FJ_ADD, fj_r64(a), fj_imm(c->mr * 4));
    fj_emit(b, FJ_ADD, fj_r64(bp), fj_imm(c->nv * lanes * 4));
    fj_emit(b, FJ_DEC, fj_r64(k));
    fj_emit(b, FJ_JNE, fj_lbl(kloop));

    /* Rows to store: mr, or last_rows in the last tile. */
    fj_emit(b, FJ_MOV, fj_r64(rows), fj_imm(c->mr));
    fj_emit(b, FJ_CMP, fj_r64(nt), fj_imm(1));
    fj_emit(b, FJ_CMOVE, fj_r64(rows), fj_mem(64, p, OFF(last_rows)));
    /* Epilogue registers: the k loop's B and broadcast registers. */
    fj_reg tmp[5];
    for (int v = 0; v < c->nv; v++) tmp[v] = g->bv[v];
    tmp[c->nv] = g->x;
    fj_reg alpha = tmp[0], beta = g->avx512 ? tmp[2] : g->xo;
    if (bf16) {
        fj_emit(b, FJ_VBROADCASTSS, V(g, alpha), fj_mem(32, p, OFF(alpha)));
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
        if (i + 1 < c->mr) fj_emit(b, FJ_ADD, fj_r64(cr), fj_r64(ldc));
    }
    fj_label_bind(b, tile_end);
    fj_emit(b, FJ_ADD, fj_r64(ap), fj_mem(64, p, OFF(a_tile)));
    fj_emit(b, FJ_ADD, fj_r64(cp), fj_mem(64, p, OFF(c_tile)));
    if (!bf16) fj_emit(b, FJ_ADD, fj_r64(rt), fj_imm(c->mr * 4));
    fj_emit(b, FJ_DEC, fj_r64(nt));
    fj_emit(b, FJ_JNE, fj_lbl(tile));
    fj_return(b, fj_none());
}
