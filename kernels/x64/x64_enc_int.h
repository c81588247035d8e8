/* x64_enc_int.h: what the encoder's template paths (x64_forms.c) take from
 * the full encoder (x64_encode.c): its row search and its ModRM writer, so
 * that a kept form is exactly the search's choice and its bytes the
 * search's bytes. */
#ifndef FJ_X64_ENC_INT_H
#define FJ_X64_ENC_INT_H

#include "kernels/x64/x64.h"
#include "kernels/x64/x64_table.h"

typedef struct x64_found {
    const x64_row *row;   /* the row the search picks */
    int l;                /* vector length of the match (bits, 0: none) */
    uint32_t features;    /* X64_F_* of the encoding */
    int disp_scale;       /* N of a disp8*N (EVEX), else 1 */
    int vex_rows;         /* VEX rows of the mnemonic that could take these
                             operand shapes (more than one: which is shortest
                             depends on the registers) */
} x64_found;

/* The full search for ops: 1 and *out, or 0 when no row takes them. */
FJ_INTERNAL int x64_enc_find(x64_op op, const x64_opnd *ops, int nops, x64_found *out);

#endif
