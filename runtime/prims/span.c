/* span.c: the memory a matrix argument covers, and whether two of them
 * share any (the entry points' aliasing checks). */
#include "runtime/prims/span.h"

int rt_span(int64_t rows, int64_t cols, int64_t ld, uintptr_t *bytes) {
    if (rows == 0 || cols == 0) { *bytes = 0; return 1; }
    /* (rows - 1) * ld + cols floats, without overflow */
    if ((uint64_t)(rows - 1) > (uint64_t)(INT64_MAX / 8) / (uint64_t)(ld ? ld : 1)) return 0;
    uint64_t n = (uint64_t)(rows - 1) * (uint64_t)ld + (uint64_t)cols;
    if (n > (uint64_t)(INTPTR_MAX / 8)) return 0;
    *bytes = (uintptr_t)(n * sizeof(float));
    return 1;
}

/* One matrix's rows as byte intervals [p + i*stride, p + i*stride + width):
 * sorted and disjoint, since ld >= cols. */
typedef struct row_set {
    uintptr_t p, width, stride;
    int64_t n;
} row_set;

static row_set rows_of(const rt_mat *m) {
    uintptr_t w = (uintptr_t)m->cols * sizeof(float);
    return (row_set){m->p, w, m->rows > 1 ? (uintptr_t)m->ld * sizeof(float) : w, m->rows};
}

/* The first row of r that ends after byte `at` (r.n if none). */
static int64_t first_after(const row_set *r, uintptr_t at) {
    if (r->p + r->width > at) return 0;
    uintptr_t i = (at - r->p - r->width) / r->stride + 1;
    return i < (uintptr_t)r->n ? (int64_t)i : r->n;
}

/* Where the spans meet, both row lists are walked in address order from
 * where the other begins, like a merge: two rows overlap or one of them is
 * passed. Linear in the rows inside the common range, which the call
 * reads or writes anyway. */
int rt_mat_overlap(const rt_mat *x, const rt_mat *y) {
    if (x->rows <= 0 || x->cols <= 0 || y->rows <= 0 || y->cols <= 0) return 0;
    uintptr_t xe = x->p + rt_mat_bytes(x->rows, x->cols, x->ld);
    uintptr_t ye = y->p + rt_mat_bytes(y->rows, y->cols, y->ld);
    if (x->p >= ye || y->p >= xe) return 0;
    row_set a = rows_of(x), b = rows_of(y);
    int64_t i = first_after(&a, b.p), j = first_after(&b, a.p);
    while (i < a.n && j < b.n) {
        uintptr_t s = a.p + (uintptr_t)i * a.stride, t = b.p + (uintptr_t)j * b.stride;
        if (s + a.width <= t) i++;
        else if (t + b.width <= s) j++;
        else return 1;
    }
    return 0;
}
