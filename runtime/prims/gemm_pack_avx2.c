/* gemm_pack_avx2.c: GEMM packers with AVX2 (8x8 transposes, vector copies).
 *
 * Built for the AVX2 runtime only (target attributes: the rest of the
 * library stays baseline x86-64) and used when the runtime's ISA is AVX2.
 * A scalar transpose costs a load and a store per element, several
 * percent of a GEMM that packs row-major A; 8x8 blocks through shuffles
 * cost a fraction of that. */
#include <immintrin.h>

#include "runtime/prims/gemm_int.h"

#define TAVX2 __attribute__((target("avx2")))

/* Lanes [0, n) of a ymm lane mask (n clamped to 0..8). */
static inline TAVX2 __m256i lane_mask(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int32_t c = n < 0 ? 0 : n > 8 ? 8 : (int32_t)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), idx);
}

/* r[c] := column c of the 8x8 block whose rows are r[0..7]. */
static inline TAVX2 void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    /* Within each 128-bit half H: u[4q + c] holds column 4H + c of rows 4q..4q+3. */
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) {
        u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xee);
        u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x20);
        r[c + 4] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x31);
    }
}

/* Transposes `rows` (<= 8, a constant in each inlined copy: rows past it
 * are zero vectors, no branches, so the block stays in registers) rows of
 * src (stride ld) over kc columns: for each column k, lanes [0, 8) of the
 * result go to dst + k*dstride. With dstride < 8 the 32-byte stores
 * overlap: each one spills into the next column's slot, which the next
 * store rewrites; the last spills up to 32 bytes past the block (the
 * caller leaves that room or rewrites it later). */
static inline __attribute__((always_inline)) TAVX2 void
transpose_rows_n(float *dst, int64_t dstride, const float *src, int64_t ld, const int rows,
                 int64_t kc) {
    __m256 r[8];
    int64_t k0 = 0;
    for (; k0 + 8 <= kc; k0 += 8) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            r[i] = i < rows ? _mm256_loadu_ps(src + i * ld + k0) : _mm256_setzero_ps();
            /* The rows' next lines: rows of a large power-of-two stride
             * share an L1 set, so they come from L2; ask early. */
            if (i < rows) _mm_prefetch((const char *)(src + i * ld + k0 + 32), _MM_HINT_T0);
        }
        transpose8(r);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(dst + (k0 + c) * dstride, r[c]);
    }
    if (k0 < kc) {
        const int kt = (int)(kc - k0);
        const __m256i km = lane_mask(kt);
        for (int i = 0; i < 8; i++)
            r[i] = i < rows ? _mm256_maskload_ps(src + i * ld + k0, km) : _mm256_setzero_ps();
        transpose8(r);
        for (int c = 0; c < kt; c++) _mm256_storeu_ps(dst + (k0 + c) * dstride, r[c]);
    }
}

static TAVX2 void transpose_rows(float *dst, int64_t dstride, const float *src, int64_t ld,
                                 int rows, int64_t kc) {
    switch (rows) {
    case 1: transpose_rows_n(dst, dstride, src, ld, 1, kc); break;
    case 2: transpose_rows_n(dst, dstride, src, ld, 2, kc); break;
    case 3: transpose_rows_n(dst, dstride, src, ld, 3, kc); break;
    case 4: transpose_rows_n(dst, dstride, src, ld, 4, kc); break;
    case 5: transpose_rows_n(dst, dstride, src, ld, 5, kc); break;
    case 6: transpose_rows_n(dst, dstride, src, ld, 6, kc); break;
    case 7: transpose_rows_n(dst, dstride, src, ld, 7, kc); break;
    case 8: transpose_rows_n(dst, dstride, src, ld, 8, kc); break;
    default: transpose_rows_n(dst, dstride, src, ld, 0, kc); break;
    }
}

TAVX2 void gemm_pack_a_avx2(float *dst, const float *a, int64_t lda, int ta, int64_t rows,
                      int64_t kc, int mr) {
    /* mr <= 8: one 8-row block per micro-panel. Panels in order: each
     * one's overlapping stores spill into the next panel, which is written
     * afterwards (the last spills into the buffer's slack). */
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
        int r = rows - i0 < mr ? (int)(rows - i0) : mr;
        float *d = dst + i0 * kc;
        if (!ta) {
            transpose_rows(d, mr, a + i0 * lda, lda, r, kc);
            continue;
        }
        /* A^T in memory: each k is a run of r rows, read under a mask
         * (rows past r zero). */
        const __m256i m = lane_mask(r);
        const float *s = a + i0;
        for (int64_t k = 0; k < kc; k++, d += mr, s += lda)
            _mm256_storeu_ps(d, _mm256_maskload_ps(s, m));
    }
}

TAVX2 void gemm_pack_bt_avx2(float *dst, const float *b, int64_t ldb, int64_t kc, int64_t cols,
                       int nr) {
    /* nr is a multiple of 8: 8-column pieces of each panel. */
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        float *d = dst + j0 * kc;
        for (int jb = 0; jb < nr; jb += 8) {
            int64_t left = cols - j0 - jb;
            int w = left <= 0 ? 0 : left < 8 ? (int)left : 8;
            transpose_rows(d + jb, nr, b + (j0 + jb) * ldb, ldb, w, kc);
        }
    }
}
