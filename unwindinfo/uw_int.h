/* uw_int.h: what the files of unwindinfo/ share among themselves: the byte
 * writer, the registered-object layout and the registration back-ends. */
#ifndef FJ_UW_INT_H
#define FJ_UW_INT_H

#include <stddef.h>
#include <stdint.h>
#include "unwindinfo/uw.h"

/* ---- Byte writer -------------------------------------------------------
 * A growable buffer whose error is sticky (as sljit's compiler->error): the
 * writers below stay one-liners and the caller checks once, at the end. */
typedef struct uw_buf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} uw_buf;

FJ_INTERNAL void uw_put(uw_buf *b, const void *src, size_t n);
FJ_INTERNAL void uw_put_zero(uw_buf *b, size_t n);
FJ_INTERNAL void uw_put_uleb(uw_buf *b, uint64_t v);
FJ_INTERNAL void uw_put_sleb(uw_buf *b, int64_t v);
/* Pads with `fill` up to a multiple of a (a power of two). */
FJ_INTERNAL void uw_align(uw_buf *b, size_t a, uint8_t fill);
FJ_INTERNAL void uw_patch_u32(uw_buf *b, size_t at, uint32_t v);
/* Hands the bytes over (fj_malloc'ed) or fails with FJ_ERR_NO_MEMORY. */
FJ_INTERNAL fj_status uw_buf_take(uw_buf *b, uint8_t **out, size_t *len);

static inline void uw_put_u8(uw_buf *b, uint8_t v) { uw_put(b, &v, 1); }
static inline void uw_put_u16(uw_buf *b, uint16_t v) { uw_put(b, &v, 2); }  /* x86-64: LE */
static inline void uw_put_u32(uw_buf *b, uint32_t v) { uw_put(b, &v, 4); }
static inline void uw_put_u64(uw_buf *b, uint64_t v) { uw_put(b, &v, 8); }

/* Checks fns (names, sizes, records, no overlap) and returns the range
 * [lo, hi) they cover. */
FJ_INTERNAL fj_status uw_check_funcs(const uw_func *fns, size_t n, uintptr_t *lo, uintptr_t *hi);
/* uw_eh_frame_build with every FDE address lowered by bias (0: absolute;
 * the start of .text: section-relative, for .o files). */
FJ_INTERNAL fj_status uw_eh_frame_build_at(const uw_func *fns, size_t n, uintptr_t bias,
                                           uint8_t **out, size_t *len, size_t *fde_off);
/* DWARF number of x86 GPR r (0..15), or -1. */
FJ_INTERNAL int uw_dwarf_reg(unsigned r);

/* ---- Registered objects ------------------------------------------------ */
struct uw_libunwind_reg;
struct uw_gdb_entry;

struct uw_object {
    uw_func *fns;        /* copies; names and records owned below */
    size_t n;
    uintptr_t lo, hi;    /* range covered by all functions */
    uint8_t *eh;         /* .eh_frame with absolute FDEs + terminator */
    size_t eh_len;
    size_t *fde_off;     /* per function, offset of its FDE in eh */
    unsigned done;       /* back-ends actually registered (UW_*) */
    struct uw_libunwind_reg *unw;
    struct uw_gdb_entry *gdb;
};

/* Each back-end: register o (FJ_OK or an error with nothing left behind)
 * and deregister it. */
FJ_INTERNAL fj_status uw_libgcc_register(uw_object *o);
FJ_INTERNAL void uw_libgcc_deregister(uw_object *o);
/* *skipped = 1 when libunwind is not installed (not an error). */
FJ_INTERNAL fj_status uw_libunwind_register(uw_object *o, int *skipped);
FJ_INTERNAL void uw_libunwind_deregister(uw_object *o);
FJ_INTERNAL fj_status uw_gdb_register(uw_object *o);
FJ_INTERNAL void uw_gdb_deregister(uw_object *o);

#endif
