/* softmax_gen.h: generator of row-wise softmax and log_softmax. */
#ifndef FJ_KG_SOFTMAX_H
#define FJ_KG_SOFTMAX_H

#include <stdint.h>
#include "base/base.h"

/* Kernel: void k(const float *src, float *dst, int64_t rows,
 *                const int64_t shape[3] = {cols, ld_src, ld_dst}) */
typedef void (*kg_softmax_fn)(const float *src, float *dst, int64_t rows, const int64_t *shape);

/* Emits the kernel (log != 0: log_softmax) into b (4 args). */
FJ_INTERNAL void kg_softmax(fj_builder *b, int log);

#endif
