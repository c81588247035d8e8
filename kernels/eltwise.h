/* eltwise.h: generators of element-wise kernels. */
#ifndef FJ_KG_ELTWISE_H
#define FJ_KG_ELTWISE_H

#include "runtime/fj_base.h"

/* The code variants of element-wise ops: one kernel per variant and ISA. */
typedef enum kg_elt {
    KG_ELT_RELU = 0,       /* max(x, 0) */
    KG_ELT_LEAKY_RELU,     /* x > 0 ? x : alpha * x */
    KG_ELT__N
} kg_elt;

/* Kernel signature: void k(const float *src, float *dst, size_t n,
 *                          const float params[2] = {alpha, beta}) */
typedef void (*kg_elt_fn)(const float *src, float *dst, size_t n, const float *params);
enum { KG_ELT_NARGS = 4 };

/* "relu", "leaky_relu" */
FJ_INTERNAL const char *kg_elt_name(kg_elt v);
/* Emits the body of variant v into b (created with KG_ELT_NARGS args). */
FJ_INTERNAL void kg_eltwise(fj_builder *b, kg_elt v);

#endif
