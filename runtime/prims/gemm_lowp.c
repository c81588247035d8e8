/* gemm_lowp.c: fj_gemm_u8s8s32, fj_gemm_s8s8s32 and fj_gemm_bf16bf16f32: validation, packing and the driver.
 *
 * Semantics are oneDNN's dnnl_gemm_u8s8s32 / s8s8s32 (row-major):
 *
 *   acc = sum_k (op(A)(i,k) - ao) * (op(B)(k,j) - bo)            int32, mod 2^32
 *   alpha == 1, beta 0 or 1:  C = acc + beta*C + co              int32, mod 2^32
 *   otherwise:                C = sat(rnd(alpha*acc + beta*C)) + co
 *
 * where alpha*acc + beta*C is evaluated in double (beta == 0: C is not
 * read), rnd rounds half away from zero, sat clamps to int32 and the final
 * "+ co" wraps (mod 2^32). co is co[0] ('F'), co[j] ('R') or co[i] ('C').
 *
 * The kernels compute P = sum_k A'(i,k) * B(k,j) with A' = A (u8) or
 * A + 128 (s8 shifted into u8), and the offsets are folded into one term
 * per column and one per row:
 *
 *   acc = P - (ao + 128*s8a) * colsum_B[j] - bo * rowsum_A[i] + k*ao*bo
 *
 * (s8a: the s8s8 compensation). The first form is the kernel's own store;
 * the second lets the kernel write acc into scratch and finishes here.
 *
 * Operands are packed in k groups of 4 bytes (4 int8 or 2 bf16,
 * zero-padded; gemm_lowp_pack.c). Row-major A with whole groups is read in
 * place (a partial last row tile by a kernel of its row count); other A is
 * packed first.
 * One pass on the pool then runs one job per thread: a group of column
 * panels (each packed by the job that uses it, just before its first use;
 * a full panel of row-major bf16 B by the kernel of its first tile, from
 * B as it goes)
 * against a group of row tiles. Every C element gets the same operations
 * whatever the split, so results do not depend on the thread count. */
#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gen/gemm_lowp_gen.h"
#include "kernels/x64/x64.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_lowp_int.h"
#include "runtime/prims/span.h"
#include "runtime/rt.h"


/* ---- the driver ------------------------------------------------------- */

static inline int32_t co_of(const lp_call *x, int64_t i, int64_t j) {
    char o = x->offsetc;
    return o == 'F' || o == 'f' ? x->co[0] : o == 'R' || o == 'r' ? x->co[j] : x->co[i];
}

/* sat(round(v)): to nearest, halves away from zero, clamped to int32.
 * The fraction v - trunc(v) is exact for |v| < 2^31. */
static int32_t sat_round(double v) {
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    int64_t t = (int64_t)v;
    double f = v - (double)t;
    t += f >= 0.5 ? 1 : f <= -0.5 ? -1 : 0;
    return t > INT32_MAX ? INT32_MAX : t < INT32_MIN ? INT32_MIN : (int32_t)t;
}

/* c[j] = sat(rnd(alpha*s[j] + beta*c[j])) + co[j] (co NULL: co0) for j in
 * [0, n), four columns at a time: the same double operations as sat_round
 * in the same order (a product, then a sum: no FMA, which would round
 * once), the clamp first (max/min give the bound for NaN, as the scalar
 * conversion does), then the truncation and the half-away adjustment. */
__attribute__((target("avx2"))) static void finish_general(const int32_t *s, int32_t *c, int64_t n,
                                                          double alpha, double beta,
                                                          const int32_t *co, int32_t co0) {
    const __m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
    const __m256d lo = _mm256_set1_pd(-2147483648.0), hi = _mm256_set1_pd(2147483647.0);
    const __m256d half = _mm256_set1_pd(0.5), mhalf = _mm256_set1_pd(-0.5), one = _mm256_set1_pd(1.0);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d v = _mm256_mul_pd(va, _mm256_cvtepi32_pd(_mm_loadu_si128((const __m128i *)(const void *)(s + j))));
        if (beta != 0.0)
            v = _mm256_add_pd(v, _mm256_mul_pd(vb, _mm256_cvtepi32_pd(
                                                       _mm_loadu_si128((const __m128i *)(void *)(c + j)))));
        v = _mm256_min_pd(_mm256_max_pd(v, lo), hi);
        __m256d t = _mm256_round_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), f = _mm256_sub_pd(v, t);
        t = _mm256_add_pd(t, _mm256_and_pd(_mm256_cmp_pd(f, half, _CMP_GE_OQ), one));
        t = _mm256_sub_pd(t, _mm256_and_pd(_mm256_cmp_pd(f, mhalf, _CMP_LE_OQ), one));
        __m128i r = _mm256_cvttpd_epi32(t);
        r = _mm_add_epi32(r, co ? _mm_loadu_si128((const __m128i *)(const void *)(co + j)) : _mm_set1_epi32(co0));
        _mm_storeu_si128((__m128i *)(void *)(c + j), r);
    }
    for (; j < n; j++) {
        double v = alpha * (double)s[j];
        if (beta != 0.0) v += beta * (double)c[j];
        c[j] = (int32_t)((uint32_t)sat_round(v) + (uint32_t)(co ? co[j] : co0));
    }
}

/* c[j] = s[j] (+ c[j] with add) + co[j] (co NULL: co0), mod 2^32, eight
 * columns at a time. */
__attribute__((target("avx2"))) static void finish_plain(const int32_t *s, int32_t *c, int64_t n,
                                                        int add, const int32_t *co, int32_t co0) {
    const __m256i k = _mm256_set1_epi32(co0);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(s + j));
        if (add) v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i *)(void *)(c + j)));
        v = _mm256_add_epi32(v, co ? _mm256_loadu_si256((const __m256i *)(const void *)(co + j)) : k);
        _mm256_storeu_si256((__m256i *)(void *)(c + j), v);
    }
    for (; j < n; j++)
        c[j] = (int32_t)((uint32_t)s[j] + (add ? (uint32_t)c[j] : 0u) + (uint32_t)(co ? co[j] : co0));
}

void lp_finish_line(const lp_call *x, const int32_t *s, int32_t *c, int64_t ldc, int64_t n,
                    const int32_t *co, int64_t cs) {
    if (x->alpha == 1.0f && (x->beta == 0.0f || x->beta == 1.0f) && ldc == 1) {
        finish_plain(s, c, n, x->beta == 1.0f, cs ? co : NULL, co[0]);
    } else if (x->alpha == 1.0f && x->beta == 0.0f) {
        for (int64_t i = 0; i < n; i++) c[i * ldc] = (int32_t)((uint32_t)s[i] + (uint32_t)co[i * cs]);
    } else if (x->alpha == 1.0f && x->beta == 1.0f) {
        for (int64_t i = 0; i < n; i++)
            c[i * ldc] = (int32_t)((uint32_t)s[i] + (uint32_t)c[i * ldc] + (uint32_t)co[i * cs]);
    } else if (ldc == 1) {
        finish_general(s, c, n, (double)x->alpha, (double)x->beta, cs ? co : NULL, co[0]);
    } else {
        for (int64_t i = 0; i < n; i++) {
            double d = (double)x->alpha * (double)s[i];
            if (x->beta != 0.0f) d += (double)x->beta * (double)c[i * ldc];
            c[i * ldc] = (int32_t)((uint32_t)sat_round(d) + (uint32_t)co[i * cs]);
        }
    }
}

/* d[j] = s[j] as es bytes (2: the bf16 bits, 0..65535; 1: q, in the
 * output type's range: s8 when sgn, else u8), 16 columns at a time:
 * saturating packs (which the ranges make exact) and a qword permute
 * undoing the 256-bit packs' per-lane order. */
__attribute__((target("avx2"))) static void narrow(const int32_t *s, uint8_t *d, int64_t n, int es,
                                                   int sgn) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(s + j));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + j + 8));
        if (es == 2) {
            __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
            _mm256_storeu_si256((__m256i *)(void *)(d + 2 * j), w);
            continue;
        }
        /* words 0-3 8-11 | 4-7 12-15, put in order, then bytes from both halves */
        __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
        __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
        _mm_storeu_si128((__m128i *)(void *)(d + j), sgn ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi));
    }
    for (; j < n; j++) {
        if (es == 2) ((uint16_t *)(void *)d)[j] = (uint16_t)s[j];
        else d[j] = (uint8_t)s[j];
    }
}

/* From the staged dwords (scratch, ld n) of rows [i0, i1), columns
 * [j0, j1): general alpha/beta, C = sat(rnd(alpha*acc + beta*C)) + co;
 * or a handle's AVX2 u8/s8 (in range) or bf16 bits, narrowed. */
static void finish_part(const lp_run *r, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const lp_call *x = r->x;
    const lp_post *po = r->post;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t *s = r->scratch + i * x->n;
        if (r->general) {
            char o = x->offsetc;
            int per_col = o == 'R' || o == 'r';
            finish_general(s + j0, (int32_t *)x->c + i * x->ldc + j0, j1 - j0, (double)x->alpha,
                           (double)x->beta, per_col ? x->co + j0 : NULL, per_col ? 0 : co_of(x, i, 0));
        } else {
            int es = po->out == KG_LP_OUT_BF16 ? 2 : 1;
            narrow(s + j0, (uint8_t *)x->c + (i * x->ldc + j0) * es, j1 - j0, es, po->out_signed);
        }
    }
}

/* Tiles [t0, t1) against column panel q (packed at pb; int8 column terms
 * ct). fuse: the panel is not packed yet: tile t0 (in place) packs it from
 * B as it goes. */
static void run_part(const lp_run *r, int64_t t0, int64_t t1, int64_t q, const uint8_t *pb,
                     const int32_t *ct, int fuse) {
    const lp_call *x = r->x;
    int mr = r->cfg.mr, bf16 = x->kind == LP_BF16;
    int64_t i0 = t0 * mr, i1 = t1 * mr < x->m ? t1 * mr : x->m;
    const lp_post *po = r->post;
    int staged = r->general || (po && po->narrow_after);
    int es_c = 4;
    if (po && !staged) es_c = po->out == KG_LP_OUT_Q8 ? 1 : po->out == KG_LP_OUT_BF16 ? 2 : 4;
    char *cbase = staged ? (char *)r->scratch : (char *)x->c;
    int64_t ldc = staged ? x->n : x->ldc;
    int64_t j0 = q * r->nr, cols = x->n - j0 < r->nr ? x->n - j0 : r->nr;
    kg_lowp_args g;
    memset(&g, 0, sizeof g);
    g.lda = x->lda * r->es;
    g.b = pb;
    g.colterm = ct;
    g.kq = r->kq;
    g.c_tile = (int64_t)mr * ldc * es_c;
    g.ldc = ldc * es_c;
    g.alpha = x->alpha;
    g.beta = x->beta;
    if (po) {
        g.scale = po->scale ? po->scale + (r->cfg.scale_pc ? j0 : 0) : NULL;
        g.bias = po->bias ? po->bias + j0 : NULL;
        g.out_scale = po->out_scale;
        g.lo = po->lo;
        g.hi = po->hi;
        g.zp = po->zp;
    }
    for (int v = 0; v < r->cfg.nv; v++) {
        int64_t w = cols - (int64_t)v * r->lanes;
        w = w < 0 ? 0 : w > r->lanes ? r->lanes : w;
        g.kmask[v] = (uint32_t)((1u << w) - 1u);
        for (int l = 0; l < 8; l++) g.ymask[v][l] = l < w ? -1 : 0;
    }
    /* In-place A: the full tiles (before pa_t0) read A itself; the partial
     * last one its packed copy, or A itself too through the kernel of its
     * rows. Other A: every tile packed. */
    int64_t tin = t1 < r->pa_t0 ? t1 : t0 > r->pa_t0 ? t0 : r->pa_t0;
    if (fuse) {
        g.b_src = (const uint16_t *)x->b + j0;
        g.ldb = x->ldb * 2;
    }
    for (int seg = 0; seg < 3; seg++) {
        int part = seg == 2;
        int64_t ta = seg == 0 ? t0 : seg == 1 ? t0 + fuse : tin, tb = seg == 0 ? t0 + fuse : part ? t1 : tin;
        if (ta >= tb) continue;
        int packed = part && !r->fn_tail;
        g.a = packed ? (const void *)(r->pa + (ta - r->pa_t0) * r->a_tile)
                     : (const void *)((const uint8_t *)x->a + ta * mr * x->lda * r->es);
        g.c = cbase + (ta * mr * ldc + j0) * es_c;
        g.rowterm = bf16 ? NULL : r->rowterm + ta * mr;
        g.ntiles = tb - ta;
        g.last_rows = (tb == t1 ? i1 : tb * mr) - (tb - 1) * mr;
        g.a_tile = packed ? r->a_tile : mr * x->lda * r->es;
        (part ? (r->fn_tail ? r->fn_tail : r->fn) : seg == 0 ? r->fn_bpack : r->fn_rows)(&g);
    }
    if (staged) finish_part(r, i0, i1, j0, j0 + cols);
}

/* Job = (row group, column group): the column group's panels, packed on
 * the first row block (ni copies of B: row groups share nothing), against
 * the row group's tiles, a row block at a time so that the block's A stays
 * in L2 while the panels sweep it. */
static void run_job(void *ctx, int64_t job) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int64_t rg = job / r->nj, cg = job % r->nj;
    int64_t t_lo = rg * r->mtiles / r->ni, t_hi = (rg + 1) * r->mtiles / r->ni;
    int64_t q_lo = cg * r->npan / r->nj, q_hi = (cg + 1) * r->npan / r->nj;
    uint8_t *pb = r->pb + rg * r->npan * r->b_pan;
    int32_t *ct = x->kind == LP_BF16 ? NULL : r->colterm + rg * r->npan * r->nr;
    /* Offsets folded into per-column terms (mod 2^32); co too where the kernel's store is final. */
    uint32_t ao = (uint32_t)x->ao + (x->kind == LP_S8S8 ? 128u : 0u);
    uint32_t kab = (uint32_t)x->k * (uint32_t)x->ao * (uint32_t)x->bo;
    char o = x->offsetc;
    int fused_co = !r->general && !r->post;
    /* One row block: each panel is done with before the next is packed, so
     * all share the first one's buffer (still in L1 when the next is written). */
    int one_blk = t_hi - t_lo <= r->tiles_per_blk;
    for (int64_t tb = t_lo; tb < t_hi; tb += r->tiles_per_blk) {
        int64_t te = tb + r->tiles_per_blk < t_hi ? tb + r->tiles_per_blk : t_hi;
        for (int64_t q = q_lo; q < q_hi; q++) {
            uint8_t *pq = pb + (one_blk ? q_lo : q) * r->b_pan;
            int32_t *cq = ct ? ct + q * r->nr : NULL;
            /* A full panel's first tile in place interleaves B itself. */
            int fuse = tb == t_lo && r->fn_bpack && (q + 1) * r->nr <= x->n && t_lo < r->pa_t0;
            if (tb == t_lo && !fuse) {
                lp_pack_b_panel(r, q, pq, cq);
                for (int64_t j = 0; cq && j < r->nr; j++) {
                    int64_t gj = q * r->nr + j;
                    uint32_t t = 0;
                    if (gj < x->n) {
                        t = kab - (r->need_colsum ? ao * (uint32_t)cq[j] : 0u);
                        if (fused_co && (o == 'F' || o == 'f')) t += (uint32_t)x->co[0];
                        if (fused_co && (o == 'R' || o == 'r')) t += (uint32_t)x->co[gj];
                    }
                    cq[j] = (int32_t)t;
                }
            }
            run_part(r, tb, te, q, pq, cq, fuse);
        }
    }
}

static void choose_cfg(const fj_runtime *rt, int bf16, int64_t n, kg_lowp_cfg *c) {
    memset(c, 0, sizeof *c);
    c->tag = KG_LOWP_TAG;
    c->isa = rt->isa;
    c->dt = bf16 ? KG_LP_BF16 : KG_LP_U8S8;
    int avx512 = rt->isa == FJ_ISA_AVX512;
    if (bf16) c->dot = avx512 && (rt->features & X64_F_AVX512BF16);
    else c->dot = (rt->features & (avx512 ? X64_F_AVX512VNNI : X64_F_AVXVNNI)) != 0;
    if (avx512) {
        c->nv = 3;
        c->mr = c->dot ? 8 : bf16 ? 6 : 8;
        /* 64-wide panels (6 rows) where they pad C's columns less than
         * 48-wide ones (256 = 4 x 64 but 6 x 48 - 32); C up to 32 wide: 32;
         * up to one vector wide: one vector, 8 rows (a matrix times a few
         * vectors computes no padding columns). */
        int64_t pad3 = (n + 47) / 48 * 48 - n, pad4 = (n + 63) / 64 * 64 - n;
        if (n <= 16) {
            c->nv = 1;
            c->mr = 8;
        } else if (n <= 32) {
            c->nv = 2;
        } else if (pad4 < pad3 && (c->dot || !bf16)) {
            c->nv = 4;
            c->mr = 6;
        }
    } else if (n <= 8) {
        c->nv = 1;
        c->mr = 8;
    } else {
        c->nv = 2;
        c->mr = c->dot ? 6 : bf16 ? 3 : 5;
    }
}

/* Below this many operations (2mnk) a call runs on the calling thread:
 * the f32 GEMM's threshold (about a microsecond of one core's work) times
 * the 4 multiply-adds a dot-product lane does, since waking a worker
 * costs more than it saves there. */
enum { LP_MT_OPS = 4 << 20 };

static int lp_threads(const fj_runtime *rt, int64_t m, int64_t n, int64_t k) {
    return 2.0 * (double)m * (double)n * (double)k < (double)LP_MT_OPS ? 1 : rt_threads(rt);
}

/* The tile of an m x n x k call. Fewer column panels than threads: the
 * tile of n/threads columns, so that the threads split the columns (each
 * packs only its own part of B) rather than the rows (each packing all
 * of it). */
static void tile_cfg(const fj_runtime *rt, int bf16, int64_t m, int64_t n, int64_t k,
                     kg_lowp_cfg *c) {
    int threads = lp_threads(rt, m, n, k);
    choose_cfg(rt, bf16, n, c);
    int64_t nr = c->nv * (rt->isa == FJ_ISA_AVX512 ? 16 : 8);
    if (threads > 1 && (n + nr - 1) / nr < threads) choose_cfg(rt, bf16, (n + threads - 1) / threads, c);
}

static void lp_name(const void *c, char *buf, size_t n) { kg_lowp_name(c, buf, n); }

fj_status lp_get_kernel(fj_runtime *rt, const kg_lowp_cfg *c, fj_kernel **out) {
    fj_status s = kg_lowp_check(c);
    if (s != FJ_OK) return s;
    rt_kdesc d = {c, sizeof *c, NULL, KG_LOWP_NARGS, kg_lowp, c, lp_name};
    return rt_kernel_acquire(rt, &d, out);
}

/* This thread's last kernels (the packed-A one, the in-place ones, the
 * matrix x vector ones):
 * calls repeating a shape skip naming the kernel and the kernel table.
 * The memo holds a reference (rt_khold_set bounds how many may), dropped
 * when the thread exits or the slot is reused. */
static _Thread_local struct lp_memo {
    kg_lowp_cfg cfg;
    uint64_t serial;   /* the runtime's: tells it from a later one at its address */
    rt_khold hold;
} lp_memo[6];
static _Thread_local int lp_memo_hook;
static pthread_key_t lp_memo_key;
static pthread_once_t lp_memo_once = PTHREAD_ONCE_INIT;
static int lp_memo_key_ok;

static void lp_memo_exit(void *arg) {
    (void)arg;
    for (int i = 0; i < 6; i++) rt_khold_drop(&lp_memo[i].hold);
}
static void lp_memo_key_init(void) {
    lp_memo_key_ok = pthread_key_create(&lp_memo_key, lp_memo_exit) == 0;
}

fj_status lp_memo_kernel(fj_runtime *rt, const kg_lowp_cfg *cfg, int slot, kg_lowp_fn *fn,
                          fj_kernel **ref) {
    struct lp_memo *m = &lp_memo[slot];
    *ref = NULL;
    if (m->hold.k && m->hold.rt == rt && m->serial == rt->serial &&
        !memcmp(&m->cfg, cfg, sizeof *cfg)) {
        *fn = (kg_lowp_fn)rt_kernel_fn(m->hold.k);
        return FJ_OK;
    }
    fj_kernel *k = NULL;
    fj_status s = lp_get_kernel(rt, cfg, &k);
    if (s != FJ_OK) return s;
    if (!lp_memo_hook) {
        pthread_once(&lp_memo_once, lp_memo_key_init);
        lp_memo_hook = 1;
        if (lp_memo_key_ok) pthread_setspecific(lp_memo_key, lp_memo);
    }
    if (rt_khold_set(&m->hold, rt, k)) {
        m->cfg = *cfg;
        m->serial = rt->serial;
    } else {
        *ref = k;
    }
    *fn = (kg_lowp_fn)rt_kernel_fn(k);
    return FJ_OK;
}


/* k == 0 (or an empty product): acc = 0. */
static void no_product(const lp_call *x) {
    for (int64_t i = 0; i < x->m; i++)
        for (int64_t j = 0; j < x->n; j++) {
            if (x->kind == LP_BF16) {
                float *c = (float *)x->c + i * x->ldc + j;
                *c = x->beta == 0.0f ? 0.0f : x->beta * *c;
                continue;
            }
            int32_t *c = (int32_t *)x->c + i * x->ldc + j;
            uint32_t v;
            if (x->alpha == 1.0f && (x->beta == 0.0f || x->beta == 1.0f)) {
                v = x->beta == 0.0f ? 0u : (uint32_t)*c;
            } else {
                double d = x->beta == 0.0f ? 0.0 : (double)x->beta * (double)*c;
                v = (uint32_t)sat_round(d);
            }
            *c = (int32_t)(v + (uint32_t)co_of(x, i, j));
        }
}


/* Packed tile pa_t0 + i (an rt_chunk_fn). */
static void pack_a_from(void *ctx, int64_t i) {
    lp_pack_a_tile(ctx, ((lp_run *)ctx)->pa_t0 + i);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The L2 size of the runtime's CPU description (1 MiB where unknown). */
static int64_t lp_l2_bytes(const fj_runtime *rt) {
    return rt->cpu && rt->cpu->l2.size > 0 ? rt->cpu->l2.size : 1 << 20;
}

static fj_status lp_run_call(fj_runtime *rt, const lp_call *x, const lp_post *po) {
    if (x->m == 0 || x->n == 0) return FJ_OK;
    int bf16 = x->kind == LP_BF16;
    if (x->k == 0 && !po) { no_product(x); return FJ_OK; }
    if (!po && lp_vxm_fits(x)) return lp_vxm_call(rt, x);
    if (!po && lp_gemv_fits(x)) return lp_gemv_call(rt, x);
    lp_run r;
    memset(&r, 0, sizeof r);
    r.x = x;
    r.post = po;
    int threads = lp_threads(rt, x->m, x->n, x->k);
    if (po) {
        r.cfg = *po->cfg;
    } else {
        tile_cfg(rt, bf16, x->m, x->n, x->k, &r.cfg);
        r.general = !bf16 && !(x->alpha == 1.0f && (x->beta == 0.0f || x->beta == 1.0f));
        r.cfg.add = bf16 ? x->beta != 0.0f : (!r.general && x->beta == 1.0f);
        r.cfg.scale = bf16 && x->alpha != 1.0f;
    }
    int mr = r.cfg.mr;
    r.avx512 = rt->isa == FJ_ISA_AVX512;
    r.es = bf16 ? 2 : 1;
    r.kgrp = 4 / r.es;
    r.lanes = r.avx512 ? 16 : 8;
    r.nr = r.cfg.nv * r.lanes;
    r.need_rowsum = !bf16 && x->bo != 0;
    r.need_colsum = !bf16 && (x->ao != 0 || x->kind == LP_S8S8);
    r.kq = (x->k + r.kgrp - 1) / r.kgrp;
    if (r.kq == 0) r.kq = 1;  /* a handle with k = 0: one group of zeros */
    r.mtiles = (x->m + mr - 1) / mr;
    r.npan = (x->n + r.nr - 1) / r.nr;
    r.a_tile = r.kq * mr * 4;
    r.b_pan = r.kq * r.nr * 4;
    /* Row blocks: the block's A (k bytes a row, packed or in place) at most
     * half of L2, the rest left to the panels and C. */
    int64_t rows = lp_l2_bytes(rt) / 2 / (r.kq * 4);
    r.tiles_per_blk = rows / mr > 1 ? rows / mr : 1;
    /* Threads: T jobs, gcd(npan, T) column groups of whole panels (no
     * panel packed twice) times T/gcd row groups (each packs its own copy
     * of its panels: cheaper than waiting for another thread's). */
    r.nj = (int)gcd64(r.npan, threads);
    r.ni = threads / r.nj;
    if (r.ni > r.mtiles) r.ni = (int)r.mtiles;
    /* Column groups only: up to four per thread (a multiple of T that
     * divides the panels), so that a worker joining late (woken from a
     * nap) or preempted leaves its groups to the others rather than the
     * whole call to one thread's speed. */
    for (int64_t d = 4 * (int64_t)threads; r.ni == 1 && threads > 1 && d > r.nj; d -= threads)
        if (r.npan % d == 0) {
            r.nj = (int)d;
            break;
        }

    fj_kernel *kern = NULL, *kern_rows = NULL, *kern_tail = NULL, *kern_bp = NULL;
    if (po) {
        r.fn = po->fn;
    } else {
        fj_status s = lp_memo_kernel(rt, &r.cfg, 0, &r.fn, &kern);
        /* Row-major u8 (or bf16) A whose rows hold whole k groups (bf16
         * with an odd k: the last group's one element read alone): full
         * tiles read A in place (no packing pass over A). */
        const int half = bf16 && x->k % 2 == 1;
        if (s == FJ_OK && (x->kind == LP_INT8 || bf16) && !x->ta && (x->k % r.kgrp == 0 || half) &&
            mr <= 8) {
            kg_lowp_cfg cr = r.cfg;
            cr.a_rows = 1;
            cr.a_half = half;
            s = lp_memo_kernel(rt, &cr, 1, &r.fn_rows, &kern_rows);
            /* bf16 row-major B (k even, as A's whole groups need): a full
             * panel's first tile, in place, interleaves B itself. */
            kg_lowp_cfg cb = cr;
            cb.b_rows = 1;
            if (s == FJ_OK && bf16 && !half && r.cfg.dot && r.avx512 && !x->tb && r.cfg.nv % 2 == 0 &&
                x->m >= mr)
                s = lp_memo_kernel(rt, &cb, 5, &r.fn_bpack, &kern_bp);
            /* A partial last tile in place too, through a kernel of its rows. */
            cr.mr = (int32_t)(x->m % mr);
            if (s == FJ_OK && cr.mr) s = lp_memo_kernel(rt, &cr, 2, &r.fn_tail, &kern_tail);
        }
        if (s != FJ_OK) {
            if (kern) rt_kernel_unref(kern);
            if (kern_rows) rt_kernel_unref(kern_rows);
            if (kern_bp) rt_kernel_unref(kern_bp);
            return s;
        }
    }
    /* Packed tiles: all, or with A in place the partial last one if no kernel reads it in place. */
    r.pa_t0 = r.fn_rows ? x->m / mr : 0;
    int64_t npacked = r.fn_tail ? 0 : r.mtiles - r.pa_t0;
    int staged = r.general || (po && po->narrow_after);
    size_t bytes = (size_t)(npacked * r.a_tile + r.ni * r.npan * r.b_pan) + 6 * 64 +
                   (size_t)(r.ni * r.npan * r.nr + r.mtiles * mr * 2) * 4 +
                   (staged ? (size_t)(x->m * x->n) * 4 : 0);
    uint8_t *mem = lp_scratch(bytes), *cur = mem;
    if (!mem) {
        if (kern) rt_kernel_unref(kern);
        if (kern_rows) rt_kernel_unref(kern_rows);
        if (kern_tail) rt_kernel_unref(kern_tail);
        if (kern_bp) rt_kernel_unref(kern_bp);
        return fj_fail(FJ_ERR_NO_MEMORY, "gemm: out of memory (%zu bytes of packed operands)",
                       bytes);
    }
    r.pa = aligned_part(&cur, (size_t)(npacked * r.a_tile));
    r.pb = aligned_part(&cur, (size_t)(r.ni * r.npan * r.b_pan));
    r.colterm = aligned_part(&cur, (size_t)(r.ni * r.npan * r.nr) * 4);
    r.rowterm = aligned_part(&cur, (size_t)(r.mtiles * mr) * 4);
    r.rowsum = aligned_part(&cur, (size_t)(r.mtiles * mr) * 4);
    if (staged) r.scratch = aligned_part(&cur, (size_t)(x->m * x->n) * 4);

    for (int64_t i = 0; i < r.mtiles * mr; i++) r.rowsum[i] = 0;
    if (r.fn_rows && r.need_rowsum)
        for (int64_t i = 0; i < (r.fn_tail ? x->m : r.pa_t0 * mr); i++) {
            const uint8_t *row = (const uint8_t *)x->a + i * x->lda;
            uint32_t sum = 0;
            for (int64_t kk = 0; kk < x->k; kk++) sum += row[kk];
            r.rowsum[i] = (int32_t)sum;
        }
    const unsigned fl = rt_par_wake_from(2.0 * (double)x->m * (double)x->n * (double)x->k, LP_MT_OPS);
    if (npacked > 1) rt_parallel(rt, npacked, threads, pack_a_from, &r, fl);
    else if (npacked == 1) lp_pack_a_tile(&r, r.pa_t0);
    if (!bf16) {
        /* Row offsets folded into per-row terms (mod 2^32); the column
         * terms are formed where each panel is packed. */
        char o = x->offsetc;
        int fused_co = !r.general && !po;
        for (int64_t i = 0; i < r.mtiles * mr; i++) {
            uint32_t t = 0;
            if (i < x->m) {
                t = 0u - (uint32_t)x->bo * (uint32_t)r.rowsum[i];
                if (fused_co && (o == 'C' || o == 'c')) t += (uint32_t)x->co[i];
            }
            r.rowterm[i] = (int32_t)t;
        }
    }
    rt_parallel(rt, (int64_t)r.ni * r.nj, threads, run_job, &r, fl);
    if (kern) rt_kernel_unref(kern);
    if (kern_rows) rt_kernel_unref(kern_rows);
    if (kern_tail) rt_kernel_unref(kern_tail);
    if (kern_bp) rt_kernel_unref(kern_bp);
    return FJ_OK;
}

/* ---- entry points ----------------------------------------------------- */

static int trans_of(char t, int *out) {
    if (t == 'N' || t == 'n') { *out = 0; return 1; }
    if (t == 'T' || t == 't') { *out = 1; return 1; }
    return 0;
}

/* Bytes spanned by a rows x cols matrix of es-byte elements (ld apart). */
static uintptr_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int es) {
    return rows > 0 && cols > 0 ? (uintptr_t)((rows - 1) * ld + cols) * (uintptr_t)es : 0;
}

static fj_status lp_entry(fj_runtime *rt, const char *fn, lp_call *x, char transa, char transb) {
    if (!rt) return fj_fail(FJ_ERR_INVALID_ARG, "%s: runtime is NULL", fn);
    if (!trans_of(transa, &x->ta) || !trans_of(transb, &x->tb))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: transa/transb must be 'N' or 'T' (got '%c', '%c')",
                       fn, transa, transb);
    int bf16 = x->kind == LP_BF16;
    if (!bf16) {
        char o = x->offsetc;
        if (!(o == 'F' || o == 'f' || o == 'C' || o == 'c' || o == 'R' || o == 'r'))
            return fj_fail(FJ_ERR_INVALID_ARG, "%s: offsetc must be 'F', 'C' or 'R' (got '%c')",
                           fn, o);
    }
    if (x->m < 0 || x->n < 0 || x->k < 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: negative size %lldx%lldx%lld", fn,
                       (long long)x->m, (long long)x->n, (long long)x->k);
    /* Each matrix's bytes must fit the address space (and the int32
     * strides of the packing loops are int64, so only the span matters). */
    if (x->m > (INT64_C(1) << 40) || x->n > (INT64_C(1) << 40) || x->k > (INT64_C(1) << 40))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: size too large", fn);
    int64_t arow = x->ta ? x->k : x->m, acol = x->ta ? x->m : x->k;
    int64_t brow = x->tb ? x->n : x->k, bcol = x->tb ? x->k : x->n;
    if (x->lda < (acol > 1 ? acol : 1) || x->ldb < (bcol > 1 ? bcol : 1) ||
        x->ldc < (x->n > 1 ? x->n : 1))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: leading dimensions %lld/%lld/%lld too small", fn,
                       (long long)x->lda, (long long)x->ldb, (long long)x->ldc);
    uintptr_t sa, sb, sc;
    if (!rt_span(arow, acol, x->lda, &sa) || !rt_span(brow, bcol, x->ldb, &sb) ||
        !rt_span(x->m, x->n, x->ldc, &sc))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: matrix span does not fit in memory", fn);
    if (x->m == 0 || x->n == 0) return FJ_OK;
    if (!x->c) return fj_fail(FJ_ERR_INVALID_ARG, "%s: C is NULL", fn);
    if (x->k > 0 && (!x->a || !x->b)) return fj_fail(FJ_ERR_INVALID_ARG, "%s: A or B is NULL", fn);
    if (!bf16 && !x->co) return fj_fail(FJ_ERR_INVALID_ARG, "%s: co is NULL", fn);
    /* C may share no byte with A or B (spans as byte ranges: conservative). */
    int ea = bf16 ? 2 : 1;
    uintptr_t c0 = (uintptr_t)x->c, c1 = c0 + span_bytes(x->m, x->n, x->ldc, 4);
    if (x->k > 0) {
        uintptr_t a0 = (uintptr_t)x->a, a1 = a0 + span_bytes(arow, acol, x->lda, ea);
        uintptr_t b0 = (uintptr_t)x->b, b1 = b0 + span_bytes(brow, bcol, x->ldb, ea);
        if ((a0 < c1 && c0 < a1) || (b0 < c1 && c0 < b1))
            return fj_fail(FJ_ERR_INVALID_ARG, "%s: C overlaps A or B", fn);
    }
    if (!bf16) {
        char o = x->offsetc;
        int64_t nco = o == 'F' || o == 'f' ? 1 : o == 'R' || o == 'r' ? x->n : x->m;
        uintptr_t o0 = (uintptr_t)x->co, o1 = o0 + (uintptr_t)nco * 4;
        if (o0 < c1 && c0 < o1) return fj_fail(FJ_ERR_INVALID_ARG, "%s: C overlaps co", fn);
    }
    return lp_run_call(rt, x, NULL);
}

fj_status fj_gemm_u8s8s32(fj_runtime *rt, char transa, char transb, char offsetc, int64_t m,
                          int64_t n, int64_t k, float alpha, const uint8_t *a, int64_t lda,
                          uint8_t ao, const int8_t *b, int64_t ldb, int8_t bo, float beta,
                          int32_t *c, int64_t ldc, const int32_t *co) {
    lp_call x = {LP_INT8, 0, 0, offsetc, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c,
                 ao, bo, co};
    return lp_entry(rt, "fj_gemm_u8s8s32", &x, transa, transb);
}

fj_status fj_gemm_s8s8s32(fj_runtime *rt, char transa, char transb, char offsetc, int64_t m,
                          int64_t n, int64_t k, float alpha, const int8_t *a, int64_t lda,
                          int8_t ao, const int8_t *b, int64_t ldb, int8_t bo, float beta,
                          int32_t *c, int64_t ldc, const int32_t *co) {
    lp_call x = {LP_S8S8, 0, 0, offsetc, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c,
                 ao, bo, co};
    return lp_entry(rt, "fj_gemm_s8s8s32", &x, transa, transb);
}

fj_status fj_gemm_bf16bf16f32(fj_runtime *rt, char transa, char transb, int64_t m, int64_t n,
                              int64_t k, float alpha, const uint16_t *a, int64_t lda,
                              const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    lp_call x = {LP_BF16, 0, 0, 'F', m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, 0, 0, NULL};
    return lp_entry(rt, "fj_gemm_bf16bf16f32", &x, transa, transb);
}

/* ---- handles with the quantized epilogue ------------------------------- */

struct fj_gemm_lowp {
    fj_runtime *rt;
    fj_gemm_lowp_desc d;
    int kind;                /* LP_* */
    kg_lowp_cfg cfg;
    fj_kernel *kern;
};

static int dt_size(fj_dtype t) {
    return t == FJ_DT_U8 || t == FJ_DT_S8 ? 1 : t == FJ_DT_BF16 ? 2 : 4;
}

fj_status fj_gemm_lowp_create(fj_runtime *rt, const fj_gemm_lowp_desc *d, fj_gemm_lowp **out) {
    static const char fn[] = "fj_gemm_lowp_create";
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!rt || !d) return fj_fail(FJ_ERR_INVALID_ARG, "%s: runtime or descriptor is NULL", fn);
    int kind;
    if ((d->a_type == FJ_DT_U8 || d->a_type == FJ_DT_S8) && d->b_type == FJ_DT_S8) {
        kind = d->a_type == FJ_DT_U8 ? LP_INT8 : LP_S8S8;
        if (d->c_type != FJ_DT_F32 && d->c_type != FJ_DT_U8 && d->c_type != FJ_DT_S8)
            return fj_fail(FJ_ERR_INVALID_ARG, "%s: int8 GEMM output must be f32, u8 or s8", fn);
    } else if (d->a_type == FJ_DT_BF16 && d->b_type == FJ_DT_BF16) {
        kind = LP_BF16;
        if (d->c_type != FJ_DT_F32 && d->c_type != FJ_DT_BF16)
            return fj_fail(FJ_ERR_INVALID_ARG, "%s: bf16 GEMM output must be f32 or bf16", fn);
    } else {
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: input types %d x %d: expected u8/s8 x s8 or bf16 "
                       "x bf16", fn, (int)d->a_type, (int)d->b_type);
    }
    if ((int)d->post_op < 0 || d->post_op >= FJ_ELT__COUNT)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: post_op %d is not an fj_eltwise_op", fn,
                       (int)d->post_op);
    if (kind != LP_BF16 && ((kind == LP_INT8 && (d->ao < 0 || d->ao > 255)) ||
                            (kind == LP_S8S8 && (d->ao < -128 || d->ao > 127)) ||
                            d->bo < -128 || d->bo > 127))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: zero points %d/%d out of their types' range", fn,
                       (int)d->ao, (int)d->bo);
    if ((d->c_type == FJ_DT_U8 && (d->out_zero < 0 || d->out_zero > 255)) ||
        (d->c_type == FJ_DT_S8 && (d->out_zero < -128 || d->out_zero > 127)))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: out_zero %d out of the output type's range", fn,
                       (int)d->out_zero);
    /* The shape checks of the plain entry points (no data yet). */
    lp_call x = {kind, 0, 0, 'F', d->m, d->n, d->k, d->lda, d->ldb, d->ldc, 1.0f, 0.0f,
                 NULL, NULL, NULL, 0, 0, NULL};
    if (!trans_of(d->transa, &x.ta) || !trans_of(d->transb, &x.tb))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: transa/transb must be 'N' or 'T'", fn);
    if (d->m < 0 || d->n < 0 || d->k < 0 || d->m > (INT64_C(1) << 40) ||
        d->n > (INT64_C(1) << 40) || d->k > (INT64_C(1) << 40))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: bad size %lldx%lldx%lld", fn, (long long)d->m,
                       (long long)d->n, (long long)d->k);
    int64_t acol = x.ta ? d->m : d->k, bcol = x.tb ? d->k : d->n;
    if (d->lda < (acol > 1 ? acol : 1) || d->ldb < (bcol > 1 ? bcol : 1) ||
        d->ldc < (d->n > 1 ? d->n : 1))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: leading dimensions too small", fn);
    fj_gemm_lowp *g = fj_calloc(1, sizeof *g);
    if (!g) return fj_fail(FJ_ERR_NO_MEMORY, "%s: out of memory", fn);
    g->rt = rt;
    g->d = *d;
    g->kind = kind;
    tile_cfg(rt, kind == LP_BF16, d->m, d->n, d->k, &g->cfg);
    g->cfg.post = 1;
    g->cfg.out = d->c_type == FJ_DT_F32 ? KG_LP_OUT_F32 : d->c_type == FJ_DT_BF16 ? KG_LP_OUT_BF16
                                                                                : KG_LP_OUT_Q8;
    g->cfg.scale_pc = kind != LP_BF16 && d->scale_per_column;
    g->cfg.has_bias = d->has_bias != 0;
    g->cfg.act = (int32_t)d->post_op;
    g->cfg.act_alpha = d->post_op ? d->post_alpha : 0.0f;
    g->cfg.act_beta = d->post_op ? d->post_beta : 0.0f;
    /* An activation needs registers beside the accumulators: fewer rows. */
    while (g->cfg.mr > 1 && kg_lowp_check(&g->cfg) != FJ_OK) g->cfg.mr--;
    fj_status s = lp_get_kernel(rt, &g->cfg, &g->kern);
    if (s != FJ_OK) {
        fj_free(g);
        return s;
    }
    *out = g;
    return FJ_OK;
}

fj_status fj_gemm_lowp_execute(const fj_gemm_lowp *g, const void *a, const void *b,
                               const float *scales, const float *bias, void *c) {
    static const char fn[] = "fj_gemm_lowp_execute";
    if (!g) return fj_fail(FJ_ERR_INVALID_ARG, "%s: handle is NULL", fn);
    const fj_gemm_lowp_desc *d = &g->d;
    if (d->m == 0 || d->n == 0) return FJ_OK;
    if (!c || (d->k > 0 && (!a || !b)))
        return fj_fail(FJ_ERR_INVALID_ARG, "%s: A, B or C is NULL", fn);
    if (g->kind != LP_BF16 && !scales) return fj_fail(FJ_ERR_INVALID_ARG, "%s: scales is NULL", fn);
    if (d->has_bias && !bias) return fj_fail(FJ_ERR_INVALID_ARG, "%s: bias is NULL", fn);
    int ea = g->kind == LP_BF16 ? 2 : 1, ec = dt_size(d->c_type);
    int ta = d->transa == 'T' || d->transa == 't', tb = d->transb == 'T' || d->transb == 't';
    int64_t arow = ta ? d->k : d->m, acol = ta ? d->m : d->k;
    int64_t brow = tb ? d->n : d->k, bcol = tb ? d->k : d->n;
    uintptr_t c0 = (uintptr_t)c, c1 = c0 + span_bytes(d->m, d->n, d->ldc, ec);
    if (d->k > 0) {
        uintptr_t a0 = (uintptr_t)a, a1 = a0 + span_bytes(arow, acol, d->lda, ea);
        uintptr_t b0 = (uintptr_t)b, b1 = b0 + span_bytes(brow, bcol, d->ldb, ea);
        if ((a0 < c1 && c0 < a1) || (b0 < c1 && c0 < b1))
            return fj_fail(FJ_ERR_INVALID_ARG, "%s: C overlaps A or B", fn);
    }
    int lanes = g->cfg.isa == FJ_ISA_AVX512 ? 16 : 8, nr = g->cfg.nv * lanes;
    int64_t npad = (d->n + nr - 1) / nr * nr;
    float *pad = fj_malloc((size_t)npad * 2 * sizeof(float));
    if (!pad) return fj_fail(FJ_ERR_NO_MEMORY, "%s: out of memory", fn);
    float *ps = pad, *pb = pad + npad;
    int64_t ns = g->cfg.scale_pc ? d->n : 1;
    for (int64_t j = 0; j < npad; j++) {
        ps[j] = g->kind != LP_BF16 && j < ns ? scales[j] : 0.0f;
        pb[j] = d->has_bias && j < d->n ? bias[j] : 0.0f;
    }
    lp_post po;
    memset(&po, 0, sizeof po);
    po.cfg = &g->cfg;
    po.fn = (kg_lowp_fn)rt_kernel_fn(g->kern);
    po.scale = ps;
    po.bias = d->has_bias ? pb : NULL;
    po.out = g->cfg.out;
    po.out_signed = d->c_type == FJ_DT_S8;
    po.out_scale = d->out_scale;
    po.zp = d->out_zero;
    po.lo = (float)((po.out_signed ? -128 : 0) - d->out_zero);
    po.hi = (float)((po.out_signed ? 127 : 255) - d->out_zero);
    po.narrow_after = g->cfg.isa != FJ_ISA_AVX512 && g->cfg.out != KG_LP_OUT_F32;
    lp_call x = {g->kind, ta, tb, 'F', d->m, d->n, d->k, d->lda, d->ldb, d->ldc, 1.0f, 0.0f,
                 a, b, c, d->ao, d->bo, NULL};
    fj_status s = lp_run_call(g->rt, &x, &po);
    fj_free(pad);
    return s;
}

void fj_gemm_lowp_destroy(fj_gemm_lowp *g) {
    if (!g) return;
    if (g->kern) rt_kernel_unref(g->kern);
    fj_free(g);
}
