/* builder_trace.c: a straight-line sequence recorded once and emitted
 * again with other registers or displacements (kb_trace_begin/_end,
 * kb_replay, kb_replay_shift).
 *
 * A math op's chain is 20-30 instructions, emitted once per vector of an
 * unrolled loop and once more for its tail; a GEMM k step the same 25-40
 * instructions once per step of the unrolled loop, only the displacements
 * of A and B differing. Made by its emitter, every copy of every
 * instruction pays the emitter's logic (constants looked up, scratch
 * picked, operands built), the operand checks and the encoder's form
 * lookup, hundreds of host instructions each. Replayed, an instruction
 * is its registers renamed through a table (and its displacement moved)
 * and the form's template filled in.
 */
#include "kernels/builder/builder_priv.h"
#include "kernels/x64/x64_templ.h"

#include <string.h>

/* A copy's renaming in one table: vector register p at [p], mask register
 * p at [RM_K + p], and 0 at [RM_NONE], for a template's field that names
 * no register; the fields then index it as they are. */
enum { RM_K = 32, RM_NONE = 40, RM_N = 48 };

/* The EVEX form of a register-only zmm instruction, once for all its
 * replays (x64_vregs uses one form for any registers at 512 bits): its
 * bytes word, with every register 0, is the entry's template (tpl_fill).
 * 0 when it is not such a form: the replay then takes x64_vregs. */
static int evex_recipe(const fj_builder *b, kb_tinsn *e) {
    if (e->bits != 512 || e->nv + e->has_imm > 4) return 0;
    uint64_t w;
    const uint64_t f = x64_vform_get((x64_op)e->op, 2, 1, e->nv, e->has_imm, &w);
    if (!x64_vf_present(f) || x64_vb_lead(w) != 0x62 || x64_vf_is4_opnd(f) != X64_VF_NONE ||
        (x64_vf_features(f) & ~b->features))
        return 0;
    if (e->has_imm && !x64_imm8_fits(x64_vf_imm_unsigned(f), e->imm)) return 0;
    unsigned gop = x64_vf_g_opnd(f), hop = x64_vf_h_opnd(f);
    e->tg = (uint8_t)(gop == X64_VF_NONE ? RM_NONE : e->regs >> 8 * gop & 31);
    e->te = (uint8_t)(e->regs >> 8 * x64_vf_e_opnd(f) & 31);
    e->th = (uint8_t)(hop == X64_VF_NONE ? RM_NONE : e->regs >> 8 * hop & 31);
    e->tm = RM_NONE;
    const uint64_t bytes = x64_vb_bytes(w);
    int n = x64_vb_len(w);
    memcpy(e->tpl, &bytes, 8);
    memset(e->tpl + 8, 0, 8);
    if (e->has_imm) e->tpl[n++] = (uint8_t)e->imm;
    e->tlen = (uint8_t)n;
    return 1;
}

void kb_trace_begin(fj_builder *b, kb_trace *t) {
    t->n = t->ngen = 0;
    t->bad = 1;
    if (!b || b->err) return;
    if (b->trace) { kb_fail(b, "internal: a trace begun while recording another"); return; }
    t->bad = 0;
    t->len0 = b->len;
    t->nfix0 = b->nfix;
    b->trace = t;
}

/* The form of a recorded zmm memory instruction (KB_TF_VM), made now if
 * the table does not have it yet (x64_vm_form); 0 when there is none for
 * the target. */
static uint64_t vm_form(const fj_builder *b, const kb_tinsn *e) {
    const uint64_t f = x64_vm_find((x64_op)e->op, e->nops, e->sh[0], &e->m, e->sh[1], e->sh[2],
                                   e->has_imm);
    if (!x64_vm_present(f) || (x64_vm_features(f) & ~b->features) ||
        (e->has_imm && !x64_imm8_fits(x64_vm_imm_unsigned(f), e->imm)))
        return 0;
    return f;
}

/* The KB_TF_VMK form of e for b's target (x64_vmk_form), or 0 (the
 * general path then). */
static uint64_t vmk_form(const fj_builder *b, const kb_tinsn *e) {
    const int nv = e->nops - e->has_imm;
    if (nv != 3 || e->sh[0] != 2 || !e->has_imm) return 0;
    const uint64_t f = x64_vmk_find((x64_op)e->op, e->regs, &e->m, e->imm);
    return !f || (x64_vm_features(f) & ~b->features) ? 0 : f;
}

/* e's template (kb_tinsn.tpl) from its form word: the mask-register
 * forms and the constant-pool ones are filled in once here, and each copy
 * only puts its registers in (tpl_fill), cheaper than x64_vk_fill and
 * x64_vm_fill field by field for each copy. Left without one (tlen 0, as
 * kb_trace_end set it) when the form does not give bytes. */
static void tpl_make(kb_tinsn *e) {
    uint8_t buf[X64_MAX_LEN + 16] = {0};
    uint32_t feat;
    const int vk = e->form == KB_TF_VK;
    const int n = vk ? x64_vk_fill(e->w, 0, 0, e->sh[2], e->imm, e->has_imm, buf, &feat)
                     : x64_vm_fill(e->w, 0, &e->m, 0, e->sh[2], e->imm, e->has_imm, buf, &feat);
    if (n <= 0 || n > (int)sizeof e->tpl) return;
    memcpy(e->tpl, buf, sizeof e->tpl);
    const unsigned gop = x64_vm_g_opnd(e->w), hop = x64_vm_h_opnd(e->w);
    const unsigned kops = vk ? e->sh[0] : e->form == KB_TF_VMK;   /* the mask operands */
    /* Operand i's register as the rename table has it. */
#define RM_AT(i) \
    ((uint8_t)(kops >> (i) & 1 ? RM_K + (e->regs >> 8 * (i) & 7) : e->regs >> 8 * (i) & 31))
    e->tg = gop == X64_VF_NONE ? RM_NONE : RM_AT(gop);   /* none: an opcode extension, kept */
    e->th = hop == X64_VF_NONE ? RM_NONE : RM_AT(hop);
    e->te = vk ? RM_AT(x64_vm_rm_opnd(e->w)) : RM_NONE;         /* memory: rm is the operand's */
#undef RM_AT
    e->tm = (uint8_t)(e->sh[1] ? RM_K + e->sh[1] : RM_NONE);
    e->tlen = (uint8_t)n;
}

int kb_trace_end(fj_builder *b) {
    kb_trace *t = b ? b->trace : NULL;
    if (!t) return 0;
    b->trace = NULL;
    if (b->len != t->len0 || b->nfix != t->nfix0) {
        /* Something wrote code around fj_emitv (fj_return, fj_call...):
         * those bytes sit where the replay will not put them. */
        kb_fail(b, "internal: code emitted outside fj_emitv while recording a trace");
        t->bad = 1;
    }
    if (t->bad || b->err) return 0;
    const int fast = kb_fast_paths();
    for (int k = 0; k < t->n; k++) {
        kb_tinsn *e = &t->in[k];
        e->tlen = 0;
        if (!e->gen) {
            e->form = (uint8_t)(fast && evex_recipe(b, e) ? KB_TF_EVEX : KB_TF_GENERAL);
            continue;
        }
        const uint8_t form = e->form;
        e->form = KB_TF_GENERAL;
        if (!fast) continue;
        if (form == KB_TF_EVEX) {
            const uint64_t f = x64_vk_form((x64_op)e->op, e->nops, e->sh[0], e->sh[1], e->sh[2],
                                           e->has_imm);
            if (x64_vm_present(f) && !(x64_vm_features(f) & ~b->features) &&
                (!e->has_imm || x64_imm8_fits(x64_vm_imm_unsigned(f), e->imm))) {
                e->w = f;
                e->form = KB_TF_VK;
                tpl_make(e);
            }
        } else if (form == KB_TF_VM) {
            if ((e->w = vm_form(b, e))) {
                e->form = e->m.base == X64_RIP ? KB_TF_VMP : KB_TF_VM;
                e->pool = (uint32_t)t->gen[e->gi][e->sh[0]].val;
                if (e->form == KB_TF_VMP) tpl_make(e);
            }
        } else if (form == KB_TF_VMK) {
            if ((e->w = vmk_form(b, e))) {
                e->form = KB_TF_VMK;
                e->pool = (uint32_t)t->gen[e->gi][e->sh[0]].val;
                tpl_make(e);
            }
        } else {
            e->form = form;   /* the GPR forms: nothing to look up */
        }
    }
    t->kept = 0;   /* the bytes as recorded: at the first replay that renames nothing */
    return 1;
}

/* What a template path needs of an instruction the register-only path
 * leaves (gen 1), as the builder's own paths take it (builder_priv.h),
 * so that a replay gives the bytes fj_emitv gives: mask-register forms
 * (their form looked up at kb_trace_end), zmm with one memory operand on
 * a register base, GPR ALU ops, prefetches and GPR loads and stores. The
 * operands stay in gen[gi] too, for the general path. */
static void take_operands(const fj_builder *b, kb_tinsn *e, const fj_opnd *ops, int nops) {
    const int has_imm = nops > 0 && ops[nops - 1].kind == FJ_OPND_IMM;
    if (!nops || (has_imm && (ops[nops - 1].val < INT32_MIN || ops[nops - 1].val > INT32_MAX)))
        return;
    e->has_imm = (uint8_t)has_imm;
    e->imm = has_imm ? (int32_t)ops[nops - 1].val : 0;
    kb_zops z;
    int bits, reg, store, r1;
    if (nops >= 2 && kb_zmm_operands(b, ops, nops, &z)) {
        if (z.mem < 0 && !z.kops && !z.k) return;
        const int vmk = z.mem >= 0 && z.kops == 1 && !z.k && z.m.base == X64_RIP;
        if (z.mem >= 0 && z.kops && !vmk) return;
        e->bits = 512;
        e->nv = (uint8_t)(nops - has_imm);
        e->regs = z.regs;
        e->sh[0] = (uint8_t)(z.mem < 0 ? z.kops : (unsigned)z.mem);
        e->sh[1] = (uint8_t)z.k;
        e->sh[2] = (uint8_t)z.zero;
        e->form = z.mem < 0 ? KB_TF_EVEX : vmk ? KB_TF_VMK : KB_TF_VM; /* the form at kb_trace_end */
        if (z.mem >= 0) e->m = z.m;
        if (z.mem >= 0 && !vmk) {
            __builtin_prefetch(&x64_vmforms[x64_vm_slot(x64_vm_key(
                (x64_op)e->op, nops, z.mem, &z.m, z.k, (int)z.zero, has_imm))]);
        }
    } else if (kb_gpr_operands(b, ops, nops, &reg, &r1)) {
        e->bits = ops[0].bits;
        e->regs = (uint32_t)reg | (uint32_t)(r1 & 0xff) << 8;
        e->form = KB_TF_GPR;
    } else if (kb_gpr_mem_operands(b, ops, nops, &bits, &reg, &store, &e->m)) {
        e->bits = (uint16_t)bits;
        e->regs = (uint32_t)reg;
        e->sh[0] = (uint8_t)store;
        e->sh[1] = ops[nops - 1 - store].reg.id != H_FRAME;
        e->form = KB_TF_GPR_MEM;
    }
}

void kb_trace_add(fj_builder *b, fj_op op, const fj_opnd *ops, int nops) {
    kb_trace *t = b->trace;
    if (t->bad) return;
    if (t->n >= KB_TRACE_MAX || op == FJ_JMP || (op >= FJ_JO && op <= FJ_JG)) {
        t->bad = 1;
        return;
    }
    kb_tinsn *e = &t->in[t->n];
    e->op = (uint16_t)op;
    e->nops = (uint8_t)nops;
    const int has_imm = nops > 0 && ops[nops - 1].kind == FJ_OPND_IMM, nv = nops - has_imm;
    uint32_t regs;
    if (nv >= 2 && (!has_imm || (ops[nops - 1].val >= INT32_MIN && ops[nops - 1].val <= INT32_MAX)) &&
        kb_vregs_of(b, ops, nv, &regs)) {
        e->gen = 0;
        e->bits = ops[0].bits;
        e->nv = (uint8_t)nv;
        e->regs = regs;
        e->has_imm = (uint8_t)has_imm;
        e->imm = has_imm ? (int32_t)ops[nops - 1].val : 0;
        /* The form is read at kb_trace_end: its table line, often cold in
         * a new runtime, is fetched meanwhile, alongside the others. */
        if (e->bits == 512 && nv + has_imm <= 4)
            __builtin_prefetch(&x64_vforms[2][1][op][nv - 2][has_imm]);
    } else {
        for (int i = 0; i < nops; i++)
            if (ops[i].kind == FJ_OPND_LABEL) t->bad = 1;
        if (t->bad) return;
        e->gen = 1;
        e->gi = (uint8_t)t->ngen;
        e->form = KB_TF_GENERAL;
        memcpy(t->gen[t->ngen++], ops, (size_t)nops * sizeof *ops);
        take_operands(b, e, ops, nops);
    }
    t->n++;
}

/* Handle id with its register renamed through rm (a vector or mask
 * register), as the handle live on the new register; ids that are not a
 * live register's are kept (fj_emitv then says what is wrong with them). */
static uint32_t renamed(const fj_builder *b, uint32_t id, const uint8_t *rm) {
    const unsigned cls = H_CLASS(id), p = H_PHYS(id);
    if ((cls != RC_VEC && cls != RC_K) || !H_TAG(id) || b->tag[cls][p] != H_TAG(id)) return id;
    const unsigned q = cls == RC_VEC ? rm[p] : rm[RM_K + (p & 7)];
    return q == p ? id : (uint32_t)cls << 30 | q << 25 | b->tag[cls][q];
}

/* m's displacement moved by its base register's shift (d: per GPR, or
 * NULL); 0 when it leaves int32 (the general path reports it). */
static int shifted(x64_vm_mem *m, const int32_t *d) {
    if (!d || m->base >= 16) return 1;
    const int64_t v = (int64_t)m->disp + d[m->base];
    if (v < INT32_MIN || v > INT32_MAX) return 0;
    m->disp = (int32_t)v;
    return 1;
}

/* A register-only entry's (gen 0) registers renamed through vm, packed
 * as the templates take them. */
static inline __attribute__((always_inline)) uint32_t vregs_renamed(const kb_tinsn *e,
                                                                   const uint8_t *vm) {
    const uint32_t r = e->regs;
    uint32_t regs = vm[r & 0xff] | (uint32_t)vm[r >> 8 & 0xff] << 8;
    if (e->nv > 2) regs |= (uint32_t)vm[r >> 16 & 0xff] << 16;
    if (e->nv > 3) regs |= (uint32_t)vm[r >> 24] << 24;
    return regs;
}

/* An entry with a template (evex_recipe, tpl_make) into out (16 bytes of
 * room): its copy's registers and write mask put in. Returns the length. */
static inline __attribute__((always_inline)) int tpl_fill(const kb_tinsn *e, const uint8_t *rm,
                                                        uint8_t *out) {
    uint64_t w;
    memcpy(&w, e->tpl, 8);
    w = x64_evex_regs(w, rm[e->tg], rm[e->te], rm[e->th]) | (uint64_t)rm[e->tm] << 24; /* aaa */
    memcpy(out, &w, 8);
    memcpy(out + 8, e->tpl + 8, 8);
    return e->tlen;
}

/* One entry of a copy through its template (forms other than
 * KB_TF_GENERAL, and register-only entries on the fast paths) into out
 * (X64_MAX_LEN + 8 bytes of room: a template writes 16): its length, or
 * 0 to take the general path. */
static int encode_entry(const fj_builder *b, const kb_tinsn *e, const uint8_t *rm,
                        const int32_t *d, uint8_t *out) {
    uint32_t feat = 0, regs = 0;
    x64_vm_mem m = e->m;
    int n = 0;
    if (!e->gen && e->form == KB_TF_GENERAL) {
        n = x64_vregs((x64_op)e->op, e->bits, vregs_renamed(e, rm), e->nv, e->imm, e->has_imm, out,
                      &feat);
    } else switch (e->form) {
    case KB_TF_EVEX:
        n = tpl_fill(e, rm, out);
        break;
    case KB_TF_VK:
        /* Registers renamed by class. */
        for (int i = 0; i < e->nv; i++) {
            const unsigned r = e->regs >> 8 * i & 0xff;
            regs |= (uint32_t)(e->sh[0] >> i & 1 ? rm[RM_K + (r & 7)] : rm[r & 31]) << 8 * i;
        }
        n = x64_vk_fill(e->w, regs, e->sh[1] ? rm[RM_K + e->sh[1]] : 0u, e->sh[2], e->imm,
                        e->has_imm, out, &feat);
        break;
    case KB_TF_VM:
    case KB_TF_VMP:
        for (int i = 0; i < e->nv; i++)   /* the memory operand's byte is unused */
            regs |= (uint32_t)rm[e->regs >> 8 * i & 31] << 8 * i;
        if (!shifted(&m, d)) return 0;
        n = x64_vm_fill(e->w, regs, &m, e->sh[1] ? rm[RM_K + e->sh[1]] : 0u, e->sh[2], e->imm,
                        e->has_imm, out, &feat);
        break;
    case KB_TF_GPR_MEM:
        if (e->sh[1] && !shifted(&m, d)) return 0;
        n = x64_encode_gpr_mem((x64_op)e->op, e->bits, (int)e->regs, e->sh[0], &m, out);
        break;
    case KB_TF_GPR: {
        const int r1 = (int8_t)(e->regs >> 8 & 0xff);   /* -1 an imm, X64_GPR_UNARY none */
        n = x64_encode_gpr((x64_op)e->op, e->bits, (int)(e->regs & 0xff), r1, e->imm, out);
        break;
    }
    default:
        return 0;
    }
    return n > 0 && !(feat & ~b->features) ? n : 0;
}

/* The renaming that keeps every register (the templates take them by
 * physical number). */
static const uint8_t same[RM_N] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                   0,  1,  2,  3,  4,  5,  6,  7};

/* The entry's bytes as recorded, for replays that rename nothing: where
 * a memory operand's ModRM starts (its last bytes are ModRM, SIB and
 * displacement, then an imm8 for the zmm forms) and its disp8 scale. */
static void keep_bytes(const fj_builder *b, kb_tinsn *e) {
    e->enc_len = e->shift = 0;
    /* A constant-pool operand needs its fixup: the template path adds it. */
    if (e->form >= KB_TF_VMK) return;
    uint8_t buf[X64_MAX_LEN + 8];
    const int n = encode_entry(b, e, same, NULL, buf);
    if (n <= 0 || n > (int)sizeof e->enc) return;
    memcpy(e->enc, buf, sizeof e->enc);
    e->enc_len = (uint8_t)n;
    if (e->form == KB_TF_VM) {
        e->head = X64_VM_MODRM_AT;
        e->nsh = (uint8_t)x64_vm_disp_shift(e->w);
        e->shift = 1;
    } else if (e->form == KB_TF_GPR_MEM && e->sh[1]) {
        uint8_t tail[8];
        e->head = (uint8_t)(n - (x64_modrm_mem(tail, 0, &e->m, 0) - tail));
        e->nsh = 0;
        e->shift = 1;
    }
}

/* A replay that renames nothing: the bytes kept, a moved displacement
 * written in (its ModRM, SIB and displacement again: the move can change
 * their form). 0 to take the template or general path. */
static int copy_entry(fj_builder *b, const kb_tinsn *e, const int32_t *d) {
    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + sizeof e->enc, 1)) return 1;
    uint8_t *out = b->code + b->len;
    memcpy(out, e->enc, sizeof e->enc);
    size_t n = e->enc_len;
    if (e->shift && d && d[e->m.base]) {
        x64_vm_mem m = e->m;
        if (!shifted(&m, d)) return 0;
        uint8_t *p = x64_modrm_mem(out + e->head, x64_modrm_reg(e->enc[e->head]), &m, e->nsh);
        if (e->form == KB_TF_VM && e->has_imm) *p++ = (uint8_t)e->imm;
        n = (size_t)(p - out);
    }
    b->len += n;
    return 1;
}

/* One entry of a copy with registers renamed by rm and memory operands
 * moved by d (per GPR, or NULL), through its template, else the general
 * path (which also explains any error). */
static void replay_entry(fj_builder *b, const kb_trace *t, const kb_tinsn *e, const uint8_t *rm,
                         const int32_t *d, int fast) {
    if (fast && (!e->gen || e->form != KB_TF_GENERAL)) {
        if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN + 8, 1)) return;
        const int n = encode_entry(b, e, rm, d, b->code + b->len);
        if (n > 0) {
            b->len += (size_t)n;
            /* A constant-pool operand: its disp32 (before an imm8) is
             * resolved at assembly, as fj_emitv's template path does. */
            if (e->form == KB_TF_VMP)
                kb_add_fixup(b, (uint32_t)(b->len - 4 - e->has_imm), (uint32_t)b->len, e->pool, 1);
            return;
        }
    }
    /* The operands again, as the handles live on the registers. */
    fj_opnd o[4];
    if (!e->gen) {
        const uint32_t regs = vregs_renamed(e, rm);
        for (int i = 0; i < e->nv; i++) {
            const unsigned p = regs >> 8 * i & 0xff;
            o[i] = fj_reg_opnd_((fj_reg){(uint32_t)RC_VEC << 30 | p << 25 | b->tag[RC_VEC][p]},
                                e->bits);
        }
        if (e->has_imm) o[e->nv] = fj_imm(e->imm);
    } else {
        memcpy(o, t->gen[e->gi], (size_t)e->nops * sizeof *o);
        for (int i = 0; i < e->nops; i++) {
            o[i].reg.id = renamed(b, o[i].reg.id, rm);
            o[i].index.id = renamed(b, o[i].index.id, rm);   /* gathers */
            o[i].mask.id = renamed(b, o[i].mask.id, rm);
            const int p = o[i].kind == FJ_OPND_MEM ? live_phys(b, o[i].reg, RC_GPR) : -1;
            if (d && p >= 0) o[i].val += d[p];
        }
    }
    fj_emitv(b, (fj_op)e->op, o, e->nops);
}

/* Emits copies of t, copy c with its registers renamed by map[c]. */
static void replay(fj_builder *b, const kb_trace *t, int copies, uint8_t (*map)[RM_N]) {
    const int fast = kb_fast_paths();
    for (int k = 0; k < t->n; k++) {
        const kb_tinsn *e = &t->in[k];
        for (int c = 0; c < copies; c++) {
            if (e->tlen && fast) {
                /* Most of a math op's chain (register-only, masked and
                 * mask-writing instructions, and those on the constant
                 * pool when its constants outnumber the free registers):
                 * inline, the template with the copy's registers put in,
                 * a constant's rel32 resolved at assembly as fj_emitv's
                 * template path does. */
                if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + sizeof e->tpl, 1)) return;
                b->len += (size_t)tpl_fill(e, map[c], b->code + b->len);
                if (e->form >= KB_TF_VMK)
                    kb_add_fixup(b, (uint32_t)(b->len - 4 - e->has_imm), (uint32_t)b->len, e->pool,
                                 1);
                continue;
            }
            replay_entry(b, t, e, map[c], NULL, fast);
            if (b->err) return;
        }
    }
}

void kb_replay(fj_builder *b, const kb_trace *t, int copies, const fj_reg *from, const fj_reg *to,
               int nmap) {
    if (!b || b->err) return;
    if (!t || t->bad || b->trace || copies < 1 || copies > KB_REPLAY_MAX || nmap < 0 ||
        (nmap && (!from || !to))) {
        kb_fail(b, "internal: replay of an unusable trace");
        return;
    }
    uint8_t map[KB_REPLAY_MAX][RM_N];
    for (int c = 0; c < copies; c++) {
        memcpy(map[c], same, RM_N);
        for (int i = 0; i < nmap; i++) {
            const int cls = (int)H_CLASS(from[i].id);
            const int pf = cls == RC_VEC || cls == RC_K ? live_phys(b, from[i], cls) : -1;
            const int pt = pf >= 0 ? live_phys(b, to[c * nmap + i], cls) : -1;
            if (pt < 0) {
                kb_fail(b, "kb_replay: handles 0x%08x -> 0x%08x are not live registers of one class "
                        "(vector or mask)", from[i].id, to[c * nmap + i].id);
                return;
            }
            map[c][cls == RC_VEC ? pf : RM_K + pf] = (uint8_t)pt;
        }
    }
    replay(b, t, copies, map);
}

void kb_replay_shift(fj_builder *b, kb_trace *t, const fj_reg *base, const int32_t *delta,
                     int nbase) {
    if (!b || b->err) return;
    if (!t || t->bad || b->trace || nbase < 0 || (nbase && (!base || !delta))) {
        kb_fail(b, "internal: replay of an unusable trace");
        return;
    }
    int32_t d[16] = {0};
    for (int i = 0; i < nbase; i++) {
        const int p = live_phys(b, base[i], RC_GPR);
        if (p < 0 || p >= 16) {
            kb_fail(b, "kb_replay_shift: handle 0x%08x is not a live general register", base[i].id);
            return;
        }
        d[p] = delta[i];
    }
    const int fast = kb_fast_paths();
    if (!t->kept) {
        for (int k = 0; k < t->n; k++) {
            if (fast) keep_bytes(b, &t->in[k]);
            else t->in[k].enc_len = 0;
        }
        t->kept = 1;
    }
    for (int k = 0; k < t->n; k++) {
        const kb_tinsn *e = &t->in[k];
        if (e->enc_len && copy_entry(b, e, d)) continue;
        replay_entry(b, t, e, same, d, fast);
        if (b->err) return;
    }
}
