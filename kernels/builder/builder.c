/* builder.c: the kernel builder: register pools without rbp/rsp, labels,
 * stack slots, constant pool, C calls; the frame around the body is laid
 * out at assembly (builder_frame.c).
 *
 * The body is emitted into its own buffer because the prologue's size is
 * known only at the end (which callee-saved registers were handed out, how
 * big the frame got); jumps are relative, constants are RIP-relative with
 * fixups, so the body moves without change.
 */
#include "kernels/builder/builder_priv.h"
#include "kernels/x64/x64_templ.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Caller-saved first: callee-saved registers cost a save and a restore. */
static const uint8_t gpr_order[14] = {X64_RAX, X64_RCX, X64_RDX, X64_RSI, X64_RDI, X64_R8,
                                      X64_R9,  X64_R10, X64_R11, X64_RBX, X64_R12, X64_R13,
                                      X64_R14, X64_R15};
static const uint8_t arg_regs[6] = {X64_RDI, X64_RSI, X64_RDX, X64_RCX, X64_R8, X64_R9};
#define CALLER_SAVED_MASK 0x0fc7u /* rax rcx rdx rsi rdi r8-r11 */

static atomic_uint tag_counter = 1;

/* ---- errors --------------------------------------------------------- */

void kb_fail(fj_builder *b, const char *fmt, ...) {
    if (!b || b->err != FJ_OK) return;
    b->err = FJ_ERR_CODEGEN;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
}

int kb_grow_slow(fj_builder *b, void **p, size_t *cap, size_t need, size_t elem) {
    size_t n = *cap ? *cap : 256; /* few reallocations for typical kernels */
    while (n < need) n *= 2;
    void *q = fj_realloc(*p, n * elem);
    if (!q) { KB_ERR_NOMEM(b); return 0; }
    *p = q;
    *cap = n;
    return 1;
}

/* ---- creation ------------------------------------------------------- */

/* Tags come from the process-wide counter in blocks (one atomic add per
 * TAG_BLOCK handles instead of one per handle), so they stay unique across
 * builders as before: a handle of another builder, or of a released
 * register, does not match the live tag. */
enum { TAG_BLOCK = 256 };

static uint32_t new_handle(fj_builder *b, int cls, unsigned phys) {
    if (b->next_tag == b->tag_end) {
        b->next_tag = atomic_fetch_add(&tag_counter, TAG_BLOCK) & 0x1ffffffu;
        b->tag_end = b->next_tag + TAG_BLOCK;
        if (b->tag_end > 0x2000000u) b->tag_end = 0x2000000u;   /* at the wrap */
        if (b->next_tag == 0) b->next_tag = 1;                     /* 0 means free */
    }
    uint32_t t = b->next_tag++;
    b->tag[cls][phys] = t;
    b->live[cls] |= 1u << phys;
    if (cls == RC_GPR) b->gpr_ever |= 1u << phys;
    if (cls == RC_VEC) b->used_vec = 1;
    return ((uint32_t)cls << 30) | (phys << 25) | t;
}

/* The last builder a thread freed, kept with its buffers for the thread's
 * next kernel: made from scratch, a math kernel's builder took ten
 * allocations and reallocations (its buffers grow from 256 bytes), each
 * on memory the allocator had not touched lately; in a new runtime they
 * cost more than a tenth of the generation. Freed with the thread. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_ok;

static void free_now(fj_builder *b) {
    fj_free(b->name);
    fj_free(b->code);
    fj_free(b->labels);
    fj_free(b->fix);
    fj_free(b->consts);
    fj_free(b->scratch);
    fj_free(b);
}
static void spare_drop(void *b) { free_now(b); }
static void spare_init(void) { spare_ok = pthread_key_create(&spare_key, spare_drop) == 0; }

/* A zeroed builder with a name buffer of at least need bytes: the spare
 * (its buffers kept, emptied), or a new one. */
static fj_builder *builder_alloc(size_t need) {
    pthread_once(&spare_once, spare_init);
    fj_builder *b = spare_ok ? pthread_getspecific(spare_key) : NULL;
    if (b) {
        pthread_setspecific(spare_key, NULL);
        fj_builder keep = *b;
        memset(b, 0, sizeof *b);
        b->name = keep.name;
        b->name_cap = keep.name_cap;
        b->code = keep.code;
        b->cap = keep.cap;
        b->labels = keep.labels;
        b->labels_cap = keep.labels_cap;
        b->fix = keep.fix;
        b->fix_cap = keep.fix_cap;
        b->consts = keep.consts;
        b->const_cap = keep.const_cap;
        b->scratch = keep.scratch;
        b->nscratch = keep.nscratch;
    } else if (!(b = fj_calloc(1, sizeof *b))) {
        return NULL;
    }
    if (b->name_cap < need) {
        char *nm = fj_realloc(b->name, need);
        if (!nm) { free_now(b); return NULL; }
        b->name = nm;
        b->name_cap = need;
    }
    return b;
}

fj_status kb_new(const char *name, int nargs, fj_isa isa, uint32_t cpu, fj_runtime *rt,
                 fj_builder **out) {
    /* A probe kernel has its own name: it must never pass for the
     * frame-pointer one. */
    const int nofp = FJ_FP_TAX_PROBE && (cpu & KB_NOFP);
    const char *suffix = nofp ? "_nofp" : "";
    size_t n = strlen(name), ns = strlen(suffix);
    fj_builder *b = builder_alloc(n + ns + 1);
    if (!b) return fj_fail(FJ_ERR_NO_MEMORY, "builder: out of memory");
    b->nofp = nofp;
    memcpy(b->name, name, n);
    memcpy(b->name + n, suffix, ns + 1);
    b->isa = isa;
    b->rt = rt;
    uint32_t allowed = X64_F_AVX | X64_F_AVX2 | X64_F_FMA | X64_F_BMI2 | X64_F_F16C |
                       X64_F_AVXVNNI;
    if (isa == FJ_ISA_AVX512)
        allowed |= X64_F_AVX512F | X64_F_AVX512VL | X64_F_AVX512BW | X64_F_AVX512DQ |
                   X64_F_AVX512VNNI | X64_F_AVX512BF16;
    b->features = allowed & cpu;
    b->vbits = isa == FJ_ISA_AVX512 ? 512 : 256;
    b->nvec = isa == FJ_ISA_AVX512 ? 32 : 16;
    b->last_ret_jmp = -1;
    b->last_jump = -1;
    for (int i = 0; i < nargs; i++) {
        new_handle(b, RC_GPR, arg_regs[i]);
        b->arg_tag[i] = b->tag[RC_GPR][arg_regs[i]];
    }
    /* Label ids carry a per-builder salt, so a label of another builder is
     * rejected instead of aliasing one of ours. */
    do b->label_salt = atomic_fetch_add(&tag_counter, 1) & 0xfffu; while (b->label_salt == 0);
    b->gpr_ever = 0; /* argument registers are caller-saved: nothing to save */
    *out = b;
    return FJ_OK;
}

kb_trace *kb_scratch_traces(fj_builder *b, int n) {
    if (!b || n < 1) return NULL;
    if (b->nscratch < n) {
        kb_trace *t = fj_realloc(b->scratch, (size_t)n * sizeof *t);
        if (!t) return NULL;
        b->scratch = t;
        b->nscratch = n;
    }
    return b->scratch;
}

const char *kb_name(const fj_builder *b) { return b->name; }
int kb_nofp(const fj_builder *b) { return kb_probe_nofp(b); }
fj_runtime *kb_runtime(const fj_builder *b) { return b->rt; }

void kb_free(fj_builder *b) {
    if (!b) return;
    if (spare_ok && !pthread_getspecific(spare_key) && pthread_setspecific(spare_key, b) == 0)
        return;
    free_now(b);
}

fj_isa fj_builder_isa(const fj_builder *b) { return b ? b->isa : FJ_ISA_AUTO; }
int fj_builder_vbits(const fj_builder *b) { return b ? b->vbits : 0; }

/* ---- registers ------------------------------------------------------ */

fj_reg fj_arg(fj_builder *b, int i) {
    fj_reg r = {0};
    if (!b) return r;
    if (i < 0 || i >= 6) { kb_fail(b, "fj_arg(%d): kernels take 0..6 arguments", i); return r; }
    uint8_t p = arg_regs[i];
    if (!b->tag[RC_GPR][p] || b->tag[RC_GPR][p] != b->arg_tag[i]) {
        kb_fail(b, "fj_arg(%d): the kernel has no such argument, or its register was released", i);
        return r;
    }
    r.id = ((uint32_t)RC_GPR << 30) | ((uint32_t)p << 25) | b->tag[RC_GPR][p];
    return r;
}

fj_reg fj_gpr(fj_builder *b) {
    fj_reg r = {0};
    if (!b) return r;
    /* Probe kernels: rbp first, so that a generator's first register (the
     * GEMM's A pointer, used by every FMA of its loop) really is rbp. */
    if (kb_probe_nofp(b) && !b->tag[RC_GPR][X64_RBP]) {
        r.id = new_handle(b, RC_GPR, X64_RBP);
        return r;
    }
    for (int i = 0; i < 14; i++)
        if (!b->tag[RC_GPR][gpr_order[i]]) { r.id = new_handle(b, RC_GPR, gpr_order[i]); return r; }
    kb_fail(b, "out of general-purpose registers (14 allocatable: rbp and rsp are never handed out)");
    return r;
}

fj_reg fj_vreg(fj_builder *b) {
    fj_reg r = {0};
    if (!b) return r;
    uint32_t pool = b->nvec == 32 ? 0xffffffffu : (1u << b->nvec) - 1;
    uint32_t free_ = ~b->live[RC_VEC] & pool;
    if (free_) { r.id = new_handle(b, RC_VEC, (unsigned)__builtin_ctz(free_)); return r; }
    kb_fail(b, "out of vector registers (%d)", b->nvec);
    return r;
}

int kb_free_vregs(const fj_builder *b) {
    if (!b) return 0;
    uint32_t pool = b->nvec == 32 ? 0xffffffffu : (1u << b->nvec) - 1;
    return __builtin_popcount(~b->live[RC_VEC] & pool);
}

int kb_free_kregs(const fj_builder *b) {
    return b && b->isa == FJ_ISA_AVX512 ? __builtin_popcount(~b->live[RC_K] & 0xfeu) : 0;
}

fj_reg fj_kreg(fj_builder *b) {
    fj_reg r = {0};
    if (!b) return r;
    if (b->isa != FJ_ISA_AVX512) { kb_fail(b, "mask registers need the AVX-512 ISA"); return r; }
    uint32_t free_ = ~b->live[RC_K] & 0xfeu; /* k0 cannot be a write mask: not in the pool */
    if (free_) { r.id = new_handle(b, RC_K, (unsigned)__builtin_ctz(free_)); return r; }
    kb_fail(b, "out of mask registers (k1-k7)");
    return r;
}

/* Why a handle is not a live register of class cls (the error is set). */
static __attribute__((noinline, cold)) int phys_fail(fj_builder *b, fj_reg r, int cls,
                                                     const char *what) {
    unsigned c = H_CLASS(r.id);
    if (r.id == 0) kb_fail(b, "%s: no register given", what);
    else if (c != (unsigned)cls) kb_fail(b, "%s: wrong register class (handle 0x%08x)", what, r.id);
    else
        kb_fail(b, "%s: register handle 0x%08x is not live in this builder (released, or from "
                "another builder)", what, r.id);
    return -1;
}

/* The same, with the error set when it is not one.
 * Inline: every register operand of every instruction comes through here. */
static inline int phys_of(fj_builder *b, fj_reg r, int cls, const char *what) {
    int p = live_phys(b, r, cls);
    return __builtin_expect(p >= 0, 1) ? p : phys_fail(b, r, cls, what);
}

void fj_release(fj_builder *b, fj_reg r) {
    if (!b || b->err) return;
    int cls = (int)H_CLASS(r.id);
    if (cls < RC_GPR || phys_of(b, r, cls, "fj_release") < 0) return;
    b->tag[cls][H_PHYS(r.id)] = 0;
    b->live[cls] &= ~(1u << H_PHYS(r.id));
}

/* ---- frame and constants -------------------------------------------- */

/* A memory operand on one of the builder's special bases (the frame, the
 * constant pool), resolved when the kernel is assembled. */
static fj_opnd base_mem(uint16_t bits, uint32_t id, int64_t val) {
    fj_opnd o = {0};
    o.kind = FJ_OPND_MEM;
    o.bits = bits;
    o.scale = 1;
    o.reg.id = id;
    o.val = val;
    return o;
}

fj_opnd fj_stack_slot(fj_builder *b, uint32_t bytes, uint32_t align, uint16_t bits) {
    fj_opnd o = {0};
    if (!b || b->err) return o;
    if (bytes == 0 || bytes > (1u << 20) || align == 0 || (align & (align - 1)) || align > 16) {
        kb_fail(b, "fj_stack_slot(%u bytes, align %u): size must be 1..1 MiB, align a power of two "
             "<= 16", bytes, align);
        return o;
    }
    if (kb_probe_nofp(b)) {
        /* Probe kernels: rsp-relative, from rsp up (rsp does not move in the body and is
         * 16-byte aligned there); the save area goes above the slots. */
        uint32_t at = (b->slot_bytes + align - 1) & ~(align - 1);
        if (at + bytes > 16384) { /* the CFA offset is a 16-bit record field */
            kb_fail(b, "fj_stack_slot: over 16 KiB of slots without a frame pointer");
            return o;
        }
        b->slot_bytes = at + bytes;
        return base_mem(bits, H_FRAME, at);
    }
    uint32_t top = SAVE_AREA + b->slot_bytes + bytes;
    top = (top + align - 1) & ~(align - 1);
    b->slot_bytes = top - SAVE_AREA;
    return base_mem(bits, H_FRAME, -(int64_t)top);
}

static uint32_t add_const(fj_builder *b, const void *data, uint32_t bytes, uint32_t align) {
    uint32_t off = (b->const_len + align - 1) & ~(align - 1);
    size_t cap = b->const_cap;
    if (!kb_grow(b, (void **)&b->consts, &cap, (size_t)off + bytes, 1)) return 0;
    b->const_cap = (uint32_t)cap;
    memset(b->consts + b->const_len, 0, off - b->const_len);
    memcpy(b->consts + off, data, bytes);
    b->const_len = off + bytes;
    return off;
}

fj_opnd fj_const_data(fj_builder *b, const void *data, uint32_t bytes, uint32_t align,
                      uint16_t bits) {
    fj_opnd o = {0};
    if (!b || b->err) return o;
    if (!data || bytes == 0 || bytes > (1u << 20) || align == 0 || (align & (align - 1)) ||
        align > 64) {
        kb_fail(b, "fj_const_data: need data, 1..1 MiB, align a power of two <= 64");
        return o;
    }
    return base_mem(bits, H_CONST, add_const(b, data, bytes, align));
}

fj_opnd fj_const_f32(fj_builder *b, float v) { return fj_const_data(b, &v, 4, 4, 32); }

/* ---- emission ------------------------------------------------------- */

static const char *isa_need(uint32_t missing) {
    if (missing & (X64_F_AVX512F | X64_F_AVX512VL | X64_F_AVX512BW | X64_F_AVX512DQ))
        return "AVX-512";
    if (missing & X64_F_FMA) return "FMA";
    if (missing & X64_F_BMI2) return "BMI2";
    if (missing & X64_F_AVX512VNNI) return "AVX512_VNNI";
    if (missing & X64_F_AVX512BF16) return "AVX512_BF16";
    if (missing & X64_F_AVXVNNI) return "AVX-VNNI";
    return "AVX2";
}

/* Encodes at the end of the body. Returns the instruction's length (0 on
 * error, which is then sticky). */
static int put(fj_builder *b, x64_op op, const x64_opnd *o, int n, x64_enc_info *info) {
    if (b->err) return 0;
    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return 0;
    x64_enc_info tmp;
    if (!info) info = &tmp;
    int r = x64_encode(op, o, n, b->code + b->len, info);
    if (r <= 0) {
        kb_fail(b, "%s: %s", x64_op_name(op), x64_err_str(r));
        return 0;
    }
    if (info->features & ~b->features) {
        kb_fail(b, "%s: this form needs %s, which the target (%s) does not have", x64_op_name(op),
             isa_need(info->features & ~b->features),
             b->isa == FJ_ISA_AVX512 ? "avx512" : "avx2");
        return 0;
    }
    b->len += (size_t)r;
    return r;
}

/* Translates a public operand. A constant-pool operand sets *const_off to
 * its pool offset (its RIP disp32 gets a fixup). Returns 0 on error. */
static int xlate(fj_builder *b, const fj_opnd *in, x64_opnd *out, int64_t *const_off) {
    memset(out, 0, sizeof *out);
    out->base = out->index = X64_NOREG;
    switch (in->kind) {
    case FJ_OPND_REG: {
        int cls = (int)H_CLASS(in->reg.id);
        if (in->bcst) {
            kb_fail(b, "a broadcast ({1toN}) takes a memory operand, not a register");
            return 0;
        }
        if (cls == RC_GPR) {
            if (in->bits != 8 && in->bits != 16 && in->bits != 32 && in->bits != 64) {
                kb_fail(b, "general-purpose register width %u (must be 8, 16, 32 or 64)", in->bits);
                return 0;
            }
            out->kind = X64_K_GPR;
        } else if (cls == RC_VEC) {
            if (in->bits != 128 && in->bits != 256 && in->bits != 512) {
                kb_fail(b, "vector register width %u (must be 128, 256 or 512)", in->bits);
                return 0;
            }
            if (in->bits > (unsigned)b->vbits) {
                kb_fail(b, "zmm registers need the AVX-512 ISA (target is avx2)");
                return 0;
            }
            out->kind = X64_K_VEC;
        } else if (cls == RC_K) {
            out->kind = X64_K_KREG;
        } else {
            kb_fail(b, "operand names no register (handle 0x%08x)", in->reg.id);
            return 0;
        }
        int p = phys_of(b, in->reg, cls, "operand");
        if (p < 0) return 0;
        out->reg = (uint8_t)p;
        out->bits = cls == RC_K ? 16 : in->bits;
        break;
    }
    case FJ_OPND_MEM: {
        out->kind = X64_K_MEM;
        out->bits = in->bits;
        out->bcst = in->bcst;
        if (in->val < INT32_MIN || in->val > INT32_MAX) {
            kb_fail(b, "memory displacement %lld does not fit in 32 bits", (long long)in->val);
            return 0;
        }
        out->disp = (int32_t)in->val;
        out->scale = in->scale ? in->scale : 1;
        if (in->reg.id == H_FRAME) {
            /* Reading rbp as a base is fine; writing it never is. */
            out->base = kb_probe_nofp(b) ? X64_RSP : X64_RBP;
        } else if (in->reg.id == H_CONST) {
            out->base = X64_RIP;
            out->disp = 0;
            *const_off = in->val;
        } else if (in->reg.id) {
            int p = phys_of(b, in->reg, RC_GPR, "memory base");
            if (p < 0) return 0;
            out->base = (uint8_t)p;
        }
        if (in->index.id) {
            if (in->reg.id == H_CONST) { kb_fail(b, "a constant cannot take an index register"); return 0; }
            int p = phys_of(b, in->index, RC_GPR, "memory index");
            if (p < 0) return 0;
            out->index = (uint8_t)p;
        }
        if (out->scale != 1 && out->scale != 2 && out->scale != 4 && out->scale != 8) {
            kb_fail(b, "memory scale %u (must be 1, 2, 4 or 8)", out->scale);
            return 0;
        }
        break;
    }
    case FJ_OPND_IMM:
        out->kind = X64_K_IMM;
        out->imm = in->val;
        break;
    default:
        kb_fail(b, "operand kind %u is not valid here", in->kind);
        return 0;
    }
    if (in->mask.id) {
        int p = phys_of(b, in->mask, RC_K, "write mask");
        if (p < 0) return 0;
        out->mask = (uint8_t)p;
        out->zero = in->zero;
    }
    return 1;
}

/* The template and direct paths (off: every instruction through the
 * encoder's search, for tests). */
static atomic_int fast_paths = 1;

void kb_test_fast_paths(int on) { atomic_store(&fast_paths, on != 0); }

int kb_fast_paths(void) { return atomic_load_explicit(&fast_paths, memory_order_relaxed); }

static atomic_int replays = 1;

void kb_test_replays(int on) { atomic_store(&replays, on != 0); }

int kb_replays(void) { return atomic_load_explicit(&replays, memory_order_relaxed); }

/* ---- labels and jumps ----------------------------------------------- */

fj_label fj_label_new(fj_builder *b) {
    fj_label l = {0};
    if (!b || b->err) return l;
    size_t cap = b->labels_cap;
    if (!kb_grow(b, (void **)&b->labels, &cap, b->nlabels + 1, sizeof(int32_t))) return l;
    b->labels_cap = (uint32_t)cap;
    if (b->nlabels >= (1u << 20) - 1) { kb_fail(b, "more than 2^20 labels"); return l; }
    b->labels[b->nlabels++] = -1;
    l.id = b->label_salt << 20 | b->nlabels; /* index 1-based: 0 is "no label" */
    return l;
}

static int label_index(fj_builder *b, uint32_t id) {
    uint32_t i = id & 0xfffffu;
    if (id >> 20 != b->label_salt || i == 0 || i > b->nlabels) {
        kb_fail(b, "label 0x%x does not belong to this builder", id);
        return -1;
    }
    return (int)i - 1;
}

void fj_label_bind(fj_builder *b, fj_label l) {
    if (!b || b->err) return;
    int i = label_index(b, l.id);
    if (i < 0) return;
    if (b->labels[i] >= 0) { kb_fail(b, "label %d bound twice", i + 1); return; }
    if (b->trace) b->trace->bad = 1;   /* a replay would not bind it */
    b->labels[i] = (int32_t)b->len;
}

/* jmp/jcc: rel8 when the target, bound at body offset at (or -1), is
 * near and backward, else rel32 with a fixup to target (a label index, or
 * EPILOGUE for fj_return) resolved when the label is bound or at
 * assembly. Written straight (x64_encode_jump) unless a test turned the
 * direct paths off. Returns 0 on error (then sticky). */
static int jump_to(fj_builder *b, x64_op op, int32_t at, uint32_t target) {
    b->last_jump = (int32_t)b->len;
    if (b->err || !kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return 0;
    const size_t start = b->len;
    const int64_t d8 = (int64_t)at - (int64_t)(start + 2);
    const int near = at >= 0 && d8 >= -128;
    int n = kb_fast_paths() ? x64_encode_jump(op, !near, near ? (int32_t)d8 : 0, b->code + start)
                            : 0;
    int rel_at = n - 4;
    if (n) {
        b->len += (size_t)n;
    } else {
        x64_opnd rel = {0};
        rel.kind = X64_K_REL;
        rel.bits = near ? 8 : 32;
        rel.imm = near ? d8 : 0;
        x64_enc_info info;
        if (!put(b, op, &rel, 1, &info)) return 0;
        rel_at = info.rel_pos;
    }
    if (!near) kb_add_fixup(b, (uint32_t)(start + (size_t)rel_at), (uint32_t)b->len, target, 0);
    if (at >= 0) { /* backward: a loop */
        if (!b->loop_hi || (uint32_t)at < b->loop_lo) b->loop_lo = (uint32_t)at;
        b->loop_hi = (uint32_t)b->len;
    }
    return 1;
}

/* ---- instructions --------------------------------------------------- */

/* One fast-path instruction d into the code (room for it made already):
 * 1 when emitted, 0 when the encoder has no such form or the target lacks
 * a feature it needs. Inline with d's kind just set and no call in
 * between, so that x64_encode_direct's dispatch folds away at each use. */
static inline __attribute__((always_inline)) int put_direct(fj_builder *b, fj_op op,
                                                            const x64_direct *d,
                                                            const fj_opnd *ops) {
    uint32_t feat;
    const int n = x64_encode_direct((x64_op)op, d, b->code + b->len, &feat);
    if (n <= 0 || (feat & ~b->features)) return 0;
    b->len += (size_t)n;
    if (d->kind == X64_D_ZMM_MEM && d->m.base == X64_RIP)   /* the pool offset; the disp32
                                                              is resolved at assembly */
        kb_add_fixup(b, (uint32_t)(b->len - 4 - (size_t)d->has_imm), (uint32_t)b->len,
                     (uint32_t)ops[d->mem].val, 1);
    return 1;
}

/* fj_emitv's fast paths, all entering the encoder through
 * x64_encode_direct: the operands sorted into the encoder's direct kinds
 * (x64_templ.h's x64_direct), tried in this order, each step falling
 * through to the next when its operands do not fit or the encoder has no
 * form for them:
 *   register-only vector instructions (most of a compute loop);
 *   ALU ops, moves and tests of 32/64-bit registers with a register or an
 *     immediate, inc/dec/not/neg: pointer and counter updates;
 *   zmm with mask-register operands or a write mask (compares into masks,
 *     masked arithmetic), or with one memory operand on a GPR base
 *     (+ index*scale) or the constant pool;
 *   bzhi/shlx/shrx of three registers (BMI2), kmovw between mask and
 *     general registers or memory (AVX-512): tail masks, GEMM's masks;
 *   ALU ops and mov of 32/64-bit memory with an immediate: flags and
 *     counters in the argument block or frame;
 *   prefetches, and loads, stores and ALU ops of a 32/64-bit register with
 *     memory: pointer loads, spills.
 * Returns 1 when it emitted the instruction, 0 to leave it to the general
 * path, which also reports any error (a stale handle, a width the target
 * lacks, a bad scale, a broadcast on a register, no such form): anything
 * these paths are not sure of goes there. tests/test_emit_paths.c proves
 * both paths give the same bytes. */
static inline __attribute__((always_inline)) int emit_direct(fj_builder *b, fj_op op,
                                                             const fj_opnd *ops, int nops) {
    const int has_imm = ops[nops - 1].kind == FJ_OPND_IMM, nv = nops - has_imm;
    x64_direct d;
    int bits, store;
    /* Room first (out of memory: the error is sticky, nothing to emit). */
    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) return 1;
    if (nops >= 2) {
        if (kb_vregs_of(b, ops, nv, &d.regs)) {
            d.kind = X64_D_VREGS;
            d.bits = ops[0].bits;
            d.nops = (uint8_t)nv;
            d.has_imm = (uint8_t)has_imm;
            d.imm = has_imm ? ops[nops - 1].val : 0;
            if (put_direct(b, op, &d, ops)) return 1;
        }
        if (kb_gpr_operands(b, ops, nops, &d.r0, &d.r1)) {
            d.kind = X64_D_GPR;
            d.bits = ops[0].bits;
            d.imm = ops[1].val;
            if (put_direct(b, op, &d, ops)) return 1;
        }
        kb_zops z;
        if (kb_zmm_operands(b, ops, nops, &z) && (z.mem < 0 ? z.kops || z.k : !z.kops)) {
            d.nops = (uint8_t)nops;
            d.has_imm = (uint8_t)z.has_imm;
            d.imm = z.has_imm ? ops[nops - 1].val : 0;
            d.regs = z.regs;
            d.kops = (uint8_t)z.kops;
            d.mask = (uint8_t)z.k;
            d.zero = (uint8_t)z.zero;
            if (z.mem < 0) {
                d.kind = X64_D_ZMM_K;
                if (put_direct(b, op, &d, ops)) return 1;
            } else {
                d.kind = X64_D_ZMM_MEM;
                d.mem = (uint8_t)z.mem;
                d.m = z.m;
                if (put_direct(b, op, &d, ops)) return 1;
            }
        }
        if (op == FJ_KMOVW && nops == 2 && (b->features & X64_F_AVX512F)) {
            store = ops[0].kind == FJ_OPND_MEM;
            if (store || ops[1].kind == FJ_OPND_MEM) {   /* kmovw k, m16 / m16, k */
                const fj_opnd *mo = &ops[!store], *ko = &ops[store];
                if ((d.r0 = plain_reg(b, ko, RC_K, ko->bits)) >= 0 && mo->bits == 16 &&
                    kb_legacy_mem(b, mo, &d.m)) {
                    d.kind = X64_D_KMOV_MEM;
                    d.store = (uint8_t)store;
                    if (put_direct(b, op, &d, ops)) return 1;
                }
            } else {
                /* A mask register of any width (the encoder takes it as
                 * 16), or a 32-bit GPR. */
                const int kd = H_CLASS(ops[0].reg.id) == RC_K, ks = H_CLASS(ops[1].reg.id) == RC_K;
                d.r0 = plain_reg(b, &ops[0], kd ? RC_K : RC_GPR, kd ? ops[0].bits : 32u);
                d.r1 = plain_reg(b, &ops[1], ks ? RC_K : RC_GPR, ks ? ops[1].bits : 32u);
                if (d.r0 >= 0 && d.r1 >= 0) {
                    d.kind = X64_D_KMOV;
                    d.kops = (uint8_t)(kd | ks << 1);
                    if (put_direct(b, op, &d, ops)) return 1;
                }
            }
        } else if (nops == 3 && (op == FJ_BZHI || op == FJ_SHLX || op == FJ_SHRX) &&
                   (b->features & X64_F_BMI2) && (ops[0].bits == 32 || ops[0].bits == 64)) {
            bits = ops[0].bits;
            if ((d.r0 = plain_reg(b, &ops[0], RC_GPR, (unsigned)bits)) >= 0 &&
                (d.r1 = plain_reg(b, &ops[1], RC_GPR, (unsigned)bits)) >= 0 &&
                (d.r2 = plain_reg(b, &ops[2], RC_GPR, (unsigned)bits)) >= 0) {
                d.kind = X64_D_GPR3;
                d.bits = (uint16_t)bits;
                if (put_direct(b, op, &d, ops)) return 1;
            }
        }
        if (nops == 2 && ops[0].kind == FJ_OPND_MEM && ops[1].kind == FJ_OPND_IMM &&
            !ops[1].mask.id && kb_legacy_mem(b, &ops[0], &d.m)) {
            d.kind = X64_D_MEM_IMM;
            d.bits = ops[0].bits;
            d.imm = ops[1].val;
            if (put_direct(b, op, &d, ops)) return 1;
        }
    }
    if (kb_gpr_mem_operands(b, ops, nops, &bits, &d.r0, &store, &d.m)) {
        d.kind = X64_D_GPR_MEM;
        d.bits = (uint16_t)bits;
        d.store = (uint8_t)store;
        if (put_direct(b, op, &d, ops)) return 1;
    }
    if (nops == 1 && kb_gpr_operands(b, ops, nops, &d.r0, &d.r1)) {
        d.kind = X64_D_GPR;
        d.bits = ops[0].bits;
        d.imm = 0;
        if (put_direct(b, op, &d, ops)) return 1;
    }
    return 0;
}

void fj_emitv(fj_builder *b, fj_op op, const fj_opnd *ops, int nops) {
    if (!b || b->err) return;
    if (op <= FJ_OP_NONE || op >= FJ_OP_COUNT) { kb_fail(b, "unknown instruction %d", (int)op); return; }
    if (nops < 0 || nops > 4 || (nops > 0 && !ops)) {
        kb_fail(b, "%s: %d operands (0..4, non-NULL)", x64_op_name((x64_op)op), nops);
        return;
    }
    if (__builtin_expect(b->trace != NULL, 0)) { kb_trace_add(b, op, ops, nops); return; }
    /* Before the checks below: no mnemonic they refuse has a form these
     * paths take. */
    if (nops >= 1 && atomic_load_explicit(&fast_paths, memory_order_relaxed) &&
        emit_direct(b, op, ops, nops))
        return;
    switch (op) {
    case FJ_PUSH: case FJ_POP: case FJ_RET: case FJ_LEAVE:
        kb_fail(b, "%s is not available to kernels: it would move rsp behind the CFI's back "
             "(use fj_return, fj_stack_slot)", x64_op_name((x64_op)op));
        return;
    case FJ_CALL:
        kb_fail(b, "call is not available directly: use fj_call, which aligns the stack and "
             "preserves live registers");
        return;
    default:
        break;
    }
    if (op == FJ_JMP || (op >= FJ_JO && op <= FJ_JG)) {
        if (nops != 1 || ops[0].kind != FJ_OPND_LABEL) {
            kb_fail(b, "%s takes one label operand", x64_op_name((x64_op)op));
            return;
        }
        int li = label_index(b, (uint32_t)ops[0].val);
        if (li >= 0) jump_to(b, (x64_op)op, b->labels[li], (uint32_t)li);
        return;
    }
    /* Not zero-initialized: xlate fills each operand used, and the
     * compiler's block clear of all four (rep stos) cost a third of this
     * function. */
    x64_opnd x[4];
    x[0].kind = X64_K_NONE;   /* nops may be 0 */
    int64_t const_off = -1;
    for (int i = 0; i < nops; i++)
        if (!xlate(b, &ops[i], &x[i], &const_off)) return;
    x64_enc_info info;
    int n = put(b, (x64_op)op, x, nops, &info);
    if (n && const_off >= 0) {
        if (info.disp_pos < 0) { kb_fail(b, "internal: constant operand without a disp32"); return; }
        kb_add_fixup(b, (uint32_t)(b->len - (size_t)n + (size_t)info.disp_pos), (uint32_t)b->len,
                  (uint32_t)const_off, 1);
    }
}

/* A run's form (kb_vmov_run, kb_bcst_consts): the table's, or made by
 * sending the run's first instruction (o0, o1) through fj_emitv, which
 * *done then counts. */
static inline __attribute__((always_inline)) uint64_t run_form(fj_builder *b, uint64_t key,
                                                               fj_op op, fj_opnd o0, fj_opnd o1,
                                                               int *done) {
    uint64_t f = x64_vm_lookup(key);
    if (!f) {
        fj_emit(b, op, o0, o1);
        f = x64_vm_lookup(key);
        *done = 1;
    }
    return f;
}

void kb_vmov_run(fj_builder *b, fj_op op, int store, const fj_reg *v, int n, fj_reg base,
                 int32_t disp, int32_t step) {
    if (!b || b->err || n <= 0) return;
    if (!v) { kb_fail(b, "internal: kb_vmov_run without registers"); return; }
    const uint16_t vbits = (uint16_t)b->vbits;
    const int64_t last = (int64_t)disp + (int64_t)step * (n - 1);
    if (last < INT32_MIN || last > INT32_MAX) {
        kb_fail(b, "internal: kb_vmov_run's displacement %lld is out of int32", (long long)last);
        return;
    }
    const int pb = live_phys(b, base, RC_GPR);
    int i = 0;
    if (vbits == 512 && kb_fast_paths() && !b->trace && pb >= 0 && pb < 16 &&
        (op == FJ_VMOVUPS || op == FJ_VMOVNTPS) && (store || op == FJ_VMOVUPS)) {
        const fj_opnd mo = fj_mem(0, base, disp);
        x64_vm_mem m = kb_flat_mem(&mo, pb, X64_NOREG, 0, disp);
        const fj_opnd vo = fj_reg_opnd_(v[0], vbits);
        const uint64_t f = run_form(b, x64_vm_key((x64_op)op, 2, !store, &m, 0, 0, 0), op,
                                    store ? mo : vo, store ? vo : mo, &i);
        if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + (size_t)n * X64_MAX_LEN, 1)) return;
        for (; i < n && f && x64_vm_present(f) && !b->err; i++) {
            const int p = live_phys(b, v[i], RC_VEC);
            if (p < 0) break;
            m.disp = disp + step * i;
            uint32_t feat = 0;
            const int len = x64_vm_fill(f, (uint32_t)p << (store ? 8 : 0), &m, 0, 0, 0, 0,
                                        b->code + b->len, &feat);
            if (len <= 0 || (feat & ~b->features)) break;
            b->len += (size_t)len;
        }
    }
    /* The rest (AVX2, a first use that failed, a bad handle: the general
     * path explains) one by one. */
    for (; i < n && !b->err; i++) {
        const fj_opnd mo = fj_mem(0, base, disp + step * i), vo = fj_reg_opnd_(v[i], vbits);
        fj_emit(b, op, store ? mo : vo, store ? vo : mo);
    }
}

void kb_bcst_consts(fj_builder *b, const fj_reg *dst, const uint32_t *vals, int n) {
    if (!b || b->err || n <= 0) return;
    if (!dst || !vals) { kb_fail(b, "internal: kb_bcst_consts without registers or values"); return; }
    /* One pool entry for all: where n 4-byte constants would go one by one. */
    const uint32_t off = add_const(b, vals, 4u * (uint32_t)n, 4);
    const uint16_t vbits = (uint16_t)b->vbits;
    int i = 0;
    if (vbits == 512 && kb_fast_paths() && !b->trace) {
        const x64_vm_mem m = {X64_RIP, X64_NOREG, 1, 0, 32, 0};
        const uint64_t f = run_form(b, x64_vm_key(X64_VBROADCASTSS, 2, 1, &m, 0, 0, 0),
                                    FJ_VBROADCASTSS, fj_reg_opnd_(dst[0], vbits),
                                    base_mem(32, H_CONST, off), &i);
        /* Room for all of their code at once. */
        if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + (size_t)n * X64_MAX_LEN, 1)) return;
        for (; i < n && f && x64_vm_present(f) && !b->err; i++) {
            const int p = live_phys(b, dst[i], RC_VEC);
            if (p < 0) break;
            uint32_t feat = 0;
            const int len = x64_vm_fill(f, (uint32_t)p, &m, 0, 0, 0, 0, b->code + b->len, &feat);
            if (len <= 0 || (feat & ~b->features)) break;
            b->len += (size_t)len;
            kb_add_fixup(b, (uint32_t)(b->len - 4), (uint32_t)b->len, off + 4u * (uint32_t)i, 1);
        }
    }
    /* The rest (AVX2, a first use that failed, a bad handle: the general
     * path explains) one by one. */
    for (; i < n && !b->err; i++)
        fj_emit(b, FJ_VBROADCASTSS, fj_reg_opnd_(dst[i], vbits),
                base_mem(32, H_CONST, off + 4u * (uint32_t)i));
}

void kb_test_raw(fj_builder *b, const void *bytes, size_t n) {
    if (!b || b->err) return;
    if (!kb_grow(b, (void **)&b->code, &b->cap, b->len + n, 1)) return;
    memcpy(b->code + b->len, bytes, n);
    b->len += n;
}

/* ---- calls and returns ---------------------------------------------- */

static void mov_rr(fj_builder *b, int dst, int src) {
    if (kb_fast_paths() && !b->err && kb_grow(b, (void **)&b->code, &b->cap, b->len + X64_MAX_LEN, 1)) {
        b->len += (size_t)x64_encode_gpr(X64_MOV, 64, dst, src, 0, b->code + b->len);
        return;
    }
    x64_opnd o[2] = {gpr_op(dst, 64), gpr_op(src, 64)};
    put(b, X64_MOV, o, 2, NULL);
}

void fj_call(fj_builder *b, const void *fn, const fj_opnd *args, int nargs, fj_reg result) {
    if (!b || b->err) return;
    if (!fn) { kb_fail(b, "fj_call: NULL function"); return; }
    if (kb_probe_nofp(b)) {
        kb_fail(b, "fj_call: not available in frame-pointer tax probe kernels");
        return;
    }
    if (nargs < 0 || nargs > 6 || (nargs && !args)) {
        kb_fail(b, "fj_call: %d arguments (0..6 integer/pointer arguments)", nargs);
        return;
    }
    int res = -1;
    if (result.id && (res = phys_of(b, result, RC_GPR, "fj_call result")) < 0) return;
    /* Validate arguments before emitting anything. */
    int src[6];
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind == FJ_OPND_REG) {
            if ((src[i] = phys_of(b, args[i].reg, RC_GPR, "fj_call argument")) < 0) return;
        } else if (args[i].kind == FJ_OPND_IMM) {
            src[i] = -1;
        } else {
            kb_fail(b, "fj_call argument %d: pass a general-purpose register or an immediate", i);
            return;
        }
    }
    /* Save live caller-saved registers in the call area at the bottom of
     * the frame ([rsp + off]: rsp does not move in the body, so the stack
     * stays 16-byte aligned at the call as the ABI requires). */
    int32_t gslot[16], vslot[32], kslot[8];
    uint32_t off = 0;
    int vbytes = b->vbits / 8;
    for (int r = 0; r < 16; r++) {
        gslot[r] = -1;
        if ((CALLER_SAVED_MASK >> r & 1) && b->tag[RC_GPR][r]) {
            gslot[r] = (int32_t)off;
            off += 8;
            x64_opnd o[2] = {mem_op(X64_RSP, gslot[r], 64), gpr_op(r, 64)};
            put(b, X64_MOV, o, 2, NULL);
        }
    }
    for (int r = 1; r < 8; r++) {
        kslot[r] = -1;
        if (b->tag[RC_K][r]) {
            kslot[r] = (int32_t)off;
            off += 8;
            x64_opnd o[2] = {mem_op(X64_RSP, kslot[r], 32), k_op(r)};
            put(b, X64_KMOVD, o, 2, NULL);
        }
    }
    off = (off + 63) & ~63u;
    for (int r = 0; r < b->nvec; r++) {
        vslot[r] = -1;
        if (b->tag[RC_VEC][r]) {
            vslot[r] = (int32_t)off;
            off += (uint32_t)vbytes;
            x64_opnd o[2] = {mem_op(X64_RSP, vslot[r], b->vbits), vec_op(r, b->vbits)};
            put(b, X64_VMOVUPS, o, 2, NULL);
        }
    }
    if (off > b->call_area) b->call_area = off;
    /* Dirty upper vector state makes SSE code in the callee slow. */
    if (b->used_vec) put(b, X64_VZEROUPPER, NULL, 0, NULL);
    /* Arguments: caller-saved sources are read back from their save slots,
     * so writing one argument register never clobbers another's source. */
    for (int i = 0; i < nargs; i++) {
        int dst = arg_regs[i];
        if (src[i] < 0) {
            x64_opnd o[2] = {gpr_op(dst, 64), imm_op(args[i].val)};
            put(b, X64_MOV, o, 2, NULL);
        } else if (gslot[src[i]] >= 0) {
            x64_opnd o[2] = {gpr_op(dst, 64), mem_op(X64_RSP, gslot[src[i]], 64)};
            put(b, X64_MOV, o, 2, NULL);
        } else if (src[i] != dst) {
            mov_rr(b, dst, src[i]);
        }
    }
    x64_opnd o[2] = {gpr_op(X64_RAX, 64), imm_op((int64_t)(uintptr_t)fn)};
    put(b, X64_MOV, o, 2, NULL);
    x64_opnd t = gpr_op(X64_RAX, 64);
    put(b, X64_CALL, &t, 1, NULL);
    if (res >= 0 && res != X64_RAX) mov_rr(b, res, X64_RAX);
    for (int r = 0; r < b->nvec; r++)
        if (vslot[r] >= 0) {
            x64_opnd v[2] = {vec_op(r, b->vbits), mem_op(X64_RSP, vslot[r], b->vbits)};
            put(b, X64_VMOVUPS, v, 2, NULL);
        }
    for (int r = 1; r < 8; r++)
        if (kslot[r] >= 0) {
            x64_opnd v[2] = {k_op(r), mem_op(X64_RSP, kslot[r], 32)};
            put(b, X64_KMOVD, v, 2, NULL);
        }
    for (int r = 0; r < 16; r++)
        if (gslot[r] >= 0 && r != res) {
            x64_opnd v[2] = {gpr_op(r, 64), mem_op(X64_RSP, gslot[r], 64)};
            put(b, X64_MOV, v, 2, NULL);
        }
}


void fj_return(fj_builder *b, fj_opnd value) {
    if (!b || b->err) return;
    if (value.kind == FJ_OPND_REG) {
        int p = phys_of(b, value.reg, RC_GPR, "fj_return value");
        if (p < 0) return;
        if (p != X64_RAX) mov_rr(b, X64_RAX, p);
    } else if (value.kind == FJ_OPND_IMM) {
        x64_opnd o[2] = {gpr_op(X64_RAX, 64), imm_op(value.val)};
        put(b, X64_MOV, o, 2, NULL);
    } else if (value.kind != FJ_OPND_NONE) {
        kb_fail(b, "fj_return: the value must be a general-purpose register or an immediate");
        return;
    }
    if (jump_to(b, X64_JMP, -1, EPILOGUE)) b->last_ret_jmp = (int32_t)b->len;
}
