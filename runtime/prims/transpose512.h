/* transpose512.h: the 16x16 transpose of 32-bit elements in zmm registers, for the AVX-512 packers. */
#ifndef FJ_RT_TRANSPOSE512_H
#define FJ_RT_TRANSPOSE512_H

#include <immintrin.h>

/* r[c] := column c of the 16x16 block whose rows are r[0..15]. */
static inline __attribute__((target("avx512f"))) void transpose16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* Within each 128-bit lane L: r[4q + c] holds column 4L + c of rows 4q..4q+3. */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        r[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        r[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xee);
        r[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        r[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xee);
    }
    /* Gather the four 128-bit pieces of each column. */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(r[c], r[c + 4], 0x88);
        t[c + 4] = _mm512_shuffle_f32x4(r[c], r[c + 4], 0xdd);
        t[c + 8] = _mm512_shuffle_f32x4(r[c + 8], r[c + 12], 0x88);
        t[c + 12] = _mm512_shuffle_f32x4(r[c + 8], r[c + 12], 0xdd);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0x88);
        r[c + 4] = _mm512_shuffle_f32x4(t[c + 4], t[c + 12], 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(t[c], t[c + 8], 0xdd);
        r[c + 12] = _mm512_shuffle_f32x4(t[c + 4], t[c + 12], 0xdd);
    }
}

/* The same for dwords (the shuffles move bits, whatever the type). */
static inline __attribute__((target("avx512f"))) void transpose16i(__m512i r[16]) {
    __m512 f[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) f[i] = _mm512_castsi512_ps(r[i]);
    transpose16(f);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_castps_si512(f[i]);
}

#endif
