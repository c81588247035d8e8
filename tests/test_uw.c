/* test_uw.c: unwind info: CFI bytes, ELF objects and dumps, and walks
 * through a hand-assembled JIT frame with libgcc, glibc backtrace(),
 * libunwind and gdb. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <check.h>
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unwind.h>

#include "unwindinfo/uw.h"
#include "unwindinfo/uw_object.h"
#include "unwindinfo/uw_int.h"
#include "fjtest.h"
#include "uwstub.h"

/* Maps a page RW, writes `copies` stubs 64 bytes apart, then makes it RX. */
static uint8_t *stub_page(void (*cb)(probe *), int copies) {
    uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(page, MAP_FAILED);
    for (int i = 0; i < copies; i++) stub_put(page + 64 * i, cb);
    ck_assert_int_eq(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
    return page;
}

static uw_func stub_func(const char *name, const uint8_t *at) {
    return (uw_func){.name = name, .start = (uintptr_t)at, .size = STUB_SIZE, .recs = stub_recs,
                     .nrecs = NRECS};
}

#define ASSERT_CHAIN(c, p, what)                                                 \
    do {                                                                         \
        char m_[160];                                                            \
        const char *e_ = chain_problem(&(c), (p), m_, sizeof m_);                \
        ck_assert_msg(e_ == NULL, "%s: %s", (what), e_ ? e_ : "");              \
    } while (0)

/* Calls the stub at `at` through a C caller, recording every walk in p. */
static void run_stub(const uint8_t *at, probe *p) {
    memset(p, 0, sizeof *p);
    p->start = (uintptr_t)at;
    p->end = p->start + STUB_SIZE;
    caller_marker((stub_fn)(uintptr_t)p->start, p);
    ck_assert(p->caller_rbx != POISON);
}

/* Registers the stub at index `use` of a page of `copies` with backends,
 * runs it and returns the walks. Functions are passed highest address
 * first, so the libunwind table has to be sorted. */
static void run_walk(unsigned backends, int copies, int use, probe *p) {
    bind_unwinders();
    uint8_t *page = stub_page(walk_all, copies);
    uw_func fns[4];
    for (int i = 0; i < copies; i++) fns[i] = stub_func("fjt_stub", page + 64 * (copies - 1 - i));
    uw_object *o = NULL;
    if (backends)
        ck_assert_msg(uw_register(fns, copies, backends, &o) == FJ_OK, "%s", fj_last_error());
    run_stub(page + 64 * use, p);
    uw_deregister(o);
}

/* The byte writer on a caller's stack buffer (the image's CFA programs):
 * it stays there while it fits, moves to the heap with its bytes when it
 * grows, and uw_buf_take always hands over heap memory. */
START_TEST(test_buf_on_stack) {
    uint8_t st[8];
    uw_buf b = {st, 0, sizeof st, 0, 1};
    uw_put(&b, "abcdef", 6);
    ck_assert_ptr_eq(b.p, st);
    uw_put(&b, "ghijkl", 6);
    ck_assert_ptr_ne(b.p, st);
    ck_assert_int_eq(b.ext, 0);
    ck_assert_mem_eq(b.p, "abcdefghijkl", 12);
    uint8_t *out;
    size_t len;
    ck_assert_int_eq(uw_buf_take(&b, &out, &len), FJ_OK);
    ck_assert_uint_eq(len, 12);
    ck_assert_mem_eq(out, "abcdefghijkl", 12);
    fj_free(out);
    uw_buf c = {st, 0, sizeof st, 0, 1};
    uw_put(&c, "xyz", 3);
    ck_assert_int_eq(uw_buf_take(&c, &out, &len), FJ_OK);
    ck_assert_ptr_ne(out, st);
    ck_assert_uint_eq(len, 3);
    ck_assert_mem_eq(out, "xyz", 3);
    fj_free(out);
}
END_TEST

START_TEST(test_walk_libgcc) {
    probe p;
    run_walk(UW_LIBGCC, 1, 0, &p);
    ASSERT_CHAIN(p.gcc, &p, "_Unwind_Backtrace");
    ASSERT_CHAIN(p.glibc, &p, "glibc backtrace");
}
END_TEST

START_TEST(test_walk_libunwind) {
    probe p;
    run_walk(UW_LIBUNWIND, 1, 0, &p);
    ASSERT_CHAIN(p.unw_bt, &p, "unw_backtrace");
    ASSERT_CHAIN(p.unw_step, &p, "unw_step");
}
END_TEST

START_TEST(test_walk_all) {
    for (int use = 0; use < 2; use++) {
        probe p;
        run_walk(UW_ALL, 2, use, &p);
        ASSERT_CHAIN(p.gcc, &p, "_Unwind_Backtrace");
        ASSERT_CHAIN(p.glibc, &p, "glibc backtrace");
        ASSERT_CHAIN(p.unw_bt, &p, "unw_backtrace");
        ASSERT_CHAIN(p.unw_step, &p, "unw_step");
    }
}
END_TEST

/* libunwind's table must lie within 2 GiB of the code. Code whose
 * neighbours are taken (other code; here a 5 GiB reservation around it)
 * while mmap's own pick is far away (here a hole at the reservation's top,
 * 2.5 GiB up, or anything higher) still gets one: in a hole 1 GiB below.
 * Addresses relative to the reservation, so that sanitizers' fixed
 * layouts do not matter. */
START_TEST(test_walk_libunwind_crowded) {
    const size_t gib = (size_t)1 << 30, mib = (size_t)1 << 20, span = 5 * gib;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(r, MAP_FAILED);
    uint8_t *page = r + span / 2;
    ck_assert_int_eq(munmap(r + span - mib, mib), 0);          /* mmap's own pick */
    ck_assert_int_eq(munmap(page - gib - mib / 2, mib), 0);    /* within reach */
    ck_assert_ptr_eq(mmap(page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                          -1, 0),
                     page);
    bind_unwinders();
    stub_put(page, walk_all);
    ck_assert_int_eq(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
    uw_func f = stub_func("fjt_crowded", page);
    uw_object *o = NULL;
    ck_assert_msg(uw_register(&f, 1, UW_LIBUNWIND, &o) == FJ_OK, "%s", fj_last_error());
    probe p;
    run_stub(page, &p);
    ASSERT_CHAIN(p.unw_bt, &p, "unw_backtrace");
    ASSERT_CHAIN(p.unw_step, &p, "unw_step");
    uw_deregister(o);
    munmap(r, span);
}
END_TEST

/* Control: libgcc has no frame-pointer fallback, so without registration
 * the same checks must fail (the walk test can catch a broken back-end). */
START_TEST(test_walk_unregistered_fails) {
    probe p;
    run_walk(0, 1, 0, &p);
    char m[160];
    ck_assert_ptr_nonnull(chain_problem(&p.gcc, &p, m, sizeof m));
    /* libunwind falls back to the rbp chain, which loses the caller's rbx. */
    ck_assert_ptr_nonnull(chain_problem(&p.unw_step, &p, m, sizeof m));
}
END_TEST

START_TEST(test_deregister_removes_fde) {
    bind_unwinders();
    uint8_t *page = stub_page(walk_all, 1);
    uw_func f = stub_func("fjt_stub", page);
    struct dwarf_eh_bases b;
    ck_assert_ptr_null(ux.find_fde(page + 1, &b));
    uw_object *o;
    ck_assert_int_eq(uw_register(&f, 1, UW_ALL, &o), FJ_OK);
    ck_assert_ptr_nonnull(ux.find_fde(page + 1, &b));
    ck_assert_ptr_eq(b.func, page);
    ck_assert_ptr_nonnull(__jit_debug_descriptor.first_entry);
    uw_deregister(o);
    ck_assert_ptr_null(ux.find_fde(page + 1, &b));
    ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
    uw_deregister(NULL);
}
END_TEST

/* Every allocation failure leaves nothing registered. */
START_TEST(test_register_all_or_nothing) {
    bind_unwinders();
    uint8_t *page = stub_page(walk_all, 1);
    uw_func f = stub_func("fjt_stub", page);
    struct dwarf_eh_bases b;
    int failures = 0;
    for (long k = 0; k < 100; k++) {
        uw_object *o = NULL;
        fj_test_fault_inject(FJ_FAULT_ALLOC, k);
        fj_status st = uw_register(&f, 1, UW_ALL, &o);
        fj_test_fault_inject(FJ_FAULT_ALLOC, -1);
        if (st == FJ_OK) {
            ck_assert_ptr_nonnull(ux.find_fde(page + 1, &b));
            uw_deregister(o);
            break;
        }
        failures++;
        ck_assert_int_eq(st, FJ_ERR_NO_MEMORY);
        ck_assert_ptr_null(o);
        ck_assert_ptr_null(ux.find_fde(page + 1, &b));
        ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
    }
    ck_assert_int_gt(failures, 3);
    ck_assert_ptr_null(ux.find_fde(page + 1, &b));
}
END_TEST

START_TEST(test_register_bad_args) {
    uw_object *o = (uw_object *)1;
    ck_assert_int_eq(uw_register(NULL, 1, UW_ALL, &o), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(o);
    uw_func f = stub_func("fjt_stub", (const uint8_t *)0x10000);
    ck_assert_int_eq(uw_register(&f, 1, 1u << 7, &o), FJ_ERR_INVALID_ARG);
    uw_func two[2] = {f, f};
    two[1].start += 8;
    ck_assert_int_eq(uw_register(two, 2, UW_ALL, &o), FJ_ERR_INVALID_ARG);
    ck_assert(strstr(fj_last_error(), "overlaps") != NULL);
}
END_TEST

/* ---- FRAMEJIT_UNWIND ------------------------------------------------------- */

START_TEST(test_parse_backends) {
    unsigned m = 99;
    ck_assert_int_eq(uw_parse_backends(NULL, &m), FJ_OK);
    ck_assert_uint_eq(m, UW_ALL);
    ck_assert_int_eq(uw_parse_backends("all", &m), FJ_OK);
    ck_assert_uint_eq(m, UW_ALL);
    ck_assert_int_eq(uw_parse_backends("none", &m), FJ_OK);
    ck_assert_uint_eq(m, 0);
    ck_assert_int_eq(uw_parse_backends("gdb,libgcc", &m), FJ_OK);
    ck_assert_uint_eq(m, UW_GDB | UW_LIBGCC);
    ck_assert_int_eq(uw_parse_backends("libunwind", &m), FJ_OK);
    ck_assert_uint_eq(m, UW_LIBUNWIND);
    ck_assert_int_eq(uw_parse_backends(" LibGCC , gdb,libunwind ", &m), FJ_OK);
    ck_assert_uint_eq(m, UW_ALL);
    m = 99;
    ck_assert_int_eq(uw_parse_backends("libgcc,perf", &m), FJ_ERR_INVALID_ARG);
    ck_assert_uint_eq(m, 99);
    ck_assert(strstr(fj_last_error(), "'perf'") != NULL);
    ck_assert_int_eq(uw_parse_backends("gdbx", &m), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(uw_parse_backends("none,gdb", &m), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(uw_parse_backends("gdb", NULL), FJ_ERR_INVALID_ARG);
}
END_TEST

/* ---- .eh_frame bytes --------------------------------------------------------- */

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* True if needle occurs in [hay, hay + n). */
static int has_bytes(const uint8_t *hay, size_t n, const uint8_t *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return 1;
    return 0;
}

START_TEST(test_eh_frame_bytes) {
    /* 0: the stub. 1: a body behind a mid-function epilogue (re-opened
     * frame). 2: large advances and a slot above the CFA. */
    static const uw_rec reopen[] = {
        {.off = 1, .kind = UW_PUSH_FP},  {.off = 4, .kind = UW_SET_FP},
        {.off = 12, .kind = UW_SAVE_REG, .reg = 3, .cfa_off = -24},
        {.off = 20, .kind = UW_RESTORE_REG, .reg = 3}, {.off = 21, .kind = UW_POP_FP},
        {.off = 22, .kind = UW_SET_FP},  {.off = 30, .kind = UW_RESTORE_REG, .reg = 3},
        {.off = 31, .kind = UW_POP_FP},
    };
    static const uw_rec far[] = {
        {.off = 300, .kind = UW_PUSH_FP},
        {.off = 66000, .kind = UW_SET_FP},
        {.off = 66001, .kind = UW_SAVE_REG, .reg = 12, .cfa_off = 8},
    };
    uw_func fns[3] = {
        stub_func("a", (const uint8_t *)0x100000),
        {.name = "b", .start = 0x100040, .size = 32, .recs = reopen, .nrecs = 8},
        {.name = "c", .start = 0x200000, .size = 70000, .recs = far, .nrecs = 3},
    };
    uint8_t *eh;
    size_t len, fde[3];
    ck_assert_int_eq(uw_eh_frame_build(fns, 3, &eh, &len, fde), FJ_OK);

    /* CIE */
    uint32_t cie_len = rd32(eh);
    ck_assert_uint_eq((cie_len + 4) % 8, 0);
    ck_assert_uint_eq(rd32(eh + 4), 0);  /* CIE id */
    ck_assert_uint_eq(eh[8], 1);         /* version */
    ck_assert_str_eq((const char *)eh + 9, "zR");
    ck_assert_uint_eq(eh[12], 1);        /* code align */
    ck_assert_uint_eq(eh[13], 0x78);     /* data align -8 (sleb) */
    ck_assert_uint_eq(eh[14], 16);       /* RA column */
    ck_assert_uint_eq(eh[15], 1);        /* augmentation length */
    ck_assert_uint_eq(eh[16], 0);        /* DW_EH_PE_absptr */
    static const uint8_t init[] = {0x0c, 7, 8, 0x90, 1};  /* cfa rsp+8; ra at cfa-8 */
    ck_assert_mem_eq(eh + 17, init, sizeof init);
    for (size_t i = 17 + sizeof init; i < cie_len + 4; i++) ck_assert_uint_eq(eh[i], 0);

    /* FDEs */
    size_t at = cie_len + 4;
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(fde[i], at);
        const uint8_t *f = eh + at;
        uint32_t flen = rd32(f);
        ck_assert_uint_eq((flen + 4) % 8, 0);
        ck_assert_uint_eq(rd32(f + 4), at + 4);  /* back to the CIE at 0 */
        ck_assert_uint_eq(rd64(f + 8), fns[i].start);
        ck_assert_uint_eq(rd64(f + 16), fns[i].size);
        ck_assert_uint_eq(f[24], 0);
        at += flen + 4;
    }
    ck_assert_uint_eq(len, at + 4);
    ck_assert_uint_eq(rd32(eh + at), 0);  /* terminator */

    static const uint8_t stub_cfa[] = {
        0x41, 0x0e, 0x10, 0x86, 0x02,  /* @1  cfa rsp+16; rbp at cfa-16 */
        0x43, 0x0d, 0x06,              /* @4  cfa rbp+16 */
        0x48, 0x83, 0x03,              /* @12 rbx at cfa-24 */
        0x65, 0xc3,                    /* @49 rbx restored */
        0x41, 0x0c, 0x07, 0x08, 0xc6,  /* @50 cfa rsp+8; rbp restored */
    };
    ck_assert_mem_eq(eh + fde[0] + 25, stub_cfa, sizeof stub_cfa);
    static const uint8_t reopened[] = {
        0x41, 0x0c, 0x06, 0x10, 0x86, 0x02, 0x83, 0x03,  /* @22: whole frame again */
        0x48, 0xc3,
    };
    ck_assert(has_bytes(eh + fde[1], fde[2] - fde[1], reopened, sizeof reopened));
    static const uint8_t far_cfa[] = {
        0x03, 0x2c, 0x01, 0x0e, 0x10, 0x86, 0x02,  /* advance_loc2 300 */
        0x04, 0xa4, 0x00, 0x01, 0x00, 0x0d, 0x06,  /* advance_loc4 65700 */
        0x41, 0x11, 0x0c, 0x7f,                    /* r12 at cfa+8: offset_extended_sf */
    };
    ck_assert_mem_eq(eh + fde[2] + 25, far_cfa, sizeof far_cfa);

    /* The same with each program made once beforehand (uw_func_prog, as
     * the runtime does for its back-ends): the same bytes. */
    uint8_t progs[3][64], *eh2;
    size_t len2;
    for (int i = 0; i < 3; i++) {
        uw_func_prog(&fns[i], progs[i], sizeof progs[i]);
        ck_assert_ptr_eq(fns[i].prog, progs[i]);
    }
    ck_assert_int_eq(fns[0].prog_clean, 1);   /* ends at its pop rbp */
    ck_assert_int_eq(fns[2].prog_clean, 0);   /* ends inside its frame */
    ck_assert_int_eq(uw_eh_frame_build(fns, 3, &eh2, &len2, NULL), FJ_OK);
    ck_assert_uint_eq(len2, len);
    ck_assert_mem_eq(eh2, eh, len);
    fj_free(eh2);
    /* Not made: a program longer than the buffer, a bad record. */
    uw_func g = fns[1];
    uw_func_prog(&g, progs[0], 4);
    ck_assert_ptr_null(g.prog);
    static const uw_rec bad[] = {{.off = 1, .kind = UW_SET_FP}};
    g = (uw_func){.name = "bad", .start = 0x100000, .size = 8, .recs = bad, .nrecs = 1};
    uw_func_prog(&g, progs[0], sizeof progs[0]);
    ck_assert_ptr_null(g.prog);
    fj_free(eh);
}
END_TEST

static fj_status build_one(const uw_rec *recs, size_t n, uint32_t size) {
    uw_func f = {.name = "bad", .start = 0x100000, .size = size, .recs = recs, .nrecs = n};
    uint8_t *eh = NULL;
    size_t len;
    fj_status st = uw_eh_frame_build(&f, 1, &eh, &len, NULL);
    fj_free(eh);
    return st;
}

START_TEST(test_eh_frame_rejects) {
    const uw_rec unsorted[] = {{.off = 4, .kind = UW_PUSH_FP}, {.off = 1, .kind = UW_SET_FP}};
    ck_assert_int_eq(build_one(unsorted, 2, 16), FJ_ERR_INVALID_ARG);
    const uw_rec past[] = {{.off = 17, .kind = UW_PUSH_FP}};
    ck_assert_int_eq(build_one(past, 1, 16), FJ_ERR_INVALID_ARG);
    const uw_rec rsp[] = {{.off = 1, .kind = UW_PUSH_FP},
                          {.off = 2, .kind = UW_SAVE_REG, .reg = 4, .cfa_off = -24}};
    ck_assert_int_eq(build_one(rsp, 2, 16), FJ_ERR_INVALID_ARG);
    const uw_rec slot[] = {{.off = 1, .kind = UW_PUSH_FP},
                           {.off = 2, .kind = UW_SAVE_REG, .reg = 3, .cfa_off = -20}};
    ck_assert_int_eq(build_one(slot, 2, 16), FJ_ERR_INVALID_ARG);
    const uw_rec twice[] = {{.off = 1, .kind = UW_PUSH_FP}, {.off = 2, .kind = UW_PUSH_FP}};
    ck_assert_int_eq(build_one(twice, 2, 16), FJ_ERR_INVALID_ARG);
    const uw_rec nopush[] = {{.off = 1, .kind = UW_SET_FP}};
    ck_assert_int_eq(build_one(nopush, 1, 16), FJ_ERR_INVALID_ARG);
    const uw_rec kind[] = {{.off = 1, .kind = 42}};
    ck_assert_int_eq(build_one(kind, 1, 16), FJ_ERR_INVALID_ARG);
    ck_assert(strstr(fj_last_error(), "unknown kind") != NULL);
    ck_assert_int_eq(build_one(stub_recs, NRECS, STUB_SIZE), FJ_OK);
}
END_TEST

/* ---- ELF objects and tools --------------------------------------------------- */


static char tmpdir[PATH_MAX];

static void make_tmpdir(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/fjt_uw.XXXXXX", t && *t ? t : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void assert_no_warnings(const char *out, const char *what) {
    ck_assert_msg(strstr(out, "Warning") == NULL && strstr(out, "warning") == NULL &&
                      strstr(out, "Error") == NULL && strstr(out, "readelf:") == NULL,
                  "%s complains:\n%s", what, out);
}

START_TEST(test_gdb_elf_readelf) {
    if (!have_tool("readelf")) {
        fprintf(stderr, "test_gdb_elf_readelf: skipped, readelf is missing\n");
        return;
    }
    uw_func fns[2] = {stub_func("fjt_one", (const uint8_t *)0x7f0000001000),
                      stub_func("fjt_two", (const uint8_t *)0x7f0000001040)};
    uint8_t *elf;
    size_t len;
    ck_assert_int_eq(uw_elf_build(fns, 2, NULL, &elf, &len), FJ_OK);
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)elf;
    ck_assert_mem_eq(h->e_ident, ELFMAG, SELFMAG);
    ck_assert_uint_eq(h->e_type, ET_REL);
    ck_assert_uint_eq(h->e_machine, EM_X86_64);

    make_tmpdir();
    char path[PATH_MAX + 16], cmd[2 * PATH_MAX];
    snprintf(path, sizeof path, "%s/jit.o", tmpdir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(elf, 1, len, f), len);
    fclose(f);
    fj_free(elf);

    snprintf(cmd, sizeof cmd, "readelf -a -W '%s' 2>&1", path);
    char *out = run(cmd);
    assert_no_warnings(out, "readelf -a");
    ck_assert_msg(strstr(out, "NOBITS") && strstr(out, "00007f0000001000"), "%s", out);
    ck_assert_msg(strstr(out, "FUNC    GLOBAL DEFAULT    1 fjt_one"), "%s", out);
    /* section-relative: fjt_two is 0x40 into .text */
    ck_assert_msg(strstr(out, "0000000000000040    51 FUNC    GLOBAL DEFAULT    1 fjt_two"), "%s",
                  out);
    free(out);

    snprintf(cmd, sizeof cmd, "readelf --debug-dump=frames '%s' 2>&1", path);
    out = run(cmd);
    assert_no_warnings(out, "readelf --debug-dump=frames");
    ck_assert_msg(strstr(out, "pc=00007f0000001000..00007f0000001033"), "%s", out);
    ck_assert_msg(strstr(out, "DW_CFA_def_cfa_register: r6 (rbp)"), "%s", out);
    ck_assert_msg(strstr(out, "DW_CFA_offset: r3 (rbx) at cfa-24"), "%s", out);
    ck_assert_msg(strstr(out, "ZERO terminator"), "%s", out);
    free(out);
    remove_tmpdir();
}
END_TEST

START_TEST(test_dump_objdump) {
    if (!have_tool("objdump") || !have_tool("readelf")) {
        fprintf(stderr, "test_dump_objdump: skipped, binutils are missing\n");
        return;
    }
    uint8_t code[STUB_SIZE];
    memcpy(code, stub_code, sizeof code);
    uw_func f = stub_func("fjt/dumped", (const uint8_t *)0x7f0000002000);
    make_tmpdir();
    ck_assert_int_eq(uw_dump(tmpdir, &f, code, 7), FJ_OK);
    char path[PATH_MAX + 32], cmd[2 * PATH_MAX];
    snprintf(path, sizeof path, "%s/fjt_dumped.7.o", tmpdir);
    struct stat sb;
    ck_assert_msg(stat(path, &sb) == 0, "%s missing", path);

    snprintf(cmd, sizeof cmd, "objdump -d '%s' 2>&1", path);
    char *out = run(cmd);
    ck_assert_msg(strstr(out, "<fjt/dumped>:") && strstr(out, "push   %rbp") &&
                      strstr(out, "call   *%rax") && strstr(out, "leave"),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "readelf -a -W --debug-dump=frames '%s' 2>&1", path);
    out = run(cmd);
    assert_no_warnings(out, "readelf on the dump");
    ck_assert_msg(strstr(out, "pc=0000000000000000..0000000000000033"), "%s", out);
    free(out);

    /* Failures are returned, and leave no temporary file behind. */
    fj_test_fault_inject(FJ_FAULT_FILE, 0);
    ck_assert_int_eq(uw_dump(tmpdir, &f, code, 8), FJ_ERR_OS);
    fj_test_fault_inject(FJ_FAULT_FILE, -1);
    snprintf(cmd, sizeof cmd, "ls -A '%s'", tmpdir);
    out = run(cmd);
    ck_assert_str_eq(out, "fjt_dumped.7.o\n");
    free(out);
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/no/such/dir", tmpdir);
    ck_assert_int_eq(uw_dump(missing, &f, code, 1), FJ_ERR_OS);
    ck_assert(strstr(fj_last_error(), "no/such/dir") != NULL);
    remove_tmpdir();
}
END_TEST

/* ---- gdb ------------------------------------------------------------------------
 * The test binary re-runs itself under gdb with --gdb-helper: the stub's
 * callback hits int3 and gdb's bt must name the kernel and go on to
 * caller_marker and main. */

static void trap_cb(probe *p) {
    (void)p;
    __asm__ volatile("int3");
}

static int gdb_helper(int registered) {
    uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 2;
    memcpy(page, stub_code, STUB_SIZE);
    uint64_t poison = POISON, fn = (uint64_t)(uintptr_t)trap_cb;
    memcpy(page + OFF_POISON, &poison, 8);
    memcpy(page + OFF_CALLBACK, &fn, 8);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return 2;
    uw_func f = stub_func("fjt_gdb_kernel", page);
    uw_object *o = NULL;
    if (registered && uw_register(&f, 1, UW_GDB, &o) != FJ_OK) return 3;
    probe p;
    caller_marker((stub_fn)(uintptr_t)page, &p);
    uw_deregister(o);
    return 0;
}


START_TEST(test_gdb_backtrace) {
    if (!have_tool("gdb") || !have_tool("timeout")) {
        fprintf(stderr, "test_gdb_backtrace: skipped, gdb is missing\n");
        return;
    }
    char *out = gdb_bt("--gdb-helper", 120);
    int traced = check_gdb_bt("test_gdb_backtrace", out, "fjt_gdb_kernel");
    free(out);
    if (!traced) return;

    /* Control: without registration gdb cannot name the kernel. */
    out = gdb_bt("--gdb-helper-unregistered", 120);
    ck_assert_msg(strstr(out, "SIGTRAP") && !strstr(out, "fjt_gdb_kernel"), "%s", out);
    free(out);
}
END_TEST

static Suite *uw_suite(void) {
    Suite *s = suite_create("uw");
    TCase *t = tcase_create("cfi");
    tcase_add_test(t, test_parse_backends);
    tcase_add_test(t, test_buf_on_stack);
    tcase_add_test(t, test_eh_frame_bytes);
    tcase_add_test(t, test_eh_frame_rejects);
    suite_add_tcase(s, t);
    t = tcase_create("register");
    tcase_add_test(t, test_walk_libgcc);
    tcase_add_test(t, test_walk_libunwind);
    tcase_add_test(t, test_walk_libunwind_crowded);
    tcase_add_test(t, test_walk_all);
    tcase_add_test(t, test_walk_unregistered_fails);
    tcase_add_test(t, test_deregister_removes_fde);
    tcase_add_test(t, test_register_all_or_nothing);
    tcase_add_test(t, test_register_bad_args);
    suite_add_tcase(s, t);
    t = tcase_create("tools");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, test_gdb_elf_readelf);
    tcase_add_test(t, test_dump_objdump);
    tcase_add_test(t, test_gdb_backtrace);
    suite_add_tcase(s, t);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--gdb-helper") == 0) return gdb_helper(1);
    if (argc > 1 && strcmp(argv[1], "--gdb-helper-unregistered") == 0) return gdb_helper(0);
    return fjt_run_suite(uw_suite());
}
