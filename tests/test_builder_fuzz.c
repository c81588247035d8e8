/* test_builder_fuzz.c: random call sequences against the public builder API.
 *
 * Each sequence drives one builder with a random mix of register, slot,
 * constant, label, emit, call and return calls, then finishes or destroys
 * it. Operands range from well-formed (drawn from the encoder's own form
 * table, so many kernels do finish) to hostile: handles that were released
 * or belong to another builder, made-up handles, wrong register kinds,
 * mismatched widths, bad scales, out-of-range displacements, immediates
 * and labels, unknown mnemonics, NULL operand arrays.
 *
 * Checked for every sequence:
 *   - nothing crashes (and under ASan/UBSan nothing is reported or leaked);
 *   - fj_builder_finish either succeeds (the kernel then passed the
 *     verifier: the runtime is created with verify on) or fails with a
 *     non-empty fj_last_error();
 *   - errors are sticky: the same sequence cut short at a random step and
 *     finished fails with exactly the full sequence's message whenever the
 *     cut-short one hit a builder error (the first error wins, later calls
 *     change nothing), and a sequence that finishes had no builder error in
 *     any prefix;
 *   - kernels built only from register/immediate forms with forward jumps
 *     are run, and must return with the caller's callee-saved registers
 *     intact.
 *
 * FRAMEJIT_TEST_SEED=N picks another random sequence set (default fixed);
 * FRAMEJIT_TEST_ITERS=N changes the number of sequences (default 12000).
 */
#include <check.h>
#include <framejit.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "kernels/x64/x64_table.h"

/* ---- random numbers (xorshift64*) ------------------------------------ */

typedef struct rng { uint64_t s; } rng;
static uint64_t rnext(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}
static int rn(rng *r, int n) { return (int)(rnext(r) % (uint64_t)n); }

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* A C function kernels may call: any arguments are fine. */
static uint64_t fz_callee(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f) {
    return a ^ (b << 1) ^ (c << 2) ^ (d << 3) ^ (e << 4) ^ (f << 5);
}

/* fj_const_data may copy up to 1 MiB from its data pointer. */
static uint8_t const_src[1u << 20];

/* ---- one sequence ------------------------------------------------------ */

enum { H_LIVE, H_RELEASED, H_FOREIGN, H_JUNK };
enum { C_GPR = 1, C_VEC = 2, C_K = 3 };

typedef struct handle {
    fj_reg r;
    uint8_t cls;      /* C_* (what it claims to be), 0 for junk */
    uint8_t state;    /* H_* as this test believes it */
} handle;

typedef struct lab {
    fj_label l;
    uint8_t mine, bound;
} lab;

typedef struct fz {
    rng r;
    fj_builder *b, *other;
    int clean;        /* well-formed calls only */
    int runnable;     /* clean, and so far nothing that makes running unsafe */
    int vbits, avx512;
    int nargs, released;   /* the kernel's arguments; a register was released */
    handle h[256];
    int nh;
    lab lb[40];
    int nlb;
    fj_opnd mem[16];  /* stack slots and constants handed out */
    int nmem;
} fz;

static void add_handle(fz *z, fj_reg r, int cls, int state) {
    if (z->nh < (int)(sizeof z->h / sizeof z->h[0]))
        z->h[z->nh++] = (handle){r, (uint8_t)cls, (uint8_t)state};
}

/* A live handle of class cls, allocating one if none is live (0 if the
 * pool is exhausted: the builder has then recorded an error). */
static fj_reg live_reg(fz *z, int cls) {
    int cand[256], n = 0;
    for (int i = 0; i < z->nh; i++)
        if (z->h[i].cls == cls && z->h[i].state == H_LIVE && z->h[i].r.id) cand[n++] = i;
    /* Clean sequences stay inside the pools (14 GPRs, 16 vectors, 7 masks). */
    int cap = cls == C_GPR ? 10 : cls == C_VEC ? 12 : 5;
    if (n && (rn(&z->r, 4) || (z->clean && n >= cap))) return z->h[cand[rn(&z->r, n)]].r;
    fj_reg r = cls == C_GPR ? fj_gpr(z->b) : cls == C_VEC ? fj_vreg(z->b) : fj_kreg(z->b);
    add_handle(z, r, cls, H_LIVE);
    return r;
}

/* Any handle at all, in any state, or a made-up one that can never be
 * live (class 0, or a tag of 0). */
static fj_reg any_reg(fz *z) {
    if (z->nh && rn(&z->r, 5)) return z->h[rn(&z->r, z->nh)].r;
    static const uint32_t junk[] = {0, 1, 2, 3, 0x12345, (1u << 30) | (4u << 25),
                                    (1u << 30) | (5u << 25), (2u << 30) | (31u << 25),
                                    (3u << 30), 0xffffffffu & ~0x1ffffffu};
    fj_reg r = {junk[rn(&z->r, (int)(sizeof junk / sizeof junk[0]))]};
    return r;
}

static fj_label pick_label(fz *z, int forward_only) {
    int cand[40], n = 0;
    for (int i = 0; i < z->nlb; i++)
        if (z->lb[i].mine && (!forward_only || !z->lb[i].bound)) cand[n++] = i;
    if (!n || !rn(&z->r, 6)) {
        fj_label l = fj_label_new(z->b);
        if (z->nlb < 40) z->lb[z->nlb++] = (lab){l, 1, 0};
        return l;
    }
    return z->lb[cand[rn(&z->r, n)]].l;
}

static int64_t rnd_imm(fz *z) {
    static const int64_t v[] = {0, 1, -1, 2, 7, 31, 127, 128, -128, -129, 255, 256, 0x7fffffff,
                                0x80000000LL, 0xffffffffLL, -0x80000000LL, 0x100000000LL,
                                INT64_MAX, INT64_MIN};
    return rn(&z->r, 4) ? v[rn(&z->r, (int)(sizeof v / sizeof v[0]))] : (int64_t)rnext(&z->r);
}

/* A memory operand a clean sequence may use: a stack slot, a constant or
 * [live gpr + disp]. */
static fj_opnd clean_mem(fz *z, int bits) {
    fj_opnd m;
    if (z->nmem && rn(&z->r, 2)) {
        m = z->mem[rn(&z->r, z->nmem)];
    } else {
        fj_reg base = live_reg(z, C_GPR);
        m = rn(&z->r, 2) ? fj_mem(0, base, (int32_t)(rn(&z->r, 512) - 256))
                         : fj_memx(0, base, live_reg(z, C_GPR), (uint8_t)(1 << rn(&z->r, 4)),
                                   (int32_t)rn(&z->r, 4096));
    }
    m.bits = (uint16_t)bits;
    return m;
}

/* An operand for class c of row rw: generic widths are s (GPR) and l
 * (vector). Memory only when allowed (not in a runnable sequence). */
static fj_opnd class_opnd(fz *z, int c, int s, int l, int evex, int allow_mem) {
    switch (c) {
    case XC_R: case XC_RAX: return fj_reg_opnd_(live_reg(z, C_GPR), (uint16_t)s);
    case XC_CL: case XC_R8: return fj_r8(live_reg(z, C_GPR));
    case XC_R32: return fj_r32(live_reg(z, C_GPR));
    case XC_R64: return fj_r64(live_reg(z, C_GPR));
    case XC_RM: case XC_RM8: case XC_RM16: case XC_RM32: case XC_RM64: {
        int w = c == XC_RM ? s : c == XC_RM8 ? 8 : c == XC_RM16 ? 16 : c == XC_RM32 ? 32 : 64;
        if (allow_mem && rn(&z->r, 2)) return clean_mem(z, w);
        return fj_reg_opnd_(live_reg(z, C_GPR), (uint16_t)w);
    }
    case XC_M: case XC_M16: case XC_M32: case XC_M64: case XC_MV:
        return clean_mem(z, c == XC_M16 ? 16 : c == XC_M32 ? 32 : c == XC_M64 ? 64
                          : c == XC_MV ? l : 0);
    case XC_ONE: return fj_imm(1);
    case XC_I8: return fj_imm(rn(&z->r, 256) - 128);
    case XC_U8: return fj_imm(rn(&z->r, 256));
    case XC_I32: return fj_imm((int32_t)rnext(&z->r));
    case XC_I64: return fj_imm((int64_t)rnext(&z->r));
    case XC_REL8: case XC_REL32: return fj_lbl(pick_label(z, z->runnable));
    case XC_V: case XC_X: case XC_Y: case XC_VM: case XC_VMB: case XC_XM32: case XC_XM64:
    case XC_XM128: case XC_YM: {
        int w = c == XC_X || c == XC_XM32 || c == XC_XM64 || c == XC_XM128 ? 128
              : c == XC_Y || c == XC_YM ? 256 : l;
        if (allow_mem && c != XC_V && c != XC_X && c != XC_Y && rn(&z->r, 2)) {
            /* {1toN}: the operand's width is the vector's (the element
             * is 32 bits), which also fixes the width of the form. */
            if (c == XC_VMB && evex && rn(&z->r, 2)) return fj_bcst(clean_mem(z, w));
            return clean_mem(z, c == XC_XM32 ? 32 : c == XC_XM64 ? 64 : w);
        }
        return fj_reg_opnd_(live_reg(z, C_VEC), (uint16_t)w);
    }
    case XC_K: return fj_k(live_reg(z, C_K));
    case XC_KM16: case XC_KM32:
        if (allow_mem && rn(&z->r, 2)) return clean_mem(z, c == XC_KM16 ? 16 : 32);
        return fj_k(live_reg(z, C_K));
    default: return fj_none();
    }
}

static int pick_size(fz *z, int mask) {
    int bits[8], n = 0;
    for (int i = 0; i < 7; i++)
        if (mask & (1 << i)) bits[n++] = 8 << i;
    return n ? bits[rn(&z->r, n)] : 0;
}

/* A well-formed instruction from a random row of the encoder's table. */
static int row_fits(const fz *z, const x64_row *rw) {
    if (!z->avx512 && (rw->enc == XE_EVEX || (rw->feat & X64_F_AVX512F))) return 0;
    switch (rw->op) {   /* forms the builder keeps to itself */
    case FJ_PUSH: case FJ_POP: case FJ_RET: case FJ_LEAVE: case FJ_CALL: return 0;
    default: break;
    }
    for (int i = 0; i < 4 && rw->opd[i]; i++) {
        int c = X64_OPD_CLASS(rw->opd[i]);
        if (c == XC_CL) return 0;   /* needs rcx itself */
        /* jumps take labels; an indirect jump has no builder form */
        if ((rw->op == FJ_JMP || rw->op == FJ_JO) && c != XC_REL8 && c != XC_REL32) return 0;
    }
    return 1;
}

static void emit_from_row(fz *z) {
    const x64_row *rw = &x64_rows[rn(&z->r, x64_nrows)];
    for (int t = 0; t < 16 && z->clean && !row_fits(z, rw); t++)
        rw = &x64_rows[rn(&z->r, x64_nrows)];
    int op = rw->op + ((rw->flags & XF_CC) ? rn(&z->r, 16) : 0);
    if (op == FJ_UD2 || op == FJ_INT3) z->runnable = 0;   /* would trap */
    int evex = rw->enc == XE_EVEX;
    int s = pick_size(z, rw->sz & 15);
    int vmask = (rw->sz >> 4) & 7;
    if (!z->avx512) vmask &= 3;                           /* no zmm on avx2 */
    int l = pick_size(z, vmask << 4);
    fj_opnd o[4];
    int n = 0;
    int allow_mem = !z->runnable || !rn(&z->r, 8);
    for (; n < 4 && rw->opd[n]; n++) {
        o[n] = class_opnd(z, X64_OPD_CLASS(rw->opd[n]), s, l, evex, allow_mem);
        if (o[n].kind == FJ_OPND_MEM) z->runnable = 0;
    }
    if (evex && z->avx512 && n && !(rw->flags & XF_NOK) && !rn(&z->r, 4))
        o[0] = fj_masked(o[0], live_reg(z, C_K),   /* zeroing: vector destinations only */
                         o[0].kind == FJ_OPND_REG && o[0].bits >= 128 && rn(&z->r, 2));
    fj_emitv(z->b, (fj_op)op, o, n);
}

/* A hostile operand: every field may be wrong. */
static fj_opnd junk_opnd(fz *z) {
    static const uint16_t widths[] = {0, 8, 16, 32, 64, 128, 256, 512, 1024, 3, 16, 32};
    fj_opnd o = {0};
    switch (rn(&z->r, 7)) {
    case 0: case 1:
        o = fj_reg_opnd_(any_reg(z), widths[rn(&z->r, 12)]);
        break;
    case 2:
        o = z->nmem && rn(&z->r, 2) ? z->mem[rn(&z->r, z->nmem)] : fj_mem(0, any_reg(z), 0);
        if (rn(&z->r, 2)) o.index = any_reg(z);
        if (rn(&z->r, 3) == 0) o.scale = (uint8_t)rn(&z->r, 17);
        o.val = rn(&z->r, 3) ? (int64_t)(rn(&z->r, 8192) - 4096) : rnd_imm(z);
        o.bits = widths[rn(&z->r, 12)];
        o.bcst = rn(&z->r, 5) == 0;
        break;
    case 3: o = fj_imm(rnd_imm(z)); break;
    case 4: {
        fj_label l = z->nlb && rn(&z->r, 3) ? z->lb[rn(&z->r, z->nlb)].l
                                             : (fj_label){(uint32_t)rnd_imm(z)};
        o = fj_lbl(l);
        break;
    }
    case 5: o.kind = (uint8_t)(5 + rn(&z->r, 250)); break;   /* no such kind */
    default: break;                                          /* FJ_OPND_NONE */
    }
    if (rn(&z->r, 8) == 0) { o.mask = any_reg(z); o.zero = (uint8_t)rn(&z->r, 2); }
    return o;
}

static void emit_junk(fz *z) {
    int op = rn(&z->r, 10) ? 1 + rn(&z->r, FJ_OP_COUNT - 1) : rn(&z->r, FJ_OP_COUNT + 40) - 20;
    fj_opnd o[5];
    int n = rn(&z->r, 6) - (rn(&z->r, 10) == 0);   /* -1 .. 5 */
    for (int i = 0; i < 5; i++) o[i] = junk_opnd(z);
    fj_emitv(z->b, (fj_op)op, rn(&z->r, 20) ? o : NULL, n);
}

static void step(fz *z) {
    rng *r = &z->r;
    int a = rn(r, 24);
    switch (a) {
    case 0: case 1: case 2: {
        int cls = a == 0 ? C_GPR : a == 1 ? C_VEC : C_K;
        if (z->clean && (cls == C_K && !z->avx512)) break;
        if (z->clean) (void)live_reg(z, cls);   /* within the pool */
        else add_handle(z, cls == C_GPR ? fj_gpr(z->b) : cls == C_VEC ? fj_vreg(z->b)
                                           : fj_kreg(z->b), cls, H_LIVE);
        break;
    }
    case 3: {   /* release: live ones when clean, anything otherwise */
        if (!z->nh) break;
        handle *h = &z->h[rn(r, z->nh)];
        if (z->clean && (h->state != H_LIVE || !h->r.id)) break;
        fj_release(z->b, h->r);
        if (h->state == H_LIVE) h->state = H_RELEASED;
        z->released = 1;
        break;
    }
    case 4: {
        if (z->clean && (z->released || !z->nargs)) break;
        int i = z->clean ? rn(r, z->nargs) : rn(r, 10) - 2;
        fj_reg reg = fj_arg(z->b, i);
        if (reg.id) {
            for (int j = 0; j < z->nh; j++)   /* the same register again: one live entry */
                if (z->h[j].r.id == reg.id) reg.id = 0;
            if (reg.id) add_handle(z, reg, C_GPR, H_LIVE);
        }
        break;
    }
    case 5: {
        uint32_t bytes = z->clean ? 4u << rn(r, 7) : (uint32_t)rnd_imm(z);
        uint32_t align = z->clean ? 1u << rn(r, 5) : (uint32_t)rn(r, 70);
        fj_opnd m = fj_stack_slot(z->b, bytes, align, (uint16_t)(z->clean ? 0 : 8 << rn(r, 7)));
        if (z->nmem < 16 && m.kind == FJ_OPND_MEM) z->mem[z->nmem++] = m;
        break;
    }
    case 6: {
        fj_opnd m = fj_const_f32(z->b, (float)rn(r, 100));
        if (z->nmem < 16 && m.kind == FJ_OPND_MEM) z->mem[z->nmem++] = m;
        break;
    }
    case 7: {
        uint32_t bytes = z->clean ? 4u << rn(r, 5)
                       : rn(r, 4) ? (uint32_t)rn(r, 300) : (uint32_t)rnd_imm(z);
        uint32_t align = z->clean ? 1u << rn(r, 7) : (uint32_t)rn(r, 130);
        const void *src = z->clean || rn(r, 8) ? const_src : NULL;
        fj_opnd m = fj_const_data(z->b, src, bytes, align, 0);
        if (z->nmem < 16 && m.kind == FJ_OPND_MEM) z->mem[z->nmem++] = m;
        break;
    }
    case 8: {
        fj_label l = fj_label_new(z->b);
        if (z->nlb < 40) z->lb[z->nlb++] = (lab){l, 1, 0};
        break;
    }
    case 9: {   /* bind: an unbound own label when clean */
        if (!z->nlb) break;
        lab *l = &z->lb[rn(r, z->nlb)];
        if (z->clean && (!l->mine || l->bound)) break;
        fj_label_bind(z->b, l->l);
        if (l->mine) l->bound = 1;
        break;
    }
    case 10: {  /* a jump: forward only in runnable sequences (no loops) */
        fj_op op = rn(r, 3) ? (fj_op)(FJ_JO + rn(r, 16)) : FJ_JMP;
        fj_opnd t = fj_lbl(z->clean ? pick_label(z, z->runnable)
                                    : z->lb[rn(r, z->nlb ? z->nlb : 1)].l);
        if (!z->clean && rn(r, 4) == 0) t = junk_opnd(z);
        fj_emitv(z->b, op, &t, 1);
        break;
    }
    case 11: {
        fj_opnd args[7];
        int n = z->clean ? rn(r, 7) : rn(r, 9) - 1;
        for (int i = 0; i < 7; i++)
            args[i] = z->clean ? (rn(r, 2) ? fj_r64(live_reg(z, C_GPR)) : fj_imm(rnd_imm(z)))
                               : junk_opnd(z);
        fj_reg res = {0};
        if (rn(r, 2)) res = z->clean ? live_reg(z, C_GPR) : any_reg(z);
        const void *fn = z->clean || rn(r, 8) ? (const void *)fz_callee : NULL;
        fj_call(z->b, fn, z->clean || rn(r, 30) ? args : NULL, n, res);
        break;
    }
    case 12: {
        fj_opnd v = z->clean ? (rn(r, 2) ? fj_r64(live_reg(z, C_GPR)) : fj_imm(rnd_imm(z)))
                             : junk_opnd(z);
        if (rn(r, 3) == 0) v = fj_none();
        fj_return(z->b, v);
        break;
    }
    case 13: {  /* foreign handles used here */
        fj_reg fr = rn(r, 2) ? fj_gpr(z->other) : fj_vreg(z->other);
        if (!z->clean) add_handle(z, fr, fr.id >> 30, H_FOREIGN);
        break;
    }
    default:
        if (z->clean || rn(r, 2)) emit_from_row(z);
        else emit_junk(z);
        break;
    }
}

/* Copies an error message with hex numbers (register handles: their tags
 * come from a process-wide counter, so a replay gets other ones) blanked. */
static void norm_msg(char *dst, size_t n, const char *src) {
    size_t j = 0;
    for (size_t i = 0; src[i] && j + 1 < n; i++) {
        dst[j++] = src[i];
        if (src[i] == '0' && src[i + 1] == 'x') {
            if (j + 1 < n) dst[j++] = 'x';
            i++;
            while (strchr("0123456789abcdefABCDEF", src[i + 1]) && src[i + 1]) i++;
        }
    }
    dst[j] = '\0';
}

typedef struct outcome {
    fj_status st;
    char msg[512];
    int runnable;
    int steps;        /* of the whole sequence */
    fj_kernel *k;
} outcome;

/* Runs sequence `seed` (stopping after `stop` steps if stop >= 0) and
 * finishes it (or, if may_destroy and the sequence says so, destroys it). */
static void run_seq(fj_runtime *rt, uint64_t seed, int stop, int may_destroy, outcome *out) {
    memset(out, 0, sizeof *out);
    fz *z = calloc(1, sizeof *z);
    ck_assert_ptr_nonnull(z);
    z->r.s = seed * 0x9E3779B97F4A7C15ULL + 1;
    rnext(&z->r);
    int nargs = z->nargs = rn(&z->r, 7);
    ck_assert_int_eq(fj_builder_create(rt, "fuzz", nargs, &z->b), FJ_OK);
    ck_assert_int_eq(fj_builder_create(rt, "fuzz_other", 6, &z->other), FJ_OK);
    z->vbits = fj_builder_vbits(z->b);
    z->avx512 = z->vbits == 512;
    z->clean = rn(&z->r, 2);
    z->runnable = z->clean && rn(&z->r, 2);
    /* Labels of the other builder: ids that may also be valid here. */
    for (int i = 0; i < 2; i++) z->lb[z->nlb++] = (lab){fj_label_new(z->other), 0, 0};
    if (z->clean) z->nlb = 0;
    int steps = 1 + rn(&z->r, 80);
    int destroy = rn(&z->r, 5) == 0 && may_destroy;   /* same draws either way */
    out->steps = steps;
    for (int i = 0; i < steps && (stop < 0 || i < stop); i++) step(z);
    if (z->clean)   /* a clean sequence binds what it jumped to */
        for (int i = 0; i < z->nlb; i++)
            if (z->lb[i].mine && !z->lb[i].bound) fj_label_bind(z->b, z->lb[i].l);
    fj_builder_destroy(z->other);
    out->runnable = z->runnable;
    if (destroy) {
        fj_builder_destroy(z->b);
        out->st = FJ_OK;
    } else {
        out->st = fj_builder_finish(z->b, &out->k);
        norm_msg(out->msg, sizeof out->msg, fj_last_error());
        if (out->st == FJ_OK) ck_assert_ptr_nonnull(out->k);
        else ck_assert_ptr_null(out->k);
    }
    free(z);
}

/* Errors that only finishing can find (so a prefix may differ). */
static int finish_time_error(const outcome *o) {
    return o->st == FJ_ERR_VERIFY || strstr(o->msg, "never bound") != NULL;
}

START_TEST(fuzz_sequences) {
    uint64_t seed = env_u64("FRAMEJIT_TEST_SEED", 0x5eedf00dULL);
    long iters = fjt_iters("FRAMEJIT_TEST_ITERS", 12000);
    fj_isa isas[2] = {FJ_ISA_AVX2, FJ_ISA_AVX2};
    int nisa = 1;
    fj_runtime *probe;
    if (fj_runtime_create(NULL, &probe) == FJ_OK) {
        if (fj_runtime_isa(probe) == FJ_ISA_AVX512) isas[nisa++] = FJ_ISA_AVX512;
        fj_runtime_destroy(probe);
    }
    long ok = 0, failed = 0, destroyed = 0, ran = 0, sticky_checked = 0;
    fj_runtime *rt = NULL;
    for (long it = 0; it < iters; it++) {
        /* A fresh runtime now and then: both ISAs, and a code cache that
         * never fills with released kernels' address space. */
        if (it % 1000 == 0) {
            fj_runtime_destroy(rt);
            fj_options o;
            fj_options_init(&o);
            o.threads = 1;
            o.verify = 1;
            o.isa = isas[(it / 1000) % nisa];
            ck_assert_msg(fj_runtime_create(&o, &rt) == FJ_OK, "%s", fj_last_error());
        }
        /* Sequence `it` of this seed (seeds do not share sequences). */
        uint64_t s = seed * 0xD1B54A32D192ED03ULL + (uint64_t)it;
        outcome full;
        run_seq(rt, s, -1, 1, &full);
        if (full.st == FJ_OK && !full.k) { destroyed++; continue; }
        if (full.st != FJ_OK) {
            failed++;
            ck_assert_msg(full.msg[0] != '\0', "seed 0x%" PRIx64 " sequence %ld: %s with an "
                          "empty message", seed, it, fj_status_str(full.st));
        } else {
            ok++;
            if (full.runnable) {
                static const uint64_t want[FJT_NCSR] = {0x1111, 0x2222, 0x3333, 0x4444, 0x5555};
                uint64_t after[FJT_NCSR];
                fjt_call_csr(fj_kernel_entry(full.k), want, after, 1, 2, 3, 4, 5, 6);
                ck_assert_msg(!memcmp(after, want, sizeof want),
                              "seed 0x%" PRIx64 " sequence %ld: callee-saved registers not "
                              "preserved", seed, it);
                ran++;
            }
            fj_kernel_release(full.k);
        }
        /* Stickiness: cut the sequence at a random step and finish. A cut
         * past the end replays the whole sequence: same outcome. */
        rng cut = {s ^ 0xC0FFEEULL};
        rnext(&cut);
        int at = rn(&cut, 81);
        outcome pre;
        run_seq(rt, s, at, 0, &pre);
        if (pre.k) fj_kernel_release(pre.k);
        if (at >= full.steps)
            ck_assert_msg(full.st == pre.st && (full.st == FJ_OK || !strcmp(full.msg, pre.msg)),
                          "seed 0x%" PRIx64 " sequence %ld: replay gave \"%s\", first run "
                          "\"%s\"", seed, it, pre.st ? pre.msg : "success",
                          full.st ? full.msg : "success");
        if (pre.st != FJ_OK && !finish_time_error(&pre)) {
            sticky_checked++;
            ck_assert_msg(full.st == pre.st && !strcmp(full.msg, pre.msg),
                          "seed 0x%" PRIx64 " sequence %ld: first error \"%s\" but the whole "
                          "sequence reports \"%s\" (%s)", seed, it, pre.msg,
                          full.st ? full.msg : "success", fj_status_str(full.st));
        }
    }
    fj_runtime_destroy(rt);
    fprintf(stderr, "builder_fuzz: seed 0x%" PRIx64 ", %ld sequences: %ld finished (%ld run), "
            "%ld failed, %ld destroyed, %ld sticky checks\n", seed, iters, ok, ran, failed,
            destroyed, sticky_checked);
    /* The mix must keep reaching both outcomes, or the fuzzer tests little. */
    ck_assert_int_gt(ok, iters / 5);
    ck_assert_int_gt(ran, iters / 50);
    ck_assert_int_gt(failed, iters / 5);
    ck_assert_int_gt(sticky_checked, iters / 10);
}
END_TEST

/* Argument checks of the entry points themselves. */
START_TEST(fuzz_entry_points) {
    fj_runtime *rt;
    ck_assert_int_eq(fj_runtime_create(NULL, &rt), FJ_OK);
    /* (fj_builder_create's own checks: test_api's builder_create_bad.)
     * NULL builders are ignored everywhere. */
    fj_reg r = fj_gpr(NULL);
    ck_assert_uint_eq(r.id, 0);
    fj_release(NULL, r);
    fj_label_bind(NULL, fj_label_new(NULL));
    fj_emit(NULL, FJ_NOP, fj_none());
    fj_return(NULL, fj_none());
    fj_call(NULL, (const void *)fz_callee, NULL, 0, r);
    (void)fj_stack_slot(NULL, 8, 8, 64);
    (void)fj_const_f32(NULL, 1.0f);
    fj_builder_destroy(NULL);
    fj_kernel *k = (fj_kernel *)1;
    ck_assert_int_ne(fj_builder_finish(NULL, &k), FJ_OK);
    ck_assert_ptr_null(k);
    /* finish with out == NULL still frees the builder (no leak under ASan). */
    fj_builder *b;
    ck_assert_int_eq(fj_builder_create(rt, "x", 1, &b), FJ_OK);
    ck_assert_int_ne(fj_builder_finish(b, NULL), FJ_OK);
    fj_runtime_destroy(rt);
}
END_TEST

int main(void) {
    Suite *s = suite_create("builder_fuzz");
    TCase *tc = tcase_create("fuzz");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, fuzz_entry_points);
    tcase_add_test(tc, fuzz_sequences);
    suite_add_tcase(s, tc);
    return fjt_run_suite(s);
}
