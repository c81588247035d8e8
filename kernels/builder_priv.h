/* builder_priv.h: the builder's state, shared by builder.c (emission) and
 * builder_frame.c (assembly). Nothing outside kernels/builder*.c sees it. */
#ifndef FJ_BUILDER_PRIV_H
#define FJ_BUILDER_PRIV_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/builder_int.h"
#include "kernels/x64.h"

enum { RC_GPR = 1, RC_VEC = 2, RC_K = 3 };
/* Handle layout: class (2 bits) | phys (5 bits) | tag (25 bits). Tags come
 * from a process-wide counter, so a handle of another builder, or of a
 * register freed and handed out again, never matches the live tag. */
#define H_CLASS(id) ((id) >> 30)
#define H_PHYS(id) (((id) >> 25) & 31u)
#define H_TAG(id) ((id) & 0x1ffffffu)
/* Special bases of memory operands: the frame (rbp-relative slots), the
 * call area (rsp-relative, internal) and the constant pool (RIP). */
#define H_FRAME 0x00000001u
#define H_CONST 0x00000002u

#define SAVE_AREA 40   /* rbx, r12, r13, r14, r15 */

/* The callee-saved GPRs the pool hands out, in save-slot order. */
static const uint8_t callee_saved[5] = {X64_RBX, X64_R12, X64_R13, X64_R14, X64_R15};

typedef struct fixup {
    uint32_t pos;      /* of the 4-byte field in the body */
    uint32_t end;      /* end of the instruction, in the body */
    uint32_t target;   /* label index, or constant-pool offset */
    uint8_t is_const;
} fixup;

struct fj_builder {
    char *name;
    size_t name_cap;
    fj_runtime *rt;
    fj_isa isa;
    uint32_t features;     /* X64_F_* allowed: the ISA's and the CPU's */
    int vbits, nvec;
    fj_status err;
    char errmsg[256];

    uint8_t *code;
    size_t len, cap;

    uint32_t tag[4][32];   /* live tag per class and physical register, 0 = free */
    uint32_t live[4];      /* bit p: tag[class][p] != 0 (the allocators' view) */
    uint32_t next_tag, tag_end;  /* this builder's block of handle tags */
    uint32_t arg_tag[6];   /* the tag each argument register was created with */
    uint32_t label_salt;   /* high bits of this builder's label ids */
    uint32_t gpr_ever;     /* GPRs ever handed out (callee-saved to save) */
    int used_vec;

    int32_t *labels;       /* body offset, -1 = unbound */
    uint32_t nlabels, labels_cap;
    fixup *fix;
    size_t nfix, fix_cap;

    uint8_t *consts;
    uint32_t const_len, const_cap;

    uint32_t slot_bytes;   /* below the save area */
    uint32_t call_area;    /* max bytes any fj_call needs */
    int32_t last_ret_jmp;  /* body offset just past fj_return's jmp, or -1 */
    int32_t last_jump;     /* body offset of the last jump emitted, or -1 (kb_interleave) */
    kb_trace *trace;       /* recording (kb_trace_begin): fj_emitv records, emits nothing */
#if FJ_FP_TAX_PROBE
    int nofp;              /* KB_NOFP: no frame pointer, rbp allocatable */
#endif
};

/* The physical register of a live handle of class cls, or -1. Tags are
 * never 0, so a free register (tag 0) cannot match; the frame and
 * constant-pool bases are class 0, never a register. */
static inline int live_phys(const fj_builder *b, fj_reg r, int cls) {
    uint32_t id = r.id;
    unsigned p = H_PHYS(id);
    return H_CLASS(id) == (unsigned)cls && H_TAG(id) && b->tag[cls][p] == H_TAG(id) ? (int)p : -1;
}

/* The physical register of a plain register operand of class cls and
 * width bits (as fj_vec, fj_r64... make it: no mask, broadcast, zeroing or
 * scale), or -1 for anything else. */
static inline int plain_reg(const fj_builder *b, const fj_opnd *o, int cls, unsigned bits) {
    uint32_t head;
    memcpy(&head, o, sizeof head);   /* kind, scale, bcst, zero */
    return head == FJ_OPND_REG && o->bits == bits && !o->mask.id ? live_phys(b, o->reg, cls) : -1;
}

/* Operands 0..nv-1 (nv >= 2) as plain vector registers of operand 0's
 * width, at most the builder's: their physical registers packed in *regs,
 * operand i's in bits 8i..8i+7 (the encoder's register templates take
 * them so). 0 when one is anything else. */
static inline int kb_vregs_of(const fj_builder *b, const fj_opnd *ops, int nv, uint32_t *regs) {
    unsigned bits = ops[0].bits;
    int p0 = plain_reg(b, &ops[0], RC_VEC, bits), p1 = plain_reg(b, &ops[1], RC_VEC, bits);
    if ((p0 | p1) < 0 || nv < 2 || bits > (unsigned)b->vbits) return 0;
    uint32_t r = (uint32_t)p0 | (uint32_t)p1 << 8;
    for (int i = 2; i < nv; i++) {
        int p = plain_reg(b, &ops[i], RC_VEC, bits);
        if (p < 0) return 0;
        r |= (uint32_t)p << 8 * i;
    }
    *regs = r;
    return 1;
}

/* Records one instruction into the builder's trace (builder_trace.c). */
FJ_INTERNAL void kb_trace_add(fj_builder *b, fj_op op, const fj_opnd *ops, int nops);

/* Sets the builder's sticky error to "out of memory" (if none yet). */
#define KB_ERR_NOMEM(b) \
    do { if ((b)->err == FJ_OK) { (b)->err = FJ_ERR_NO_MEMORY; \
         snprintf((b)->errmsg, sizeof (b)->errmsg, "out of memory"); } } while (0)

/* Room for need elements of elem bytes in *p (capacity *cap): inline, as
 * every instruction asks; 0 (sticky error set) when out of memory. */
FJ_INTERNAL __attribute__((noinline)) int kb_grow_slow(fj_builder *b, void **p, size_t *cap,
                                                       size_t need, size_t elem);
static inline int kb_grow(fj_builder *b, void **p, size_t *cap, size_t need, size_t elem) {
    return need <= *cap || kb_grow_slow(b, p, cap, need, elem);
}

/* 0 when a test has turned the template and direct paths off. */
FJ_INTERNAL int kb_fast_paths(void);

/* Label index 0 is reserved, at assembly, for the epilogue: fj_return
 * jumps there with a rel32 fixup whose target is EPILOGUE. */
#define EPILOGUE 0xffffffffu

static inline x64_opnd gpr_op(int reg, int bits) {
    x64_opnd o = {0};
    o.kind = X64_K_GPR; o.reg = (uint8_t)reg; o.bits = (uint16_t)bits;
    return o;
}
static inline x64_opnd vec_op(int reg, int bits) {
    x64_opnd o = {0};
    o.kind = X64_K_VEC; o.reg = (uint8_t)reg; o.bits = (uint16_t)bits;
    return o;
}
static inline x64_opnd k_op(int reg) {
    x64_opnd o = {0};
    o.kind = X64_K_KREG; o.reg = (uint8_t)reg; o.bits = 16;
    return o;
}
static inline x64_opnd mem_op(int base, int32_t disp, int bits) {
    x64_opnd o = {0};
    o.kind = X64_K_MEM; o.base = (uint8_t)base; o.index = X64_NOREG; o.scale = 1;
    o.disp = disp; o.bits = (uint16_t)bits;
    return o;
}
static inline x64_opnd imm_op(int64_t v) {
    x64_opnd o = {0};
    o.kind = X64_K_IMM; o.imm = v;
    return o;
}

#endif
