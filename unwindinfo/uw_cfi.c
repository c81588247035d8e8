/* uw_cfi.c: the byte writer, uw_rec -> DWARF CFA instructions, and .eh_frame
 * (one CIE, one FDE per function, zero terminator). */
#include "unwindinfo/uw_int.h"

#include <string.h>

/* ---- Byte writer --------------------------------------------------------- */

void uw_put(uw_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uw_reserve(b, cap);
        if (b->oom) return;
    }
    if (n == 0) return; /* b->p may still be NULL: memcpy(NULL, ..., 0) is UB */
    if (src)
        memcpy(b->p + b->len, src, n);
    else
        memset(b->p + b->len, 0, n);
    b->len += n;
}

void uw_put_zero(uw_buf *b, size_t n) { uw_put(b, NULL, n); }

void uw_reserve(uw_buf *b, size_t cap) {
    if (b->oom || cap <= b->cap) return;
    uint8_t *p = b->ext ? fj_malloc(cap) : fj_realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    if (b->ext && b->len) memcpy(p, b->p, b->len);
    b->ext = 0;
    b->p = p;
    b->cap = cap;
}

void uw_put_uleb(uw_buf *b, uint64_t v) {
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        if (v) byte |= 0x80;
        uw_put_u8(b, byte);
    } while (v);
}

void uw_put_sleb(uw_buf *b, int64_t v) {
    for (;;) {
        uint8_t byte = v & 0x7f;
        v >>= 7;  /* arithmetic shift on every compiler we support */
        int done = (v == 0 && !(byte & 0x40)) || (v == -1 && (byte & 0x40));
        if (!done) byte |= 0x80;
        uw_put_u8(b, byte);
        if (done) return;
    }
}

void uw_align(uw_buf *b, size_t a, uint8_t fill) {
    while (!b->oom && (b->len & (a - 1))) uw_put(b, &fill, 1);
}

void uw_patch_u32(uw_buf *b, size_t at, uint32_t v) {
    if (!b->oom) memcpy(b->p + at, &v, 4);
}

fj_status uw_buf_take(uw_buf *b, uint8_t **out, size_t *len) {
    if (b->ext) uw_reserve(b, b->cap + 1);   /* the bytes to the heap */
    if (b->oom) {
        if (!b->ext) fj_free(b->p);
        *b = (uw_buf){0};
        return fj_fail(FJ_ERR_NO_MEMORY, "unwind info: out of memory");
    }
    *out = b->p;
    *len = b->len;
    *b = (uw_buf){0};
    return FJ_OK;
}

/* ---- Registers and input checks ------------------------------------------ */

/* x86 encoding order (rax rcx rdx rbx rsp rbp rsi rdi r8..r15) differs from
 * the DWARF x86-64 numbering (rax rdx rcx rbx rsi rdi rbp rsp r8..r15). */
static const uint8_t dwarf_of_x86[16] = {0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15};

enum { X86_RSP = 4, X86_RBP = 5 };
enum { DW_RSP = 7, DW_RBP = 6, DW_RA = 16 };

int uw_dwarf_reg(unsigned r) { return r < 16 ? dwarf_of_x86[r] : -1; }

/* One function's own checks (name, range, records). */
static fj_status check_one(const uw_func *f, size_t i) {
    if (!f->name || !f->name[0])
        return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: function %zu has no name", i);
    if (f->start == 0 || f->size == 0 || f->size > UINT32_MAX || f->start + f->size < f->start)
        return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: %s: bad range %#lx+%zu", f->name,
                       (unsigned long)f->start, f->size);
    if (f->nrecs && !f->recs)
        return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: %s: records missing", f->name);
    for (size_t j = 0; j < f->nrecs; j++) {
        if (f->recs[j].off > f->size || (j && f->recs[j].off < f->recs[j - 1].off))
            return fj_fail(FJ_ERR_INVALID_ARG,
                           "unwind info: %s: record %zu at offset %u is unsorted or past "
                           "the end",
                           f->name, j, f->recs[j].off);
    }
    return FJ_OK;
}

fj_status uw_check_func(const uw_func *f) {
    if (!f) return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: no function");
    return check_one(f, 0);
}

fj_status uw_check_funcs(const uw_func *fns, size_t n, uintptr_t *lo, uintptr_t *hi) {
    if (!fns || n == 0) return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: no functions");
    uintptr_t l = UINTPTR_MAX, h = 0;
    int sorted = 1;
    for (size_t i = 0; i < n; i++) {
        const uw_func *f = &fns[i];
        fj_status st = check_one(f, i);
        if (st != FJ_OK) return st;
        if (i && f->start < fns[i - 1].start) sorted = 0;
        if (f->start < l) l = f->start;
        if (f->start + f->size > h) h = f->start + f->size;
    }
    /* Overlapping kernels would give two FDEs for one pc. Sorted input (an
     * arena's kernels, thousands of them) only needs its neighbours
     * compared; the rare unsorted call pays the pairwise check. */
    for (size_t i = 1; i < n; i++) {
        const size_t k0 = sorted ? i - 1 : 0;
        for (size_t k = k0; k < i; k++) {
            const uw_func *f = &fns[i];
            if (f->start < fns[k].start + fns[k].size && fns[k].start < f->start + f->size)
                return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: %s overlaps %s", f->name,
                               fns[k].name);
        }
    }
    if (lo) *lo = l;
    if (hi) *hi = h;
    return FJ_OK;
}

/* ---- DWARF CFA instructions ---------------------------------------------- */

enum {
    DW_CFA_nop = 0x00,
    DW_CFA_advance_loc1 = 0x02,
    DW_CFA_advance_loc2 = 0x03,
    DW_CFA_advance_loc4 = 0x04,
    DW_CFA_def_cfa = 0x0c,
    DW_CFA_def_cfa_register = 0x0d,
    DW_CFA_def_cfa_offset = 0x0e,
    DW_CFA_offset_extended_sf = 0x11,
    DW_CFA_advance_loc = 0x40,
    DW_CFA_offset = 0x80,
    DW_CFA_restore = 0xc0,
};
enum { DW_EH_PE_absptr = 0x00 };
enum { CODE_ALIGN = 1, DATA_ALIGN = -8 };

/* The CFA rule and what the FDE has said so far, so each record is checked
 * against the frame it claims to change. */
typedef struct cfa_state {
    int reg, off;             /* CFA = reg + off (DWARF numbers) */
    int16_t frame_save[16];   /* x86 reg -> its slot in the current frame (0: none) */
    uint16_t live;            /* x86 regs the rows currently show as saved */
    int had_frame;            /* a push rbp was seen */
} cfa_state;

static void cfa_advance(uw_buf *b, uint32_t delta) {
    if (delta == 0) return;
    if (delta < 0x40) {
        uw_put_u8(b, DW_CFA_advance_loc | delta);
    } else if (delta <= 0xff) {
        uw_put_u8(b, DW_CFA_advance_loc1);
        uw_put_u8(b, (uint8_t)delta);
    } else if (delta <= 0xffff) {
        uw_put_u8(b, DW_CFA_advance_loc2);
        uw_put_u16(b, (uint16_t)delta);
    } else {
        uw_put_u8(b, DW_CFA_advance_loc4);
        uw_put_u32(b, delta);
    }
}

/* An advance that may exceed 32 bits (code_align 1): split in steps. */
static void cfa_advance_abs(uw_buf *b, uintptr_t delta) {
    while (delta > UINT32_MAX) {
        cfa_advance(b, UINT32_MAX);
        delta -= UINT32_MAX;
    }
    cfa_advance(b, (uint32_t)delta);
}

/* reg (DWARF number) saved at CFA + cfa_off. */
static void cfa_offset(uw_buf *b, int reg, int cfa_off) {
    int64_t factored = cfa_off / DATA_ALIGN;
    if (factored >= 0 && reg < 64) {
        uw_put_u8(b, (uint8_t)(DW_CFA_offset | reg));
        uw_put_uleb(b, (uint64_t)factored);
    } else {
        uw_put_u8(b, DW_CFA_offset_extended_sf);
        uw_put_uleb(b, (uint64_t)reg);
        uw_put_sleb(b, factored);
    }
}

static void cfa_def(uw_buf *b, int reg, int off) {
    uw_put_u8(b, DW_CFA_def_cfa);
    uw_put_uleb(b, (uint64_t)reg);
    uw_put_uleb(b, (uint64_t)off);
}

static fj_status rec_bad(const uw_func *f, const uw_rec *r, const char *why) {
    return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: %s: record kind %u at offset %u: %s", f->name,
                   r->kind, r->off, why);
}

static fj_status cfa_rec(uw_buf *b, const uw_func *f, const uw_rec *r, cfa_state *s) {
    switch (r->kind) {
    case UW_PUSH_FP:
        if (s->reg != DW_RSP || s->off != 8) return rec_bad(f, r, "push rbp inside a frame");
        uw_put_u8(b, DW_CFA_def_cfa_offset);
        uw_put_uleb(b, 16);
        cfa_offset(b, DW_RBP, -16);
        s->off = 16;
        memset(s->frame_save, 0, sizeof s->frame_save);  /* a new frame */
        s->live = 0;
        s->had_frame = 1;
        return FJ_OK;
    case UW_SET_FP:
        if (s->reg == DW_RSP && s->off == 16) {
            /* Right after push rbp: rsp == rbp, only the register changes. */
            uw_put_u8(b, DW_CFA_def_cfa_register);
            uw_put_uleb(b, DW_RBP);
        } else if (s->reg == DW_RSP && s->off == 8 && s->had_frame) {
            /* Code behind a mid-function epilogue runs in the frame again
             * (it is reached by a jump from the body): restate the whole
             * frame, including the registers the epilogue restored. */
            cfa_def(b, DW_RBP, 16);
            cfa_offset(b, DW_RBP, -16);
            for (unsigned x = 0; x < 16; x++) {
                if (s->frame_save[x] && !(s->live & (1u << x))) {
                    cfa_offset(b, uw_dwarf_reg(x), s->frame_save[x]);
                    s->live |= (uint16_t)(1u << x);
                }
            }
        } else {
            return rec_bad(f, r, "mov rbp, rsp without push rbp");
        }
        s->reg = DW_RBP;
        s->off = 16;
        return FJ_OK;
    case UW_SAVE_REG:
        if (r->reg >= 16 || r->reg == X86_RSP || r->reg == X86_RBP)
            return rec_bad(f, r, "register cannot be saved");
        if (r->cfa_off == 0 || r->cfa_off % 8) return rec_bad(f, r, "slot not a multiple of 8");
        cfa_offset(b, uw_dwarf_reg(r->reg), r->cfa_off);
        s->frame_save[r->reg] = r->cfa_off;
        s->live |= (uint16_t)(1u << r->reg);
        return FJ_OK;
    case UW_RESTORE_REG:
        if (r->reg >= 16 || r->reg == X86_RSP || r->reg == X86_RBP)
            return rec_bad(f, r, "register cannot be restored");
        uw_put_u8(b, (uint8_t)(DW_CFA_restore | uw_dwarf_reg(r->reg)));
        s->live &= (uint16_t)~(1u << r->reg);
        return FJ_OK;
    case UW_POP_FP:
        if (s->off != 16 || (s->reg != DW_RBP && s->reg != DW_RSP))
            return rec_bad(f, r, "pop rbp outside a frame");
        cfa_def(b, DW_RSP, 8);
        uw_put_u8(b, DW_CFA_restore | DW_RBP);
        s->reg = DW_RSP;
        s->off = 8;
        return FJ_OK;
    case UW_CFA_SP:
        /* Only inside a frame that pushed rbp and never made it the CFA. */
        if (!s->had_frame || s->reg != DW_RSP || r->cfa_off < 16 || r->cfa_off % 8)
            return rec_bad(f, r, "rsp-based CFA outside an rsp frame");
        uw_put_u8(b, DW_CFA_def_cfa_offset);
        uw_put_uleb(b, (uint64_t)r->cfa_off);
        s->off = r->cfa_off;
        return FJ_OK;
    default:
        return rec_bad(f, r, "unknown kind");
    }
}

/* ---- .eh_frame ------------------------------------------------------------ */

/* A 4-byte length field whose value is filled in by len_end. */
static size_t len_begin(uw_buf *b) {
    size_t at = b->len;
    uw_put_u32(b, 0);
    return at;
}

static void len_end(uw_buf *b, size_t at) { uw_patch_u32(b, at, (uint32_t)(b->len - at - 4)); }

size_t uw_cie_put(uw_buf *b, int pad) {
    size_t at = len_begin(b);
    uw_put_u32(b, 0);              /* CIE id */
    uw_put_u8(b, 1);               /* version */
    uw_put(b, "zR", 3);            /* augmentation, NUL included */
    uw_put_uleb(b, CODE_ALIGN);
    uw_put_sleb(b, DATA_ALIGN);
    uw_put_u8(b, DW_RA);           /* return address column (a byte in version 1) */
    uw_put_uleb(b, 1);             /* augmentation data: */
    uw_put_u8(b, DW_EH_PE_absptr); /*   FDE pointers are 8-byte absolute */
    /* On entry: CFA = rsp + 8, return address at CFA - 8. */
    cfa_def(b, DW_RSP, 8);
    cfa_offset(b, DW_RA, -8);
    if (pad) uw_align(b, 8, DW_CFA_nop);
    len_end(b, at);
    return at;
}

/* f's records as CFA instructions, advancing from code offset 0 (f->start). */
static fj_status put_records(uw_buf *b, const uw_func *f, uint32_t *loc_out,
                             cfa_state *end_out) {
    if (f->prog) {
        uw_put(b, f->prog, f->prog_len);
        if (loc_out) *loc_out = f->nrecs ? f->recs[f->nrecs - 1].off : 0;
        if (end_out) {
            /* What uw_cfa_append reads of it. */
            *end_out = (cfa_state){.reg = f->prog_clean ? DW_RSP : -1, .off = 8};
        }
        return FJ_OK;
    }
    cfa_state s = {.reg = DW_RSP, .off = 8};
    uint32_t loc = 0;
    for (size_t i = 0; i < f->nrecs; i++) {
        const uw_rec *r = &f->recs[i];
        cfa_advance(b, r->off - loc);
        loc = r->off;
        fj_status st = cfa_rec(b, f, r, &s);
        if (st != FJ_OK) return st;
    }
    if (loc_out) *loc_out = loc;
    if (end_out) *end_out = s;
    return FJ_OK;
}

fj_status uw_cfa_records(uw_buf *b, const uw_func *f) { return put_records(b, f, NULL, NULL); }

void uw_func_prog(uw_func *f, uint8_t *buf, size_t cap) {
    uw_buf b = {buf, 0, cap, 0, 1};
    uint32_t loc;
    cfa_state end;
    f->prog = NULL;
    const fj_status st = put_records(&b, f, &loc, &end);
    if (!b.ext) fj_free(b.p);   /* grown out of buf */
    if (st != FJ_OK || !b.ext || b.oom) return;
    f->prog = buf;
    f->prog_len = b.len;
    f->prog_clean = end.reg == DW_RSP && end.off == 8 && end.live == 0;
}

fj_status uw_fde_put(uw_buf *b, const uw_func *f, uintptr_t bias, ptrdiff_t cie_at) {
    size_t at = len_begin(b);
    /* Back to the CIE from this field (cie_at < 0: before the buffer). */
    uw_put_u32(b, (uint32_t)((ptrdiff_t)b->len - cie_at));
    uw_put_u64(b, f->start - bias);
    uw_put_u64(b, f->size);
    uw_put_uleb(b, 0);  /* no augmentation data */
    fj_status st = put_records(b, f, NULL, NULL);
    if (st != FJ_OK) return st;
    uw_align(b, 8, DW_CFA_nop);
    len_end(b, at);
    return FJ_OK;
}

fj_status uw_cfa_append(uw_buf *b, const uw_func *f, unsigned *touched, uintptr_t *loc) {
    if (f->start < *loc)
        return fj_fail(FJ_ERR_INVALID_ARG, "unwind info: %s starts below the program", f->name);
    cfa_advance_abs(b, f->start - *loc);
    /* Back to the CIE's rules for whatever the previous function changed:
     * CFA = rsp + 8 and every register the caller's. */
    if (*touched & (1u << X86_RSP)) cfa_def(b, DW_RSP, 8);
    for (unsigned x = 0; x < 16; x++)
        if (x != X86_RSP && (*touched & (1u << x)))
            uw_put_u8(b, (uint8_t)(DW_CFA_restore | uw_dwarf_reg(x)));
    uint32_t last = 0;
    cfa_state end;
    fj_status st = put_records(b, f, &last, &end);
    if (st != FJ_OK) return st;
    unsigned t = 0;
    /* A function whose last row is its pop rbp (CFA = rsp + 8, rbp and
     * every saved register restored) leaves the CIE's rules in force: the
     * next one needs no reset. That shortens the program libgcc runs up to
     * a pc in a group of small kernels. */
    const int clean = f->nrecs && f->recs[f->nrecs - 1].kind == UW_POP_FP &&
                      end.reg == DW_RSP && end.off == 8 && end.live == 0;
    for (size_t i = 0; i < f->nrecs && !clean; i++) {
        switch (f->recs[i].kind) {
        case UW_PUSH_FP: t |= 1u << X86_RSP | 1u << X86_RBP; break;
        case UW_SAVE_REG: t |= 1u << f->recs[i].reg; break;
        default: break;
        }
    }
    *touched = t;
    *loc = f->start + last;
    return FJ_OK;
}

fj_status uw_eh_frame_build_at(const uw_func *fns, size_t n, uintptr_t bias, uint8_t **out,
                               size_t *len, size_t *fde_off) {
    if (!out || !len) return fj_fail(FJ_ERR_INVALID_ARG, "uw_eh_frame_build: NULL output");
    fj_status st = uw_check_funcs(fns, n, NULL, NULL);
    if (st != FJ_OK) return st;
    uw_buf b = {0};
    uw_cie_put(&b, 1);
    for (size_t i = 0; i < n; i++) {
        if (fde_off) fde_off[i] = b.len;
        st = uw_fde_put(&b, &fns[i], bias, 0);
        if (st != FJ_OK) {
            fj_free(b.p);
            return st;
        }
    }
    uw_put_u32(&b, 0);  /* terminator: libgcc walks until a zero length */
    return uw_buf_take(&b, out, len);
}
