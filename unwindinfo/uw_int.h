/* uw_int.h: what the files of unwindinfo/ share among themselves: the byte
 * writer, the registered-object layout and the registration back-ends. */
#ifndef FJ_UW_INT_H
#define FJ_UW_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "unwindinfo/uw.h"

/* ---- Byte writer -------------------------------------------------------
 * A growable buffer whose error is sticky (as sljit's compiler->error): the
 * writers below stay one-liners and the caller checks once, at the end. */
typedef struct uw_buf {
    uint8_t *p;
    size_t len, cap;
    int oom;
    int ext;   /* p is the caller's (on its stack): growing copies it out */
} uw_buf;

FJ_INTERNAL void uw_put(uw_buf *b, const void *src, size_t n);
FJ_INTERNAL void uw_put_zero(uw_buf *b, size_t n);
/* Room for cap bytes in all (a failure is sticky, as for the puts). */
FJ_INTERNAL void uw_reserve(uw_buf *b, size_t cap);
FJ_INTERNAL void uw_put_uleb(uw_buf *b, uint64_t v);
FJ_INTERNAL void uw_put_sleb(uw_buf *b, int64_t v);
/* Pads with `fill` up to a multiple of a (a power of two). */
FJ_INTERNAL void uw_align(uw_buf *b, size_t a, uint8_t fill);
FJ_INTERNAL void uw_patch_u32(uw_buf *b, size_t at, uint32_t v);
/* Hands the bytes over (fj_malloc'ed) or fails with FJ_ERR_NO_MEMORY. */
FJ_INTERNAL fj_status uw_buf_take(uw_buf *b, uint8_t **out, size_t *len);

/* Fixed-size puts: a store when there is room (the common case: big ELF
 * objects are built from thousands of them), else the growing path. */
#define UW_PUT_FIXED(b, v)                                   \
    do {                                                     \
        if ((b)->len + sizeof(v) <= (b)->cap) {              \
            memcpy((b)->p + (b)->len, &(v), sizeof(v));      \
            (b)->len += sizeof(v);                           \
        } else {                                             \
            uw_put((b), &(v), sizeof(v));                    \
        }                                                    \
    } while (0)
static inline void uw_put_u8(uw_buf *b, uint8_t v) { UW_PUT_FIXED(b, v); }
static inline void uw_put_u16(uw_buf *b, uint16_t v) { UW_PUT_FIXED(b, v); }  /* x86-64: LE */
static inline void uw_put_u32(uw_buf *b, uint32_t v) { UW_PUT_FIXED(b, v); }
static inline void uw_put_u64(uw_buf *b, uint64_t v) { UW_PUT_FIXED(b, v); }

/* Checks fns (names, sizes, records, no overlap) and returns the range
 * [lo, hi) they cover. Linear when fns are sorted by start. */
FJ_INTERNAL fj_status uw_check_funcs(const uw_func *fns, size_t n, uintptr_t *lo, uintptr_t *hi);
/* uw_eh_frame_build with every FDE address lowered by bias (0: absolute;
 * the start of .text: section-relative, for .o files). */
FJ_INTERNAL fj_status uw_eh_frame_build_at(const uw_func *fns, size_t n, uintptr_t bias,
                                           uint8_t **out, size_t *len, size_t *fde_off);
/* One function's name, range and records. */
FJ_INTERNAL fj_status uw_check_func(const uw_func *f);
/* DWARF number of x86 GPR r (0..15), or -1. */
FJ_INTERNAL int uw_dwarf_reg(unsigned r);

/* ---- CIE / FDE pieces --------------------------------------------------
 * Our one CIE ("zR", absolute FDE pointers, CFA = rsp + 8 on entry);
 * returns its offset in b. pad: align its end to 8 (inside a section);
 * without, instructions may be appended and the length patched again. */
FJ_INTERNAL size_t uw_cie_put(uw_buf *b, int pad);
/* One FDE for f with addresses lowered by bias; cie_at is the CIE's offset
 * relative to the start of b (negative: before b's bytes, wherever they end
 * up: the caller places b's bytes so that holds). */
FJ_INTERNAL fj_status uw_fde_put(uw_buf *b, const uw_func *f, uintptr_t bias, ptrdiff_t cie_at);
/* f's CFA instructions alone (what follows an FDE's augmentation data,
 * before any padding), from the CIE's initial rules at f->start. */
FJ_INTERNAL fj_status uw_cfa_records(uw_buf *b, const uw_func *f);
/* Appends f to a CFA program that already describes code up to *loc (an
 * absolute address <= f->start): an advance to f->start, a reset of the
 * rules the previous function changed (*touched, a mask of x86 registers,
 * rsp meaning the CFA rule), then f's records. Updates *loc and *touched.
 * Used to let one FDE describe several consecutive kernels. */
FJ_INTERNAL fj_status uw_cfa_append(uw_buf *b, const uw_func *f, unsigned *touched,
                                    uintptr_t *loc);

/* ---- Memory for unwind tables -------------------------------------------
 * A PROT_NONE reservation whose prefix is made read-write on demand, so
 * tables can grow in place (readers hold pointers into them) and cost
 * resident memory only for what is used. */
typedef struct uw_region {
    uint8_t *p;
    size_t len;        /* reserved */
    size_t committed;  /* read-write prefix */
    int lent;          /* the range is the caller's (uw_region_adopt): never unmapped */
} uw_region;
/* Uses [p, p + len), address space the caller has reserved (PROT_NONE,
 * private anonymous; p and len page-aligned), as the region: committed as
 * it fills, and given back to PROT_NONE, without its pages, on release. */
FJ_INTERNAL void uw_region_adopt(uw_region *r, void *p, size_t len);
/* Reserves len bytes; near != 0: within +-2 GiB of [near, near_hi) (libunwind's
 * 32-bit table offsets), else anywhere. */
FJ_INTERNAL fj_status uw_region_reserve(uw_region *r, size_t len, uintptr_t near,
                                        uintptr_t near_hi);
/* Makes [0, upto) read-write (whole pages, in 64 KiB steps). */
FJ_INTERNAL fj_status uw_region_commit(uw_region *r, size_t upto);
FJ_INTERNAL void uw_region_release(uw_region *r);

/* ---- What uw_object.c (tests and framejit-bench) needs of the back-ends -- */
/* libunwind's _U_dyn_register and _U_dyn_cancel (struct unw_dyn_info is
 * libunwind.h's unw_dyn_info_t), loaded on first use; 0 when libunwind is
 * not installed. */
struct unw_dyn_info;
FJ_INTERNAL int uw_libunwind_fns(void (**reg)(struct unw_dyn_info *),
                                 void (**cancel)(struct unw_dyn_info *));
/* An entry of gdb's JIT list for the in-memory ELF object [elf, elf + len)
 * (kept by the caller until unlinked): linked, gdb told, under the
 * interface's lock; NULL when out of memory. uw_gdb_unlink takes it out,
 * tells gdb and frees it. */
struct jit_code_entry;
FJ_INTERNAL struct jit_code_entry *uw_gdb_link(const uint8_t *elf, size_t len);
FJ_INTERNAL void uw_gdb_unlink(struct jit_code_entry *e);

/* ---- Arena back-ends (uw_arena.c drives them) ----------------------------
 * Each grows in place: prepare writes what a kernel needs where no reader
 * looks yet (it may fail; a failed or abandoned prepare is simply
 * overwritten by the next one), publish makes it visible with a few
 * ordered stores (it cannot fail). */
struct uw_gcc_table;
FJ_INTERNAL fj_status uw_gcc_table_create(uintptr_t lo, uintptr_t hi, struct uw_gcc_table **out);
FJ_INTERNAL fj_status uw_gcc_table_prepare(struct uw_gcc_table *t, const uw_func *f);
/* Publishes the prepared kernel and looks it up again through libgcc;
 * on a mismatch it is withdrawn and FJ_ERR_UNWIND returned. */
FJ_INTERNAL fj_status uw_gcc_table_publish(struct uw_gcc_table *t, const uw_func *f);
FJ_INTERNAL void uw_gcc_table_destroy(struct uw_gcc_table *t);
FJ_INTERNAL size_t uw_gcc_table_bytes(const struct uw_gcc_table *t);
/* Walks the table as libgcc does: same FDE count and [lo, hi) extent as
 * when it was registered, sorted, no overlapping ranges. */
FJ_INTERNAL fj_status uw_gcc_table_check(const struct uw_gcc_table *t);

struct uw_unw_table;
/* *out = NULL (and FJ_OK) when libunwind is not installed. */
FJ_INTERNAL fj_status uw_unw_table_create(uintptr_t lo, uintptr_t hi, const char *name,
                                          uintptr_t room, size_t room_len,
                                          struct uw_unw_table **out);
FJ_INTERNAL fj_status uw_unw_table_prepare(struct uw_unw_table *t, const uw_func *f);
FJ_INTERNAL void uw_unw_table_publish(struct uw_unw_table *t);
FJ_INTERNAL void uw_unw_table_destroy(struct uw_unw_table *t);
FJ_INTERNAL size_t uw_unw_table_bytes(const struct uw_unw_table *t);

/* GDB JIT chunks (an arena's objects, grown in place): new() makes an
 * empty, unregistered object with room for max_kernels kernels, eh_room
 * bytes of FDEs and str_room bytes of names; stage() writes f (its FDE:
 * fde_len bytes as uw_fde_put writes them, the CIE pointer is fixed here)
 * where no reader looks yet, or returns 0 when the chunk has no room;
 * publish() makes the staged kernel part of the object and (re)registers
 * it (cannot fail); free() deregisters it. A staged kernel that is not
 * published is overwritten by the next stage(). */
struct uw_gdb_chunk;
FJ_INTERNAL fj_status uw_gdb_chunk_new(size_t max_kernels, size_t eh_room, size_t str_room,
                                       struct uw_gdb_chunk **out);
FJ_INTERNAL int uw_gdb_chunk_stage(struct uw_gdb_chunk *c, const uw_func *f, const uint8_t *fde,
                                   size_t fde_len);
FJ_INTERNAL void uw_gdb_chunk_publish(struct uw_gdb_chunk *c);
FJ_INTERNAL void uw_gdb_chunk_free(struct uw_gdb_chunk *c);
FJ_INTERNAL size_t uw_gdb_chunk_kernels(const struct uw_gdb_chunk *c);
FJ_INTERNAL size_t uw_gdb_chunk_bytes(const struct uw_gdb_chunk *c);

/* An x86-64 little-endian ELF header of the given type, program header
 * table (phnum 0: none) and section header table, written to dst (may be
 * unaligned). */
FJ_INTERNAL void uw_elf_header(void *dst, uint16_t type, uint64_t phoff, uint16_t phnum,
                               uint64_t shoff, uint16_t shnum, uint16_t shstrndx);

/* The modules' locks around fork (FJ_FORK_* phases, see base/base.h). */
FJ_INTERNAL void uw_gdb_fork(int phase);
FJ_INTERNAL void uw_jitdump_fork(int phase);
FJ_INTERNAL void uw_perfmap_fork(int phase);

#endif
