/* x64_forms.c: the encoder's template paths, for the instructions compute
 * loops are made of. Each operand pattern is looked up once with the full
 * search (x64_encode.c) and kept as a few fields of the row it picks; then
 * an instruction of that pattern is encoded by filling in its registers
 * (and displacement) with shifts: no operand keys, no memo probe. */
#include <stdatomic.h>
#include <string.h>

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_enc_int.h"
#include "kernels/x64/x64_table.h"
#include "kernels/x64/x64_templ.h"

/* ---- register-only vector forms ------------------------------------------
 * Most instructions of eltwise bodies and GEMM tiles name only vector
 * registers of one width (shifts and ternary logic add an imm8). Their
 * bytes are a fixed pattern, a VEX or EVEX prefix, the opcode and a ModRM
 * of mod 11, with each register's bits in known fields. So the row the
 * full search picks for (mnemonic, width, any register >= 16, register
 * count, imm8) is looked up once and kept as a few fields, and encoding is
 * then a handful of shifts: no operand keys and no memo probe. A form that
 * does not fit the pattern is kept as absent and its instructions take
 * x64_encode. The x64_golden test compares every form, over register
 * numbers that set every prefix bit, with the full search.
 *
 * The table and the encoding from it are in x64_templ.h (inline for the
 * builder's hot path). */
enum { VF_NONE = X64_VF_NONE };
_Alignas(64) x64_vform x64_vforms[3][2][X64_OP_COUNT][3][2];

static int vf_fill(uint64_t f, const uint8_t *reg, int64_t imm, int has_imm, uint8_t *out) {
    unsigned map = x64_vf_map(f), pp = x64_vf_pp(f), w = x64_vf_w(f), l = x64_vf_ll(f);
    unsigned gop = x64_vf_g_opnd(f), eop = x64_vf_e_opnd(f), hop = x64_vf_h_opnd(f);
    unsigned g = gop == VF_NONE ? x64_vf_ext(f) : reg[gop], e = reg[eop];
    unsigned h = hop == VF_NONE ? 0 : reg[hop], lop = x64_vf_is4_opnd(f);
    uint8_t *p = out;
    if (x64_vf_evex(f)) {
        *p++ = 0x62;
        *p++ = (uint8_t)((~g & 8) << 4 | (~e & 16) << 2 | (~e & 8) << 2 | (~g & 16) | map);
        *p++ = (uint8_t)(w << 7 | (~h & 15) << 3 | 4 | pp);
        *p++ = (uint8_t)(l << 5 | (~h & 16) >> 1);
    } else if (map == XM_0F && !w && e < 8) {
        *p++ = 0xC5;
        *p++ = (uint8_t)((~g & 8) << 4 | (~h & 15) << 3 | l << 2 | pp);
    } else {
        *p++ = 0xC4;
        *p++ = (uint8_t)((~g & 8) << 4 | 1 << 6 | (~e & 8) << 2 | map);
        *p++ = (uint8_t)(w << 7 | (~h & 15) << 3 | l << 2 | pp);
    }
    *p++ = (uint8_t)x64_vf_opcode(f);
    *p++ = (uint8_t)(0xC0 | (g & 7) << 3 | (e & 7));
    if (lop != VF_NONE) *p++ = (uint8_t)(reg[lop] << 4);
    if (has_imm) *p++ = (uint8_t)imm;
    return (int)(p - out);
}

/* The form's word: the full search on canonical operands, and the row it
 * picks read back. */
static __attribute__((noinline)) uint64_t vf_make(x64_op op, int bits, int hi, int nregs,
                                                  int has_imm) {
    x64_opnd o[4];
    int n = nregs + has_imm;
    for (int i = 0; i < n; i++) {
        o[i] = (x64_opnd){.kind = X64_K_VEC, .bits = (uint16_t)bits, .reg = hi ? 16 : 0,
                          .base = X64_NOREG, .index = X64_NOREG};
        if (i == nregs) o[i] = (x64_opnd){.kind = X64_K_IMM, .imm = 0x5a, .base = X64_NOREG,
                                          .index = X64_NOREG};
    }
    x64_found fd;
    if (!x64_enc_find(op, o, n, &fd)) return X64_VF_ABSENT;
    const x64_row *r = fd.row;
    if (r->enc == XE_LEG || (r->flags & (XF_RM0 | XF_CC)) || r->w == XW_S) return X64_VF_ABSENT;
    unsigned gop = VF_NONE, eop = VF_NONE, hop = VF_NONE, lop = VF_NONE;
    for (int i = 0; i < n; i++) {
        int slot = X64_OPD_SLOT(r->opd[i]), c = X64_OPD_CLASS(r->opd[i]);
        if (i == nregs) {
            if (slot != XS_AUTO || (c != XC_I8 && c != XC_U8)) return X64_VF_ABSENT;
        } else if (slot == XS_G && gop == VF_NONE) gop = (unsigned)i;
        else if (slot == XS_E && eop == VF_NONE) eop = (unsigned)i;
        else if (slot == XS_H && hop == VF_NONE) hop = (unsigned)i;
        else if (slot == XS_L && lop == VF_NONE && !has_imm) lop = (unsigned)i;
        else return X64_VF_ABSENT;
    }
    if (eop == VF_NONE || (gop == VF_NONE) != (r->ext >= 0)) return X64_VF_ABSENT;
    unsigned l = fd.l == 512 ? 2 : fd.l == 256 ? 1 : 0;
    if (r->flags & XF_LIG) l = 0;
    if (fd.features >> 16) return X64_VF_ABSENT;
    /* Two VEX rows for these operands (the register moves' load and store
     * forms): which one is shorter depends on which register lands in
     * ModRM.rm, so no one template is the shortest encoding. (EVEX rows
     * never differ in length: the first one wins, as in the search.) */
    if (r->enc == XE_VEX && fd.vex_rows > 1) return X64_VF_ABSENT;
    return x64_vf_word(r->enc == XE_EVEX, X64_PFX_MAP(r->pfx), X64_PFX_PP(r->pfx), r->w == XW_1,
                       l, r->opc, gop, eop, hop, (unsigned)(r->ext >= 0 ? r->ext : 0), lop,
                       fd.features, has_imm && X64_OPD_CLASS(r->opd[nregs]) == XC_U8);
}

/* The form's bytes with registers 0 (see above), 0 for an absent form. */
static uint64_t vb_make(uint64_t f) {
    if (!x64_vf_present(f)) return 0;
    static const uint8_t zero[4];
    uint8_t buf[X64_MAX_LEN];
    int n = vf_fill(f, zero, 0, 0, buf) - (x64_vf_is4_opnd(f) != VF_NONE);   /* no is4 byte */
    uint64_t w = 0;
    memcpy(&w, buf, (size_t)n);
    return x64_vb_word(w, n);
}

uint64_t x64_vform_make(x64_vform *vf, x64_op op, int bits, int hi, int nregs, int has_imm) {
    uint64_t f = vf_make(op, bits, hi, nregs, has_imm);
    atomic_store_explicit(&vf->bytes, vb_make(f), memory_order_relaxed);
    atomic_store_explicit(&vf->f, f, memory_order_release);
    return f;
}

int x64_vform_fill(uint64_t f, uint32_t regs, int64_t imm, int has_imm, uint8_t *out) {
    const uint8_t reg[4] = {(uint8_t)regs, (uint8_t)(regs >> 8), (uint8_t)(regs >> 16),
                            (uint8_t)(regs >> 24)};
    return vf_fill(f, reg, imm, has_imm, out);
}

int x64_encode_vregs(x64_op op, int bits, const uint8_t *reg, int nregs, int64_t imm,
                     int has_imm, uint8_t *out, uint32_t *features) {
    if (nregs < 2 || nregs > 4) return 0;
    uint32_t regs = 0;
    for (int i = 0; i < nregs; i++) regs |= (uint32_t)reg[i] << 8 * i;
    return x64_vregs(op, bits, regs, nregs, imm, has_imm, out, features);
}

/* ---- 512-bit forms with one [base (+ index*scale) + disp] operand --------
 * The loads, stores and memory-source arithmetic of AVX-512 loops (relu's
 * vmaxps from memory, a GEMM tile's broadcasts, B loads and C updates):
 * zmm registers, one memory operand with a GPR base or [rip + disp32]
 * (constants: the disp32 is then the last four bytes before any imm8),
 * maybe a write mask on operand 0, {1to16} and an imm8. Only EVEX encodes
 * zmm, and EVEX rows do not differ in length, so the row the search picks
 * depends on the pattern alone, never on the registers or the
 * displacement: kept per pattern (x64_templ.h), the encoding is the EVEX
 * prefix from the registers, the opcode, and the ModRM/SIB/disp8*N the
 * full encoder would write. */
_Atomic uint64_t x64_vmforms[X64_VM_N];

/* The 512-bit EVEX form of a pattern, from canonical operands o (vector
 * registers 0, a mask register 1, the memory operand on rax with no
 * displacement, imm8 0x5a: in range for both kinds), absent (the present
 * bit clear) when the row does not fit. mem: the memory operand, or -1 for
 * register-only patterns, whose ModRM.rm operand then goes where a memory
 * form keeps its disp8 scale (bits 44-46). */
static __attribute__((noinline)) uint64_t form_make(x64_op op, const x64_opnd *o, int nops,
                                                    int mem, uint64_t key) {
    x64_found fd;
    if (!x64_enc_find(op, o, nops, &fd)) return key;
    const x64_row *r = fd.row;
    if (r->enc != XE_EVEX || (r->flags & (XF_RM0 | XF_CC | XF_LIG)) || r->w == XW_S ||
        fd.l != 512 || (fd.features >> 9))
        return key;
    unsigned gop = VF_NONE, eop = VF_NONE, hop = VF_NONE;
    uint64_t u8 = 0;
    for (int i = 0; i < nops; i++) {
        int slot = X64_OPD_SLOT(r->opd[i]), c = X64_OPD_CLASS(r->opd[i]);
        if (o[i].kind == X64_K_IMM) {
            if (i != nops - 1 || slot != XS_AUTO || (c != XC_I8 && c != XC_U8)) return key;
            u8 = c == XC_U8;
        } else if (i == mem) {
            if (slot != XS_E) return key;
        } else if (slot == XS_G && gop == VF_NONE) gop = (unsigned)i;
        else if (slot == XS_E && eop == VF_NONE && mem < 0) eop = (unsigned)i;
        else if (slot == XS_H && hop == VF_NONE) hop = (unsigned)i;
        else return key;
    }
    int n = fd.disp_scale;
    if ((gop == VF_NONE) != (r->ext >= 0) || (mem < 0 ? eop == VF_NONE : (n & (n - 1)) != 0))
        return key;
    const unsigned rm = mem < 0 ? eop : (unsigned)__builtin_ctz((unsigned)n);
    return x64_vm_word(key, X64_PFX_MAP(r->pfx), X64_PFX_PP(r->pfx), r->w == XW_1, r->opc, gop,
                       hop, (unsigned)(r->ext >= 0 ? r->ext : 0), rm, fd.features, (int)u8);
}

/* Keeps f for its pattern: in the pair's first slot, or its second if the
 * first holds another pattern (a later miss of that one takes the first
 * again). */
static void form_keep(uint64_t key, uint64_t f) {
    unsigned s = x64_vm_slot(key);
    if (x64_vm_pattern(atomic_load_explicit(&x64_vmforms[s], memory_order_relaxed)) != 0) s ^= 1;
    atomic_store_explicit(&x64_vmforms[s], f, memory_order_relaxed);
}

int x64_encode_vmem(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                    uint32_t *features) {
    if ((unsigned)op - 1u >= X64_OP_COUNT - 1u || nops < 2 || nops > 4) return 0;
    int mem = -1, imm = ops[nops - 1].kind == X64_K_IMM;
    uint32_t regs = 0;
    for (int i = 0; i < nops - imm; i++) {
        const x64_opnd *o = &ops[i];
        if (o->kind == X64_K_VEC && o->bits == 512 && o->reg < 32) {
            regs |= (uint32_t)o->reg << 8 * i;
            continue;
        }
        if (o->kind != X64_K_MEM || mem >= 0 ||
            (o->base >= 16 && (o->base != X64_RIP || o->index != X64_NOREG)) ||
            (o->index != X64_NOREG &&
             (o->index >= 16 || o->index == X64_RSP || (o->scale & (o->scale - 1)) ||
              o->scale == 0 || o->scale > 8)) ||
            (o->bits & (o->bits - 1)) || o->bits > 512 || o->bits == 1 || o->bits == 2 ||
            o->bits == 4)
            return 0;
        mem = i;
    }
    if (mem < 0 || ops[0].mask >= 8 || (ops[0].zero && !ops[0].mask)) return 0;
    for (int i = 1; i < nops; i++)
        if (ops[i].mask || ops[i].zero) return 0;
    const x64_opnd *o = &ops[mem];
    x64_vm_mem m = {o->base, o->index, o->index == X64_NOREG ? 1 : o->scale, o->bcst, o->bits,
                    o->disp};
    uint64_t key = x64_vm_key(op, nops, mem, &m, ops[0].mask, ops[0].zero, imm);
    uint64_t f = x64_vm_lookup(key);
    if (!f) {
        x64_opnd c[4];
        for (int i = 0; i < nops; i++) {
            c[i] = ops[i];
            if (c[i].kind == X64_K_VEC) c[i].reg = 0;
            if (c[i].kind == X64_K_IMM) c[i].imm = 0x5a;
        }
        c[mem].base = X64_RAX;   /* no REX bits, no displacement */
        c[mem].disp = 0;
        if (c[mem].index != X64_NOREG) {
            c[mem].index = X64_RCX;
            c[mem].scale = 1;
        }
        if (c[0].mask) c[0].mask = 1;
        form_keep(key, f = form_make(op, c, nops, mem, key));
    }
    if (!x64_vm_present(f)) return 0;
    return x64_vm_fill(f, regs, &m, ops[0].mask, ops[0].zero, imm ? ops[nops - 1].imm : 0, imm,
                       out, features);
}


uint64_t x64_vm_form(x64_op op, int nops, int mem, const x64_vm_mem *m, int masked, int zero,
                     int has_imm) {
    const uint64_t key = x64_vm_key(op, nops, mem, m, masked, zero, has_imm);
    uint64_t f = x64_vm_lookup(key);
    if (f || (unsigned)op - 1u >= X64_OP_COUNT - 1u || nops < 2 || nops > 4 || mem < 0 ||
        mem >= nops - (has_imm != 0))
        return f ? f : key;
    /* The canonical operands x64_encode_vmem makes of any instruction of
     * the pattern. */
    x64_opnd c[4];
    memset(c, 0, sizeof c);
    for (int i = 0; i < nops; i++) {
        c[i].base = c[i].index = X64_NOREG;
        c[i].scale = 1;
        if (has_imm && i == nops - 1) {
            c[i].kind = X64_K_IMM;
            c[i].imm = 0x5a;
        } else if (i == mem) {
            c[i].kind = X64_K_MEM;
            c[i].bits = m->bits;
            c[i].base = X64_RAX;   /* no REX bits, no displacement */
            if (m->index != X64_NOREG) c[i].index = X64_RCX;
            else c[i].scale = m->scale;
            c[i].bcst = m->bcst;
        } else {
            c[i].kind = X64_K_VEC;
            c[i].bits = 512;
        }
    }
    c[0].mask = masked ? 1 : 0;
    c[0].zero = (uint8_t)(zero != 0);
    form_keep(key, f = form_make(op, c, nops, mem, key));
    return f;
}

/* ---- 512-bit register-only forms with mask registers ---------------------- */

uint64_t x64_vk_form(x64_op op, int nops, unsigned kops, int masked, int zero, int has_imm) {
    const uint64_t key = x64_vk_key(op, nops, kops, masked, zero, has_imm);
    uint64_t f = x64_vm_lookup(key);
    if (f || (unsigned)op - 1u >= X64_OP_COUNT - 1u || nops < 2 || nops > 4) return f ? f : key;
    x64_opnd c[4];
    memset(c, 0, sizeof c);
    for (int i = 0; i < nops; i++) {
        c[i].base = c[i].index = X64_NOREG;
        if (has_imm && i == nops - 1) {
            c[i].kind = X64_K_IMM;
            c[i].imm = 0x5a;
        } else if (kops >> i & 1) {
            c[i].kind = X64_K_KREG;
            c[i].bits = 16;
            c[i].reg = 1;
        } else {
            c[i].kind = X64_K_VEC;
            c[i].bits = 512;
        }
    }
    c[0].mask = masked ? 1 : 0;
    c[0].zero = (uint8_t)(zero != 0);
    form_keep(key, f = form_make(op, c, nops, -1, key));
    return f;
}

/* ---- mask-destination compares with a constant-pool operand ------------- */

/* Read off the full encoder's bytes for these registers (see x64_templ.h). */
static __attribute__((noinline)) uint64_t vmk_make(x64_op op, uint32_t regs, const x64_vm_mem *m,
                                                   int64_t imm) {
    x64_opnd x[4];
    memset(x, 0, sizeof x);
    x[0].kind = X64_K_KREG;
    x[0].reg = (uint8_t)(regs & 7);
    x[0].bits = 16;
    x[1].kind = X64_K_VEC;
    x[1].reg = (uint8_t)(regs >> 8 & 31);
    x[1].bits = 512;
    x[2].kind = X64_K_MEM;
    x[2].base = X64_RIP;
    x[2].index = X64_NOREG;
    x[2].scale = 1;
    x[2].bits = m->bits;
    x[2].bcst = m->bcst;
    x[3].kind = X64_K_IMM;
    x[3].imm = imm;
    uint8_t want[X64_MAX_LEN + 8], got[X64_MAX_LEN + 8];
    x64_enc_info info;
    const int n = x64_encode(op, x, 4, want, &info);
    if (n != 11 || want[0] != 0x62 || (want[5] & 0xc7) != 5) return 0;
    /* ModRM.reg: operand 0, vvvv: operand 1; P0's mm, P1's pp and W, the
     * opcode byte as the encoder wrote them; the imm8 unsigned. */
    const uint64_t f = x64_vm_word(0, want[1] & 3u, want[2] & 3u, want[2] >> 7, want[4], 0, 1, 0,
                                   0, info.features, 1);
    uint32_t feat;
    if (x64_vm_fill(f, regs, m, 0, 0, imm, 1, got, &feat) != n || memcmp(got, want, 11)) return 0;
    return f;
}

/* Made forms by mnemonic (x64_templ.h): making one (the search, its tables
 * mostly out of cache by the next kernel) would be paid again by each
 * kernel that compares against constants. */
_Atomic uint64_t x64_vmk_forms[X64_OP_COUNT][2];

uint64_t x64_vmk_form(x64_op op, uint32_t regs, const x64_vm_mem *m, int64_t imm) {
    if ((unsigned)op - 1u >= X64_OP_COUNT - 1u) return 0;
    const int bc = m->bcst != 0, kept = m->bits == (bc ? 32 : 512);
    uint64_t f = kept ? atomic_load_explicit(&x64_vmk_forms[op][bc], memory_order_relaxed) : 0;
    if (!f) {
        if (!(f = vmk_make(op, regs, m, imm))) return 0;
        if (kept) atomic_store_explicit(&x64_vmk_forms[op][bc], f, memory_order_relaxed);
    }
    return f;
}

int x64_encode_vkregs(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                      uint32_t *features) {
    if ((unsigned)op - 1u >= X64_OP_COUNT - 1u || nops < 2 || nops > 4) return 0;
    const int imm = ops[nops - 1].kind == X64_K_IMM;
    uint32_t regs = 0;
    unsigned kops = 0, vecs = 0;
    for (int i = 0; i < nops - imm; i++) {
        const x64_opnd *o = &ops[i];
        if (o->kind == X64_K_VEC && o->bits == 512 && o->reg < 32) vecs++;
        else if (o->kind == X64_K_KREG && o->reg < 8) kops |= 1u << i;
        else return 0;
        regs |= (uint32_t)o->reg << 8 * i;
    }
    if (!vecs || (!kops && !ops[0].mask) || ops[0].mask >= 8 || (ops[0].zero && !ops[0].mask))
        return 0;
    for (int i = 1; i < nops; i++)
        if (ops[i].mask || ops[i].zero) return 0;
    uint64_t f = x64_vk_form(op, nops, kops, ops[0].mask, ops[0].zero, imm);
    if (!x64_vm_present(f)) return 0;
    return x64_vk_fill(f, regs, ops[0].mask, ops[0].zero, imm ? ops[nops - 1].imm : 0, imm, out,
                       features);
}

/* ---- loop control and frames ----------------------------------------------
 * A handful of legacy forms every kernel has (pointer and counter
 * updates, compares, the frame's register moves) and jumps: their bytes
 * are fixed by the table's rows, so they are written straight, without
 * the operand keys and the memo probe of x64_encode, whose cold memo lines
 * cost more than the rest when a kernel is made in a fresh runtime. The
 * rows (x64_table.c): group-1 ALU ops "n*8+1 /r" (r/m, r: the first of two
 * equal rows), "83 /n ib", "n*8+5 id" (rax, imm32: before "81 /n id");
 * mov "89 /r", "B8+r id" (32-bit), "C7 /0 id" (64-bit, sign-extended);
 * test "85 /r". x64_golden compares every case with the search. */
static int alu_ext(x64_op op) {
    switch (op) {
    case X64_ADD: return 0;
    case X64_OR: return 1;
    case X64_AND: return 4;
    case X64_SUB: return 5;
    case X64_XOR: return 6;
    case X64_CMP: return 7;
    default: return -1;
    }
}

int x64_encode_gpr(x64_op op, int bits, int r0, int r1, int64_t imm, uint8_t *out) {
    if ((bits != 32 && bits != 64) || (unsigned)r0 >= 16 || r1 >= 16) return 0;
    int n = alu_ext(op), w = bits == 64;
    uint8_t *p = out;
    const int unary = op == X64_INC ? 0 : op == X64_DEC ? 1 : op == X64_NOT ? 2 : op == X64_NEG ? 3 : -1;
    if ((unary >= 0) != (r1 == X64_GPR_UNARY)) return 0;
    if (unary >= 0) {   /* FF /0 inc, /1 dec; F7 /2 not, /3 neg */
        if (w || r0 >= 8) *p++ = (uint8_t)(0x40 | w << 3 | r0 >> 3);
        *p++ = unary < 2 ? 0xFF : 0xF7;
        *p++ = (uint8_t)(0xC0 | unary << 3 | (r0 & 7));
        return (int)(p - out);
    }
    if (op >= X64_CMOVO && op <= X64_CMOVG) {   /* 0F 40+cc /r: reg=r0, r/m=r1 */
        if (r1 < 0) return 0;
        if (w || r0 >= 8 || r1 >= 8) *p++ = (uint8_t)(0x40 | w << 3 | (r0 >> 3) << 2 | r1 >> 3);
        *p++ = 0x0F;
        *p++ = (uint8_t)(0x40 + (op - X64_CMOVO));
        *p++ = (uint8_t)(0xC0 | (r0 & 7) << 3 | (r1 & 7));
        return (int)(p - out);
    }
    if (r1 >= 0) {   /* op r/m=r0, reg=r1 */
        int opc = n >= 0 ? n * 8 + 1 : op == X64_MOV ? 0x89 : op == X64_TEST ? 0x85 : -1;
        if (opc < 0) return 0;
        if (w || r0 >= 8 || r1 >= 8) *p++ = (uint8_t)(0x40 | w << 3 | (r1 >> 3) << 2 | r0 >> 3);
        *p++ = (uint8_t)opc;
        *p++ = (uint8_t)(0xC0 | (r1 & 7) << 3 | (r0 & 7));
        return (int)(p - out);
    }
    if (imm < INT32_MIN || imm > INT32_MAX) return 0;
    int rex = w || r0 >= 8;
    if (op == X64_MOV) {
        if (!w) {   /* B8+r id */
            if (rex) *p++ = 0x41;
            *p++ = (uint8_t)(0xB8 + (r0 & 7));
        } else {    /* REX.W C7 /0 id */
            *p++ = (uint8_t)(0x48 | r0 >> 3);
            *p++ = 0xC7;
            *p++ = (uint8_t)(0xC0 | (r0 & 7));
        }
    } else if (n >= 0) {
        int i8 = imm >= -128 && imm <= 127;
        if (rex) *p++ = (uint8_t)(0x40 | w << 3 | r0 >> 3);
        if (i8) {
            *p++ = 0x83;
            *p++ = (uint8_t)(0xC0 | n << 3 | (r0 & 7));
            *p++ = (uint8_t)imm;
            return (int)(p - out);
        }
        if (r0 == X64_RAX) {
            *p++ = (uint8_t)(n * 8 + 5);
        } else {
            *p++ = 0x81;
            *p++ = (uint8_t)(0xC0 | n << 3 | (r0 & 7));
        }
    } else {
        return 0;
    }
    int32_t v = (int32_t)imm;
    memcpy(p, &v, 4);
    return (int)(p - out) + 4;
}

/* The REX.X and REX.B bits of memory operand m (bits 1 and 0). */
static unsigned mem_xb(const x64_vm_mem *m) {
    unsigned b = m->base == X64_RIP ? 0 : m->base, x = m->index == X64_NOREG ? 0 : m->index;
    return (x >> 3) << 1 | b >> 3;
}

int x64_encode_gpr_mem(x64_op op, int bits, int reg, int store, const x64_vm_mem *m,
                       uint8_t *out) {
    int pf = op == X64_PREFETCHT0 ? 1 : op == X64_PREFETCHT1 ? 2 : op == X64_PREFETCHNTA ? 0 : -1;
    int n = alu_ext(op), opc;
    if (pf >= 0) {
        reg = pf;
        bits = 32;   /* no REX.W */
    } else if ((bits != 32 && bits != 64) || (unsigned)reg >= 16) {
        return 0;
    }
    const int cmov = op >= X64_CMOVO && op <= X64_CMOVG;
    if (pf >= 0) opc = 0x18;
    else if (op == X64_MOV) opc = store ? 0x89 : 0x8B;
    else if (op == X64_LEA && !store) opc = 0x8D;
    else if (n >= 0 && !store) opc = n * 8 + 3;
    else if (cmov && !store) opc = 0x40 + (op - X64_CMOVO);   /* 0F 40+cc /r */
    else return 0;
    unsigned rex = (unsigned)(bits == 64) << 3 | (unsigned)(reg >> 3) << 2 | mem_xb(m);
    uint8_t *p = out;
    if (rex) *p++ = (uint8_t)(0x40 | rex);
    if (pf >= 0 || cmov) *p++ = 0x0F;
    *p++ = (uint8_t)opc;
    return (int)(x64_modrm_mem(p, (unsigned)reg, m, 0) - out);
}

/* 83 /n ib or 81 /n id (the short form whenever the immediate fits, as
 * the table search picks), mov: C7 /0 id. */
int x64_encode_mem_imm(x64_op op, int bits, const x64_vm_mem *m, int64_t imm, uint8_t *out) {
    const int n = alu_ext(op);
    if ((bits != 32 && bits != 64) || (n < 0 && op != X64_MOV) || imm < INT32_MIN || imm > INT32_MAX)
        return 0;
    unsigned rex = (unsigned)(bits == 64) << 3 | mem_xb(m);
    uint8_t *p = out;
    if (rex) *p++ = (uint8_t)(0x40 | rex);
    const int i8 = op != X64_MOV && imm >= -128 && imm <= 127;
    *p++ = op == X64_MOV ? 0xC7 : i8 ? 0x83 : 0x81;
    p = x64_modrm_mem(p, op == X64_MOV ? 0u : (unsigned)n, m, 0);
    if (i8) {
        *p++ = (uint8_t)imm;
    } else {
        const int32_t v = (int32_t)imm;
        memcpy(p, &v, 4);
        p += 4;
    }
    return (int)(p - out);
}

/* kmovw k, m16 (90 /r) and m16, k (91 /r): VEX.L0.0F.W0, two-byte VEX
 * unless the base or index is r8-r15. */
int x64_encode_kmov_mem(int store, int k, const x64_vm_mem *m, uint8_t *out) {
    if ((unsigned)k >= 8) return 0;
    const unsigned xb = mem_xb(m);
    uint8_t *p = out;
    if (!xb) {
        *p++ = 0xC5;
        *p++ = 0xF8;
    } else {
        *p++ = 0xC4;
        *p++ = (uint8_t)(0x80 | (~xb & 3) << 5 | 0x01);   /* R, ~X, ~B, map 0F */
        *p++ = 0x78;
    }
    *p++ = store ? 0x91 : 0x90;
    return (int)(x64_modrm_mem(p, (unsigned)k, m, 0) - out);
}

/* bzhi/shlx/shrx r0, r1, r2: VEX.LZ.0F38 (no prefix / 66 / F2) F5 or F7,
 * ModRM.reg = r0, r/m = r1, vvvv = r2. */
int x64_encode_gpr3(x64_op op, int bits, int r0, int r1, int r2, uint8_t *out) {
    int pp = op == X64_BZHI ? 0 : op == X64_SHLX ? 1 : op == X64_SHRX ? 3 : -1;
    if (pp < 0 || (bits != 32 && bits != 64) || (unsigned)(r0 | r1 | r2) >= 16) return 0;
    out[0] = 0xC4;
    out[1] = (uint8_t)((~r0 & 8) << 4 | 0x40 | (~r1 & 8) << 2 | 0x02);
    out[2] = (uint8_t)((bits == 64) << 7 | (~r2 & 15) << 3 | pp);
    out[3] = op == X64_BZHI ? 0xF5 : 0xF7;
    out[4] = (uint8_t)(0xC0 | (r0 & 7) << 3 | (r1 & 7));
    return 5;
}

/* kmovw between mask registers and 32-bit GPRs (k_dst, k_src: whether the
 * operand is a mask register): VEX.L0.0F.W0 90 (k, k), 92 (k, r32),
 * 93 (r32, k); two-byte VEX unless r/m is r8-r15. */
int x64_encode_kmov(int k_dst, int dst, int k_src, int src, uint8_t *out) {
    if ((unsigned)dst >= (k_dst ? 8u : 16u) || (unsigned)src >= (k_src ? 8u : 16u) ||
        (!k_dst && !k_src))
        return 0;
    uint8_t opc = k_dst && k_src ? 0x90 : k_dst ? 0x92 : 0x93;
    uint8_t *p = out;
    if (src < 8) {
        *p++ = 0xC5;
        *p++ = (uint8_t)((~dst & 8) << 4 | 0x78);
    } else {
        *p++ = 0xC4;
        *p++ = (uint8_t)((~dst & 8) << 4 | 0x40 | (~src & 8) << 2 | 0x01);
        *p++ = 0x78;
    }
    *p++ = opc;
    *p++ = (uint8_t)(0xC0 | (dst & 7) << 3 | (src & 7));
    return (int)(p - out);
}

int x64_encode_jump(x64_op op, int rel32, int32_t rel, uint8_t *out) {
    int cc = op >= X64_JO && op <= X64_JG ? (int)(op - X64_JO) : -1;
    if (op != X64_JMP && cc < 0) return 0;
    if (!rel32) {
        if (rel < -128 || rel > 127) return 0;
        out[0] = (uint8_t)(cc < 0 ? 0xEB : 0x70 + cc);
        out[1] = (uint8_t)rel;
        return 2;
    }
    int n = 0;
    if (cc < 0) {
        out[n++] = 0xE9;
    } else {
        out[n++] = 0x0F;
        out[n++] = (uint8_t)(0x80 + cc);
    }
    memcpy(out + n, &rel, 4);
    return n + 4;
}
