/* builder_priv.h: the builder's state, shared by builder.c (emission) and
 * builder_frame.c (assembly). Nothing outside kernels/builder*.c sees it. */
#ifndef FJ_BUILDER_PRIV_H
#define FJ_BUILDER_PRIV_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/builder/builder_int.h"
#include "kernels/x64/x64.h"
#include "kernels/x64/x64_templ.h"

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
    uint32_t align_at;     /* kb_align_next: this body offset starts at an address */
    uint8_t align_mod;     /* ... congruent to align_rem modulo align_mod (0: none) */
    uint8_t align_rem;
    int32_t last_jump;     /* body offset of the last jump emitted, or -1 (kb_interleave) */
    uint32_t loop_lo;      /* the body's loops: the first backward jump's target ... */
    uint32_t loop_hi;      /* ... to the end of the last one (0: no loop) */
    kb_trace *trace;       /* recording (kb_trace_begin): fj_emitv records, emits nothing */
    kb_trace *scratch;     /* kb_scratch_traces' (kept with the spare builder) */
    int nscratch;
    int nofp;              /* KB_NOFP (probe builds only): no frame pointer, rbp
                            * allocatable; read it through kb_probe_nofp */
};

/* Whether b makes a frame-pointer tax probe kernel (builder_int.h): the
 * constant 0 unless the build has the probe. */
static inline int kb_probe_nofp(const fj_builder *b) { return FJ_FP_TAX_PROBE && b->nofp; }

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

/* A memory operand's displacement and scale as the direct forms take them:
 * int32, scale 0 (none), 1, 2, 4 or 8. */
static inline int kb_mem_ok(const fj_opnd *o) {
    return o->val >= INT32_MIN && o->val <= INT32_MAX && o->scale <= 8 &&
           !(o->scale & (o->scale - 1));
}

/* Memory operand o flattened onto physical base and index (X64_NOREG:
 * none), with displacement disp. */
static inline x64_vm_mem kb_flat_mem(const fj_opnd *o, int base, int index, int bcst,
                                     int32_t disp) {
    return (x64_vm_mem){(uint8_t)base, (uint8_t)index,
                        (uint8_t)(index == X64_NOREG || !o->scale ? 1 : o->scale), (uint8_t)bcst,
                        o->bits, disp};
}

/* Operands of a 512-bit instruction as x64_templ.h's forms take them:
 * zmm registers, mask registers, at most one memory operand on a GPR base
 * (+ index*scale) or the constant pool (no index), a write mask on
 * operand 0, a last imm8. */
typedef struct kb_zops {
    uint32_t regs;      /* physical registers (vector or mask), operand i's in bits 8i.. */
    unsigned kops;      /* bit i: operand i is a mask register */
    int mem;            /* the memory operand's index, -1: none */
    int k;              /* operand 0's write mask, 0: none */
    unsigned zero;      /* zeroing-masking */
    int has_imm;
    x64_vm_mem m;       /* mem >= 0: flattened (disp 0 for the pool: a fixup) */
} kb_zops;

/* 1 when ops fit kb_zops (the builder's vector width 512, every handle
 * live, one width of vector registers, 512); 0 for anything else, which
 * the general path takes (and explains when it is an error). */
static inline int kb_zmm_operands(const fj_builder *b, const fj_opnd *ops, int nops, kb_zops *z) {
    int has_imm = ops[nops - 1].kind == FJ_OPND_IMM, nv = nops - has_imm, mem = -1;
    unsigned bits = 0, kops = 0;
    uint32_t regs = 0;
    int base = 0, index = X64_NOREG;
    for (int i = 0; i < nv; i++) {
        const fj_opnd *o = &ops[i];
        if (i && o->mask.id) return 0;
        if (o->kind == FJ_OPND_REG && H_CLASS(o->reg.id) == RC_K) {
            int p = live_phys(b, o->reg, RC_K);
            if (p < 0 || o->bits != 16 || o->bcst || o->zero) return 0;
            kops |= 1u << i;
            regs |= (uint32_t)p << 8 * i;
        } else if (o->kind == FJ_OPND_REG) {
            int p = live_phys(b, o->reg, RC_VEC);
            if (p < 0 || (bits && o->bits != bits) || o->bcst) return 0;
            bits = o->bits;
            regs |= (uint32_t)p << 8 * i;
        } else if (o->kind == FJ_OPND_MEM && mem < 0 && kb_mem_ok(o) &&
                   !(o->bits & (o->bits - 1)) && o->bits <= 512 && (o->bits == 0 || o->bits >= 8)) {
            /* A GPR base, or the constant pool with no index; not the frame. */
            base = o->reg.id == H_CONST ? X64_RIP : live_phys(b, o->reg, RC_GPR);
            index = o->index.id ? live_phys(b, o->index, RC_GPR) : X64_NOREG;
            if (base < 0 || index < 0 || (base == X64_RIP && index != X64_NOREG)) return 0;
            mem = i;
        } else {
            return 0;
        }
    }
    if (bits != 512 || bits > (unsigned)b->vbits || nv < 2) return 0;
    int k = 0;
    if (ops[0].mask.id && (k = live_phys(b, ops[0].mask, RC_K)) < 0) return 0;
    z->regs = regs;
    z->kops = kops;
    z->mem = mem;
    z->k = k;
    z->zero = k && ops[0].zero;
    z->has_imm = has_imm;
    if (mem >= 0)
        z->m = kb_flat_mem(&ops[mem], base, index, ops[mem].bcst != 0,
                           base == X64_RIP ? 0 : (int32_t)ops[mem].val);
    return 1;
}

/* A memory operand on a GPR base or the frame, flattened for the legacy
 * direct forms; 0 for anything else (the pool, a broadcast, a mask). */
static inline int kb_legacy_mem(const fj_builder *b, const fj_opnd *o, x64_vm_mem *m) {
    if (!kb_mem_ok(o) || o->bcst || o->mask.id || !o->reg.id || o->reg.id == H_CONST) return 0;
    int base = kb_probe_nofp(b) ? X64_RSP : X64_RBP;
    if (o->reg.id != H_FRAME && (base = live_phys(b, o->reg, RC_GPR)) < 0) return 0;
    int index = o->index.id ? live_phys(b, o->index, RC_GPR) : X64_NOREG;
    if (index < 0) return 0;
    *m = kb_flat_mem(o, base, index, 0, (int32_t)o->val);
    return 1;
}

/* Operands of x64_encode_gpr_mem: a prefetch's memory operand, or a 32- or
 * 64-bit register and memory (store: memory first); 0 for anything else. */
static inline int kb_gpr_mem_operands(const fj_builder *b, const fj_opnd *ops, int nops, int *bits,
                                      int *reg, int *store, x64_vm_mem *m) {
    const fj_opnd *mo, *r = NULL;
    *store = *reg = 0;
    *bits = 32;
    if (nops == 1 && ops[0].kind == FJ_OPND_MEM) {
        mo = &ops[0];
        if (mo->bits && mo->bits != 8) return 0;
    } else if (nops == 2 && ops[0].kind == FJ_OPND_MEM && ops[1].kind == FJ_OPND_REG) {
        mo = &ops[0];
        r = &ops[1];
        *store = 1;
    } else if (nops == 2 && ops[0].kind == FJ_OPND_REG && ops[1].kind == FJ_OPND_MEM) {
        mo = &ops[1];
        r = &ops[0];
    } else {
        return 0;
    }
    if (r) {
        *bits = r->bits;
        if ((*bits != 32 && *bits != 64) || (mo->bits && mo->bits != *bits) ||
            (*reg = plain_reg(b, r, RC_GPR, (unsigned)*bits)) < 0)
            return 0;
    }
    return kb_legacy_mem(b, mo, m);
}

/* Operands of x64_encode_gpr: two 32- or 64-bit registers (r1 >= 0), a
 * register and an immediate (r1 -1), one register (r1 X64_GPR_UNARY); 0
 * for anything else. */
static inline int kb_gpr_operands(const fj_builder *b, const fj_opnd *ops, int nops, int *r0,
                                  int *r1) {
    const unsigned bits = ops[0].bits;
    if (nops < 1 || nops > 2 || (bits != 32 && bits != 64)) return 0;
    if ((*r0 = plain_reg(b, &ops[0], RC_GPR, bits)) < 0) return 0;
    *r1 = nops == 1 ? X64_GPR_UNARY : -1;
    if (nops == 1) return 1;
    const fj_opnd *o = &ops[1];
    if (o->kind == FJ_OPND_REG) return (*r1 = plain_reg(b, o, RC_GPR, bits)) >= 0;
    return o->kind == FJ_OPND_IMM && !o->mask.id;
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

/* A rel32 at [pos, end) of the body to resolve at assembly: to constant
 * pool offset target (is_const), else to label index target. Inline: the
 * template paths add one per constant-pool operand. */
static inline void kb_add_fixup(fj_builder *b, uint32_t pos, uint32_t end, uint32_t target,
                                int is_const) {
    if (!kb_grow(b, (void **)&b->fix, &b->fix_cap, b->nfix + 1, sizeof(fixup))) return;
    b->fix[b->nfix++] = (fixup){pos, end, target, (uint8_t)is_const};
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
