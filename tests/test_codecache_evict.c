/* test_codecache_evict.c: Check suite for the code cache's capacity and
 * eviction (codecache/ alone, with a small fake owner): LRU order by arena,
 * kernels in use are never evicted, the retire hook runs before the memory
 * goes, addresses are never reused, retired records are reclaimed, and
 * huge-page arenas. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
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

/* ---- a fake owner: one object per kernel, "held" like a reference ---- */

typedef struct kobj {
    cc_entry *e;
    int held;
    int freed;
    struct kobj *next; /* detached list */
} kobj;

typedef struct owner {
    cc_cache *c;
    long detach_calls, refused, freed;
    uint64_t retired_ids[256];
    int nretired;
    int retire_saw_memory; /* every retire hook could still read its arena */
    int refuse_all;
} owner;

static long o_detach(void *ctx, const cc_arena_info *a, void **detached) {
    owner *o = ctx;
    o->detach_calls++;
    size_t n = cc_arena_count(a);
    for (size_t i = 0; i < n; i++) {
        cc_entry *e = cc_arena_entry(a, i);
        if (e && (o->refuse_all || !e->owner || ((kobj *)e->owner)->held)) {
            o->refused++;
            return -1;
        }
    }
    kobj *list = NULL;
    long cnt = 0;
    for (size_t i = 0; i < n; i++) {
        cc_entry *e = cc_arena_entry(a, i);
        if (!e) continue;
        kobj *k = e->owner;
        ck_assert(e->arena_id == a->id && e->arena_lo == a->lo && e->arena_hi == a->hi);
        k->next = list;
        list = k;
        cnt++;
    }
    *detached = list;
    return cnt;
}

static void o_free(void *ctx, void *detached) {
    owner *o = ctx;
    for (kobj *k = detached, *next; k; k = next) {
        next = k->next;
        cc_remove(o->c, k->e);
        k->freed = 1;
        o->freed++;
    }
}

static void o_retire(void *ctx, const cc_arena_info *a) {
    owner *o = ctx;
    /* Invariant 4: this runs before the pages go. Reading the RX view must
     * still work here (a released arena is PROT_NONE: this would fault). */
    volatile const uint8_t *p = (const uint8_t *)a->lo;
    uint8_t first = *p;
    if (first == 0xb8 || first == 0xcc || first == 0) o->retire_saw_memory++;
    if (o->nretired < 256) o->retired_ids[o->nretired++] = a->id;
}

static cc_cache *make_owned(owner *o, int code_file, size_t capacity, int anon, int reclaim_ms) {
    memset(o, 0, sizeof *o);
    cc_config cfg = {.capacity = capacity, .code_file = code_file, .reclaim_ms = reclaim_ms};
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, 0); /* the memfd probe fails */
    fj_status st = cc_create(&cfg, &o->c);
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, -1);
    ck_assert_msg(st == FJ_OK, "cc_create: %s", fj_last_error());
    if (anon) ck_assert_str_eq(cc_backing(o->c), "anonymous");
    cc_hooks h = {o, o_detach, o_free, o_retire};
    cc_set_hooks(o->c, &h);
    return o->c;
}

static kobj *place_obj(owner *o, uint32_t v, uint64_t tick) {
    uint8_t b[6];
    char name[32];
    blob(b, v);
    snprintf(name, sizeof name, "k%u", v);
    kobj *k = calloc(1, sizeof *k);
    fj_status st = cc_place(o->c, b, sizeof b, name, &k->e);
    ck_assert_msg(st == FJ_OK, "cc_place: %s", fj_last_error());
    cc_set_owner(k->e, k);
    cc_touch(k->e, tick);
    return k;
}

/* ---- LRU by arena; held kernels pin their arena ---- */

static void lru_case(int code_file, int anon) {
    owner o;
    /* 16 KiB arenas (the smallest); 256 KiB = 16 of them. Anonymous
     * arenas take a page per kernel: 4 per arena. */
    size_t cap = 256 << 10;
    cc_cache *c = make_owned(&o, code_file, cap, anon, 1);
    size_t per = anon ? 4 : 256;
    size_t total = cap / (anon ? 4096 : 64);
    kobj **ks = calloc(total * 2, sizeof *ks);
    uint64_t tick = 1;
    for (size_t i = 0; i < total; i++) ks[i] = place_obj(&o, (uint32_t)i, tick++);
    cc_stats st;
    cc_get_stats(c, &st);
    ck_assert_uint_eq(st.held, cap);
    ck_assert_uint_eq(st.arenas, 16);
    ck_assert_int_eq(o.detach_calls, 0);
    /* Arena 0 (kernels 0..per-1) is used again: now the newest. Arena 1
     * has a kernel held. So the next placement evicts arena 2. */
    cc_touch(ks[0]->e, tick++);
    ks[per + 1]->held = 1;
    kobj *n = place_obj(&o, 100000, tick++);
    ck_assert_int_eq(call(n->e), 100000);
    ck_assert_int_eq(o.refused, 1);
    for (size_t i = 0; i < 3 * per; i++)
        ck_assert_msg(ks[i]->freed == (i >= 2 * per), "kernel %zu freed=%d", i, ks[i]->freed);
    ck_assert_int_eq(o.nretired, 1);
    ck_assert_uint_eq(o.retired_ids[0], ks[2 * per]->e->arena_id);
    ck_assert_int_eq(o.retire_saw_memory, 1);
    /* Held and newer kernels still run; the evicted ones are gone from
     * lookup, and their range is PROT_NONE, not reused. */
    ck_assert_int_eq(call(ks[0]->e), 0);
    ck_assert_int_eq(call(ks[per + 1]->e), (int)(per + 1));
    ck_assert_ptr_null(cc_lookup(ks[2 * per]->e->start));
    ck_assert_uint_gt(n->e->start, ks[total - 1]->e->start);
    cc_get_stats(c, &st);
    ck_assert_uint_eq(st.arenas_evicted, 1);
    ck_assert_uint_le(st.held, cap);
    ck_assert_uint_eq(st.live_kernels, total - per + 1);
    /* Keep placing: arenas go in LRU order, arena 1 never while held. */
    for (size_t i = 0; i < total; i++) {
        ks[total + i] = place_obj(&o, (uint32_t)(200000 + i), tick++);
        ck_assert_int_eq(call(ks[total + i]->e), (int)(200000 + i));
    }
    for (size_t i = per; i < 2 * per; i++) ck_assert(!ks[i]->freed);
    ck_assert_int_eq(call(ks[per + 1]->e), (int)(per + 1));
    ck_assert_int_eq(o.retire_saw_memory, o.nretired);
    /* Everything held: full, with a message saying why. (Kernels without
     * an owner object count as held too.) */
    for (size_t i = 0; i < 2 * total; i++)
        if (!ks[i]->freed) ks[i]->held = 1;
    n->held = 1;
    uint8_t b[6];
    blob(b, 7);
    cc_entry *e = (cc_entry *)1;
    fj_status fs = FJ_OK;
    for (size_t i = 0; i <= per && fs == FJ_OK; i++) fs = cc_place(c, b, 6, "nofit", &e);
    ck_assert_int_eq(fs, FJ_ERR_CACHE_FULL);
    ck_assert_ptr_null(e);
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "in use"));
    ck_assert_ptr_nonnull(strstr(fj_last_error(), "nofit"));
    /* Released again: room again. */
    for (size_t i = 0; i < 2 * total; i++) ks[i]->held = 0;
    ck_assert_int_eq(cc_place(c, b, 6, "fits", &e), FJ_OK);
    ck_assert_int_eq(call(e), 7);
    assert_no_wx("after eviction");
    cc_destroy(c);
    for (size_t i = 0; i < 2 * total; i++) free(ks[i]);
    free(ks);
    free(n);
}

START_TEST(test_lru_file) { lru_case(1, 0); }
END_TEST
START_TEST(test_lru_memfd) { lru_case(0, 0); }
END_TEST
START_TEST(test_lru_anon) { lru_case(0, 1); }
END_TEST

/* ---- eviction forever: addresses never reused, records reclaimed ---- */

static int cmp_u(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(test_evict_forever) {
    owner o;
    cc_cache *c = make_owned(&o, 1, 64 << 10, 0, 1);
    enum { N = 40000 };
    uintptr_t *starts = malloc(N * sizeof *starts);
    kobj **ks = calloc(N, sizeof *ks);
    size_t max_limbo = 0;
    for (int i = 0; i < N; i++) {
        ks[i] = place_obj(&o, (uint32_t)i, (uint64_t)i + 1);
        starts[i] = ks[i]->e->start;
        ck_assert_int_eq(call(ks[i]->e), i);
        cc_stats st;
        cc_get_stats(c, &st);
        ck_assert_uint_le(st.held, 64 << 10);
        if (st.limbo > max_limbo) max_limbo = st.limbo;
        if (i % 4096 == 0) assert_no_wx("evicting");
        if (i % 1024 == 0) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL); /* past the 1 ms reclaim delay */
        }
    }
    cc_stats st;
    cc_get_stats(c, &st);
    ck_assert_uint_gt(st.arenas_evicted, 100);
    /* Records of retired arenas do not pile up. */
    ck_assert_uint_lt(st.limbo, 64);
    ck_assert_msg(max_limbo < 1000, "limbo grew to %zu", max_limbo);
    qsort(starts, N, sizeof *starts, cmp_u);
    for (int i = 1; i < N; i++) ck_assert_msg(starts[i] != starts[i - 1], "address reused");
    cc_destroy(c);
    for (int i = 0; i < N; i++) free(ks[i]);
    free(ks);
    free(starts);
}
END_TEST

/* Lookups race with eviction and reclamation: a lookup returns either NULL
 * or the right, readable entry. */
static atomic_int stop;
static _Atomic uintptr_t recent[64];
static atomic_long bad, hits;

static void *looker(void *arg) {
    (void)arg;
    unsigned seed = 7;
    while (!atomic_load(&stop)) {
        uintptr_t pc = atomic_load(&recent[rand_r(&seed) % 64]);
        if (!pc) continue;
        const cc_entry *e = cc_lookup(pc + (uintptr_t)(rand_r(&seed) % 6));
        if (e) {
            if (e->start != pc || e->size != 6 || e->name[0] != 'k') atomic_fetch_add(&bad, 1);
            else atomic_fetch_add(&hits, 1);
        }
    }
    return NULL;
}

START_TEST(test_lookup_during_eviction) {
    owner o;
    /* Names stay readable for 500 ms after their arena retires: a lookup
     * result is read well within that, even by a looker preempted between
     * the lookup and the read on a loaded machine under TSan (at 50 ms that
     * happened once). Arenas still retire and get reclaimed during the run. */
    cc_cache *c = make_owned(&o, 0, 32 << 10, 0, 500);
    pthread_t th[2];
    atomic_store(&stop, 0);
    for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, looker, NULL), 0);
    enum { N = 30000 };
    kobj **ks = calloc(N, sizeof *ks);
    for (int i = 0; i < N; i++) {
        ks[i] = place_obj(&o, (uint32_t)i, (uint64_t)i + 1);
        atomic_store(&recent[i % 64], ks[i]->e->start);
        if (i % 2048 == 0) { /* let the lookers really interleave */
            long h = atomic_load(&hits);
            for (int spin = 0; spin < 100000 && atomic_load(&hits) < h + 50; spin++) sched_yield();
        }
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    ck_assert_int_eq(atomic_load(&bad), 0);
    ck_assert_int_gt(atomic_load(&hits), 0);
    cc_destroy(c);
    for (int i = 0; i < N; i++) free(ks[i]);
    free(ks);
}
END_TEST

/* No hooks: only empty arenas can go; destroy calls retire for the rest. */
START_TEST(test_no_hooks_and_destroy) {
    owner o;
    cc_cache *c = make_owned(&o, 0, 0, 0, 0);
    kobj *k = place_obj(&o, 1, 1);
    ck_assert_int_eq(o.nretired, 0);
    cc_destroy(c); /* the one arena, with a live kernel */
    ck_assert_int_eq(o.nretired, 1);
    ck_assert_int_eq(o.retire_saw_memory, 1);
    free(k);
    /* cc_set_hooks(NULL) and NULL caches are harmless. */
    cc_set_hooks(NULL, NULL);
    cc_stats st;
    cc_get_stats(NULL, &st);
    ck_assert_uint_eq(st.capacity, 0);
}
END_TEST

/* ---- huge pages ---- */

/* kB of huge mappings (AnonHugePages + ShmemPmdMapped + FilePmdMapped) in
 * the mapping containing addr, from /proc/self/smaps. */
static long huge_kb_at(uintptr_t addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char c;
        if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            in = addr >= lo && addr < hi;
            continue;
        }
        long v;
        if (in && (sscanf(line, "AnonHugePages: %ld", &v) == 1 ||
                   sscanf(line, "ShmemPmdMapped: %ld", &v) == 1 ||
                   sscanf(line, "FilePmdMapped: %ld", &v) == 1))
            kb += v;
    }
    fclose(f);
    return kb;
}

static void huge_case(int code_file, int anon) {
    cc_config cfg = {.code_file = code_file, .huge_pages = 1};
    cc_cache *c;
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, 0);
    ck_assert_int_eq(cc_create(&cfg, &c), FJ_OK);
    if (anon) fj_test_fault_inject(FJ_FAULT_FILE, -1);
    size_t unit = anon ? (size_t)sysconf(_SC_PAGESIZE) : CC_ALIGN;
    size_t n = CC_HUGE / unit + 1;
    cc_entry *first = NULL, *e = NULL;
    for (size_t i = 0; i < n; i++) {
        uint8_t b[6];
        blob(b, (uint32_t)i);
        ck_assert_int_eq(cc_place(c, b, 6, "h", &e), FJ_OK);
        if (!first) first = e;
    }
    ck_assert_uint_eq(first->start % CC_HUGE, 0);
    ck_assert_uint_eq(first->arena_lo % CC_HUGE, 0);
    cc_stats st;
    cc_get_stats(c, &st);
    ck_assert_uint_eq(st.huge_chunks + st.huge_failed, 1);
    long kb = huge_kb_at(first->start);
    if (st.huge_chunks) ck_assert_msg(kb >= 2048, "collapsed but smaps shows %ld kB huge", kb);
    else fprintf(stderr, "note: %s: this system refused MADV_COLLAPSE\n", cc_backing(c));
    ck_assert_int_eq(call(first), 0);
    ck_assert_int_eq(call(e), (int)(n - 1));
    assert_no_wx("huge pages");
    cc_destroy(c);
}

START_TEST(test_huge_file) { huge_case(1, 0); }
END_TEST
START_TEST(test_huge_memfd) { huge_case(0, 0); }
END_TEST
START_TEST(test_huge_anon) { huge_case(0, 1); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("codecache_evict");
    TCase *t = tcase_create("core");
    tcase_add_test(t, test_lru_file);
    tcase_add_test(t, test_lru_memfd);
    tcase_add_test(t, test_lru_anon);
    tcase_add_test(t, test_evict_forever);
    tcase_add_test(t, test_lookup_during_eviction);
    tcase_add_test(t, test_no_hooks_and_destroy);
    tcase_add_test(t, test_huge_file);
    tcase_add_test(t, test_huge_memfd);
    tcase_add_test(t, test_huge_anon);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    return fjt_run_suite(suite());
}
