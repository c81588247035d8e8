/* x64_encode.c: the table-driven x86-64 encoder (legacy/REX, VEX, EVEX forms). */
#include <pthread.h>
#include <string.h>

#include "kernels/x64.h"
#include "kernels/x64_table.h"

/*
 *   x64_encode(op, operands)
 *     │ rows_of(op): binary search in x64_rows (condition families map to
 *     │              their first member + cc)
 *     ▼
 *   for each row of op:  match()  operand classes → an x64_form
 *                        emit()   [66/F2/F3][REX] | VEX2/VEX3 | EVEX,
 *                                 opcode, ModRM, SIB, disp, imm
 *     ▼
 *   keep the shortest legacy/VEX encoding; an EVEX one only when no
 *   legacy/VEX row matched (EVEX needs AVX-512 even when shorter).
 */

/* What matching one row against the operands yields. */
typedef struct x64_form {
    const x64_row *row;
    int s;                  /* GPR operand size in bits, 0 = none */
    int l;                  /* vector length in bits, 0 = none */
    int cc;                 /* condition code of a family member */
    uint8_t reg;            /* register in ModRM.reg (0..31) */
    uint8_t vvvv;           /* register in vvvv (0..31), 0 when unused */
    uint8_t opr;            /* register in the opcode's low bits */
    uint8_t is4;            /* register in imm8[7:4] */
    uint8_t has_is4;
    uint8_t rex8;           /* an 8-bit spl/bpl/sil/dil operand: REX required */
    const x64_opnd *rm;     /* operand in ModRM.rm (register or memory) */
    int64_t imm;
    int immsz;              /* immediate bytes (0, 1, 4, 8) */
    int64_t rel;
    int relsz;              /* branch displacement bytes (0, 1, 4) */
    uint8_t mask, zero, bcst;
} x64_form;

enum { MATCH_NO = 0, MATCH_OK = 1, MATCH_RANGE = 2 };

static const char op_text[X64_OP_COUNT][16] = {
    "(none)",
#define X64_OP_TEXT(n) #n,
    FJ_OPS(X64_OP_TEXT)
#undef X64_OP_TEXT
};
static char op_lower[X64_OP_COUNT][16];
static pthread_once_t op_lower_once = PTHREAD_ONCE_INIT;

static void op_lower_init(void) {
    for (int i = 0; i < X64_OP_COUNT; i++)
        for (int j = 0; j < 15 && op_text[i][j]; j++) {
            char c = op_text[i][j];
            op_lower[i][j] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        }
}

const char *x64_op_name(x64_op op) {
    if ((unsigned)op >= X64_OP_COUNT) return "(bad op)";
    pthread_once(&op_lower_once, op_lower_init);
    return op_lower[op];
}

const char *x64_err_str(int err) {
    switch (err) {
    case X64_E_FORM: return "no encoding of this mnemonic takes these operands";
    case X64_E_RANGE: return "immediate, displacement or register out of range";
    case X64_E_OP: return "unknown mnemonic";
    default: return err > 0 ? "no error" : "unknown encoder error";
    }
}

/* ---- finding the rows of a mnemonic ---------------------------------- */

/* Condition families are one row set each; op - first member = cc. */
static x64_op family(x64_op op, int *cc) {
    static const uint16_t first[] = { X64_CMOVO, X64_SETO, X64_JO };
    for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
        if ((int)op >= first[i] && (int)op < first[i] + 16) {
            *cc = (int)(op - first[i]);
            return (x64_op)first[i];
        }
    *cc = 0;
    return op;
}

static const x64_row *rows_of(x64_op op, int *n) {
    int lo = 0, hi = x64_nrows;
    while (lo < hi) {   /* first row with row.op >= op */
        int mid = (lo + hi) / 2;
        if (x64_rows[mid].op < op) lo = mid + 1; else hi = mid;
    }
    int end = lo;
    while (end < x64_nrows && x64_rows[end].op == op) end++;
    *n = end - lo;
    return &x64_rows[lo];
}

/* ---- operand matching ------------------------------------------------ */

static int is_gpr(const x64_opnd *o, int bits) { return o->kind == X64_K_GPR && o->bits == bits; }
static int is_vec(const x64_opnd *o, int bits) { return o->kind == X64_K_VEC && o->bits == bits; }
/* Memory of the given width; width 0 in the operand means "implied". */
static int is_mem(const x64_opnd *o, int bits) {
    return o->kind == X64_K_MEM && !o->bcst && (o->bits == 0 || o->bits == bits);
}
static int is_generic_gpr(int c) { return c == XC_R || c == XC_RM || c == XC_RAX; }
static int is_generic_vec(int c) { return c == XC_V || c == XC_VM || c == XC_VMB || c == XC_MV; }

/* Immediate as an s-bit operand: a 32-bit operation takes 0..0xffffffff
 * too (its bit pattern), which then matches the sign-extended forms. */
static int64_t imm_norm(int64_t v, int s) {
    if (s == 32 && v >= 0x80000000LL && v <= 0xffffffffLL) return (int64_t)(int32_t)(uint32_t)v;
    return v;
}
static int fits8(int64_t v) { return v >= -128 && v <= 127; }
static int fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* Operand sizes the generic classes take from this instruction's operands. */
static int sizes(const x64_row *r, const x64_opnd *ops, int nops, x64_form *f) {
    int s = 0, l = 0;
    for (int i = 0; i < nops; i++) {
        int c = X64_OPD_CLASS(r->opd[i]);
        const x64_opnd *o = &ops[i];
        int b = 0;
        if (is_generic_gpr(c) && (o->kind == X64_K_GPR || o->kind == X64_K_MEM)) b = o->bits;
        else if (is_generic_vec(c) && (o->kind == X64_K_VEC || o->kind == X64_K_MEM)) {
            b = o->bits;
            if (o->kind == X64_K_MEM && o->bcst && b == 32) b = 0;  /* element width */
        } else continue;
        if (!b) continue;
        int *dst = is_generic_gpr(c) ? &s : &l;
        if (*dst && *dst != b) return 0;
        *dst = b;
    }
    int vsz = r->sz & (XZ_128 | XZ_256 | XZ_512);
    if (!l && vsz) {
        /* No operand fixed the width: rows with one width (scalar, k ops,
         * ymm-only forms) use it; generic rows cannot guess. */
        int generic = 0;
        for (int i = 0; i < 4; i++) generic |= is_generic_vec(X64_OPD_CLASS(r->opd[i]));
        if (generic && (vsz & (vsz - 1))) return 0;
        l = (vsz & XZ_128) ? 128 : (vsz & XZ_256) ? 256 : 512;
    }
    if (s && !(r->sz & (s == 8 ? XZ_8 : s == 16 ? XZ_16 : s == 32 ? XZ_32 : XZ_64))) return 0;
    if (l && !(r->sz & (l == 128 ? XZ_128 : l == 256 ? XZ_256 : XZ_512))) return 0;
    for (int i = 0; i < nops; i++)  /* a generic GPR class needs a size */
        if (is_generic_gpr(X64_OPD_CLASS(r->opd[i])) && !s) return 0;
    f->s = s;
    f->l = (r->flags & XF_LIG) ? 128 : l;
    return 1;
}

/* Does operand o belong to class c under the sizes in f? */
static int match_class(const x64_form *f, int c, const x64_opnd *o, int evex) {
    int s = f->s, l = f->l;
    int vmax = evex ? 32 : 16;   /* VEX reaches xmm0-15 only */
    if (o->kind == X64_K_VEC && o->reg >= vmax) return MATCH_NO;
    switch (c) {
    case XC_R: return is_gpr(o, s);
    case XC_RM: return is_gpr(o, s) || is_mem(o, s);
    case XC_RAX: return is_gpr(o, s) && o->reg == X64_RAX;
    case XC_CL: return is_gpr(o, 8) && o->reg == X64_RCX;
    case XC_ONE: return o->kind == X64_K_IMM && o->imm == 1 && (o->bits == 0 || o->bits == 8);
    case XC_R8: return is_gpr(o, 8);
    case XC_RM8: return is_gpr(o, 8) || is_mem(o, 8);
    case XC_RM16: return is_gpr(o, 16) || is_mem(o, 16);
    case XC_R32: return is_gpr(o, 32);
    case XC_RM32: return is_gpr(o, 32) || is_mem(o, 32);
    case XC_R64: return is_gpr(o, 64);
    case XC_RM64: return is_gpr(o, 64) || is_mem(o, 64);
    case XC_M: return o->kind == X64_K_MEM && !o->bcst;
    case XC_M16: return is_mem(o, 16);
    case XC_M32: return is_mem(o, 32);
    case XC_M64: return is_mem(o, 64);
    case XC_I8: case XC_U8: case XC_I32: case XC_I64: {
        int want = c == XC_I32 ? 32 : c == XC_I64 ? 64 : 8;
        if (o->kind != X64_K_IMM || (o->bits && o->bits != want)) return MATCH_NO;
        int64_t v = imm_norm(o->imm, s);
        int ok = c == XC_I8 ? fits8(v) : c == XC_U8 ? (o->imm >= -128 && o->imm <= 255)
               : c == XC_I32 ? fits32(v) : 1;
        return ok ? MATCH_OK : MATCH_RANGE;
    }
    case XC_REL8: case XC_REL32:
        if (o->kind != X64_K_REL || o->bits != (c == XC_REL8 ? 8 : 32)) return MATCH_NO;
        return (c == XC_REL8 ? fits8(o->imm) : fits32(o->imm)) ? MATCH_OK : MATCH_RANGE;
    case XC_V: return is_vec(o, l);
    case XC_VM: return is_vec(o, l) || is_mem(o, l);
    case XC_VMB:
        return is_vec(o, l) || is_mem(o, l) ||
               (o->kind == X64_K_MEM && o->bcst && (o->bits == 0 || o->bits == 32 || o->bits == l));
    case XC_MV: return is_mem(o, l);
    case XC_X: return is_vec(o, 128);
    case XC_Y: return is_vec(o, 256);
    case XC_XM32: return is_vec(o, 128) || is_mem(o, 32);
    case XC_XM64: return is_vec(o, 128) || is_mem(o, 64);
    case XC_XM128: return is_vec(o, 128) || is_mem(o, 128);
    case XC_YM: return is_vec(o, 256) || is_mem(o, 256);
    case XC_K: return o->kind == X64_K_KREG;
    case XC_KM16: return o->kind == X64_K_KREG || is_mem(o, 16);
    case XC_KM32: return o->kind == X64_K_KREG || is_mem(o, 32);
    default: return MATCH_NO;
    }
}

static int match(const x64_row *r, const x64_opnd *ops, int nops, int cc, x64_form *f) {
    memset(f, 0, sizeof *f);
    f->row = r;
    f->cc = cc;
    int want = 0;
    while (want < 4 && r->opd[want]) want++;
    if (want != nops || !sizes(r, ops, nops, f)) return MATCH_NO;
    int evex = r->enc == XE_EVEX, range = 0;
    for (int i = 0; i < nops; i++) {
        const x64_opnd *o = &ops[i];
        int c = X64_OPD_CLASS(r->opd[i]);
        /* Write masks: EVEX only, on the destination; zeroing only into a
         * vector register (a memory or mask destination can only merge). */
        if (o->mask || o->zero) {
            if (!evex || i != 0 || (r->flags & XF_NOK) || !o->mask) return MATCH_NO;
            if (o->zero && o->kind != X64_K_VEC) return MATCH_NO;
            f->mask = o->mask;
            f->zero = o->zero;
        }
        if (o->kind == X64_K_MEM && o->bcst) {
            if (!evex || c != XC_VMB) return MATCH_NO;
            f->bcst = 1;
        }
        int m = match_class(f, c, o, evex);
        if (m == MATCH_NO) return MATCH_NO;
        if (m == MATCH_RANGE) range = 1;
        switch (X64_OPD_SLOT(r->opd[i])) {
        case XS_G: f->reg = o->reg; break;
        case XS_E: f->rm = o; break;
        case XS_H: f->vvvv = o->reg; break;
        case XS_O: f->opr = o->reg; break;
        case XS_L: f->is4 = o->reg; f->has_is4 = 1; break;
        default:
            if (o->kind == X64_K_IMM && c != XC_ONE) {
                f->imm = o->imm;
                f->immsz = c == XC_I32 ? 4 : c == XC_I64 ? 8 : 1;
            } else if (o->kind == X64_K_REL) {
                f->rel = o->imm;
                f->relsz = c == XC_REL8 ? 1 : 4;
            }
            break;
        }
        if (o->kind == X64_K_GPR && o->bits == 8 && o->reg >= 4) f->rex8 = 1;
    }
    return range ? MATCH_RANGE : MATCH_OK;
}

/* ---- emitters -------------------------------------------------------- */

/* EVEX compressed displacement scale N for the row's tuple type. */
static int disp_scale(const x64_form *f) {
    switch (f->row->tt) {
    case XT_FV: return f->bcst ? 4 : f->l / 8;
    case XT_FVM: return f->l / 8;
    case XT_T1S4: return 4;
    case XT_T1S8: return 8;
    case XT_T4: case XT_M128: return 16;
    case XT_T8: return 32;
    default: return 1;
    }
}

static int scale_bits(int scale) { return scale == 8 ? 3 : scale == 4 ? 2 : scale == 2 ? 1 : 0; }

/* ModRM (+ SIB + displacement) for ModRM.reg = regf and f->rm. N is the
 * disp8 scale (1 outside EVEX). Returns bytes written; *disp_at is set to
 * the offset of a RIP-relative disp32. */
static int emit_modrm(uint8_t *p, int regf, const x64_opnd *rm, int n, int *disp_at) {
    uint8_t *q = p;
    regf &= 7;
    if (rm->kind != X64_K_MEM) {
        *q++ = (uint8_t)(0xC0 | regf << 3 | (rm->reg & 7));   /* mod 11: register */
        return (int)(q - p);
    }
    int32_t d = rm->disp;
    int base = rm->base, index = rm->index;
    if (base == X64_RIP) {
        *q++ = (uint8_t)(regf << 3 | 5);      /* mod 00 rm 101: [rip + disp32] */
        *disp_at = (int)(q - p);
    } else if (base == X64_NOREG) {
        /* mod 00 rm 100, SIB base 101: [index*scale + disp32] or [disp32]
         * (rm 101 alone would be RIP-relative in 64-bit mode). */
        *q++ = (uint8_t)(regf << 3 | 4);
        *q++ = (uint8_t)(scale_bits(rm->scale) << 6 | (index == X64_NOREG ? 4 : index & 7) << 3 | 5);
    } else {
        int mod;
        /* rbp/r13 as base with mod 00 means "no base": they need a disp8 0. */
        if (d == 0 && (base & 7) != 5) mod = 0;
        else if (d % n == 0 && fits8(d / n)) mod = 1;
        else mod = 2;
        if (index != X64_NOREG || (base & 7) == 4) {
            /* rsp/r12 as base (rm 100) always need a SIB byte. */
            *q++ = (uint8_t)(mod << 6 | regf << 3 | 4);
            *q++ = (uint8_t)((index == X64_NOREG ? 0 : scale_bits(rm->scale)) << 6 |
                             (index == X64_NOREG ? 4 : index & 7) << 3 | (base & 7));
        } else {
            *q++ = (uint8_t)(mod << 6 | regf << 3 | (base & 7));
        }
        if (mod == 1) { *q++ = (uint8_t)(int8_t)(d / n); return (int)(q - p); }
        if (mod == 0) return (int)(q - p);
    }
    memcpy(q, &d, 4);   /* x86-64 is little-endian */
    return (int)(q - p) + 4;
}

/* Bit 3 (REX/VEX extension) and bit 4 (EVEX) of the rm operand's register
 * numbers: b = base or register, x = index, or bit 4 of a register rm. */
static void rm_bits(const x64_opnd *rm, int *b, int *x) {
    *b = *x = 0;
    if (!rm) return;
    if (rm->kind == X64_K_MEM) {
        *b = rm->base < 16 && (rm->base & 8);
        *x = rm->index < 16 && (rm->index & 8);
    } else {
        *b = (rm->reg >> 3) & 1;
        *x = (rm->reg >> 4) & 1;   /* EVEX.X extends a register rm to 16-31 */
    }
}

static int emit(const x64_form *f, uint8_t *out, x64_enc_info *info) {
    const x64_row *r = f->row;
    uint8_t *p = out;
    int map = X64_PFX_MAP(r->pfx), pp = X64_PFX_PP(r->pfx);
    int w = r->w == XW_1 || (r->w == XW_S && f->s == 64);
    int regf = r->ext >= 0 ? r->ext : f->reg;
    int b, x;
    rm_bits(f->rm, &b, &x);
    for (int i = 0; i < 4 && r->opd[i]; i++)
        if (X64_OPD_SLOT(r->opd[i]) == XS_O) b = (f->opr >> 3) & 1;
    int lbits = f->l == 512 ? 2 : f->l == 256 ? 1 : 0;
    if (r->flags & XF_LIG) lbits = 0;

    if (r->enc == XE_LEG) {
        static const uint8_t mandatory[4] = { 0, 0x66, 0xF3, 0xF2 };
        if (pp) *p++ = mandatory[pp];
        int rex = w << 3 | ((regf >> 3) & 1) << 2 | (f->rm && f->rm->kind == X64_K_MEM ? x : 0) << 1 | b;
        if (rex || f->rex8) *p++ = (uint8_t)(0x40 | rex);   /* 0100 W R X B */
        if (map >= XM_0F) *p++ = 0x0F;
        if (map == XM_0F38) *p++ = 0x38;
        if (map == XM_0F3A) *p++ = 0x3A;
    } else if (r->enc == XE_VEX) {
        int xm = f->rm && f->rm->kind == X64_K_MEM ? x : 0;
        int rr = (regf >> 3) & 1;
        int v = ~f->vvvv & 15;                           /* vvvv is stored inverted */
        if (map == XM_0F && !w && !xm && !b) {
            *p++ = 0xC5;                                 /* 2-byte VEX */
            *p++ = (uint8_t)(!rr << 7 | v << 3 | lbits << 2 | pp);   /* R̄ vvvv̄ L pp */
        } else {
            *p++ = 0xC4;                                 /* 3-byte VEX */
            *p++ = (uint8_t)(!rr << 7 | !xm << 6 | !b << 5 | map);   /* R̄ X̄ B̄ mmmmm */
            *p++ = (uint8_t)(w << 7 | v << 3 | lbits << 2 | pp);     /* W vvvv̄ L pp */
        }
    } else {
        int rr = (regf >> 3) & 1, rr2 = (regf >> 4) & 1;
        *p++ = 0x62;
        /* P0: R̄ X̄ B̄ R̄' 0 m m m */
        *p++ = (uint8_t)(!rr << 7 | !x << 6 | !b << 5 | !rr2 << 4 | map);
        /* P1: W vvvv̄ 1 pp */
        *p++ = (uint8_t)(w << 7 | (~f->vvvv & 15) << 3 | 1 << 2 | pp);
        /* P2: z L'L b V̄' aaa  (b: broadcast from memory) */
        *p++ = (uint8_t)(f->zero << 7 | lbits << 5 | f->bcst << 4 | !((f->vvvv >> 4) & 1) << 3 | f->mask);
    }
    *p++ = (uint8_t)(r->opc + f->cc + (f->opr & 7));
    int disp_at = -1;
    if (f->rm) {
        int at = (int)(p - out);
        p += emit_modrm(p, regf, f->rm, r->enc == XE_EVEX ? disp_scale(f) : 1, &disp_at);
        if (disp_at >= 0) disp_at += at;
    }
    int rel_at = -1;
    if (f->relsz) {
        rel_at = (int)(p - out);
        if (f->relsz == 1) *p++ = (uint8_t)(int8_t)f->rel;
        else { int32_t v = (int32_t)f->rel; memcpy(p, &v, 4); p += 4; }
    }
    if (f->has_is4) *p++ = (uint8_t)(f->is4 << 4);
    if (f->immsz) {
        int64_t v = f->immsz == 8 ? f->imm : imm_norm(f->imm, f->s);
        memcpy(p, &v, (size_t)f->immsz);   /* low bytes, little-endian */
        p += f->immsz;
    }
    if (info) {
        uint32_t feat = r->feat;
        if (r->enc == XE_EVEX && f->l < 512 && !(r->flags & XF_LIG)) feat |= X64_F_AVX512VL;
        if ((r->flags & XF_I2) && f->l == 256) feat = (feat & ~(uint32_t)X64_F_AVX) | X64_F_AVX2;
        info->features = feat;
        info->disp_pos = (int8_t)disp_at;
        info->rel_pos = (int8_t)rel_at;
        info->rel_size = (int8_t)(f->relsz ? f->relsz : 0);
    }
    return (int)(p - out);
}

/* ---- entry point ----------------------------------------------------- */

/* Operand checks that do not depend on the form: register numbers,
 * scales, mask numbers. */
static int check_opnd(const x64_opnd *o) {
    switch (o->kind) {
    case X64_K_GPR:
        if (o->reg >= 16) return X64_E_RANGE;
        if (o->bits != 8 && o->bits != 16 && o->bits != 32 && o->bits != 64) return X64_E_FORM;
        break;
    case X64_K_VEC:
        if (o->reg >= 32) return X64_E_RANGE;
        if (o->bits != 128 && o->bits != 256 && o->bits != 512) return X64_E_FORM;
        break;
    case X64_K_KREG: if (o->reg >= 8) return X64_E_RANGE; break;
    case X64_K_MEM:
        if (o->base >= 16 && o->base != X64_RIP && o->base != X64_NOREG) return X64_E_RANGE;
        if (o->index != X64_NOREG) {
            if (o->index >= 16) return X64_E_RANGE;
            if (o->index == X64_RSP || o->base == X64_RIP) return X64_E_FORM;  /* no encoding */
            if (o->scale != 1 && o->scale != 2 && o->scale != 4 && o->scale != 8) return X64_E_RANGE;
        }
        break;
    case X64_K_IMM: case X64_K_REL: break;
    default: return X64_E_FORM;
    }
    if (o->mask >= 8) return X64_E_RANGE;
    if (o->bcst && o->kind != X64_K_MEM) return X64_E_FORM;   /* broadcast is a memory form */
    return 0;
}

int x64_encode(x64_op op, const x64_opnd *ops, int nops, uint8_t *out, x64_enc_info *info) {
    if (info) { info->features = 0; info->disp_pos = -1; info->rel_pos = -1; info->rel_size = 0; }
    if ((unsigned)op == X64_NONE || (unsigned)op >= X64_OP_COUNT) return X64_E_OP;
    if (nops < 0 || nops > 4 || (nops && !ops)) return X64_E_FORM;
    for (int i = 0; i < nops; i++) {
        int e = check_opnd(&ops[i]);
        if (e) return e;
    }
    int cc, n;
    const x64_row *rows = rows_of(family(op, &cc), &n);
    /* Candidates are written to two scratch buffers in turn (the best one
     * stays put); out is written once, with the winner only. */
    uint8_t buf[2][X64_MAX_LEN + 1];
    x64_enc_info cand_info[2];
    int cur = 0, best = -1, best_len = 0, best_evex = 0, range = 0;
    for (int i = 0; i < n; i++) {
        x64_form f;
        int m = match(&rows[i], ops, nops, cc, &f);
        if (m == MATCH_RANGE) range = 1;
        if (m != MATCH_OK) continue;
        int evex = rows[i].enc == XE_EVEX;
        if (best >= 0 && evex && !best_evex) continue;   /* EVEX only when needed */
        int len = emit(&f, buf[cur], &cand_info[cur]);
        if (best < 0 || (best_evex && !evex) || len < best_len) {
            best = cur;
            best_len = len;
            best_evex = evex;
            cur ^= 1;
        }
    }
    if (best < 0) return range ? X64_E_RANGE : X64_E_FORM;
    memcpy(out, buf[best], (size_t)best_len);
    if (info) *info = cand_info[best];
    return best_len;
}
