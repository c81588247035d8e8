/* reduce_gen.h: generator of row reductions (sum, max, min, mean, L2 norm). */
#ifndef FJ_KG_REDUCE_H
#define FJ_KG_REDUCE_H

#include <stdint.h>
#include "base/base.h"

/* Kernel: void k(const float *src, float *dst, int64_t rows,
 *                const int64_t shape[2] = {cols, ld})
 * dst[r] = reduce(src[r*ld .. r*ld + cols)), each row in one fixed order. */
typedef void (*kg_reduce_fn)(const float *src, float *dst, int64_t rows, const int64_t *shape);

/* Emits the kernel for op into b (4 args). Errors stay sticky in b.
 * shape[2] holds (float)cols in its low 4 bytes (mean). */
FJ_INTERNAL void kg_reduce(fj_builder *b, fj_reduce_op op);

/* ---- pieces shared with softmax ---- */

/* Reduces c floats at p (both clobbered) into acc[0] (all lanes still to
 * combine: see kg_hreduce), in the fixed order described in reduce.c.
 * square: accumulate x*x (L2). x, tmpv: scratch vectors; mask: a mask
 * register (AVX-512) or vector (AVX2); tmp: a scratch GPR. */
FJ_INTERNAL void kg_row_reduce(fj_builder *b, fj_reduce_op op, fj_reg p, fj_reg c, fj_reg acc[4],
                               fj_reg x, fj_reg tmpv, fj_reg mask, fj_reg tmp, int square);
/* acc := its lanes combined (every lane holds the result); t, idx scratch. */
FJ_INTERNAL void kg_hreduce(fj_builder *b, fj_reduce_op op, fj_reg acc, fj_reg t, fj_reg idx);
/* mask := the first c lanes (0 < c < lanes; c is preserved); tmp: GPR. */
FJ_INTERNAL void kg_tail_mask(fj_builder *b, fj_reg c, fj_reg mask, fj_reg tmp);
/* x := the masked lanes at p, fill elsewhere (t: scratch vector, AVX2). */
FJ_INTERNAL void kg_tail_load(fj_builder *b, fj_reg x, fj_reg p, fj_reg mask, float fill, fj_reg t);
FJ_INTERNAL void kg_tail_store(fj_builder *b, fj_reg p, fj_reg x, fj_reg mask);

#endif
