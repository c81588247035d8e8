/* uw_object.h: registering a set of kernels as one object with every
 * back-end (uw_object.c), for the tests and framejit-bench only: the
 * library itself registers per arena (uw.h's uw_arena_*). */
#ifndef FJ_UW_OBJECT_H
#define FJ_UW_OBJECT_H

#include "unwindinfo/uw.h"

/* .eh_frame for fns: one CIE, one FDE per function, a 4-byte zero
 * terminator. FDE addresses are absolute (DW_EH_PE_absptr). If fde_off is
 * non-NULL it receives each FDE's offset within the buffer. The buffer is
 * fj_malloc'ed; the caller fj_free's it. */
FJ_INTERNAL fj_status uw_eh_frame_build(const uw_func *fns, size_t n, uint8_t **out, size_t *len,
                                        size_t *fde_off);

/* A registered set of kernels (one or many: registration may be batched). */
typedef struct uw_object uw_object;
/* Registers fns with the chosen back-ends. On failure nothing stays
 * registered. fns' names and records are copied. */
FJ_INTERNAL fj_status uw_register(const uw_func *fns, size_t n, unsigned backends, uw_object **out);
/* Deregisters from every back-end it was registered with and frees. NULL ok. */
FJ_INTERNAL void uw_deregister(uw_object *o);

#endif
