/* eltwise_gen.c: the element-wise emitter (state, constants, the simple ops)
 * and the standalone fj_eltwise_f32 kernels, for AVX-512 and AVX2.
 *
 * One implementation per op: kg_elt_apply is what both a fused GEMM
 * epilogue and the standalone kernels run. The transcendental ops live in
 * eltwise_math.c.
 *
 * Standalone kernel: U vectors per iteration (one taken branch each), then
 * one vector per iteration under a mask of min(n, lanes) lanes (AVX-512
 * opmask from bzhi; AVX2 vmaskmovps with a mask from a sliding window over
 * a constant table), which covers the remaining whole vectors and the tail
 * with one copy of the op.
 * Masked loads do not fault on masked-off lanes, so the tail never reads
 * past src + n; masked-off lanes hold 0, which every op digests quietly
 * (exceptions are masked). */
#include "kernels/builder/builder_int.h"
#include "kernels/gen/eltwise_int.h"

#include <float.h>
#include <stdatomic.h>

/* ---- names ------------------------------------------------------------- */

static const char *const names[KG_ELT__NELT] = {
    "relu", "leaky_relu", "clip", "linear", "abs", "square", "sqrt", "exp", "log", "tanh",
    "sigmoid", "gelu_tanh", "gelu_erf", "swish", "hardswish",
};

const char *kg_elt_name(kg_elt v) {
    int kind;
    v = kg_elt_base(v, &kind);
    return (unsigned)v < KG_ELT__NELT ? names[v] : "?";
}

fj_eltwise_op kg_elt_op(kg_elt v) {
    return v == KG_ELT_RELU ? FJ_ELT_RELU : (fj_eltwise_op)(v + 1);
}

/* ---- state pool ----------------------------------------------------------
 *
 * States come from a small per-thread pool rather than the heap: prepare
 * then cannot fail for lack of memory (only for lack of registers, which
 * the builder reports), and an emitter never owns heap memory a failed
 * generator could leak. */
enum { ELT_POOL = 8 };
static _Thread_local kg_elt_state pool[ELT_POOL];
static _Thread_local uint8_t pool_used[ELT_POOL];

/* Makes the builder's error sticky for a misuse prepare cannot express
 * otherwise (the builder API has no "fail with this message"). */
static void poison(fj_builder *b) { fj_emitv(b, FJ_OP_NONE, NULL, 0); }

/* ---- constants and scratch --------------------------------------------- */

/* Every use of a constant looks it up (a math op's emitter names its
 * constants by value, lane after lane), so by hash: the first slot of
 * cidx for key, then the next ones. */
static unsigned cidx_first(uint32_t key) {
    return (key * 0x9e3779b1u) >> (32 - 6);
}
_Static_assert(2 * ELT_MAXC == 64, "cidx_first hashes to 6 bits");

static elt_const *find_const(kg_elt_state *s, uint32_t key) {
    for (unsigned h = cidx_first(key);; h = (h + 1) % (2 * ELT_MAXC)) {
        unsigned i = s->cidx[h];
        if (!i) return NULL;
        if (s->c[i - 1].key == key) return &s->c[i - 1];
    }
}

static void need(kg_elt_state *s, uint32_t key, int must_reg) {
    if (key == 0 && !s->avx512) must_reg = 1; /* vxorps: cheaper than a load */
    if (key == ELT_KEY_ALPHA || key == ELT_KEY_BETA) must_reg = 1;
    elt_const *c = find_const(s, key);
    if (c) {
        c->must_reg |= (uint8_t)must_reg;
        return;
    }
    if (s->nc >= ELT_MAXC) { s->nc = ELT_MAXC + 1; return; } /* caught by prepare */
    unsigned h = cidx_first(key);
    while (s->cidx[h]) h = (h + 1) % (2 * ELT_MAXC);   /* at most half full */
    s->c[s->nc++] = (elt_const){key, (uint8_t)must_reg, {0}, {0}};
    s->cidx[h] = (uint8_t)s->nc;
}

fj_opnd elt_c(kg_elt_state *s, uint32_t key) {
    if (s->planning) { need(s, key, 0); return fj_none(); }
    elt_const *c = find_const(s, key);
    if (!c) { poison(s->b); return fj_none(); } /* cannot happen: planned */
    return c->r.id ? elt_v(s, c->r) : c->m;
}

fj_opnd elt_cr(kg_elt_state *s, uint32_t key) {
    if (s->planning) { need(s, key, 1); return fj_none(); }
    return elt_c(s, key);
}

fj_reg elt_t(kg_elt_state *s, int i) {
    if (s->planning && i >= s->nt) s->nt = i + 1;
    return i < ELT_MAXT ? s->t[s->lane][i] : (fj_reg){0};
}

fj_reg elt_k(kg_elt_state *s, int i) {
    if (s->planning && i >= s->nk) s->nk = i + 1;
    return i < ELT_MAXK ? s->k[s->lane][i] : (fj_reg){0};
}

void elt_emitv(kg_elt_state *s, fj_op op, const fj_opnd *ops, int n) {
    fj_emitv(s->b, op, ops, n);
    if (!s->marks) return;
    if (s->nmarks >= ELT_MAXREC) s->nmarks = ELT_MAXREC + 1; /* caught by kg_elt_apply_n */
    else s->marks[++s->nmarks] = kb_body_len(s->b);
}

void elt_load(kg_elt_state *s, fj_reg dst, uint32_t key) {
    if (s->planning) { need(s, key, 0); return; }
    fj_builder *b = s->b;
    elt_const *c = find_const(s, key);
    if (!c) { poison(b); return; }
    if (c->r.id) {
        elt_emit(s, FJ_VMOVAPS, elt_v(s, dst), elt_v(s, c->r));
    } else if (s->avx512) {
        fj_opnd m = c->m;
        m.bcst = 0;
        elt_emit(s, FJ_VBROADCASTSS, elt_v(s, dst), m);
    } else {
        elt_emit(s, FJ_VMOVUPS, elt_v(s, dst), c->m);
    }
}

fj_reg elt_creg(kg_elt_state *s, uint32_t key, fj_reg scratch) {
    if (s->planning) { need(s, key, 0); return scratch; }
    elt_const *c = find_const(s, key);
    if (c && c->r.id) return c->r;
    elt_load(s, scratch, key);
    return scratch;
}

/* Literal constants bound for registers, in the order place_const meets
 * them: one kb_bcst_consts for a run of them (a twelfth of a math kernel's
 * generation went to broadcasting its constants one fj_emit at a time). */
typedef struct bcst_run {
    fj_reg r[ELT_MAXC];
    uint32_t v[ELT_MAXC];
    int n;
} bcst_run;

static void flush_run(kg_elt_state *s, bcst_run *q) {
    if (q->n) kb_bcst_consts(s->b, q->r, q->v, q->n);
    q->n = 0;
}

static int is_param(const elt_const *c) {
    return c->key == ELT_KEY_ALPHA || c->key == ELT_KEY_BETA;
}

/* A constant bound for a register that a broadcast from the pool fills. */
static int literal_reg(const elt_const *c, int in_reg) {
    return in_reg && !is_param(c) && c->key != 0;
}

/* Puts constant c in a register (r) or in the constant pool (m). */
static void place_const(kg_elt_state *s, elt_const *c, fj_reg params, int in_reg, bcst_run *q) {
    fj_builder *b = s->b;
    int param = is_param(c);
    if (literal_reg(c, in_reg)) {
        c->r = fj_vreg(b);
        q->r[q->n] = c->r;
        q->v[q->n++] = c->key;
        return;
    }
    flush_run(s, q);   /* what follows emits, or takes pool space */
    if (in_reg || param) {
        c->r = fj_vreg(b);
        if (param)
            fj_emit(b, FJ_VBROADCASTSS, elt_v(s, c->r),
                    fj_mem(32, params, c->key == ELT_KEY_ALPHA ? 0 : 4));
        else
            fj_emit(b, FJ_VXORPS, fj_xmm(c->r), fj_xmm(c->r), fj_xmm(c->r));
        return;
    }
    if (s->avx512) {
        c->m = fj_bcst(fj_const_data(b, &c->key, 4, 4, 32));
    } else {
        uint32_t v[8];
        for (int i = 0; i < 8; i++) v[i] = c->key;
        c->m = fj_const_data(b, v, sizeof v, 32, 0);
    }
}

/* ---- the simple ops ---------------------------------------------------------- */

static int is_plain_relu(const kg_elt_state *s) {
    return s->op == FJ_ELT_RELU && (s->alpha & 0x7fffffffu) == 0;
}

/* x := op(x) for the simple ops. min/max put x second: vminps/vmaxps return
 * the second source when either is NaN, so NaN inputs stay NaN. */
static void emit_op(kg_elt_state *s, fj_reg x) {
    const fj_opnd X = elt_v(s, x);
    switch (s->op) {
    case FJ_ELT_RELU:
    case FJ_ELT_LEAKY_RELU:
        if (is_plain_relu(s)) {
            elt_emit(s, FJ_VMAXPS, X, elt_crf(s, 0.0f), X);
        } else if (s->avx512) {
            /* k = !(x > 0) (NaN included: alpha * NaN is NaN); x{k} *= alpha */
            fj_reg k = elt_k(s, 0);
            elt_emit(s, FJ_VCMPPS, fj_k(k), X, elt_cf(s, 0.0f), fj_imm(ELT_CMP_NGT_UQ));
            elt_emit(s, FJ_VMULPS, fj_masked(X, k, 0), X, elt_c(s, s->alpha));
        } else {
            fj_opnd T = elt_v(s, elt_t(s, 0)), M = elt_v(s, elt_t(s, 1));
            elt_emit(s, FJ_VMULPS, T, X, elt_c(s, s->alpha));
            elt_emit(s, FJ_VCMPPS, M, X, elt_cf(s, 0.0f), fj_imm(ELT_CMP_GT_OQ));
            elt_emit(s, FJ_VBLENDVPS, X, T, X, M);
        }
        break;
    case FJ_ELT_CLIP:
        elt_emit(s, FJ_VMAXPS, X, elt_cr(s, s->alpha), X);
        elt_emit(s, FJ_VMINPS, X, elt_cr(s, s->beta), X);
        break;
    case FJ_ELT_LINEAR:
        /* one rounding: fl(alpha * x + beta) */
        elt_emit(s, FJ_VFMADD213PS, X, elt_cr(s, s->alpha), elt_c(s, s->beta));
        break;
    case FJ_ELT_ABS:
        elt_emit(s, FJ_VANDPS, X, X, elt_c(s, 0x7fffffffu));
        break;
    case FJ_ELT_SQUARE:
        elt_emit(s, FJ_VMULPS, X, X, X);
        break;
    case FJ_ELT_SQRT:
        elt_emit(s, FJ_VSQRTPS, X, X); /* correctly rounded, as sqrtf */
        break;
    case FJ_ELT_HARDSWISH: {
        /* x * (min(max(x + 3, 0), 6) * (1/6)) (the factor first: x * 6 could
         * overflow), with x first clamped to -FLT_MAX so that -inf gives -0
         * (the limit) rather than -inf * 0. */
        fj_opnd T = elt_v(s, elt_t(s, 0));
        elt_emit(s, FJ_VMAXPS, X, elt_crf(s, -FLT_MAX), X);
        elt_emit(s, FJ_VADDPS, T, X, elt_cf(s, 3.0f));
        elt_emit(s, FJ_VMAXPS, T, elt_crf(s, 0.0f), T);
        elt_emit(s, FJ_VMINPS, T, elt_crf(s, 6.0f), T);
        elt_emit(s, FJ_VMULPS, T, T, elt_cf(s, 1.0f / 6.0f));
        elt_emit(s, FJ_VMULPS, X, X, T);
        break;
    }
    default:
        elt_math_emit(s, x);
        break;
    }
}

/* ---- prepare / apply / finish ----------------------------------------------- */

static void init_state(kg_elt_state *s, fj_builder *b, fj_isa isa, fj_eltwise_op op,
                       uint32_t alpha, uint32_t beta) {
    memset(s, 0, sizeof *s);
    s->b = b;
    s->op = op;
    s->avx512 = isa == FJ_ISA_AVX512;
    s->vbits = s->avx512 ? 512 : 256;
    s->alpha = alpha;
    s->beta = beta;
    if (op == FJ_ELT_RELU && alpha == ELT_KEY_ALPHA) s->op = FJ_ELT_LEAKY_RELU;
}

/* The dry run: fills s->c (keys, must_reg), s->nt, s->nk. */
static void plan(kg_elt_state *s) {
    fj_builder *b = s->b;
    s->b = NULL;
    s->planning = 1;
    emit_op(s, (fj_reg){0});
    s->planning = 0;
    s->b = b;
}

/* plan's result, kept per (ISA, op) for the alpha and beta it was made
 * with: a dry run of the whole emitter was a twentieth of a math kernel's
 * generation. Written once by the thread that claims it (state 0 -> 1),
 * read once state is 2. */
typedef struct plan_memo {
    _Atomic int state;
    uint32_t alpha, beta;
    int nc, nt, nk;
    uint32_t key[ELT_MAXC];
    uint8_t must[ELT_MAXC];
    uint8_t cidx[2 * ELT_MAXC];
} plan_memo;

static void plan_kept(kg_elt_state *s, fj_isa isa) {
    static plan_memo memo[3][FJ_ELT__COUNT];
    plan_memo *m = (unsigned)isa <= 2u && (unsigned)s->op < FJ_ELT__COUNT ? &memo[isa][s->op] : NULL;
    if (m && atomic_load_explicit(&m->state, memory_order_acquire) == 2 && m->alpha == s->alpha &&
        m->beta == s->beta) {
        s->nc = m->nc;
        s->nt = m->nt;
        s->nk = m->nk;
        for (int i = 0; i < m->nc; i++) s->c[i] = (elt_const){m->key[i], m->must[i], {0}, {0}};
        memcpy(s->cidx, m->cidx, sizeof s->cidx);
        return;
    }
    plan(s);
    int idle = 0;
    if (!m || s->nc > ELT_MAXC ||
        !atomic_compare_exchange_strong_explicit(&m->state, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return;
    m->alpha = s->alpha;
    m->beta = s->beta;
    m->nc = s->nc;
    m->nt = s->nt;
    m->nk = s->nk;
    for (int i = 0; i < s->nc; i++) {
        m->key[i] = s->c[i].key;
        m->must[i] = s->c[i].must_reg;
    }
    memcpy(m->cidx, s->cidx, sizeof m->cidx);
    atomic_store_explicit(&m->state, 2, memory_order_release);
}

static int planned(fj_isa isa, fj_eltwise_op op, float alpha, int *kregs, int *scratch) {
    if ((unsigned)op - 1u >= (unsigned)FJ_ELT__COUNT - 1u) return 0;
    /* The element-wise loop asks this for alpha 1 each time it makes a
     * kernel: a dry run of the whole emitter, a tenth of a math kernel's
     * generation. Its answer depends on (isa, op) alone then, so it is
     * kept (n | nk << 8 | nt << 16, + 1 so that 0 means not yet). */
    static _Atomic uint32_t memo[3][FJ_ELT__COUNT];
    const int keep = alpha == 1.0f && (unsigned)isa <= 2u;
    uint32_t m = keep ? atomic_load_explicit(&memo[isa][op], memory_order_relaxed) : 0;
    if (!m) {
        kg_elt_state s;
        init_state(&s, NULL, isa, op, elt_bits(alpha), elt_bits(1.0f));
        plan(&s);
        uint32_t n = (uint32_t)s.nt;
        for (int i = 0; i < s.nc && i < ELT_MAXC; i++) n += s.c[i].must_reg;
        m = (n | (uint32_t)s.nk << 8 | (uint32_t)s.nt << 16) + 1;
        if (keep) atomic_store_explicit(&memo[isa][op], m, memory_order_relaxed);
    }
    m--;
    if (kregs) *kregs = (int)(m >> 8 & 0xff);
    if (scratch) *scratch = (int)(m >> 16 & 0xff);
    return (int)(m & 0xff);
}

int kg_elt_vregs(fj_isa isa, fj_eltwise_op op, float alpha) {
    return planned(isa, op, alpha, NULL, NULL);
}

int kg_elt_kregs(fj_isa isa, fj_eltwise_op op, float alpha) {
    int k = 0;
    planned(isa, op, alpha, &k, NULL);
    return k;
}

/* ---- replays ----
 * Every copy of a math op is a replay of its chain (kb_replay): recorded
 * on the first vector the op is applied to, with lane 0's scratch. One
 * recording per thread, the last state's to record (a kernel applies one
 * op at a time: softmax's exp and log take turns at most once or twice). */
struct elt_rec {
    kb_trace t;
    const kg_elt_state *owner;
    fj_reg x;              /* the vector it was recorded on */
};
static _Thread_local elt_rec rec;

kg_elt_state *kg_elt_prepare_cfg(fj_builder *b, fj_eltwise_op op, float alpha, float beta,
                                 const kg_elt_cfg *cfg) {
    if (!b) return NULL;
    int slot = -1;
    for (int i = 0; i < ELT_POOL && slot < 0; i++)
        if (!pool_used[i]) slot = i;
    if (slot < 0 || (unsigned)op - 1u >= (unsigned)FJ_ELT__COUNT - 1u) {
        poison(b);
        return NULL;
    }
    kg_elt_state *s = &pool[slot];
    elt_rec *r = &rec;
    if (r->owner == s) r->owner = NULL;
    fj_reg params = cfg ? cfg->params : (fj_reg){0};
    init_state(s, b, fj_builder_isa(b), op, params.id ? ELT_KEY_ALPHA : elt_bits(alpha),
               params.id ? ELT_KEY_BETA : elt_bits(beta));
    s->rec = r;   /* the thread's, looked up once (each lookup is a call in a shared library) */
    s->slot = slot;
    plan_kept(s, fj_builder_isa(b));
    if (s->nc > ELT_MAXC || s->nt > ELT_MAXT || s->nk > ELT_MAXK) {
        poison(b);
        return NULL;
    }
    pool_used[slot] = 1;
    int ok = 1;
    s->lanes = cfg && cfg->lanes > 1 ? (cfg->lanes < ELT_LANES ? cfg->lanes : ELT_LANES) : 1;
    for (int l = 0; l < s->lanes; l++) {
        for (int i = 0; i < s->nt; i++) ok &= (s->t[l][i] = fj_vreg(b)).id != 0;
        for (int i = 0; i < s->nk; i++) ok &= (s->k[l][i] = fj_kreg(b)).id != 0;
    }
    /* Registers for the required constants, then for optional ones in
     * first-use order while the budget lasts. */
    int budget = cfg ? cfg->const_regs : 0;
    uint8_t in_reg[ELT_MAXC];
    for (int i = 0; i < s->nc; i++) in_reg[i] = s->c[i].must_reg || budget-- > 0;
    bcst_run q;
    q.n = 0;
    /* The literal ones bound for registers first, all in one run; then
     * the parameters, zero (vxorps) and the pool's. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->nc && ok; i++) {
            elt_const *c = &s->c[i];
            if (literal_reg(c, in_reg[i]) != !pass) continue;
            place_const(s, c, params, in_reg[i], &q);
            ok &= c->r.id != 0 || (!in_reg[i] && c->m.kind == FJ_OPND_MEM);
        }
    if (ok) flush_run(s, &q);
    if (!ok) {
        /* The builder has a sticky error (out of registers or memory). */
        pool_used[slot] = 0;
        return NULL;
    }
    return s;
}

kg_elt_state *kg_elt_prepare(fj_builder *b, fj_eltwise_op op, float alpha, float beta) {
    return kg_elt_prepare_cfg(b, op, alpha, beta, NULL);
}

static int cheap(fj_eltwise_op op);

/* 0: no usable recording (nothing was emitted; the emitter runs as
 * usual). */
static int traced(kg_elt_state *s, fj_reg x) {
    if (s->notrace || !kb_replays()) return 0;
    if (s->rec->owner == s) return 1;
    /* AVX2 instructions with a memory operand replay through fj_emitv,
     * at the cost of emitting them (zmm ones with a constant-pool operand
     * take their template and a fixup): the simple ops (a few
     * instructions) and AVX2 chains (16 registers: most constants come
     * from memory) cost more to record and replay than to emit. */
    if (cheap(s->op) || !s->avx512) { s->notrace = 1; return 0; }
    s->rec->owner = NULL;
    const int lane = s->lane;
    s->lane = 0;
    kb_trace_begin(s->b, &s->rec->t);
    emit_op(s, x);
    s->lane = lane;
    if (!kb_trace_end(s->b)) { s->notrace = 1; return 0; }
    s->rec->owner = s;
    s->rec->x = x;
    return 1;
}

/* The op on x[0..n-1] (n <= lanes), vector l with lane l's scratch,
 * interleaved. */
static void replay(kg_elt_state *s, const fj_reg *x, int n) {
    enum { M = 1 + ELT_MAXT + ELT_MAXK };
    fj_reg from[M], to[ELT_LANES * M];
    const int nmap = 1 + s->nt + s->nk;
    from[0] = s->rec->x;
    memcpy(from + 1, s->t[0], (size_t)s->nt * sizeof *from);
    memcpy(from + 1 + s->nt, s->k[0], (size_t)s->nk * sizeof *from);
    for (int l = 0; l < n; l++) {
        fj_reg *d = to + l * nmap;
        d[0] = x[l];
        memcpy(d + 1, s->t[l], (size_t)s->nt * sizeof *d);
        memcpy(d + 1 + s->nt, s->k[l], (size_t)s->nk * sizeof *d);
    }
    kb_replay(s->b, &s->rec->t, n, from, to, nmap);
}

void kg_elt_apply(kg_elt_state *s, fj_reg x) {
    if (!s) return;
    /* Recording and replaying a chain costs more than emitting it once:
     * an op applied once (a loop's tail after a folded main body) is not
     * recorded. */
    if (s->rec->owner != s && !s->applied) {
        s->applied = 1;
        emit_op(s, x);
    } else if (traced(s, x)) {
        replay(s, &x, 1);
    } else {
        emit_op(s, x);
    }
}

void kg_elt_apply_n(kg_elt_state *s, const fj_reg *x, int n) {
    if (!s || n < 1) return;
    if (traced(s, x[0])) {
        const int step = s->lanes > 1 ? s->lanes : 1;
        for (int at = 0; at < n; at += step) replay(s, x + at, n - at < step ? n - at : step);
        return;
    }
    if (s->lanes < 2 || n < 2) {
        for (int i = 0; i < n; i++) emit_op(s, x[i]);
        return;
    }
    for (int at = 0; at < n; at += s->lanes) {
        int m = n - at < s->lanes ? n - at : s->lanes, count = -1, ok = 1;
        uint32_t marks[ELT_LANES][ELT_MAXREC + 1];
        for (int l = 0; l < m; l++) {
            s->marks = marks[l];
            s->nmarks = 0;
            s->lane = l;
            marks[l][0] = kb_body_len(s->b);
            emit_op(s, x[at + l]);
            ok &= s->nmarks <= ELT_MAXREC && (count < 0 || s->nmarks == count);
            count = s->nmarks;
        }
        s->marks = NULL;
        s->lane = 0;
        if (!ok) { poison(s->b); return; } /* cannot happen: same op, same length */
        kb_interleave(s->b, &marks[0][0], ELT_MAXREC + 1, m, count);
    }
}

/* The state's slot back to the pool; its registers too unless the
 * kernel ends here (release 0: a standalone kernel's builder is assembled
 * next, and the releases would be a visible share of making it). */
static void finish(kg_elt_state *s, int release) {
    if (s->rec && s->rec->owner == s) s->rec->owner = NULL;   /* the slot's next state is another op */
    pool_used[s->slot] = 0;
    if (!release) return;
    for (int l = 0; l < s->lanes; l++) {
        for (int i = 0; i < s->nt; i++) fj_release(s->b, s->t[l][i]);
        for (int i = 0; i < s->nk; i++) fj_release(s->b, s->k[l][i]);
    }
    for (int i = 0; i < s->nc; i++)
        if (s->c[i].r.id) fj_release(s->b, s->c[i].r);
}

void kg_elt_finish(kg_elt_state *s) {
    if (s) finish(s, 1);
}

/* ---- standalone kernels -------------------------------------------------------- */

static int cheap(fj_eltwise_op op) {
    return op == FJ_ELT_RELU || op == FJ_ELT_LEAKY_RELU || op == FJ_ELT_CLIP ||
           op == FJ_ELT_LINEAR || op == FJ_ELT_ABS || op == FJ_ELT_SQUARE ||
           op == FJ_ELT_HARDSWISH;
}

/* x := op(m) straight from memory, when the op's first instruction takes
 * its source as the (last) memory operand: saves the load instruction.
 * Returns 0 (nothing emitted) for the other ops. */
static int emit_op_mem(kg_elt_state *s, fj_reg x, fj_opnd m, int dry) {
    fj_builder *b = s->b;
    const fj_opnd X = elt_v(s, x);
    switch (s->op) {
    case FJ_ELT_RELU:
        if (!is_plain_relu(s)) return 0;
        if (!dry) fj_emit(b, FJ_VMAXPS, X, elt_crf(s, 0.0f), m);
        return 1;
    case FJ_ELT_CLIP:
        if (!dry) {
            fj_emit(b, FJ_VMAXPS, X, elt_cr(s, s->alpha), m);
            fj_emit(b, FJ_VMINPS, X, elt_cr(s, s->beta), X);
        }
        return 1;
    case FJ_ELT_SQRT:
        if (!dry) fj_emit(b, FJ_VSQRTPS, X, m);
        return 1;
    default:
        return 0;
    }
}

void kg_eltwise(fj_builder *b, kg_elt v) {
    int kind;
    v = kg_elt_base(v, &kind);
    const int large = kind != KG_ELT_PLAIN, stream = kind == KG_ELT_STREAMING;
    if ((unsigned)v >= KG_ELT__NELT) { poison(b); return; }
    const fj_eltwise_op op = kg_elt_op(v);
    const fj_isa isa = fj_builder_isa(b);
    const int avx512 = isa == FJ_ISA_AVX512;
    const int lanes = fj_builder_vbits(b) / 32, vbytes = lanes * 4;
    /* Cheap ops are load/store bound: an unroll of eight vectors makes the
     * loop overhead vanish, and relu, clip and sqrt take their source
     * straight from memory (sixteen on AVX-512 run no faster and take
     * longer to generate). Math ops are
     * compute bound: a few vectors per iteration, their instructions
     * interleaved (kg_elt_apply_n) when there are registers for a scratch
     * set per vector, so that the scheduler sees independent chains side
     * by side, and out-of-order execution overlaps iterations. Each copy
     * of a math op is 40-100 instructions to generate, so the unroll is
     * the smallest that keeps throughput: four vectors for the ops whose
     * chain ends in a division (tanh, sigmoid, swish, gelu_tanh: fewer
     * leave the divider idle, more run out of registers), two for the
     * others (exp, log, gelu_erf: four gain little for the longer
     * generation). */
    const int uses_params = v == KG_ELT_LEAKY_RELU || v == KG_ELT_CLIP || v == KG_ELT_LINEAR ||
                            v == KG_ELT_SWISH;
    const int nvec = avx512 ? 32 : 16, nmask = avx512 ? 6 : 0;
    /* Registers the op needs (parameters count: they live in registers). */
    int nt = 0, nk = 0; /* scratch vectors and masks of one set */
    const int need = planned(isa, op, 1.0f, &nk, &nt) + 2 * uses_params + !avx512;
    const int long_chain = op == FJ_ELT_TANH || op == FJ_ELT_SIGMOID || op == FJ_ELT_SWISH ||
                           op == FJ_ELT_GELU_TANH;
    const int umax = cheap(op) ? 8 : long_chain ? 4 : 2;
    int U = nvec - need;
    if (U > umax) U = umax;
    if (U < 1) U = 1;
    int L = 1;
    if (!cheap(op))
        for (L = U < ELT_LANES ? U : ELT_LANES; L > 1; L--)
            if (U + need + (L - 1) * nt <= nvec && L * nk <= nmask) break;
    /* Two-vector math ops on AVX-512 (exp, log, gelu_erf; plain stores):
     * the rest of the array, less than two vectors, is loaded under a mask
     * per vector and runs through the loop's copy of the op once more,
     * then is stored under the same masks, instead of a loop of its own
     * with one more copy of the op (a visible share of making the kernel).
     * The loop proper keeps its plain loads and stores
     * and tests n's sign after the op, which only the rest's pass sets.
     * Four-vector ops keep their loop: four masks' setup and masked moves
     * through the emitter cost more than the copy they save. */
    int mtail = avx512 && !cheap(op) && !stream && U == 2 && U + L * nk <= nmask + 1;
    fj_reg src = fj_arg(b, 0), dst = fj_arg(b, 1), n = fj_arg(b, 2), prm = fj_arg(b, 3);
    fj_reg x[16], km = {0}, vm = {0}, kv[2] = {{0}};
    for (int i = 0; i < U; i++) x[i] = fj_vreg(b);
    if (mtail)
        for (int i = 0; i < U; i++) kv[i] = fj_kreg(b);
    else if (avx512) km = fj_kreg(b);
    else vm = fj_vreg(b);
    int budget = nvec - U - need - (L - 1) * nt;
    kg_elt_cfg cfg = {budget > 0 ? budget : 0, uses_params ? prm : (fj_reg){0}, L};
    kg_elt_state *s = kg_elt_prepare_cfg(b, op, 0.0f, 0.0f, &cfg);
    fj_release(b, prm);
    if (!s) return;
    const int fold = emit_op_mem(s, x[0], fj_none(), 1);
    if (fold && mtail) {
        /* sqrt: the op reads its source from memory, there is no copy of
         * it between loads and stores to share; the loop of its own. */
        mtail = 0;
        km = kv[0];
        for (int i = 1; i < U; i++) fj_release(b, kv[i]);
    }

    fj_label l_loop = fj_label_new(b), l_rest = fj_label_new(b), l_done = fj_label_new(b);
    fj_label l_body = l_loop, l_tail_store = l_loop;   /* mtail's, made only for it */
    if (mtail) {
        l_body = fj_label_new(b);
        l_tail_store = fj_label_new(b);
    }

    /* n -= U*lanes up front; the loop runs while that does not borrow. */
    fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(U * lanes));
    fj_emit(b, FJ_JB, fj_lbl(l_rest));
    fj_label_bind(b, l_loop);
    /* Arrays far larger than the caches: the math ops do not keep enough
     * loads in flight for the hardware prefetchers, so ask for src 2 KiB
     * ahead (far enough to cover memory latency at their speed, near
     * enough to stay in L1). */
    if (large)
        for (int i = 0; i < U * vbytes; i += 64)
            fj_emit(b, FJ_PREFETCHT0, fj_mem(8, src, 2048 + i));
    if (fold) {
        for (int i = 0; i < U; i++) emit_op_mem(s, x[i], fj_mem(0, src, i * vbytes), 0);
    } else {
        kb_vmov_run(b, FJ_VMOVUPS, 0, x, U, src, 0, vbytes);
        if (mtail) fj_label_bind(b, l_body);
        kg_elt_apply_n(s, x, U);
        if (mtail) {
            fj_emit(b, FJ_TEST, fj_r64(n), fj_r64(n));
            fj_emit(b, FJ_JS, fj_lbl(l_tail_store));
        }
    }
    kb_vmov_run(b, stream ? FJ_VMOVNTPS : FJ_VMOVUPS, 1, x, U, dst, 0, vbytes);
    fj_emit(b, FJ_ADD, fj_r64(src), fj_imm(U * vbytes));
    fj_emit(b, FJ_ADD, fj_r64(dst), fj_imm(U * vbytes));
    fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(U * lanes));
    fj_emit(b, FJ_JAE, fj_lbl(l_loop));
    fj_label_bind(b, l_rest);
    fj_emit(b, FJ_ADD, fj_r64(n), fj_imm(U * lanes));

    /* The rest, 0 <= n < U*lanes elements. */
    fj_emit(b, FJ_TEST, fj_r64(n), fj_r64(n));
    fj_emit(b, FJ_JE, fj_lbl(l_done));
    if (mtail) {
        /* One more pass through the loop's copy of the op, vector i
         * masked to lanes [0, n - i*lanes) of it: bits [0, n) of one word,
         * 16 at a time (n < 2*lanes = 32). */
        fj_reg w = fj_gpr(b), sh = fj_gpr(b);
        fj_emit(b, FJ_MOV, fj_r32(w), fj_imm(-1));
        fj_emit(b, FJ_BZHI, fj_r32(w), fj_r32(w), fj_r32(n));
        fj_emit(b, FJ_KMOVW, fj_k(kv[0]), fj_r32(w));
        fj_emit(b, FJ_MOV, fj_r32(sh), fj_imm(lanes));
        fj_emit(b, FJ_SHRX, fj_r32(w), fj_r32(w), fj_r32(sh));
        fj_emit(b, FJ_KMOVW, fj_k(kv[1]), fj_r32(w));
        for (int i = 0; i < U; i++)
            fj_emit(b, FJ_VMOVUPS, fj_masked(elt_v(s, x[i]), kv[i], 1), fj_mem(0, src, i * vbytes));
        fj_emit(b, FJ_MOV, fj_r64(n), fj_imm(-1));
        fj_emit(b, FJ_JMP, fj_lbl(l_body));
        fj_label_bind(b, l_tail_store);
        for (int i = 0; i < U; i++)
            fj_emit(b, FJ_VMOVUPS, fj_masked(fj_mem(0, dst, i * vbytes), kv[i], 0), elt_v(s, x[i]));
    } else {
        /* One vector per iteration under a mask of min(n, lanes) lanes, so
         * that one copy of the op serves whole vectors and the tail alike
         * (a masked load or store of a full mask costs as much as a plain
         * one). */
        fj_label l_one = fj_label_new(b);
        fj_reg cnt = fj_gpr(b), tmp = fj_gpr(b);
        if (!avx512) {
            /* 8 all-ones lanes then 8 zero lanes: the window starting at
             * table + 32 - 4c has exactly c leading all-ones lanes. */
            static const int32_t window[16] = {-1, -1, -1, -1, -1, -1, -1, -1};
            fj_opnd tbl = fj_const_data(b, window, sizeof window, 32, 0);
            tbl.val += 32;
            fj_emit(b, FJ_LEA, fj_r64(tmp), tbl);
        }
        fj_label_bind(b, l_one);
        fj_emit(b, FJ_MOV, fj_r32(cnt), fj_imm(lanes));
        fj_emit(b, FJ_CMP, fj_r64(n), fj_r64(cnt));
        fj_emit(b, FJ_CMOVB, fj_r32(cnt), fj_r32(n));
        if (avx512) {
            fj_emit(b, FJ_MOV, fj_r32(tmp), fj_imm(-1));
            fj_emit(b, FJ_BZHI, fj_r32(tmp), fj_r32(tmp), fj_r32(cnt));
            fj_emit(b, FJ_KMOVW, fj_k(km), fj_r32(tmp));
            fj_emit(b, FJ_VMOVUPS, fj_masked(elt_v(s, x[0]), km, 1), fj_mem(0, src, 0));
            kg_elt_apply(s, x[0]);
            fj_emit(b, FJ_VMOVUPS, fj_masked(fj_mem(0, dst, 0), km, 0), elt_v(s, x[0]));
        } else {
            fj_emit(b, FJ_NEG, fj_r64(cnt));
            fj_emit(b, FJ_VMOVUPS, elt_v(s, vm), fj_memx(0, tmp, cnt, 4, 0));
            fj_emit(b, FJ_VMASKMOVPS, elt_v(s, x[0]), elt_v(s, vm), fj_mem(0, src, 0));
            kg_elt_apply(s, x[0]);
            fj_emit(b, FJ_VMASKMOVPS, fj_mem(0, dst, 0), elt_v(s, vm), elt_v(s, x[0]));
        }
        fj_emit(b, FJ_ADD, fj_r64(src), fj_imm(vbytes));
        fj_emit(b, FJ_ADD, fj_r64(dst), fj_imm(vbytes));
        fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(lanes));
        fj_emit(b, FJ_JA, fj_lbl(l_one));
    }
    fj_label_bind(b, l_done);
    /* Streaming stores are weakly ordered: fenced before the caller (or
     * a thread it hands the array to) reads them. */
    if (stream) fj_emit(b, FJ_SFENCE);
    finish(s, 0);
    fj_return(b, fj_none());
}
