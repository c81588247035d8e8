/* gemm_lowp_pack.c: packing A tiles and B panels for the int8/bf16 GEMM (k in groups of 4 bytes), with their sums.
 *
 * Layouts are kg_lowp_args' (gemm_lowp_gen.h): a k group is one dword, 4
 * int8 or 2 bf16 of consecutive k. A row of A (not transposed) or a column
 * of B (transposed) already holds its groups as consecutive dwords, so
 * those copy a dword at a time; row-major B and transposed A interleave
 * 4 (int8) or 2 (bf16) rows into dwords. With the AVX-512 runtime the
 * row-major B panels, the packing most calls do, interleave 64 columns at
 * a time; other runtimes take 16 (SSSE3, which every AVX2 CPU has). Sums
 * are only formed where an offset uses them. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/prims/gemm_lowp_int.h"
#include "runtime/prims/transpose512.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* ---- A ------------------------------------------------------------------ */

static void pack_at_512(lp_run *r, int64_t t, uint8_t *d);

void lp_pack_a_tile(void *ctx, int64_t t) {
    lp_run *r = ctx;
    const lp_call *x = r->x;
    int mr = r->cfg.mr;
    uint8_t *d = r->pa + (t - r->pa_t0) * r->a_tile;
    memset(d, 0, (size_t)r->a_tile);
    if (x->ta && r->avx512 && mr <= 8) {
        pack_at_512(r, t, d);
        return;
    }
    for (int i = 0; i < mr; i++) {
        int64_t gi = t * mr + i;
        if (gi >= x->m) break;
        if (!x->ta) {
            /* Row-major A: a row's k groups are 4 contiguous bytes each;
             * s8 A + 128 is its bit pattern with the sign bits flipped. */
            const uint8_t *src = (const uint8_t *)x->a + gi * x->lda * r->es;
            int64_t bytes = x->k * r->es, full = bytes / 4;
            uint32_t flip = x->kind == LP_S8S8 ? 0x80808080u : 0u;
            for (int64_t gq = 0; gq < full; gq++) {
                uint32_t w;
                memcpy(&w, src + gq * 4, 4);
                w ^= flip;
                memcpy(d + (gq * mr + i) * 4, &w, 4);
            }
            if (bytes > full * 4) {
                uint32_t w = 0;
                memcpy(&w, src + full * 4, (size_t)(bytes - full * 4));
                w ^= flip & ((1u << ((bytes - full * 4) * 8)) - 1u);
                memcpy(d + (full * mr + i) * 4, &w, 4);
            }
            if (r->need_rowsum) {
                uint32_t sum = 0;
                if (x->kind == LP_INT8)
                    for (int64_t kk = 0; kk < x->k; kk++) sum += src[kk];
                else
                    for (int64_t kk = 0; kk < x->k; kk++) sum += (uint32_t)(int32_t)(int8_t)src[kk];
                r->rowsum[gi] = (int32_t)sum;
            }
            continue;
        }
        if (x->kind == LP_BF16) {
            const uint16_t *a = x->a;
            for (int64_t kk = 0; kk < x->k; kk++)
                memcpy(d + ((kk / 2) * mr + i) * 4 + (kk & 1) * 2, &a[kk * x->lda + gi], 2);
            continue;
        }
        const uint8_t *a = x->a;
        uint32_t sum = 0;
        for (int64_t kk = 0; kk < x->k; kk++) {
            uint8_t v = a[kk * x->lda + gi];
            sum += x->kind == LP_INT8 ? v : (uint32_t)(int32_t)(int8_t)v;
            d[((kk / 4) * mr + i) * 4 + (kk & 3)] = (uint8_t)(x->kind == LP_S8S8 ? v ^ 0x80 : v);
        }
        if (r->need_rowsum) r->rowsum[gi] = (int32_t)sum;
    }
}

/* ---- B, SSSE3 ----------------------------------------------------------- */

/* dst[j] = the bytes of four rows' column j; with cs, cs[j] += their sum
 * (s8). restrict: the byte rows cannot alias the dwords. */
__attribute__((target("ssse3"))) static void interleave4(const int8_t *restrict r0, int64_t ld,
                                                        uint32_t *restrict dst,
                                                        uint32_t *restrict cs, int cols) {
    const int8_t *restrict r1 = r0 + ld, *restrict r2 = r1 + ld, *restrict r3 = r2 + ld;
    /* 16 columns at a time: byte and word unpacks make the dwords; the
     * column sums are vpmaddubsw against bytes of 1 (u8 1 x s8) and
     * vpmaddwd against words of 1. */
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
            if (!cs) continue;
            __m128i sum = _mm_madd_epi16(_mm_maddubs_epi16(ones8, o[q]), ones16);
            __m128i old = _mm_loadu_si128((const __m128i *)(const void *)(cs + j + 4 * q));
            _mm_storeu_si128((__m128i *)(void *)(cs + j + 4 * q), _mm_add_epi32(old, sum));
        }
    }
    for (; j < cols; j++) {
        dst[j] = (uint32_t)(uint8_t)r0[j] | (uint32_t)(uint8_t)r1[j] << 8 |
                 (uint32_t)(uint8_t)r2[j] << 16 | (uint32_t)(uint8_t)r3[j] << 24;
        if (cs) cs[j] += (uint32_t)(r0[j] + r1[j] + r2[j] + r3[j]);
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

/* Row-major B, any runtime: groups of kgrp rows interleaved column by column. */
static void pack_b_rows_any(const lp_run *r, int64_t j0, int cols, uint32_t *d, uint32_t *cs) {
    const lp_call *x = r->x;
    int nr = r->nr;
    int64_t g = 0;
    if (r->es == 1) {
        for (; (g + 1) * 4 <= x->k; g++)
            interleave4((const int8_t *)x->b + g * 4 * x->ldb + j0, x->ldb, d + g * nr, cs, cols);
    } else {
        const uint16_t *b = x->b;
        for (; (g + 1) * 2 <= x->k; g++)
            interleave2(b + g * 2 * x->ldb + j0, x->ldb, d + g * nr, cols);
    }
    /* The last, partial group: its missing rows are zeros. */
    for (; g < r->kq; g++)
        for (int j = 0; j < cols; j++) {
            uint32_t w = 0;
            for (int q = 0; q < r->kgrp && g * r->kgrp + q < x->k; q++) {
                int64_t o = (g * r->kgrp + q) * x->ldb + j0 + j;
                if (r->es == 2) {
                    w |= (uint32_t)((const uint16_t *)x->b)[o] << (16 * q);
                } else {
                    int8_t v = ((const int8_t *)x->b)[o];
                    w |= (uint32_t)(uint8_t)v << (8 * q);
                    if (cs) cs[j] += (uint32_t)(int32_t)v;
                }
            }
            d[g * nr + j] = w;
        }
}

/* ---- B, AVX-512BW ------------------------------------------------------- */

/* Row-major int8 B, 64 columns at a time: byte then word unpacks make the
 * dwords of four rows within each 128-bit lane (lane L of output q holds
 * columns 16L + 4q..+3), and a 4x4 transpose of the lanes puts 16
 * consecutive columns in each vector. Column sums stay in registers over k
 * (vpmaddubsw against bytes of 1, vpmaddwd against words of 1). Masked
 * loads read only the panel's columns and give zeros beyond them. */
/* Four rows (64 columns each) into the dwords of 64 columns, in column order. */
static inline T512 void dwords4x64(__m512i v0, __m512i v1, __m512i v2, __m512i v3, __m512i o[4]) {
    __m512i abl = _mm512_unpacklo_epi8(v0, v1), abh = _mm512_unpackhi_epi8(v0, v1);
    __m512i cdl = _mm512_unpacklo_epi8(v2, v3), cdh = _mm512_unpackhi_epi8(v2, v3);
    __m512i x0 = _mm512_unpacklo_epi16(abl, cdl), x1 = _mm512_unpackhi_epi16(abl, cdl);
    __m512i x2 = _mm512_unpacklo_epi16(abh, cdh), x3 = _mm512_unpackhi_epi16(abh, cdh);
    __m512i y0 = _mm512_shuffle_i32x4(x0, x1, 0x44), y1 = _mm512_shuffle_i32x4(x2, x3, 0x44);
    __m512i y2 = _mm512_shuffle_i32x4(x0, x1, 0xee), y3 = _mm512_shuffle_i32x4(x2, x3, 0xee);
    o[0] = _mm512_shuffle_i32x4(y0, y1, 0x88);
    o[1] = _mm512_shuffle_i32x4(y0, y1, 0xdd);
    o[2] = _mm512_shuffle_i32x4(y2, y3, 0x88);
    o[3] = _mm512_shuffle_i32x4(y2, y3, 0xdd);
}

/* Row-major int8 B, 64 columns at a time: byte then word unpacks make the
 * dwords of four rows within each 128-bit lane (lane L of output q holds
 * columns 16L + 4q..+3), and a 4x4 transpose of the lanes puts 16
 * consecutive columns in each vector. Column sums stay in registers over k
 * (vpmaddubsw against bytes of 1, vpmaddwd against words of 1). Masked
 * loads read only the panel's columns and give zeros beyond them. */
static T512 void pack_b8_512(const lp_run *r, int64_t j0, int cols, uint32_t *d, uint32_t *cs) {
    const lp_call *x = r->x;
    const int64_t ldb = x->ldb, full = x->k / 4;
    int nr = r->nr;
    const __m512i ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
    for (int jc = 0; jc < nr; jc += 64) {
        const int8_t *b = (const int8_t *)x->b + j0 + jc;
        int w = cols - jc, nvec = (nr - jc) / 16 < 4 ? (nr - jc) / 16 : 4;
        __mmask64 km = w >= 64 ? ~(__mmask64)0 : w <= 0 ? 0 : (((__mmask64)1 << w) - 1);
        __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
        uint32_t *dg = d + jc;
        for (int64_t g = 0; g < r->kq; g++, b += 4 * ldb, dg += nr) {
            __m512i o[4], z = _mm512_setzero_si512();
            if (g < full) {
                dwords4x64(_mm512_maskz_loadu_epi8(km, b), _mm512_maskz_loadu_epi8(km, b + ldb),
                           _mm512_maskz_loadu_epi8(km, b + 2 * ldb),
                           _mm512_maskz_loadu_epi8(km, b + 3 * ldb), o);
            } else {
                /* The last, partial group: rows past k are zeros (a
                 * handle's k = 0 reads no row: B may be NULL). */
                int64_t left = x->k - 4 * g;
                dwords4x64(left > 0 ? _mm512_maskz_loadu_epi8(km, b) : z,
                           left > 1 ? _mm512_maskz_loadu_epi8(km, b + ldb) : z,
                           left > 2 ? _mm512_maskz_loadu_epi8(km, b + 2 * ldb) : z, z, o);
            }
            _mm512_storeu_si512((void *)dg, o[0]);
            if (nvec > 1) _mm512_storeu_si512((void *)(dg + 16), o[1]);
            if (nvec > 2) _mm512_storeu_si512((void *)(dg + 32), o[2]);
            if (nvec > 3) _mm512_storeu_si512((void *)(dg + 48), o[3]);
            if (cs)
                for (int q = 0; q < 4; q++)
                    s[q] = _mm512_add_epi32(s[q], _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, o[q]),
                                                                    ones16));
        }
        if (cs)
            for (int q = 0; q < nvec; q++) _mm512_storeu_si512((void *)(cs + jc + 16 * q), s[q]);
    }
}

/* Row-major bf16 B: each pair of rows (a k group) across the whole panel
 * at once, so that the panel's lines of both rows are read together; word
 * i of an output vector is word i/2 of row k (i even) or of row k+1 (i
 * odd), one two-source word permute per 16 columns. */
static T512 void pack_b16_512(const lp_run *r, int64_t j0, int cols, uint32_t *d) {
    const lp_call *x = r->x;
    const uint16_t *b = (const uint16_t *)x->b + j0;
    int nr = r->nr, nch = (nr + 31) / 32;
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    __mmask32 km[4];
    for (int c = 0; c < nch; c++) {
        int w = cols - 32 * c;
        km[c] = w >= 32 ? ~(__mmask32)0 : w <= 0 ? 0 : (((__mmask32)1 << w) - 1);
    }
    for (int64_t g = 0; g < r->kq; g++) {
        int64_t k0 = 2 * g;
        const uint16_t *r0 = b + k0 * x->ldb, *r1 = r0 + x->ldb;
        int has0 = k0 < x->k, has1 = k0 + 1 < x->k;
        uint32_t *dg = d + g * nr;
        for (int c = 0; c < nch; c++) {
            __m512i v0 = has0 ? _mm512_maskz_loadu_epi16(km[c], r0 + 32 * c) : _mm512_setzero_si512();
            __m512i v1 = has1 ? _mm512_maskz_loadu_epi16(km[c], r1 + 32 * c) : _mm512_setzero_si512();
            _mm512_storeu_si512((void *)(dg + 32 * c), _mm512_permutex2var_epi16(v0, lo_idx, v1));
            if (nr - 32 * c > 16)
                _mm512_storeu_si512((void *)(dg + 32 * c + 16), _mm512_permutex2var_epi16(v0, hi_idx, v1));
        }
    }
}

/* Transposed A, one tile: each k group's mr dwords are the tile's columns
 * of 4 rows of A's storage (int8, interleaved bytes) or 2 (bf16, words),
 * formed in a 128-bit register and stored under a mask of the tile's rows
 * (the rest stays zero). Row sums (u8, or s8 before the +128 flip) stay in
 * a register over k. */
static T512 void pack_at_512(lp_run *r, int64_t t, uint8_t *d) {
    const lp_call *x = r->x;
    int mr = r->cfg.mr;
    int64_t i0 = t * mr, rows = x->m - i0 < mr ? x->m - i0 : mr, lda = x->lda;
    __mmask16 km = (__mmask16)((1u << rows) - 1);
    if (x->kind == LP_BF16) {
        const uint16_t *a = (const uint16_t *)x->a + i0;
        for (int64_t g = 0; g < r->kq; g++) {
            __m128i v0 = 2 * g < x->k ? _mm_maskz_loadu_epi16((__mmask8)km, a + 2 * g * lda)
                                      : _mm_setzero_si128();
            __m128i v1 = 2 * g + 1 < x->k ? _mm_maskz_loadu_epi16((__mmask8)km, a + (2 * g + 1) * lda)
                                          : _mm_setzero_si128();
            __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(v0, v1)),
                                                _mm_unpackhi_epi16(v0, v1), 1);
            _mm256_mask_storeu_epi32(d + g * mr * 4, (__mmask8)km, w);
        }
        return;
    }
    const uint8_t *a = (const uint8_t *)x->a + i0;
    const __m128i flip = _mm_set1_epi8(x->kind == LP_S8S8 ? (char)0x80 : 0), z = _mm_setzero_si128();
    const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
    __m128i s[2] = {z, z};
    for (int64_t g = 0; g < r->kq; g++) {
        __m128i v[4];
        for (int q = 0; q < 4; q++)
            v[q] = 4 * g + q < x->k ? _mm_maskz_loadu_epi8(km, a + (4 * g + q) * lda) : z;
        __m128i ab = _mm_unpacklo_epi8(v[0], v[1]), cd = _mm_unpacklo_epi8(v[2], v[3]);
        __m128i o[2] = {_mm_unpacklo_epi16(ab, cd), _mm_unpackhi_epi16(ab, cd)};
        for (int h = 0; h < 2; h++) {
            if (!r->need_rowsum) continue;
            __m128i p = x->kind == LP_INT8 ? _mm_maddubs_epi16(o[h], ones8)
                                            : _mm_maddubs_epi16(ones8, o[h]);
            s[h] = _mm_add_epi32(s[h], _mm_madd_epi16(p, ones16));
        }
        /* s8 A + 128: the sign bits of the loaded bytes flipped (k padding stays 0) */
        for (int q = 0; q < 4 && 4 * g + q < x->k; q++) v[q] = _mm_xor_si128(v[q], flip);
        ab = _mm_unpacklo_epi8(v[0], v[1]);
        cd = _mm_unpacklo_epi8(v[2], v[3]);
        __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(ab, cd)),
                                            _mm_unpackhi_epi16(ab, cd), 1);
        _mm256_mask_storeu_epi32(d + g * mr * 4, (__mmask8)km, w);
    }
    if (r->need_rowsum) {
        int32_t sums[8];
        _mm_storeu_si128((__m128i *)(void *)sums, s[0]);
        _mm_storeu_si128((__m128i *)(void *)(sums + 4), s[1]);
        for (int64_t i = 0; i < rows; i++) r->rowsum[i0 + i] = sums[i];
    }
}

/* Transposed B: column j's k groups are consecutive dwords of B's row j,
 * so 16 columns x 16 groups go through one 16x16 dword transpose (masked
 * loads: zeros past the panel's columns and the row's whole dwords); a
 * partial last group (k*es not a multiple of 4) is copied per column. */
static T512 void pack_bt_512(const lp_run *r, int64_t j0, int cols, uint32_t *d, uint32_t *cs) {
    const lp_call *x = r->x;
    int nr = r->nr;
    int64_t rowb = x->ldb * r->es, bytes = x->k * r->es, full = bytes / 4;
    const uint8_t *b = (const uint8_t *)x->b + j0 * rowb;
    const __m512i ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1), z = _mm512_setzero_si512();
    for (int jc = 0; jc < nr; jc += 16) {
        int w = cols - jc;
        __m512i s = z;
        for (int64_t g = 0; g < full; g += 16) {
            int gn = full - g < 16 ? (int)(full - g) : 16;
            __mmask16 gm = (__mmask16)((1u << gn) - 1);
            __m512i v[16];
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++)
                v[q] = q < w ? _mm512_maskz_loadu_epi32(gm, b + (jc + q) * rowb + g * 4) : z;
            transpose16i(v);
            for (int q = 0; q < gn; q++) {
                _mm512_storeu_si512((void *)(d + (g + q) * nr + jc), v[q]);
                if (cs) s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, v[q]), ones16));
            }
        }
        if (cs) _mm512_storeu_si512((void *)(cs + jc), s);
        if (bytes == full * 4) continue;
        for (int q = 0; q < 16; q++) {
            uint32_t dw = 0;
            if (q < w) {
                const uint8_t *src = b + (jc + q) * rowb + full * 4;
                memcpy(&dw, src, (size_t)(bytes - full * 4));
                for (int64_t e = 0; cs && e < bytes - full * 4; e++)
                    cs[jc + q] += (uint32_t)(int32_t)(int8_t)src[e];
            }
            d[full * nr + jc + q] = dw;
        }
    }
}

/* ---- B panels --------------------------------------------------------- */

void lp_pack_b_panel(const lp_run *r, int64_t q, uint8_t *dst, int32_t *colsum) {
    const lp_call *x = r->x;
    int nr = r->nr;
    int64_t j0 = q * nr;
    int cols = (int)(x->n - j0 < nr ? x->n - j0 : nr);
    uint32_t *d = (uint32_t *)(void *)dst, *cs = r->need_colsum ? (uint32_t *)colsum : NULL;
    if (cs) memset(cs, 0, (size_t)nr * 4);
    if (r->avx512) {
        /* Every column of the panel written, padding included. */
        if (x->tb) pack_bt_512(r, j0, cols, d, cs);
        else if (r->es == 1) pack_b8_512(r, j0, cols, d, cs);
        else pack_b16_512(r, j0, cols, d);
        return;
    }
    memset(dst, 0, (size_t)r->b_pan);
    if (!x->tb) {
        pack_b_rows_any(r, j0, cols, d, cs);
        return;
    }
    /* Transposed B: column j's k groups are consecutive dwords of its row. */
    int64_t bytes = x->k * r->es, full = bytes / 4;
    for (int j = 0; j < cols; j++) {
        const uint8_t *src = (const uint8_t *)x->b + (j0 + j) * x->ldb * r->es;
        for (int64_t g = 0; g < full; g++) memcpy(d + g * nr + j, src + g * 4, 4);
        if (bytes > full * 4) memcpy(d + full * nr + j, src + full * 4, (size_t)(bytes - full * 4));
        if (cs) {
            uint32_t sum = 0;
            for (int64_t kk = 0; kk < x->k; kk++) sum += (uint32_t)(int32_t)(int8_t)src[kk];
            cs[j] = sum;
        }
    }
}
