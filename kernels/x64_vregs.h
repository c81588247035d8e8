/* x64_vregs.h: the register-only template path of the encoder (see
 * x64_forms.c), inline: the builder emits most instructions of a compute
 * loop through it, and out of line its argument checks and call cost as
 * much as the encoding. x64_encode_vregs is the same function, for tests.
 *
 * One pair of words per form, indexed directly (nothing to hash or
 * compare), written at most once with the same values by any thread. The
 * form word:
 *   bit 0 known, 1 present, 2 EVEX, 3-4 map, 5-6 pp, 7 W, 8-9 L'L,
 *   10-17 opcode, 18-20 ModRM.reg operand (7: /ext), 21-22 ModRM.rm
 *   operand, 23-25 vvvv operand (7: none), 26-28 ext, 29-31 is4 operand
 *   (7: none), 32-47 features, 48 the imm8 is unsigned (0..255; else
 *   -128..127).
 * Beside it, the form's bytes with every register 0 (a little-endian
 * word, the byte count in bits 56-59): an instruction is that word with
 * each register's bits put in, the prefix's inverted fields by XOR and
 * ModRM's by OR; no field is decoded. Written before the form word
 * (release), so a reader that sees the form sees its bytes. Both words in
 * one cache line: a kernel's first instruction of a form often finds the
 * table cold. */
#ifndef FJ_X64_VREGS_H
#define FJ_X64_VREGS_H

#include <stdatomic.h>
#include <string.h>

#include "kernels/x64.h"

enum { X64_VF_NONE = 7 };
typedef struct x64_vform {
    _Atomic uint64_t f;       /* the form word, 0 = not made yet */
    _Atomic uint64_t bytes;   /* its bytes with registers 0 */
} x64_vform;

/* [mnemonic][width 128/256/512][any register >= 16][registers - 2][imm8] */
FJ_INTERNAL extern x64_vform x64_vforms[X64_OP_COUNT][3][2][3][2];
/* Makes vf's words with the full search; returns the form word. */
FJ_INTERNAL uint64_t x64_vform_make(x64_vform *vf, x64_op op, int bits, int hi, int nregs,
                                    int has_imm);
/* The encoding from the form word's fields (a VEX2 form whose rm register
 * is 8-15 takes VEX3, which its bytes word does not hold). */
FJ_INTERNAL int x64_vform_fill(uint64_t f, uint32_t regs, int64_t imm, int has_imm,
                               uint8_t *out);

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
    int hi = any >> 4 & 1, ii = has_imm != 0;
    x64_vform *vf = &x64_vforms[op][wi][hi][nregs - 2][ii];
    uint64_t f = atomic_load_explicit(&vf->f, memory_order_acquire);
    if (__builtin_expect(!f, 0)) f = x64_vform_make(vf, op, bits, hi, nregs, ii);
    if (!(f & 2) || (ii && (f >> 48 & 1 ? imm < 0 || imm > 255 : imm < -128 || imm > 127)))
        return 0;
    *features = (uint32_t)(f >> 32 & 0xffff);
    unsigned gop = f >> 18 & 7, hop = f >> 23 & 7, lop = f >> 29 & 7;
    uint64_t g = gop == X64_VF_NONE ? 0 : regs >> 8 * gop & 0xff, e = regs >> (f >> 21 & 3) * 8 & 0xff;
    uint64_t h = hop == X64_VF_NONE ? 0 : regs >> 8 * hop & 0xff;
    uint64_t w = atomic_load_explicit(&vf->bytes, memory_order_relaxed);
    int n = (int)(w >> 56);
    switch ((uint8_t)w) {
    case 0x62:   /* EVEX: R X B R' in P0, vvvv in P1, V' in P2, then opcode, ModRM */
        w ^= (g & 8) << 12 | (g & 16) << 8 | (e & 24) << 10 | (h & 15) << 19 | (h & 16) << 23;
        w |= (g & 7) << 43 | (e & 7) << 40;
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
    w &= ~(0xffull << 56);
    memcpy(out, &w, 8);   /* out has X64_MAX_LEN bytes; those past n are rewritten or unused */
    if (lop != X64_VF_NONE) out[n++] = (uint8_t)((regs >> 8 * lop & 0xff) << 4);
    if (has_imm) out[n++] = (uint8_t)imm;
    return n;
}

#endif
