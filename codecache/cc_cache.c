/* cc_cache.c: the code cache proper: backing choice, placement of kernels
 * into arenas, capacity accounting, removal, and the lock-free PC -> entry
 * lookup over every live cache in the process. */
#include "codecache/cc_impl.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cc_cache {
    pthread_mutex_t lock;  /* placement, removal, eviction, the arena lists */
    int kind;              /* backing of every arena of this cache */
    int huge;              /* huge-page arenas */
    int core_view;         /* !cc_config.shared_code_view */
    size_t capacity;
    size_t span;           /* normal code span of an arena */
    size_t (*aux_room)(size_t span); /* cc_config.aux_room */
    size_t held;           /* bytes consumed in arenas not retired (vs capacity) */
    size_t mapped;         /* spans of those arenas */
    size_t narenas;
    size_t live_bytes;     /* code bytes of live kernels */
    size_t nlive;
    cc_arena *cur;         /* where the next kernel goes, or NULL */
    cc_arena *arenas;      /* arenas not retired, newest first */
    cc_arena *limbo;       /* retired; descriptors and records not freed yet */
    size_t nlimbo;
    uint64_t reclaim_ns;
    uint64_t round;        /* eviction rounds, to try each arena once per round */
    atomic_uint_least64_t clock; /* newest cc_touch tick */
    uint64_t arenas_evicted, arenas_retired, huge_ok, huge_bad, file_writes;
    cc_hooks hooks;
};

/* ------------------------------------------------------------------------
 * The global slot table and its grace periods.
 *
 * cc_lookup may run in a signal handler on any thread, so it takes no lock:
 * it scans g_slots (pointers published with release stores). A writer that
 * wants to free an arena first unpublishes it, then waits out a grace
 * period: readers announce themselves in one of two counters chosen by the
 * current epoch; the writer flips the epoch and waits until the old
 * epoch's counter drains. Readers that start after the flip can no longer
 * see the unpublished arena. Readers never wait, so a handler that
 * interrupts a waiting writer simply finishes first.
 * ---------------------------------------------------------------------- */

static _Atomic(cc_arena *) g_slots[CC_MAX_ARENAS];
/* Each slot's span, next to each other so that the scan reads a few
 * contiguous lines; confirmed against the arena itself on a match (a slot
 * may be reused while a lookup reads it). */
static _Atomic uintptr_t g_lo[CC_MAX_ARENAS], g_hi[CC_MAX_ARENAS];
static atomic_int g_nslots;            /* high-water mark of used slots */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* slot writes, grace */
static atomic_uint g_epoch;
static atomic_long g_readers[2];

static unsigned grace_enter(void) {
    for (;;) {
        unsigned e = atomic_load(&g_epoch);
        atomic_fetch_add(&g_readers[e & 1], 1);
        /* If the epoch moved between the load and the increment, the writer
         * may already have checked this counter: retry in the new one. */
        if (atomic_load(&g_epoch) == e) return e;
        atomic_fetch_sub(&g_readers[e & 1], 1);
    }
}

static void grace_exit(unsigned e) { atomic_fetch_sub(&g_readers[e & 1], 1); }

/* Under g_lock, after unpublishing. */
static void grace_wait(void) {
    unsigned old = atomic_fetch_add(&g_epoch, 1);
    while (atomic_load(&g_readers[old & 1]) != 0) sched_yield();
}

void cc_fork_global(int phase) {
    fj_fork_mutex(&g_lock, phase);
    cc_arena_fork(phase);
    /* Lookups other threads were making when the process was copied never
     * end in the child; their counts would stall its next grace period. */
    if (phase == FJ_FORK_CHILD) {
        atomic_store(&g_readers[0], 0);
        atomic_store(&g_readers[1], 0);
    }
}

void cc_fork(cc_cache *c, int phase) { fj_fork_mutex(&c->lock, phase); }

static fj_status publish(cc_arena *a) {
    pthread_mutex_lock(&g_lock);
    int n = atomic_load_explicit(&g_nslots, memory_order_relaxed);
    int i = 0;
    /* A slot freed by unpublish() can be reused at once: the arena that was
     * there is only freed after a grace period, or never (retired). */
    while (i < n && atomic_load_explicit(&g_slots[i], memory_order_relaxed) != NULL) i++;
    if (i == CC_MAX_ARENAS) {
        pthread_mutex_unlock(&g_lock);
        return fj_fail(FJ_ERR_NO_MEMORY, "codecache: more than %d live code arenas",
                       CC_MAX_ARENAS);
    }
    a->slot = i;
    atomic_store_explicit(&g_lo[i], a->lo, memory_order_relaxed);
    atomic_store_explicit(&g_hi[i], a->hi, memory_order_relaxed);
    atomic_store_explicit(&g_slots[i], a, memory_order_release);
    if (i == n) atomic_store_explicit(&g_nslots, n + 1, memory_order_release);
    pthread_mutex_unlock(&g_lock);
    return FJ_OK;
}

/* Under g_lock. */
static void unpublish(cc_arena *a) {
    if (a->slot < 0) return;
    atomic_store(&g_slots[a->slot], NULL);
    a->slot = -1;
}

static int all_dead(cc_arena *a) {
    return atomic_load_explicit(&a->ndead, memory_order_relaxed) ==
           atomic_load_explicit(&a->count, memory_order_relaxed);
}

static cc_arena_info info_of(cc_arena *a) {
    return (cc_arena_info){a->id, a->lo, a->hi, a->user, a, a->aux, a->aux_len};
}

/* ------------------------------------------------------------------------
 * Retirement. An arena whose kernels were all removed and that takes no
 * more code gives its memory and file back, in two steps:
 *   begin_retire (under the cache lock): out of the accounting and the
 *     arena list, onto the caller's work list;
 *   finish_retire (after unlocking): the retire hook (the owner drops the
 *     arena's unwind info: invariant 4), leave the slot table, give the
 *     memory back, then limbo. Records stay readable there for the reclaim
 *     delay (a name fj_symbolize returned), then a grace period makes sure
 *     no lookup still reads them, and they are freed: a process that
 *     evicts forever keeps only what recent retirements left.
 * ---------------------------------------------------------------------- */

static void unlink_arena(cc_arena **list, cc_arena *a) {
    for (cc_arena **pp = list; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            a->next = NULL;
            return;
        }
}

/* Under c->lock. */
static void begin_retire(cc_cache *c, cc_arena *a, cc_arena **work) {
    if (a->state >= CC_RETIRING) return;
    a->state = CC_RETIRING;
    if (c->cur == a) c->cur = NULL;
    c->held -= a->cursor;
    c->mapped -= a->code_end;
    c->narenas--;
    unlink_arena(&c->arenas, a);
    a->work_next = *work;
    *work = a;
}

/* Frees limbo arenas older than the reclaim delay (all of them if force). */
static void reap(cc_cache *c, int force) {
    cc_arena *old = NULL;
    uint64_t now = cc_now_ns();
    pthread_mutex_lock(&c->lock);
    for (cc_arena **pp = &c->limbo; *pp;) {
        cc_arena *a = *pp;
        if (force || now - a->retired_ns >= c->reclaim_ns) {
            *pp = a->next;
            a->next = old;
            old = a;
            c->nlimbo--;
        } else {
            pp = &a->next;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (!old) return;
    /* Unpublished long ago; a lookup that started before that may still be
     * running (a preempted thread): wait for it. */
    pthread_mutex_lock(&g_lock);
    grace_wait();
    pthread_mutex_unlock(&g_lock);
    while (old) {
        cc_arena *next = old->next;
        cc_arena_free(old);
        old = next;
    }
}

/* Without c->lock. */
static void finish_retire(cc_cache *c, cc_arena *work) {
    if (!work) return;
    while (work) {
        cc_arena *a = work;
        work = a->work_next;
        if (c->hooks.retire) {
            cc_arena_info info = info_of(a);
            c->hooks.retire(c->hooks.ctx, &info);
        }
        pthread_mutex_lock(&g_lock);
        unpublish(a);
        pthread_mutex_unlock(&g_lock);
        cc_arena_release(a);
        fj_log(2, "codecache: arena %#lx-%#lx retired", (unsigned long)a->lo,
               (unsigned long)a->hi);
        pthread_mutex_lock(&c->lock);
        a->state = CC_RETIRED;
        a->retired_ns = cc_now_ns();
        a->next = c->limbo;
        c->limbo = a;
        c->nlimbo++;
        c->arenas_retired++;
        pthread_mutex_unlock(&c->lock);
    }
    reap(c, 0);
}

/* ------------------------------------------------------------------------
 * Exit hook: a cache still alive at exit must not leave its files behind.
 * ---------------------------------------------------------------------- */

/* cc_config.keep_seconds / keep_bytes of the last cache created. */
static atomic_int g_keep_s;
static _Atomic size_t g_keep_bytes;

/* Live arenas' files are either removed or marked as kept (cc_shm_keep),
 * then the kept files of this user in /dev/shm are pruned to the bounds,
 * these included: nothing kept ever outgrows keep_bytes, however many
 * processes exit. */
static void unlink_at_exit(void) {
    unsigned e = grace_enter();
    pid_t me = getpid(); /* inherited by fork: only our own files */
    int keep_s = atomic_load_explicit(&g_keep_s, memory_order_relaxed);
    size_t keep_bytes = atomic_load_explicit(&g_keep_bytes, memory_order_relaxed);
    int keep = keep_s > 0 && keep_bytes > 0, own = 0;
    int n = atomic_load_explicit(&g_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        cc_arena *a = atomic_load_explicit(&g_slots[i], memory_order_acquire);
        if (!a || !a->path[0] || a->pid != me) continue;
        if (keep) cc_shm_keep(a->path);
        else unlink(a->path);
        own++;
    }
    grace_exit(e);
    if (keep && own) cc_shm_prune(1, keep_s, keep_bytes);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit_hook(void) {
    /* atexit from a shared object is tied to it (__cxa_atexit with its DSO
     * handle), so it also runs on dlclose. Failure only risks a stale file,
     * which the next process's cc_create removes. */
    if (atexit(unlink_at_exit) != 0) fj_log(1, "codecache: atexit failed");
}

/* ------------------------------------------------------------------------
 * Lifecycle
 * ---------------------------------------------------------------------- */

/* Under c->lock (or before the cache is shared). */
static fj_status attach(cc_cache *c, cc_arena *a) {
    a->owner = c;
    fj_status st = publish(a);
    if (st != FJ_OK) return st;
    if (a->kind == CC_FILE) pthread_once(&exit_once, register_exit_hook);
    /* New arenas count as just used: they are where new kernels go. */
    atomic_store_explicit(&a->last_use, atomic_load_explicit(&c->clock, memory_order_relaxed),
                          memory_order_relaxed);
    a->state = CC_OPEN;
    a->next = c->arenas;
    c->arenas = a;
    c->cur = a;
    c->mapped += a->code_end;
    c->narenas++;
    return FJ_OK;
}

/* Arena span for a capacity: about 16 arenas fit, so that eviction, which
 * works on whole arenas, frees a fraction of the cache at a time. */
static size_t span_for(size_t capacity, int huge) {
    if (huge) return CC_HUGE;
    size_t s = CC_ARENA_BYTES;
    while (s > CC_ARENA_MIN && s > capacity / 16) s /= 2;
    return s;
}

static pthread_once_t stale_once = PTHREAD_ONCE_INIT;
static void cleanup_stale(void) {
    cc_shm_prune(0, atomic_load_explicit(&g_keep_s, memory_order_relaxed),
                 atomic_load_explicit(&g_keep_bytes, memory_order_relaxed));
}

fj_status cc_create(const cc_config *cfg, cc_cache **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "codecache: cc_create: out is NULL");
    *out = NULL;
    cc_config conf = {.code_file = 1};
    if (cfg) conf = *cfg;
    cc_cache *c = fj_calloc(1, sizeof *c);
    if (!c) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: cache descriptor");
    pthread_mutex_init(&c->lock, NULL);
    atomic_init(&c->clock, 0);
    c->capacity = conf.capacity ? conf.capacity : CC_DEFAULT_CAPACITY;
    c->huge = conf.huge_pages != 0;
    c->span = span_for(c->capacity, c->huge);
    c->aux_room = conf.aux_room;
    c->reclaim_ns = (uint64_t)(conf.reclaim_ms > 0 ? conf.reclaim_ms : 1000) * 1000000u;

    /* Once per process: files of processes that died meanwhile wait for
     * the next process (reading /dev/shm costs as much as making an arena). */
    c->core_view = !conf.shared_code_view;
    if (conf.code_file) {
        atomic_store_explicit(&g_keep_s, conf.keep_seconds, memory_order_relaxed);
        atomic_store_explicit(&g_keep_bytes, conf.keep_bytes, memory_order_relaxed);
        atomic_store_explicit(&cc_keep_budget, conf.keep_bytes, memory_order_relaxed);
        pthread_once(&stale_once, cleanup_stale);
    }
    /* The first backing that works, probed by creating the first arena
     * (e.g. a noexec /dev/shm fails at the RX mapping). */
    fj_status st = FJ_ERR_OS;
    cc_arena *a = NULL;
    for (int kind = conf.code_file ? CC_FILE : CC_MEMFD; kind <= CC_ANON; kind++) {
        st = cc_arena_new(kind, c->span, 0, c->huge, c->core_view, c->aux_room, &a);
        if (st == FJ_OK) break;
        if (kind != CC_ANON)
            fj_log(1, "codecache: %s backing unavailable (%s), trying the next", cc_kind_name(kind),
                   fj_last_error());
    }
    if (st == FJ_OK) {
        c->kind = a->kind;
        st = attach(c, a);
        if (st != FJ_OK) {
            cc_arena_release(a);
            cc_arena_free(a);
        }
    }
    if (st != FJ_OK) {
        pthread_mutex_destroy(&c->lock);
        fj_free(c);
        return st;
    }
    fj_log(1, "codecache: code backed by %s%s%s, capacity %zu bytes, arenas of %zu KiB",
           cc_kind_name(c->kind), a->path[0] ? " " : "", a->path, c->capacity, c->span >> 10);
    if (c->huge) {
        char why[160];
        cc_huge_describe(why, sizeof why);
        fj_log(1, "codecache: huge pages requested: 2 MiB aligned arenas, each full 2 MiB of "
               "code collapsed with MADV_COLLAPSE (no hugetlbfs pool needed; %s)", why);
    }
    *out = c;
    return FJ_OK;
}

void cc_set_hooks(cc_cache *c, const cc_hooks *h) {
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    if (h) c->hooks = *h;
    else memset(&c->hooks, 0, sizeof c->hooks);
    pthread_mutex_unlock(&c->lock);
}

void cc_destroy(cc_cache *c) {
    if (!c) return;
    /* Arenas still holding memory retire like any other (the owner's
     * retire hook first), then everything is freed at once. */
    int keep_s = atomic_load_explicit(&g_keep_s, memory_order_relaxed);
    size_t keep_bytes = atomic_load_explicit(&g_keep_bytes, memory_order_relaxed);
    int keep = keep_s > 0 && keep_bytes > 0, kept = 0;
    pthread_mutex_lock(&c->lock);
    cc_arena *work = NULL;
    /* A cache destroyed whole is usually a program's last act before
     * exit: its files are kept as at exit (cc_shm_keep), then pruned with
     * every other kept file, so destroying caches again and again never
     * keeps more than keep_bytes. Arenas retired while the cache lives are
     * not kept: a long-running cache leaves nothing behind. */
    for (cc_arena *a = c->arenas; a; a = a->next) {
        a->keep_file = keep && a->path[0];
        kept |= a->keep_file;
    }
    while (c->arenas) begin_retire(c, c->arenas, &work);
    pthread_mutex_unlock(&c->lock);
    finish_retire(c, work);
    if (kept) cc_shm_prune(1, keep_s, keep_bytes);
    reap(c, 1);
    pthread_mutex_destroy(&c->lock);
    fj_free(c);
}

const char *cc_backing(const cc_cache *c) { return c ? cc_kind_name(c->kind) : "none"; }

/* ------------------------------------------------------------------------
 * Placement
 * ---------------------------------------------------------------------- */

/* Room for one more item in a's vector. A full vector is copied into a
 * bigger one; the old one stays readable (chained) for concurrent lookups. */
static fj_status vec_room(cc_arena *a) {
    cc_vec *v = atomic_load_explicit(&a->vec, memory_order_relaxed);
    size_t n = atomic_load_explicit(&a->count, memory_order_relaxed);
    if (n < v->cap) return FJ_OK;
    size_t cap = v->cap * 2;
    cc_vec *nv = cc_vec_new(cap);
    if (!nv) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: entry table of %zu", cap);
    nv->older = v;
    memcpy(nv->items, v->items, n * sizeof v->items[0]);
    memcpy(nv->starts, v->starts, n * sizeof v->starts[0]);
    atomic_store_explicit(&a->vec, nv, memory_order_release);
    return FJ_OK;
}

/* The most a kept range [hot_lo, hot_hi) moves a kernel on: less than
 * its length and a line (cc_arena_reserve). */
static size_t hot_slack(size_t hot_lo, size_t hot_hi) {
    return hot_hi ? hot_hi - hot_lo + CC_ALIGN : 0;
}

/* Reserves room in the current arena, or in a new one if it is full (the
 * old one is closed, and retired if it is empty). */
static fj_status reserve(cc_cache *c, size_t len, size_t hot_lo, size_t hot_hi, cc_txn *t,
                         cc_arena **work) {
    int fits = 0;
    fj_status st = FJ_OK;
    if (c->cur) {
        st = cc_arena_reserve(c->cur, len, hot_lo, hot_hi, t, &fits);
        if (st != FJ_OK || fits) return st;
    }
    cc_arena *a;
    st = cc_arena_new(c->kind, c->span, len + hot_slack(hot_lo, hot_hi), c->huge, c->core_view,
                      c->aux_room, &a);
    if (st != FJ_OK) return st;
    cc_arena *old = c->cur;
    st = attach(c, a);
    if (st != FJ_OK) {
        cc_arena_release(a);
        cc_arena_free(a);
        return st;
    }
    if (old) {
        old->state = CC_CLOSED;
        if (all_dead(old)) begin_retire(c, old, work);
    }
    st = cc_arena_reserve(a, len, hot_lo, hot_hi, t, &fits);
    if (st == FJ_OK && !fits) st = fj_fail(FJ_ERR_OS, "codecache: new arena too small");
    return st;
}

/* ------------------------------------------------------------------------
 * Eviction: whole arenas, least recently used first, only when the owner
 * says every kernel in it may go.
 * ---------------------------------------------------------------------- */

/* The least recently used arena not tried in this round, or NULL. */
static cc_arena *pick_victim(cc_cache *c, uint64_t round) {
    cc_arena *best = NULL;
    uint64_t best_use = 0;
    for (cc_arena *a = c->arenas; a; a = a->next) {
        if (a->state > CC_CLOSED || a->evicting || a->evict_round == round) continue;
        uint64_t u = atomic_load_explicit(&a->last_use, memory_order_relaxed);
        if (!best || u < best_use) best = a, best_use = u;
    }
    return best;
}

/* Under c->lock, which it drops and retakes: makes need more bytes fit in
 * the capacity, or fails with FJ_ERR_CACHE_FULL. */
static fj_status make_room(cc_cache *c, size_t need, const char *name) {
    if (need > c->capacity)
        return fj_fail(FJ_ERR_CACHE_FULL, "codecache: kernel '%s' needs %zu bytes, more than the "
                       "whole capacity of %zu bytes (fj_options.cache_bytes)", name, need,
                       c->capacity);
    uint64_t round = ++c->round;
    while (c->held > c->capacity - need) {
        cc_arena *v = pick_victim(c, round);
        if (!v)
            return fj_fail(FJ_ERR_CACHE_FULL, "codecache: no room for kernel '%s' (%zu bytes): "
                           "%zu of %zu bytes are held by %zu arenas with kernels in use (held "
                           "by a handle or running), none can be evicted; raise "
                           "fj_options.cache_bytes", name, need, c->held, c->capacity,
                           c->narenas);
        v->evict_round = round;
        cc_arena *work = NULL;
        if (all_dead(v)) {
            begin_retire(c, v, &work);
            pthread_mutex_unlock(&c->lock);
            finish_retire(c, work);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (!c->hooks.evict_detach) continue;
        cc_arena_info info = info_of(v);
        void *detached = NULL;
        long n = c->hooks.evict_detach(c->hooks.ctx, &info, &detached);
        if (n < 0) {
            /* In use: a second chance, as if just used. */
            atomic_store_explicit(&v->last_use,
                                  atomic_load_explicit(&c->clock, memory_order_relaxed),
                                  memory_order_relaxed);
            continue;
        }
        /* Closed before the lock drops: nothing new lands in it, so freeing
         * what was detached empties it and retires it. */
        if (c->cur == v) c->cur = NULL;
        v->state = CC_CLOSED;
        v->evicting = 1;
        c->arenas_evicted++;
        fj_log(2, "codecache: evicting arena %#lx-%#lx (%ld kernels)", (unsigned long)v->lo,
               (unsigned long)v->hi, n);
        pthread_mutex_unlock(&c->lock);
        c->hooks.evict_free(c->hooks.ctx, detached);
        pthread_mutex_lock(&c->lock);
        v->evicting = 0; /* (retired by now unless an entry was left live) */
        if (v->state == CC_CLOSED && all_dead(v)) {
            begin_retire(c, v, &work);
            pthread_mutex_unlock(&c->lock);
            finish_retire(c, work);
            pthread_mutex_lock(&c->lock);
        }
    }
    return FJ_OK;
}

fj_status cc_place(cc_cache *c, const uint8_t *code, size_t len, const char *name,
                   cc_entry **out) {
    return cc_place_hot(c, code, len, 0, 0, name, out);
}

fj_status cc_place_hot(cc_cache *c, const uint8_t *code, size_t len, size_t hot_lo,
                        size_t hot_hi, const char *name, cc_entry **out) {
    if (out) *out = NULL;
    if (!c || !code || !out || len == 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "codecache: cc_place: %s",
                       !c ? "cache is NULL" : !code ? "code is NULL" : !out ? "out is NULL"
                                                                        : "empty kernel");
    if (!name) name = "";
    if (len > SIZE_MAX / 4) return fj_fail(FJ_ERR_INVALID_ARG, "codecache: kernel too large");
    if (hot_hi && (hot_lo >= hot_hi || hot_hi > len))
        return fj_fail(FJ_ERR_INVALID_ARG, "codecache: '%s': bytes %zu-%zu to keep on one page "
                       "are not a range of its %zu", name, hot_lo, hot_hi, len);
    size_t unit = c->kind == CC_ANON ? cc_page_size() : CC_ALIGN;
    if (hot_hi - hot_lo > cc_page_size() - CC_ALIGN || c->kind == CC_ANON) hot_lo = hot_hi = 0;
    size_t need = ((len + unit - 1) & ~(unit - 1)) + hot_slack(hot_lo, hot_hi);
    size_t nlen = strlen(name);
    cc_rec *r = fj_malloc(sizeof *r + nlen + 1);
    if (!r) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: entry record for '%s'", name);
    memcpy(r->name, name, nlen + 1);

    cc_arena *work = NULL;
    int hok = 0, hbad = 0;
    pthread_mutex_lock(&c->lock);
    fj_status st = make_room(c, need, name);
    if (st != FJ_OK) goto fail;
    cc_txn t;
    st = reserve(c, len, hot_lo, hot_hi, &t, &work);
    if (st != FJ_OK) goto fail;
    size_t before = t.a->cursor;
    st = vec_room(t.a);
    if (st != FJ_OK) {
        cc_arena_abort(&t);
        c->held += t.a->cursor - before;
        goto fail;
    }
    /* Fill the rest of the kernel's last line (anonymous: page) with int3:
     * the next kernel starts on lines nobody is executing. */
    int by_file = 0;
    st = cc_arena_write(&t, code, len, &by_file);
    if (st != FJ_OK) {
        cc_arena_abort(&t);
        c->held += t.a->cursor - before;
        goto fail;
    }
    c->file_writes += (uint64_t)by_file;
    st = cc_arena_commit(&t, &hok, &hbad);
    c->held += t.a->cursor - before;
    c->huge_ok += (uint64_t)hok;
    c->huge_bad += (uint64_t)hbad;
    if (st != FJ_OK) goto fail;

    /* Publish: the record is complete before count makes it visible. The
     * executing thread learns the address through its own synchronization
     * (a release/acquire pair), which orders these stores before its
     * instruction fetch; the bytes were never executed before, so no stale
     * copy can be in any core's instruction cache. */
    r->e.start = t.a->lo + t.off;
    r->e.size = len;
    r->e.name = r->name;
    r->e.arena_id = t.a->id;
    r->e.arena_lo = t.a->lo;
    r->e.arena_hi = t.a->hi;
    r->e.arena_aux = t.a->aux;
    r->e.arena_aux_len = t.a->aux_len;
    r->e.owner = NULL;
    r->arena = t.a;
    atomic_init(&r->dead, 0);
    cc_vec *v = atomic_load_explicit(&t.a->vec, memory_order_relaxed);
    size_t n = atomic_load_explicit(&t.a->count, memory_order_relaxed);
    v->items[n] = r;
    v->starts[n] = r->e.start;
    atomic_store_explicit(&t.a->count, n + 1, memory_order_release);
    c->live_bytes += len;
    c->nlive++;
    pthread_mutex_unlock(&c->lock);
    finish_retire(c, work);
    fj_log(3, "codecache: placed '%s' (%zu bytes) at %#lx", name, len, (unsigned long)r->e.start);
    *out = &r->e;
    return FJ_OK;
fail:
    pthread_mutex_unlock(&c->lock);
    finish_retire(c, work);
    fj_free(r);
    return st;
}

void cc_remove(cc_cache *c, cc_entry *e) {
    if (!c || !e) return;
    cc_rec *r = (cc_rec *)e;
    cc_arena *work = NULL;
    pthread_mutex_lock(&c->lock);
    cc_arena *a = r->arena;
    if (a->owner == c && !atomic_exchange(&r->dead, 1)) {
        c->live_bytes -= e->size;
        c->nlive--;
        atomic_fetch_add_explicit(&a->ndead, 1, memory_order_relaxed);
        /* (An arena being evicted retires in make_room, which waits for it.) */
        if (a->state == CC_CLOSED && !a->evicting && all_dead(a)) begin_retire(c, a, &work);
    }
    pthread_mutex_unlock(&c->lock);
    finish_retire(c, work);
}

void cc_touch(cc_entry *e, uint64_t tick) {
    cc_arena *a = ((cc_rec *)e)->arena;
    atomic_store_explicit(&a->last_use, tick, memory_order_relaxed);
    atomic_store_explicit(&a->owner->clock, tick, memory_order_relaxed);
}

void cc_set_owner(cc_entry *e, void *owner) { e->owner = owner; }

void *cc_arena_user(const cc_entry *e) { return ((const cc_rec *)e)->arena->user; }

void cc_arena_set_user(const cc_entry *e, void *user) { ((const cc_rec *)e)->arena->user = user; }

int cc_current_arena(cc_cache *c, cc_arena_info *out) {
    pthread_mutex_lock(&c->lock);
    cc_arena *a = c->cur;
    if (a) *out = info_of(a);
    pthread_mutex_unlock(&c->lock);
    return a != NULL;
}

void cc_arena_info_set_user(const cc_arena_info *a, void *user) { a->arena->user = user; }

size_t cc_arena_slots(const cc_cache *c) {
    size_t n = c->capacity / c->span;
    return n ? n : 1;
}

size_t cc_arena_count(const cc_arena_info *a) {
    return atomic_load_explicit(&a->arena->count, memory_order_acquire);
}

cc_entry *cc_arena_entry(const cc_arena_info *a, size_t i) {
    cc_vec *v = atomic_load_explicit(&a->arena->vec, memory_order_acquire);
    if (i >= atomic_load_explicit(&a->arena->count, memory_order_acquire)) return NULL;
    cc_rec *r = v->items[i];
    return atomic_load_explicit(&r->dead, memory_order_acquire) ? NULL : &r->e;
}

void cc_get_stats(cc_cache *c, cc_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    out->capacity = c->capacity;
    out->held = c->held;
    out->live_kernels = c->nlive;
    out->live_bytes = c->live_bytes;
    out->mapped_bytes = c->mapped;
    out->arenas = c->narenas;
    out->limbo = c->nlimbo;
    out->arenas_evicted = c->arenas_evicted;
    out->arenas_retired = c->arenas_retired;
    out->huge_chunks = c->huge_ok;
    out->file_writes = c->file_writes;
    out->huge_failed = c->huge_bad;
    pthread_mutex_unlock(&c->lock);
}

const char *cc_entry_path(const cc_entry *e) {
    const cc_arena *a = ((const cc_rec *)e)->arena;
    return a->path[0] && a->state < CC_RETIRING ? a->path : NULL;
}

/* ------------------------------------------------------------------------
 * Lookup: async-signal-safe (atomics only: no lock, allocation or stdio).
 * ---------------------------------------------------------------------- */

static const cc_entry *arena_find(cc_arena *a, uintptr_t pc) {
    /* count first: its acquire makes items[0, n) visible, and any vector
     * loaded afterwards holds at least those n items. */
    size_t n = atomic_load_explicit(&a->count, memory_order_acquire);
    cc_vec *v = atomic_load_explicit(&a->vec, memory_order_acquire);
    if (n > v->cap) n = v->cap;
    /* Placement is monotonic, so items are sorted by start: find the last
     * one starting at or before pc. Branch-free halving (a conditional
     * move per step): samples hit random kernels, and mispredicted
     * branches were most of a lookup's time. */
    if (n == 0 || v->starts[0] > pc) return NULL;
    const uintptr_t *s = v->starts;
    size_t lo = 0, len = n;
    while (len > 1) {
        size_t half = len / 2;
        lo = s[lo + half] <= pc ? lo + half : lo;
        len -= half;
    }
    cc_rec *r = v->items[lo];
    if (pc - r->e.start >= r->e.size) return NULL;
    if (atomic_load_explicit(&r->dead, memory_order_acquire)) return NULL;
    return &r->e;
}

const cc_entry *cc_lookup(uintptr_t pc) {
    const cc_entry *found = NULL;
    unsigned e = grace_enter();
    int n = atomic_load_explicit(&g_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (pc < atomic_load_explicit(&g_lo[i], memory_order_relaxed) ||
            pc >= atomic_load_explicit(&g_hi[i], memory_order_relaxed))
            continue;
        cc_arena *a = atomic_load_explicit(&g_slots[i], memory_order_acquire);
        if (a && pc >= a->lo && pc < a->hi) {
            found = arena_find(a, pc);
            break; /* arenas never overlap */
        }
    }
    grace_exit(e);
    return found;
}
