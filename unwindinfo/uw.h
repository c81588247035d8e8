/* uw.h: unwind information for JIT kernels.
 *
 * Input: abstract frame records (uw_rec) that the builder writes as it emits
 * a prologue/epilogue; this folder alone turns them into DWARF CFI, builds
 * .eh_frame and in-memory ELF objects, and registers them with libgcc,
 * libunwind and the GDB JIT interface. It never allocates executable memory
 * and knows nothing about primitives. */
#ifndef FJ_UW_H
#define FJ_UW_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/fj_base.h"

#include "unwindinfo/uw_rec.h"

/* One kernel as the unwinders see it. */
typedef struct uw_func {
    const char *name;
    uintptr_t start;  /* address of the first instruction (in the RX view) */
    size_t size;      /* bytes of code, the constant pool excluded */
    const uw_rec *recs;
    size_t nrecs;     /* sorted by off */
} uw_func;

enum {
    UW_LIBGCC = 1u << 0,
    UW_LIBUNWIND = 1u << 1,
    UW_GDB = 1u << 2,
    UW_ALL = UW_LIBGCC | UW_LIBUNWIND | UW_GDB,
};

/* Parses a FRAMEJIT_UNWIND value ("libgcc,libunwind,gdb" in any order or
 * subset, "all", "none"; case and spaces around words ignored); NULL or ""
 * means all. Unknown words, or "none" with others, fail with
 * FJ_ERR_INVALID_ARG. */
FJ_INTERNAL fj_status uw_parse_backends(const char *s, unsigned *out);

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

/* ELF writer, shared by the GDB JIT objects and FRAMEJIT_DUMP files.
 * fns cover [lo, hi) (lo = lowest start, hi = highest end); .text is that
 * range and each function gets an STT_FUNC symbol (section-relative value).
 * code == NULL: GDB JIT object (ET_REL, .text SHT_NOBITS with sh_addr lo,
 * absolute FDEs). code != NULL: the hi - lo bytes of [lo, hi); a relocatable
 * .o with them in .text (FDE addresses relative to .text), for objdump -d /
 * readelf -wf. Buffer fj_malloc'ed. */
FJ_INTERNAL fj_status uw_elf_build(const uw_func *fns, size_t n, const uint8_t *code, uint8_t **out,
                                   size_t *len);

/* FRAMEJIT_DUMP: writes DIR/<name>.<seq>.o. Failures are logged
 * (FRAMEJIT_VERBOSE) and returned, never fatal to the kernel. */
FJ_INTERNAL fj_status uw_dump(const char *dir, const uw_func *f, const uint8_t *code, unsigned seq);

#endif
