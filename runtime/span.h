/* span.h: the memory a row-major matrix argument covers, for the entry
 * points' aliasing checks. */
#ifndef FJ_SPAN_H
#define FJ_SPAN_H

#include <stdint.h>

#include "runtime/fj_base.h"

/* Bytes spanned by rows x cols floats with leading dimension ld (0 if
 * empty); 0 (failure) if that does not fit in the address space. */
FJ_INTERNAL int rt_span(int64_t rows, int64_t cols, int64_t ld, uintptr_t *bytes);

/* A rows x cols float matrix at p with leading dimension ld >= cols, whose
 * span fits in the address space (the caller checked it). */
typedef struct rt_mat {
    uintptr_t p;
    int64_t rows, cols, ld;
} rt_mat;

FJ_INTERNAL int rt_mat_overlap_rows(const rt_mat *x, const rt_mat *y);

/* Whether x and y share a byte. Exact: a matrix whose rows sit between
 * another's (two column ranges of one wider array) does not overlap it.
 * Inline for the usual answer, spans apart (a GEMM call checks two pairs
 * every time, and a 16^3 one takes ~70 ns); where the spans meet, a walk
 * over the rows they share. */
static inline int rt_mat_overlap(const rt_mat *x, const rt_mat *y) {
    if (x->rows <= 0 || x->cols <= 0 || y->rows <= 0 || y->cols <= 0) return 0;
    uintptr_t xe = x->p + (uintptr_t)((x->rows - 1) * x->ld + x->cols) * sizeof(float);
    uintptr_t ye = y->p + (uintptr_t)((y->rows - 1) * y->ld + y->cols) * sizeof(float);
    if (x->p >= ye || y->p >= xe) return 0;
    return rt_mat_overlap_rows(x, y);
}

#endif
