/* gemm_pack_tmpl.h: the portable GEMM packers, written once for an element type T.
 *
 * Included by gemm_pack.c once per element type with T (float, double) and
 * PK(name) (the type's function names) defined: f32 and f64 share this code. */

/* ---- A ---------------------------------------------------------------- */

/* Transposing copy of one micro-panel from row-major A: 8 k at a time so
 * the inner loop writes whole lines of the panel. */
static void PK(pack_a_rows_panel)(T *restrict d, const T *restrict a, int64_t lda,
                              int rows, int64_t kc, int mr) {
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        for (int i = 0; i < rows; i++) {
            const T *s = a + (int64_t)i * lda + k;
            for (int u = 0; u < 8; u++) d[u * mr + i] = s[u];
        }
        for (int i = rows; i < mr; i++)
            for (int u = 0; u < 8; u++) d[u * mr + i] = 0;
        d += 8 * mr;
    }
    for (; k < kc; k++) {
        for (int i = 0; i < rows; i++) d[i] = a[(int64_t)i * lda + k];
        for (int i = rows; i < mr; i++) d[i] = 0;
        d += mr;
    }
}

static void PK(pack_a)(T *dst, const T *a, int64_t lda, int ta, int64_t rows, int64_t kc,
                       int mr) {
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
        int r = rows - i0 < mr ? (int)(rows - i0) : mr;
        T *d = dst + i0 * kc;
        if (ta) {
            /* A^T in memory: each k is already a contiguous run of rows. */
            const T *s = a + i0;
            for (int64_t k = 0; k < kc; k++, d += mr, s += lda) {
                memcpy(d, s, (size_t)r * sizeof(T));
                for (int i = r; i < mr; i++) d[i] = 0;
            }
        } else {
            PK(pack_a_rows_panel)(d, a + i0 * lda, lda, r, kc, mr);
        }
    }
}

static void PK(copy_rows)(T *dst, const T *a, int64_t lda, int64_t rows, int64_t kc, int mr) {
    for (int64_t i = 0; i < mr; i++) {
        if (i < rows) memcpy(dst + i * kc, a + i * lda, (size_t)kc * sizeof(T));
        else memset(dst + i * kc, 0, (size_t)kc * sizeof(T));
    }
}

/* ---- B ---------------------------------------------------------------- */

/* One row of B (w <= nr elements) into a panel row, zero padded. The fixed
 * sizes let the compiler use whole-vector moves. */
static inline void PK(copy_row)(T *restrict d, const T *restrict s, int w, int nr) {
    if (w == nr) {
        switch (nr) {
        case 8: memcpy(d, s, 8 * sizeof(T)); return;
        case 16: memcpy(d, s, 16 * sizeof(T)); return;
        case 32: memcpy(d, s, 32 * sizeof(T)); return;
        case 64: memcpy(d, s, 64 * sizeof(T)); return;
        default: break;
        }
    }
    memcpy(d, s, (size_t)w * sizeof(T));
    for (int j = w; j < nr; j++) d[j] = 0;
}

static void PK(pack_b)(T *dst, const T *b, int64_t ldb, int tb, int64_t kc, int64_t cols,
                       int nr) {
    if (!tb) {
        /* Row by row of B (contiguous reads), scattering into the panels. */
        int64_t npan = (cols + nr - 1) / nr;
        for (int64_t k = 0; k < kc; k++) {
            const T *s = b + k * ldb;
            T *d = dst + k * nr;
            for (int64_t p = 0; p < npan; p++, d += nr * kc, s += nr) {
                int w = cols - p * nr < nr ? (int)(cols - p * nr) : nr;
                PK(copy_row)(d, s, w, nr);
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        int w = cols - j0 < nr ? (int)(cols - j0) : nr;
        T *d = dst + j0 * kc;
        /* B^T in memory: column j of B is row j; 8 k at a time. */
        const T *s = b + j0 * ldb;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            for (int j = 0; j < w; j++) {
                const T *r = s + (int64_t)j * ldb + k;
                for (int u = 0; u < 8; u++) d[u * nr + j] = r[u];
            }
            for (int j = w; j < nr; j++)
                for (int u = 0; u < 8; u++) d[u * nr + j] = 0;
            d += 8 * nr;
        }
        for (; k < kc; k++, d += nr) {
            for (int j = 0; j < w; j++) d[j] = s[(int64_t)j * ldb + k];
            for (int j = w; j < nr; j++) d[j] = 0;
        }
    }
}
