/* verify.c: the rbp/CFI verifier: a linear walk over a finished kernel's
 * instructions and frame records that accepts only the builder's frame
 * discipline (see verify.h and the comment below). */
#include "kernels/builder/verify.h"

#include <string.h>

#include "kernels/x64/x64.h"

/*
 * The one frame shape we accept, with the records it carries:
 *
 *   0  push rbp                    {1, UW_PUSH_FP}
 *   1  mov rbp, rsp                {4, UW_SET_FP}
 *      [sub rsp, imm]
 *      [mov [rbp - d], rbx|r12..r15   {end, UW_SAVE_REG, reg, -d - 16}] ...
 *      body: no rbp writes; rsp moves by known deltas or calls only
 *      [mov reg, [rbp - d]         {end, UW_RESTORE_REG, reg}] ...
 *      leave | pop rbp             {end, UW_POP_FP}
 *      ret                         [{end, UW_SET_FP}: more body code follows]
 *
 * The walk is linear: it assumes that the state at a jump target is the
 * state the straight-line walk reaches there, which holds for the
 * builder's code (jumps stay inside the body or go to the epilogue).
 * Code after a ret is either padding (int3/nop) or body code re-entered
 * by a jump, whose state a UW_SET_FP record at its first byte restores to
 * what it was when the epilogue started.
 */

enum { CFA_RSP, CFA_RBP };

typedef struct vstate {
    int cfa;           /* CFA_RSP: CFA = rsp + cfa_rsp; CFA_RBP: CFA = rbp + 16 */
    int32_t cfa_rsp;
    int32_t depth;     /* CFA_RBP: rsp = CFA - depth (16 right after mov rbp, rsp) */
    int rbp_frame;     /* rbp holds our frame pointer, not the caller's rbp */
    int16_t saved[16]; /* cfa_off of a saved callee-saved register, 0 = not saved */
} vstate;

static const char *const gpr_name[16] = {
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
};

static const char *rec_name(int kind) {
    switch (kind) {
    case UW_PUSH_FP: return "UW_PUSH_FP";
    case UW_SET_FP: return "UW_SET_FP";
    case UW_SAVE_REG: return "UW_SAVE_REG";
    case UW_RESTORE_REG: return "UW_RESTORE_REG";
    case UW_POP_FP: return "UW_POP_FP";
    }
    return "unknown record";
}

/* The registers the SysV ABI makes the callee preserve (rbp aside). */
static int callee_saved(int r) {
    return r == X64_RBX || (r >= X64_R12 && r <= X64_R15);
}

/* `mov reg, [rbp + disp]` with a 64-bit destination: REX.W(+R) 8B and a
 * ModRM with base rbp and a disp8/disp32. The decoder reports stores, not
 * loads, and this one form is all an epilogue restore may use. */
static int is_restore_load(const uint8_t *p, int len, int reg, int32_t disp) {
    if (len < 4 || (p[0] & 0xfb) != 0x48 || p[1] != 0x8b) return 0;
    int mod = p[2] >> 6, rm = p[2] & 7;
    int r = ((p[2] >> 3) & 7) | ((p[0] & 4) << 1);
    if (rm != 5 || r != reg || (mod != 1 && mod != 2)) return 0;
    int32_t d;
    if (mod == 1) {
        if (len != 4) return 0;
        d = (int8_t)p[3];
    } else {
        if (len != 7) return 0;
        uint32_t v;
        memcpy(&v, p + 3, 4);
        d = (int32_t)v;
    }
    return d == disp;
}

/* int3, ud2 and nops (any 66/2E prefixes): what may pad code after a ret. */
static int is_padding(const uint8_t *p, int len) {
    int i = 0;
    while (i < len && (p[i] == 0x66 || p[i] == 0x2e)) i++;
    if (i >= len) return 0;
    if (p[i] == 0xcc || p[i] == 0x90) return i + 1 == len;
    return i + 1 < len && p[i] == 0x0f && (p[i + 1] == 0x1f || p[i + 1] == 0x0b);
}

/* jmp rel8 / rel32 / r/m (the builder's out-of-line code ends with one). */
static int is_uncond_jmp(const uint8_t *p, int len) {
    int i = 0;
    while (i < len && p[i] >= 0x40 && p[i] <= 0x4f) i++;
    if (i >= len) return 0;
    if (p[i] == 0xeb || p[i] == 0xe9) return 1;
    return p[i] == 0xff && i + 1 < len && ((p[i + 1] >> 3) & 7) == 4;
}

#define FAIL(...) fj_fail(FJ_ERR_VERIFY, __VA_ARGS__)

fj_status kv_verify(const char *name, const uint8_t *code, size_t len, const uw_rec *recs,
                    size_t nrecs) {
    if (!name) name = "?";
    if (!code || len == 0) return FAIL("kernel '%s': no code to verify", name);
    if (nrecs && !recs) return FAIL("kernel '%s': %zu records but no record array", name, nrecs);
    for (size_t i = 0; i < nrecs; i++) {
        if (recs[i].off == 0 || recs[i].off > len)
            return FAIL("kernel '%s': offset %u: %s outside the code (1..%zu)", name,
                        recs[i].off, rec_name(recs[i].kind), len);
        if (i > 0 && recs[i].off < recs[i - 1].off)
            return FAIL("kernel '%s': offset %u: %s out of order (after a record at %u)", name,
                        recs[i].off, rec_name(recs[i].kind), recs[i - 1].off);
    }

    vstate st, snap;
    memset(&st, 0, sizeof st);
    memset(&snap, 0, sizeof snap);
    st.cfa = CFA_RSP;
    st.cfa_rsp = 8;
    int have_snap = 0;  /* snap holds the state at the start of an epilogue */
    int in_epilogue = 0;
    int after_ret = 0;  /* a ret ended the straight-line path */
    int last_jmp = 0;   /* the last instruction was an unconditional jmp */
    size_t ri = 0;

    /* idx counts instructions: the prologue is the first two whatever
     * their encoding (push rbp may carry a REX prefix) */
    for (size_t off = 0, idx = 0; off < len; idx++) {
        const uint8_t *p = code + off;
        x64_insn in;
        int l = x64_decode(p, len - off, &in);
        if (!l) {
            /* Tell a cut-off instruction from bytes we do not know. */
            uint8_t pad[X64_MAX_LEN] = {0};
            size_t have = len - off < X64_MAX_LEN ? len - off : X64_MAX_LEN;
            memcpy(pad, p, have);
            if ((size_t)x64_decode(pad, sizeof pad, &in) > have)
                return FAIL("kernel '%s': offset %zu: truncated instruction at the end of the "
                            "code", name, off);
            return FAIL("kernel '%s': offset %zu: undecodable instruction (%02x %02x %02x)",
                        name, off, p[0], have > 1 ? p[1] : 0, have > 2 ? p[2] : 0);
        }
        size_t end = off + (size_t)l;
        last_jmp = is_uncond_jmp(p, l);
        if (ri < nrecs && recs[ri].off < end)
            return FAIL("kernel '%s': offset %u: %s is not on an instruction boundary (the "
                        "instruction at %zu is %d bytes)", name, recs[ri].off,
                        rec_name(recs[ri].kind), off, l);
        size_t r0 = ri;
        while (ri < nrecs && recs[ri].off == end) ri++;
        vstate pre = st;

        if (after_ret) {
            if (!is_padding(p, l))
                return FAIL("kernel '%s': offset %zu: code after a ret without a UW_SET_FP "
                            "record restating the frame", name, off);
            if (r0 != ri)
                return FAIL("kernel '%s': offset %zu: %s after padding", name, end,
                            rec_name(recs[r0].kind));
            off = end;
            continue;
        }

        /* --- the prologue --- */
        if (idx == 0 && !in.is_push_rbp)
            return FAIL("kernel '%s': offset 0: does not start with push rbp", name);
        if (idx == 1 && !in.is_mov_rbp_rsp)
            return FAIL("kernel '%s': offset %zu: push rbp is not followed by mov rbp, rsp",
                        name, off);

        /* --- invariant 1: nothing else writes rbp --- */
        if ((in.gpr_writes & (1u << X64_RBP)) && idx != 1 && !in.is_leave && !in.is_pop_rbp)
            return FAIL("kernel '%s': offset %zu: instruction writes rbp", name, off);

        /* --- callee-saved registers are written only while saved --- */
        for (int r = 0; r < 16; r++)
            if (callee_saved(r) && (in.gpr_writes & (1u << r)) && !st.saved[r])
                return FAIL("kernel '%s': offset %zu: writes callee-saved %s, which is not "
                            "saved", name, off, gpr_name[r]);

        /* --- stores into save slots --- */
        if (in.store_reg != X64_NOREG && in.store_base == X64_RBP) {
            for (int r = 0; r < 16; r++) {
                int32_t slot = st.saved[r] + 16;   /* slot's offset from rbp */
                if (st.saved[r] && in.store_disp < slot + 8 && in.store_disp + 8 > slot)
                    return FAIL("kernel '%s': offset %zu: store overwrites the save slot of %s",
                                name, off, gpr_name[r]);
            }
        }

        /* --- frame and stack transitions --- */
        if (idx <= 1) {
            if (idx == 0) {
                st.cfa_rsp = 16;
            } else {
                st.cfa = CFA_RBP;
                st.depth = 16;
                st.rbp_frame = 1;
            }
        } else if (in.is_leave || in.is_pop_rbp) {
            if (st.cfa != CFA_RBP)
                return FAIL("kernel '%s': offset %zu: writes rbp: %s while the CFA is "
                            "rsp-based", name, off, in.is_leave ? "leave" : "pop rbp");
            if (in.is_pop_rbp && st.depth != 16)
                return FAIL("kernel '%s': offset %zu: writes rbp: pop rbp while rsp != rbp "
                            "(%d bytes below)", name, off, (int)st.depth - 16);
            if (!in_epilogue) {
                snap = pre;
                have_snap = in_epilogue = 1;
            }
            st.cfa = CFA_RSP;
            st.cfa_rsp = 8;
            st.rbp_frame = 0;
        } else if (in.is_ret) {
            if (st.cfa == CFA_RBP || st.rbp_frame)
                return FAIL("kernel '%s': offset %zu: ret before rbp is restored", name, off);
            if (st.cfa_rsp != 8 || in.rsp_delta != 8)
                return FAIL("kernel '%s': offset %zu: ret while the CFA is not rsp + 8", name,
                            off);
            for (int r = 0; r < 16; r++)
                if (st.saved[r])
                    return FAIL("kernel '%s': offset %zu: ret with %s not restored", name, off,
                                gpr_name[r]);
            after_ret = 1;
        } else if ((in.gpr_writes & (1u << X64_RSP)) || in.is_call || in.is_jump) {
            if (st.cfa == CFA_RSP)
                return FAIL("kernel '%s': offset %zu: %s while the CFA is rsp-based and no "
                            "record describes it", name, off,
                            in.is_call ? "call" : in.is_jump ? "jump" : "rsp changes");
            if (in.is_call || in.is_jump) {
                /* rsp is the same after the call returns; a jump keeps it */
            } else if (in.rsp_kind == X64_RSP_DELTA) {
                st.depth -= in.rsp_delta;
            } else if (in.rsp_kind == X64_RSP_FROM_RBP) {
                st.depth = 16;
            } else {
                return FAIL("kernel '%s': offset %zu: rsp set to a value the verifier cannot "
                            "follow", name, off);
            }
            if (st.depth < 16)
                return FAIL("kernel '%s': offset %zu: rsp moves above rbp (the saved rbp and "
                            "return address would be unprotected)", name, off);
            for (int r = 0; r < 16; r++)
                if (st.saved[r] && -st.saved[r] > st.depth)
                    return FAIL("kernel '%s': offset %zu: rsp moves above the save slot of %s",
                                name, off, gpr_name[r]);
        }

        /* --- the records at the end of this instruction --- */
        int got_push = 0, got_set = 0, got_pop = 0;
        for (size_t k = r0; k < ri; k++) {
            const uw_rec *rc = &recs[k];
            int ok = 0;
            switch (rc->kind) {
            case UW_PUSH_FP:
                ok = idx == 0 && !got_push;
                got_push = 1;
                break;
            case UW_SET_FP:
                if (idx == 1 && !got_set) {
                    ok = 1;
                } else if (in.is_ret && have_snap) {
                    st = snap;   /* back in the body, reached by a jump */
                    in_epilogue = 0;
                    after_ret = 0;
                    ok = 1;
                }
                got_set = 1;
                break;
            case UW_POP_FP:
                ok = (in.is_leave || in.is_pop_rbp) && !got_pop;
                got_pop = 1;
                break;
            case UW_SAVE_REG: {
                int r = rc->reg;
                if (r >= 16 || !callee_saved(r))
                    return FAIL("kernel '%s': offset %u: UW_SAVE_REG of %s, which is not "
                                "callee-saved", name, rc->off, r < 16 ? gpr_name[r] : "?");
                if (st.saved[r])
                    return FAIL("kernel '%s': offset %u: %s saved twice", name, rc->off,
                                gpr_name[r]);
                if (st.cfa != CFA_RBP || in.store_reg != r || in.store_base != X64_RBP ||
                    in.store_disp != rc->cfa_off + 16)
                    return FAIL("kernel '%s': offset %u: UW_SAVE_REG %s at CFA%+d does not "
                                "match the instruction at %zu (not a store of %s to [rbp%+d])",
                                name, rc->off, gpr_name[r], rc->cfa_off, off, gpr_name[r],
                                rc->cfa_off + 16);
                /* the slot must lie below rbp and at or above rsp, where
                 * neither calls nor signal frames can overwrite it */
                if (rc->cfa_off > -24 || rc->cfa_off < -st.depth)
                    return FAIL("kernel '%s': offset %u: save slot of %s at CFA%+d is outside "
                                "the frame [CFA-%d, CFA-24]", name, rc->off, gpr_name[r],
                                rc->cfa_off, (int)st.depth);
                st.saved[r] = rc->cfa_off;
                ok = 1;
                break;
            }
            case UW_RESTORE_REG: {
                int r = rc->reg;
                if (r >= 16 || !st.saved[r] ||
                    !is_restore_load(p, l, r, (int32_t)st.saved[r] + 16))
                    return FAIL("kernel '%s': offset %u: UW_RESTORE_REG %s does not match the "
                                "instruction at %zu (not a load from its save slot)", name,
                                rc->off, r < 16 ? gpr_name[r] : "?", off);
                if (!in_epilogue) {
                    snap = pre;
                    have_snap = in_epilogue = 1;
                }
                st.saved[r] = 0;
                ok = 1;
                break;
            }
            default:
                return FAIL("kernel '%s': offset %u: unknown record kind %d", name, rc->off,
                            rc->kind);
            }
            if (!ok)
                return FAIL("kernel '%s': offset %u: %s does not match the instruction at %zu",
                            name, rc->off, rec_name(rc->kind), off);
        }
        if (idx == 0 && !got_push)
            return FAIL("kernel '%s': offset %zu: push rbp has no UW_PUSH_FP record", name, end);
        if (idx == 1 && !got_set)
            return FAIL("kernel '%s': offset %zu: mov rbp, rsp has no UW_SET_FP record", name,
                        end);
        if ((in.is_leave || in.is_pop_rbp) && !got_pop)
            return FAIL("kernel '%s': offset %zu: %s has no UW_POP_FP record", name, end,
                        in.is_leave ? "leave" : "pop rbp");
        off = end;
    }
    /* The code must not run off its end: it ends with a ret (and padding)
     * or with out-of-line body code that jumps back. */
    if (!after_ret && !last_jmp)
        return FAIL("kernel '%s': offset %zu: code does not end with ret or jmp", name, len);
    return FJ_OK;
}
