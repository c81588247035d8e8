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
#include "base/base.h"

#include "base/frame_rec.h"

/* One kernel as the unwinders see it. */
typedef struct uw_func {
    const char *name;
    uintptr_t start;  /* address of the first instruction (in the RX view) */
    size_t size;      /* bytes of code, the constant pool excluded */
    const uw_rec *recs;
    size_t nrecs;     /* sorted by off */
    /* The records' CFA program, made once by uw_func_prog for all the
     * back-ends (NULL: each makes it from the records), and whether it
     * ends with the CIE's rules in force. */
    const uint8_t *prog;
    size_t prog_len;
    int prog_clean;
} uw_func;

/* Makes f's CFA program into buf (cap bytes) for the back-ends to copy:
 * a kernel is registered with up to four of them, each of which made it
 * anew. Leaves f as it was when the program does not fit or a record is
 * bad (the back-ends then report that). */
FJ_INTERNAL void uw_func_prog(uw_func *f, uint8_t *buf, size_t cap);

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

/* (Registering a set of kernels as one object, the way the tests and
 * framejit-bench compare against: uw_object.h, not in the library.) */

/* ---- Arenas: registration that scales -------------------------------------
 * One code arena [lo, hi) registers a fixed, small number of objects with
 * each back-end however many kernels it holds (uw_register makes one per
 * call, and libgcc before GCC 13 and libunwind search those linearly on
 * every frame of every unwind, plain C frames included):
 *   libgcc     one frame table for [lo, hi), registered once at create and
 *              edited in place as kernels arrive (never re-registered, so
 *              no two objects ever overlap, with or without GCC 13's b-tree);
 *   libunwind  one REMOTE_TABLE dyn info for [lo, hi) whose table grows in
 *              place, next to the code;
 *   gdb        in-memory ELF objects of up to 256 kernels each, grown in
 *              place (nothing already written is rebuilt or moved) and
 *              registered again as they grow; about n / 256 + 5 objects.
 * Kernels are added in increasing address order (each starting at or after
 * the previous one's end) and never removed one by one: an arena goes
 * away whole, and its code addresses are never reused. Calls on one arena
 * must not run concurrently (the code cache's lock orders them); unwinding
 * in any thread may run at any time, and never sees a half-added kernel.
 * Do not also uw_register kernels that lie inside a live arena. */
typedef struct uw_arena uw_arena;

/* An arena for the code span [lo, hi) (at most 256 MiB with libunwind,
 * 1 GiB otherwise); name labels it for libunwind. Registers the empty
 * tables with the chosen back-ends (UW_* bits). On failure nothing stays
 * registered and *out is NULL. */
FJ_INTERNAL fj_status uw_arena_create(unsigned backends, uintptr_t lo, uintptr_t hi,
                                      const char *name, uw_arena **out);
/* The same, with [room, room + room_len): address space reserved next to
 * the code (PROT_NONE, private anonymous, owned by the caller) for the
 * tables that must lie within 32-bit offsets of it (libunwind's); used
 * when it holds uw_arena_room(hi - lo) bytes. */
FJ_INTERNAL fj_status uw_arena_create_at(unsigned backends, uintptr_t lo, uintptr_t hi,
                                         const char *name, uintptr_t room, size_t room_len,
                                         uw_arena **out);
/* Bytes of such room an arena spanning span bytes uses with libunwind. */
FJ_INTERNAL size_t uw_arena_room(size_t span);
/* Makes f unwindable by every chosen back-end before returning FJ_OK.
 * f must lie in [lo, hi) and start at or above the end of the previous
 * kernel; its name and records are copied. On failure f is registered with
 * no back-end and the arena is unchanged (still usable). */
FJ_INTERNAL fj_status uw_arena_add(uw_arena *a, const uw_func *f);
/* Deregisters everything and frees the arena. Call it before the code
 * span is unmapped. NULL ok. */
FJ_INTERNAL void uw_arena_destroy(uw_arena *a);
/* The layer's locks around fork (FJ_FORK_* phases, runtime/fork.c). */
FJ_INTERNAL void uw_fork(int phase);

typedef struct uw_arena_stats {
    size_t kernels;
    size_t libgcc_bytes;     /* frame table + group CIEs written */
    size_t libunwind_bytes;  /* table entries + FDEs written */
    size_t gdb_bytes;        /* live ELF objects + the kernel copies they are built from */
    size_t gdb_objects;      /* entries this arena has in gdb's JIT list */
    int gdb_spare;           /* gdb's first object, made with the arena, awaits its kernel */
} uw_arena_stats;
/* Memory the arena holds beyond the code itself (a == NULL: zeros). */
FJ_INTERNAL void uw_arena_get_stats(const uw_arena *a, uw_arena_stats *st);

/* Self-check for tests and FRAMEJIT_VERIFY: the libgcc table, walked as
 * libgcc walks it, still has the extent and FDE count it was registered
 * with, is sorted and has no overlapping ranges; gdb's objects of this
 * arena cover every kernel, none of them empty. */
FJ_INTERNAL fj_status uw_arena_check(const uw_arena *a);

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

/* ---- Profiling: self-describing arena files, perf map, jitdump ------------
 * (uw_image.c, uw_perfmap.c, uw_jitdump.c; runtime/publish.c drives them.)
 *
 * An arena's backing file as an ELF image perf reads on its own: the
 * header page (ELF header, program and section headers, build-id note) at
 * file offset 0, the code span at code_off (mapped read+execute at lo),
 * and the metadata (.eh_frame_hdr, .eh_frame, .symtab, .strtab) in the
 * area that follows the span, outside the code pages. ELF addresses equal
 * file offsets. The writer stores through writable views of the header
 * page and of the metadata area; uw_image.c describes the layout. */
typedef struct uw_image_map {
    uint8_t *hdr;        /* writable header page (file offset 0, page bytes) */
    uint8_t *meta;       /* writable metadata area (file offset meta_off) */
    uint64_t page;       /* page size (>= 1024) */
    uint64_t code_off;   /* file offset of the code span (page aligned, >= page) */
    uint64_t code_span;  /* bytes of the span */
    uintptr_t lo;        /* where the span is mapped */
    uint64_t meta_off;   /* page aligned, >= code_off + code_span */
    uint64_t meta_room;  /* bytes of the metadata area */
    /* File space, offsets relative to the area, ctx as given to the call:
     * back() allocates [off, off + n) before anything is stored there;
     * discard() gives a range back (truncate: cuts the file at off). */
    fj_status (*back)(void *ctx, uint64_t off, uint64_t n);
    void (*discard)(void *ctx, uint64_t off, uint64_t n, int truncate);
} uw_image_map;

/* The image of one arena. Not thread-safe: the caller serializes. */
typedef struct uw_image uw_image;
FJ_INTERNAL fj_status uw_image_new(const uw_image_map *m, uw_image **out);
FJ_INTERNAL void uw_image_free(uw_image *im);  /* NULL ok; the file is left as it is */
/* Writes the first version, without kernels, with the room the first
 * kernels go into: ahead of them (at the arena's creation), so that the
 * first kernel is only appended. Nothing to do once written. */
FJ_INTERNAL fj_status uw_image_layout(uw_image *im, void *ctx);
/* Describes f (name and records; code: its f->size bytes, hashed into the
 * build-id, may be NULL) in the file: appended in place, or the whole
 * metadata rewritten with more room when a section's room is full (so its
 * cost is constant, amortized). tag is the caller's, handed to live() by
 * uw_image_compact. On failure the file still holds the previous version. */
FJ_INTERNAL fj_status uw_image_add(uw_image *im, const uw_func *f, const uint8_t *code,
                                   const void *tag, void *ctx);
/* Rewrites the metadata without the kernels whose tag live() rejects. */
FJ_INTERNAL fj_status uw_image_compact(uw_image *im, int (*live)(const void *tag), void *ctx);
FJ_INTERNAL size_t uw_image_count(const uw_image *im);
typedef struct uw_image_stats {
    size_t kernels;          /* described by the current version */
    uint64_t meta_bytes;     /* its metadata bytes in use */
    uint64_t meta_reserved;  /* bytes of the file it spans (room included) */
    uint64_t meta_off;       /* its file offset */
    uint64_t versions;       /* versions with a new build-id (adds, compactions) */
    uint64_t rewrites;       /* whole-metadata rewrites (growth, compaction) */
    uint8_t build_id[20];
} uw_image_stats;
FJ_INTERNAL void uw_image_get_stats(const uw_image *im, uw_image_stats *st);

/* perf jitdump JIT_CODE_UNWINDING_INFO payload for f: .eh_frame then
 * .eh_frame_hdr (*hdr_len bytes at the end), laid out as perf inject --jit
 * places them: right after f->size bytes of code. fj_malloc'ed. */
FJ_INTERNAL fj_status uw_jit_unwind_build(const uw_func *f, uint8_t **out, size_t *len,
                                          size_t *hdr_len);

/* FRAMEJIT_PERFMAP: appends "START SIZE name" (hex) to /tmp/perf-PID.map
 * (reopened after fork). Thread-safe. */
FJ_INTERNAL fj_status uw_perfmap_add(const uw_func *f);
/* FRAMEJIT_JITDUMP: appends f (code bytes, then unwind info) to this
 * process's jitdump file, created on first use in $JITDUMPDIR or $HOME
 * under .debug/jit/ and mapped PROT_READ|PROT_EXEC once (the marker perf
 * inject --jit looks for). Timestamps are CLOCK_MONOTONIC (perf record -k 1).
 * Thread-safe. */
FJ_INTERNAL fj_status uw_jitdump_add(const uw_func *f, const uint8_t *code);
/* Path of this process's jitdump file, or NULL if none was written yet. */
FJ_INTERNAL const char *uw_jitdump_path(void);

#endif
