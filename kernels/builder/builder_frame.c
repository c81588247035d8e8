/* builder_frame.c: assembling a builder's kernel: the prologue and
 * epilogue (and their frame records) around the body, the constant pool,
 * the fixups, the no-ops that place one instruction (kb_align_next), the
 * loops' span for placement (kb_code.loop_lo/hi); and the reordering of
 * straight-line streams (kb_interleave).
 *
 * Layout of an assembled kernel:
 *
 *     push rbp                 ; UW_PUSH_FP
 *     mov  rbp, rsp            ; UW_SET_FP   (CFA = rbp + 16 from here on)
 *     sub  rsp, FRAME          ; if anything lives in the frame
 *     mov  [rbp - 8*i], reg    ; UW_SAVE_REG for each callee-saved reg used
 *     nop...                   ; kb_align_next's padding, if asked for
 *     <body>                   ; never touches rbp; rsp fixed
 *   epilogue:
 *     mov  reg, [rbp - 8*i]    ; UW_RESTORE_REG
 *     vzeroupper               ; if vector registers were used
 *     leave / pop rbp          ; UW_POP_FP   (CFA = rsp + 8)
 *     ret
 *     <constant pool, 64-byte aligned>
 *
 * Frame (rbp-relative, 16-byte aligned):
 *     [rbp-40, rbp)            fixed save slots of rbx, r12..r15
 *     [rbp-40-slots, rbp-40)   fj_stack_slot spills
 *     [rsp, rsp+callarea)      caller-saved registers preserved by fj_call
 */
#include "kernels/builder/builder_priv.h"
#include "kernels/x64/x64_templ.h"

#include <string.h>

static int add_rec(kb_code *c, size_t *cap, uint32_t off, int kind, int reg, int cfa_off) {
    if (c->nrecs == *cap) {
        size_t n = *cap ? *cap * 2 : 16;
        uw_rec *r = fj_realloc(c->recs, n * sizeof *r);
        if (!r) return 0;
        c->recs = r;
        *cap = n;
    }
    c->recs[c->nrecs++] = (uw_rec){off, (uint8_t)kind, (uint8_t)reg, (int16_t)cfa_off};
    return 1;
}

static void put32(uint8_t *p, int32_t v) { memcpy(p, &v, 4); }

/* n bytes of no-ops, in the recommended multi-byte forms (at most 8 bytes
 * each: 0f 1f /0 with the longest ModRM/SIB/displacement that fits). */
static size_t put_nops(uint8_t *p, size_t n) {
    static const uint8_t nop[9][8] = {
        {0},
        {0x90},
        {0x66, 0x90},
        {0x0f, 0x1f, 0x00},
        {0x0f, 0x1f, 0x40, 0x00},
        {0x0f, 0x1f, 0x44, 0x00, 0x00},
        {0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00},
        {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00},
        {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
    };
    for (size_t left = n; left;) {
        size_t k = left < 8 ? left : 8;
        memcpy(p, nop[k], k);
        p += k;
        left -= k;
    }
    return n;
}

void kb_align_next(fj_builder *b, unsigned mod, unsigned rem) {
    if (mod < 2 || mod > 64 || (mod & (mod - 1)) || rem >= mod) {
        kb_fail(b, "align: modulus %u (a power of two, 2..64), remainder %u", mod, rem);
        return;
    }
    if (b->trace) {
        kb_fail(b, "align: inside a trace recording");
        return;
    }
    b->align_at = (uint32_t)b->len;
    b->align_mod = (uint8_t)mod;
    b->align_rem = (uint8_t)rem;
}

void kb_code_free(kb_code *c) {
    if (!c) return;
    fj_free(c->bytes);
    fj_free(c->recs);
    memset(c, 0, sizeof *c);
}

/* One prologue/epilogue instruction: the fixed ones and the register
 * forms straight (the bytes x64_encode gives, see x64_encode_gpr), the
 * save-slot moves through the encoder. */
static int frame_insn(x64_op op, const x64_opnd *o, int cnt, uint8_t *out) {
    if (kb_fast_paths()) {
        int n = 0;
        if (op == X64_RET) out[n++] = 0xC3;
        else if (op == X64_LEAVE) out[n++] = 0xC9;
        else if (op == X64_VZEROUPPER) { out[0] = 0xC5; out[1] = 0xF8; out[2] = 0x77; n = 3; }
        else if ((op == X64_PUSH || op == X64_POP) && o[0].reg < 8)
            out[n++] = (uint8_t)((op == X64_PUSH ? 0x50 : 0x58) + o[0].reg);
        else if (cnt == 2 && o[0].kind == X64_K_GPR &&
                 (o[1].kind == X64_K_GPR || o[1].kind == X64_K_IMM))
            n = x64_encode_gpr(op, o[0].bits, o[0].reg, o[1].kind == X64_K_GPR ? o[1].reg : -1,
                               o[1].imm, out);
        else if (cnt == 2 && (o[0].kind == X64_K_MEM) != (o[1].kind == X64_K_MEM)) {
            /* the save slots: mov [base + disp], r / mov r, [base + disp] */
            const x64_opnd *m = o[0].kind == X64_K_MEM ? &o[0] : &o[1], *r = m == o ? &o[1] : &o[0];
            x64_vm_mem vm = {m->base, m->index, m->index == X64_NOREG ? 1 : m->scale, 0, m->bits,
                             m->disp};
            if (r->kind == X64_K_GPR && m->base < 16)
                n = x64_encode_gpr_mem(op, r->bits, r->reg, m == o, &vm, out);
        }
        if (n > 0) return n;
    }
    return x64_encode(op, o, cnt, out, NULL);
}

fj_status kb_assemble(fj_builder *b, kb_code *out) {
    memset(out, 0, sizeof *out);
    if (b->err) return fj_fail(b->err, "kernel %s: %s", b->name, b->errmsg);
    for (uint32_t i = 0; i < b->nlabels; i++)
        if (b->labels[i] < 0)
            return fj_fail(FJ_ERR_CODEGEN, "kernel %s: label %u (in creation order) is never "
                           "bound", b->name, i + 1);
    /* A trailing fj_return jumps to the very next byte: drop that jmp. */
    size_t body_len = b->len, nfix = b->nfix;
    int label_at_end = 0;
    for (uint32_t i = 0; i < b->nlabels; i++)
        if ((size_t)b->labels[i] == b->len) label_at_end = 1;
    if (!label_at_end && b->last_ret_jmp >= 0 && (size_t)b->last_ret_jmp == b->len && nfix &&
        b->fix[nfix - 1].target == EPILOGUE) {
        body_len -= 5;
        nfix--;
    }
    uint32_t saved = 0; /* bit i: callee_saved[i] used */
    for (int i = 0; i < 5; i++)
        if (b->gpr_ever >> callee_saved[i] & 1) saved |= 1u << i;
    uint32_t frame = 0;
    if (saved || b->slot_bytes || b->call_area)
        frame = (SAVE_AREA + b->slot_bytes + b->call_area + 15) & ~15u;

    /* Prologue and epilogue are built into small scratch builders' bytes. */
    uint8_t pro[96 + 64], epi[96];
    size_t np = 0, ne = 0, reccap = 0;
    x64_opnd o[2];
    int n;
#define EMIT(buf, nb, op, cnt) \
    do { n = frame_insn((op), o, (cnt), (buf) + (nb)); \
         if (n <= 0) return fj_fail(FJ_ERR_CODEGEN, "kernel %s: internal: frame encoding", b->name); \
         (nb) += (size_t)n; } while (0)
    size_t epi_at;
    /* Where each saved register goes, [sbase + at[i]], and its CFA offset. */
    int sbase = X64_RBP, at[5] = {0}, cfa_at[5] = {0};
    const int nofp = kb_probe_nofp(b);
    /* Probe kernels (builder_int.h): no frame pointer: rbp saved like any callee-saved register, the CFA
     * rsp-relative. [rsp, slots) are the stack slots, the saves sit above
     * them; rsp + 8 is 16-byte aligned at entry, so after push rbp a frame
     * of a multiple of 16 keeps rsp aligned. */
    if (nofp) {
        const uint32_t slots = (b->slot_bytes + 7) & ~7u;
        frame = (slots + 8 * (uint32_t)__builtin_popcount(saved) + 15) & ~15u;
        sbase = X64_RSP;
        for (int i = 0, k = 0; i < 5; i++)
            if (saved >> i & 1) {
                at[i] = (int)slots + 8 * k++;
                cfa_at[i] = at[i] - (16 + (int)frame);
            }
    }
    for (int i = 0; i < 5 && !nofp; i++) {
        at[i] = -8 * (i + 1);
        cfa_at[i] = at[i] - 16;
    }
    o[0] = gpr_op(X64_RBP, 64);
    EMIT(pro, np, X64_PUSH, 1);
    if (!add_rec(out, &reccap, (uint32_t)np, UW_PUSH_FP, 0, 0)) goto nomem;
    if (!nofp) {
        o[0] = gpr_op(X64_RBP, 64); o[1] = gpr_op(X64_RSP, 64);
        EMIT(pro, np, X64_MOV, 2);
        if (!add_rec(out, &reccap, (uint32_t)np, UW_SET_FP, 0, 0)) goto nomem;
    }
    if (frame) {
        o[0] = gpr_op(X64_RSP, 64); o[1] = imm_op(frame);
        EMIT(pro, np, X64_SUB, 2);
        if (nofp && !add_rec(out, &reccap, (uint32_t)np, UW_CFA_SP, 0, 16 + (int)frame))
            goto nomem;
    }
    for (int i = 0; i < 5; i++)
        if (saved >> i & 1) {
            o[0] = mem_op(sbase, at[i], 64); o[1] = gpr_op(callee_saved[i], 64);
            EMIT(pro, np, X64_MOV, 2);
            if (!add_rec(out, &reccap, (uint32_t)np, UW_SAVE_REG, callee_saved[i], cfa_at[i]))
                goto nomem;
        }
    /* kb_align_next's no-ops: after the saves, so the frame records and
     * the body's fixups (relative to np) need nothing else. */
    if (b->align_mod) {
        size_t pad = ((size_t)b->align_rem - (np + b->align_at)) & (size_t)(b->align_mod - 1);
        np += put_nops(pro + np, pad);
    }
    epi_at = np + body_len;
    for (int i = 0; i < 5; i++)
        if (saved >> i & 1) {
            o[0] = gpr_op(callee_saved[i], 64); o[1] = mem_op(sbase, at[i], 64);
            EMIT(epi, ne, X64_MOV, 2);
            if (!add_rec(out, &reccap, (uint32_t)(epi_at + ne), UW_RESTORE_REG, callee_saved[i], 0))
                goto nomem;
        }
    if (b->used_vec) EMIT(epi, ne, X64_VZEROUPPER, 0);
    if (frame && !nofp) {
        EMIT(epi, ne, X64_LEAVE, 0);
    } else {
        if (frame) {
            o[0] = gpr_op(X64_RSP, 64); o[1] = imm_op(frame);
            EMIT(epi, ne, X64_ADD, 2);
            if (!add_rec(out, &reccap, (uint32_t)(epi_at + ne), UW_CFA_SP, 0, 16)) goto nomem;
        }
        o[0] = gpr_op(X64_RBP, 64);
        EMIT(epi, ne, X64_POP, 1);
    }
    if (!add_rec(out, &reccap, (uint32_t)(epi_at + ne), UW_POP_FP, 0, 0)) goto nomem;
    EMIT(epi, ne, X64_RET, 0);
#undef EMIT

    size_t code_len = np + body_len + ne;
    size_t const_at = b->const_len ? (code_len + 63) & ~(size_t)63 : code_len;
    size_t total = const_at + b->const_len;
    out->bytes = fj_malloc(total ? total : 1);
    if (!out->bytes) goto nomem;
    /* Padding between code and constants is int3: never executed, and a
     * decoder reading past the end sees a trap, not a random instruction. */
    memset(out->bytes + code_len, 0xcc, const_at - code_len);
    memcpy(out->bytes, pro, np);
    if (body_len) memcpy(out->bytes + np, b->code, body_len); /* b->code is NULL if empty */
    memcpy(out->bytes + epi_at, epi, ne);
    if (b->const_len) memcpy(out->bytes + const_at, b->consts, b->const_len);
    for (size_t i = 0; i < nfix; i++) {
        const fixup *f = &b->fix[i];
        int64_t target;
        if (f->is_const) target = (int64_t)(const_at + f->target);
        else if (f->target == EPILOGUE) target = (int64_t)epi_at;
        else target = (int64_t)np + b->labels[f->target];
        int64_t rel = target - (int64_t)(np + f->end);
        uint8_t *field = out->bytes + np + f->pos;
        /* rel8 jumps were resolved at emission (backward only); every fixup
         * is a 4-byte field. */
        put32(field, (int32_t)rel);
    }
    out->len = total;
    out->code_len = code_len;
    if (b->loop_hi) {
        out->loop_lo = (uint32_t)(np + b->loop_lo);
        out->loop_hi = (uint32_t)(np + b->loop_hi);
    }
    return FJ_OK;
nomem:
    kb_code_free(out);
    return fj_fail(FJ_ERR_NO_MEMORY, "kernel %s: out of memory", b->name);
}

/* ---- interleaving (kb_interleave) ----------------------------------- */

uint32_t kb_body_len(const fj_builder *b) { return (uint32_t)b->len; }

void kb_interleave(fj_builder *b, const uint32_t *at, size_t stride, int lanes, int count) {
    if (b->err || lanes < 2 || count < 1) return;
    if (stride <= (size_t)count) goto bad;
    const size_t lo = at[0], hi = b->len;
    for (int l = 0; l < lanes; l++)
        for (int k = 0; k < count; k++)
            if (at[l * stride + k] > at[l * stride + k + 1]) goto bad;
    for (int l = 0; l + 1 < lanes; l++)
        if (at[l * stride + count] != at[(l + 1) * stride]) goto bad;
    if (at[(lanes - 1) * stride + count] != hi) goto bad;
    /* Straight-line code: no label bound inside, no jump (a backward one
     * may have no fixup). */
    if (b->last_jump >= (int32_t)lo) goto bad;
    for (uint32_t i = 0; i < b->nlabels; i++)
        if (b->labels[i] > (int32_t)lo && (size_t)b->labels[i] < hi) goto bad;
    if (b->align_mod && b->align_at > lo && b->align_at < hi) goto bad; /* kb_align_next's place */
    /* The span's fixups: the last ones added, in body order. */
    size_t f0 = b->nfix;
    while (f0 > 0 && b->fix[f0 - 1].pos >= lo) f0--;
    for (size_t i = f0; i < b->nfix; i++)
        if (!b->fix[i].is_const) goto bad;
    /* Instructions are copied 16 bytes at a time (at most 15 long): room
     * for that past the body and in tmp. */
    if (!kb_grow(b, (void **)&b->code, &b->cap, hi + 16, 1)) return;
    uint8_t stack[4096], *tmp = hi - lo + 16 <= sizeof stack ? stack : fj_malloc(hi - lo + 16);
    if (!tmp) { KB_ERR_NOMEM(b); return; }
    size_t to = 0;
    for (int k = 0; k < count; k++)
        for (int l = 0; l < lanes; l++) {
            size_t from = at[l * stride + k], len = at[l * stride + k + 1] - from;
            if (len <= 16) memcpy(tmp + to, b->code + from, 16);
            else memcpy(tmp + to, b->code + from, len);
            to += len;
        }
    memcpy(b->code + lo, tmp, hi - lo);
    if (tmp != stack) fj_free(tmp);
    /* A fixup moves with its instruction: stream l's instruction k now
     * starts after instructions 0..k-1 of every stream and instruction k
     * of streams 0..l-1. */
    for (size_t i = f0; i < b->nfix; i++) {
        fixup *f = &b->fix[i];
        int l = 0;
        while (l + 1 < lanes && f->pos >= at[(l + 1) * stride]) l++;
        const uint32_t *a = at + l * stride;
        int k = 0, e = count;   /* the last k with a[k] <= pos */
        while (e - k > 1) {
            int m = (k + e) / 2;
            if (a[m] <= f->pos) k = m; else e = m;
        }
        size_t start = lo;
        for (int l2 = 0; l2 < lanes; l2++)
            start += at[l2 * stride + k] - at[l2 * stride] + (l2 < l ? at[l2 * stride + k + 1] -
                                                                           at[l2 * stride + k] : 0);
        int64_t shift = (int64_t)start - (int64_t)a[k];
        f->pos = (uint32_t)((int64_t)f->pos + shift);
        f->end = (uint32_t)((int64_t)f->end + shift);
    }
    return;
bad:
    kb_fail(b, "internal: interleaved streams that are not straight-line code");
}
