/* test_uw_arena.c: registration per code arena. Thousands of hand-assembled
 * stubs are added one by one; after every add the newest and a random older
 * kernel are walked through with libgcc, glibc backtrace() and libunwind;
 * destroy leaves nothing behind; allocation and mapping failures leave the
 * arena as it was; gdb names a kernel of an arena and reaches main. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <unwind.h>

#include "unwindinfo/uw.h"
#include "fjtest.h"
#include "uwstub.h"

static size_t gdb_entries(void) {
    size_t n = 0;
    for (struct jit_code_entry *e = __jit_debug_descriptor.first_entry; e; e = e->next_entry) n++;
    return n;
}

/* The code span of the tests: RW while stubs are written, then RX. */
typedef struct span {
    uint8_t *p;
    size_t len;
} span;

static span span_map(size_t len) {
    span s = {mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len};
    ck_assert_ptr_ne(s.p, MAP_FAILED);
    memset(s.p, 0xcc, len);  /* int3 between and after stubs */
    return s;
}

static void span_exec(span *s) { ck_assert_int_eq(mprotect(s->p, s->len, PROT_READ | PROT_EXEC), 0); }

/* A kernel: the stub at its start, `size` bytes (int3 padding after the
 * stub belongs to it, so big kernels cross the arena's windows). */
typedef struct kern {
    uintptr_t start;
    size_t size;
    char name[32];
} kern;

static uw_func kern_func(const kern *k) {
    return (uw_func){.name = k->name, .start = k->start, .size = k->size, .recs = stub_recs,
                     .nrecs = NRECS};
}

/* Lays out n kernels from `from` with a mix of sizes and gaps: mostly 64
 * bytes apart (the code cache's alignment), every 7th one large enough to
 * span several of the libgcc table's windows (512 bytes at least), every
 * 11th after a gap. */
static size_t layout(span *s, size_t from, kern *ks, size_t n, void (*cb)(probe *), const char *pfx) {
    size_t off = from;
    for (size_t i = 0; i < n; i++) {
        if (i % 11 == 5) off += 640;
        size_t size = i % 7 == 3 ? 1500 : i % 3 ? 64 : STUB_SIZE;
        ck_assert_uint_le(off + size, s->len);
        ks[i].start = (uintptr_t)s->p + off;
        ks[i].size = size;
        snprintf(ks[i].name, sizeof ks[i].name, "%s%zu", pfx, i);
        stub_put(s->p + off, cb);
        off = (off + size + 63) & ~(size_t)63;
    }
    return off;
}

/* Runs kernel k and checks every unwinder's walk through it. */
static void assert_walks(const kern *k, const char *when) {
    probe p;
    memset(&p, 0, sizeof p);
    p.start = k->start;
    p.end = k->start + k->size;
    caller_marker((stub_fn)k->start, &p);
    ck_assert(p.caller_rbx != POISON);
    const struct {
        const chain *c;
        const char *what;
    } walks[] = {{&p.gcc, "_Unwind_Backtrace"},
                 {&p.glibc, "glibc backtrace"},
                 {&p.unw_bt, "unw_backtrace"},
                 {&p.unw_step, "unw_step"}};
    for (size_t i = 0; i < sizeof walks / sizeof walks[0]; i++) {
        char m[160];
        const char *e = chain_problem(walks[i].c, &p, m, sizeof m);
        ck_assert_msg(e == NULL, "%s, kernel %s: %s: %s", when, k->name, walks[i].what, e);
    }
}

/* Is k known to libgcc / libunwind (at its first and last byte)? */
static int gcc_knows(const kern *k) {
    struct dwarf_eh_bases b;
    const void *f1 = ux.find_fde((void *)(k->start + 1), &b);
    int ok1 = f1 && (uintptr_t)b.func <= k->start;
    const void *f2 = ux.find_fde((void *)(k->start + k->size - 1), &b);
    int ok2 = f2 && (uintptr_t)b.func <= k->start;
    return ok1 && ok2 ? 1 : !f1 && !f2 ? 0 : -1;
}

static int unw_knows(const kern *k) {
    unw_proc_info_t pi;
    memset(&pi, 0, sizeof pi);
    int r = unw_get_proc_info_by_ip(unw_local_addr_space, k->start + 1, &pi, NULL);
    if (r != 0) return 0;
    return pi.start_ip == k->start && pi.end_ip == k->start + k->size ? 1 : -1;
}

#define ASSERT_KNOWN(k, yes)                                                              \
    do {                                                                                  \
        ck_assert_msg(gcc_knows(k) == (yes), "libgcc: %s %s", (k)->name,                  \
                      (yes) ? "not found" : "still found");                               \
        ck_assert_msg(unw_knows(k) == (yes), "libunwind: %s %s", (k)->name,               \
                      (yes) ? "not found" : "still found");                               \
    } while (0)

#define ASSERT_CHECK(a) ck_assert_msg(uw_arena_check(a) == FJ_OK, "%s", fj_last_error())

/* ---- Tests ------------------------------------------------------------------- */

enum { ARENA = 1 << 20, N = 2500 };

START_TEST(test_arena_each_add) {
    bind_unwinders();
    span s = span_map(ARENA);
    static kern ks[N];
    layout(&s, 0, ks, N, walk_all, "fjt_arena_");
    span_exec(&s);
    uw_arena *a = NULL;
    ck_assert_int_eq(uw_arena_create(UW_ALL, (uintptr_t)s.p, (uintptr_t)s.p + s.len, "test", &a),
                     FJ_OK);
    const size_t gdb0 = gdb_entries();
    uw_arena_stats st;
    /* gdb's first object is made with the arena, unregistered until the
     * first kernel goes into it. */
    uw_arena_get_stats(a, &st);
    ck_assert_int_eq(st.gdb_spare, 1);
    ck_assert_uint_eq(st.gdb_objects, 0);
    ck_assert_uint_gt(st.gdb_bytes, 0);
    srand(7);
    for (size_t i = 0; i < N; i++) {
        ASSERT_KNOWN(&ks[i], 0);
        uw_func f = kern_func(&ks[i]);
        ck_assert_msg(uw_arena_add(a, &f) == FJ_OK, "add %zu: %s", i, fj_last_error());
        if (i == 0) {
            uw_arena_get_stats(a, &st);
            ck_assert_int_eq(st.gdb_spare, 0);
            ck_assert_uint_eq(st.gdb_objects, 1);
            ck_assert_uint_eq(gdb_entries() - gdb0, 1);
        }
        ASSERT_KNOWN(&ks[i], 1);
        assert_walks(&ks[i], "newest");
        assert_walks(&ks[(size_t)rand() % (i + 1)], "older");
        if (i % 97 == 0 || i + 1 == N) ASSERT_CHECK(a);
    }
    for (size_t i = 0; i < N; i++) ASSERT_KNOWN(&ks[i], 1);
    uw_arena_get_stats(a, &st);
    ck_assert_uint_eq(st.kernels, N);
    ck_assert_uint_le(st.gdb_objects, N / 256 + 5);  /* chunks of 16, 32, ... 256 */
    ck_assert_uint_eq(gdb_entries() - gdb0, st.gdb_objects);
    ck_assert_uint_gt(st.libgcc_bytes, 0);
    ck_assert_uint_gt(st.libunwind_bytes, 0);
    ck_assert_uint_gt(st.gdb_bytes, 0);

    uw_arena_destroy(a);
    for (size_t i = 0; i < N; i++) ASSERT_KNOWN(&ks[i], 0);
    ck_assert_uint_eq(gdb_entries(), gdb0);
    ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
    munmap(s.p, s.len);
}
END_TEST

/* Two neighbouring arenas, kernels added to both in turn; one goes away
 * while the other keeps working. */
START_TEST(test_arena_neighbours) {
    bind_unwinders();
    enum { HALF = 64 << 10, M = 300 };
    span s = span_map(2 * HALF);
    static kern ka[M], kb[M];
    layout(&s, 0, ka, M / 2, walk_all, "fjt_a");
    layout(&s, HALF, kb, M / 2, walk_all, "fjt_b");
    span_exec(&s);
    uw_arena *a, *b;
    const uintptr_t lo = (uintptr_t)s.p;
    ck_assert_int_eq(uw_arena_create(UW_ALL, lo, lo + HALF, "a", &a), FJ_OK);
    ck_assert_int_eq(uw_arena_create(UW_ALL, lo + HALF, lo + 2 * HALF, "b", &b), FJ_OK);
    for (size_t i = 0; i < M / 2; i++) {
        uw_func fa = kern_func(&ka[i]), fb = kern_func(&kb[i]);
        ck_assert_int_eq(uw_arena_add(b, &fb), FJ_OK);
        ck_assert_int_eq(uw_arena_add(a, &fa), FJ_OK);
        assert_walks(&ka[i], "arena a");
        assert_walks(&kb[i], "arena b");
    }
    uw_arena_destroy(a);
    for (size_t i = 0; i < M / 2; i++) {
        ASSERT_KNOWN(&ka[i], 0);
        ASSERT_KNOWN(&kb[i], 1);
    }
    assert_walks(&kb[M / 4], "arena b after a is gone");
    uw_arena_destroy(b);
    ASSERT_KNOWN(&kb[0], 0);
    ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
    munmap(s.p, s.len);
}
END_TEST

/* Every allocation or mapping failure in create leaves nothing registered
 * (a later arena on the same span would meet the leftover). */
START_TEST(test_arena_create_faults) {
    bind_unwinders();
    span s = span_map(64 << 10);
    kern k[3];
    layout(&s, 0, k, 3, walk_all, "fjt_c");
    span_exec(&s);
    const uintptr_t lo = (uintptr_t)s.p, hi = lo + s.len;
    const int classes[] = {FJ_FAULT_ALLOC, FJ_FAULT_MMAP, FJ_FAULT_MPROTECT};
    int failures = 0;
    for (size_t c = 0; c < 3; c++) {
        for (long i = 0; i < 50; i++) {
            uw_arena *a = (uw_arena *)1;
            fj_test_fault_inject(classes[c], i);
            fj_status st = uw_arena_create(UW_ALL, lo, hi, "faulty", &a);
            fj_test_fault_inject(classes[c], -1);
            if (st == FJ_OK) {
                ASSERT_CHECK(a);
                uw_arena_destroy(a);
                break;
            }
            failures++;
            ck_assert_ptr_null(a);
            ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
        }
    }
    ck_assert_int_ge(failures, 5);
    /* After all that, one arena on the span works. */
    uw_arena *a;
    ck_assert_int_eq(uw_arena_create(UW_ALL, lo, hi, "after", &a), FJ_OK);
    for (int i = 0; i < 3; i++) {
        uw_func f = kern_func(&k[i]);
        ck_assert_int_eq(uw_arena_add(a, &f), FJ_OK);
        assert_walks(&k[i], "after failed creates");
    }
    uw_arena_destroy(a);
    munmap(s.p, s.len);
}
END_TEST

/* A failed add: an error, the kernel unknown to every back-end, the older
 * kernels still fine, and the same kernel can be added afterwards. Covers a
 * kernel that starts a window, one that joins a window's group and one
 * that spans windows, and the table commits (mprotect) failing. */
START_TEST(test_arena_add_faults) {
    bind_unwinders();
    enum { M = 60 };
    span s = span_map(1 << 20);
    static kern ks[M];
    layout(&s, 0, ks, M, walk_all, "fjt_f");
    span_exec(&s);
    uw_arena *a;
    /* Creation commits the libgcc table's first CFI step ahead (the second
     * commit it makes, after the table's own): failed here, creation still
     * succeeds and the first add has to commit, which can then fail. */
    fj_test_fault_inject(FJ_FAULT_MPROTECT, 1);
    ck_assert_int_eq(uw_arena_create(UW_ALL, (uintptr_t)s.p, (uintptr_t)s.p + s.len, "f", &a),
                     FJ_OK);
    fj_test_fault_inject(FJ_FAULT_MPROTECT, -1);
    /* The big kernels (1500 bytes) also describe saves and restores in
     * their padding, past the stub: a CFA program longer than the
     * back-ends' stack buffers, which then allocate (a kernel's usual
     * program allocates nothing). */
    enum { PAIRS = 60 };
    static uw_rec long_recs[NRECS + 2 * PAIRS];
    memcpy(long_recs, stub_recs, sizeof stub_recs);
    for (int j = 0; j < PAIRS; j++) {
        long_recs[NRECS + 2 * j] =
            (uw_rec){.off = 64 + 20 * j, .kind = UW_SAVE_REG, .reg = 3, .cfa_off = -24};
        long_recs[NRECS + 2 * j + 1] = (uw_rec){.off = 74 + 20 * j, .kind = UW_RESTORE_REG, .reg = 3};
    }
    int alloc_failures = 0, commit_failures = 0, long_allocs = 0;
    for (size_t i = 0; i < M; i++) {
        uw_func f = kern_func(&ks[i]);
        const int cls = i % 2 ? FJ_FAULT_ALLOC : FJ_FAULT_MPROTECT;
        if (ks[i].size == 1500) {
            f.recs = long_recs;
            f.nrecs = NRECS + 2 * PAIRS;
            long_allocs += cls == FJ_FAULT_ALLOC;
        }
        for (long k = 0;; k++) {
            ck_assert_int_lt(k, 200);
            const size_t before = gdb_entries();
            fj_test_fault_inject(cls, k);
            fj_status st = uw_arena_add(a, &f);
            fj_test_fault_inject(cls, -1);
            if (st == FJ_OK) break;
            ck_assert_int_eq(st, FJ_ERR_NO_MEMORY);
            *(cls == FJ_FAULT_ALLOC ? &alloc_failures : &commit_failures) += 1;
            ASSERT_KNOWN(&ks[i], 0);
            ck_assert_uint_eq(gdb_entries(), before);
            if (i) assert_walks(&ks[(i * 7) % i], "after a failed add");
            ASSERT_CHECK(a);
        }
        assert_walks(&ks[i], "added after failures");
        ASSERT_CHECK(a);
    }
    ck_assert_int_ge(alloc_failures, long_allocs);  /* the long programs' buffers at least */
    ck_assert_int_ge(long_allocs, 4);
    ck_assert_int_ge(commit_failures, 1);  /* the first kernel's CFI needs the first commit */
    uw_arena_destroy(a);
    ASSERT_KNOWN(&ks[0], 0);
    ck_assert_ptr_null(__jit_debug_descriptor.first_entry);
    munmap(s.p, s.len);
}
END_TEST

START_TEST(test_arena_bad_args) {
    uw_arena *a = (uw_arena *)1;
    ck_assert_int_eq(uw_arena_create(UW_ALL, 0x10000, 0x10000, "x", &a), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(uw_arena_create(1u << 7, 0x10000, 0x20000, "x", &a), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(uw_arena_create(UW_ALL, 0x10000, 0x20000, "", &a), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(uw_arena_create(UW_ALL, 0x10000, 0x20000, "x", NULL), FJ_ERR_INVALID_ARG);

    /* Addresses are only described, never run, in this test. */
    ck_assert_int_eq(uw_arena_create(UW_ALL, 0x7f0000100000, 0x7f0000110000, "x", &a), FJ_OK);
    uw_func f = {.name = "k", .start = 0x7f0000100100, .size = 64, .recs = stub_recs,
                 .nrecs = NRECS};
    ck_assert_int_eq(uw_arena_add(a, &f), FJ_OK);
    uw_func g = f;
    g.start += 32;  /* overlaps */
    ck_assert_int_eq(uw_arena_add(a, &g), FJ_ERR_INVALID_ARG);
    ck_assert(strstr(fj_last_error(), "address order") != NULL);
    g.start = 0x7f0000100000;  /* below */
    ck_assert_int_eq(uw_arena_add(a, &g), FJ_ERR_INVALID_ARG);
    g.start = 0x7f000010fff0;  /* runs past hi */
    ck_assert_int_eq(uw_arena_add(a, &g), FJ_ERR_INVALID_ARG);
    ck_assert(strstr(fj_last_error(), "outside") != NULL);
    static const uw_rec bad[] = {{.off = 1, .kind = UW_SET_FP}};
    g = f;
    g.start = 0x7f0000100200;
    g.recs = bad;
    g.nrecs = 1;
    ck_assert_int_eq(uw_arena_add(a, &g), FJ_ERR_INVALID_ARG);
    g.recs = stub_recs;
    g.nrecs = NRECS;
    ck_assert_int_eq(uw_arena_add(a, &g), FJ_OK);  /* still usable */
    ck_assert_int_eq(uw_arena_add(NULL, &g), FJ_ERR_INVALID_ARG);
    ck_assert_int_eq(uw_arena_add(a, NULL), FJ_ERR_INVALID_ARG);
    ASSERT_CHECK(a);
    uw_arena_destroy(a);
    uw_arena_destroy(NULL);
}
END_TEST

/* Each back-end alone (FRAMEJIT_UNWIND=libgcc, ...). */
START_TEST(test_arena_single_backends) {
    bind_unwinders();
    span s = span_map(64 << 10);
    kern k[20];
    layout(&s, 0, k, 20, walk_all, "fjt_s");
    span_exec(&s);
    const unsigned sets[] = {UW_LIBGCC, UW_LIBUNWIND, UW_GDB, 0};
    for (size_t j = 0; j < 4; j++) {
        uw_arena *a;
        ck_assert_int_eq(uw_arena_create(sets[j], (uintptr_t)s.p, (uintptr_t)s.p + s.len, "one", &a),
                         FJ_OK);
        for (size_t i = 0; i < 20; i++) {
            uw_func f = kern_func(&k[i]);
            ck_assert_int_eq(uw_arena_add(a, &f), FJ_OK);
            ck_assert_int_eq(gcc_knows(&k[i]), (sets[j] & UW_LIBGCC) != 0);
            ck_assert_int_eq(unw_knows(&k[i]), (sets[j] & UW_LIBUNWIND) != 0);
        }
        ck_assert_uint_eq(gdb_entries(), sets[j] & UW_GDB ? 2 : 0);  /* 20 = 16 + 4 */
        ASSERT_CHECK(a);
        uw_arena_destroy(a);
        ck_assert_uint_eq(gdb_entries(), 0);
    }
    munmap(s.p, s.len);
}
END_TEST

/* ---- gdb ------------------------------------------------------------------------
 * The test binary re-runs itself under gdb with --arena-gdb-helper: 300
 * kernels in an arena, the 150th's callback hits int3, and gdb's bt must
 * name it and go on to caller_marker and main. */

static void trap_cb(probe *p) {
    (void)p;
    __asm__ volatile("int3");
}

static int gdb_helper(void) {
    enum { M = 300 };
    uint8_t *p = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    uw_arena *a;
    if (uw_arena_create(UW_GDB, (uintptr_t)p, (uintptr_t)p + (64 << 10), "gdb", &a) != FJ_OK)
        return 3;
    for (int i = 0; i < M; i++) stub_put(p + 128 * i, trap_cb);
    if (mprotect(p, 64 << 10, PROT_READ | PROT_EXEC) != 0) return 2;
    for (int i = 0; i < M; i++) {
        char name[32];
        snprintf(name, sizeof name, "fjt_arena_gdb_%d", i);
        uw_func f = {.name = name, .start = (uintptr_t)p + 128 * i, .size = STUB_SIZE,
                     .recs = stub_recs, .nrecs = NRECS};
        if (uw_arena_add(a, &f) != FJ_OK) return 3;
    }
    probe pr;
    caller_marker((stub_fn)(uintptr_t)(p + 128 * 150), &pr);
    uw_arena_destroy(a);
    return 0;
}


START_TEST(test_arena_gdb_backtrace) {
    if (!have_tool("gdb") || !have_tool("timeout")) {
        fprintf(stderr, "test_arena_gdb_backtrace: skipped, gdb is missing\n");
        return;
    }
    char *out = gdb_bt("--arena-gdb-helper", 180);
    check_gdb_bt("test_arena_gdb_backtrace", out, "fjt_arena_gdb_150");
    free(out);
}
END_TEST

static Suite *arena_suite(void) {
    Suite *s = suite_create("uw_arena");
    TCase *t = tcase_create("arena");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, test_arena_each_add);
    tcase_add_test(t, test_arena_neighbours);
    tcase_add_test(t, test_arena_create_faults);
    tcase_add_test(t, test_arena_add_faults);
    tcase_add_test(t, test_arena_bad_args);
    tcase_add_test(t, test_arena_single_backends);
    suite_add_tcase(s, t);
    t = tcase_create("tools");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, test_arena_gdb_backtrace);
    suite_add_tcase(s, t);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--arena-gdb-helper") == 0) return gdb_helper();
    return fjt_run_suite(arena_suite());
}
