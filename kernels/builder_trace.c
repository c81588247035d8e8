/* builder_trace.c: a straight-line sequence recorded once and emitted
 * again with other registers (kb_trace_begin/_end, kb_replay).
 *
 * A math op's chain is 20-30 instructions, emitted once per vector of an
 * unrolled loop and once more for its tail. Made by its emitter, every
 * copy of every instruction pays the emitter's logic (constants looked up,
 * scratch picked), the operand checks and the encoder's form lookup:
 * ~370 host instructions each here. Replayed, a register-only
 * instruction is its registers renamed through a table and the form's
 * template filled in.
 */
#include "kernels/builder_priv.h"
#include "kernels/x64_templ.h"

#include <string.h>

/* The EVEX form of a register-only zmm instruction, once for all its
 * replays: x64_vregs uses one form for any registers at 512 bits. 0 when
 * it is not such a form: the replay then takes x64_vregs. */
static int evex_recipe(const fj_builder *b, kb_tinsn *e) {
    if (e->bits != 512 || e->nv + e->has_imm > 4) return 0;
    x64_vform *vf = &x64_vforms[2][1][e->op][e->nv - 2][e->has_imm];
    uint64_t f = atomic_load_explicit(&vf->f, memory_order_acquire);
    if (!f) f = x64_vform_make(vf, (x64_op)e->op, 512, 1, e->nv, e->has_imm);
    const uint64_t w = atomic_load_explicit(&vf->bytes, memory_order_relaxed);
    if (!(f & 2) || (uint8_t)w != 0x62 || (f >> 29 & 7) != X64_VF_NONE ||
        ((uint32_t)(f >> 32 & 0xffff) & ~b->features))
        return 0;
    if (e->has_imm && !x64_imm8_fits(f >> 48 & 1, e->imm)) return 0;
    unsigned gop = f >> 18 & 7, hop = f >> 23 & 7;
    e->sh[0] = (uint8_t)(gop == X64_VF_NONE ? 32 : 8 * gop);
    e->sh[1] = (uint8_t)(8 * (f >> 21 & 3));
    e->sh[2] = (uint8_t)(hop == X64_VF_NONE ? 32 : 8 * hop);
    e->w = w;
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
        if (!e->gen) {
            e->evex = (uint8_t)(fast && evex_recipe(b, e));
        } else if (e->evex == 1) {
            e->evex = 0;
            if (!fast || b->vbits != 512) continue;
            const uint64_t f = x64_vk_form((x64_op)e->op, e->nops, e->sh[0], e->sh[1], e->sh[2],
                                           e->has_imm);
            if ((f >> 21 & 1) && !((uint32_t)(f >> 47 & 0x1ff) & ~b->features) &&
                (!e->has_imm || x64_imm8_fits(f >> 56 & 1, e->imm))) {
                e->w = f;
                e->evex = 2;
            }
        }
    }
    return 1;
}

/* A register-only zmm instruction with mask-register operands or a write
 * mask (x64_templ.h's mask-register forms): its registers packed in regs
 * (vector or mask numbers), which operands are masks in sh[0], the write
 * mask in sh[1], zeroing in sh[2]; evex 2 once kb_trace_end has its form
 * in w. The operands stay in gen[gi] too, for the general path. */
static void vk_operands(const fj_builder *b, kb_tinsn *e, const fj_opnd *ops, int nops) {
    const int has_imm = nops > 0 && ops[nops - 1].kind == FJ_OPND_IMM, nv = nops - has_imm;
    if (nv < 2 || (has_imm && (ops[nops - 1].val < INT32_MIN || ops[nops - 1].val > INT32_MAX)))
        return;
    uint32_t regs = 0;
    unsigned kops = 0, vecs = 0;
    for (int i = 0; i < nv; i++) {
        const fj_opnd *o = &ops[i];
        const int k = H_CLASS(o->reg.id) == RC_K;
        if (o->kind != FJ_OPND_REG || o->scale || o->bcst || (i && (o->mask.id || o->zero)) ||
            o->bits != (k ? 16 : 512))
            return;
        const int p = live_phys(b, o->reg, k ? RC_K : RC_VEC);
        if (p < 0) return;
        kops |= (unsigned)k << i;
        vecs += !k;
        regs |= (uint32_t)p << 8 * i;
    }
    if (ops[0].zero && !ops[0].mask.id) return;
    const int m = ops[0].mask.id ? live_phys(b, ops[0].mask, RC_K) : 0;
    if (!vecs || m < 0 || (!kops && !m)) return;
    e->bits = 512;
    e->nv = (uint8_t)nv;
    e->regs = regs;
    e->has_imm = (uint8_t)has_imm;
    e->imm = has_imm ? (int32_t)ops[nops - 1].val : 0;
    e->sh[0] = (uint8_t)kops;
    e->sh[1] = (uint8_t)m;
    e->sh[2] = (uint8_t)(m && ops[0].zero);
    e->evex = 1;   /* operands taken; the form at kb_trace_end */
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
        e->evex = 0;
        memcpy(t->gen[t->ngen++], ops, (size_t)nops * sizeof *ops);
        vk_operands(b, e, ops, nops);
    }
    t->n++;
}

/* Handle id with its register renamed through vm (vector registers) or
 * km (masks), as the handle live on the new register; ids that are not a
 * live register's are kept (fj_emitv then says what is wrong with them). */
static uint32_t renamed(const fj_builder *b, uint32_t id, const uint8_t *vm, const uint8_t *km) {
    const unsigned cls = H_CLASS(id), p = H_PHYS(id);
    if ((cls != RC_VEC && cls != RC_K) || !H_TAG(id) || b->tag[cls][p] != H_TAG(id)) return id;
    const unsigned q = cls == RC_VEC ? vm[p] : km[p & 7];
    return q == p ? id : (uint32_t)cls << 30 | q << 25 | b->tag[cls][q];
}

void kb_replay(fj_builder *b, const kb_trace *t, int copies, const fj_reg *from, const fj_reg *to,
               int nmap) {
    if (!b || b->err) return;
    if (!t || t->bad || b->trace || copies < 1 || copies > KB_REPLAY_MAX || nmap < 0 ||
        (nmap && (!from || !to))) {
        kb_fail(b, "internal: replay of an unusable trace");
        return;
    }
    /* Vector registers by physical number, per copy: the templates take
     * them so. */
    static const uint8_t same[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    uint8_t vmap[KB_REPLAY_MAX][32], kmap[KB_REPLAY_MAX][8];
    for (int c = 0; c < copies; c++) {
        memcpy(vmap[c], same, 32);
        memcpy(kmap[c], same, 8);
        for (int i = 0; i < nmap; i++) {
            const int cls = (int)H_CLASS(from[i].id);
            const int pf = cls == RC_VEC || cls == RC_K ? live_phys(b, from[i], cls) : -1;
            const int pt = pf >= 0 ? live_phys(b, to[c * nmap + i], cls) : -1;
            if (pt < 0) {
                kb_fail(b, "kb_replay: handles 0x%08x -> 0x%08x are not live registers of one class "
                        "(vector or mask)", from[i].id, to[c * nmap + i].id);
                return;
            }
            if (cls == RC_VEC) vmap[c][pf] = (uint8_t)pt;
            else kmap[c][pf] = (uint8_t)pt;
        }
    }
    const int fast = kb_fast_paths();
    for (int k = 0; k < t->n; k++) {
        const kb_tinsn *e = &t->in[k];
        for (int c = 0; c < copies; c++) {
            fj_opnd o[4];
            if (!e->gen) {
                const uint8_t *m = vmap[c];
                const uint32_t r = e->regs;
                uint32_t regs = m[r & 0xff] | (uint32_t)m[r >> 8 & 0xff] << 8;
                if (e->nv > 2) regs |= (uint32_t)m[r >> 16 & 0xff] << 16;
                if (e->nv > 3) regs |= (uint32_t)m[r >> 24] << 24;
                if (e->evex) {
                    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return;
                    const uint64_t r64 = regs;
                    uint64_t w = x64_evex_regs(e->w, r64 >> e->sh[0] & 0xff, r64 >> e->sh[1] & 0xff,
                                               r64 >> e->sh[2] & 0xff);
                    size_t n = (size_t)(w >> 56);
                    w &= ~(0xffull << 56);
                    memcpy(b->code + b->len, &w, 8);
                    if (e->has_imm) b->code[b->len + n++] = (uint8_t)e->imm;
                    b->len += n;
                    continue;
                }
                if (fast) {
                    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return;
                    uint32_t feat;
                    int n = x64_vregs((x64_op)e->op, e->bits, regs, e->nv, e->imm, e->has_imm,
                                      b->code + b->len, &feat);
                    if (n > 0 && !(feat & ~b->features)) {
                        b->len += (size_t)n;
                        continue;
                    }
                }
                /* The general path (which also explains any error): the
                 * operands again, as the handles live on those registers. */
                for (int i = 0; i < e->nv; i++) {
                    unsigned p = regs >> 8 * i & 0xff;
                    o[i] = fj_reg_opnd_((fj_reg){(uint32_t)RC_VEC << 30 | p << 25 | b->tag[RC_VEC][p]},
                                        e->bits);
                }
                if (e->has_imm) o[e->nv] = fj_imm(e->imm);
            } else if (e->evex == 2) {
                /* A mask-register form: registers renamed by class. */
                const unsigned kops = e->sh[0];
                uint32_t regs = 0;
                for (int i = 0; i < e->nv; i++) {
                    const unsigned r = e->regs >> 8 * i & 0xff;
                    regs |= (uint32_t)(kops >> i & 1 ? kmap[c][r & 7] : vmap[c][r & 31]) << 8 * i;
                }
                if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return;
                uint32_t feat;
                b->len += (size_t)x64_vk_fill(e->w, regs, e->sh[1] ? kmap[c][e->sh[1]] : 0u,
                                              e->sh[2], e->imm, e->has_imm, b->code + b->len,
                                              &feat);
                continue;
            } else {
                memcpy(o, t->gen[e->gi], (size_t)e->nops * sizeof *o);
                for (int i = 0; i < e->nops; i++) {
                    o[i].reg.id = renamed(b, o[i].reg.id, vmap[c], kmap[c]);
                    o[i].index.id = renamed(b, o[i].index.id, vmap[c], kmap[c]);   /* gathers */
                    o[i].mask.id = renamed(b, o[i].mask.id, vmap[c], kmap[c]);
                }
            }
            fj_emitv(b, (fj_op)e->op, o, e->nops);
            if (b->err) return;
        }
    }
}
