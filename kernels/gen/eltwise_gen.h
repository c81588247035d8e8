/* eltwise_gen.h: element-wise ops: an in-register emitter (for fused epilogues)
 * and the standalone fj_eltwise_f32 kernels built on it. */
#ifndef FJ_KG_ELTWISE_H
#define FJ_KG_ELTWISE_H

#include "base/base.h"

/* ---- in-register emitter ---------------------------------------------
 *
 *     kg_elt_state *s = kg_elt_prepare(b, FJ_ELT_GELU_TANH, 0, 0);
 *     if (!s) ...                  // the builder has a sticky error
 *     for each accumulator: kg_elt_apply(s, acc);   // acc := op(acc)
 *     kg_elt_finish(s);            // releases what prepare took
 *
 * prepare takes the scratch vector registers (and, on AVX-512, mask
 * registers) the op needs; constants stay in the constant pool and are used
 * as memory operands ({1toN} broadcasts on AVX-512), except the few that an
 * instruction needs in a register (kg_elt_vregs counts them). apply works on
 * the builder's natural width (zmm / ymm) and only touches x, the state's
 * registers and the flags. Several states may be live at once (up to 8 per
 * thread); they must be finished before fj_builder_finish. */
typedef struct kg_elt_state kg_elt_state;

/* alpha/beta as in fj_eltwise_f32 (ignored by ops without parameters). */
FJ_INTERNAL kg_elt_state *kg_elt_prepare(fj_builder *b, fj_eltwise_op op, float alpha, float beta);
FJ_INTERNAL void kg_elt_apply(kg_elt_state *s, fj_reg x);
/* x[i] := op(x[i]) for i < n, the instructions of up to cfg.lanes vectors
 * interleaved (independent chains side by side: better for the scheduler
 * than one long chain after the other). Same results as kg_elt_apply. */
FJ_INTERNAL void kg_elt_apply_n(kg_elt_state *s, const fj_reg *x, int n);
FJ_INTERNAL void kg_elt_finish(kg_elt_state *s);

/* Options for kg_elt_prepare_cfg. */
typedef struct kg_elt_cfg {
    int const_regs;    /* up to this many constants go into vector registers
                          (faster loops when registers are free), on top of
                          the ones that must */
    fj_reg params;     /* if set: a GPR pointing to float {alpha, beta} at run
                          time (read once, by prepare); alpha/beta are then
                          not baked into the code */
    int lanes;         /* scratch sets for kg_elt_apply_n (0 or 1: one; at
                          most 4): that many times the scratch registers */
} kg_elt_cfg;
FJ_INTERNAL kg_elt_state *kg_elt_prepare_cfg(fj_builder *b, fj_eltwise_op op, float alpha,
                                             float beta, const kg_elt_cfg *cfg);
/* Vector registers kg_elt_prepare(_cfg with const_regs = 0) takes for op on
 * isa, and mask registers (AVX-512 only); 0 for an unknown op. */
FJ_INTERNAL int kg_elt_vregs(fj_isa isa, fj_eltwise_op op, float alpha);
FJ_INTERNAL int kg_elt_kregs(fj_isa isa, fj_eltwise_op op, float alpha);

/* ---- standalone kernels ---------------------------------------------- */

/* Code variants: one kernel per variant and ISA, alpha/beta read at run
 * time (the runtime pins one kernel per variant). */
typedef enum kg_elt {
    KG_ELT_RELU = 0,       /* relu with alpha == 0: max(x, 0) */
    KG_ELT_LEAKY_RELU,     /* relu / leaky_relu with a slope */
    KG_ELT_CLIP, KG_ELT_LINEAR, KG_ELT_ABS, KG_ELT_SQUARE, KG_ELT_SQRT,
    KG_ELT_EXP, KG_ELT_LOG, KG_ELT_TANH, KG_ELT_SIGMOID, KG_ELT_GELU_TANH,
    KG_ELT_GELU_ERF, KG_ELT_SWISH, KG_ELT_HARDSWISH,
    KG_ELT__NELT,
    /* the variants again, for arrays far larger than the caches:
     * KG_ELT_STREAM0 + variant (into another array, non-temporal stores),
     * KG_ELT_LARGE0 + variant (in place); both prefetch src */
    KG_ELT_STREAM0 = KG_ELT__NELT,
    KG_ELT_LARGE0 = KG_ELT_STREAM0 + KG_ELT__NELT,
    KG_ELT__N = KG_ELT_LARGE0 + KG_ELT__NELT
} kg_elt;

/* Kernel signature: void k(const float *src, float *dst, size_t n,
 *                          const float params[2] = {alpha, beta}) */
typedef void (*kg_elt_fn)(const float *src, float *dst, size_t n, const float *params);
enum { KG_ELT_NARGS = 4 };

/* The variant for (op, alpha), or -1 for an unknown op. */
static inline int kg_elt_variant(fj_eltwise_op op, float alpha) {
    if ((unsigned)op - 1u >= (unsigned)FJ_ELT__COUNT - 1u) return -1;
    if (op == FJ_ELT_RELU) return alpha == 0.0f ? KG_ELT_RELU : KG_ELT_LEAKY_RELU;
    return (int)op - 1; /* the enums run in parallel from leaky_relu on */
}
/* Kinds of element-wise kernel a slot holds (see KG_ELT_STREAM0). */
enum { KG_ELT_PLAIN, KG_ELT_STREAMING, KG_ELT_LARGE };
/* The variant v runs, and (kind) which kernel of it: v itself for the
 * plain ones. */
static inline kg_elt kg_elt_base(kg_elt v, int *kind) {
    *kind = v >= KG_ELT_LARGE0 ? KG_ELT_LARGE : v >= KG_ELT_STREAM0 ? KG_ELT_STREAMING
                                                                  : KG_ELT_PLAIN;
    return *kind == KG_ELT_LARGE       ? v - KG_ELT_LARGE0
           : *kind == KG_ELT_STREAMING ? v - KG_ELT_STREAM0
                                       : v;
}
/* The op a variant computes. */
FJ_INTERNAL fj_eltwise_op kg_elt_op(kg_elt v);
/* "relu", "exp", ... */
FJ_INTERNAL const char *kg_elt_name(kg_elt v);
/* Emits the body of variant v (< KG_ELT__NELT, or a KG_ELT_STREAM0 or
 * KG_ELT_LARGE0 one) into b (KG_ELT_NARGS args). Errors stay sticky in b.
 * A streaming kernel needs dst 64-byte aligned and src not dst: its whole
 * vectors go past the caches (no read of dst's lines before they are
 * written, which an array far larger than the caches would pay for
 * nothing). */
FJ_INTERNAL void kg_eltwise(fj_builder *b, kg_elt v);

#endif
