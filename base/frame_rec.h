/* frame_rec.h: abstract frame records, the one type the builder (kernels/)
 * shares with unwindinfo/; it sits in base/ so that neither includes the
 * other. The builder writes them as it emits prologue and epilogue;
 * unwindinfo/ alone turns them into DWARF CFI. */
#ifndef FJ_FRAME_REC_H
#define FJ_FRAME_REC_H

#include <stdint.h>
#include "base/base.h"

/* Each record says what holds *after* the instruction that ends at code
 * offset `off` (i.e. from instruction boundary `off` on). Register numbers
 * are x86 GPR numbers (0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi,
 * 7 rdi, 8..15 r8..r15); uw maps them to DWARF numbers in one table. */
typedef enum uw_rec_kind {
    UW_PUSH_FP = 1,   /* push rbp: CFA = rsp + 16, rbp saved at CFA - 16 */
    UW_SET_FP,        /* mov rbp, rsp: CFA = rbp + 16 */
    UW_SAVE_REG,      /* reg saved at CFA + cfa_off (cfa_off < 0) */
    UW_RESTORE_REG,   /* reg holds the caller's value again */
    UW_POP_FP,        /* pop rbp / leave: CFA = rsp + 8, rbp is the caller's */
    /* A frame with rbp pushed as a plain callee-saved register (UW_PUSH_FP's
     * rule) and the CFA kept rsp-relative: after `sub rsp, n` / `add rsp, n`,
     * CFA = rsp + cfa_off. Only the frame-pointer tax probe's kernels have
     * such frames (kernels/builder/builder_int.h). */
    UW_CFA_SP,
} uw_rec_kind;

typedef struct uw_rec {
    uint32_t off;
    uint8_t kind;     /* uw_rec_kind */
    uint8_t reg;      /* UW_SAVE_REG / UW_RESTORE_REG */
    int16_t cfa_off;  /* UW_SAVE_REG (and UW_CFA_SP) */
} uw_rec;

#endif
