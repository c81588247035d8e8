/* gemm_pack.c: packing of GEMM operands into kernel-friendly panels, and per-thread scratch. */
#include <pthread.h>
#include <string.h>

#include "runtime/prims/gemm_int.h"

/* ---- per-thread scratch ---------------------------------------------- */

/* Packing buffers live as long as their thread: allocating (and page
 * faulting) megabytes per call would cost more than small GEMMs do. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local void *scratch_raw;
static _Thread_local size_t scratch_cap;

static void scratch_free(void *p) { fj_free(p); }
static void scratch_init(void) { (void)pthread_key_create(&scratch_key, scratch_free); }

float *gemm_scratch(size_t floats) {
    if (floats > (SIZE_MAX - 128) / sizeof(float)) return NULL;
    size_t bytes = floats * sizeof(float) + 64;
    if (scratch_cap < bytes) {
        pthread_once(&scratch_once, scratch_init);
        void *p = fj_malloc(bytes);
        if (!p) return NULL;
        fj_free(scratch_raw);
        scratch_raw = p;
        scratch_cap = bytes;
        /* The key's destructor frees it when the thread exits. */
        (void)pthread_setspecific(scratch_key, p);
    }
    return (float *)(((uintptr_t)scratch_raw + 63) & ~(uintptr_t)63);
}

/* ---- A ---------------------------------------------------------------- */

/* Transposing copy of one micro-panel from row-major A: 8 k at a time so
 * the inner loop writes whole lines of the panel. */
static void pack_a_rows_panel(float *restrict d, const float *restrict a, int64_t lda,
                              int rows, int64_t kc, int mr) {
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        for (int i = 0; i < rows; i++) {
            const float *s = a + (int64_t)i * lda + k;
            for (int u = 0; u < 8; u++) d[u * mr + i] = s[u];
        }
        for (int i = rows; i < mr; i++)
            for (int u = 0; u < 8; u++) d[u * mr + i] = 0.0f;
        d += 8 * mr;
    }
    for (; k < kc; k++) {
        for (int i = 0; i < rows; i++) d[i] = a[(int64_t)i * lda + k];
        for (int i = rows; i < mr; i++) d[i] = 0.0f;
        d += mr;
    }
}

void gemm_pack_a(float *dst, const float *a, int64_t lda, int ta, int64_t rows, int64_t kc,
                 int mr, int avx512) {
    if (avx512 && !ta && mr <= 16) {
        gemm_pack_a512(dst, a, lda, rows, kc, mr);
        return;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
        int r = rows - i0 < mr ? (int)(rows - i0) : mr;
        float *d = dst + i0 * kc;
        if (ta) {
            /* A^T in memory: each k is already a contiguous run of rows. */
            const float *s = a + i0;
            for (int64_t k = 0; k < kc; k++, d += mr, s += lda) {
                memcpy(d, s, (size_t)r * sizeof(float));
                for (int i = r; i < mr; i++) d[i] = 0.0f;
            }
        } else {
            pack_a_rows_panel(d, a + i0 * lda, lda, r, kc, mr);
        }
    }
}

void gemm_copy_rows(float *dst, const float *a, int64_t lda, int64_t rows, int64_t kc, int mr) {
    for (int64_t i = 0; i < mr; i++) {
        if (i < rows) memcpy(dst + i * kc, a + i * lda, (size_t)kc * sizeof(float));
        else memset(dst + i * kc, 0, (size_t)kc * sizeof(float));
    }
}

/* ---- B ---------------------------------------------------------------- */

/* One row of B (w <= nr floats) into a panel row, zero padded. The fixed
 * sizes let the compiler use whole-vector moves. */
static inline void copy_row(float *restrict d, const float *restrict s, int w, int nr) {
    if (w == nr) {
        switch (nr) {
        case 8: memcpy(d, s, 8 * sizeof(float)); return;
        case 16: memcpy(d, s, 16 * sizeof(float)); return;
        case 32: memcpy(d, s, 32 * sizeof(float)); return;
        case 64: memcpy(d, s, 64 * sizeof(float)); return;
        default: break;
        }
    }
    memcpy(d, s, (size_t)w * sizeof(float));
    for (int j = w; j < nr; j++) d[j] = 0.0f;
}

void gemm_pack_b(float *dst, const float *b, int64_t ldb, int tb, int64_t kc, int64_t cols,
                 int nr, int avx512) {
    if (avx512 && nr % 16 == 0) {
        if (tb) gemm_pack_bt512(dst, b, ldb, kc, cols, nr);
        else gemm_pack_b512(dst, b, ldb, kc, cols, nr);
        return;
    }
    if (!tb) {
        /* Row by row of B (contiguous reads), scattering into the panels. */
        int64_t npan = (cols + nr - 1) / nr;
        for (int64_t k = 0; k < kc; k++) {
            const float *s = b + k * ldb;
            float *d = dst + k * nr;
            for (int64_t p = 0; p < npan; p++, d += nr * kc, s += nr) {
                int w = cols - p * nr < nr ? (int)(cols - p * nr) : nr;
                copy_row(d, s, w, nr);
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        int w = cols - j0 < nr ? (int)(cols - j0) : nr;
        float *d = dst + j0 * kc;
        /* B^T in memory: column j of B is row j; 8 k at a time. */
        const float *s = b + j0 * ldb;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            for (int j = 0; j < w; j++) {
                const float *r = s + (int64_t)j * ldb + k;
                for (int u = 0; u < 8; u++) d[u * nr + j] = r[u];
            }
            for (int j = w; j < nr; j++)
                for (int u = 0; u < 8; u++) d[u * nr + j] = 0.0f;
            d += 8 * nr;
        }
        for (; k < kc; k++, d += nr) {
            for (int j = 0; j < w; j++) d[j] = s[(int64_t)j * ldb + k];
            for (int j = w; j < nr; j++) d[j] = 0.0f;
        }
    }
}
