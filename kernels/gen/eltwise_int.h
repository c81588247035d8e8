/* eltwise_int.h: the eltwise emitter's state and helpers, shared by
 * eltwise.c (state, simple ops, loops) and eltwise_math.c (exp, log, tanh,
 * sigmoid, swish, gelu). */
#ifndef FJ_KG_ELTWISE_INT_H
#define FJ_KG_ELTWISE_INT_H

#include <stdint.h>
#include <string.h>

#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_gen.h"

/* Keys of the runtime parameters (signalling-NaN patterns that no literal
 * constant uses). */
#define ELT_KEY_ALPHA 0x7fa1a1a1u
#define ELT_KEY_BETA 0x7fbe7abeu

enum { ELT_MAXC = 32, ELT_MAXT = 6, ELT_MAXK = 2 };
/* Interleaving (kg_elt_apply_n): up to ELT_LANES vectors, each with its
 * own scratch, their chains emitted one after the other with each
 * instruction's end marked (at most ELT_MAXREC per op), then reordered
 * round-robin by the builder (kb_interleave), so that the independent
 * chains sit next to each other in the instruction stream. */
enum { ELT_LANES = 4, ELT_MAXREC = 48 };

typedef struct elt_const {
    uint32_t key;          /* float bits, or ELT_KEY_ALPHA/BETA */
    uint8_t must_reg;      /* used where an instruction needs a register */
    fj_reg r;              /* its register, or {0}: memory operand m */
    fj_opnd m;
} elt_const;

typedef struct elt_rec elt_rec;

struct kg_elt_state {
    fj_builder *b;
    fj_eltwise_op op;
    int avx512;
    uint16_t vbits;        /* the builder's vector width (elt_v, without a call) */
    uint32_t alpha, beta;  /* bits (baked), or the ELT_KEY_* (run time) */
    elt_const c[ELT_MAXC];
    int nc;
    uint8_t cidx[2 * ELT_MAXC]; /* open hash of c's keys: index + 1, 0 = empty */
    fj_reg t[ELT_LANES][ELT_MAXT]; /* scratch vectors, per lane */
    int nt;
    fj_reg k[ELT_LANES][ELT_MAXK]; /* scratch masks (AVX-512), per lane */
    int nk;
    int lanes, lane;       /* scratch sets; the one in use */
    uint32_t *marks;       /* interleaving: instruction ends of this lane, or NULL */
    int nmarks;            /* instructions marked (ELT_MAXREC + 1: too many) */
    int slot;              /* index in the thread's state pool */
    int planning;          /* dry run (b == NULL): record constants/scratch */
    int applied;           /* kg_elt_apply has emitted the op once */
    int notrace;           /* the op's chain is not replayed (see eltwise.c) */
    elt_rec *rec;          /* the thread's recording (eltwise.c) */
};

static inline uint32_t elt_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The emitters are their own plan: prepare first runs them with b == NULL
 * (every fj_ call is then a no-op) and these accessors record which
 * constants, scratch vectors and masks they use.
 *
 * elt_c: a constant as an operand: its register, or a memory operand (only
 * valid as the last source of an instruction). elt_cr: a constant that
 * must be in a register (e.g. the first source of vmaxps). */
FJ_INTERNAL fj_opnd elt_c(kg_elt_state *s, uint32_t key);
FJ_INTERNAL fj_opnd elt_cr(kg_elt_state *s, uint32_t key);
static inline fj_opnd elt_cf(kg_elt_state *s, float v) { return elt_c(s, elt_bits(v)); }
static inline fj_opnd elt_crf(kg_elt_state *s, float v) { return elt_cr(s, elt_bits(v)); }
/* Scratch vector i / mask i of the state. */
FJ_INTERNAL fj_reg elt_t(kg_elt_state *s, int i);
FJ_INTERNAL fj_reg elt_k(kg_elt_state *s, int i);
/* dst := constant (a register copy or a broadcast load). */
FJ_INTERNAL void elt_load(kg_elt_state *s, fj_reg dst, uint32_t key);
/* A register holding the constant: its own, or scratch loaded with it. */
FJ_INTERNAL fj_reg elt_creg(kg_elt_state *s, uint32_t key, fj_reg scratch);

static inline fj_opnd elt_v(const kg_elt_state *s, fj_reg r) {
    return fj_reg_opnd_(r, s->vbits);
}

/* The emitters' fj_emit: emits, and marks the instruction's end while
 * interleaving. */
FJ_INTERNAL void elt_emitv(kg_elt_state *s, fj_op op, const fj_opnd *ops, int n);
#define elt_emit(s, op, ...)                                 \
    elt_emitv((s), (op), (const fj_opnd[]){__VA_ARGS__},     \
              (int)(sizeof((fj_opnd[]){__VA_ARGS__}) / sizeof(fj_opnd)))

/* The transcendental ops (eltwise_math.c): x := op(x). */
FJ_INTERNAL void elt_math_emit(kg_elt_state *s, fj_reg x);

/* vcmpps predicates (quiet: no exceptions on NaN). */
enum {
    ELT_CMP_EQ_OQ = 0x00, ELT_CMP_LT_OQ = 0x11, ELT_CMP_LE_OQ = 0x12, ELT_CMP_NGE_UQ = 0x19,
    ELT_CMP_NGT_UQ = 0x1a, ELT_CMP_GE_OQ = 0x1d, ELT_CMP_GT_OQ = 0x1e, ELT_CMP_UNORD_Q = 0x03,
};

#endif
