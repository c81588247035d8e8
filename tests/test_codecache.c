/* test_codecache.c: Check suite for codecache/: backings, W^X, placement,
 * lookup, address uniqueness, capacity, concurrency, files and faults. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "codecache/cc.h"
#include "codecache/cc_impl.h"
#include "fjtest.h"

typedef int (*kfn)(void);

/* mov eax, imm32; ret */
static void blob(uint8_t b[6], uint32_t v) {
    b[0] = 0xb8;
    memcpy(b + 1, &v, 4);
    b[5] = 0xc3;
}

static int call(const cc_entry *e) { return ((kfn)e->start)(); }

static void assert_no_wx(const char *when) {
    char detail[512];
    int wx = fjt_maps_has_wx(detail, sizeof detail);
    ck_assert_msg(!wx, "W+X mapping %s: %s", when, detail);
}

static cc_cache *make(int code_file, size_t capacity) {
    cc_config cfg = {.capacity = capacity, .code_file = code_file};
    cc_cache *c = NULL;
    fj_status st = cc_create(&cfg, &c);
    ck_assert_msg(st == FJ_OK, "cc_create: %s", fj_last_error());
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Forces the anonymous fallback: the memfd_create probe fails once. */
static cc_cache *make_anon(size_t capacity) {
    fj_test_fault_inject(FJ_FAULT_FILE, 0);
    cc_cache *c = make(0, capacity);
    fj_test_fault_inject(FJ_FAULT_FILE, -1);
    ck_assert_str_eq(cc_backing(c), "anonymous");
    return c;
}

static cc_entry *place_val(cc_cache *c, uint32_t v) {
    uint8_t b[6];
    char name[32];
    blob(b, v);
    snprintf(name, sizeof name, "k%u", v);
    cc_entry *e = NULL;
    fj_status st = cc_place(c, b, sizeof b, name, &e);
    ck_assert_msg(st == FJ_OK, "cc_place: %s", fj_last_error());
    ck_assert_ptr_nonnull(e);
    return e;
}

static void check_lookup(const cc_entry *e) {
    /* One assertion per blob, not per byte: Check records every assertion. */
    size_t wrong = 0;
    for (size_t i = 0; i < e->size; i++) wrong += cc_lookup(e->start + i) != e;
    ck_assert_msg(wrong == 0, "%zu bytes of '%s' not found", wrong, e->name);
    ck_assert_ptr_null(cc_lookup(e->start - 1));
    ck_assert_ptr_null(cc_lookup(e->start + e->size));
}

/* Places n kernels, runs each, checks lookup and W^X along the way. */
static void exercise(cc_cache *c, int n) {
    cc_entry **es = calloc((size_t)n, sizeof *es);
    for (int i = 0; i < n; i++) {
        es[i] = place_val(c, 1000u + (uint32_t)i);
        ck_assert_int_eq(call(es[i]), 1000 + i);
        ck_assert_int_eq(es[i]->start % CC_ALIGN, 0);
        if (i % 64 == 0) assert_no_wx("while placing");
    }
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "k%u", 1000u + (uint32_t)i);
        ck_assert_str_eq(es[i]->name, name);
        ck_assert_int_eq(call(es[i]), 1000 + i); /* earlier kernels still run */
        check_lookup(es[i]);
        if (i) ck_assert_uint_gt(es[i]->start, es[i - 1]->start);
    }
    for (int i = 0; i < n; i += 2) cc_remove(c, es[i]);
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) ck_assert_ptr_null(cc_lookup(es[i]->start));
        else ck_assert_ptr_eq(cc_lookup(es[i]->start), es[i]);
    }
    assert_no_wx("after placing");
    free(es);
}

START_TEST(test_file_backing) {
    cc_cache *c = make(1, 0);
    ck_assert_str_eq(cc_backing(c), "file");
    exercise(c, 3000);
    cc_destroy(c);
    assert_no_wx("after destroy");
}
END_TEST

START_TEST(test_memfd_backing) {
    cc_cache *c = make(0, 0);
    ck_assert_str_eq(cc_backing(c), "memfd");
    exercise(c, 3000);
    cc_destroy(c);
}
END_TEST

START_TEST(test_anon_backing) {
    cc_cache *c = make_anon(0);
    exercise(c, 600); /* one page each: crosses several arenas */
    cc_destroy(c);
    assert_no_wx("after destroy");
}
END_TEST

START_TEST(test_fallback_chain) {
    /* The /dev/shm file fails: memfd is next. */
    fj_test_fault_inject(FJ_FAULT_FILE, 0);
    cc_cache *c = make(1, 0);
    fj_test_fault_inject(FJ_FAULT_FILE, -1);
    ck_assert_str_eq(cc_backing(c), "memfd");
    ck_assert_int_eq(call(place_val(c, 7)), 7);
    cc_destroy(c);
    ck_assert_int_eq(cc_create(NULL, &c), FJ_OK); /* NULL config: defaults, file */
    ck_assert_str_eq(cc_backing(c), "file");
    cc_destroy(c);
    ck_assert_int_eq(cc_create(NULL, NULL), FJ_ERR_INVALID_ARG);
    cc_entry *e = (cc_entry *)1;
    c = make(0, 0);
    ck_assert_int_eq(cc_place(c, NULL, 6, "x", &e), FJ_ERR_INVALID_ARG);
    ck_assert_ptr_null(e);
    ck_assert_int_eq(cc_place(c, (const uint8_t *)"x", 0, "x", &e), FJ_ERR_INVALID_ARG);
    cc_destroy(c);
}
END_TEST

static int cmp_entry(const void *a, const void *b) {
    uintptr_t x = (*(const cc_entry *const *)a)->start, y = (*(const cc_entry *const *)b)->start;
    return x < y ? -1 : x > y;
}

START_TEST(test_unique_addresses) {
    cc_cache *c[2] = {make(1, 0), make(0, 0)};
    enum { ROUNDS = 6, PER = 300, N = ROUNDS * PER * 2 };
    const cc_entry **all = calloc(N, sizeof *all);
    uintptr_t last[2] = {0, 0};
    int n = 0;
    for (int r = 0; r < ROUNDS; r++) {
        cc_entry *batch[2][PER];
        for (int i = 0; i < PER; i++)
            for (int k = 0; k < 2; k++) {
                cc_entry *e = place_val(c[k], (uint32_t)n);
                ck_assert_int_eq(call(e), n);
                ck_assert_uint_gt(e->start, last[k]); /* monotonic per cache */
                last[k] = e->start;
                batch[k][i] = e;
                all[n++] = e;
            }
        /* Remove everything placed this round: freed room, never reused. */
        for (int i = 0; i < PER; i++)
            for (int k = 0; k < 2; k++) cc_remove(c[k], batch[k][i]);
        assert_no_wx("remove/place cycle");
    }
    ck_assert_int_eq(n, N);
    /* Records of removed entries stay readable until cc_destroy. */
    qsort(all, N, sizeof *all, cmp_entry);
    for (int i = 1; i < N; i++)
        ck_assert_msg(all[i - 1]->start + all[i - 1]->size <= all[i]->start,
                      "overlap at %#lx", (unsigned long)all[i]->start);
    cc_destroy(c[0]);
    cc_destroy(c[1]);
    free(all);
}
END_TEST

START_TEST(test_capacity) {
    cc_cache *c = make(0, 4096);
    cc_entry *es[64];
    for (int i = 0; i < 64; i++) es[i] = place_val(c, (uint32_t)i); /* 64 B each */
    uint8_t b[6];
    blob(b, 99);
    cc_entry *e = (cc_entry *)1;
    ck_assert_int_eq(cc_place(c, b, sizeof b, "over", &e), FJ_ERR_CACHE_FULL);
    ck_assert_ptr_null(e);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "over"));
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "4096"));
    /* The capacity bounds memory held: one removed kernel leaves a hole in
     * an arena that still runs 63 others, and holes are never refilled. */
    cc_remove(c, es[3]);
    ck_assert_int_eq(cc_place(c, b, sizeof b, "again", &e), FJ_ERR_CACHE_FULL);
    cc_stats st;
    cc_get_stats(c, &st);
    ck_assert_uint_eq(st.held, 4096);
    ck_assert_uint_eq(st.live_kernels, 63);
    ck_assert_uint_eq(st.live_bytes, 63 * 6);
    /* Emptied, the arena is given back and there is room again, at new
     * addresses. */
    for (int i = 0; i < 64; i++) cc_remove(c, es[i]);
    e = place_val(c, 99);
    ck_assert_int_eq(call(e), 99);
    ck_assert_uint_gt(e->start, es[63]->start);
    cc_get_stats(c, &st);
    ck_assert_uint_eq(st.held, 64);
    ck_assert_uint_eq(st.arenas, 1);
    ck_assert_uint_eq(st.arenas_retired, 1);
    /* A kernel bigger than the whole capacity. */
    uint8_t *big = calloc(1, 8192);
    ck_assert_int_eq(cc_place(c, big, 8192, "big", &e), FJ_ERR_CACHE_FULL);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "whole capacity"));
    free(big);
    cc_destroy(c);
}
END_TEST

/* ---- a kernel keeps running while thousands more are placed ---- */

static atomic_int stop_flag;
static atomic_long runs, bad_runs;
static atomic_long prof_hits, prof_bad;

static void *runner(void *arg) {
    const cc_entry *e = arg;
    kfn f = (kfn)e->start;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        for (int i = 0; i < 1000; i++)
            if (f() != 4242) atomic_fetch_add(&bad_runs, 1);
        atomic_fetch_add(&runs, 1000);
    }
    return NULL;
}

/* SIGPROF handler: look the interrupted pc up, as a profiler would. */
static void on_prof(int sig, siginfo_t *si, void *uc_) {
    (void)sig;
    (void)si;
    ucontext_t *uc = uc_;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    const cc_entry *e = cc_lookup(pc);
    if (e) {
        atomic_fetch_add(&prof_hits, 1);
        if (pc < e->start || pc >= e->start + e->size) atomic_fetch_add(&prof_bad, 1);
    }
}

static void run_while_placing(cc_cache *c, int n) {
    atomic_store(&stop_flag, 0);
    atomic_store(&runs, 0);
    atomic_store(&bad_runs, 0);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_PROF, &it, NULL);

    cc_entry *k = place_val(c, 4242);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, runner, k), 0);
    while (atomic_load(&runs) == 0) sched_yield();
    cc_entry *prev = NULL;
    for (int i = 0; i < n; i++) {
        cc_entry *e = place_val(c, (uint32_t)i);
        ck_assert_int_eq(call(e), i);
        if (prev && i % 3) cc_remove(c, prev);
        prev = e;
        if (i % 500 == 0) assert_no_wx("while a kernel runs");
    }
    long before = atomic_load(&runs);
    while (atomic_load(&runs) == before) sched_yield(); /* still alive */
    atomic_store(&stop_flag, 1);
    pthread_join(th, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    ck_assert_int_eq(atomic_load(&bad_runs), 0);
    ck_assert_int_gt(atomic_load(&runs), before);
    ck_assert_int_eq(atomic_load(&prof_bad), 0);
}

START_TEST(test_running_kernel_file) {
    cc_cache *c = make(1, 0);
    run_while_placing(c, 20000); /* crosses arenas */
    cc_destroy(c);
}
END_TEST

START_TEST(test_running_kernel_anon) {
    cc_cache *c = make_anon(0);
    run_while_placing(c, 3000);
    cc_destroy(c);
}
END_TEST

/* ---- concurrent lookups while another thread places and removes ---- */

enum { NK = 4000 };
static _Atomic uintptr_t k_start[NK];
/* k_removing is set before cc_remove, k_removed after it returns. */
static atomic_int k_removing[NK], k_removed[NK];
static atomic_int k_published;
static atomic_long look_bad, look_hits, look_rounds;

static void *reader(void *arg) {
    (void)arg;
    unsigned seed = 1;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        int n = atomic_load_explicit(&k_published, memory_order_acquire);
        if (n == 0) continue;
        int i = (int)(rand_r(&seed) % (unsigned)n);
        int removed = atomic_load_explicit(&k_removed[i], memory_order_acquire);
        uintptr_t s = atomic_load_explicit(&k_start[i], memory_order_relaxed);
        uintptr_t pc = s + (uintptr_t)(rand_r(&seed) % 6);
        const cc_entry *e = cc_lookup(pc);
        char name[32];
        snprintf(name, sizeof name, "k%d", i);
        if (removed) {
            if (e) atomic_fetch_add(&look_bad, 1);
        } else if (!e) {
            /* Only legal if it is being removed meanwhile. */
            if (!atomic_load(&k_removing[i])) atomic_fetch_add(&look_bad, 1);
        } else if (e->start != s || e->size != 6 || strcmp(e->name, name) != 0) {
            atomic_fetch_add(&look_bad, 1);
        } else {
            atomic_fetch_add(&look_hits, 1);
        }
        /* Addresses in the padding between kernels must never match. */
        if (cc_lookup(s + 6 + (uintptr_t)(rand_r(&seed) % 58))) atomic_fetch_add(&look_bad, 1);
        atomic_fetch_add(&look_rounds, 1);
    }
    return NULL;
}

START_TEST(test_concurrent_lookup) {
    cc_cache *c = make(1, 0);
    cc_cache *other = make(0, 0); /* lookups span caches */
    atomic_store(&stop_flag, 0);
    pthread_t th[2];
    for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, reader, NULL), 0);
    cc_entry *es[NK];
    for (int i = 0; i < NK; i++) {
        uint8_t b[6];
        char name[32];
        blob(b, (uint32_t)i);
        snprintf(name, sizeof name, "k%d", i);
        ck_assert_int_eq(cc_place(i % 2 ? other : c, b, 6, name, &es[i]), FJ_OK);
        atomic_store_explicit(&k_start[i], es[i]->start, memory_order_relaxed);
        atomic_store_explicit(&k_published, i + 1, memory_order_release);
        if (i >= 10 && i % 3 == 0) {
            int j = i - 10;
            atomic_store(&k_removing[j], 1);
            cc_remove(j % 2 ? other : c, es[j]);
            atomic_store_explicit(&k_removed[j], 1, memory_order_release);
        }
        if (i % 256 == 255) { /* make sure the readers really interleave */
            long r = atomic_load(&look_rounds);
            while (atomic_load(&look_rounds) < r + 100) sched_yield();
        }
    }
    atomic_store(&stop_flag, 1);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    ck_assert_int_eq(atomic_load(&look_bad), 0);
    ck_assert_int_gt(atomic_load(&look_hits), 0);
    uintptr_t gone = es[1]->start; /* in other, not removed */
    ck_assert_ptr_eq(cc_lookup(gone), es[1]);
    cc_destroy(other);
    /* other's addresses are gone from lookup; c's remain. */
    ck_assert_ptr_null(cc_lookup(gone));
    ck_assert_ptr_eq(cc_lookup(es[4]->start), es[4]);
    cc_destroy(c);
}
END_TEST

/* ---- /dev/shm files ---- */

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

START_TEST(test_shm_file) {
    cc_cache *c = make(1, 0);
    cc_entry *e = place_val(c, 0x11223344);
    const char *p = cc_entry_path(e);
    ck_assert_ptr_nonnull(p);
    char path[128];
    snprintf(path, sizeof path, "%s", p);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "/dev/shm/framejit-%d-", (int)getpid());
    ck_assert_int_eq(strncmp(path, prefix, strlen(prefix)), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(st.st_uid, geteuid());
    /* First page reserved for a header; code at a page-aligned offset. */
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t buf[8];
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, buf, 6, pg), 6);
    ck_assert_int_eq(buf[0], 0xb8);
    ck_assert_int_eq(buf[5], 0xc3);
    ck_assert_int_eq(pread(fd, buf, 8, 0), 8);
    ck_assert_int_eq(buf[0] | buf[7], 0);
    close(fd);
    /* Other backings have no file. */
    cc_cache *m = make(0, 0);
    ck_assert_ptr_null(cc_entry_path(place_val(m, 1)));
    cc_destroy(m);
    cc_destroy(c);
    ck_assert_int_eq(stat(path, &st), -1);
    ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(test_arena_retire) {
    /* Big kernels: one arena each. Removing all of a full arena's kernels
     * gives its file back; its addresses are still never reused. */
    cc_cache *c = make(1, 0);
    size_t len = 700 << 10;
    uint8_t *code = calloc(1, len);
    blob(code, 5);
    cc_entry *e[3];
    char path[3][128];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cc_place(c, code, len, "big", &e[i]), FJ_OK);
        ck_assert_int_eq(call(e[i]), 5);
        snprintf(path[i], sizeof path[i], "%s", cc_entry_path(e[i]));
    }
    ck_assert_str_ne(path[0], path[1]);
    ck_assert(file_exists(path[0]));
    cc_remove(c, e[0]);
    ck_assert(!file_exists(path[0]));
    ck_assert(file_exists(path[1]) && file_exists(path[2]));
    ck_assert_ptr_null(cc_lookup(e[0]->start));
    cc_entry *n = place_val(c, 6);
    ck_assert_uint_gt(n->start, e[2]->start);
    ck_assert_int_eq(call(e[2]), 5);
    /* The current arena, emptied, is given back once placement moves on. */
    cc_remove(c, e[2]);
    cc_remove(c, n);
    ck_assert(file_exists(path[2]));
    ck_assert_int_eq(cc_place(c, code, len, "big", &n), FJ_OK);
    ck_assert_int_eq(call(n), 5);
    ck_assert(!file_exists(path[2]));
    assert_no_wx("after retire");
    free(code);
    cc_destroy(c);
    ck_assert(!file_exists(path[1]));
}
END_TEST

static void make_shm_file(const char *p) {
    int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
    ck_assert_msg(fd >= 0, "create %s: %s", p, strerror(errno));
    close(fd);
}

START_TEST(test_stale_cleanup) {
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    ck_assert_int_gt(dead, 0);
    waitpid(dead, NULL, 0);
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    ck_assert_int_gt(live, 0);
    char pdead[64], plive[64], pweird[64];
    snprintf(pdead, sizeof pdead, "/dev/shm/framejit-%d-0", (int)dead);
    snprintf(plive, sizeof plive, "/dev/shm/framejit-%d-0", (int)live);
    snprintf(pweird, sizeof pweird, "/dev/shm/framejit-%d-0.keep", (int)dead);
    make_shm_file(pdead);
    make_shm_file(plive);
    make_shm_file(pweird);
    cc_cache *c = make(1, 0);
    int dead_gone = !file_exists(pdead), live_kept = file_exists(plive);
    int weird_kept = file_exists(pweird);
    unlink(plive);
    unlink(pweird);
    unlink(pdead);
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    cc_destroy(c);
    ck_assert_msg(dead_gone, "stale file of a dead pid was not removed");
    ck_assert_msg(live_kept, "file of a live pid was removed");
    ck_assert_msg(weird_kept, "a file with a foreign name was removed");
}
END_TEST

START_TEST(test_exit_hook) {
    /* A child that exits with a live cache leaves no file behind. */
    char path[128] = "";
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t ch = fork();
    if (ch == 0) {
        cc_config cfg = {.code_file = 1};
        cc_cache *c;
        cc_entry *e;
        uint8_t b[6];
        blob(b, 1);
        if (cc_create(&cfg, &c) != FJ_OK || cc_place(c, b, 6, "x", &e) != FJ_OK) _exit(1);
        const char *p = cc_entry_path(e);
        if (!p || write(pfd[1], p, strlen(p) + 1) < 0) _exit(1);
        exit(0); /* runs atexit handlers */
    }
    close(pfd[1]);
    ck_assert_int_gt(read(pfd[0], path, sizeof path - 1), 0);
    close(pfd[0]);
    int status;
    waitpid(ch, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(strncmp(path, "/dev/shm/framejit-", 18), 0);
    ck_assert_msg(!file_exists(path), "%s left behind", path);
}
END_TEST

START_TEST(test_keep_after_exit) {
    /* With keeping on, a child that exits with a live cache leaves its file
     * read-only, with the code in it; the executable view was private. */
    char path[128] = "";
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    pid_t ch = fork();
    if (ch == 0) {
        cc_config cfg = {.code_file = 1, .keep_seconds = 3600, .keep_bytes = 64 << 20};
        cc_cache *c;
        cc_entry *e;
        uint8_t b[6];
        blob(b, 77);
        if (cc_create(&cfg, &c) != FJ_OK || cc_place(c, b, 6, "x", &e) != FJ_OK) _exit(1);
        const char *p = cc_entry_path(e);
        if (!p || write(pfd[1], p, strlen(p) + 1) < 0) _exit(1);
        FILE *m = fopen("/proc/self/maps", "r");
        char line[512];
        int private_rx = 0;
        while (m && fgets(line, sizeof line, m))
            if (strstr(line, p) && strstr(line, " r-xp ")) private_rx = 1;
        if (m) fclose(m);
        exit(private_rx ? 0 : 2); /* runs atexit handlers */
    }
    close(pfd[1]);
    ck_assert_int_gt(read(pfd[0], path, sizeof path - 1), 0);
    close(pfd[0]);
    int status;
    waitpid(ch, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "%s not kept", path);
    ck_assert_int_eq(st.st_mode & 0777, 0400);
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t buf[6];
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, buf, 6, pg), 6);
    close(fd);
    ck_assert_int_eq(buf[0], 0xb8);
    /* A prune with keeping off removes it (its process is gone). */
    cc_shm_prune(0, 0, 0);
    ck_assert(!file_exists(path));
}
END_TEST

/* A kept file (0400) of pid with n bytes, modified age_s seconds ago (a
 * negative age: in the future). */
static void kept_file(char *path, size_t n, pid_t pid, unsigned seq, size_t bytes, int age_s) {
    snprintf(path, n, "/dev/shm/framejit-%d-%u.so", (int)pid, seq);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0400);
    ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
    char *b = calloc(1, bytes);
    memset(b, 1, bytes);
    ck_assert_int_eq(write(fd, b, bytes), (ssize_t)bytes);
    free(b);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    ck_assert_int_eq(futimens(fd, t), 0);
    close(fd);
}

START_TEST(test_prune_bounds) {
    /* Kept files count whatever their pid (here a live one: ours is the
     * parent's, the files name a running child). */
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    char old[64], mid[64], young[64], live_file[64];
    /* mid and young dated ahead of now: newer than any file another
     * process of a parallel test run keeps meanwhile, which would
     * otherwise count first against the byte bound. */
    kept_file(old, sizeof old, live, 1, 64 << 10, 7200);  /* past the time bound */
    kept_file(mid, sizeof mid, live, 2, 64 << 10, -10);
    kept_file(young, sizeof young, live, 3, 64 << 10, -20);
    snprintf(live_file, sizeof live_file, "/dev/shm/framejit-%d-4.so", (int)live);
    make_shm_file(live_file); /* 0600 of a live process: never touched */
    /* Room for one 64 KiB file, not two: the older goes. */
    cc_shm_prune(1, 3600, 100 << 10);
    int old_gone = !file_exists(old), mid_gone = !file_exists(mid);
    int young_kept = file_exists(young), live_kept = file_exists(live_file);
    unlink(old);
    unlink(mid);
    unlink(young);
    unlink(live_file);
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    ck_assert_msg(old_gone, "a file past keep_seconds was kept");
    ck_assert_msg(mid_gone, "the older file over keep_bytes was kept");
    ck_assert_msg(young_kept, "the newest file within the bounds was removed");
    ck_assert_msg(live_kept, "a live process's file was removed");
}
END_TEST

/* ---- how code gets into the arena ------------------------------------------
 * File arenas write small kernels through their RW view and kernels that
 * reach a page not mapped in that view yet (the first page is, from the
 * arena's creation) and fill half of one, or continue a page written that
 * way, into the file (cc_arena.c). Both ways must leave the same bytes,
 * int3 after them to the line's end, behind the executable view. */

static cc_entry *place_sized(cc_cache *c, uint32_t v, size_t len) {
    uint8_t *code = malloc(len);
    ck_assert_ptr_nonnull(code);
    for (size_t i = 0; i < len; i++) code[i] = (uint8_t)(i * 7 + v);
    if (len >= 6) blob(code, v);
    cc_entry *e = NULL;
    fj_status st = cc_place(c, code, len, "sized", &e);
    ck_assert_msg(st == FJ_OK, "cc_place of %zu bytes: %s", len, fj_last_error());
    const uint8_t *x = (const uint8_t *)e->start;
    ck_assert_msg(memcmp(x, code, len) == 0, "kernel %u: %zu bytes differ", v, len);
    size_t pad = (len + CC_ALIGN - 1) / CC_ALIGN * CC_ALIGN, bad = 0;
    for (size_t i = len; i < pad; i++) bad += x[i] != 0xcc;
    ck_assert_msg(bad == 0, "kernel %u: %zu padding bytes are not int3", v, bad);
    ck_assert_int_eq(call(e), (int)v);
    free(code);
    return e;
}

static void write_paths(cc_cache *c, int file) {
    /* {size, written into the file}: offsets from a fresh arena's start. */
    static const struct { size_t len; int file; } seq[] = {
        {2500, 0}, /* 0: fills more than half of page 0, which the arena's creation
                      mapped in the view: the view */
        {6, 0},    /* 2560: within a page written through the view */
        {3000, 1}, /* 2624: reaches page 1, fills more than half a page */
        {100, 1},  /* 5632: continues page 1, written into the file */
        {1000, 1}, {2040, 1}, /* ... and on into page 2 */
        {3456, 1}, /* 8832: ends exactly at page 3 */
        {6, 0},    /* 12288: a new page again, small: the view */
        {9000, 1}, /* 12352: three pages */
    };
    cc_stats st0, st1;
    cc_get_stats(c, &st0);
    uint64_t want = 0;
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        cc_entry *e = place_sized(c, 500 + (uint32_t)i, seq[i].len);
        want += (uint64_t)(file && seq[i].file);
        cc_get_stats(c, &st1);
        ck_assert_msg(st1.file_writes - st0.file_writes == want,
                      "after kernel %zu (%zu bytes at +%#lx): %llu file writes, want %llu", i,
                      seq[i].len, (unsigned long)(e->start - e->arena_lo),
                      (unsigned long long)(st1.file_writes - st0.file_writes),
                      (unsigned long long)want);
    }
    /* Every kernel still runs (the file writes did not disturb their
     * neighbours on shared pages). */
    assert_no_wx("after mixed writes");
}

START_TEST(test_write_paths) {
    if (sysconf(_SC_PAGESIZE) != 4096) {
        printf("test_write_paths: the offsets assume 4 KiB pages\n");
        return;
    }
    cc_cache *c = make(1, 0);
    ck_assert_str_eq(cc_backing(c), "file");
    write_paths(c, 1);
    cc_destroy(c);
    c = make(0, 0);
    write_paths(c, strcmp(cc_backing(c), "anonymous") != 0);
    cc_destroy(c);
    c = make_anon(0);
    write_paths(c, 0);
    cc_destroy(c);
}
END_TEST

/* ---- the writable view is populated as the file grows ---------------------
 * The first store into a page of the RW view is a write fault (10-12 us
 * under shadow paging) unless the page's entry is already writable;
 * cc_arena.c makes the view's entries for each new step of the file
 * instead. Checked by storing back the bytes already there, one per page,
 * and counting the process's minor faults (without the populating: one
 * per page of a new step). */

/* Minor faults taken by storing into each page of [rw, rw + len) the byte
 * the executable view shows at rx (read first, outside the count), or 0
 * with rx = 0 (fresh metadata pages): the stores change nothing and read
 * nothing through the RW view (a read there would map the pages around
 * it, as the kernel does for read faults, and hide what the stores alone
 * cost). */
static long store_faults(uintptr_t rw, uintptr_t rx, size_t len) {
    uint8_t v[64] = {0};
    ck_assert_uint_le(len / 4096, 64);
    for (size_t i = 0; rx && i < len / 4096; i++)
        v[i] = *(volatile const uint8_t *)(rx + i * 4096);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    /* Stores the sanitizers do not see: their checks of a store touch its
     * shadow memory, whose first touch of a page is a fault of its own. */
    for (size_t i = 0; i < len / 4096; i++)
        __asm__ volatile("movb %1, (%0)" : : "r"(rw + i * 4096), "q"(v[i]) : "memory");
    getrusage(RUSAGE_SELF, &r1);
    return r1.ru_minflt - r0.ru_minflt;
}

START_TEST(test_rw_view_populated) {
    if (sysconf(_SC_PAGESIZE) != 4096) {
        printf("test_rw_view_populated: the offsets assume 4 KiB pages\n");
        return;
    }
    /* MADV_POPULATE_WRITE is Linux 5.14: without it the faults stay. */
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(probe, MAP_FAILED);
    int can = madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
    munmap(probe, 4096);
    if (!can) {
        printf("test_rw_view_populated: the kernel has no MADV_POPULATE_WRITE (%s)\n",
               strerror(errno));
        return;
    }
    cc_cache *c = make(1, 0);
    cc_entry *e = place_val(c, 1);
    /* The RW view starts with the header page (file offset 0). */
    cc_image_info ii;
    ck_assert_int_eq(cc_entry_image(e, &ii), FJ_OK);
    const uint64_t code_off = ii.code_off;
    const uintptr_t code = (uintptr_t)ii.hdr + code_off;
    /* The arena's first file step (64 KiB of the file, the code's share of
     * it), from its creation. */
    long f = store_faults(code, e->arena_lo, (64 << 10) - code_off);
    ck_assert_msg(f <= 1, "%ld faults storing into the first step's %lu pages", f,
                  (unsigned long)(((64 << 10) - code_off) / 4096));
    /* A kernel that reaches into the second step grows the file by one
     * (it goes into the file: the view's entries come from the growth). */
    cc_entry *big = place_sized(c, 2, 70 << 10);
    ck_assert_uint_eq(big->arena_id, e->arena_id);
    size_t at = (64 << 10) - code_off, len = 64 << 10;
    f = store_faults(code + at, e->arena_lo + at, len);
    ck_assert_msg(f <= 1, "%ld faults storing into the second step's %lu pages", f,
                  (unsigned long)(len / 4096));
    ck_assert_int_eq(call(big), 2);
    /* New room for the image's metadata (cc_image_back) is populated too. */
    size_t moff = 16 << 12, mlen = 16 << 12;
    ck_assert_uint_ge(ii.meta_room, moff + mlen);
    ck_assert_int_eq(cc_image_back(cc_entry_arena(e), moff, mlen), FJ_OK);
    f = store_faults((uintptr_t)ii.meta + moff, 0, mlen);
    ck_assert_msg(f <= 1, "%ld faults storing into %lu new metadata pages", f,
                  (unsigned long)(mlen / 4096));
    cc_destroy(c);
}
END_TEST

/* ---- fault injection: each failure is reported, then the cache works ---- */

static void expect_fail_then_work(cc_cache *c, int cls, long countdown, size_t len,
                                  fj_status want) {
    uint8_t *code = calloc(1, len);
    blob(code, 77);
    cc_entry *e = (cc_entry *)1;
    fj_test_fault_inject(cls, countdown);
    fj_status st = cc_place(c, code, len, "faulty", &e);
    fj_test_fault_inject(cls, -1);
    ck_assert_int_eq(st, want);
    ck_assert_ptr_null(e);
    ck_assert_msg(strlen(fj_last_error()) > 0, "no message");
    assert_no_wx("after a failure");
    ck_assert_int_eq(cc_place(c, code, len, "ok", &e), FJ_OK);
    ck_assert_int_eq(call(e), 77);
    check_lookup(e);
    ck_assert_int_eq(call(place_val(c, 78)), 78);
    assert_no_wx("after recovery");
    free(code);
}

START_TEST(test_fault_mmap) {
    cc_cache *c = make(1, 0);
    place_val(c, 1);
    /* 2 MiB needs a new arena: its RW or RX mapping fails. */
    expect_fail_then_work(c, FJ_FAULT_MMAP, 0, 2 << 20, FJ_ERR_OS);
    expect_fail_then_work(c, FJ_FAULT_MMAP, 1, 2 << 20, FJ_ERR_OS);
    cc_destroy(c);
    c = make(0, 0);
    expect_fail_then_work(c, FJ_FAULT_MMAP, 0, 2 << 20, FJ_ERR_OS);
    cc_destroy(c);
}
END_TEST

START_TEST(test_fault_mprotect) {
    cc_cache *c = make_anon(0);
    expect_fail_then_work(c, FJ_FAULT_MPROTECT, 0, 6, FJ_ERR_OS); /* RW */
    expect_fail_then_work(c, FJ_FAULT_MPROTECT, 1, 6, FJ_ERR_OS); /* RX flip */
    cc_destroy(c);
}
END_TEST

START_TEST(test_fault_file) {
    cc_cache *c = make(1, 0);
    place_val(c, 1);
    /* Writing a kernel that reaches the next page into the file fails. */
    expect_fail_then_work(c, FJ_FAULT_FILE, 0, 5000, FJ_ERR_OS);
    /* Growing the file for a 100 KiB kernel fails. */
    expect_fail_then_work(c, FJ_FAULT_FILE, 0, 100 << 10, FJ_ERR_OS);
    /* Creating the next arena's file fails. */
    expect_fail_then_work(c, FJ_FAULT_FILE, 0, 2 << 20, FJ_ERR_OS);
    expect_fail_then_work(c, FJ_FAULT_FILE, 1, 2 << 20, FJ_ERR_OS);
    cc_destroy(c);
    c = make(0, 0);
    expect_fail_then_work(c, FJ_FAULT_FILE, 0, 2 << 20, FJ_ERR_OS); /* memfd_create */
    cc_destroy(c);
}
END_TEST

START_TEST(test_fault_alloc) {
    cc_cache *c = make(0, 0);
    expect_fail_then_work(c, FJ_FAULT_ALLOC, 0, 6, FJ_ERR_NO_MEMORY);
    cc_destroy(c);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codecache");
    TCase *t = tcase_create("core");
    tcase_add_test(t, test_file_backing);
    tcase_add_test(t, test_memfd_backing);
    tcase_add_test(t, test_anon_backing);
    tcase_add_test(t, test_fallback_chain);
    tcase_add_test(t, test_unique_addresses);
    tcase_add_test(t, test_capacity);
    tcase_add_test(t, test_running_kernel_file);
    tcase_add_test(t, test_running_kernel_anon);
    tcase_add_test(t, test_concurrent_lookup);
    tcase_add_test(t, test_shm_file);
    tcase_add_test(t, test_arena_retire);
    tcase_add_test(t, test_stale_cleanup);
    tcase_add_test(t, test_exit_hook);
    tcase_add_test(t, test_keep_after_exit);
    tcase_add_test(t, test_prune_bounds);
    tcase_add_test(t, test_write_paths);
    tcase_add_test(t, test_rw_view_populated);
    tcase_add_test(t, test_fault_mmap);
    tcase_add_test(t, test_fault_mprotect);
    tcase_add_test(t, test_fault_file);
    tcase_add_test(t, test_fault_alloc);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    return fjt_run_suite(suite());
}
