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
 * All of A and all of B are packed first (k in groups of 4 bytes: 4 int8
 * or 2 bf16, zero-padded), then chunks of (row block, column panel) run
 * on the pool; every C element gets the same operations whatever the
 * chunking, so results do not depend on the thread count. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <pthread.h>

#include "kernels/gen/gemm_lowp_gen.h"
#include "kernels/x64/x64.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"
#include "runtime/prims/span.h"
#include "runtime/rt.h"

enum { LP_INT8, LP_S8S8, LP_BF16 };

typedef struct lp_call {
    int kind;                /* LP_* */
    int ta, tb;              /* transposed */
    char offsetc;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *a, *b;
    void *c;
    int32_t ao, bo;
    const int32_t *co;
} lp_call;

/* A handle's epilogue (kg_lowp_cfg.post) and its per-call operands. */
typedef struct lp_post {
    const kg_lowp_cfg *cfg;  /* the handle's kernel configuration */
    kg_lowp_fn fn;
    const float *scale, *bias;  /* padded copies (panel-wide loads stay inside) */
    float out_scale, lo, hi;
    int32_t zp;
    int narrow_after;        /* AVX2 u8/s8/bf16 out: the kernel wrote dwords to scratch */
    int out;                 /* KG_LP_OUT_* */
    int out_signed;          /* Q8: s8 */
} lp_post;

typedef struct lp_run {
    const lp_call *x;
    const lp_post *post;
    kg_lowp_cfg cfg;
    kg_lowp_fn fn;
    kg_lowp_fn fn_rows;      /* the in-place A kernel (u8 row-major A, k % 4 == 0), or NULL */
    int es;                  /* input element bytes: 1 or 2 */
    int kgrp;                /* elements per k group: 4 or 2 */
    int lanes, nr;           /* columns per vector, per panel */
    int64_t kq;              /* k groups */
    int64_t mtiles, npan;
    int64_t tiles_per_blk, nblk;
    uint8_t *pa, *pb;        /* packed A (all tiles), packed B (all panels) */
    int64_t a_tile, b_pan;   /* bytes per tile / panel */
    int32_t *colterm, *rowterm;  /* int8: npan*nr, mtiles*mr */
    int32_t *rowsum, *colsum;
    uint32_t *cspart;        /* pack_b_rows: per-chunk column sums */
    int64_t nbch;            /* pack_b_rows chunks */
    int32_t *scratch;        /* general alpha/beta: acc, m x n (ld n) */
    int general;
} lp_run;

/* ---- packing ----------------------------------------------------------- */

static inline int32_t a_val(const lp_call *x, int64_t i, int64_t kk) {
    int64_t o = x->ta ? kk * x->lda + i : i * x->lda + kk;
    if (x->kind == LP_INT8) return ((const uint8_t *)x->a)[o];
    return ((const int8_t *)x->a)[o];
}
static inline uint16_t a_bf(const lp_call *x, int64_t i, int64_t kk) {
    return ((const uint16_t *)x->a)[x->ta ? kk * x->lda + i : i * x->lda + kk];
}
static inline int64_t b_off(const lp_call *x, int64_t kk, int64_t j) {
    return x->tb ? j * x->ldb + kk : kk * x->ldb + j;
}

/* Row tile t of A: for each k group, mr rows of 4 bytes; row sums. */
static void pack_a_tile(void *ctx, int64_t t) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int mr = r->cfg.mr;
    uint8_t *d = r->pa + t * r->a_tile;
    memset(d, 0, (size_t)r->a_tile);
    for (int i = 0; i < mr; i++) {
        int64_t gi = t * mr + i;
        if (gi >= x->m) break;
        if (!x->ta) {
            /* Row-major A: a row's k groups are 4 contiguous bytes each. */
            const uint8_t *src = (const uint8_t *)x->a + gi * x->lda * r->es;
            int64_t bytes = x->k * r->es, full = bytes / 4;
            uint32_t flip = x->kind == LP_S8S8 ? 0x80808080u : 0u, sum = 0;
            for (int64_t gq = 0; gq < full; gq++) {
                uint32_t w;
                memcpy(&w, src + gq * 4, 4);
                w ^= flip;
                memcpy(d + (gq * mr + i) * 4, &w, 4);
            }
            if (bytes > full * 4) {
                uint32_t w = 0;
                memcpy(&w, src + full * 4, (size_t)(bytes - full * 4));
                uint32_t pad = flip & ((1u << ((bytes - full * 4) * 8)) - 1u);
                w ^= pad;
                memcpy(d + (full * mr + i) * 4, &w, 4);
            }
            if (x->kind == LP_INT8)
                for (int64_t kk = 0; kk < x->k; kk++) sum += src[kk];
            else if (x->kind == LP_S8S8)
                for (int64_t kk = 0; kk < x->k; kk++) sum += (uint32_t)(int32_t)(int8_t)src[kk];
            if (x->kind != LP_BF16) r->rowsum[gi] = (int32_t)sum;
            continue;
        }
        if (x->kind == LP_BF16) {
            for (int64_t kk = 0; kk < x->k; kk++) {
                uint16_t v = a_bf(x, gi, kk);
                memcpy(d + ((kk / 2) * mr + i) * 4 + (kk & 1) * 2, &v, 2);
            }
            continue;
        }
        uint32_t sum = 0;
        for (int64_t kk = 0; kk < x->k; kk++) {
            int32_t v = a_val(x, gi, kk);
            sum += (uint32_t)v;
            /* s8 A + 128 is its bit pattern with the sign bit flipped */
            d[((kk / 4) * mr + i) * 4 + (kk & 3)] = (uint8_t)(x->kind == LP_S8S8 ? v ^ 0x80 : v);
        }
        r->rowsum[gi] = (int32_t)sum;
    }
}

/* dst[j] = the bytes of four rows' column j; cs[j] += their sum. restrict:
 * the compiler may vectorize (the byte rows cannot alias the dwords). */
__attribute__((target("ssse3"))) static void interleave4(const int8_t *restrict r0, int64_t ld,
                                                        uint32_t *restrict dst,
                                                        uint32_t *restrict cs, int cols) {
    const int8_t *restrict r1 = r0 + ld, *restrict r2 = r1 + ld, *restrict r3 = r2 + ld;
    /* 16 columns at a time: byte and word unpacks make the dwords; the
     * column sums are vpmaddubsw against bytes of 1 (u8 1 x s8) and
     * vpmaddwd against words of 1. (Every CPU with AVX2 has SSSE3.) */
    const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
    int j = 0;
    for (; j + 16 <= cols; j += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(r0 + j));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(r1 + j));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(r2 + j));
        __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(r3 + j));
        __m128i abl = _mm_unpacklo_epi8(a, b), abh = _mm_unpackhi_epi8(a, b);
        __m128i cdl = _mm_unpacklo_epi8(c, d), cdh = _mm_unpackhi_epi8(c, d);
        __m128i o[4] = {_mm_unpacklo_epi16(abl, cdl), _mm_unpackhi_epi16(abl, cdl),
                        _mm_unpacklo_epi16(abh, cdh), _mm_unpackhi_epi16(abh, cdh)};
        for (int q = 0; q < 4; q++) {
            _mm_storeu_si128((__m128i *)(void *)(dst + j + 4 * q), o[q]);
            __m128i sum = _mm_madd_epi16(_mm_maddubs_epi16(ones8, o[q]), ones16);
            __m128i old = _mm_loadu_si128((const __m128i *)(const void *)(cs + j + 4 * q));
            _mm_storeu_si128((__m128i *)(void *)(cs + j + 4 * q), _mm_add_epi32(old, sum));
        }
    }
    for (; j < cols; j++) {
        dst[j] = (uint32_t)(uint8_t)r0[j] | (uint32_t)(uint8_t)r1[j] << 8 |
                 (uint32_t)(uint8_t)r2[j] << 16 | (uint32_t)(uint8_t)r3[j] << 24;
        cs[j] += (uint32_t)(r0[j] + r1[j] + r2[j] + r3[j]);
    }
}

/* dst[j] = row0[j] | row1[j] << 16 (bf16 pairs along k). */
__attribute__((target("ssse3"))) static void interleave2(const uint16_t *restrict r0, int64_t ld,
                                                        uint32_t *restrict dst, int cols) {
    const uint16_t *restrict r1 = r0 + ld;
    int j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(r0 + j));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(r1 + j));
        _mm_storeu_si128((__m128i *)(void *)(dst + j), _mm_unpacklo_epi16(a, b));
        _mm_storeu_si128((__m128i *)(void *)(dst + j + 4), _mm_unpackhi_epi16(a, b));
    }
    for (; j < cols; j++) dst[j] = (uint32_t)r0[j] | (uint32_t)r1[j] << 16;
}

/* Column panel q of B: for each k group, nr columns of 4 bytes; column sums. */
static void pack_b_panel(void *ctx, int64_t q) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int nr = r->nr;
    uint8_t *d = r->pb + q * r->b_pan;
    memset(d, 0, (size_t)r->b_pan);
    int64_t j0 = q * nr, cols = x->n - j0 < nr ? x->n - j0 : nr;
    if (!x->tb && r->es == 2) {
        /* Row-major bf16 B: pairs of rows interleaved into dwords. */
        const uint16_t *b = x->b;
        int64_t g = 0;
        for (; (g + 1) * 2 <= x->k; g++)
            interleave2(b + g * 2 * x->ldb + j0, x->ldb, (uint32_t *)(void *)(d + g * nr * 4), cols);
        if (g < r->kq) {
            uint32_t *dg = (uint32_t *)(void *)(d + g * nr * 4);
            for (int j = 0; j < cols; j++) dg[j] = b[g * 2 * x->ldb + j0 + j];
        }
        return;
    }
    if (!x->tb) {
        /* Row-major B: the kgrp rows of a group, interleaved column by column. */
        int kg = r->kgrp, es = r->es;
        for (int j = 0; j < cols; j++) r->colsum[j0 + j] = 0;
        int64_t g = 0;
        if (es == 1) {
            /* Whole groups: one dword per column from four rows. */
            uint32_t cs[64] = {0};
            for (; (g + 1) * 4 <= x->k; g++) {
                const int8_t *r0 = (const int8_t *)x->b + g * 4 * x->ldb + j0;
                interleave4(r0, x->ldb, (uint32_t *)(void *)(d + g * nr * 4), cs, cols);
            }
            for (int j = 0; j < cols; j++) r->colsum[j0 + j] = (int32_t)cs[j];
        }
        for (; g < r->kq; g++) {
            uint8_t *dg = d + g * nr * 4;
            for (int qq = 0; qq < kg; qq++) {
                int64_t kk = g * kg + qq;
                if (kk >= x->k) break;
                const uint8_t *row = (const uint8_t *)x->b + (kk * x->ldb + j0) * es;
                if (es == 1) {
                    for (int j = 0; j < cols; j++) {
                        dg[j * 4 + qq] = row[j];
                        r->colsum[j0 + j] = (int32_t)((uint32_t)r->colsum[j0 + j] +
                                                     (uint32_t)(int32_t)(int8_t)row[j]);
                    }
                } else {
                    for (int j = 0; j < cols; j++) memcpy(dg + j * 4 + qq * 2, row + j * 2, 2);
                }
            }
        }
        return;
    }
    for (int j = 0; j < nr; j++) {
        int64_t gj = q * nr + j;
        if (gj >= x->n) break;
        if (x->kind == LP_BF16) {
            const uint16_t *b = x->b;
            for (int64_t kk = 0; kk < x->k; kk++)
                memcpy(d + ((kk / 2) * nr + j) * 4 + (kk & 1) * 2, &b[b_off(x, kk, gj)], 2);
            continue;
        }
        const int8_t *b = x->b;
        uint32_t sum = 0;
        for (int64_t kk = 0; kk < x->k; kk++) {
            int8_t v = b[b_off(x, kk, gj)];
            sum += (uint32_t)(int32_t)v;
            d[((kk / 4) * nr + j) * 4 + (kk & 3)] = (uint8_t)v;
        }
        r->colsum[gj] = (int32_t)sum;
    }
}

/* Row-major int8 B, k groups [ch*LP_GCH, ...): every panel's part of each
 * group, reading B's rows front to back; column sums into the chunk's own
 * partial sums (added up once all chunks are done). */
enum { LP_GCH = 64 };
static void pack_b_rows(void *ctx, int64_t ch) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int nr = r->nr;
    int64_t g0 = ch * LP_GCH, g1 = g0 + LP_GCH < r->kq ? g0 + LP_GCH : r->kq;
    uint32_t *cs = r->cspart + ch * r->npan * nr;
    memset(cs, 0, (size_t)(r->npan * nr) * 4);
    const int8_t *b = x->b;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t q = 0; q < r->npan; q++) {
            int64_t j0 = q * nr;
            int cols = (int)(x->n - j0 < nr ? x->n - j0 : nr);
            uint32_t *dg = (uint32_t *)(void *)(r->pb + q * r->b_pan + g * nr * 4);
            if ((g + 1) * 4 <= x->k) {
                interleave4(b + g * 4 * x->ldb + j0, x->ldb, dg, cs + j0, cols);
            } else {
                for (int j = 0; j < cols; j++) {
                    uint32_t w = 0;
                    for (int qq = 0; qq < 4 && g * 4 + qq < x->k; qq++) {
                        int8_t v = b[(g * 4 + qq) * x->ldb + j0 + j];
                        w |= (uint32_t)(uint8_t)v << (8 * qq);
                        cs[j0 + j] += (uint32_t)(int32_t)v;
                    }
                    dg[j] = w;
                }
            }
            for (int j = cols; j < nr; j++) dg[j] = 0;
        }
}

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

/* General alpha/beta: C = sat(rnd(alpha*acc + beta*C)) + co over rows [i0, i1). */
static void finish_rows(const lp_run *r, int64_t i0, int64_t i1) {
    const lp_call *x = r->x;
    int32_t *c = x->c;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < x->n; j++) {
            double v = (double)x->alpha * (double)r->scratch[i * x->n + j];
            if (x->beta != 0.0f) v += (double)x->beta * (double)c[i * x->ldc + j];
            int32_t s = sat_round(v);
            c[i * x->ldc + j] = (int32_t)((uint32_t)s + (uint32_t)co_of(x, i, j));
        }
}

/* Chunk = one row block: its tiles against every column panel. */
static void run_block(void *ctx, int64_t blk) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int mr = r->cfg.mr, bf16 = x->kind == LP_BF16;
    int64_t t0 = blk * r->tiles_per_blk;
    int64_t t1 = t0 + r->tiles_per_blk < r->mtiles ? t0 + r->tiles_per_blk : r->mtiles;
    int64_t i0 = t0 * mr, i1 = t1 * mr < x->m ? t1 * mr : x->m;
    const lp_post *po = r->post;
    int staged = r->general || (po && po->narrow_after);
    int es_c = 4;
    if (po && !staged) es_c = po->out == KG_LP_OUT_Q8 ? 1 : po->out == KG_LP_OUT_BF16 ? 2 : 4;
    char *cbase = staged ? (char *)r->scratch : (char *)x->c;
    int64_t ldc = staged ? x->n : x->ldc;
    /* In-place A: full tiles read A itself, a partial last tile its packed copy. */
    int64_t tin = r->fn_rows ? (i1 - t0 * mr == (t1 - t0) * mr ? t1 : t1 - 1) : t0;
    for (int64_t q = 0; q < r->npan; q++) {
      for (int part = 0; part < 2; part++) {
        int64_t ta = part ? tin : t0, tb = part ? t1 : tin;
        if (ta >= tb) continue;
        int64_t j0 = q * r->nr;
        int64_t cols = x->n - j0 < r->nr ? x->n - j0 : r->nr;
        kg_lowp_args g;
        memset(&g, 0, sizeof g);
        g.a = part ? (const void *)(r->pa + ta * r->a_tile)
                   : (const void *)((const uint8_t *)x->a + ta * mr * x->lda * r->es);
        g.lda = x->lda * r->es;
        g.b = r->pb + q * r->b_pan;
        g.c = cbase + (ta * mr * ldc + j0) * es_c;
        g.colterm = bf16 ? NULL : r->colterm + j0;
        g.rowterm = bf16 ? NULL : r->rowterm + ta * mr;
        g.kq = r->kq;
        g.ntiles = tb - ta;
        g.last_rows = (tb == t1 ? i1 : tb * mr) - (tb - 1) * mr;
        g.a_tile = part ? r->a_tile : mr * x->lda * r->es;
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
        (part ? r->fn : r->fn_rows)(&g);
      }
    }
    if (r->general) finish_rows(r, i0, i1);
    if (po && po->narrow_after) {
        /* AVX2: q (int32, in range) or the bf16 bits from the staged dwords */
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = 0; j < x->n; j++) {
                int32_t v = r->scratch[i * x->n + j];
                if (po->out == KG_LP_OUT_BF16) ((uint16_t *)x->c)[i * x->ldc + j] = (uint16_t)v;
                else ((uint8_t *)x->c)[i * x->ldc + j] = (uint8_t)v;
            }
    }
}

/* The tile and whether the dot instruction is used, for the runtime. */
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
         * 48-wide ones (256 = 4 x 64 but 6 x 48 - 32); C up to 32 wide: 32. */
        int64_t pad3 = (n + 47) / 48 * 48 - n, pad4 = (n + 63) / 64 * 64 - n;
        if (n <= 32) {
            c->nv = 2;
        } else if (pad4 < pad3 && (c->dot || !bf16)) {
            c->nv = 4;
            c->mr = 6;
        }
    } else {
        c->nv = 2;
        c->mr = c->dot ? 6 : bf16 ? 3 : 5;
    }
}

static fj_status get_kernel(fj_runtime *rt, const kg_lowp_cfg *c, fj_kernel **out) {
    fj_status s = kg_lowp_check(c);
    if (s != FJ_OK) return s;
    char name[96];
    kg_lowp_name(c, name, sizeof name);
    rt_kdesc d = {c, sizeof *c, name, KG_LOWP_NARGS, kg_lowp, c};
    return rt_kernel_acquire(rt, &d, out);
}

/* This thread's last kernels (the packed-A one and the in-place one):
 * calls repeating a shape skip naming the kernel and the kernel table.
 * The memo holds a reference (rt_khold_set bounds how many may), dropped
 * when the thread exits or the slot is reused. */
static _Thread_local struct lp_memo {
    kg_lowp_cfg cfg;
    uint64_t serial;   /* the runtime's: tells it from a later one at its address */
    rt_khold hold;
} lp_memo[2];
static _Thread_local int lp_memo_hook;
static pthread_key_t lp_memo_key;
static pthread_once_t lp_memo_once = PTHREAD_ONCE_INIT;
static int lp_memo_key_ok;

static void lp_memo_exit(void *arg) {
    (void)arg;
    for (int i = 0; i < 2; i++) rt_khold_drop(&lp_memo[i].hold);
}
static void lp_memo_key_init(void) {
    lp_memo_key_ok = pthread_key_create(&lp_memo_key, lp_memo_exit) == 0;
}

/* The kernel of cfg: *fn to call; *ref a reference the caller drops after
 * the call (NULL when the memo holds the kernel). */
static fj_status memo_kernel(fj_runtime *rt, const kg_lowp_cfg *cfg, int slot, kg_lowp_fn *fn,
                             fj_kernel **ref) {
    struct lp_memo *m = &lp_memo[slot];
    *ref = NULL;
    if (m->hold.k && m->hold.rt == rt && m->serial == rt->serial &&
        !memcmp(&m->cfg, cfg, sizeof *cfg)) {
        *fn = (kg_lowp_fn)rt_kernel_fn(m->hold.k);
        return FJ_OK;
    }
    fj_kernel *k = NULL;
    fj_status s = get_kernel(rt, cfg, &k);
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

static void *aligned_part(uint8_t **cur, size_t bytes) {
    uint8_t *p = (uint8_t *)(((uintptr_t)*cur + 63) & ~(uintptr_t)63);
    *cur = p + bytes;
    return p;
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

static fj_status lp_run_call(fj_runtime *rt, const lp_call *x, const lp_post *po) {
    if (x->m == 0 || x->n == 0) return FJ_OK;
    int bf16 = x->kind == LP_BF16;
    if (x->k == 0 && !po) { no_product(x); return FJ_OK; }
    lp_run r;
    memset(&r, 0, sizeof r);
    r.x = x;
    r.post = po;
    if (po) {
        r.cfg = *po->cfg;
    } else {
        choose_cfg(rt, bf16, x->n, &r.cfg);
        r.general = !bf16 && !(x->alpha == 1.0f && (x->beta == 0.0f || x->beta == 1.0f));
        r.cfg.add = bf16 ? x->beta != 0.0f : (!r.general && x->beta == 1.0f);
    }
    r.es = bf16 ? 2 : 1;
    r.kgrp = 4 / r.es;
    r.lanes = rt->isa == FJ_ISA_AVX512 ? 16 : 8;
    r.nr = r.cfg.nv * r.lanes;
    r.kq = (x->k + r.kgrp - 1) / r.kgrp;
    if (r.kq == 0) r.kq = 1;  /* a handle with k = 0: one group of zeros */
    r.mtiles = (x->m + r.cfg.mr - 1) / r.cfg.mr;
    r.npan = (x->n + r.nr - 1) / r.nr;
    r.a_tile = r.kq * r.cfg.mr * 4;
    r.b_pan = r.kq * r.nr * 4;
    int threads = rt_threads(rt);
    /* Row blocks of about 96 rows, more of them when threads would idle. */
    int64_t tpb = (96 + r.cfg.mr - 1) / r.cfg.mr;
    if (threads > 1 && r.mtiles < tpb * 4 * threads) {
        tpb = r.mtiles / (4 * threads);
        if (tpb < 1) tpb = 1;
    }
    r.tiles_per_blk = tpb;
    r.nblk = (r.mtiles + tpb - 1) / tpb;

    r.nbch = (r.kq + LP_GCH - 1) / LP_GCH;
    size_t bytes = (size_t)(r.mtiles * r.a_tile + r.npan * r.b_pan) + 7 * 64 +
                   (size_t)(r.nbch * r.npan * r.nr) * 4 +
                   (size_t)(r.npan * r.nr + r.mtiles * r.cfg.mr) * 4 * 2 +
                   (r.general || (po && po->narrow_after) ? (size_t)(x->m * x->n) * 4 : 0);
    uint8_t *mem = fj_malloc(bytes), *cur = mem;
    if (!mem) return fj_fail(FJ_ERR_NO_MEMORY, "gemm: out of memory (%zu bytes of packed operands)",
                             bytes);
    r.pa = aligned_part(&cur, (size_t)(r.mtiles * r.a_tile));
    r.pb = aligned_part(&cur, (size_t)(r.npan * r.b_pan));
    r.colterm = aligned_part(&cur, (size_t)(r.npan * r.nr) * 4);
    r.colsum = aligned_part(&cur, (size_t)(r.npan * r.nr) * 4);
    r.cspart = aligned_part(&cur, (size_t)(r.nbch * r.npan * r.nr) * 4);
    r.rowterm = aligned_part(&cur, (size_t)(r.mtiles * r.cfg.mr) * 4);
    r.rowsum = aligned_part(&cur, (size_t)(r.mtiles * r.cfg.mr) * 4);
    if (r.general || (po && po->narrow_after))
        r.scratch = aligned_part(&cur, (size_t)(x->m * x->n) * 4);

    fj_kernel *kern = NULL, *kern_rows = NULL;
    if (po) {
        r.fn = po->fn;
    } else {
        fj_status s = memo_kernel(rt, &r.cfg, 0, &r.fn, &kern);
        /* Row-major u8 A whose rows hold whole k groups: full tiles read A
         * in place (no packing pass over A). */
        if (s == FJ_OK && (x->kind == LP_INT8 || x->kind == LP_BF16) && !x->ta &&
            x->k % r.kgrp == 0 && r.cfg.mr <= 8) {
            kg_lowp_cfg cr = r.cfg;
            cr.a_rows = 1;
            s = memo_kernel(rt, &cr, 1, &r.fn_rows, &kern_rows);
        }
        if (s != FJ_OK) {
            if (kern) rt_kernel_unref(kern);
            fj_free(mem);
            return s;
        }
    }

    if (r.fn_rows) {
        /* Row sums only matter with bo; only a partial last tile is packed. */
        for (int64_t i = 0; i < r.mtiles * r.cfg.mr; i++) r.rowsum[i] = 0;
        if (x->kind == LP_INT8 && x->bo)
            for (int64_t i = 0; i < x->m; i++) {
                const uint8_t *row = (const uint8_t *)x->a + i * x->lda;
                uint32_t sum = 0;
                for (int64_t kk = 0; kk < x->k; kk++) sum += row[kk];
                r.rowsum[i] = (int32_t)sum;
            }
        if (x->m % r.cfg.mr) pack_a_tile(&r, r.mtiles - 1);
    } else {
        rt_parallel(rt, r.mtiles, threads, pack_a_tile, &r);
    }
    if (!bf16 && !x->tb) {
        rt_parallel(rt, r.nbch, threads, pack_b_rows, &r);
        for (int64_t j = 0; j < r.npan * r.nr; j++) {
            uint32_t t = 0;
            for (int64_t ch = 0; ch < r.nbch; ch++) t += r.cspart[ch * r.npan * r.nr + j];
            r.colsum[j] = (int32_t)t;
        }
    } else {
        rt_parallel(rt, r.npan, threads, pack_b_panel, &r);
    }
    if (!bf16) {
        /* Offsets folded into per-column and per-row terms (mod 2^32). */
        uint32_t ao = (uint32_t)x->ao + (x->kind == LP_S8S8 ? 128u : 0u);
        uint32_t kab = (uint32_t)x->k * (uint32_t)x->ao * (uint32_t)x->bo;
        char o = x->offsetc;
        int fused_co = !r.general && !po;
        for (int64_t j = 0; j < r.npan * r.nr; j++) {
            uint32_t t = 0;
            if (j < x->n) {
                t = kab - ao * (uint32_t)r.colsum[j];
                if (fused_co && (o == 'F' || o == 'f')) t += (uint32_t)x->co[0];
                if (fused_co && (o == 'R' || o == 'r')) t += (uint32_t)x->co[j];
            }
            r.colterm[j] = (int32_t)t;
        }
        for (int64_t i = 0; i < r.mtiles * r.cfg.mr; i++) {
            uint32_t t = 0;
            if (i < x->m) {
                t = 0u - (uint32_t)x->bo * (uint32_t)r.rowsum[i];
                if (fused_co && (o == 'C' || o == 'c')) t += (uint32_t)x->co[i];
            }
            r.rowterm[i] = (int32_t)t;
        }
    }
    rt_parallel(rt, r.nblk, threads, run_block, &r);
    if (kern) rt_kernel_unref(kern);
    if (kern_rows) rt_kernel_unref(kern_rows);
    fj_free(mem);
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
    choose_cfg(rt, kind == LP_BF16, d->n, &g->cfg);
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
    fj_status s = get_kernel(rt, &g->cfg, &g->kern);
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
