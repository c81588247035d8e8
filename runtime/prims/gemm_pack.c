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

/* ---- the portable packers, per element type ---------------------------- */

#define T float
#define PK(name) name##_f32
#include "runtime/prims/gemm_pack_tmpl.h"
#undef T
#undef PK
#define T double
#define PK(name) name##_f64
#include "runtime/prims/gemm_pack_tmpl.h"
#undef T
#undef PK

/* ---- entry points ----------------------------------------------------- */

void gemm_pack_a(float *dst, const float *a, int64_t lda, int ta, int64_t rows, int64_t kc,
                 int mr, int isa) {
    if (isa == FJ_ISA_AVX512 && mr <= 16) gemm_pack_a512(dst, a, lda, ta, rows, kc, mr);
    else if (isa == FJ_ISA_AVX2 && mr <= 8) gemm_pack_a_avx2(dst, a, lda, ta, rows, kc, mr);
    else pack_a_f32(dst, a, lda, ta, rows, kc, mr);
}

void gemm_copy_rows(float *dst, const float *a, int64_t lda, int64_t rows, int64_t kc, int mr) {
    copy_rows_f32(dst, a, lda, rows, kc, mr);
}

void gemm_pack_b(float *dst, const float *b, int64_t ldb, int tb, int64_t kc, int64_t cols,
                 int nr, int isa) {
    if (isa == FJ_ISA_AVX512 && nr % 16 == 0) {
        if (tb) gemm_pack_bt512(dst, b, ldb, kc, cols, nr);
        else gemm_pack_b512(dst, b, ldb, kc, cols, nr);
        return;
    }
    if (isa == FJ_ISA_AVX2 && tb && nr % 8 == 0) {
        gemm_pack_bt_avx2(dst, b, ldb, kc, cols, nr);
        return;
    }
    pack_b_f32(dst, b, ldb, tb, kc, cols, nr);
}

void gemm_pack_a64(double *dst, const double *a, int64_t lda, int ta, int64_t rows, int64_t kc,
                   int mr) {
    pack_a_f64(dst, a, lda, ta, rows, kc, mr);
}

void gemm_copy_rows64(double *dst, const double *a, int64_t lda, int64_t rows, int64_t kc,
                      int mr) {
    copy_rows_f64(dst, a, lda, rows, kc, mr);
}

void gemm_pack_b64(double *dst, const double *b, int64_t ldb, int tb, int64_t kc, int64_t cols,
                   int nr) {
    pack_b_f64(dst, b, ldb, tb, kc, cols, nr);
}
