/* x64_table.h: layout of the encoder's instruction-form table (one row per form). */
#ifndef FJ_X64_TABLE_H
#define FJ_X64_TABLE_H

#include <stdint.h>
#include "kernels/x64/x64.h"

/* Encoding kind of a row. */
enum { XE_LEG, XE_VEX, XE_EVEX };

/* Row pfx byte: opcode map in bits 0-1 (the value VEX.mmmmm / EVEX.mm
 * hold), mandatory prefix in bits 2-3 (the value VEX/EVEX.pp hold). */
enum {
    XM_1B = 0, XM_0F = 1, XM_0F38 = 2, XM_0F3A = 3,
    XP_NP = 0 << 2, XP_66 = 1 << 2, XP_F3 = 2 << 2, XP_F2 = 3 << 2,
};
#define X64_PFX_MAP(p) ((p) & 3)
#define X64_PFX_PP(p) (((p) >> 2) & 3)

/* Row w: REX.W / VEX.W / EVEX.W. */
enum { XW_0, XW_1, XW_S /* 1 when the GPR operand size is 64 */ };

/* EVEX tuple type: the N of the compressed disp8*N. */
enum {
    XT_NONE,   /* not EVEX, or no memory operand: N = 1 */
    XT_FV,     /* full vector: N = vector bytes, 4 with {1toN} */
    XT_FVM,    /* full vector memory (no broadcast): N = vector bytes */
    XT_T1S4,   /* one 32-bit element */
    XT_T1S8,   /* one 64-bit element */
    XT_T4,     /* four 32-bit elements (128-bit lane) */
    XT_T8,     /* eight 32-bit elements (256 bits) */
    XT_M128,   /* shift count xmm/m128 */
};

/* Row flags. */
enum {
    XF_CC = 1,   /* first row of a 16-member condition family: op + cc, opcode + cc */
    XF_I2 = 2,   /* integer VEX op: the 256-bit form needs AVX2 */
    XF_NOK = 4,  /* EVEX form that takes no write mask */
    XF_LIG = 8,  /* scalar: vector length ignored (encoded as 0, no AVX512VL) */
    XF_RM0 = 16, /* no operands, a ModRM of mod 11, reg = ext, rm 0 (the fences) */
};

/* Row sz: sizes the generic classes (R, RM, RAX / V, VM, VMB, MV) accept.
 * GPR and vector sizes use distinct bits. Rows without a generic vector
 * operand use the lowest vector bit as their fixed length. */
enum {
    XZ_8 = 1, XZ_16 = 2, XZ_32 = 4, XZ_64 = 8,
    XZ_128 = 16, XZ_256 = 32, XZ_512 = 64,
};

/* Operand classes. Generic classes take their size from the instruction
 * (all generic operands of one instruction agree). */
enum {
    XC_NONE = 0,
    /* general purpose */
    XC_R, XC_RM, XC_RAX,          /* generic size GPR / GPR or memory / rax-eax */
    XC_CL, XC_ONE,                /* implicit: cl count, the constant 1 */
    XC_R8, XC_RM8, XC_RM16, XC_R32, XC_RM32, XC_R64, XC_RM64,
    XC_M, XC_M16, XC_M32, XC_M64, /* memory only (M: any width) */
    /* immediates and branch targets */
    XC_I8, XC_U8, XC_I32, XC_I64, XC_REL8, XC_REL32,
    /* vectors and masks */
    XC_V, XC_VM, XC_VMB, XC_MV,   /* generic width: reg / reg|mem / +{1toN} / mem */
    XC_X, XC_Y, XC_XM32, XC_XM64, XC_XM128, XC_YM,
    XC_K, XC_KM16, XC_KM32,
    XC__COUNT
};

/* Operand slot (where an operand is encoded), in the high byte of a row's
 * opd entries. Letters follow the Intel opcode-map notation. */
enum {
    XS_AUTO = 0,  /* immediates, branch targets, implicit operands */
    XS_G,         /* ModRM.reg */
    XS_E,         /* ModRM.rm (register or memory) */
    XS_H,         /* VEX/EVEX.vvvv */
    XS_O,         /* low 3 bits of the opcode byte */
    XS_L,         /* bits 7:4 of an imm8 (VEX is4) */
};
#define X64_OPD_CLASS(d) ((d) & 0xff)
#define X64_OPD_SLOT(d) ((d) >> 8)

typedef struct x64_row {
    uint16_t op;      /* x64_op (the first member for XF_CC rows) */
    uint8_t enc;      /* XE_* */
    uint8_t pfx;      /* XM_* | XP_* */
    uint8_t opc;      /* the opcode byte after the map escape */
    uint8_t w;        /* XW_* */
    int8_t ext;       /* ModRM.reg opcode extension (/digit), -1 for /r */
    uint8_t sz;       /* XZ_* */
    uint8_t tt;       /* XT_* */
    uint8_t flags;    /* XF_* */
    uint16_t feat;    /* X64_F_* (AVX512VL / AVX2-for-ymm added by the encoder) */
    uint16_t opd[4];  /* class | slot << 8 per operand, Intel order */
} x64_row;

/* Rows of one mnemonic are adjacent, mnemonics in x64_op order; within a
 * mnemonic, row order breaks ties between encodings of equal length (the
 * first wins). The encoder indexes the table by mnemonic on first use. */
FJ_INTERNAL extern const x64_row x64_rows[];
FJ_INTERNAL extern const int x64_nrows;
/* Upper bound on the rows (the encoder's per-row index is sized by it;
 * x64_table.c checks it at compile time). */
#define X64_MAX_ROWS 512

#endif
