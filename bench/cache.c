/* cache.c: the "cache" section: the managed code cache at scale.
 *
 *   place    cost of placing a kernel: the code cache alone (cc_place of a
 *            tiny blob, per backing) and the whole miss path of a cached
 *            kernel (generate, verify, place, register unwind info, arena
 *            image) with and without unwinder registration
 *   lookup   fj_symbolize (async-signal-safe PC -> kernel) at 1k/10k/100k
 *            kernels, hit and miss, and with 200 live arenas
 *   memory   bytes per kernel beyond its code (heap blocks in use:
 *            mimalloc metadata plus the C heap) at 1k/10k/100k kernels
 *   evict    eviction throughput: placements per second when every one
 *            evicts, code cache alone and through the runtime
 *   huge     iTLB effect of huge-page arenas (FRAMEJIT_HUGEPAGES=1): calls
 *            of 32768 one-page kernels in random order, with and without,
 *            plus iTLB misses per call where perf events are allowed
 */
#include "bench.h"

#include <linux/perf_event.h>
#include <malloc.h>
#include <mimalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "codecache/cc.h"
#include "runtime/kcache.h"

#define SEC "cache"

static cc_cache *new_cache(int kind, size_t capacity, int huge) {
    /* kind: 0 file, 1 memfd, 2 anonymous (the memfd probe made to fail). */
    cc_config cfg = {.capacity = capacity, .code_file = kind == 0, .huge_pages = huge};
    cc_cache *c = NULL;
    if (kind == 2) fj_test_fault_inject(FJ_FAULT_FILE, 0);
    fj_status st = cc_create(&cfg, &c);
    if (kind == 2) fj_test_fault_inject(FJ_FAULT_FILE, -1);
    if (st != FJ_OK) fprintf(stderr, "cache bench: cc_create: %s\n", fj_last_error());
    return c;
}

/* mov eax, imm32; ret */
static void blob(uint8_t *b, uint32_t v) {
    b[0] = 0xb8;
    memcpy(b + 1, &v, 4);
    b[5] = 0xc3;
}

/* ---- place ---- */

static void bench_place_cc(const bench_ctx *c) {
    static const char *kinds[] = {"file", "memfd", "anonymous"};
    int n = c->quick ? 5000 : 20000;
    for (int kind = 0; kind < 3; kind++) {
        double v[16];
        int reps = c->reps < 16 ? c->reps : 16;
        for (int r = 0; r < reps; r++) {
            cc_cache *cc = new_cache(kind, (size_t)1 << 30, 0);
            if (!cc) return;
            uint8_t b[6];
            cc_entry *e;
            double t0 = bench_now_ns();
            for (int i = 0; i < n; i++) {
                blob(b, (uint32_t)i);
                if (cc_place(cc, b, 6, "k", &e) != FJ_OK) break;
            }
            v[r] = (bench_now_ns() - t0) / n;
            cc_destroy(cc);
        }
        char name[48];
        snprintf(name, sizeof name, "place cc_place %s", kinds[kind]);
        bench_row(SEC, name, "framejit", bench_median(v, reps), "ns", 0);
    }
}

static void tiny_gen(fj_builder *b, const void *ctx) {
    fj_reg r = fj_gpr(b);
    fj_emit(b, FJ_MOV, fj_r64(r), fj_imm(*(const uint32_t *)ctx));
    fj_return(b, fj_r64(r));
}

/* unwind: FRAMEJIT_UNWIND value (NULL: default, all); file: 0 for
 * FRAMEJIT_CODE_FILE=0 (memfd arenas, no ELF image files). */
static fj_runtime *new_rt(size_t cache_bytes, const char *unwind, int file) {
    if (unwind) setenv("FRAMEJIT_UNWIND", unwind, 1);
    if (!file) setenv("FRAMEJIT_CODE_FILE", "0", 1);
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    o.cache_bytes = cache_bytes;
    fj_runtime *rt = NULL;
    if (fj_runtime_create(&o, &rt) != FJ_OK)
        fprintf(stderr, "cache bench: fj_runtime_create: %s\n", fj_last_error());
    if (unwind) unsetenv("FRAMEJIT_UNWIND");
    if (!file) unsetenv("FRAMEJIT_CODE_FILE");
    return rt;
}

/* n misses (distinct keys), released at once; returns us per miss. */
static double misses(fj_runtime *rt, uint32_t first, int n) {
    double t0 = bench_now_ns();
    for (int i = 0; i < n; i++) {
        uint32_t key = first + (uint32_t)i;
        fj_kernel *k;
        if (fj_test_kernel_get(rt, &key, sizeof key, "bench_tiny", 0, tiny_gen, &key, &k) != FJ_OK) {
            fprintf(stderr, "cache bench: %s\n", fj_last_error());
            return 0;
        }
        fj_kernel_release(k);
    }
    return (bench_now_ns() - t0) / 1e3 / n;
}

static void bench_place_rt(const bench_ctx *c) {
    int n = c->quick ? 500 : 2000;
    static const char *unw[] = {"none", NULL};
    for (int file = 0; file < 2; file++)
        for (int u = 0; u < 2; u++) {
            fj_runtime *rt = new_rt((size_t)1 << 30, unw[u], file);
            if (!rt) return;
            double us = misses(rt, 0, n);
            char name[64];
            snprintf(name, sizeof name, "place miss path, %d, %s, unwind=%s", n,
                     file ? "file" : "memfd", unw[u] ? unw[u] : "all");
            bench_row(SEC, name, "framejit", us, "us", 0);
            fj_runtime_destroy(rt);
        }
}

/* ---- lookup ---- */

static void bench_lookup(const bench_ctx *c) {
    int sizes[3] = {1000, 10000, 100000};
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        cc_cache *cc = new_cache(0, (size_t)1 << 30, 0);
        if (!cc) return;
        uintptr_t *pcs = malloc((size_t)n * sizeof *pcs);
        uint8_t b[6];
        for (int i = 0; i < n; i++) {
            cc_entry *e;
            blob(b, (uint32_t)i);
            if (cc_place(cc, b, 6, "k", &e) != FJ_OK) { n = i; break; }
            pcs[i] = e->start + 2;
        }
        /* random order: a profiler's samples are not sorted */
        unsigned seed = 1;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1));
            uintptr_t t = pcs[i];
            pcs[i] = pcs[j];
            pcs[j] = t;
        }
        int calls = 200000;
        double v[16], m[16];
        int reps = c->reps < 16 ? c->reps : 16;
        volatile uintptr_t sink = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_ns();
            for (int i = 0; i < calls; i++) {
                uintptr_t off;
                sink += (uintptr_t)fj_symbolize((const void *)pcs[i % n], &off);
            }
            v[r] = (bench_now_ns() - t0) / calls;
            t0 = bench_now_ns();
            for (int i = 0; i < calls; i++) /* misses: the padding after each kernel */
                sink += (uintptr_t)fj_symbolize((const void *)(pcs[i % n] + 20), NULL);
            m[r] = (bench_now_ns() - t0) / calls;
        }
        char name[64];
        snprintf(name, sizeof name, "lookup hit, %d kernels", n);
        bench_row(SEC, name, "framejit", bench_median(v, reps), "ns", 0);
        snprintf(name, sizeof name, "lookup miss, %d kernels", n);
        bench_row(SEC, name, "framejit", bench_median(m, reps), "ns", 0);
        free(pcs);
        cc_destroy(cc);
    }
    /* Many live arenas: lookup first finds the arena (a scan of the live
     * arena table), then the kernel (binary search). */
    enum { NA = 200 };
    cc_cache *cs[NA];
    uintptr_t pcs[NA];
    int na = 0;
    for (; na < NA; na++) {
        cs[na] = new_cache(1, 64 << 10, 0);
        if (!cs[na]) break;
        uint8_t b[6];
        cc_entry *e;
        blob(b, 1);
        if (cc_place(cs[na], b, 6, "k", &e) != FJ_OK) break;
        pcs[na] = e->start + 1;
    }
    volatile uintptr_t sink = 0;
    double v[16];
    int reps = c->reps < 16 ? c->reps : 16;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < 200000; i++)
            sink += (uintptr_t)fj_symbolize((const void *)pcs[(i * 7919) % na], NULL);
        v[r] = (bench_now_ns() - t0) / 200000;
    }
    bench_row(SEC, "lookup hit, 200 live arenas", "framejit", bench_median(v, reps), "ns", 0);
    for (int i = 0; i < na; i++) cc_destroy(cs[i]);
}

/* ---- memory ---- */

/* Heap bytes in use: every block of this thread's mimalloc heap (all
 * framejit metadata; the bench is single-threaded here) plus what the C
 * allocator holds (libgcc's registration objects). Code is not in either. */
static bool visit(const mi_heap_t *h, const mi_heap_area_t *area, void *block, size_t size,
                  void *arg) {
    (void)h;
    (void)area;
    if (block) *(size_t *)arg += size;
    return true;
}

static size_t heap_used(void) {
    size_t n = 0;
    mi_heap_visit_blocks(mi_heap_get_default(), true, visit, &n);
    return n + mallinfo2().uordblks;
}

static void bench_memory(const bench_ctx *c) {
    int sizes[3] = {1000, 10000, 100000};
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        /* Code cache alone. */
        size_t r0 = heap_used(), r1;
        cc_cache *cc = new_cache(0, (size_t)1 << 30, 0);
        if (!cc) return;
        uint8_t b[6];
        for (int i = 0; i < n; i++) {
            cc_entry *e;
            blob(b, (uint32_t)i);
            if (cc_place(cc, b, 6, "fj_kernel_name_of_typical_len", &e) != FJ_OK) break;
        }
        r1 = heap_used();
        char name[64];
        snprintf(name, sizeof name, "memory cc metadata, %d kernels", n);
        bench_row(SEC, name, "framejit", ((double)r1 - (double)r0) / n, "B/kernel", 0);
        cc_destroy(cc);
        /* Whole runtime (kernel objects, key table, unwind info), with
         * memfd arenas: the arena image files cost file pages, not heap,
         * and their writer is slow at this scale (see the place rows). */
        if (c->quick && n > 10000) continue;
        static const char *unw[] = {"none", NULL};
        for (int u = 0; u < 2; u++) {
            if (!unw[u] && n > 10000) continue; /* 100k libgcc objects: see DESIGN.md */
            r0 = heap_used();
            fj_runtime *rt = new_rt((size_t)1 << 30, unw[u], 0);
            if (!rt) return;
            misses(rt, 0, n);
            r1 = heap_used();
            snprintf(name, sizeof name, "memory rt metadata, %d, unwind=%s", n,
                     unw[u] ? unw[u] : "all");
            bench_row(SEC, name, "framejit", ((double)r1 - (double)r0) / n, "B/kernel", 0);
            fj_runtime_destroy(rt);
        }
    }
}

/* ---- evict ---- */

typedef struct ev_owner {
    cc_cache *c;
} ev_owner;

static long ev_detach(void *ctx, const cc_arena_info *a, void **det) {
    (void)ctx;
    *det = a->arena; /* everything may go: remember the arena */
    long live = 0;
    for (size_t i = 0, n = cc_arena_count(a); i < n; i++) live += cc_arena_entry(a, i) != NULL;
    return live;
}

static void ev_free(void *ctx, void *det) {
    ev_owner *o = ctx;
    cc_arena_info a = {.arena = det};
    size_t n = cc_arena_count(&a);
    for (size_t i = 0; i < n; i++) {
        cc_entry *e = cc_arena_entry(&a, i);
        if (e) cc_remove(o->c, e);
    }
}

static void bench_evict(const bench_ctx *c) {
    int n = c->quick ? 50000 : 200000;
    /* Code cache alone: 256 KiB (16 arenas of 16 KiB), every placement
     * beyond the first 4096 evicts (a whole arena every 256). */
    for (int kind = 0; kind < 2; kind++) {
        ev_owner o;
        o.c = new_cache(kind, 256 << 10, 0);
        if (!o.c) return;
        cc_hooks h = {&o, ev_detach, ev_free, NULL};
        cc_set_hooks(o.c, &h);
        uint8_t b[6];
        cc_entry *e;
        double t0 = bench_now_ns();
        for (int i = 0; i < n; i++) {
            blob(b, (uint32_t)i);
            if (cc_place(o.c, b, 6, "k", &e) != FJ_OK) break;
        }
        double ns = (bench_now_ns() - t0) / n;
        cc_stats st;
        cc_get_stats(o.c, &st);
        char name[64];
        snprintf(name, sizeof name, "evict cc_place+evict %s", kind ? "memfd" : "file");
        bench_row(SEC, name, "framejit", ns, "ns", 0);
        snprintf(name, sizeof name, "evict kernels/s %s", kind ? "memfd" : "file");
        bench_row(SEC, name, "framejit", 1e9 / ns, "1/s", 0);
        snprintf(name, sizeof name, "evict arenas %s", kind ? "memfd" : "file");
        bench_row(SEC, name, "framejit", (double)st.arenas_evicted, "count", 0);
        cc_destroy(o.c);
    }
    /* Through the runtime: every miss evicts once the cache is full. */
    int m = c->quick ? 2000 : 8000;
    for (int full = 0; full < 2; full++) {
        fj_runtime *rt = new_rt(full ? (size_t)64 << 10 : (size_t)1 << 30, "none", 0);
        if (!rt) return;
        misses(rt, 1u << 30, 2048); /* fill */
        double us = misses(rt, 0, m);
        fj_cache_stats st;
        fj_cache_stats_get(rt, &st);
        char name[64];
        snprintf(name, sizeof name, "evict rt miss, %s", full ? "evicting" : "no eviction");
        bench_row(SEC, name, "framejit", us, "us", 0);
        if (full) bench_row(SEC, "evict rt evictions", "framejit", (double)st.evictions, "count", 0);
        fj_runtime_destroy(rt);
    }
}

/* ---- huge pages: iTLB ---- */

static int itlb_counter(void) {
    struct perf_event_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.size = sizeof pa;
    pa.type = PERF_TYPE_HW_CACHE;
    pa.config = PERF_COUNT_HW_CACHE_ITLB | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                (PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
    pa.disabled = 1;
    pa.exclude_kernel = 1;
    pa.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0);
}

static void bench_huge(const bench_ctx *c) {
    enum { NK = 32768 }; /* one page each: 128 MiB of code, 64 huge pages */
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *code = malloc((size_t)pg);
    memset(code, 0xcc, (size_t)pg);
    uintptr_t *fn = malloc(NK * sizeof *fn);
    unsigned *order = malloc(NK * sizeof *order);
    unsigned seed = 3;
    for (unsigned i = 0; i < NK; i++) order[i] = i;
    for (unsigned i = NK - 1; i > 0; i--) {
        unsigned j = (unsigned)rand_r(&seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double base = 0;
    for (int huge = 0; huge < 2; huge++) {
        cc_cache *cc = new_cache(0, (size_t)256 << 20, huge);
        if (!cc) return;
        for (unsigned i = 0; i < NK; i++) {
            cc_entry *e;
            blob(code, i);
            if (cc_place(cc, code, (size_t)pg, "page_kernel", &e) != FJ_OK) {
                fprintf(stderr, "cache bench: %s\n", fj_last_error());
                return;
            }
            fn[i] = e->start;
        }
        cc_stats st;
        cc_get_stats(cc, &st);
        int fd = itlb_counter();
        double v[16];
        int reps = c->reps < 16 ? c->reps : 16;
        long long misses = 0;
        volatile unsigned sink = 0;
        for (unsigned i = 0; i < NK; i++) sink += (unsigned)((int (*)(void))fn[i])(); /* warm */
        for (int r = 0; r < reps; r++) {
            if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_RESET, 0), ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
            double t0 = bench_now_ns();
            for (int pass = 0; pass < 8; pass++)
                for (unsigned i = 0; i < NK; i++) sink += (unsigned)((int (*)(void))fn[order[i]])();
            v[r] = (bench_now_ns() - t0) / (8.0 * NK);
            if (fd >= 0) {
                long long x = 0;
                ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                if (read(fd, &x, sizeof x) == (ssize_t)sizeof x) misses += x;
            }
        }
        double ns = bench_median(v, reps);
        const char *var = huge ? "huge pages" : "4k pages";
        bench_row(SEC, "huge call, 32768 kernels x 4 KiB", var, ns, "ns",
                  huge && base ? base / ns : 0);
        if (!huge) base = ns;
        if (fd >= 0) {
            bench_row(SEC, "huge iTLB misses per call", var, (double)misses / (8.0 * NK * reps),
                      "miss", 0);
            close(fd);
        }
        if (huge)
            bench_row(SEC, "huge 2 MiB chunks collapsed", var, (double)st.huge_chunks, "count", 0);
        cc_destroy(cc);
    }
    free(code);
    free(fn);
    free(order);
}

void bench_cache(const bench_ctx *c) {
    bench_memory(c); /* first: a fresh heap */
    bench_place_cc(c);
    bench_place_rt(c);
    bench_lookup(c);
    bench_evict(c);
    bench_huge(c);
}
