/* verify.h: the rbp/CFI verifier run on every finished kernel (always in
 * tests, with FRAMEJIT_VERIFY=1 or fj_options.verify in production). */
#ifndef FJ_VERIFY_H
#define FJ_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include "base/frame_rec.h"

/* Decodes code[0, len) (instructions only: the constant pool excluded) and
 * checks that
 *   - it starts with push rbp; mov rbp, rsp;
 *   - no other instruction writes rbp/ebp/bp/bpl, except pop rbp or leave
 *     in an epilogue;
 *   - every change of rsp while the CFA is rsp-based is described by recs,
 *     and the records agree with the instructions (push rbp, mov rbp,rsp,
 *     pop rbp/leave, saved registers stored where the records say);
 *   - every ret happens with CFA = rsp + 8 and rbp restored.
 * Returns FJ_OK or FJ_ERR_VERIFY with a message naming the offset. */
FJ_INTERNAL fj_status kv_verify(const char *name, const uint8_t *code, size_t len,
                                const uw_rec *recs, size_t nrecs);

#endif
