/* gemm_gen.c: f32 and f64 GEMM kernels: a loop over row tiles around an mr x nv-vector register tile.
 *
 * One kernel call handles one column panel of C (nv vectors wide) against
 * ntiles row tiles of A:
 *
 *   for each row tile:                       (A advances a_tile, C c_tile)
 *       acc[mr][nv] = 0
 *       for k < kc:                          (unrolled by cfg->unroll)
 *           b[v] = B(k, v*lanes ..)          (vector loads)
 *           acc[i][v] += A(i, k) * b[v]      (A broadcast: {1to16} operand on
 *                                             AVX-512, vbroadcastss on AVX2)
 *       C = alpha*acc + beta*C  (beta_zero: C is not read)   [+ bias, act]
 *
 * B's panel stays in L1 (or L2) across the row tiles; A streams
 * (prefetched) from L2. With b_copy the first tile of a call can read B
 * in place and write the packed panel as it goes (the store port is idle
 * in the FMA loop), which replaces a separate packing pass over B.
 * Column tails are lane masks read at run time (opmask / vmaskmovps),
 * row tails are a run-time row count (rows past it are computed but never
 * loaded or stored), so one kernel serves every shape of a blocking.
 * f64 kernels are the same code with the element size and the packed-
 * double forms of the arithmetic, masked moves and broadcast (gen.ops). */
#include "kernels/gen/gemm_gen.h"

#include <stddef.h>
#include <stdio.h>

#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_gen.h"

#define OFF(f) ((int32_t)offsetof(kg_gemm_args, f))

static const char *act_name(int act) {
    switch (act) {
    case 0: return "";
    case FJ_ELT_RELU: return "relu";
    case FJ_ELT_LEAKY_RELU: return "leaky_relu";
    case FJ_ELT_CLIP: return "clip";
    case FJ_ELT_LINEAR: return "linear";
    case FJ_ELT_ABS: return "abs";
    case FJ_ELT_SQUARE: return "square";
    case FJ_ELT_SQRT: return "sqrt";
    case FJ_ELT_EXP: return "exp";
    case FJ_ELT_LOG: return "log";
    case FJ_ELT_TANH: return "tanh";
    case FJ_ELT_SIGMOID: return "sigmoid";
    case FJ_ELT_GELU_TANH: return "gelu_tanh";
    case FJ_ELT_GELU_ERF: return "gelu_erf";
    case FJ_ELT_SWISH: return "swish";
    case FJ_ELT_HARDSWISH: return "hardswish";
    default: return "op";
    }
}

void kg_gemm_name(const kg_gemm_cfg *c, char *buf, size_t n) {
    static const char am[] = "prc", bm[] = "pr";
    int es = c->dt == KG_DT_F64 ? 8 : 4;
    int lanes = (c->isa == FJ_ISA_AVX512 ? 64 : 32) / es;
    int st = c->stores & KG_STORES_ALL ? c->stores & KG_STORES_ALL : KG_STORES_ALL;
    int some = st != KG_STORES_ALL;
    snprintf(buf, n, "fj_gemm_%s_%dx%d_%c%c%s_%s%s%s%s%s%s%s", es == 8 ? "f64" : "f32", c->mr,
             c->nv * lanes,
             am[c->amode % 3], bm[c->bmode % 2], c->b_copy ? "c" : "",
             c->isa == FJ_ISA_AVX512 ? "avx512" : "avx2",
             c->has_bias ? "_bias" : "", c->act ? "_" : "", act_name(c->act),
             some && st & KG_STORES(KG_STORE_SET) ? "_set" : "",
             some && st & KG_STORES(KG_STORE_ADD) ? "_add" : "",
             some && st & KG_STORES(KG_STORE_GENERAL) ? "_ab" : "");
}

/* ---- the post-op ------------------------------------------------------ */

/* Activations come from the eltwise emitter (kernels/gen/eltwise_gen.h): the same
 * code as fj_eltwise_f32, applied to C in registers before it is stored. */
static int act_supported(int act) { return act >= 0 && act < FJ_ELT__COUNT; }

/* ---- checks ----------------------------------------------------------- */

fj_status kg_gemm_check(const kg_gemm_cfg *c) {
    int avx512 = c->isa == FJ_ISA_AVX512;
    if (c->isa != FJ_ISA_AVX512 && c->isa != FJ_ISA_AVX2)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: isa %d", c->isa);
    if (c->mr < 1 || c->nv < 1 || c->nv > 4 || c->unroll < 1 || c->unroll > 16)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: tile %dx%d vectors, unroll %d", c->mr,
                       c->nv, c->unroll);
    if (c->amode < KG_GA_PACKED || c->amode > KG_GA_COLS || c->bmode < KG_GB_PACKED ||
        c->bmode > KG_GB_ROWS)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: modes %d/%d", c->amode, c->bmode);
    if (c->b_copy && c->bmode != KG_GB_PACKED)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: B copy needs packed B");
    if (c->amode == KG_GA_ROWS && c->mr > 14)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: in-place row-major A needs mr <= 14");
    int acc = c->mr * c->nv;
    /* Loop: accumulators + B vectors (+ the broadcast register on AVX2).
     * Epilogue: alpha, beta (+ a temporary and a mask register on AVX2,
     * where the B vectors past the two holding alpha and beta stay
     * taken). */
    int loop = acc + c->nv + (avx512 && !c->a_reg ? 0 : 1);
    int epi = acc + (avx512 ? 2 : (c->nv > 2 ? c->nv : 2) + 2);
    int nvec = avx512 ? 32 : 16;
    if (loop > nvec || epi > nvec)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: a %dx%d-vector tile needs %d vector "
                       "registers, the ISA has %d", c->mr, c->nv, loop > epi ? loop : epi, nvec);
    if (c->dt != KG_DT_F32 && c->dt != KG_DT_F64)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: element type %d", c->dt);
    /* f64: no {1to8} operand in the encoder. */
    if (c->dt == KG_DT_F64 && avx512 && !c->a_reg)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: f64 on AVX-512 needs a_reg");
    if (c->dt == KG_DT_F64 && c->act && !kg_gemm_act64(c->act, c->act_alpha))
        return fj_fail(FJ_ERR_UNSUPPORTED, "gemm: f64 kernels have no post-op %s", act_name(c->act));
    if (c->tail_rows < 0 || c->tail_rows >= c->mr)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: tail rows %d of a %d-row tile",
                       c->tail_rows, c->mr);
    if (c->stores < 0 || c->stores > KG_STORES_ALL)
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm kernel: stores 0x%x", (unsigned)c->stores);
    if (!act_supported(c->act))
        return fj_fail(FJ_ERR_INVALID_ARG, "gemm: post-op %d is not an fj_eltwise_op", c->act);
    return FJ_OK;
}

/* ---- generator -------------------------------------------------------- */

/* The instructions that depend on the element type. */
typedef struct gemm_ops {
    fj_op mov, bcst, maskmov, add, mul, fma;
} gemm_ops;

static const gemm_ops ops_f32 = {FJ_VMOVUPS, FJ_VBROADCASTSS, FJ_VMASKMOVPS,
                                 FJ_VADDPS, FJ_VMULPS, FJ_VFMADD231PS};
static const gemm_ops ops_f64 = {FJ_VMOVUPD, FJ_VBROADCASTSD, FJ_VMASKMOVPD,
                                 FJ_VADDPD, FJ_VMULPD, FJ_VFMADD231PD};

typedef struct gen {
    fj_builder *b;
    const kg_gemm_cfg *c;
    const gemm_ops *op;   /* the element type's instructions */
    int es;               /* element bytes */
    int avx512, vb, mr, nv;
    int mrc;              /* rows the k loop computes: mr, or fewer in the short
                             last tile's loops (A's layout stays mr's) */
    int unroll;           /* k steps per main-loop iteration of the loop being made */
    int nsets;            /* > 1: step u accumulates into rows (u % nsets)*mrc..
                             (the split tail loop; the sets are added after) */
    fj_reg p, a, a2, lda, lda3, lda5, bp, ldb, cp, k, tc, rows, bsrc, bpf;
    fj_reg acc[32][4], bv[4], bcr[2];
    fj_reg km[4], kr[4];  /* AVX-512 store masks, C-read masks (0 lanes if beta = 0) */
    int merged;           /* one store copy: beta = 0 handled by kr */
    int copy;             /* emitting the B-packing copy of the k loop */
    int full;             /* AVX2, full_panels: stores without masks (plain moves:
                             a masked store is microcoded on some CPUs) */
    kb_trace *tr;         /* the builder's scratch traces while the k loop's step is
                             recorded (TR_B, TR_FMA below), or NULL */
    int rec;              /* 1: the FMA part is recorded; 2: no replays */
    fj_opnd a_slot;
} gen;

static fj_opnd V(gen *g, fj_reg r) { return fj_vec(g->b, r); }
static fj_opnd P(gen *g, int32_t off, uint16_t bits) { return fj_mem(bits, g->p, off); }

/* The memory operand of A(i, k0 + u) (u: step inside the unrolled body). */
static fj_opnd a_opnd(gen *g, int i, int u) {
    const uint16_t eb = (uint16_t)(g->es * 8);
    switch (g->c->amode) {
    case KG_GA_PACKED: return fj_mem(eb, g->a, (u * g->mr + i) * g->es);
    case KG_GA_COLS: return fj_mem(eb, g->a, i * g->es); /* a moves by lda each step */
    default: {
        /* Rows 0..6 from a, 7..13 from a2 = a + 7*lda: offsets 0, lda,
         * 2lda, 3lda, 4lda, 5lda, 6lda all fit base + index*scale. */
        fj_reg base = i < 7 ? g->a : g->a2;
        int32_t d = u * g->es;
        switch (i % 7) {
        case 0: return fj_mem(eb, base, d);
        case 1: return fj_memx(eb, base, g->lda, 1, d);
        case 2: return fj_memx(eb, base, g->lda, 2, d);
        case 3: return fj_memx(eb, base, g->lda3, 1, d);
        case 4: return fj_memx(eb, base, g->lda, 4, d);
        case 5: return fj_memx(eb, base, g->lda5, 1, d);
        default: return fj_memx(eb, base, g->lda3, 2, d);
        }
    }
    }
}

/* One k step (u-th of the unrolled body), in three parts: B's vectors
 * (loaded, or copied to the packed panel), the prefetch of packed A, the
 * FMAs. */
static void k_step_b(gen *g, int u) {
    fj_builder *b = g->b;
    const kg_gemm_cfg *c = g->c;
    for (int v = 0; v < g->nv; v++) {
        /* Row-major B in place: the driver passes only full panels (tails
         * are copied to a padded buffer), so no load needs a mask. */
        fj_opnd src = c->bmode == KG_GB_PACKED ? fj_mem(0, g->bp, (u * g->nv + v) * g->vb)
                                               : fj_mem(0, g->bp, v * g->vb);
        if (g->copy) {
            /* The panel is packed on the way: the store port is idle in
             * this loop, so the copy costs no FMA slots. Full panels only:
             * a masked load here slows the copying tile down. */
            fj_emit(b, FJ_VMOVUPS, V(g, g->bv[v]), fj_mem(0, g->bsrc, v * g->vb));
            fj_emit(b, FJ_VMOVUPS, src, V(g, g->bv[v]));
        } else {
            fj_emit(b, FJ_VMOVUPS, V(g, g->bv[v]), src);
        }
    }
    if (g->copy) {
        /* Rows of a wide B are pages apart: ask for them ahead (into L2:
         * the L1 fill buffers are the scarce resource here). */
        for (int l = 0; l < g->nv * g->vb / 64; l++)
            fj_emit(b, FJ_PREFETCHT1, fj_memx(0, g->bsrc, g->bpf, 1, l * 64));
        fj_emit(b, FJ_ADD, fj_r64(g->bsrc), fj_r64(g->ldb));
    }
    if (c->bmode == KG_GB_PACKED && c->pf_b && !g->copy)
        for (int l = 0; l < g->nv * g->vb / 64; l++)
            fj_emit(b, FJ_PREFETCHT0, fj_mem(0, g->bp, c->pf_b + (u * g->nv * g->vb) + l * 64));
}

static void k_step_pf_a(gen *g, int u) {
    const kg_gemm_cfg *c = g->c;
    if (c->amode == KG_GA_PACKED && c->pf_a && u * 64 < c->unroll * g->mr * g->es)
        fj_emit(g->b, FJ_PREFETCHT0, fj_mem(0, g->a, c->pf_a + u * 64));
}

static void k_step_fma(gen *g, int u) {
    fj_builder *b = g->b;
    const kg_gemm_cfg *c = g->c;
    const int set = g->nsets > 1 ? u % g->nsets * g->mrc : 0;
    for (int i = 0; i < g->mrc; i++) {
        fj_opnd ao = a_opnd(g, i, u);
        const fj_reg *acc = g->acc[set + i];
        if (g->avx512 && !c->a_reg) {
            for (int v = 0; v < g->nv; v++)
                fj_emit(b, FJ_VFMADD231PS, V(g, acc[v]), V(g, g->bv[v]), fj_bcst(ao));
        } else {
            fj_reg bc = g->bcr[i & 1];
            fj_emit(b, g->op->bcst, V(g, bc), ao);
            for (int v = 0; v < g->nv; v++)
                fj_emit(b, g->op->fma, V(g, acc[v]), V(g, g->bv[v]), V(g, bc));
        }
    }
    if (c->bmode == KG_GB_ROWS) fj_emit(b, FJ_ADD, fj_r64(g->bp), fj_r64(g->ldb));
    if (c->amode == KG_GA_COLS) fj_emit(b, FJ_ADD, fj_r64(g->a), fj_r64(g->lda));
}

/* The builder's scratch traces: a k step's B part and FMA part, and one
 * for the rest (a recording used right away). */
enum { TR_B, TR_FMA, TR_MISC, TR_N };

/* The scratch trace for a recording used right away, NULL when replays
 * are off or there is no room. */
static kb_trace *misc_trace(gen *g) {
    kb_trace *t = kb_replays() ? kb_scratch_traces(g->b, TR_N) : NULL;
    return t ? &t[TR_MISC] : NULL;
}

/* Step u differs from step 0 only in the displacements of A and B (and
 * in packed A's prefetch, emitted apart): a loop's steps are replays of
 * step 0's recording (B part and FMA part) with those moved. The FMA part
 * is the same in both loops of a b_copy kernel: recorded once. Without
 * room for the recordings, or when one does not fit a trace, each step
 * is emitted. */
static void record_steps(gen *g) {
    fj_builder *b = g->b;
    if (g->rec == 2 || !kb_replays()) return;   /* emitted, not replayed */
    kb_trace *tr = kb_scratch_traces(b, TR_N);
    g->tr = NULL;
    if (!tr) {
        g->rec = 2;
        return;
    }
    kb_trace_begin(b, &tr[TR_B]);
    k_step_b(g, 0);
    int ok = kb_trace_end(b);
    if (!g->rec) {
        kb_trace_begin(b, &tr[TR_FMA]);
        k_step_fma(g, 0);
        ok &= kb_trace_end(b);
        g->rec = 1;
    }
    if (ok) g->tr = tr;
    else g->rec = 2;
}

static void k_step(gen *g, int u) {
    if (!g->tr) {
        k_step_b(g, u);
        k_step_pf_a(g, u);
        k_step_fma(g, u);
        return;
    }
    const kg_gemm_cfg *c = g->c;
    fj_reg base[3] = {g->a, g->bp, g->a2};
    int32_t d[3] = {c->amode == KG_GA_PACKED ? u * g->mr * g->es
                    : c->amode == KG_GA_ROWS ? u * g->es : 0,
                    c->bmode == KG_GB_PACKED ? u * g->nv * g->vb : 0, u * g->es};
    int nb = c->amode == KG_GA_ROWS && g->mr > 7 ? 3 : 2;
    kb_replay_shift(g->b, &g->tr[TR_B], base, d, nb);
    k_step_pf_a(g, u);
    kb_replay_shift(g->b, &g->tr[TR_FMA], base, d, nb);
}

/* Pointer moves after `steps` steps with compile-time strides. */
static void k_advance(gen *g, int steps) {
    fj_builder *b = g->b;
    if (g->c->amode == KG_GA_PACKED)
        fj_emit(b, FJ_ADD, fj_r64(g->a), fj_imm(steps * g->mr * g->es));
    else if (g->c->amode == KG_GA_ROWS) {
        fj_emit(b, FJ_ADD, fj_r64(g->a), fj_imm(steps * g->es));
        if (g->mr > 7) fj_emit(b, FJ_ADD, fj_r64(g->a2), fj_imm(steps * g->es));
    }
    if (g->c->bmode == KG_GB_PACKED)
        fj_emit(b, FJ_ADD, fj_r64(g->bp), fj_imm(steps * g->nv * g->vb));
}

static void k_loop(gen *g) {
    fj_builder *b = g->b;
    int U = g->unroll;
    fj_label l_rem = fj_label_new(b), l_one = fj_label_new(b), l_done = fj_label_new(b);
    record_steps(g);
    if (U > 1) {
        fj_label l_main = fj_label_new(b);
        fj_emit(b, FJ_CMP, fj_r64(g->k), fj_imm(U));
        fj_emit(b, FJ_JL, fj_lbl(l_rem));
        fj_label_bind(b, l_main);
        for (int u = 0; u < U; u++) k_step(g, u);
        k_advance(g, U);
        fj_emit(b, FJ_SUB, fj_r64(g->k), fj_imm(U));
        fj_emit(b, FJ_CMP, fj_r64(g->k), fj_imm(U));
        fj_emit(b, FJ_JGE, fj_lbl(l_main));
    }
    fj_label_bind(b, l_rem);
    fj_emit(b, FJ_TEST, fj_r64(g->k), fj_r64(g->k));
    fj_emit(b, FJ_JLE, fj_lbl(l_done));
    fj_label_bind(b, l_one);
    k_step(g, 0);
    k_advance(g, 1);
    fj_emit(b, FJ_DEC, fj_r64(g->k));
    fj_emit(b, FJ_JNE, fj_lbl(l_one));
    fj_label_bind(b, l_done);
}

/* Row i of the tile is live (i < rows): else jump to `end`. Moves rowp to
 * row i (rowp is at row i-1). */
static void next_row(gen *g, fj_reg rowp, int i, fj_label end) {
    if (i == 0) return;
    fj_emit(g->b, FJ_CMP, fj_r64(g->rows), fj_imm(i));
    fj_emit(g->b, FJ_JLE, fj_lbl(end));
    fj_emit(g->b, FJ_ADD, fj_r64(rowp), P(g, OFF(ldc), 64));
}

/* AVX-512: row i of the tile (at g->k) stored, as store_tile says. */
static void store_row(gen *g, int i, int beta, int bias, fj_reg alpha_r, fj_reg beta_r, int kind,
                      fj_reg rb) {
    fj_builder *b = g->b;
    const fj_reg rowp = g->k;
    for (int v = 0; v < g->nv; v++) {
        fj_reg x = g->acc[i][v];
        if (kind == KG_STORE_ADD)
            fj_emit(b, g->op->add, fj_masked(V(g, x), g->km[v], 0), V(g, x),
                    fj_mem(0, rowp, v * g->vb));
        if (kind == KG_STORE_GENERAL) fj_emit(b, g->op->mul, V(g, x), V(g, x), V(g, alpha_r));
        /* Masked: lanes outside C are neither read nor written; with kr
         * all-zero (beta = 0) C is not read at all. */
        if (beta && kind == KG_STORE_GENERAL)
            fj_emit(b, g->op->fma, fj_masked(V(g, x), g->merged ? g->kr[v] : g->km[v], 0),
                    V(g, beta_r), fj_mem(0, rowp, v * g->vb));
        if (bias)
            fj_emit(b, g->op->add, fj_masked(V(g, x), g->km[v], 0), V(g, x),
                    fj_mem(0, rb, v * g->vb));
        fj_emit(b, g->op->mov, fj_masked(fj_mem(0, rowp, v * g->vb), g->km[v], 0), V(g, x));
    }
}

/* C = alpha*acc (+ beta*C) (+ bias) for rows < rows, masked lanes; kind
 * KG_STORE_SET / _ADD: C = acc / C += acc (alpha = 1, beta = 0 / 1). */
static void store_tile(gen *g, int beta, int bias, fj_reg alpha_r, fj_reg beta_r, int kind) {
    fj_builder *b = g->b;
    fj_reg rowp = g->k, rb = {0};
    if (bias) {
        rb = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r64(rb), P(g, OFF(bias), 64));
    }
    if (g->avx512) {
        fj_label end = fj_label_new(b);
        fj_emit(b, FJ_MOV, fj_r64(rowp), fj_r64(g->cp));
        /* Rows differ only in their accumulators: row 0's recording
         * replayed with row i's. */
        kb_trace *t = g->mr > 1 ? misc_trace(g) : NULL;
        if (t) {
            kb_trace_begin(b, t);
            store_row(g, 0, beta, bias, alpha_r, beta_r, kind, rb);
            if (!kb_trace_end(b)) t = NULL;
        }
        for (int i = 0; i < g->mr; i++) {
            next_row(g, rowp, i, end);
            if (t) kb_replay(b, t, 1, g->acc[0], g->acc[i], g->nv);
            else store_row(g, i, beta, bias, alpha_r, beta_r, kind, rb);
        }
        fj_label_bind(b, end);
    } else {
        /* AVX2: one mask register, so vectors outermost. A full panel
         * (g->full) needs no mask: C and the bias are memory operands. */
        fj_reg m = fj_vreg(b), t = fj_vreg(b);
        for (int v = 0; v < g->nv; v++) {
            fj_label end = fj_label_new(b);
            if (!g->full) fj_emit(b, FJ_VMOVUPS, V(g, m), P(g, OFF(ymask) + v * 32, 0));
            fj_emit(b, FJ_MOV, fj_r64(rowp), fj_r64(g->cp));
            for (int i = 0; i < g->mr; i++) {
                next_row(g, rowp, i, end);
                fj_reg x = g->acc[i][v];
                const gemm_ops *o = g->op;
                const fj_opnd cm = fj_mem(0, rowp, v * g->vb), bm = fj_mem(0, rb, v * g->vb);
                /* C (or the bias) as an operand: in memory, or loaded under the mask */
                fj_opnd cv = cm, bv = bm;
                if (!g->full && ((beta && kind == KG_STORE_GENERAL) || kind == KG_STORE_ADD)) {
                    fj_emit(b, o->maskmov, V(g, t), V(g, m), cm);
                    cv = V(g, t);
                }
                if (kind == KG_STORE_GENERAL) fj_emit(b, o->mul, V(g, x), V(g, x), V(g, alpha_r));
                if (beta && kind == KG_STORE_GENERAL) fj_emit(b, o->fma, V(g, x), V(g, beta_r), cv);
                if (kind == KG_STORE_ADD) fj_emit(b, o->add, V(g, x), V(g, x), cv);
                if (bias) {
                    if (!g->full) {
                        fj_emit(b, o->maskmov, V(g, t), V(g, m), bm);
                        bv = V(g, t);
                    }
                    fj_emit(b, o->add, V(g, x), V(g, x), bv);
                }
                if (g->full) fj_emit(b, o->mov, cm, V(g, x));
                else fj_emit(b, o->maskmov, cm, V(g, m), V(g, x));
            }
            fj_label_bind(b, end);
        }
        fj_release(b, m);
        fj_release(b, t);
    }
    if (bias) fj_release(b, rb);
}

/* rows = tc == 1 ? last_rows : mr: the rows of this tile. */
static void tile_rows(gen *g) {
    fj_emit(g->b, FJ_MOV, fj_r64(g->rows), fj_imm(g->mr));
    fj_emit(g->b, FJ_CMP, fj_r64(g->tc), fj_imm(1));
    fj_emit(g->b, FJ_CMOVE, fj_r64(g->rows), P(g, OFF(last_rows), 64));
}

/* Second pass of the post stage: C = act(C) over the stored tile, a loop
 * over its rows (the last use of `rows` in the tile, counted down). One
 * copy of the op rather than one per row: the op's chain made again for
 * each of mr rows was most of making a kernel with an activation. Runs
 * with the accumulators released, so the activation has registers: its constants
 * go into the ones left (no loads; register-only instructions replay on
 * the cheapest path), and on AVX-512 the nv vectors of a row go through
 * it side by side (nv interleaved chains). */
static void act_tile(gen *g) {
    fj_builder *b = g->b;
    fj_reg rowp = g->k;
    const fj_eltwise_op op = (fj_eltwise_op)g->c->act;
    const fj_isa isa = g->avx512 ? FJ_ISA_AVX512 : FJ_ISA_AVX2;
    const int nvr = kg_elt_vregs(isa, op, g->c->act_alpha);
    const int nkr = kg_elt_kregs(isa, op, g->c->act_alpha);
    const int fv = kb_free_vregs(b), fk = kb_free_kregs(b);
    /* A row's nv vectors at a time (AVX2: one, and its lane mask) and,
     * side by side, as many of them as the op's own registers per lane
     * allow (mask registers too) */
    const int nvx = g->avx512 ? g->nv : 1, nx = nvx + !g->avx512;
    int lanes = nvx;
    while (lanes > 1 && (nx + lanes * nvr > fv || lanes * nkr > fk)) lanes--;
    /* what is left holds constants */
    const int spare = fv - nx - lanes * nvr;
    const kg_elt_cfg cfg = {.const_regs = spare > 0 ? spare : 0, .lanes = lanes};
    kg_elt_state *s = kg_elt_prepare_cfg(b, op, g->c->act_alpha, g->c->act_beta, &cfg);
    if (!s) return; /* the builder has the error */
    fj_reg x[4], m = {0};
    for (int v = 0; v < nvx; v++) x[v] = fj_vreg(b);
    if (!g->avx512) m = fj_vreg(b);
    /* AVX-512: every vector of a row per iteration; AVX2: one column of
     * vectors per loop (its lane mask loaded once), the rows counted
     * again for each */
    for (int v0 = 0; v0 < g->nv; v0 += nvx) {
        fj_label row = fj_label_new(b);
        if (v0) tile_rows(g);
        if (!g->avx512) fj_emit(b, FJ_VMOVUPS, V(g, m), P(g, OFF(ymask) + v0 * 32, 0));
        fj_emit(b, FJ_MOV, fj_r64(rowp), fj_r64(g->cp));
        fj_label_bind(b, row);
        for (int v = 0; v < nvx; v++) {
            fj_opnd mem = fj_mem(0, rowp, (v0 + v) * g->vb);
            if (g->avx512) fj_emit(b, FJ_VMOVUPS, fj_masked(V(g, x[v]), g->km[v0 + v], 1), mem);
            else fj_emit(b, FJ_VMASKMOVPS, V(g, x[v]), V(g, m), mem);
        }
        kg_elt_apply_n(s, x, nvx);
        for (int v = 0; v < nvx; v++) {
            fj_opnd mem = fj_mem(0, rowp, (v0 + v) * g->vb);
            if (g->avx512) fj_emit(b, FJ_VMOVUPS, fj_masked(mem, g->km[v0 + v], 0), V(g, x[v]));
            else fj_emit(b, FJ_VMASKMOVPS, mem, V(g, m), V(g, x[v]));
        }
        fj_emit(b, FJ_ADD, fj_r64(rowp), P(g, OFF(ldc), 64));
        fj_emit(b, FJ_SUB, fj_r64(g->rows), fj_imm(1));
        fj_emit(b, FJ_JNE, fj_lbl(row));
    }
    for (int v = 0; v < nvx; v++) fj_release(b, x[v]);
    if (!g->avx512) fj_release(b, m);
    kg_elt_finish(s);
}

/* The f64 post stage's second pass (act_tile's, with the ops written out
 * in packed-double instructions by kg_act64_emit, alpha and beta read
 * from the arguments): one vector at a time. */
static void act_tile64(gen *g) {
    fj_builder *b = g->b;
    const fj_reg rowp = g->k;
    const int act = g->c->act;
    const int nt = kg_act64_vregs(act, g->avx512), nk = kg_act64_kregs(act, g->avx512);
    fj_reg ca = fj_vreg(b), cb = fj_vreg(b), x = fj_vreg(b), t[8], k[2] = {{0}, {0}}, m = {0};
    for (int i = 0; i < nt; i++) t[i] = fj_vreg(b);
    for (int i = 0; i < nk; i++) k[i] = fj_kreg(b);
    if (!g->avx512) m = fj_vreg(b);
    fj_emit(b, FJ_VBROADCASTSD, V(g, ca), P(g, OFF(act_a), 64));
    fj_emit(b, FJ_VBROADCASTSD, V(g, cb), P(g, OFF(act_b), 64));
    if (act == FJ_ELT_RELU && g->c->act_alpha == 0)
        fj_emit(b, FJ_VXORPS, fj_xmm(ca), fj_xmm(ca), fj_xmm(ca));
    for (int v = 0; v < g->nv; v++) {
        fj_label row = fj_label_new(b);
        if (v) tile_rows(g);
        if (!g->avx512) fj_emit(b, FJ_VMOVUPS, V(g, m), P(g, OFF(ymask) + v * 32, 0));
        fj_emit(b, FJ_MOV, fj_r64(rowp), fj_r64(g->cp));
        fj_label_bind(b, row);
        fj_opnd mem = fj_mem(0, rowp, v * g->vb);
        if (g->avx512) fj_emit(b, FJ_VMOVUPD, fj_masked(V(g, x), g->km[v], 1), mem);
        else fj_emit(b, FJ_VMASKMOVPD, V(g, x), V(g, m), mem);
        kg_act64_emit(b, g->avx512, act, g->c->act_alpha, x, ca, cb, t, k);
        if (g->avx512) fj_emit(b, FJ_VMOVUPD, fj_masked(mem, g->km[v], 0), V(g, x));
        else fj_emit(b, FJ_VMASKMOVPD, mem, V(g, m), V(g, x));
        fj_emit(b, FJ_ADD, fj_r64(rowp), P(g, OFF(ldc), 64));
        fj_emit(b, FJ_SUB, fj_r64(g->rows), fj_imm(1));
        fj_emit(b, FJ_JNE, fj_lbl(row));
    }
    fj_release(b, ca);
    fj_release(b, cb);
    fj_release(b, x);
    for (int i = 0; i < nt; i++) fj_release(b, t[i]);
    for (int i = 0; i < nk; i++) fj_release(b, k[i]);
    if (!g->avx512) fj_release(b, m);
}

/* The C updates without a post stage, for the kinds the kernel has
 * (dispatched on args.store), each ending with a jump to l_done but the
 * last, unless jmp_last. */
static void store_kinds(gen *g, fj_reg alpha_r, fj_reg beta_r, fj_label l_done, int jmp_last) {
    /* alpha = 1 with beta = 0 or 1 (every k block after the first): no
     * multiply, and for beta = 0 no masked FMA either. With short k these
     * are a few percent of the FMA slots. Only the kinds the plan calls
     * the kernel with are emitted (a third to half of the instructions
     * of a kernel with all three), and one alone needs no dispatch. */
    const kg_gemm_cfg *c = g->c;
    fj_builder *b = g->b;
    static const int order[3] = {KG_STORE_SET, KG_STORE_ADD, KG_STORE_GENERAL};
    int st = c->stores ? c->stores : KG_STORES_ALL, left = __builtin_popcount((unsigned)st);
    for (int i = 0; i < 3; i++) {
        int kind = order[i];
        if (!(st & KG_STORES(kind))) continue;
        fj_label l_next = {0};
        if (--left) {
            l_next = fj_label_new(b);
            fj_emit(b, FJ_CMP, P(g, OFF(store), 32), fj_imm(kind));
            fj_emit(b, FJ_JNE, fj_lbl(l_next));
        }
        if (kind != KG_STORE_GENERAL) {
            store_tile(g, 0, 0, alpha_r, beta_r, kind);
        } else if (g->merged) {
            store_tile(g, 1, 0, alpha_r, beta_r, KG_STORE_GENERAL);
        } else {
            fj_label l_nb0 = fj_label_new(b);
            fj_emit(b, FJ_CMP, P(g, OFF(beta_zero), 32), fj_imm(0));
            fj_emit(b, FJ_JNE, fj_lbl(l_nb0));
            store_tile(g, 1, 0, alpha_r, beta_r, KG_STORE_GENERAL);
            fj_emit(b, FJ_JMP, fj_lbl(l_done));
            fj_label_bind(b, l_nb0);
            store_tile(g, 0, 0, alpha_r, beta_r, KG_STORE_GENERAL);
        }
        if (left || jmp_last) fj_emit(b, FJ_JMP, fj_lbl(l_done));
        if (left) fj_label_bind(b, l_next);
    }
}

/* The end of a tile: alpha/beta, the optional post stage, stores. The
 * run-time flags pick one of up to four copies of the store code (two on
 * AVX-512, where beta = 0 is a zero C-read mask instead of a copy). */
static void epilogue(gen *g) {
    fj_builder *b = g->b;
    const kg_gemm_cfg *c = g->c;
    int has_post = c->has_bias || c->act;
    fj_label l_done = fj_label_new(b), l_post = {0};
    if (has_post) l_post = fj_label_new(b);
    tile_rows(g);
    /* The B registers are free now: alpha and beta go there. */
    fj_reg alpha_r = g->bv[0], beta_r = g->nv > 1 ? g->bv[1] : fj_vreg(b);
    if (g->es == 8) {
        fj_emit(b, FJ_VBROADCASTSD, V(g, alpha_r), P(g, OFF(alpha_d), 64));
        fj_emit(b, FJ_VBROADCASTSD, V(g, beta_r), P(g, OFF(beta_d), 64));
    } else {
        fj_emit(b, FJ_VBROADCASTSS, V(g, alpha_r), P(g, OFF(alpha), 32));
        fj_emit(b, FJ_VBROADCASTSS, V(g, beta_r), P(g, OFF(beta), 32));
    }
    if (has_post) {
        fj_emit(b, FJ_CMP, P(g, OFF(post), 32), fj_imm(0));
        fj_emit(b, FJ_JNE, fj_lbl(l_post));
    }
    g->full = !g->avx512 && c->full_panels;
    store_kinds(g, alpha_r, beta_r, l_done, has_post);
    if (has_post) {
        fj_label l_nb1 = fj_label_new(b), l_act = fj_label_new(b);
        fj_label_bind(b, l_post);
        if (g->merged) {
            store_tile(g, 1, c->has_bias, alpha_r, beta_r, KG_STORE_GENERAL);
        } else {
            fj_emit(b, FJ_CMP, P(g, OFF(beta_zero), 32), fj_imm(0));
            fj_emit(b, FJ_JNE, fj_lbl(l_nb1));
            store_tile(g, 1, c->has_bias, alpha_r, beta_r, KG_STORE_GENERAL);
            fj_emit(b, FJ_JMP, fj_lbl(l_act));
        }
        fj_label_bind(b, l_nb1);
        if (!g->merged) store_tile(g, 0, c->has_bias, alpha_r, beta_r, KG_STORE_GENERAL);
        fj_label_bind(b, l_act);
        if (c->act) {
            /* The accumulators are stored: their registers go to the
             * activation (the next tile's code was emitted above, so
             * nothing later in the stream uses them). */
            for (int i = 0; i < g->mr; i++)
                for (int v = 0; v < g->nv; v++) fj_release(b, g->acc[i][v]);
            for (int v = 0; v < g->nv; v++) fj_release(b, g->bv[v]);
            if (g->nv == 1) fj_release(b, beta_r);
            if (g->es == 8) act_tile64(g);
            else act_tile(g);
            fj_label_bind(b, l_done);
            return;
        }
    }
    fj_label_bind(b, l_done);
    if (g->nv == 1) fj_release(b, beta_r);
}

/* The accumulators zeroed: one recorded vxorps replayed with each of them
 * as its register (KB_REPLAY_MAX copies a replay), else emitted one by
 * one. */
static void zero_acc(gen *g) {
    fj_builder *b = g->b;
    kb_trace *t = misc_trace(g);
    const fj_opnd x = fj_xmm(g->acc[0][0]);
    if (t) {
        kb_trace_begin(b, t);
        fj_emit(b, FJ_VXORPS, x, x, x);
        if (!kb_trace_end(b)) t = NULL;
    }
    fj_reg to[KB_REPLAY_MAX];
    int n = 0;
    for (int i = 0; i < g->mr; i++)
        for (int v = 0; v < g->nv; v++) {
            if (!t) {
                const fj_opnd a = fj_xmm(g->acc[i][v]);
                fj_emit(b, FJ_VXORPS, a, a, a);
                continue;
            }
            to[n++] = g->acc[i][v];
            if (n == KB_REPLAY_MAX || (i == g->mr - 1 && v == g->nv - 1)) {
                kb_replay(b, t, n, &g->acc[0][0], to, 1);
                n = 0;
            }
        }
}

/* Row i's C lines prefetched; k walks the rows (at row i - 1 before). */
static void prefetch_c_row(gen *g, int i) {
    fj_builder *b = g->b;
    if (i) fj_emit(b, FJ_ADD, fj_r64(g->k), P(g, OFF(ldc), 64));
    for (int l = 0; l < (g->nv * g->vb + 63) / 64; l++)
        fj_emit(b, g->c->pf_c == 1 ? FJ_PREFETCHT0 : FJ_PREFETCHT1, fj_mem(0, g->k, l * 64));
}

void kg_gemm(fj_builder *b, const void *ctx) {
    const kg_gemm_cfg *c = ctx;
    gen g = {.b = b, .c = c, .mr = c->mr, .nv = c->nv, .mrc = c->mr, .unroll = c->unroll};
    g.es = c->dt == KG_DT_F64 ? 8 : 4;
    g.op = g.es == 8 ? &ops_f64 : &ops_f32;
    g.avx512 = fj_builder_isa(b) == FJ_ISA_AVX512;
    g.vb = fj_builder_vbits(b) / 8;
    g.p = fj_arg(b, 0);
    g.a = fj_gpr(b);
    g.bp = fj_gpr(b);
    g.cp = fj_gpr(b);
    g.k = fj_gpr(b);
    g.tc = fj_gpr(b);
    g.rows = fj_gpr(b);
    g.a_slot = fj_stack_slot(b, 8, 8, 64);
    if (c->amode != KG_GA_PACKED) {
        g.lda = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r64(g.lda), P(&g, OFF(lda), 64));
    }
    if (c->amode == KG_GA_ROWS) {
        if (g.mr > 3) {
            g.lda3 = fj_gpr(b);
            fj_emit(b, FJ_LEA, fj_r64(g.lda3), fj_memx(0, g.lda, g.lda, 2, 0));
        }
        if (g.mr > 5) {
            g.lda5 = fj_gpr(b);
            fj_emit(b, FJ_LEA, fj_r64(g.lda5), fj_memx(0, g.lda, g.lda, 4, 0));
        }
        if (g.mr > 7) g.a2 = fj_gpr(b);
    }
    if (c->bmode == KG_GB_ROWS) {
        g.ldb = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r64(g.ldb), P(&g, OFF(ldb), 64));
    }
    if (c->b_copy) {
        g.ldb = fj_gpr(b);
        g.bsrc = fj_gpr(b);
        g.bpf = fj_gpr(b);
    }
    for (int i = 0; i < g.mr; i++)
        for (int v = 0; v < g.nv; v++) g.acc[i][v] = fj_vreg(b);
    for (int v = 0; v < g.nv; v++) g.bv[v] = fj_vreg(b);
    /* One broadcast register, or two alternating ones if there is room. */
    int nbc = !g.avx512 || c->a_reg;
    if (nbc && g.mr * g.nv + g.nv + 2 <= (g.avx512 ? 32 : 16)) nbc = 2;
    for (int i = 0; i < nbc; i++) g.bcr[i] = fj_vreg(b);
    if (nbc == 1) g.bcr[1] = g.bcr[0];
    if (g.avx512) {
        for (int v = 0; v < g.nv; v++) {
            g.km[v] = fj_kreg(b);
            fj_emit(b, FJ_KMOVW, fj_k(g.km[v]), P(&g, OFF(kmask) + 4 * v, 16));
        }
        /* Separate C-read masks need nv more mask registers. */
        g.merged = 2 * g.nv <= 6;
        for (int v = 0; g.merged && v < g.nv; v++) {
            g.kr[v] = fj_kreg(b);
            fj_emit(b, FJ_KMOVW, fj_k(g.kr[v]), P(&g, OFF(kmask_c) + 4 * v, 16));
        }
    }

    fj_emit(b, FJ_MOV, fj_r64(g.a), P(&g, OFF(a), 64));
    fj_emit(b, FJ_MOV, fj_r64(g.cp), P(&g, OFF(c), 64));
    fj_emit(b, FJ_MOV, fj_r64(g.tc), P(&g, OFF(ntiles), 64));

    fj_label l_tile = fj_label_new(b);
    fj_label_bind(b, l_tile);
    fj_emit(b, FJ_MOV, g.a_slot, fj_r64(g.a));
    fj_emit(b, FJ_MOV, fj_r64(g.bp), P(&g, OFF(b), 64));
    zero_acc(&g);
    if (c->pf_c) {
        /* The tile's C lines, so that the epilogue does not wait for them. */
        fj_emit(b, FJ_MOV, fj_r64(g.k), fj_r64(g.cp));
        prefetch_c_row(&g, 0);
        kb_trace *t = g.mr > 2 ? misc_trace(&g) : NULL;
        if (t) {   /* rows 1.. are the same instructions */
            kb_trace_begin(b, t);
            prefetch_c_row(&g, 1);
            if (!kb_trace_end(b)) t = NULL;
        }
        for (int i = 1; i < g.mr; i++) {
            if (t) kb_replay_shift(b, t, NULL, NULL, 0);
            else prefetch_c_row(&g, i);
        }
    }
    if (c->amode == KG_GA_ROWS && g.mr > 7) {
        /* a2 = a + 7*lda */
        fj_emit(b, FJ_LEA, fj_r64(g.a2), fj_memx(0, g.a, g.lda3, 2, 0));
        fj_emit(b, FJ_ADD, fj_r64(g.a2), fj_r64(g.lda));
    }
    fj_emit(b, FJ_MOV, fj_r64(g.k), P(&g, OFF(kc), 64));
    fj_label l_norm = fj_label_new(b), l_after = fj_label_new(b), l_tail = {0};
    /* The tiles that do not copy B go on to the short last tile's test. */
    fj_label l_plain = c->tail_rows ? fj_label_new(b) : l_norm;
    if (c->b_copy) {
        /* The first tile of a copy_b call packs the panel (see k_step). */
        fj_emit(b, FJ_CMP, P(&g, OFF(copy_b), 32), fj_imm(0));
        fj_emit(b, FJ_JE, fj_lbl(l_plain));
        fj_emit(b, FJ_CMP, fj_r64(g.tc), P(&g, OFF(ntiles), 64));
        fj_emit(b, FJ_JNE, fj_lbl(l_plain));
        fj_emit(b, FJ_MOV, fj_r64(g.bsrc), P(&g, OFF(b_src), 64));
        fj_emit(b, FJ_MOV, fj_r64(g.ldb), P(&g, OFF(ldb), 64));
        fj_emit(b, FJ_MOV, fj_r64(g.bpf), P(&g, OFF(b_src_pf), 64));
        g.copy = 1;
        k_loop(&g);
        g.copy = 0;
        fj_emit(b, FJ_JMP, fj_lbl(l_after));
    }
    if (c->tail_rows) {
        /* The last tile (not copying B) with at most tail_rows rows: a k
         * loop over those rows only (its other accumulators stay zero and
         * are never stored). */
        l_tail = fj_label_new(b);
        fj_label_bind(b, l_plain);
        fj_emit(b, FJ_CMP, fj_r64(g.tc), fj_imm(1));
        fj_emit(b, FJ_JNE, fj_lbl(l_norm));
        fj_emit(b, FJ_CMP, P(&g, OFF(last_rows), 64), fj_imm(c->tail_rows));
        fj_emit(b, FJ_JLE, fj_lbl(l_tail));
    }
    fj_label_bind(b, l_norm);
    k_loop(&g);
    if (c->tail_rows) {
        /* Its k steps go round sets of accumulators (the tile's other
         * rows' registers) when they fit: as many FMAs in flight as the
         * full tile has, added up after the loop. One set: replays as
         * the full loop (recorded again); several: emitted step by step
         * (the sets' registers differ). It runs once per call at most:
         * unrolled only as far as the sets need (less code to make). */
        fj_emit(b, FJ_JMP, fj_lbl(l_after));
        fj_label_bind(b, l_tail);
        g.mrc = c->tail_rows;
        g.nsets = g.mr / c->tail_rows < c->unroll ? g.mr / c->tail_rows : c->unroll;
        g.unroll = g.nsets;
        if (g.nsets > 1) {
            g.rec = 2;
            g.tr = NULL;
        } else if (g.rec != 2) {
            g.rec = 0;
        }
        k_loop(&g);
        for (int st = 1; st < g.nsets; st++)
            for (int i = 0; i < g.mrc; i++)
                for (int v = 0; v < g.nv; v++)
                    fj_emit(b, g.op->add, V(&g, g.acc[i][v]), V(&g, g.acc[i][v]),
                            V(&g, g.acc[st * g.mrc + i][v]));
        g.nsets = 1;
        g.mrc = g.mr;
        g.unroll = c->unroll;
    }
    fj_label_bind(b, l_after);
    /* Free for the epilogue (rewritten each step; the copy's pointers are
     * reloaded at each tile, and the bias pointer needs a register). */
    if (c->b_copy) {
        fj_release(b, g.ldb);
        fj_release(b, g.bsrc);
        fj_release(b, g.bpf);
    }
    if (nbc) fj_release(b, g.bcr[0]);
    if (nbc == 2) fj_release(b, g.bcr[1]);
    epilogue(&g);
    fj_emit(b, FJ_MOV, fj_r64(g.a), g.a_slot);
    fj_emit(b, FJ_ADD, fj_r64(g.a), P(&g, OFF(a_tile), 64));
    fj_emit(b, FJ_ADD, fj_r64(g.cp), P(&g, OFF(c_tile), 64));
    fj_emit(b, FJ_DEC, fj_r64(g.tc));
    fj_emit(b, FJ_JNE, fj_lbl(l_tile));
    fj_return(b, fj_none());
}
