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

typedef struct lp_run {
    const lp_call *x;
    kg_lowp_cfg cfg;
    kg_lowp_fn fn;
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
static void interleave4(const int8_t *restrict r0, int64_t ld, uint32_t *restrict dst,
                        uint32_t *restrict cs, int cols) {
    const int8_t *restrict r1 = r0 + ld, *restrict r2 = r1 + ld, *restrict r3 = r2 + ld;
    for (int j = 0; j < cols; j++) {
        dst[j] = (uint32_t)(uint8_t)r0[j] | (uint32_t)(uint8_t)r1[j] << 8 |
                 (uint32_t)(uint8_t)r2[j] << 16 | (uint32_t)(uint8_t)r3[j] << 24;
        cs[j] += (uint32_t)(r0[j] + r1[j] + r2[j] + r3[j]);
    }
}

/* Column panel q of B: for each k group, nr columns of 4 bytes; column sums. */
static void pack_b_panel(void *ctx, int64_t q) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int nr = r->nr;
    uint8_t *d = r->pb + q * r->b_pan;
    memset(d, 0, (size_t)r->b_pan);
    int64_t j0 = q * nr, cols = x->n - j0 < nr ? x->n - j0 : nr;
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
    int es_c = 4;
    char *cbase = r->general ? (char *)r->scratch : (char *)x->c;
    int64_t ldc = r->general ? x->n : x->ldc;
    for (int64_t q = 0; q < r->npan; q++) {
        int64_t j0 = q * r->nr;
        int64_t cols = x->n - j0 < r->nr ? x->n - j0 : r->nr;
        kg_lowp_args g;
        memset(&g, 0, sizeof g);
        g.a = r->pa + t0 * r->a_tile;
        g.b = r->pb + q * r->b_pan;
        g.c = cbase + (i0 * ldc + j0) * es_c;
        g.colterm = bf16 ? NULL : r->colterm + j0;
        g.rowterm = bf16 ? NULL : r->rowterm + t0 * mr;
        g.kq = r->kq;
        g.ntiles = t1 - t0;
        g.last_rows = i1 - (t1 - 1) * mr;
        g.a_tile = r->a_tile;
        g.c_tile = (int64_t)mr * ldc * es_c;
        g.ldc = ldc * es_c;
        g.alpha = x->alpha;
        g.beta = x->beta;
        for (int v = 0; v < r->cfg.nv; v++) {
            int64_t w = cols - (int64_t)v * r->lanes;
            w = w < 0 ? 0 : w > r->lanes ? r->lanes : w;
            g.kmask[v] = (uint32_t)((1u << w) - 1u);
            for (int l = 0; l < 8; l++) g.ymask[v][l] = l < w ? -1 : 0;
        }
        r->fn(&g);
    }
    if (r->general) finish_rows(r, i0, i1);
}

/* The tile and whether the dot instruction is used, for the runtime. */
static void choose_cfg(const fj_runtime *rt, int bf16, kg_lowp_cfg *c) {
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

static fj_status lp_run_call(fj_runtime *rt, const lp_call *x) {
    if (x->m == 0 || x->n == 0) return FJ_OK;
    if (x->k == 0) { no_product(x); return FJ_OK; }
    int bf16 = x->kind == LP_BF16;
    lp_run r;
    memset(&r, 0, sizeof r);
    r.x = x;
    choose_cfg(rt, bf16, &r.cfg);
    r.general = !bf16 && !(x->alpha == 1.0f && (x->beta == 0.0f || x->beta == 1.0f));
    r.cfg.add = bf16 ? x->beta != 0.0f : (!r.general && x->beta == 1.0f);
    r.es = bf16 ? 2 : 1;
    r.kgrp = 4 / r.es;
    r.lanes = rt->isa == FJ_ISA_AVX512 ? 16 : 8;
    r.nr = r.cfg.nv * r.lanes;
    r.kq = (x->k + r.kgrp - 1) / r.kgrp;
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
                   (r.general ? (size_t)(x->m * x->n) * 4 : 0);
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
    if (r.general) r.scratch = aligned_part(&cur, (size_t)(x->m * x->n) * 4);

    fj_kernel *kern = NULL;
    fj_status s = get_kernel(rt, &r.cfg, &kern);
    if (s != FJ_OK) { fj_free(mem); return s; }
    r.fn = (kg_lowp_fn)rt_kernel_fn(kern);

    rt_parallel(rt, r.mtiles, threads, pack_a_tile, &r);
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
        int fused_co = !r.general;
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
    rt_kernel_unref(kern);
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
    return lp_run_call(rt, x);
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
