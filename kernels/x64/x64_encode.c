/* x64_encode.c: the table-driven x86-64 encoder (legacy/REX, VEX, EVEX forms). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_enc_int.h"
#include "kernels/x64/x64_table.h"
#include "kernels/x64/x64_templ.h"

/*
 *   x64_encode(op, operands)
 *     │ shape_of():   registers, scales, masks; the operands' shape
 *     │               signature; detail_of(): the value facts rows differ on
 *     │ memo:         (op, signature, details) seen before → its winning
 *     │               row: fill() + emit() and done (the common case)
 *     │ index[op]:    first row and row count (condition families map to
 *     │               their first member + cc); built once, on first use
 *     ▼
 *   for each row of op:  signature filter: one AND against the kinds each
 *                                 operand class accepts (skips most rows)
 *                        length bound: skip rows that cannot be shorter
 *                        match()  operand classes → an x64_form
 *                        emit()   [66/F2/F3][REX] | VEX2/VEX3 | EVEX,
 *                                 opcode, ModRM, SIB, disp, imm
 *     ▼
 *   keep the shortest legacy/VEX encoding (the first row on a tie); an EVEX
 *   one only when no legacy/VEX row matched (EVEX needs AVX-512 even when
 *   shorter).
 *
 * Speed matters: a kernel is generated while its caller waits, and
 * encoding is most of that time. The common instruction tries one or two
 * rows and emits once, straight into the caller's buffer.
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
    uint8_t has_opr;        /* a register lives in the opcode's low bits */
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

/* Operand shapes: one bit per kind of register and width (vector
 * registers 16-31 apart: only EVEX reaches them), memory, broadcast
 * memory, immediate, branch target. An instruction's signature holds one
 * shape per operand, 16 bits each, SH_NONE past the last; a row accepts a
 * set of shapes per operand, computed once from its classes and sizes.
 * A row can match only if sig & acc == sig: that one test rejects nearly
 * every row that would not match, before any per-operand work. */
enum {
    SH_NONE = 1 << 0,
    SH_G8 = 1 << 1, SH_G16 = 1 << 2, SH_G32 = 1 << 3, SH_G64 = 1 << 4,
    SH_X = 1 << 5, SH_Y = 1 << 6, SH_Z = 1 << 7,        /* xmm/ymm/zmm 0-15 */
    SH_XH = 1 << 8, SH_YH = 1 << 9, SH_ZH = 1 << 10,    /* xmm/ymm/zmm 16-31 */
    SH_K = 1 << 11, SH_M = 1 << 12, SH_MB = 1 << 13,    /* MB: {1toN} memory */
    SH_I = 1 << 14, SH_REL = 1 << 15,
};
#define SIG_NONE 0x0001000100010001ull   /* SH_NONE in all four operands */

/* Per-row facts derived from the table once, so that rejecting a row is a
 * few instructions instead of a walk over its operand classes. */
typedef struct row_aux {
    uint64_t acc;      /* 16 bits per operand: the shapes its class accepts */
    uint64_t w64;      /* SH_G64 at the generic GPR operands of a legacy row
                          with REX.W = operand size: such a match needs REX */
    uint8_t gmask;     /* bit i: operand i has a generic GPR class */
    uint8_t vmask;     /* bit i: operand i has a generic vector class */
    uint8_t minlen;    /* no encoding of the row is shorter */
    uint8_t legacy;    /* a legacy row: any REX need adds a byte */
    uint8_t tail_min;  /* least minlen of the mnemonic's later rows (255: none) */
    uint8_t tail_vex;  /* a later row is legacy or VEX */
} row_aux;

static row_aux aux[X64_MAX_ROWS];
static uint16_t op_first[X64_OP_COUNT];   /* first row of the mnemonic's family */
static uint8_t op_nrows[X64_OP_COUNT];
static uint8_t op_cc[X64_OP_COUNT];       /* condition code of a family member */
static pthread_once_t index_once = PTHREAD_ONCE_INIT;
/* Set (release) once the index is built: the common path is one acquire
 * load instead of a call into pthread_once. */
static atomic_int index_ready;

static int is_generic_gpr(int c) { return c == XC_R || c == XC_RM || c == XC_RAX; }
static int is_generic_vec(int c) { return c == XC_V || c == XC_VM || c == XC_VMB || c == XC_MV; }

/* Shapes class c accepts in row r. A superset is fine (match() decides);
 * a missing shape would turn a range error into a form error, so
 * immediates and branch targets are accepted whatever their value. */
static unsigned class_shapes(const x64_row *r, int c) {
    unsigned g = 0, v = 0;
    if (r->sz & XZ_8) g |= SH_G8;
    if (r->sz & XZ_16) g |= SH_G16;
    if (r->sz & XZ_32) g |= SH_G32;
    if (r->sz & XZ_64) g |= SH_G64;
    if (r->sz & XZ_128) v |= SH_X;
    if (r->sz & XZ_256) v |= SH_Y;
    if (r->sz & XZ_512) v |= SH_Z;
    unsigned x = SH_X, y = SH_Y;
    if (r->enc == XE_EVEX) {   /* EVEX reaches vector registers 16-31 */
        v |= v << 3;
        x |= SH_XH;
        y |= SH_YH;
    }
    switch (c) {
    case XC_R: case XC_RAX: return g;
    case XC_RM: return g | SH_M;
    case XC_CL: case XC_R8: return SH_G8;
    case XC_RM8: return SH_G8 | SH_M;
    case XC_RM16: return SH_G16 | SH_M;
    case XC_R32: return SH_G32;
    case XC_RM32: return SH_G32 | SH_M;
    case XC_R64: return SH_G64;
    case XC_RM64: return SH_G64 | SH_M;
    case XC_M: case XC_M16: case XC_M32: case XC_M64: case XC_MV: return SH_M;
    case XC_ONE: case XC_I8: case XC_U8: case XC_I32: case XC_I64: return SH_I;
    case XC_REL8: case XC_REL32: return SH_REL;
    case XC_V: return v;
    case XC_VM: return v | SH_M;
    case XC_VMB: return v | SH_M | (r->enc == XE_EVEX ? SH_MB : 0);
    case XC_X: return x;
    case XC_Y: return y;
    case XC_XM32: case XC_XM64: case XC_XM128: return x | SH_M;
    case XC_YM: return y | SH_M;
    case XC_K: return SH_K;
    case XC_KM16: case XC_KM32: return SH_K | SH_M;
    default: return 0;
    }
}

/* Fewest bytes any encoding of row r can take: prefixes and escapes the
 * row always needs, opcode, ModRM, immediates, branch displacement. REX,
 * SIB and displacements depend on the operands and are left out. */
static int row_minlen(const x64_row *r) {
    int map = X64_PFX_MAP(r->pfx), n = 1;   /* opcode */
    if (r->enc == XE_LEG) n += (X64_PFX_PP(r->pfx) != 0) + (map == XM_0F ? 1 : map ? 2 : 0);
    else if (r->enc == XE_VEX) n += map == XM_0F && r->w != XW_1 ? 2 : 3;
    else n += 4;
    if (r->enc == XE_LEG && r->w == XW_1) n += 1;   /* REX.W */
    if (r->flags & XF_RM0) n += 1;                  /* its fixed ModRM */
    for (int i = 0; i < 4 && r->opd[i]; i++) {
        int c = X64_OPD_CLASS(r->opd[i]), slot = X64_OPD_SLOT(r->opd[i]);
        if (slot == XS_E || slot == XS_L) n += 1;   /* ModRM / is4 byte */
        else if (c == XC_I8 || c == XC_U8 || c == XC_REL8) n += 1;
        else if (c == XC_I32 || c == XC_REL32) n += 4;
        else if (c == XC_I64) n += 8;
    }
    return n;
}

static void index_init(void) {
    for (int i = 0; i < x64_nrows; i++) {
        const x64_row *r = &x64_rows[i];
        row_aux *a = &aux[i];
        for (int j = 0; j < 4; j++) {
            int c = r->opd[j] ? X64_OPD_CLASS(r->opd[j]) : XC_NONE;
            a->acc |= (uint64_t)(c == XC_NONE ? SH_NONE : class_shapes(r, c)) << (16 * j);
            if (c != XC_NONE && is_generic_gpr(c)) {
                a->gmask |= (uint8_t)(1u << j);
                if (r->enc == XE_LEG && r->w == XW_S) a->w64 |= (uint64_t)SH_G64 << (16 * j);
            }
            if (c != XC_NONE && is_generic_vec(c)) a->vmask |= (uint8_t)(1u << j);
        }
        a->minlen = (uint8_t)row_minlen(r);
        a->legacy = r->enc == XE_LEG && r->w != XW_1;   /* W1 rows count REX already */
        /* A condition family's rows serve all 16 members; other rows their
         * own mnemonic. Rows of a mnemonic are adjacent. */
        int members = (r->flags & XF_CC) ? 16 : 1;
        for (int cc = 0; cc < members; cc++) {
            int op = r->op + cc;
            if (op >= X64_OP_COUNT) break;
            if (!op_nrows[op]) op_first[op] = (uint16_t)i;
            op_nrows[op]++;
            op_cc[op] = (uint8_t)cc;
        }
    }
    /* What the rows after each one could still offer (a first match only
     * looks further when a later row might be shorter). */
    for (int i = x64_nrows - 1; i >= 0; i--) {
        int last = i == x64_nrows - 1 || x64_rows[i + 1].op != x64_rows[i].op;
        aux[i].tail_min = last ? 255 : (uint8_t)(aux[i + 1].minlen < aux[i + 1].tail_min
                                                      ? aux[i + 1].minlen : aux[i + 1].tail_min);
        aux[i].tail_vex = !last && (x64_rows[i + 1].enc != XE_EVEX || aux[i + 1].tail_vex);
    }
    atomic_store_explicit(&index_ready, 1, memory_order_release);
}

/* ---- operand matching ------------------------------------------------ */

static int is_gpr(const x64_opnd *o, int bits) { return o->kind == X64_K_GPR && o->bits == bits; }
static int is_vec(const x64_opnd *o, int bits) { return o->kind == X64_K_VEC && o->bits == bits; }
/* Memory of the given width; width 0 in the operand means "implied". */
static int is_mem(const x64_opnd *o, int bits) {
    return o->kind == X64_K_MEM && !o->bcst && (o->bits == 0 || o->bits == bits);
}

/* Immediate as an s-bit operand: a 32-bit operation takes 0..0xffffffff
 * too (its bit pattern), which then matches the sign-extended forms. */
static int64_t imm_norm(int64_t v, int s) {
    if (s == 32 && v >= 0x80000000LL && v <= 0xffffffffLL) return (int64_t)(int32_t)(uint32_t)v;
    return v;
}
static int fits8(int64_t v) { return v >= -128 && v <= 127; }
static int fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* XZ_* bit of an operand size, 0 for a size no class takes (a 128-bit
 * memory operand of an integer instruction, a 64-bit one of a vector
 * instruction). */
static int gsize_bit(int s) {
    return s == 8 ? XZ_8 : s == 16 ? XZ_16 : s == 32 ? XZ_32 : s == 64 ? XZ_64 : 0;
}
static int vsize_bit(int l) {
    return l == 128 ? XZ_128 : l == 256 ? XZ_256 : l == 512 ? XZ_512 : 0;
}

/* Operand sizes the generic classes take from this instruction's operands. */
static int sizes(const x64_row *r, const row_aux *a, const x64_opnd *ops, x64_form *f) {
    int s = 0, l = 0;
    for (unsigned m = a->gmask; m; m &= m - 1) {
        const x64_opnd *o = &ops[__builtin_ctz(m)];
        if ((o->kind != X64_K_GPR && o->kind != X64_K_MEM) || !o->bits) continue;
        if (s && s != o->bits) return 0;
        s = o->bits;
    }
    for (unsigned m = a->vmask; m; m &= m - 1) {
        const x64_opnd *o = &ops[__builtin_ctz(m)];
        if (o->kind != X64_K_VEC && o->kind != X64_K_MEM) continue;
        int b = o->bits;
        if (o->kind == X64_K_MEM && o->bcst && b == 32) b = 0;  /* element width */
        if (!b) continue;
        if (l && l != b) return 0;
        l = b;
    }
    int vsz = r->sz & (XZ_128 | XZ_256 | XZ_512);
    if (!l && vsz) {
        /* No operand fixed the width: rows with one width (scalar, k ops,
         * ymm-only forms) use it; generic rows cannot guess. */
        if (a->vmask && (vsz & (vsz - 1))) return 0;
        l = (vsz & XZ_128) ? 128 : (vsz & XZ_256) ? 256 : 512;
    }
    if (s && !(r->sz & gsize_bit(s))) return 0;
    if (l && !(r->sz & vsize_bit(l))) return 0;
    if (a->gmask && !s) return 0;   /* a generic GPR class needs a size */
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

/* Operand o into the field of the form that its row slot names. */
static inline void assign(x64_form *f, uint16_t opd, const x64_opnd *o) {
    int c = X64_OPD_CLASS(opd);
    switch (X64_OPD_SLOT(opd)) {
    case XS_G: f->reg = o->reg; break;
    case XS_E: f->rm = o; break;
    case XS_H: f->vvvv = o->reg; break;
    case XS_O: f->opr = o->reg; f->has_opr = 1; break;
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
}

/* The caller has checked the operand count and kinds (row_aux.acc).
 * Not inlined: the compiler would split *f into scalars and track each
 * field's "written" state through the loop, which costs more than the
 * stores it saves. */
static __attribute__((noinline)) int match(const x64_row *r, const row_aux *a,
                                           const x64_opnd *ops, int nops, int cc, x64_form *f) {
    *f = (x64_form){.row = r, .cc = cc};
    if (!sizes(r, a, ops, f)) return MATCH_NO;
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
        if (o->kind <= X64_K_KREG) {
            /* A register: its shape passed the row's filter, which checked
             * kind, width and bank; sizes() made generic widths agree.
             * Only the implicit-register classes are left. */
            if ((c == XC_RAX && o->reg != X64_RAX) || (c == XC_CL && o->reg != X64_RCX))
                return MATCH_NO;
            if (o->kind == X64_K_GPR && o->bits == 8 && o->reg >= 4) f->rex8 = 1;
        } else {
            if (o->kind == X64_K_MEM && o->bcst) {
                if (!evex || c != XC_VMB) return MATCH_NO;
                f->bcst = 1;
            }
            int m = match_class(f, c, o, evex);
            if (m == MATCH_NO) return MATCH_NO;
            if (m == MATCH_RANGE) range = 1;
        }
        assign(f, r->opd[i], o);
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
 * disp8 scale (1 outside EVEX, a power of two). Returns bytes written;
 * *disp_at is set to the offset of a RIP-relative disp32. A base register
 * or RIP: the writer the template paths use (x64_templ.h). */
static int emit_modrm(uint8_t *p, int regf, const x64_opnd *rm, int n, int *disp_at) {
    regf &= 7;
    if (rm->kind != X64_K_MEM) {
        *p = (uint8_t)(0xC0 | regf << 3 | (rm->reg & 7));   /* mod 11: register */
        return 1;
    }
    int32_t d = rm->disp;
    if (rm->base == X64_NOREG) {
        /* mod 00 rm 100, SIB base 101: [index*scale + disp32] or [disp32]
         * (rm 101 alone would be RIP-relative in 64-bit mode). */
        p[0] = (uint8_t)(regf << 3 | 4);
        p[1] = (uint8_t)(scale_bits(rm->scale) << 6 |
                         (rm->index == X64_NOREG ? 4 : rm->index & 7) << 3 | 5);
        memcpy(p + 2, &d, 4);   /* x86-64 is little-endian */
        return 6;
    }
    if (rm->base == X64_RIP) *disp_at = 1;
    const x64_vm_mem m = {rm->base, rm->index,
                          (uint8_t)(rm->index == X64_NOREG ? 1 : rm->scale), 0, rm->bits, d};
    return (int)(x64_modrm_mem(p, (unsigned)regf, &m, (unsigned)__builtin_ctz((unsigned)n)) - p);
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

/* head: where the opcode byte went (NULL: not wanted; the memo's
 * templates keep the bytes before it). */
static int emit(const x64_form *f, uint8_t *out, x64_enc_info *info, int *head) {
    const x64_row *r = f->row;
    uint8_t *p = out;
    int map = X64_PFX_MAP(r->pfx), pp = X64_PFX_PP(r->pfx);
    int w = r->w == XW_1 || (r->w == XW_S && f->s == 64);
    int regf = r->ext >= 0 ? r->ext : f->reg;
    int b, x;
    rm_bits(f->rm, &b, &x);
    if (f->has_opr) b = (f->opr >> 3) & 1;   /* such rows have no rm operand */
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
    if (head) *head = (int)(p - out);
    *p++ = (uint8_t)(r->opc + f->cc + (f->opr & 7));
    int disp_at = -1;
    if (f->rm) {
        int at = (int)(p - out);
        p += emit_modrm(p, regf, f->rm, r->enc == XE_EVEX ? disp_scale(f) : 1, &disp_at);
        if (disp_at >= 0) disp_at += at;
    } else if (r->flags & XF_RM0) {
        *p++ = (uint8_t)(0xC0 | (r->ext & 7) << 3);
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

/* After a first match of length len (EVEX if evex) is in out: tries the
 * rows [a, end) that could still win (shorter, or legacy/VEX replacing
 * EVEX) and copies a winner over out. Returns the final length. */
static __attribute__((noinline)) int shorter(const row_aux *a, const row_aux *end, uint64_t sig,
                                             int rex, const x64_opnd *ops, int nops, int cc,
                                             int evex, int len, uint8_t *out,
                                             x64_enc_info *info, int *row, int *fs,
                                             int *fl) {
    uint8_t tmp[X64_MAX_LEN + 1];
    x64_enc_info tinfo;
    for (; a < end; a++) {
        if ((sig & a->acc) != sig) continue;
        const x64_row *r = &x64_rows[a - aux];
        int row_evex = r->enc == XE_EVEX;
        int replaces = evex && !row_evex;
        if (!replaces) {
            if (row_evex && !evex) continue;   /* EVEX only when needed */
            /* REX (W, or registers 8-15) is one byte more on legacy rows. */
            if (a->minlen + (a->legacy && (rex || (sig & a->w64))) >= len) continue;
        }
        x64_form f;
        if (match(r, a, ops, nops, cc, &f) != MATCH_OK) continue;
        int n = emit(&f, tmp, &tinfo, NULL);
        if (replaces || n < len) {
            memcpy(out, tmp, (size_t)n);
            if (info) *info = tinfo;
            len = n;
            evex = row_evex;
            *row = (int)(a - aux);
            *fs = f.s;
            *fl = f.l;
        }
    }
    return len;
}

/* ---- memo: the winning row of an operand pattern, as a template ---------
 * Which row wins depends on the mnemonic, the operands' shapes (sig) and a
 * few facts about their values: implicit registers (rax, cl), register
 * numbers' bit 3 (REX, 2- vs 3-byte VEX), 8-bit registers that need REX,
 * memory width, base and index, displacement size, immediate and branch
 * ranges, masking. The detail word below holds exactly those, 16 bits per
 * operand; with op and sig it is the memo key.
 *
 * Those facts also fix every byte up to the opcode except three holes:
 * vvvv's low three bits (VEX/EVEX), the write mask's number (EVEX aaa) and
 * a register in the opcode's low bits. So an entry keeps those bytes as a
 * template plus where each operand goes (ModRM.reg/rm, vvvv, opcode,
 * is4, immediate, branch displacement); a hit copies the template, fills
 * the holes and writes ModRM/SIB/disp/imm: no row matching, no form.
 *
 * A process-wide direct-mapped table, each entry under a sequence lock
 * (odd while written; writers that find it odd just skip): readers never
 * wait and never see a torn entry. Only successful encodings are stored. */
enum { MEMO_BITS = 10, MEMO_N = 1 << MEMO_BITS, NOP = 0xf };
typedef struct memo_ent {
    atomic_uint seq;
    atomic_uint_least64_t op;      /* x64_op */
    atomic_uint_least64_t sig, detail;
    atomic_uint_least64_t head;    /* bytes through the opcode, holes clear */
    atomic_uint_least64_t plan;    /* tmpl_pack() */
    atomic_uint_least64_t plan2;
} memo_ent;
static _Alignas(64) memo_ent memo[MEMO_N];

/* A template, unpacked. Operand indexes are NOP when the slot is unused. */
typedef struct tmpl {
    uint8_t hlen;             /* bytes through the opcode */
    uint8_t enc;              /* XE_* */
    uint8_t hop, oop, eop, gop, lop, iop, relop;  /* operand in vvvv, opcode, rm, reg, is4, imm, rel */
    int8_t ext;               /* ModRM.reg opcode extension, -1: gop's register */
    uint8_t dscale;           /* disp8 scale (EVEX tuple), 1 otherwise */
    uint8_t immsz, relsz, s;
    uint32_t features;
} tmpl;

static int fits_u8(int64_t v) { return v >= -128 && v <= 255; }

/* Operand checks that do not depend on the form (register numbers,
 * scales, mask numbers), its shape and its detail (see above), in one
 * pass. Returns the shape, or an X64_E_* code (negative). *rex |= 1 when a
 * legacy encoding of it needs a REX prefix whatever the row. */
static inline __attribute__((always_inline)) int key_of(const x64_opnd *o, unsigned *det,
                                                          int *rex) {
    int sh;
    unsigned d = (o->mask != 0) | (o->zero != 0) << 1;
    switch (o->kind) {
    case X64_K_GPR:
        if (o->reg >= 16) return X64_E_RANGE;
        switch (o->bits) {
        case 8: sh = SH_G8; break;
        case 16: sh = SH_G16; break;
        case 32: sh = SH_G32; break;
        case 64: sh = SH_G64; break;
        default: return X64_E_FORM;
        }
        {
            int r8 = o->bits == 8 && o->reg >= 4;
            *rex |= r8 | (o->reg >= 8);
            d |= (o->reg == X64_RAX) << 2 | (o->reg == X64_RCX) << 3 | ((o->reg >> 3) & 1) << 4 |
                 (unsigned)r8 << 5;
        }
        break;
    case X64_K_VEC:
        if (o->reg >= 32) return X64_E_RANGE;
        switch (o->bits) {
        case 128: sh = SH_X; break;
        case 256: sh = SH_Y; break;
        case 512: sh = SH_Z; break;
        default: return X64_E_FORM;
        }
        if (o->reg >= 16) sh <<= 3;   /* SH_XH, SH_YH, SH_ZH */
        d |= ((o->reg >> 3) & 1u) << 4;
        break;
    case X64_K_KREG:
        if (o->reg >= 8) return X64_E_RANGE;
        sh = SH_K;
        d |= ((o->reg >> 3) & 1u) << 4;
        break;
    case X64_K_MEM: {
        if (o->base >= 16 && o->base != X64_RIP && o->base != X64_NOREG) return X64_E_RANGE;
        if (o->index != X64_NOREG) {
            if (o->index >= 16) return X64_E_RANGE;
            if (o->index == X64_RSP || o->base == X64_RIP) return X64_E_FORM;  /* no encoding */
            if (o->scale != 1 && o->scale != 2 && o->scale != 4 && o->scale != 8)
                return X64_E_RANGE;
            *rex |= o->index >= 8;
        }
        *rex |= o->base >= 8 && o->base < 16;
        sh = o->bcst ? SH_MB : SH_M;
        int base = o->base == X64_NOREG ? 0 : o->base == X64_RIP ? 1 : 2 + ((o->base >> 3) & 1);
        int index = o->index == X64_NOREG ? 0 : 1 + ((o->index >> 3) & 1);
        int disp = o->disp == 0 ? 0 : fits8(o->disp) ? 1 : 2;
        d |= (unsigned)base << 2 | (unsigned)index << 4 | (unsigned)disp << 6 |
             (unsigned)(o->bits ? __builtin_ctz(o->bits) : 15) << 8 |   /* 0..9, or none */
             ((o->base & 7) == 5 || (o->base & 7) == 4) << 12;         /* rbp/r13, rsp/r12 */
        break;
    }
    case X64_K_IMM: case X64_K_REL: {
        sh = o->kind == X64_K_IMM ? SH_I : SH_REL;
        int64_t v = o->imm, n = imm_norm(v, 32);
        d |= (v == 1) << 2 | fits8(v) << 3 | fits8(n) << 4 | fits_u8(v) << 5 | fits32(v) << 6 |
             fits32(n) << 7 | (unsigned)(o->bits == 0 ? 0 : o->bits == 8 ? 1 : o->bits == 32 ? 2 : 3) << 8;
        break;
    }
    default: return X64_E_FORM;
    }
    if (o->mask >= 8) return X64_E_RANGE;
    if (o->bcst && o->kind != X64_K_MEM) return X64_E_FORM;   /* broadcast is a memory form */
    *det = d;
    return sh;
}

static unsigned memo_slot(x64_op op, uint64_t sig, uint64_t detail) {
    uint64_t h = (sig ^ (detail * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)op << 40)) * 0xff51afd7ed558ccdull;
    return (unsigned)(h >> (64 - MEMO_BITS));
}

static uint64_t tmpl_pack(const tmpl *t) {
    return (uint64_t)t->hlen | (uint64_t)t->enc << 8 | (uint64_t)(t->hop | t->oop << 4) << 16 |
           (uint64_t)(t->eop | t->gop << 4) << 24 | (uint64_t)(t->lop | t->iop << 4) << 32 |
           (uint64_t)(t->relop | t->relsz << 4) << 40 | (uint64_t)(uint8_t)t->ext << 48 |
           (uint64_t)t->dscale << 56;
}
static uint64_t tmpl_pack2(const tmpl *t) {
    return (uint64_t)t->immsz | (uint64_t)t->s << 8 | (uint64_t)t->features << 32;
}

/* The remembered template for the key: 1, or 0 when there is none. */
static inline int memo_get(x64_op op, uint64_t sig, uint64_t detail, uint64_t *head,
                           uint64_t *plan, uint64_t *plan2) {
    memo_ent *e = &memo[memo_slot(op, sig, detail)];
    unsigned s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
    uint64_t eop = atomic_load_explicit(&e->op, memory_order_relaxed);
    uint64_t es = atomic_load_explicit(&e->sig, memory_order_relaxed);
    uint64_t ed = atomic_load_explicit(&e->detail, memory_order_relaxed);
    *head = atomic_load_explicit(&e->head, memory_order_relaxed);
    *plan = atomic_load_explicit(&e->plan, memory_order_relaxed);
    *plan2 = atomic_load_explicit(&e->plan2, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1) return 0;
    return !(s1 & 1) && s1 != 0 && eop == (unsigned)op && es == sig && ed == detail;
}

static void memo_put(x64_op op, uint64_t sig, uint64_t detail, uint64_t head, uint64_t plan,
                     uint64_t plan2) {
    memo_ent *e = &memo[memo_slot(op, sig, detail)];
    unsigned s = atomic_load_explicit(&e->seq, memory_order_relaxed);
    if ((s & 1) || !atomic_compare_exchange_strong_explicit(&e->seq, &s, s + 1,
                                                            memory_order_acquire,
                                                            memory_order_relaxed))
        return;   /* another thread writes it: skip */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->op, (uint64_t)op, memory_order_relaxed);
    atomic_store_explicit(&e->sig, sig, memory_order_relaxed);
    atomic_store_explicit(&e->detail, detail, memory_order_relaxed);
    atomic_store_explicit(&e->head, head, memory_order_relaxed);
    atomic_store_explicit(&e->plan, plan, memory_order_relaxed);
    atomic_store_explicit(&e->plan2, plan2, memory_order_relaxed);
    atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

/* The form of row r for operands that match it (the key holds every fact
 * match() checks, so only the assignment is left). */
static void fill(const x64_row *r, const x64_opnd *ops, int nops, int cc, int s, int l,
                 x64_form *f) {
    *f = (x64_form){.row = r, .cc = cc, .s = s, .l = l};
    for (int i = 0; i < nops; i++) {
        const x64_opnd *o = &ops[i];
        f->mask |= o->mask;
        f->zero |= o->zero;
        f->bcst |= o->kind == X64_K_MEM && o->bcst;
        f->rex8 |= o->kind == X64_K_GPR && o->bits == 8 && o->reg >= 4;
        assign(f, r->opd[i], o);
    }
}

/* The template of the winning row for these operands, packed. Returns 0
 * when the row does not fit the template scheme (then it is not
 * remembered). */
static int tmpl_make(int row, const x64_opnd *ops, int nops, int cc, int fs, int fl,
                     uint64_t *head, uint64_t *plan, uint64_t *plan2) {
    const x64_row *r = &x64_rows[row];
    if (r->flags & XF_RM0) return 0;   /* its ModRM is no operand's: not a template */
    x64_form f;
    fill(r, ops, nops, cc, fs, fl, &f);
    uint8_t buf[X64_MAX_LEN + 8];
    x64_enc_info info;
    int h = -1;
    emit(&f, buf, &info, &h);
    if (h < 0 || h + 1 > 8) return 0;
    tmpl t = {.hlen = (uint8_t)(h + 1), .enc = r->enc, .hop = NOP, .oop = NOP, .eop = NOP,
              .gop = NOP, .lop = NOP, .iop = NOP, .relop = NOP, .ext = r->ext,
              .dscale = (uint8_t)(r->enc == XE_EVEX ? disp_scale(&f) : 1),
              .immsz = (uint8_t)f.immsz, .relsz = (uint8_t)f.relsz, .s = (uint8_t)f.s,
              .features = info.features};
    for (int i = 0; i < nops; i++) {
        int c = X64_OPD_CLASS(r->opd[i]);
        switch (X64_OPD_SLOT(r->opd[i])) {
        case XS_G: t.gop = (uint8_t)i; break;
        case XS_E: t.eop = (uint8_t)i; break;
        case XS_H: t.hop = (uint8_t)i; break;
        case XS_O: t.oop = (uint8_t)i; break;
        case XS_L: t.lop = (uint8_t)i; break;
        default:
            if (ops[i].kind == X64_K_IMM && c != XC_ONE) t.iop = (uint8_t)i;
            else if (ops[i].kind == X64_K_REL) t.relop = (uint8_t)i;
            break;
        }
    }
    /* Clear the holes: the opcode without its register, vvvv[2:0] as if 0
     * (stored inverted: all ones), no mask number. */
    buf[h] = (uint8_t)(r->opc + cc);
    if (r->enc == XE_VEX) buf[h - 1] ^= (uint8_t)((f.vvvv & 7) << 3);
    if (r->enc == XE_EVEX) {
        buf[h - 2] ^= (uint8_t)((f.vvvv & 7) << 3);
        buf[h - 1] &= (uint8_t)~7u;
    }
    memset(buf + h + 1, 0, 8);
    memcpy(head, buf, 8);
    *plan = tmpl_pack(&t);
    *plan2 = tmpl_pack2(&t);
    return 1;
}

/* A memo hit: the template with its holes filled, then ModRM/SIB/disp,
 * branch displacement, is4 and immediate from the operands. */
static inline int emit_tmpl(uint64_t head, uint64_t plan, uint64_t plan2, const x64_opnd *ops,
                            uint8_t *out, x64_enc_info *info) {
    unsigned hlen = plan & 0xff, enc = plan >> 8 & 0xff;
    unsigned hop = plan >> 16 & 0xf, oop = plan >> 20 & 0xf, eop = plan >> 24 & 0xf,
             gop = plan >> 28 & 0xf, lop = plan >> 32 & 0xf, iop = plan >> 36 & 0xf,
             relop = plan >> 40 & 0xf, relsz = plan >> 44 & 0xf;
    int ext = (int8_t)(plan >> 48);
    int dscale = (int)(plan >> 56);
    memcpy(out, &head, 8);   /* out holds X64_MAX_LEN bytes; hlen <= 8 */
    if (enc == XE_EVEX) {
        if (hop != NOP) out[hlen - 3] ^= (uint8_t)((ops[hop].reg & 7) << 3);
        out[hlen - 2] |= ops[0].mask;   /* a mask is only ever on operand 0 */
    } else if (enc == XE_VEX && hop != NOP) {
        out[hlen - 2] ^= (uint8_t)((ops[hop].reg & 7) << 3);
    }
    if (oop != NOP) out[hlen - 1] = (uint8_t)(out[hlen - 1] + (ops[oop].reg & 7));
    uint8_t *p = out + hlen;
    int disp_at = -1;
    if (eop != NOP) {
        int regf = ext >= 0 ? ext : gop != NOP ? ops[gop].reg : 0;
        p += emit_modrm(p, regf, &ops[eop], dscale, &disp_at);
        if (disp_at >= 0) disp_at += (int)hlen;
    }
    int rel_at = -1;
    if (relop != NOP) {
        rel_at = (int)(p - out);
        if (relsz == 1) *p++ = (uint8_t)(int8_t)ops[relop].imm;
        else { int32_t v = (int32_t)ops[relop].imm; memcpy(p, &v, 4); p += 4; }
    }
    if (lop != NOP) *p++ = (uint8_t)(ops[lop].reg << 4);
    if (iop != NOP) {
        int immsz = (int)(plan2 & 0xff), s = (int)(plan2 >> 8 & 0xff);
        int64_t v = immsz == 8 ? ops[iop].imm : imm_norm(ops[iop].imm, s);
        memcpy(p, &v, (size_t)immsz);   /* low bytes, little-endian */
        p += immsz;
    }
    if (info) {
        info->features = (uint32_t)(plan2 >> 32);
        info->disp_pos = (int8_t)disp_at;
        info->rel_pos = (int8_t)rel_at;
        info->rel_size = (int8_t)(relop != NOP ? relsz : 0);
    }
    return (int)(p - out);
}

/* The full search: the first matching row, then any shorter one. Sets
 * *row to the winner's index. */
static int search(x64_op op, const x64_opnd *ops, int nops, uint64_t sig, int rex, uint8_t *out,
                  x64_enc_info *info, int *row, int *fs, int *fl) {
    const row_aux *a = aux + op_first[op], *end = a + op_nrows[op];
    int cc = op_cc[op], range = 0;
    /* The first row that matches is usually the answer: find it with a
     * tight loop and emit it straight into out. */
    x64_form f;
    for (;; a++) {
        while (a < end && (sig & a->acc) != sig) a++;
        if (a == end) return range ? X64_E_RANGE : X64_E_FORM;
        int m = match(&x64_rows[a - aux], a, ops, nops, cc, &f);
        if (m == MATCH_OK) break;
        if (m == MATCH_RANGE) range = 1;
    }
    int len = emit(&f, out, info, NULL);
    int evex = f.row->enc == XE_EVEX;
    *row = (int)(a - aux);
    *fs = f.s;
    *fl = f.l;
    if ((evex && a->tail_vex) || a->tail_min < len)
        len = shorter(a + 1, end, sig, rex, ops, nops, cc, evex, len, out, info, row, fs, fl);
    return len;
}

/* A miss (or no memo): validation errors, the search, and remembering
 * the winner. */
static __attribute__((noinline)) int encode_slow(x64_op op, const x64_opnd *ops, int nops,
                                                 uint64_t sig, uint64_t detail, int rex,
                                                 uint8_t *out, x64_enc_info *info,
                                                 int use_memo) {
    if (info) { info->features = 0; info->disp_pos = -1; info->rel_pos = -1; info->rel_size = 0; }
    if (!atomic_load_explicit(&index_ready, memory_order_acquire))
        pthread_once(&index_once, index_init);
    int fs = 0, fl = 0, row = -1;
    int len = search(op, ops, nops, sig, rex, out, info, &row, &fs, &fl);
    uint64_t head, plan, plan2;
    if (len > 0 && use_memo && tmpl_make(row, ops, nops, op_cc[op], fs, fl, &head, &plan, &plan2))
        memo_put(op, sig, detail, head, plan, plan2);
    return len;
}

static inline __attribute__((always_inline)) int encode(x64_op op, const x64_opnd *ops, int nops,
                                                       uint8_t *out, x64_enc_info *info,
                                                       int use_memo) {
    if ((unsigned)op == X64_NONE || (unsigned)op >= X64_OP_COUNT || nops < 0 || nops > 4 ||
        (nops && !ops)) {
        if (info) { info->features = 0; info->disp_pos = -1; info->rel_pos = -1; info->rel_size = 0; }
        return (unsigned)op == X64_NONE || (unsigned)op >= X64_OP_COUNT ? X64_E_OP : X64_E_FORM;
    }
    uint64_t sig = SIG_NONE, detail = 0;
    int rex = 0;
    for (int i = 0; i < nops; i++) {
        unsigned d = 0;
        int sh = key_of(&ops[i], &d, &rex);
        if (sh < 0) {
            if (info) { info->features = 0; info->disp_pos = -1; info->rel_pos = -1; info->rel_size = 0; }
            return sh;
        }
        sig ^= (uint64_t)(SH_NONE ^ sh) << (16 * i);
        detail |= (uint64_t)d << (16 * i);
    }
    uint64_t head, plan, plan2;
    if (use_memo && memo_get(op, sig, detail, &head, &plan, &plan2))
        return emit_tmpl(head, plan, plan2, ops, out, info);
    return encode_slow(op, ops, nops, sig, detail, rex, out, info, use_memo);
}

/* ---- for the template paths (x64_forms.c) ------------------------------ */

int x64_enc_find(x64_op op, const x64_opnd *ops, int nops, x64_found *out) {
    if ((unsigned)op - 1u >= X64_OP_COUNT - 1u || nops < 0 || nops > 4) return 0;
    if (!atomic_load_explicit(&index_ready, memory_order_acquire))
        pthread_once(&index_once, index_init);
    uint64_t sig = SIG_NONE;
    int rex = 0;
    for (int i = 0; i < nops; i++) {
        unsigned d;
        int sh = key_of(&ops[i], &d, &rex);
        if (sh < 0) return 0;
        sig ^= (uint64_t)(SH_NONE ^ sh) << (16 * i);
    }
    uint8_t buf[X64_MAX_LEN + 8];
    x64_enc_info info;
    int row = -1, fs = 0, fl = 0;
    if (search(op, ops, nops, sig, rex, buf, &info, &row, &fs, &fl) <= 0) return 0;
    x64_form f;
    fill(&x64_rows[row], ops, nops, op_cc[op], fs, fl, &f);
    *out = (x64_found){.row = &x64_rows[row], .l = fl, .features = info.features,
                       .disp_scale = x64_rows[row].enc == XE_EVEX ? disp_scale(&f) : 1};
    for (const row_aux *a = aux + op_first[op], *e = a + op_nrows[op]; a < e; a++)
        out->vex_rows += x64_rows[a - aux].enc == XE_VEX && (sig & a->acc) == sig;
    return 1;
}

int x64_encode(x64_op op, const x64_opnd *ops, int nops, uint8_t *out, x64_enc_info *info) {
    return encode(op, ops, nops, out, info, 1);
}

int x64_encode_search(x64_op op, const x64_opnd *ops, int nops, uint8_t *out,
                      x64_enc_info *info) {
    return encode(op, ops, nops, out, info, 0);
}
