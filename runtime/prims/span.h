/* span.h: the memory a row-major matrix argument covers, for the entry
 * points' aliasing checks. */
#ifndef FJ_SPAN_H
#define FJ_SPAN_H

#include <stdint.h>

#include "base/base.h"

/* Bytes spanned by rows x cols floats with leading dimension ld (0 if
 * empty); 0 (failure) if that does not fit in the address space. */
FJ_INTERNAL int rt_span(int64_t rows, int64_t cols, int64_t ld, uintptr_t *bytes);

/* A rows x cols float matrix at p with leading dimension ld >= cols, whose
 * span fits in the address space (the caller checked it). */
typedef struct rt_mat {
    uintptr_t p;
    int64_t rows, cols, ld;
} rt_mat;

/* Bytes from a matrix's first element to the end of its last row (0 if
 * empty), for dimensions already validated (no overflow check: rt_span
 * is the checked form). */
static inline uintptr_t rt_mat_bytes(int64_t rows, int64_t cols, int64_t ld) {
    return rows > 0 && cols > 0 ? (uintptr_t)((rows - 1) * ld + cols) * sizeof(float) : 0;
}

/* Whether x and y share a byte. Exact: a matrix whose rows sit between
 * another's (two column ranges of one wider array) does not overlap it.
 * O(1) when the spans are apart, else a walk over the rows where they
 * meet. */
FJ_INTERNAL int rt_mat_overlap(const rt_mat *x, const rt_mat *y);

#endif
