/* x64_templ.h: the encoder's template paths (x64_forms.c), their one entry
 * for the builder's fast paths (x64_encode_direct, at the end) and the one
 * description of their packed form words. Inline: the builder emits most
 * instructions of a compute loop through them, and out of line their
 * argument checks and calls cost as much as the encoding.
 * x64_encode_vregs and x64_encode_vmem are the same paths with the
 * encoder's operands, for tests and other callers.
 *
 * Two packed formats, each read and written only through its accessors
 * below (x64_vf_* and x64_vm_*), never by shifts outside this header:
 *
 * ---- the register-only form word (x64_vform.f, X64_VF_*) ----
 * One pair of words per form, indexed directly (nothing to hash or
 * compare), written at most once with the same values by any thread. The
 * form word:
 *   bit 0 known, 1 present, 2 EVEX, 3-4 map, 5-6 pp, 7 W, 8-9 L'L,
 *   10-17 opcode, 18-20 ModRM.reg operand (7: /ext), 21-22 ModRM.rm
 *   operand, 23-25 vvvv operand (7: none), 26-28 ext, 29-31 is4 operand
 *   (7: none), 32-47 features, 48 the imm8 is unsigned (0..255; else
 *   -128..127).
 * Beside it, the form's bytes word: its bytes with every register 0 (a
 * little-endian word, the byte count in bits 56-59): an instruction is
 * that word with each register's bits put in, the prefix's inverted
 * fields by XOR and ModRM's by OR; no field is decoded. Written before the
 * form word (release), so a reader that sees the form sees its bytes. Both
 * words in one cache line: a kernel's first instruction of a form often
 * finds the table cold.
 *
 * ---- the memory / mask-register form word (x64_vmforms, X64_VM_*) ----
 * 512-bit forms with one memory operand, and register-only zmm forms with
 * mask-register operands or a write mask: the pattern (x64_vm_key or
 * x64_vk_key) and its form together in one word (one atomic load, never
 * torn):
 *   bits 0-20 the pattern, 21 present, 22-23 map, 24-25 pp, 26 W, 27-34
 *   opcode, 35-37 ModRM.reg operand (7: /ext), 38-40 vvvv operand (7:
 *   none), 41-43 ext, 44-46 log2 of the disp8 scale N (memory forms) or
 *   44-45 the ModRM.rm operand (mask-register forms), 47-58 features
 *   (every X64_F_* bit), 59 the imm8 is unsigned.
 * Bit 21 is "present" here but part of the ModRM.rm operand in the
 * register-only word: each format has its own accessors. */
#ifndef FJ_X64_TEMPL_H
#define FJ_X64_TEMPL_H

#include <stdatomic.h>
#include <string.h>

#include "kernels/x64/x64.h"

enum { X64_VF_NONE = 7 };
typedef struct x64_vform {
    _Atomic uint64_t f;       /* the form word, 0 = not made yet */
    _Atomic uint64_t bytes;   /* its bytes with registers 0 */
} x64_vform;

/* ---- register-only form word: accessors ---- */
static inline int x64_vf_present(uint64_t f) { return (int)(f >> 1 & 1); }
static inline int x64_vf_evex(uint64_t f) { return (int)(f >> 2 & 1); }
static inline unsigned x64_vf_map(uint64_t f) { return (unsigned)(f >> 3 & 3); }
static inline unsigned x64_vf_pp(uint64_t f) { return (unsigned)(f >> 5 & 3); }
static inline unsigned x64_vf_w(uint64_t f) { return (unsigned)(f >> 7 & 1); }
static inline unsigned x64_vf_ll(uint64_t f) { return (unsigned)(f >> 8 & 3); }
static inline unsigned x64_vf_opcode(uint64_t f) { return (unsigned)(f >> 10 & 0xff); }
/* Which operand goes in ModRM.reg (X64_VF_NONE: the opcode extension). */
static inline unsigned x64_vf_g_opnd(uint64_t f) { return (unsigned)(f >> 18 & 7); }
/* Which operand goes in ModRM.rm (always one). */
static inline unsigned x64_vf_e_opnd(uint64_t f) { return (unsigned)(f >> 21 & 3); }
/* Which operand goes in vvvv (X64_VF_NONE: none). */
static inline unsigned x64_vf_h_opnd(uint64_t f) { return (unsigned)(f >> 23 & 7); }
static inline unsigned x64_vf_ext(uint64_t f) { return (unsigned)(f >> 26 & 7); }
/* Which operand goes in the is4 byte's bits 7:4 (X64_VF_NONE: none). */
static inline unsigned x64_vf_is4_opnd(uint64_t f) { return (unsigned)(f >> 29 & 7); }
static inline uint32_t x64_vf_features(uint64_t f) { return (uint32_t)(f >> 32 & 0xffff); }
static inline int x64_vf_imm_unsigned(uint64_t f) { return (int)(f >> 48 & 1); }
/* The word of an absent form (known, not present). */
#define X64_VF_ABSENT ((uint64_t)1)
/* The word of a present form from its fields (operands as the accessors
 * above return them; features must fit 16 bits). */
static inline uint64_t x64_vf_word(int evex, unsigned map, unsigned pp, unsigned w, unsigned ll,
                                   unsigned opcode, unsigned gop, unsigned eop, unsigned hop,
                                   unsigned ext, unsigned lop, uint32_t features,
                                   int imm_unsigned) {
    return 1 | 2 | (uint64_t)(evex != 0) << 2 | (uint64_t)map << 3 | (uint64_t)pp << 5 |
           (uint64_t)w << 7 | (uint64_t)ll << 8 | (uint64_t)opcode << 10 | (uint64_t)gop << 18 |
           (uint64_t)eop << 21 | (uint64_t)hop << 23 | (uint64_t)ext << 26 | (uint64_t)lop << 29 |
           (uint64_t)features << 32 | (uint64_t)(imm_unsigned != 0) << 48;
}

/* ---- register-only bytes word: accessors ---- */
/* The byte count (without is4 and imm8 bytes). */
static inline int x64_vb_len(uint64_t w) { return (int)(w >> 56); }
/* The bytes themselves, the count cleared (bytes past the count are 0). */
static inline uint64_t x64_vb_bytes(uint64_t w) { return w & ~(0xffull << 56); }
/* The bytes' first byte (0x62 EVEX, 0xC4 VEX3, 0xC5 VEX2). */
static inline unsigned x64_vb_lead(uint64_t w) { return (uint8_t)w; }
static inline uint64_t x64_vb_word(uint64_t bytes, int n) { return bytes | (uint64_t)n << 56; }

/* ---- memory / mask-register form word: accessors ---- */
enum { X64_VM_BITS = 9, X64_VM_N = 1 << X64_VM_BITS, X64_VM_KEY = (1 << 21) - 1 };
static inline uint64_t x64_vm_pattern(uint64_t f) { return f & X64_VM_KEY; }
static inline int x64_vm_present(uint64_t f) { return (int)(f >> 21 & 1); }
static inline unsigned x64_vm_map(uint64_t f) { return (unsigned)(f >> 22 & 3); }
static inline unsigned x64_vm_pp(uint64_t f) { return (unsigned)(f >> 24 & 3); }
static inline unsigned x64_vm_w(uint64_t f) { return (unsigned)(f >> 26 & 1); }
static inline unsigned x64_vm_opcode(uint64_t f) { return (unsigned)(f >> 27 & 0xff); }
/* Which operand goes in ModRM.reg (X64_VF_NONE: the opcode extension). */
static inline unsigned x64_vm_g_opnd(uint64_t f) { return (unsigned)(f >> 35 & 7); }
/* Which operand goes in vvvv (X64_VF_NONE: none). */
static inline unsigned x64_vm_h_opnd(uint64_t f) { return (unsigned)(f >> 38 & 7); }
static inline unsigned x64_vm_ext(uint64_t f) { return (unsigned)(f >> 41 & 7); }
/* Memory forms: log2 of the disp8 scale N. */
static inline unsigned x64_vm_disp_shift(uint64_t f) { return (unsigned)(f >> 44 & 7); }
/* Mask-register forms: which operand goes in ModRM.rm. */
static inline unsigned x64_vm_rm_opnd(uint64_t f) { return (unsigned)(f >> 44 & 3); }
_Static_assert(X64_F_ALL == 0xfff, "the memory form word keeps 12 feature bits");
static inline uint32_t x64_vm_features(uint64_t f) { return (uint32_t)(f >> 47 & 0xfff); }
static inline int x64_vm_imm_unsigned(uint64_t f) { return (int)(f >> 59 & 1); }
/* The word of a present form for pattern key from its fields (rm: the
 * disp8 scale's log2 for a memory form, the ModRM.rm operand for a
 * mask-register one; features must fit 12 bits). An absent form's word is
 * its pattern alone. */
static inline uint64_t x64_vm_word(uint64_t key, unsigned map, unsigned pp, unsigned w,
                                   unsigned opcode, unsigned gop, unsigned hop, unsigned ext,
                                   unsigned rm, uint32_t features, int imm_unsigned) {
    return key | 1ull << 21 | (uint64_t)map << 22 | (uint64_t)pp << 24 | (uint64_t)w << 26 |
           (uint64_t)opcode << 27 | (uint64_t)gop << 35 | (uint64_t)hop << 38 |
           (uint64_t)ext << 41 | (uint64_t)rm << 44 | (uint64_t)features << 47 |
           (uint64_t)(imm_unsigned != 0) << 59;
}

/* [width 128/256/512][any register >= 16][mnemonic][registers - 2][imm8]:
 * the forms one kind of kernel uses together (zmm: one width, registers
 * 16-31 as well) in 15 KiB rather than spread over 90 (in a new runtime
 * the table is cold, its pages too). */
FJ_INTERNAL extern x64_vform x64_vforms[3][2][X64_OP_COUNT][3][2];
/* Makes vf's words with the full search; returns the form word. */
FJ_INTERNAL uint64_t x64_vform_make(x64_vform *vf, x64_op op, int bits, int hi, int nregs,
                                    int has_imm);

/* The form word of a register-only form (x64_vforms' indices: width index
 * 0/1/2 for 128/256/512, any register >= 16, mnemonic, register count,
 * imm8), made on first use, and in *bytes its bytes word. */
static inline uint64_t x64_vform_get(x64_op op, int wi, int hi, int nregs, int has_imm,
                                     uint64_t *bytes) {
    static const int bits[3] = {128, 256, 512};
    x64_vform *vf = &x64_vforms[wi][hi][op][nregs - 2][has_imm];
    uint64_t f = atomic_load_explicit(&vf->f, memory_order_acquire);
    if (!f) f = x64_vform_make(vf, op, bits[wi], hi, nregs, has_imm);
    *bytes = atomic_load_explicit(&vf->bytes, memory_order_relaxed);
    return f;
}
/* The encoding from the form word's fields (a VEX2 form whose rm register
 * is 8-15 takes VEX3, which its bytes word does not hold). */
FJ_INTERNAL int x64_vform_fill(uint64_t f, uint32_t regs, int64_t imm, int has_imm,
                               uint8_t *out);

/* Whether imm fits a form's imm8: 0..255 when the form's imm8 is
 * unsigned, -128..127 when it is signed. */
static inline int x64_imm8_fits(int is_unsigned, int64_t imm) {
    return is_unsigned ? imm >= 0 && imm <= 255 : imm >= -128 && imm <= 127;
}

/* An EVEX form's bytes word with registers g (ModRM.reg), e (ModRM.rm)
 * and h (vvvv) put in: R X B R' in P0, vvvv in P1, V' in P2, then opcode,
 * ModRM. */
static inline uint64_t x64_evex_regs(uint64_t w, uint64_t g, uint64_t e, uint64_t h) {
    w ^= (g & 8) << 12 | (g & 16) << 8 | (e & 24) << 10 | (h & 15) << 19 | (h & 16) << 23;
    return w | (g & 7) << 43 | (e & 7) << 40;
}

/* See x64_encode_vregs (x64.h); the registers packed, operand i's in
 * bits 8i..8i+7 (the others 0): shifted out rather than loaded back from
 * an array just stored, which would put a store-forwarding wait on the
 * path from the form word to the bytes. */
static inline int x64_vregs(x64_op op, int bits, uint32_t regs, int nregs, int64_t imm,
                            int has_imm, uint8_t *out, uint32_t *features) {
    if ((unsigned)op - 1u >= X64_OP_COUNT - 1u || nregs < 2 || nregs + (has_imm != 0) > 4)
        return 0;
    int wi = bits == 512 ? 2 : bits == 256 ? 1 : bits == 128 ? 0 : -1;
    unsigned any = (regs | regs >> 8 | regs >> 16 | regs >> 24) & 0xff;
    if (wi < 0 || any >= 32) return 0;
    /* zmm: only EVEX encodes it, whatever the registers, and EVEX rows do
     * not differ in length, so one form serves registers 0-31 (one table
     * line to touch, and the one replays use). */
    int hi = (any >> 4 & 1) | (wi == 2), ii = has_imm != 0;
    x64_vform *vf = &x64_vforms[wi][hi][op][nregs - 2][ii];
    uint64_t f = atomic_load_explicit(&vf->f, memory_order_acquire);
    if (__builtin_expect(!f, 0)) f = x64_vform_make(vf, op, bits, hi, nregs, ii);
    if (!x64_vf_present(f) || (ii && !x64_imm8_fits(x64_vf_imm_unsigned(f), imm))) return 0;
    *features = x64_vf_features(f);
    unsigned gop = x64_vf_g_opnd(f), hop = x64_vf_h_opnd(f), lop = x64_vf_is4_opnd(f);
    uint64_t g = gop == X64_VF_NONE ? 0 : regs >> 8 * gop & 0xff;
    uint64_t e = regs >> x64_vf_e_opnd(f) * 8 & 0xff;
    uint64_t h = hop == X64_VF_NONE ? 0 : regs >> 8 * hop & 0xff;
    uint64_t w = atomic_load_explicit(&vf->bytes, memory_order_relaxed);
    int n = x64_vb_len(w);
    switch (x64_vb_lead(w)) {
    case 0x62:
        w = x64_evex_regs(w, g, e, h);
        break;
    case 0xC4:   /* VEX3: R X B, then W vvvv L pp, opcode, ModRM */
        w ^= (g & 8) << 12 | (e & 8) << 10 | (h & 15) << 19;
        w |= (g & 7) << 35 | (e & 7) << 32;
        break;
    default:     /* VEX2: R vvvv L pp, opcode, ModRM; an rm of 8-15 needs VEX3 */
        if (e & 8) return x64_vform_fill(f, regs, imm, has_imm, out);
        w ^= (g & 8) << 12 | (h & 15) << 11;
        w |= (g & 7) << 27 | (e & 7) << 24;
        break;
    }
    w = x64_vb_bytes(w);
    memcpy(out, &w, 8);   /* out has X64_MAX_LEN bytes; those past n are rewritten or unused */
    if (lop != X64_VF_NONE) out[n++] = (uint8_t)((regs >> 8 * lop & 0xff) << 4);
    if (has_imm) out[n++] = (uint8_t)imm;
    return n;
}

/* ---- 512-bit forms with one memory operand ----
 * The row the search picks depends on the pattern alone (EVEX rows do not
 * differ in length): mnemonic, operand count, where the memory operand
 * is, its width, broadcast, index or not, masking, imm8. The patterns are
 * too many to index directly: a 2-way hashed table of memory form words
 * (see the top of this header), filled by x64_encode_vmem on a miss. */
FJ_INTERNAL extern _Atomic uint64_t x64_vmforms[X64_VM_N];

static inline uint64_t x64_vm_key(x64_op op, int nops, int mem, const x64_vm_mem *m, int masked,
                                  int zero, int has_imm) {
    unsigned mb = m->bits == 0 ? 0 : (unsigned)__builtin_ctz(m->bits) - 2;  /* 8..512: 1..7 */
    return (uint64_t)op | (uint64_t)(nops - 1) << 8 | (uint64_t)mem << 10 |
           (uint64_t)(mb & 7) << 12 | (uint64_t)(m->bcst != 0) << 15 | (uint64_t)(masked != 0) << 16 |
           (uint64_t)(zero != 0) << 17 | (uint64_t)(has_imm != 0) << 18 |
           (uint64_t)(m->index != X64_NOREG) << 19;
}

static inline unsigned x64_vm_slot(uint64_t key) {
    return (unsigned)((key * 0x9e3779b97f4a7c15ull) >> (64 - X64_VM_BITS)) & ~1u;
}

/* The form word of a pattern, or 0 when it is not in the table yet. */
static inline uint64_t x64_vm_lookup(uint64_t key) {
    unsigned s = x64_vm_slot(key);
    uint64_t f = atomic_load_explicit(&x64_vmforms[s], memory_order_relaxed);
    if (x64_vm_pattern(f) == key) return f;
    f = atomic_load_explicit(&x64_vmforms[s ^ 1], memory_order_relaxed);
    return x64_vm_pattern(f) == key ? f : 0;
}

/* ModRM, SIB and displacement of a memory operand with ModRM.reg = reg:
 * [rip + disp32], or mod 00 / disp8 (scaled down by 1 << sh, EVEX's N) /
 * disp32, as the full encoder writes them (rbp and r13 as a base need a
 * displacement; rsp and r12 as a base, and any index, a SIB byte). */
static inline uint8_t *x64_modrm_mem(uint8_t *p, unsigned reg, const x64_vm_mem *m, unsigned sh) {
    reg = (reg & 7) << 3;
    int32_t d = m->disp;
    if (m->base == X64_RIP) {
        *p++ = (uint8_t)(reg | 5);
        memcpy(p, &d, 4);
        return p + 4;
    }
    unsigned b = m->base & 7, mod;
    if (d == 0 && b != 5) mod = 0;
    else if (!(d & ((1 << sh) - 1)) && (d >> sh) >= -128 && (d >> sh) <= 127) mod = 1;
    else mod = 2;
    if (m->index != X64_NOREG || b == 4) {
        *p++ = (uint8_t)(mod << 6 | reg | 4);
        *p++ = (uint8_t)((m->index == X64_NOREG ? 0u : (unsigned)__builtin_ctz(m->scale)) << 6 |
                         (m->index == X64_NOREG ? 4u : m->index & 7u) << 3 | b);
    } else {
        *p++ = (uint8_t)(mod << 6 | reg | b);
    }
    if (mod == 1) {
        *p++ = (uint8_t)(int8_t)(d >> sh);
    } else if (mod == 2) {
        memcpy(p, &d, 4);
        p += 4;
    }
    return p;
}

/* Where x64_vm_fill's ModRM byte sits: after EVEX's four bytes and the
 * opcode (memory and displacement follow it, then the imm8). */
enum { X64_VM_MODRM_AT = 5 };
/* The ModRM.reg field of a ModRM byte. */
static inline unsigned x64_modrm_reg(uint8_t modrm) { return (unsigned)(modrm >> 3 & 7); }

/* Encodes with form word f (present): registers packed as for x64_vregs
 * (the memory operand's byte unused), the memory operand, operand 0's
 * write mask (0: none) and zeroing, the imm8. Returns the length, or 0
 * when the imm8 is out of the form's range. */
static inline __attribute__((always_inline)) int x64_vm_fill(uint64_t f, uint32_t regs, const x64_vm_mem *m, unsigned mask,
                              unsigned zero, int64_t imm, int has_imm, uint8_t *out,
                              uint32_t *features) {
    if (has_imm && !x64_imm8_fits(x64_vm_imm_unsigned(f), imm)) return 0;
    unsigned gop = x64_vm_g_opnd(f), hop = x64_vm_h_opnd(f);
    unsigned g = gop == X64_VF_NONE ? x64_vm_ext(f) : regs >> 8 * gop & 0xff;
    unsigned h = hop == X64_VF_NONE ? 0 : regs >> 8 * hop & 0xff;
    unsigned b = m->base == X64_RIP ? 0 : m->base, x = m->index == X64_NOREG ? 0 : m->index;
    uint8_t *p = out;
    p[0] = 0x62;
    p[1] = (uint8_t)((~g & 8) << 4 | (~x & 8) << 3 | (~b & 8) << 2 | (~g & 16) | x64_vm_map(f));
    p[2] = (uint8_t)(x64_vm_w(f) << 7 | (~h & 15) << 3 | 4 | x64_vm_pp(f));
    p[3] = (uint8_t)(zero << 7 | 2 << 5 | (m->bcst != 0) << 4 | (~h & 16) >> 1 | mask);
    p[4] = (uint8_t)x64_vm_opcode(f);
    p = x64_modrm_mem(p + X64_VM_MODRM_AT, g, m, x64_vm_disp_shift(f));
    if (has_imm) *p++ = (uint8_t)imm;
    *features = x64_vm_features(f);
    return (int)(p - out);
}

/* ---- 512-bit register-only forms with mask registers ----
 * What x64_vregs leaves of register-only zmm instructions: mask-register
 * operands (vcmpps k, zmm, zmm, imm8) and a write mask on operand 0
 * (vsubps zmm{k}, zmm, zmm). The row depends on the pattern alone, as for
 * the memory forms, and they share that table, their keys marked by bit
 * 20: bits 0-7 mnemonic, 8-9 operands - 1, 12-15 which operands are mask
 * registers, 16 masked, 17 zeroing, 18 imm8. The form word is a memory
 * form word with the ModRM.rm operand (x64_vm_rm_opnd) where the disp8
 * scale would be. Made by x64_vk_form on a miss. */
static inline uint64_t x64_vk_key(x64_op op, int nops, unsigned kops, int masked, int zero,
                                  int has_imm) {
    return (uint64_t)op | (uint64_t)(nops - 1) << 8 | (uint64_t)(kops & 15) << 12 |
           (uint64_t)(masked != 0) << 16 | (uint64_t)(zero != 0) << 17 |
           (uint64_t)(has_imm != 0) << 18 | 1ull << 20;
}

/* The form word of a pattern (x64_vk_key's arguments), made with the
 * search on a miss and kept; absent (!x64_vm_present) when the pattern
 * has no such form. */
FJ_INTERNAL uint64_t x64_vk_form(x64_op op, int nops, unsigned kops, int masked, int zero,
                                 int has_imm);

/* Encodes with form word f (present): registers packed as for x64_vregs
 * (a mask register's number for a mask operand), operand 0's write mask
 * (0: none) and zeroing, the imm8. Returns the length, or 0 when the imm8
 * is out of the form's range. */
static inline __attribute__((always_inline)) int x64_vk_fill(uint64_t f, uint32_t regs,
                                                             unsigned mask, unsigned zero,
                                                             int64_t imm, int has_imm,
                                                             uint8_t *out, uint32_t *features) {
    if (has_imm && !x64_imm8_fits(x64_vm_imm_unsigned(f), imm)) return 0;
    const unsigned gop = x64_vm_g_opnd(f), hop = x64_vm_h_opnd(f);
    const unsigned g = gop == X64_VF_NONE ? x64_vm_ext(f) : regs >> 8 * gop & 0xff;
    const unsigned h = hop == X64_VF_NONE ? 0 : regs >> 8 * hop & 0xff;
    const unsigned e = regs >> 8 * x64_vm_rm_opnd(f) & 0xff;
    out[0] = 0x62;   /* rm's bit 4 is EVEX.X in register form */
    out[1] = (uint8_t)((~g & 8) << 4 | (~e & 16) << 2 | (~e & 8) << 2 | (~g & 16) | x64_vm_map(f));
    out[2] = (uint8_t)(x64_vm_w(f) << 7 | (~h & 15) << 3 | 4 | x64_vm_pp(f));
    out[3] = (uint8_t)(zero << 7 | 2 << 5 | (~h & 16) >> 1 | mask);
    out[4] = (uint8_t)x64_vm_opcode(f);
    out[5] = (uint8_t)(0xc0 | (g & 7) << 3 | (e & 7));
    int n = 6;
    if (has_imm) out[n++] = (uint8_t)imm;
    *features = x64_vm_features(f);
    return n;
}

/* The form word (a memory form word, filled by x64_vm_fill) of a
 * mask-destination compare with a constant-pool operand and an imm8
 * (vcmpps k, zmm, [rip + disp32]{1toN}, imm8): operand 0 a mask register
 * in ModRM.reg, operand 1 the zmm in vvvv, the memory operand (m, base
 * X64_RIP) in ModRM.rm; the memory forms' table has no such pattern. Read
 * off the full encoder's bytes for registers regs (packed as for
 * x64_vregs) and imm, and kept only when filling it in gives those bytes
 * back; 0 when there is none. */
FJ_INTERNAL uint64_t x64_vmk_form(x64_op op, uint32_t regs, const x64_vm_mem *m, int64_t imm);
/* Its forms kept by mnemonic, for a broadcast dword and for a whole zmm
 * (the word does not depend on the registers): x64_vmk_find reads them
 * inline, a kernel's trace asking for them again and again. */
FJ_INTERNAL extern _Atomic uint64_t x64_vmk_forms[X64_OP_COUNT][2];
static inline uint64_t x64_vmk_find(x64_op op, uint32_t regs, const x64_vm_mem *m, int64_t imm) {
    const int bc = m->bcst != 0;
    const uint64_t f = m->bits == (bc ? 32 : 512) && (unsigned)op - 1u < X64_OP_COUNT - 1u
                           ? atomic_load_explicit(&x64_vmk_forms[op][bc], memory_order_relaxed)
                           : 0;
    return f ? f : x64_vmk_form(op, regs, m, imm);
}

/* Legacy forms with a memory operand every kernel has (x64_forms.c):
 * prefetcht0/t1/nta [m]; mov r, [m] and mov [m], r (store); lea r, [m];
 * add, sub, and, or, xor, cmp r, [m]; cmovcc r, [m]; 32- or 64-bit
 * registers. Returns the length, 0 for anything else. */
FJ_INTERNAL int x64_encode_gpr_mem(x64_op op, int bits, int reg, int store, const x64_vm_mem *m,
                                   uint8_t *out);
/* add, sub, and, or, xor, cmp [m], imm and mov [m], imm: 32- or 64-bit
 * memory, an immediate in int32 range. A [rip + disp32] operand's disp32
 * is written as given (the immediate follows it). Returns the length, 0
 * for anything else. */
FJ_INTERNAL int x64_encode_mem_imm(x64_op op, int bits, const x64_vm_mem *m, int64_t imm,
                                   uint8_t *out);
/* kmovw k, [m] and (store) kmovw [m], k. Returns the length, 0 for a mask
 * register past k7. */
FJ_INTERNAL int x64_encode_kmov_mem(int store, int k, const x64_vm_mem *m, uint8_t *out);

/* The form word of a 512-bit memory-operand pattern (x64_vm_key's
 * arguments), from the table or made with the search and kept; absent
 * (!x64_vm_present) when the pattern has no such form. */
FJ_INTERNAL uint64_t x64_vm_form(x64_op op, int nops, int mem, const x64_vm_mem *m, int masked,
                                 int zero, int has_imm);
/* The same with the table probed inline: the call only on a miss. */
static inline uint64_t x64_vm_find(x64_op op, int nops, int mem, const x64_vm_mem *m, int masked,
                                   int zero, int has_imm) {
    const uint64_t f = x64_vm_lookup(x64_vm_key(op, nops, mem, m, masked, zero, has_imm));
    return f ? f : x64_vm_form(op, nops, mem, m, masked, zero, has_imm);
}

/* ---- the template paths' one entry ----
 * An instruction in physical terms, as one of the template paths above
 * takes it: the caller (the builder's fj_emitv) sorts its operands into
 * one of these kinds and x64_encode_direct encodes it, so that every fast
 * path enters the encoder here. */
typedef enum x64_dkind {
    X64_D_VREGS,     /* vector registers of one width, a last imm8: x64_vregs */
    X64_D_ZMM_K,     /* zmm with mask-register operands or a write mask: x64_vk_form */
    X64_D_ZMM_MEM,   /* zmm and one memory operand (maybe a write mask): x64_vm_form */
    X64_D_GPR,       /* x64_encode_gpr */
    X64_D_GPR3,      /* x64_encode_gpr3 */
    X64_D_KMOV,      /* x64_encode_kmov */
    X64_D_KMOV_MEM,  /* x64_encode_kmov_mem */
    X64_D_GPR_MEM,   /* x64_encode_gpr_mem */
    X64_D_MEM_IMM,   /* x64_encode_mem_imm */
} x64_dkind;

typedef struct x64_direct {
    uint8_t kind;       /* x64_dkind */
    uint8_t nops;       /* VREGS: registers; ZMM_*: operands, the imm8 included */
    uint8_t has_imm;    /* VREGS, ZMM_*: a last imm8 */
    uint8_t store;      /* GPR_MEM, KMOV_MEM: the memory operand is the destination */
    uint8_t mask;       /* ZMM_*: operand 0's write mask, 0: none */
    uint8_t zero;       /* ZMM_*: zeroing-masking */
    uint8_t mem;        /* ZMM_MEM: the memory operand's index */
    uint8_t kops;       /* ZMM_K: bit i, operand i is a mask register; KMOV: bit 0 the
                           destination, bit 1 the source is a mask register */
    uint16_t bits;      /* VREGS: vector width; GPR, GPR3, GPR_MEM, MEM_IMM: operand size */
    uint32_t regs;      /* VREGS, ZMM_*: registers, operand i's in bits 8i..8i+7 */
    int r0, r1, r2;     /* GPR (r1: -1 an immediate, X64_GPR_UNARY none), GPR3, KMOV
                           (r0 destination, r1 source), KMOV_MEM and GPR_MEM (r0) */
    int64_t imm;
    x64_vm_mem m;       /* ZMM_MEM, KMOV_MEM, GPR_MEM, MEM_IMM */
} x64_direct;

/* Encodes d into out (X64_MAX_LEN bytes of room): the length, or 0 when
 * the kind has no such form (the caller then takes the full search,
 * which explains). *features: the CPU features the encoding needs. */
static inline __attribute__((always_inline)) int x64_encode_direct(x64_op op,
                                                                   const x64_direct *d,
                                                                   uint8_t *out,
                                                                   uint32_t *features) {
    uint64_t f;
    *features = 0;
    switch ((x64_dkind)d->kind) {
    case X64_D_VREGS:
        return x64_vregs(op, d->bits, d->regs, d->nops, d->imm, d->has_imm, out, features);
    case X64_D_ZMM_K:
        f = x64_vk_form(op, d->nops, d->kops, d->mask, d->zero, d->has_imm);
        if (!x64_vm_present(f)) return 0;
        return x64_vk_fill(f, d->regs, d->mask, d->zero, d->imm, d->has_imm, out, features);
    case X64_D_ZMM_MEM:
        f = x64_vm_find(op, d->nops, d->mem, &d->m, d->mask, d->zero, d->has_imm);
        if (!x64_vm_present(f)) return 0;
        return x64_vm_fill(f, d->regs, &d->m, d->mask, d->zero, d->imm, d->has_imm, out,
                           features);
    case X64_D_GPR:
        return x64_encode_gpr(op, d->bits, d->r0, d->r1, d->imm, out);
    case X64_D_GPR3:
        return x64_encode_gpr3(op, d->bits, d->r0, d->r1, d->r2, out);
    case X64_D_KMOV:
        return x64_encode_kmov(d->kops & 1, d->r0, d->kops >> 1 & 1, d->r1, out);
    case X64_D_KMOV_MEM:
        return x64_encode_kmov_mem(d->store, d->r0, &d->m, out);
    case X64_D_GPR_MEM:
        return x64_encode_gpr_mem(op, d->bits, d->r0, d->store, &d->m, out);
    case X64_D_MEM_IMM:
        return x64_encode_mem_imm(op, d->bits, &d->m, d->imm, out);
    }
    return 0;
}

#endif
