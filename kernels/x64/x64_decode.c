/* x64_decode.c: the verifier's own x86-64 decoder: instruction length, GPRs
 * written, rsp effect and the frame-related flags (see x64.h). */
#include "kernels/x64/x64.h"

#include <string.h>

/*
 * Overview. Prefixes are read first (legacy, then REX); then one of four
 * paths: the one-byte map, the 0F map (with 0F38 / 0F3A), VEX (C4/C5) or
 * EVEX (62). The one-byte and 0F maps are described by the tables below
 * (operand shape, immediate size and the regular GPR writes); the
 * irregular opcodes (stack operations, groups selected by ModRM.reg,
 * prefix-dependent forms) are handled in code after the table lookup.
 *
 * The decoder is deliberately one-sided: it may report a write that does
 * not happen, but it must never miss one (the verifier relies on that for
 * rbp and rsp). Opcodes it does not model (x87, I/O, system instructions,
 * segment loads, far branches, 3DNow!, XOP, AVX-512 FP16 maps, ...) make
 * it return 0, and the verifier rejects the code.
 *
 * rsp conventions: a call reports rsp in gpr_writes but X64_RSP_NONE (rsp
 * is the same again when the callee returns); ret is X64_RSP_DELTA with
 * 8 (+ imm16); add/sub rsp, imm and lea rsp, [rsp + d] are deltas only
 * with a 64-bit operand size (32-bit forms zero-extend: X64_RSP_OTHER).
 * Stores are reported only for [base + disp] without an index register,
 * segment override or 67 prefix.
 */

enum {
    F_M = 1u << 0,    /* has a ModRM byte */
    F_IB = 1u << 1,   /* imm8 */
    F_IW = 1u << 2,   /* imm16 */
    F_IZ = 1u << 3,   /* imm16 with 66 (and no REX.W), else imm32 */
    F_ID = 1u << 4,   /* imm32/rel32 regardless of 66 (Intel branch rule) */
    F_WR = 1u << 5,   /* writes the ModRM.reg GPR */
    F_WM = 1u << 6,   /* writes the ModRM.rm GPR (register form only) */
    F_B = 1u << 7,    /* the written reg/rm operand is 8-bit (ah..bh rule) */
    F_WA = 1u << 8,   /* writes rax */
    F_WD = 1u << 9,   /* writes rdx */
    F_J = 1u << 10,   /* jcc / jmp / loop */
    F_S = 1u << 11,   /* irregular: finished in code */
    F_X = 1u << 12,   /* not decoded (invalid in 64-bit mode or not claimed) */
};

/* Short names so that the tables read as opcode maps (16 per row). */
#define X_ F_X
#define S_ F_S
#define N_ 0                          /* no operands we care about */
#define M_ F_M                        /* ModRM, writes no GPR */
#define EB (F_M | F_WM | F_B)         /* op Eb, Gb: writes r/m8 */
#define EV (F_M | F_WM)               /* op Ev, Gv: writes r/m */
#define GB (F_M | F_WR | F_B)         /* op Gb, Eb: writes reg8 */
#define GV (F_M | F_WR)               /* op Gv, Ev: writes reg */
#define AB (F_IB | F_WA)              /* op al, imm8 */
#define AZ (F_IZ | F_WA)              /* op eax, imm32 */
#define MI (F_M | F_IB)               /* ModRM + imm8, no GPR write */
#define JB (F_IB | F_J)
#define JZ (F_ID | F_J)

static const uint16_t map1b[256] = {
    /* 0x */ EB, EV, GB, GV, AB, AZ, X_, X_, EB, EV, GB, GV, AB, AZ, X_, S_,
    /* 1x */ EB, EV, GB, GV, AB, AZ, X_, X_, EB, EV, GB, GV, AB, AZ, X_, X_,
    /* 2x */ EB, EV, GB, GV, AB, AZ, X_, X_, EB, EV, GB, GV, AB, AZ, X_, X_,
    /* 3x: cmp (38-3d) writes nothing */
             EB, EV, GB, GV, AB, AZ, X_, X_, M_, M_, M_, M_, F_IB, F_IZ, X_, X_,
    /* 4x: REX, consumed as a prefix */
             X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_,
    /* 5x: push / pop */
             S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_,
    /* 6x: 62 EVEX, 63 movsxd, 68/6a push imm, 69/6b imul, 6c-6f I/O */
             X_, X_, S_, GV, X_, X_, X_, X_, F_IZ | S_, F_M | F_IZ | F_WR, F_IB | S_,
             F_M | F_IB | F_WR, X_, X_, X_, X_,
    /* 7x: jcc rel8 */
             JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB,
    /* 8x: 80-83 group 1, 84/85 test, 86/87 xchg, 88-8b mov, 8c mov Ev,Sreg,
     * 8d lea, 8e mov Sreg,Ew, 8f pop Ev */
             F_M | F_IB | F_B | S_, F_M | F_IZ | S_, X_, F_M | F_IB | S_, M_, M_,
             EB | F_WR, EV | F_WR, EB, EV | S_, GB, GV | S_, EV, GV | S_, M_, F_M | S_,
    /* 9x: 90-97 nop/xchg, 98 cdqe, 99 cqo, 9c/9d pushf/popf, 9e sahf, 9f lahf */
             S_, S_, S_, S_, S_, S_, S_, S_, F_WA, F_WD, X_, X_, S_, S_, N_, F_WA,
    /* Ax: a0-a3 moffs mov, a4-a7/aa-af string ops, a8/a9 test */
             S_, S_, S_, S_, S_, S_, S_, S_, F_IB, F_IZ, S_, S_, S_, S_, S_, S_,
    /* Bx: mov reg, imm */
             S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_, S_,
    /* Cx: c0/c1 shifts, c2/c3 ret, c4/c5 VEX, c6/c7 mov imm, c8 enter,
     * c9 leave, cc int3 */
             EB | F_IB, EV | F_IB, F_IW | S_, S_, S_, S_, F_M | S_, F_M | S_,
             F_IW | F_IB | S_, S_, X_, X_, N_, X_, X_, X_,
    /* Dx: d0-d3 shifts, d7 xlat, d8-df x87 */
             EB, EV, EB, EV, X_, X_, X_, F_WA, X_, X_, X_, X_, X_, X_, X_, X_,
    /* Ex: e0-e2 loop, e3 jrcxz, e8 call, e9/eb jmp, I/O */
             JB | S_, JB | S_, JB | S_, JB, X_, X_, X_, X_, F_ID | S_, JZ, X_, JB, X_, X_, X_,
             X_,
    /* Fx: f5 cmc, f6/f7 group 3, f8-fd flag ops, fe/ff groups 4/5 */
             X_, X_, X_, X_, X_, N_, F_M | S_, F_M | S_, N_, N_, N_, N_, N_, N_,
             F_M | S_, F_M | S_,
};

static const uint16_t map0f[256] = {
    /* 0x: 0b ud2, 0d prefetch */
             X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, N_, X_, M_, X_, X_,
    /* 1x: SSE moves, 18-1f prefetch / hint nops / MPX (bnd* write no GPR) */
             M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, F_M | S_, M_,
    /* 2x: 20-23 control/debug registers, 2c/2d cvt(t)s[sd]2si */
             X_, X_, X_, X_, X_, X_, X_, X_, M_, M_, M_, M_, F_M | S_, F_M | S_, M_, M_,
    /* 3x: 31 rdtsc, 38/3a escapes */
             X_, F_WA | F_WD, X_, X_, X_, X_, X_, X_, S_, X_, S_, X_, X_, X_, X_, X_,
    /* 4x: cmovcc */
             GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV, GV,
    /* 5x: 50 movmskps/pd r32 */
             GV, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_,
    /* 6x */
             M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_,
    /* 7x: 70-73 with imm8, 77 emms, 78/79 vmread/SSE4a, 7e movd/movq to r/m */
             MI, MI, MI, MI, M_, M_, M_, N_, X_, X_, X_, X_, M_, M_, F_M | S_, M_,
    /* 8x: jcc rel32 */
             JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ,
    /* 9x: setcc r/m8 */
             EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB, EB,
    /* Ax: a0/a1/a8/a9 push/pop fs/gs, a2 cpuid, a3 bt, a4/a5 shld, ab bts,
     * ac/ad shrd, ae group 15, af imul */
             S_, S_, S_, M_, EV | F_IB, EV, X_, X_, S_, S_, X_, EV, EV | F_IB, EV, F_M | S_, GV,
    /* Bx: b0/b1 cmpxchg, b3 btr, b6/b7 movzx, b8 popcnt, b9 ud1, ba group 8,
     * bb btc, bc/bd bsf/bsr (tzcnt/lzcnt), be/bf movsx */
             EB | F_WA, EV | F_WA, X_, EV, X_, X_, GV, GV, F_M | S_, M_, F_M | F_IB | S_, EV,
             GV, GV, GV, GV,
    /* Cx: c0/c1 xadd, c2 cmpps, c3 movnti, c4 pinsrw, c5 pextrw r32,
     * c6 shufps, c7 group 9, c8-cf bswap */
             EB | F_WR, EV | F_WR, MI, M_, MI, F_M | F_IB | F_WR, MI, F_M | S_,
             S_, S_, S_, S_, S_, S_, S_, S_,
    /* Dx: d7 pmovmskb r32 */
             M_, M_, M_, M_, M_, M_, M_, GV, M_, M_, M_, M_, M_, M_, M_, M_,
    /* Ex */
             M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_,
    /* Fx: ff ud0 */
             M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_, M_,
};

#undef X_
#undef S_
#undef N_
#undef M_
#undef EB
#undef EV
#undef GB
#undef GV
#undef AB
#undef AZ
#undef MI
#undef JB
#undef JZ

/* Opcode ranges [lo, hi] pairs: legacy 0F38 / 0F3A opcodes that exist in
 * some prefix form. */
static int in_ranges(int op, const uint8_t *r, size_t n) {
    for (size_t i = 0; i + 1 < n; i += 2)
        if (op >= r[i] && op <= r[i + 1]) return 1;
    return 0;
}
#define IN_RANGES(op, tbl) in_ranges(op, tbl, sizeof tbl)
static const uint8_t valid_0f38[] = {
    0x00, 0x0b, 0x10, 0x10, 0x14, 0x15, 0x17, 0x17, 0x1c, 0x1e, 0x20, 0x25,
    0x28, 0x2b, 0x30, 0x35, 0x37, 0x41, 0xc8, 0xcd, 0xcf, 0xcf, 0xdb, 0xdf,
    0xf0, 0xf1, 0xf6, 0xf6};
static const uint8_t valid_0f3a[] = {
    0x08, 0x0f, 0x14, 0x17, 0x20, 0x22, 0x40, 0x42, 0x44, 0x44, 0x60, 0x63,
    0xcc, 0xcc, 0xce, 0xcf, 0xdf, 0xdf};

/* VEX maps 1-3 and EVEX map 1: opcodes that exist there. Everything else
 * is rejected rather than assumed harmless: some decoders and old CPUs
 * (Knights Corner) give VEX opcodes such as 0F 95 GPR destinations. */
static const uint8_t valid_vex1[] = {
    0x10, 0x17, 0x28, 0x2f, 0x41, 0x42, 0x44, 0x47, 0x4a, 0x4b, 0x50, 0x77, 0x7c, 0x7f,
    0x90, 0x93, 0x98, 0x99, 0xae, 0xae, 0xc2, 0xc2, 0xc4, 0xc6, 0xd0, 0xfe};
static const uint8_t valid_vex2[] = {
    0x00, 0x0f, 0x13, 0x13, 0x16, 0x1a, 0x1c, 0x1e, 0x20, 0x25, 0x28, 0x41, 0x45, 0x47,
    0x50, 0x53, 0x58, 0x5a, 0x78, 0x79, 0x8c, 0x8c, 0x8e, 0x8e, 0x90, 0x93, 0x96, 0x9f,
    0xa6, 0xaf, 0xb4, 0xbf, 0xcf, 0xcf, 0xdb, 0xdf, 0xf2, 0xf3, 0xf5, 0xf7};
static const uint8_t valid_vex3[] = {
    0x00, 0x02, 0x04, 0x06, 0x08, 0x0f, 0x14, 0x19, 0x1d, 0x1d, 0x20, 0x22, 0x30, 0x33,
    0x38, 0x39, 0x40, 0x42, 0x44, 0x44, 0x46, 0x46, 0x4a, 0x4c, 0x60, 0x63, 0xce, 0xcf,
    0xdf, 0xdf, 0xf0, 0xf0};
static const uint8_t valid_evex1[] = {
    0x10, 0x17, 0x28, 0x2f, 0x51, 0x51, 0x54, 0x76, 0x78, 0x7b, 0x7e, 0x7f, 0xc2, 0xc2,
    0xc4, 0xc6, 0xd1, 0xd6, 0xd8, 0xef, 0xf1, 0xf6, 0xf8, 0xfe};
static const uint8_t valid_evex2[] = {
    0x00, 0x00, 0x04, 0x04, 0x0b, 0x0d, 0x10, 0x16, 0x18, 0x1f, 0x20, 0x47, 0x4c, 0x4f,
    0x50, 0x55, 0x58, 0x5b, 0x62, 0x66, 0x68, 0x68, 0x70, 0x73, 0x75, 0x7f, 0x83, 0x83,
    0x88, 0x8d, 0x8f, 0x93, 0x96, 0xa3, 0xa6, 0xaf, 0xb4, 0xbf, 0xc4, 0xc4, 0xc6, 0xcd,
    0xcf, 0xcf, 0xdc, 0xdf};
static const uint8_t valid_evex3[] = {
    0x00, 0x01, 0x03, 0x05, 0x08, 0x0b, 0x0f, 0x0f, 0x14, 0x1b, 0x1d, 0x23, 0x25, 0x27,
    0x38, 0x3b, 0x3e, 0x3f, 0x42, 0x44, 0x50, 0x51, 0x54, 0x57, 0x66, 0x67, 0x70, 0x73,
    0xce, 0xcf};

/* Decoder state for one instruction. */
typedef struct dec {
    const uint8_t *p;
    size_t n;          /* bytes readable: min(n, 15) */
    size_t pos;
    int rex;           /* REX byte in effect, 0 if none */
    int w, r, x, b;    /* REX.W/R/X/B or their VEX/EVEX equivalents */
    int osz, asz, seg; /* 66, 67, segment override seen */
    int pp;            /* mandatory prefix: 0 none, 1 66, 2 F3, 3 F2 */
    int mod, reg, rm;  /* ModRM (reg/rm extended by R/B) */
    int base, index;   /* memory operand (X64_NOREG when absent) */
    int32_t disp;
    int64_t imm;
} dec;

static int avail(const dec *d, size_t k) { return d->pos + k <= d->n; }

static void wr(x64_insn *o, int r) { o->gpr_writes |= (uint16_t)(1u << (r & 15)); }

/* An 8-bit register operand: without any REX prefix, numbers 4-7 are
 * ah/ch/dh/bh, which live in rax..rbx. */
static int gpr8(const dec *d, int r) { return (!d->rex && r >= 4 && r < 8) ? r - 4 : r; }

static int modrm(dec *d) {
    if (!avail(d, 1)) return 0;
    uint8_t m = d->p[d->pos++];
    d->mod = m >> 6;
    d->reg = ((m >> 3) & 7) | (d->r << 3);
    d->rm = (m & 7) | (d->b << 3);
    d->base = X64_NOREG;
    d->index = X64_NOREG;
    d->disp = 0;
    if (d->mod == 3) return 1;
    int dsz = d->mod == 1 ? 1 : d->mod == 2 ? 4 : 0;
    if ((m & 7) == 4) {
        if (!avail(d, 1)) return 0;
        uint8_t s = d->p[d->pos++];
        int idx = ((s >> 3) & 7) | (d->x << 3);
        if (idx != X64_RSP) d->index = idx;
        if ((s & 7) == 5 && d->mod == 0)
            dsz = 4;   /* [index*scale + disp32], no base */
        else
            d->base = (s & 7) | (d->b << 3);
    } else if ((m & 7) == 5 && d->mod == 0) {
        d->base = X64_RIP;
        dsz = 4;
    } else {
        d->base = d->rm;
    }
    if (!avail(d, (size_t)dsz)) return 0;
    if (dsz == 1) d->disp = (int8_t)d->p[d->pos];
    if (dsz == 4) {
        uint32_t v;
        memcpy(&v, d->p + d->pos, 4);
        d->disp = (int32_t)v;
    }
    d->pos += (size_t)dsz;
    return 1;
}

/* Reads a little-endian signed immediate of sz bytes into d->imm. */
static int imm(dec *d, int sz) {
    if (sz == 0) return 1;
    if (!avail(d, (size_t)sz)) return 0;
    uint64_t v = 0;
    for (int i = sz - 1; i >= 0; i--) v = (v << 8) | d->p[d->pos + (size_t)i];
    int sh = 64 - 8 * sz;
    d->imm = sh ? (int64_t)(v << sh) >> sh : (int64_t)v;
    d->pos += (size_t)sz;
    return 1;
}

static void set_rsp(x64_insn *o, int kind, int32_t delta) {
    o->rsp_kind = (uint8_t)kind;
    o->rsp_delta = delta;
}

/* 16-bit operand size: 66 without REX.W (which wins over 66). */
static int os16(const dec *d) { return d->osz && !d->w; }

/* Stack push/pop of the operand size (2 with 66, else 8). */
static void stack_op(const dec *d, x64_insn *o, int push) {
    wr(o, X64_RSP);
    int sz = os16(d) ? 2 : 8;
    set_rsp(o, X64_RSP_DELTA, push ? -sz : sz);
}

/* ---- one-byte map ---- */

static int dec_1byte(dec *d, int op, x64_insn *o) {
    uint16_t f = map1b[op];
    if (f & F_X) return 0;
    if ((f & F_M) && !modrm(d)) return 0;
    int sz = 0;
    if (f & F_IB) sz += 1;
    if (f & F_IW) sz += 2;
    if (f & F_IZ) sz += os16(d) ? 2 : 4;
    if (f & F_ID) sz += 4;
    if (op == 0xf6 || op == 0xf7) {   /* group 3: test r/m, imm */
        if ((d->reg & 7) <= 1) sz = op == 0xf6 ? 1 : (os16(d) ? 2 : 4);
    }
    if (op >= 0xb0 && op <= 0xbf) sz = op < 0xb8 ? 1 : d->w ? 8 : d->osz ? 2 : 4;
    if (op >= 0xa0 && op <= 0xa3) sz = d->asz ? 4 : 8;   /* moffs */
    if (!imm(d, sz)) return 0;

    if (f & F_WR) wr(o, (f & F_B) ? gpr8(d, d->reg) : d->reg);
    if ((f & F_WM) && d->mod == 3) wr(o, (f & F_B) ? gpr8(d, d->rm) : d->rm);
    if (f & F_WA) wr(o, X64_RAX);
    if (f & F_WD) wr(o, X64_RDX);
    if (f & F_J) o->is_jump = 1;
    if (!(f & F_S)) return 1;

    int opreg = (op & 7) | (d->b << 3);
    if (op >= 0x50 && op <= 0x57) {
        stack_op(d, o, 1);
        o->is_push_rbp = opreg == X64_RBP && !os16(d);
        return 1;
    }
    if (op >= 0x58 && op <= 0x5f) {
        stack_op(d, o, 0);
        wr(o, opreg);
        if (opreg == X64_RSP) set_rsp(o, X64_RSP_OTHER, 0);   /* rsp = [rsp] */
        o->is_pop_rbp = opreg == X64_RBP && !os16(d);
        return 1;
    }
    if (op >= 0x90 && op <= 0x97) {
        /* 90 without REX.B is nop (or pause with F3); otherwise xchg rax, r */
        if (op == 0x90 && !d->b) return 1;
        wr(o, X64_RAX);
        wr(o, opreg);
        return 1;
    }
    if (op >= 0xb0 && op <= 0xbf) {
        wr(o, op < 0xb8 ? gpr8(d, opreg) : opreg);
        return 1;
    }
    if ((op >= 0xa4 && op <= 0xa7) || (op >= 0xaa && op <= 0xaf)) {   /* string ops */
        if (op <= 0xa7) { wr(o, X64_RSI); wr(o, X64_RDI); }   /* movs, cmps */
        else if (op <= 0xab) wr(o, X64_RDI);                  /* stos */
        else if (op <= 0xad) { wr(o, X64_RAX); wr(o, X64_RSI); }  /* lods */
        else wr(o, X64_RDI);                                  /* scas */
        if (d->pp >= 2) wr(o, X64_RCX);                       /* rep counts rcx */
        return 1;
    }
    switch (op) {
    case 0x0f:
    case 0x62:
    case 0xc4:
    case 0xc5:
        return 0;   /* dispatched before the table; unreachable */
    case 0x68:
    case 0x6a:
    case 0x9c:
        stack_op(d, o, 1);
        return 1;
    case 0x9d:
        stack_op(d, o, 0);
        return 1;
    case 0xa0:
    case 0xa1:
        wr(o, X64_RAX);
        return 1;
    case 0xa2:
    case 0xa3:
        return 1;
    case 0x80:
    case 0x81:
    case 0x83:
        if ((d->reg & 7) == 7) return 1;   /* cmp */
        if (d->mod != 3) return 1;
        wr(o, op == 0x80 ? gpr8(d, d->rm) : d->rm);
        if (d->rm == X64_RSP && op != 0x80) {
            /* add/sub rsp, imm with 64-bit operand size: a known delta */
            if (d->w && ((d->reg & 7) == 0 || (d->reg & 7) == 5) && d->imm >= INT32_MIN + 1 &&
                d->imm <= INT32_MAX)
                set_rsp(o, X64_RSP_DELTA, (int32_t)((d->reg & 7) == 0 ? d->imm : -d->imm));
            else
                set_rsp(o, X64_RSP_OTHER, 0);
        }
        return 1;
    case 0x89:
        if (d->mod != 3) {
            if (d->w && !d->osz && !d->asz && !d->seg && d->index == X64_NOREG) {
                o->store_reg = (uint8_t)d->reg;
                o->store_base = (uint8_t)d->base;
                o->store_disp = d->disp;
            }
            return 1;
        }
        if (d->w && !d->osz && d->reg == X64_RSP && d->rm == X64_RBP) o->is_mov_rbp_rsp = 1;
        if (d->w && !d->osz && d->reg == X64_RBP && d->rm == X64_RSP)
            set_rsp(o, X64_RSP_FROM_RBP, 0);
        return 1;
    case 0x8b:
        if (d->mod != 3) return 1;
        if (d->w && !d->osz && d->reg == X64_RBP && d->rm == X64_RSP) o->is_mov_rbp_rsp = 1;
        if (d->w && !d->osz && d->reg == X64_RSP && d->rm == X64_RBP)
            set_rsp(o, X64_RSP_FROM_RBP, 0);
        return 1;
    case 0x8d:
        if (d->mod == 3) return 0;   /* lea needs a memory operand */
        if (d->reg == X64_RSP && d->w && !d->osz && !d->asz && d->base == X64_RSP &&
            d->index == X64_NOREG)
            set_rsp(o, X64_RSP_DELTA, d->disp);
        return 1;
    case 0x8f:   /* pop Ev; other /r values are XOP or invalid */
        if ((d->reg & 7) != 0) return 0;
        stack_op(d, o, 0);
        if (d->mod == 3) {
            wr(o, d->rm);
            if (d->rm == X64_RSP) set_rsp(o, X64_RSP_OTHER, 0);
        }
        return 1;
    case 0xc2:
    case 0xc3:
        wr(o, X64_RSP);
        set_rsp(o, X64_RSP_DELTA, 8 + (op == 0xc2 ? (int32_t)(uint16_t)d->imm : 0));
        o->is_ret = 1;
        return 1;
    case 0xc6:
    case 0xc7:   /* mov r/m, imm is /0; xabort/xbegin (RTM) are not decoded */
        if ((d->reg & 7) != 0) return 0;
        if (!imm(d, op == 0xc6 ? 1 : os16(d) ? 2 : 4)) return 0;
        if (d->mod == 3) wr(o, op == 0xc6 ? gpr8(d, d->rm) : d->rm);
        return 1;
    case 0xc8:   /* enter: pushes rbp and sets it */
        wr(o, X64_RSP);
        wr(o, X64_RBP);
        set_rsp(o, X64_RSP_OTHER, 0);
        return 1;
    case 0xc9:
        wr(o, X64_RSP);
        wr(o, X64_RBP);
        set_rsp(o, X64_RSP_FROM_RBP, 0);
        /* 66 c9 pops a 16-bit bp: it writes rbp but is not our epilogue */
        o->is_leave = !os16(d);
        return 1;
    case 0xe0:
    case 0xe1:
    case 0xe2:
        wr(o, X64_RCX);
        return 1;
    case 0xe8:
        wr(o, X64_RSP);   /* rsp is the same again when the callee returns */
        o->is_call = 1;
        return 1;
    case 0xf6:
    case 0xf7:
        switch (d->reg & 7) {
        case 0:
        case 1:
            return 1;                                   /* test */
        case 2:
        case 3:                                         /* not, neg */
            if (d->mod == 3) wr(o, op == 0xf6 ? gpr8(d, d->rm) : d->rm);
            return 1;
        default:                                        /* mul, imul, div, idiv */
            wr(o, X64_RAX);
            if (op == 0xf7) wr(o, X64_RDX);
            return 1;
        }
    case 0xfe:
        if ((d->reg & 7) > 1) return 0;
        if (d->mod == 3) wr(o, gpr8(d, d->rm));
        return 1;
    case 0xff:
        switch (d->reg & 7) {
        case 0:
        case 1:                                         /* inc, dec */
            if (d->mod == 3) wr(o, d->rm);
            return 1;
        case 2:                                         /* call r/m */
            wr(o, X64_RSP);
            o->is_call = 1;
            return 1;
        case 4:                                         /* jmp r/m */
            o->is_jump = 1;
            return 1;
        case 6:
            stack_op(d, o, 1);
            return 1;
        default:                                        /* far call/jmp */
            return 0;
        }
    }
    return 0;
}

/* ---- 0F map and the legacy 0F38 / 0F3A maps ---- */

static int dec_0f38(dec *d, x64_insn *o) {
    if (!avail(d, 1)) return 0;
    int op = d->p[d->pos++];
    if (!IN_RANGES(op, valid_0f38)) return 0;
    /* With F2/F3 only crc32 (F2 f0/f1) and adox (F3 f6) are claimed; the
     * other F2/F3 forms are Key Locker, CET, ENQCMD and the like. */
    if (d->pp >= 2 && !((d->pp == 3 && op <= 0xf1 && op >= 0xf0) || (d->pp == 2 && op == 0xf6)))
        return 0;
    if (op == 0xf6 && d->pp == 0) return 0;   /* wrss */
    if (!modrm(d)) return 0;
    /* movbe loads, crc32, adcx/adox write reg; movbe stores write memory */
    if (op == 0xf6 || (op == 0xf0) || (op == 0xf1 && d->pp == 3)) wr(o, d->reg);
    return 1;
}

static int dec_0f3a(dec *d, x64_insn *o) {
    if (!avail(d, 1)) return 0;
    int op = d->p[d->pos++];
    if (!IN_RANGES(op, valid_0f3a) || d->pp >= 2) return 0;
    if (!modrm(d) || !imm(d, 1)) return 0;
    if (op >= 0x14 && op <= 0x17 && d->mod == 3) wr(o, d->rm);   /* pextr*, extractps */
    if (op == 0x61 || op == 0x63) wr(o, X64_RCX);                 /* pcmp[ei]stri */
    return 1;
}

static int dec_0f(dec *d, x64_insn *o) {
    if (!avail(d, 1)) return 0;
    int op = d->p[d->pos++];
    if (op == 0x38) return dec_0f38(d, o);
    if (op == 0x3a) return dec_0f3a(d, o);
    uint16_t f = map0f[op];
    if (f & F_X) return 0;
    if ((f & F_M) && !modrm(d)) return 0;
    int sz = 0;
    if (f & F_IB) sz += 1;
    if (f & F_ID) sz += 4;
    if (!imm(d, sz)) return 0;
    if (f & F_WR) wr(o, (f & F_B) ? gpr8(d, d->reg) : d->reg);
    if ((f & F_WM) && d->mod == 3) wr(o, (f & F_B) ? gpr8(d, d->rm) : d->rm);
    if (f & F_WA) wr(o, X64_RAX);
    if (f & F_WD) wr(o, X64_RDX);
    if (f & F_J) o->is_jump = 1;
    if (!(f & F_S)) return 1;

    if (op >= 0xc8) {   /* bswap */
        wr(o, (op & 7) | (d->b << 3));
        return 1;
    }
    switch (op) {
    case 0xa0:
    case 0xa8:
    case 0xa1:
    case 0xa9:   /* push/pop fs/gs: only the stack matters */
        stack_op(d, o, !(op & 1));
        return 1;
    case 0x1e:   /* F3 0F 1E /1 (register form) is rdssp: be conservative */
        if (d->mod == 3 && (d->reg & 7) == 1) wr(o, d->rm);
        return 1;
    case 0x2c:
    case 0x2d:   /* cvt(t)ss2si / cvt(t)sd2si write a GPR; the others MMX */
        if (d->pp >= 2) wr(o, d->reg);
        return 1;
    case 0x7e:   /* movd/movq r/m, mm/xmm (F3: movq xmm, xmm/m64) */
        if (d->pp <= 1 && d->mod == 3) wr(o, d->rm);
        return 1;
    case 0xa2:   /* cpuid */
        wr(o, X64_RAX);
        wr(o, X64_RBX);
        wr(o, X64_RCX);
        wr(o, X64_RDX);
        return 1;
    case 0xae:   /* group 15 */
        if (d->mod != 3) {
            /* fxsave, fxrstor, ldmxcsr, stmxcsr, clflush(opt); the xsave
             * family (/4-/6) is not claimed */
            int r = d->reg & 7;
            return r <= 3 || r == 7;
        }
        if (d->pp == 0) return (d->reg & 7) >= 5;   /* lfence, mfence, sfence */
        if (d->pp == 2 && (d->reg & 7) <= 3) {     /* rd/wr fs/gs base */
            wr(o, d->rm);
            return 1;
        }
        return 0;
    case 0xb8:   /* popcnt needs F3 */
        if (d->pp != 2) return 0;
        wr(o, d->reg);
        return 1;
    case 0xba:   /* group 8: bt, bts, btr, btc with imm8 */
        if ((d->reg & 7) < 4) return 0;
        if ((d->reg & 7) > 4 && d->mod == 3) wr(o, d->rm);
        return 1;
    case 0xc7:   /* group 9 */
        switch (d->reg & 7) {
        case 1:   /* cmpxchg8b/16b */
            if (d->mod == 3) return 0;
            wr(o, X64_RAX);
            wr(o, X64_RDX);
            return 1;
        case 6:
        case 7:   /* rdrand, rdseed, rdpid */
            if (d->mod != 3) return 0;
            wr(o, d->rm);
            return 1;
        default:
            return 0;
        }
    }
    return 0;
}

/* ---- VEX and EVEX ---- */

/* GPR writes of VEX/EVEX instructions (all others write only vector or
 * mask registers). vvvv is the decoded VEX.vvvv register number. */
static void vex_writes(const dec *d, int map, int op, int vvvv, int evex, x64_insn *o) {
    int pp = d->pp;
    if (map == 1) {
        if ((op == 0x2c || op == 0x2d) && pp >= 2) wr(o, d->reg);    /* vcvt(t)s[sd]2si */
        if (evex && (op == 0x78 || op == 0x79) && pp >= 2) wr(o, d->reg); /* ...2usi */
        if (op == 0x7e && pp == 1 && d->mod == 3) wr(o, d->rm);       /* vmovd/q r, xmm */
        if (op == 0xc5 && d->mod == 3) wr(o, d->reg);                /* vpextrw r, xmm */
        if (!evex && (op == 0x50 || op == 0xd7)) wr(o, d->reg);      /* vmovmsk*, vpmovmskb */
        if (!evex && op == 0x93) wr(o, d->reg);                      /* kmov r, k */
    } else if (map == 2 && !evex) {
        if (op == 0xf2 || op == 0xf5 || op == 0xf7) wr(o, d->reg);   /* andn, bzhi/pdep/pext, shlx.. */
        if (op == 0xf3) wr(o, vvvv);                                 /* blsr, blsmsk, blsi */
        if (op == 0xf6) {                                            /* mulx */
            wr(o, d->reg);
            wr(o, vvvv);
        }
    } else if (map == 3) {
        if (op >= 0x14 && op <= 0x17 && d->mod == 3) wr(o, d->rm);   /* vpextr*, vextractps */
        if (!evex && (op == 0x61 || op == 0x63)) wr(o, X64_RCX);     /* vpcmp[ei]stri */
        if (!evex && op == 0xf0) wr(o, d->reg);                      /* rorx */
    }
}

static int vec_has_imm(int map, int op) {
    if (map == 3) return 1;
    if (map == 1)
        return (op >= 0x70 && op <= 0x73) || op == 0xc2 || (op >= 0xc4 && op <= 0xc6);
    return 0;
}

static int dec_vex(dec *d, int c, x64_insn *o) {
    int map, vvvv;
    if (c == 0xc5) {
        if (!avail(d, 1)) return 0;
        uint8_t b1 = d->p[d->pos++];
        d->r = !(b1 & 0x80);
        vvvv = (~b1 >> 3) & 15;
        d->pp = b1 & 3;
        map = 1;
    } else {
        if (!avail(d, 2)) return 0;
        uint8_t b1 = d->p[d->pos], b2 = d->p[d->pos + 1];
        d->pos += 2;
        d->r = !(b1 & 0x80);
        d->x = !(b1 & 0x40);
        d->b = !(b1 & 0x20);
        map = b1 & 0x1f;
        d->w = b2 >> 7;
        vvvv = (~b2 >> 3) & 15;
        d->pp = b2 & 3;
        if (map < 1 || map > 3) return 0;
    }
    if (!avail(d, 1)) return 0;
    int op = d->p[d->pos++];
    if (!(map == 1 ? IN_RANGES(op, valid_vex1)
                   : map == 2 ? IN_RANGES(op, valid_vex2) : IN_RANGES(op, valid_vex3)))
        return 0;
    if (map == 1 && op == 0x77) return 1;   /* vzeroupper / vzeroall: no ModRM */
    if (!modrm(d)) return 0;
    if (vec_has_imm(map, op) && !imm(d, 1)) return 0;
    vex_writes(d, map, op, vvvv, 0, o);
    return 1;
}

static int dec_evex(dec *d, x64_insn *o) {
    if (!avail(d, 3)) return 0;
    uint8_t p0 = d->p[d->pos], p1 = d->p[d->pos + 1];
    d->pos += 3;
    /* Maps 1-3 only (5 and 6 are AVX512-FP16, not claimed); the fixed
     * bits (P0 bit 3 = 0, P1 bit 2 = 1) must hold. */
    int map = p0 & 7;
    if ((p0 & 0x08) || !(p1 & 0x04) || map < 1 || map > 3) return 0;
    d->r = !(p0 & 0x80);
    d->x = !(p0 & 0x40);
    d->b = !(p0 & 0x20);
    d->w = p1 >> 7;
    d->pp = p1 & 3;
    if (!avail(d, 1)) return 0;
    int op = d->p[d->pos++];
    if (!(map == 1 ? IN_RANGES(op, valid_evex1)
                   : map == 2 ? IN_RANGES(op, valid_evex2) : IN_RANGES(op, valid_evex3)))
        return 0;
    if (!modrm(d)) return 0;
    if (vec_has_imm(map, op) && !imm(d, 1)) return 0;
    vex_writes(d, map, op, (~p1 >> 3) & 15, 1, o);
    return 1;
}

/* ---- entry ---- */

int x64_decode(const uint8_t *p, size_t n, x64_insn *out) {
    x64_insn o;
    memset(&o, 0, sizeof o);
    o.store_reg = X64_NOREG;
    o.store_base = X64_NOREG;
    dec d;
    memset(&d, 0, sizeof d);
    d.p = p;
    d.n = n < X64_MAX_LEN ? n : X64_MAX_LEN;

    int rep = 0, lock = 0;
    for (;;) {
        if (!avail(&d, 1)) return 0;
        uint8_t c = p[d.pos];
        if (c >= 0x40 && c <= 0x4f) {
            d.rex = c;   /* only counts if the opcode follows directly */
        } else if (c == 0x66 || c == 0x67 || c == 0xf2 || c == 0xf3 || c == 0xf0 ||
                   c == 0x26 || c == 0x2e || c == 0x36 || c == 0x3e || c == 0x64 ||
                   c == 0x65) {
            if (c == 0x66) d.osz = 1;
            else if (c == 0x67) d.asz = 1;
            else if (c == 0xf2 || c == 0xf3) rep = c;
            else if (c == 0xf0) lock = 1;
            else d.seg = 1;
            d.rex = 0;   /* a REX followed by another prefix is ignored */
        } else {
            break;
        }
        d.pos++;
    }
    d.w = (d.rex >> 3) & 1;
    d.r = (d.rex >> 2) & 1;
    d.x = (d.rex >> 1) & 1;
    d.b = d.rex & 1;
    d.pp = rep == 0xf3 ? 2 : rep == 0xf2 ? 3 : d.osz ? 1 : 0;

    uint8_t c = p[d.pos++];
    int ok;
    if (c == 0xc4 || c == 0xc5 || c == 0x62) {
        /* VEX/EVEX forbid 66, F2, F3, lock and REX in front of them */
        if (d.osz || rep || lock || d.rex) return 0;
        ok = c == 0x62 ? dec_evex(&d, &o) : dec_vex(&d, c, &o);
    } else if (c == 0x0f) {
        ok = dec_0f(&d, &o);
    } else {
        ok = dec_1byte(&d, c, &o);
    }
    if (!ok) return 0;

    /* Any rsp write not described above is of unknown size (call excepted:
     * the callee's ret undoes it). */
    if ((o.gpr_writes & (1u << X64_RSP)) && o.rsp_kind == X64_RSP_NONE && !o.is_call)
        o.rsp_kind = X64_RSP_OTHER;
    o.len = (uint8_t)d.pos;
    if (out) *out = o;
    return (int)d.pos;
}
