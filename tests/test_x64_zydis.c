/* test_x64_zydis.c: differential test of the x86-64 encoder against the Zydis decoder
 * over random operands for every form in the encoder table.
 *
 * FRAMEJIT_TEST_SEED=N picks another random sequence (default fixed);
 * FRAMEJIT_TEST_ITERS=N changes the number of encodings (default 120000).
 */

#include <Zydis/Zydis.h>
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_table.h"
#include "fjtest.h"

/* ---- random numbers (xorshift64*) ---------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static int rn(int n) { return (int)(rnd() % (uint64_t)n); }

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* ---- operand generation from a row's classes ---------------------- */

typedef struct gen_ctx {
    const x64_row *row;
    int s, l;           /* chosen GPR size and vector length */
    int evex;
    int reg_generic;    /* some generic operand is a register (fixes the size) */
} gen_ctx;

static x64_opnd reg_opnd(int kind, int reg, int bits) {
    x64_opnd o;
    memset(&o, 0, sizeof o);
    o.kind = (uint8_t)kind;
    o.reg = (uint8_t)reg;
    o.bits = (uint16_t)bits;
    o.base = o.index = X64_NOREG;
    return o;
}

static int32_t rnd_disp(void) {
    switch (rn(6)) {
    case 0: return 0;
    case 1: return (int8_t)rn(256);
    case 2: return (int32_t)((int8_t)rn(256)) * (4 << rn(5));  /* disp8*N candidates */
    case 3: return (int32_t)((int8_t)rn(256)) * 64 + rn(2);
    case 4: return (int32_t)(rnd() >> 32);
    default: return rn(2) ? 128 : -129;
    }
}

static x64_opnd mem_opnd(int bits) {
    x64_opnd o = reg_opnd(X64_K_MEM, 0, bits);
    int b = rn(12);
    if (b < 7) o.base = (uint8_t)rn(16);
    else if (b == 7) o.base = X64_RIP;
    else if (b == 8) o.base = X64_NOREG;
    else { static const uint8_t special[] = { X64_RSP, X64_RBP, X64_R12, X64_R13 }; o.base = special[rn(4)]; }
    o.index = X64_NOREG;
    o.scale = (uint8_t)(1 << rn(4));
    if (o.base != X64_RIP && rn(2)) {
        do o.index = (uint8_t)rn(16); while (o.index == X64_RSP);
    }
    o.disp = rnd_disp();
    return o;
}

static int gpr_class_bits(int c, int s) {
    switch (c) {
    case XC_R8: case XC_RM8: case XC_CL: return 8;
    case XC_RM16: return 16;
    case XC_R32: case XC_RM32: case XC_M32: return 32;
    case XC_R64: case XC_RM64: case XC_M64: return 64;
    case XC_M16: case XC_KM16: return 16;
    case XC_KM32: return 32;
    default: return s;
    }
}

static x64_opnd gen_opnd(const gen_ctx *g, int c) {
    int vmax = g->evex ? 32 : 16;
    int l = g->l;
    /* A generic memory operand may leave its width implied (0) only when a
     * register operand fixes the size. */
    int implied = g->reg_generic && rn(2);
    switch (c) {
    case XC_R: case XC_R8: case XC_R32: case XC_R64:
        return reg_opnd(X64_K_GPR, rn(16), gpr_class_bits(c, g->s));
    case XC_RAX: return reg_opnd(X64_K_GPR, X64_RAX, g->s);
    case XC_CL: return reg_opnd(X64_K_GPR, X64_RCX, 8);
    case XC_RM: case XC_RM8: case XC_RM16: case XC_RM32: case XC_RM64: {
        int bits = gpr_class_bits(c, g->s);
        if (rn(2)) return reg_opnd(X64_K_GPR, rn(16), bits);
        return mem_opnd(c == XC_RM ? (implied ? 0 : bits) : (rn(2) ? bits : 0));
    }
    case XC_M: return mem_opnd(0);
    case XC_M16: case XC_M32: case XC_M64: return mem_opnd(rn(2) ? gpr_class_bits(c, 0) : 0);
    case XC_ONE: { x64_opnd o = reg_opnd(X64_K_IMM, 0, 0); o.imm = 1; return o; }
    case XC_I8: case XC_U8: case XC_I32: case XC_I64: {
        x64_opnd o = reg_opnd(X64_K_IMM, 0, 0);
        if (c == XC_I8) o.imm = (int8_t)rn(256);
        else if (c == XC_U8) o.imm = rn(256);
        else if (c == XC_I32) o.imm = g->s == 32 && rn(2) ? (int64_t)(uint32_t)rnd() : (int32_t)rnd();
        else o.imm = (int64_t)rnd();
        return o;
    }
    case XC_REL8: case XC_REL32: {
        x64_opnd o = reg_opnd(X64_K_REL, 0, c == XC_REL8 ? 8 : 32);
        o.imm = c == XC_REL8 ? (int8_t)rn(256) : (int32_t)rnd();
        return o;
    }
    case XC_V: return reg_opnd(X64_K_VEC, rn(vmax), l);
    case XC_VM: case XC_VMB: case XC_MV:
        if (c != XC_MV && rn(2)) return reg_opnd(X64_K_VEC, rn(vmax), l);
        if (c == XC_VMB && rn(2)) {
            x64_opnd o = mem_opnd(0);
            o.bcst = 1;
            o.bits = (uint16_t)(g->reg_generic ? (rn(3) == 0 ? l : rn(2) ? 32 : 0) : l);
            return o;
        }
        return mem_opnd(implied ? 0 : l);
    case XC_X: return reg_opnd(X64_K_VEC, rn(vmax), 128);
    case XC_Y: return reg_opnd(X64_K_VEC, rn(vmax), 256);
    case XC_XM32: case XC_XM64: case XC_XM128: case XC_YM: {
        int rb = c == XC_YM ? 256 : 128;
        int mb = c == XC_XM32 ? 32 : c == XC_XM64 ? 64 : c == XC_XM128 ? 128 : 256;
        if (rn(2)) return reg_opnd(X64_K_VEC, rn(vmax), rb);
        return mem_opnd(rn(2) ? mb : 0);
    }
    case XC_K: return reg_opnd(X64_K_KREG, rn(8), 16);
    case XC_KM16: case XC_KM32:
        if (rn(2)) return reg_opnd(X64_K_KREG, rn(8), 16);
        return mem_opnd(rn(2) ? gpr_class_bits(c, 0) : 0);
    default: ck_abort_msg("class %d has no generator", c);
    }
    return reg_opnd(X64_K_NONE, 0, 0);
}

static int pick_size(int mask) {   /* random set bit of mask, as bits */
    int opts[4], n = 0;
    for (int i = 0; i < 7; i++)
        if (mask & (1 << i)) opts[n++ & 3] = 8 << i;
    return n ? opts[rn(n > 4 ? 4 : n)] : 0;
}

/* Fills ops for one random instance of row r; returns the operand count. */
static int gen_row(const x64_row *r, x64_opnd *ops, int *cc) {
    gen_ctx g = { r, pick_size(r->sz & 0x0f), pick_size(r->sz & 0x70), r->enc == XE_EVEX, 0 };
    int n = 0;
    while (n < 4 && r->opd[n]) n++;
    for (int i = 0; i < n; i++) {
        int c = X64_OPD_CLASS(r->opd[i]);
        if (c == XC_R || c == XC_V || c == XC_RAX) g.reg_generic = 1;
    }
    for (int i = 0; i < n; i++) ops[i] = gen_opnd(&g, X64_OPD_CLASS(r->opd[i]));
    /* Write mask / zeroing on the destination of EVEX forms. */
    if (g.evex && !(r->flags & XF_NOK) && n && rn(2)) {
        ops[0].mask = (uint8_t)(1 + rn(7));
        ops[0].zero = (uint8_t)(ops[0].kind == X64_K_VEC && rn(2));
    }
    *cc = (r->flags & XF_CC) ? rn(16) : 0;
    return n;
}

/* ---- comparison with Zydis ---------------------------------------- */

static ZydisRegister zreg(const x64_opnd *o) {
    int r = o->reg;
    switch (o->kind) {
    case X64_K_GPR:
        switch (o->bits) {
        case 8:
            if (r < 4) return (ZydisRegister)(ZYDIS_REGISTER_AL + r);
            if (r < 8) return (ZydisRegister)(ZYDIS_REGISTER_SPL + r - 4);
            return (ZydisRegister)(ZYDIS_REGISTER_R8B + r - 8);
        case 16: return (ZydisRegister)(ZYDIS_REGISTER_AX + r);
        case 32: return (ZydisRegister)(ZYDIS_REGISTER_EAX + r);
        default: return (ZydisRegister)(ZYDIS_REGISTER_RAX + r);
        }
    case X64_K_VEC:
        return (ZydisRegister)((o->bits == 512 ? ZYDIS_REGISTER_ZMM0 : o->bits == 256 ? ZYDIS_REGISTER_YMM0
                                                                    : ZYDIS_REGISTER_XMM0) + r);
    case X64_K_KREG: return (ZydisRegister)(ZYDIS_REGISTER_K0 + r);
    default: return ZYDIS_REGISTER_NONE;
    }
}
static ZydisRegister zbase(int b) {
    return b == X64_NOREG ? ZYDIS_REGISTER_NONE : b == X64_RIP ? ZYDIS_REGISTER_RIP
                                                               : (ZydisRegister)(ZYDIS_REGISTER_RAX + b);
}

static void fmt_opnd(char *buf, size_t n, const x64_opnd *o) {
    static const char *kinds[] = { "none", "gpr", "vec", "k", "mem", "imm", "rel" };
    int k = o->kind < 7 ? o->kind : 0;
    if (o->kind == X64_K_MEM)
        snprintf(buf, n, "mem%d[b%d+i%d*%d%+d]%s", o->bits, o->base, o->index, o->scale, o->disp,
                 o->bcst ? "{1toN}" : "");
    else if (o->kind == X64_K_IMM || o->kind == X64_K_REL)
        snprintf(buf, n, "%s%d(%" PRId64 ")", kinds[k], o->bits, o->imm);
    else
        snprintf(buf, n, "%s%d:%d", kinds[k], o->bits, o->reg);
    if (o->mask) snprintf(buf + strlen(buf), n - strlen(buf), "{k%d}%s", o->mask, o->zero ? "{z}" : "");
}

static const char *zcc[16] = { "o", "no", "b", "nb", "z", "nz", "be", "nbe",
                               "s", "ns", "p", "np", "l", "nl", "le", "nle" };

/* The mnemonic Zydis should print for op encoded as EVEX or not. */
static void expected_name(x64_op op, int evex, char *buf, size_t n) {
    static const struct { x64_op first; const char *prefix; } fam[] = {
        { X64_CMOVO, "cmov" }, { X64_SETO, "set" }, { X64_JO, "j" } };
    for (size_t i = 0; i < 3; i++)
        if (op >= fam[i].first && op < fam[i].first + 16) {
            snprintf(buf, n, "%s%s", fam[i].prefix, zcc[op - fam[i].first]);
            return;
        }
    const char *name = x64_op_name(op);
    if (evex && op == X64_VMOVDQU) name = "vmovdqu32";
    if (evex && op == X64_VRCPPS) name = "vrcp14ps";
    if (evex && op == X64_VRSQRTPS) name = "vrsqrt14ps";
    snprintf(buf, n, "%s", name);
}

static char fail_msg[4096];
static int nfail;

static void report(x64_op op, const x64_opnd *ops, int nops, const uint8_t *code, int len,
                   const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *zo, const char *what) {
    if (nfail++ >= 8) return;   /* the first few in full, then just a count */
    char line[1024], tmp[96];
    int k = snprintf(line, sizeof line, "%s", x64_op_name(op));
    for (int i = 0; i < nops; i++) {
        fmt_opnd(tmp, sizeof tmp, &ops[i]);
        k += snprintf(line + k, sizeof line - (size_t)k, "%s%s", i ? ", " : " ", tmp);
    }
    k += snprintf(line + k, sizeof line - (size_t)k, " -> ");
    for (int i = 0; i < len && i < 15; i++) k += snprintf(line + k, sizeof line - (size_t)k, "%02x ", code[i]);
    if (zi) {
        ZydisFormatter fm;
        char text[128] = "";
        ZydisFormatterInit(&fm, ZYDIS_FORMATTER_STYLE_INTEL);
        ZydisFormatterFormatInstruction(&fm, zi, zo, zi->operand_count_visible, text, sizeof text, 0, NULL);
        k += snprintf(line + k, sizeof line - (size_t)k, "= \"%s\"", text);
    }
    fprintf(stderr, "MISMATCH (%s): %s\n", what, line);
    size_t used = strlen(fail_msg);
    if (used < sizeof fail_msg - 1)
        snprintf(fail_msg + used, sizeof fail_msg - used, "[%s] %s\n", what, line);
}

static uint64_t lowbits(int bits) { return bits >= 64 ? ~0ULL : (1ULL << bits) - 1; }

/* Compares one decoded instruction with what was asked; returns a reason
 * for the first difference or NULL. */
static const char *compare(x64_op op, const x64_row *row, const x64_opnd *ops, int nops, int len,
                           const uint8_t *code, const x64_enc_info *info,
                           const ZydisDecodedInstruction *zi, const ZydisDecodedOperand *zo) {
    int evex = zi->encoding == ZYDIS_INSTRUCTION_ENCODING_EVEX;
    char name[32];
    expected_name(op, evex, name, sizeof name);
    if (zi->length != len) return "length";
    if (strcmp(ZydisMnemonicGetString(zi->mnemonic), name)) return "mnemonic";
    if (row->enc != XE_EVEX && evex) return "EVEX chosen for a VEX/legacy form";
    /* Zydis operands we compare: the explicit ones (minus the EVEX mask,
     * which is compared separately) and the implicit ones a form names
     * (rax of 05 id, cl of D3, the 1 of D1), but not hidden ones (flags). */
    const ZydisDecodedOperand *z[ZYDIS_MAX_OPERAND_COUNT];
    int nz = 0;
    for (int i = 0; i < zi->operand_count; i++) {
        const ZydisDecodedOperand *d = &zo[i];
        if (evex && i == 1 && d->type == ZYDIS_OPERAND_TYPE_REGISTER && d->reg.value == zi->avx.mask.reg &&
            d->visibility == ZYDIS_OPERAND_VISIBILITY_EXPLICIT)
            continue;
        if (d->visibility == ZYDIS_OPERAND_VISIBILITY_EXPLICIT ||
            d->visibility == ZYDIS_OPERAND_VISIBILITY_IMPLICIT)
            z[nz++] = d;
    }
    if (nz != nops) return "operand count";
    int s = 0;
    for (int i = 0; i < nops; i++)
        if (ops[i].kind == X64_K_GPR && X64_OPD_CLASS(row->opd[i]) != XC_CL) s = s ? s : ops[i].bits;
    for (int i = 0; i < nops; i++) {
        const x64_opnd *o = &ops[i];
        const ZydisDecodedOperand *d = z[i];
        switch (o->kind) {
        case X64_K_GPR: case X64_K_VEC: case X64_K_KREG:
            if (d->type != ZYDIS_OPERAND_TYPE_REGISTER || d->reg.value != zreg(o)) return "register";
            break;
        case X64_K_MEM:
            if (d->type != ZYDIS_OPERAND_TYPE_MEMORY) return "memory operand type";
            if (d->mem.base != zbase(o->base)) return "memory base";
            if (d->mem.index != zbase(o->index)) return "memory index";
            if (o->index != X64_NOREG && d->mem.scale != o->scale) return "memory scale";
            if (d->mem.disp.value != o->disp) return "displacement";
            break;
        case X64_K_IMM: {
            if (d->type != ZYDIS_OPERAND_TYPE_IMMEDIATE || d->imm.is_relative) return "immediate type";
            int c = X64_OPD_CLASS(row->opd[i]);
            int bits = c == XC_U8 || c == XC_ONE ? 8 : c == XC_I64 ? 64 : (s ? s : 8);
            if ((d->imm.value.u ^ (uint64_t)o->imm) & lowbits(bits)) return "immediate";
            break;
        }
        case X64_K_REL:
            if (d->type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !d->imm.is_relative) return "branch type";
            if (d->imm.value.s != o->imm) return "branch displacement";
            if (info->rel_pos < 0 || info->rel_size != o->bits / 8) return "rel_pos/rel_size";
            int64_t v = o->bits == 8 ? (int8_t)code[info->rel_pos] : 0;
            if (o->bits == 32) { int32_t t; memcpy(&t, code + info->rel_pos, 4); v = t; }
            if (v != o->imm) return "bytes at rel_pos";
            break;
        default: return "operand kind";
        }
        if (o->kind == X64_K_MEM && o->base == X64_RIP) {
            int32_t t;
            if (info->disp_pos < 0) return "disp_pos missing";
            memcpy(&t, code + info->disp_pos, 4);
            if (t != o->disp) return "bytes at disp_pos";
        }
    }
    /* write mask, zeroing and broadcast */
    int want_mode = ops[0].mask ? (ops[0].zero ? ZYDIS_MASK_MODE_ZEROING : ZYDIS_MASK_MODE_MERGING) : -1;
    /* Zydis calls a mask on a mask-register destination zeroing: the
     * instruction itself clears the unselected bits. */
    if (want_mode >= 0 && ops[0].kind == X64_K_KREG) want_mode = ZYDIS_MASK_MODE_ZEROING;
    if (want_mode >= 0) {
        /* vblendmps uses its mask as a selector: Zydis says "control". */
        int mode = zi->avx.mask.mode == ZYDIS_MASK_MODE_CONTROL ? ZYDIS_MASK_MODE_MERGING
                 : zi->avx.mask.mode == ZYDIS_MASK_MODE_CONTROL_ZEROING ? ZYDIS_MASK_MODE_ZEROING
                                                                        : (int)zi->avx.mask.mode;
        if (mode != want_mode) return "mask mode";
        if (zi->avx.mask.reg != (ZydisRegister)(ZYDIS_REGISTER_K0 + ops[0].mask)) return "mask register";
    } else if (zi->avx.mask.reg != ZYDIS_REGISTER_NONE && zi->avx.mask.reg != ZYDIS_REGISTER_K0) {
        return "unexpected mask";
    }
    int bc = 0;
    for (int i = 0; i < nops; i++) bc |= ops[i].kind == X64_K_MEM && ops[i].bcst;
    if (bc) {
        ZydisBroadcastMode want = zi->avx.vector_length == 512 ? ZYDIS_BROADCAST_MODE_1_TO_16
                                : zi->avx.vector_length == 256 ? ZYDIS_BROADCAST_MODE_1_TO_8
                                                                : ZYDIS_BROADCAST_MODE_1_TO_4;
        if (zi->avx.broadcast.mode != want) return "broadcast";
    } else if (zi->avx.broadcast.mode != ZYDIS_BROADCAST_MODE_INVALID && !zi->avx.broadcast.is_static) {
        return "unexpected broadcast";
    }
    /* reported features agree with the encoding */
    if (evex && !(info->features & X64_F_AVX512F)) return "features: EVEX without AVX512F";
    if (evex && zi->avx.vector_length < 512 && !(row->flags & XF_LIG) && !(info->features & X64_F_AVX512VL))
        return "features: AVX512VL missing";
    if (zi->encoding == ZYDIS_INSTRUCTION_ENCODING_VEX && !info->features) return "features: VEX without any";
    return NULL;
}

START_TEST(test_differential) {
    uint64_t seed = env_u64("FRAMEJIT_TEST_SEED", 0x5eed0f00d1234567ULL);
    long iters = fjt_iters("FRAMEJIT_TEST_ITERS", 120000);
    rng_state = seed ? seed : 1;
    fprintf(stderr, "x64_zydis: seed 0x%" PRIx64 ", %ld encodings over %d forms\n", seed, iters, x64_nrows);
    ZydisDecoder dec;
    ck_assert(ZYAN_SUCCESS(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)));
    static long per_op[X64_OP_COUNT];
    memset(per_op, 0, sizeof per_op);
    nfail = 0;
    fail_msg[0] = 0;
    long compared = 0, vregs_compared = 0, vmem_compared = 0;
    for (long it = 0; it < iters; it++) {
        const x64_row *row = &x64_rows[it % x64_nrows];
        x64_opnd ops[4];
        int cc;
        int nops = gen_row(row, ops, &cc);
        x64_op op = (x64_op)(row->op + cc);
        /* Guard bytes after the 15-byte buffer catch writes past it. */
        uint8_t code[X64_MAX_LEN + 8];
        memset(code, 0xA5, sizeof code);
        x64_enc_info info;
        int len = x64_encode(op, ops, nops, code, &info);
        for (size_t g = X64_MAX_LEN; g < sizeof code; g++)
            if (code[g] != 0xA5) { report(op, ops, nops, code, 15, NULL, NULL, "wrote past 15 bytes"); break; }
        if (len <= 0) {
            report(op, ops, nops, code, 0, NULL, NULL, x64_err_str(len));
            continue;
        }
        /* The memo of winning rows must give the bytes the full search
         * gives (random values: most encodings here are memo hits). */
        uint8_t ref[X64_MAX_LEN];
        x64_enc_info ref_info;
        int ref_len = x64_encode_search(op, ops, nops, ref, &ref_info);
        if (ref_len != len || memcmp(ref, code, (size_t)len) ||
            ref_info.features != info.features || ref_info.disp_pos != info.disp_pos ||
            ref_info.rel_pos != info.rel_pos) {
            report(op, ops, nops, code, len, NULL, NULL, "memo hit differs from the full search");
            continue;
        }
        /* So must the register-only templates, where they apply. */
        uint8_t vr[4];
        int nv = 0, vbits = ops[0].bits, vimm = nops > 0 && ops[nops - 1].kind == X64_K_IMM;
        for (int i = 0; i < nops - vimm && nv >= 0; i++)
            if (ops[i].kind == X64_K_VEC && ops[i].bits == vbits && !ops[i].mask && !ops[i].zero)
                vr[nv++] = ops[i].reg;
            else
                nv = -1;
        uint32_t vfeat = 0;
        int vlen = nv >= 2 ? x64_encode_vregs(op, vbits, vr, nv, vimm ? ops[nops - 1].imm : 0,
                                              vimm, ref, &vfeat)
                           : 0;
        if (vlen > 0) {
            vregs_compared++;
            if (vlen != len || memcmp(ref, code, (size_t)len) || vfeat != info.features) {
                report(op, ops, nops, code, len, NULL, NULL, "register template differs");
                continue;
            }
        }
        /* And the 512-bit memory forms (x64_encode_vmem checks its own
         * operands: 0 for anything else). */
        vlen = x64_encode_vmem(op, ops, nops, ref, &vfeat);
        if (vlen > 0) {
            vmem_compared++;
            if (vlen != len || memcmp(ref, code, (size_t)len) || vfeat != info.features) {
                report(op, ops, nops, code, len, NULL, NULL, "memory-form template differs");
                continue;
            }
        }
        ZydisDecodedInstruction zi;
        ZydisDecodedOperand zo[ZYDIS_MAX_OPERAND_COUNT];
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, code, (ZyanUSize)len, &zi, zo))) {
            report(op, ops, nops, code, len, NULL, NULL, "Zydis cannot decode");
            continue;
        }
        const char *why = compare(op, row, ops, nops, len, code, &info, &zi, zo);
        if (why) report(op, ops, nops, code, len, &zi, zo, why);
        else per_op[op]++;
        compared++;
    }
    ck_assert_msg(nfail == 0, "%d of %ld encodings mismatched (seed 0x%" PRIx64 "); first:\n%s", nfail, iters,
                  seed, fail_msg);
    ck_assert_int_ge(compared, iters);
    if (iters >= 100000) ck_assert_int_gt(vregs_compared, iters / 50);
    if (iters >= 100000) ck_assert_int_gt(vmem_compared, iters / 100);
    fprintf(stderr, "x64_zydis: %ld register-template and %ld memory-form encodings compared\n",
            vregs_compared, vmem_compared);
    if (iters >= 100000)
        for (int op = 1; op < X64_OP_COUNT; op++)
            ck_assert_msg(per_op[op] > 0, "mnemonic %s never encoded and verified", x64_op_name((x64_op)op));
}
END_TEST

/* The table is sorted by mnemonic (the encoder binary-searches it). */
START_TEST(test_table_sorted) {
    for (int i = 1; i < x64_nrows; i++)
        ck_assert_msg(x64_rows[i - 1].op <= x64_rows[i].op, "row %d (%s) out of order", i,
                      x64_op_name((x64_op)x64_rows[i].op));
}
END_TEST

int main(void) {
    Suite *s = suite_create("x64_zydis");
    TCase *tc = tcase_create("differential");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_table_sorted);
    tcase_add_test(tc, test_differential);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
