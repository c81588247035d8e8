/* gemm_pack512.c: GEMM packers with AVX-512 (16x16 transposes, vector copies).
 *
 * Built for the AVX-512 runtime only (target attributes: the rest of the
 * library stays baseline x86-64) and used when the runtime's ISA is
 * AVX-512. A scalar transpose costs a load and a store per element, which
 * is several percent of a large GEMM; 16x16 blocks through shuffles cost a
 * fraction of that. */
#include <immintrin.h>
#include <string.h>

#include "runtime/prims/gemm_int.h"
#include "runtime/prims/transpose512.h"

#define T512 __attribute__((target("avx512f")))

/* Transposes `rows` (<= 16) rows of src (stride ld) over kc columns: for
 * each column k, lanes [0, 16) of the result go to dst + k*dstride (rows
 * past `rows` are zero). With dstride < 16 the 64-byte stores overlap:
 * each one spills into the next column's slot, which the next store
 * rewrites; the last spills up to 64 bytes past the block (the caller
 * leaves that room or rewrites it later). */
static T512 void transpose_rows(float *dst, int64_t dstride, const float *src, int64_t ld,
                                int rows, int64_t kc) {
    /* Every index into the block is a constant (unrolled loops, rows past
     * `rows` loaded under an empty mask, the last columns' stores behind a
     * test), so the block stays in registers rather than on the stack. */
    __m512 r[16];
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int kt = kc - k0 < 16 ? (int)(kc - k0) : 16;
        __mmask16 lm = (__mmask16)((1u << kt) - 1u);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const float *s = src + (i < rows ? i : 0) * ld + k0;
            r[i] = _mm512_maskz_loadu_ps(i < rows ? lm : 0, s);
            /* The rows' next lines: 16 rows of a large power-of-two stride
             * share an L1 set, so they come from L2; ask early. */
            if (i < rows) _mm_prefetch((const char *)(s + 32), _MM_HINT_T0);
        }
        transpose16(r);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            if (c < kt) _mm512_storeu_ps(dst + (k0 + c) * dstride, r[c]);
    }
}

/* Copies of whole 16-float vectors, kc rows of w (<= nr) floats from src
 * (stride ld) into a panel (stride nr), zero padded; prefetching the same
 * columns pf floats further (0: none). */
static T512 void copy_panel(float *restrict d, const float *restrict s, int64_t ld, int w,
                            int nr, int64_t kc, int64_t pf) {
    for (int64_t k = 0; k < kc; k++, d += nr, s += ld)
        for (int j = 0; j < nr; j += 16) {
            int left = w - j;
            __mmask16 m = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
            if (pf && left > 0) _mm_prefetch((const char *)(s + pf + j), _MM_HINT_T0);
            _mm512_storeu_ps(d + j, _mm512_maskz_loadu_ps(m, s + j));
        }
}

void gemm_pack_b512(float *dst, const float *b, int64_t ldb, int64_t kc, int64_t cols, int nr) {
    /* 16 rows of B at a time across all panels: reads stay within a few
     * rows, writes are 16*nr contiguous floats per panel. Each line read
     * asks for the same columns 16 rows further: 16 rows read a piece at a
     * time are more streams than the hardware prefetchers follow, and with
     * few rows of A per B block the packing is a large share of the
     * time. */
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int64_t kt = kc - k0 < 16 ? kc - k0 : 16;
        for (int64_t j0 = 0; j0 < cols; j0 += nr) {
            int w = cols - j0 < nr ? (int)(cols - j0) : nr;
            copy_panel(dst + j0 * kc + k0 * nr, b + k0 * ldb + j0, ldb, w, nr, kt,
                       k0 + 16 < kc ? 16 * ldb : 0);
        }
    }
}

T512 void gemm_pack_a512(float *dst, const float *a, int64_t lda, int ta, int64_t rows, int64_t kc,
                    int mr) {
    /* mr <= 16: one 16-row block per micro-panel. */
    /* Panels in order: each one's overlapping stores spill into the next
     * panel, which is written afterwards (the last spills into the
     * buffer's slack). */
    const __mmask16 panel = (__mmask16)((1u << mr) - 1u);
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
        int r = rows - i0 < mr ? (int)(rows - i0) : mr;
        if (!ta) {
            transpose_rows(dst + i0 * kc, mr, a + i0 * lda, lda, r, kc);
            continue;
        }
        /* A^T in memory: each k is a run of r rows, read under a mask and
         * stored as mr lanes (rows past r zero). */
        const __mmask16 m = (__mmask16)((1u << r) - 1u);
        float *d = dst + i0 * kc;
        const float *s = a + i0;
        for (int64_t k = 0; k < kc; k++, d += mr, s += lda)
            _mm512_mask_storeu_ps(d, panel, _mm512_maskz_loadu_ps(m, s));
    }
}

void gemm_pack_bt512(float *dst, const float *b, int64_t ldb, int64_t kc, int64_t cols, int nr) {
    /* nr is a multiple of 16: 16-column pieces of each panel. */
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        float *d = dst + j0 * kc;
        for (int jb = 0; jb < nr; jb += 16) {
            int64_t left = cols - j0 - jb;
            int w = left <= 0 ? 0 : left < 16 ? (int)left : 16;
            transpose_rows(d + jb, nr, b + (j0 + jb) * ldb, ldb, w, kc);
        }
    }
}
