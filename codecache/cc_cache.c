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
    pthread_mutex_t lock;  /* placement and removal */
    int kind;              /* backing of every arena of this cache */
    size_t capacity;
    size_t live;           /* bytes of live kernels, each rounded up to CC_ALIGN */
    cc_arena *cur;         /* where the next kernel goes */
    cc_arena *arenas;      /* all of them, newest first */
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

/* An arena whose kernels were all removed and that takes no more code gives
 * its memory and file back. Its descriptor and records stay until
 * cc_destroy (pointers handed out by cc_lookup stay valid); it leaves the
 * slot table so the table does not fill up with dead arenas. */
static void retire(cc_arena *a) {
    pthread_mutex_lock(&g_lock);
    unpublish(a);
    pthread_mutex_unlock(&g_lock);
    cc_arena_release(a);
}

static int all_dead(cc_arena *a) {
    return a->ndead == atomic_load_explicit(&a->count, memory_order_relaxed);
}

/* ------------------------------------------------------------------------
 * Exit hook: a cache still alive at exit must not leave its files behind.
 * ---------------------------------------------------------------------- */

static void unlink_at_exit(void) {
    unsigned e = grace_enter();
    pid_t me = getpid(); /* inherited by fork: only unlink our own files */
    int n = atomic_load_explicit(&g_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        cc_arena *a = atomic_load_explicit(&g_slots[i], memory_order_acquire);
        if (a && a->path[0] && a->pid == me) unlink(a->path);
    }
    grace_exit(e);
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

static fj_status attach(cc_cache *c, cc_arena *a) {
    a->owner = c;
    fj_status st = publish(a);
    if (st != FJ_OK) return st;
    if (a->kind == CC_FILE) pthread_once(&exit_once, register_exit_hook);
    a->next = c->arenas;
    c->arenas = a;
    c->cur = a;
    return FJ_OK;
}

fj_status cc_create(const cc_config *cfg, cc_cache **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "codecache: cc_create: out is NULL");
    *out = NULL;
    cc_config conf = {0, 1};
    if (cfg) conf = *cfg;
    cc_cache *c = fj_calloc(1, sizeof *c);
    if (!c) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: cache descriptor");
    pthread_mutex_init(&c->lock, NULL);
    c->capacity = conf.capacity ? conf.capacity : CC_DEFAULT_CAPACITY;

    if (conf.code_file) cc_shm_cleanup_stale();
    /* The first backing that works, probed by creating the first arena
     * (e.g. a noexec /dev/shm fails at the RX mapping). */
    fj_status st = FJ_ERR_OS;
    cc_arena *a = NULL;
    for (int kind = conf.code_file ? CC_FILE : CC_MEMFD; kind <= CC_ANON; kind++) {
        st = cc_arena_new(kind, CC_ARENA_BYTES, &a);
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
    fj_log(1, "codecache: code backed by %s%s%s, capacity %zu bytes", cc_kind_name(c->kind),
           a->path[0] ? " " : "", a->path, c->capacity);
    *out = c;
    return FJ_OK;
}

void cc_destroy(cc_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&g_lock);
    for (cc_arena *a = c->arenas; a; a = a->next) unpublish(a);
    /* After this no lookup can still be reading these arenas or records. */
    grace_wait();
    pthread_mutex_unlock(&g_lock);
    cc_arena *a = c->arenas;
    while (a) {
        cc_arena *next = a->next;
        cc_arena_release(a);
        cc_arena_free(a);
        a = next;
    }
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
    cc_vec *nv = fj_malloc(sizeof *nv + cap * sizeof nv->items[0]);
    if (!nv) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: entry table of %zu", cap);
    nv->cap = cap;
    nv->older = v;
    memcpy(nv->items, v->items, n * sizeof v->items[0]);
    atomic_store_explicit(&a->vec, nv, memory_order_release);
    return FJ_OK;
}

static size_t align_up(size_t n) { return (n + CC_ALIGN - 1) & ~(size_t)(CC_ALIGN - 1); }

/* Reserves room in the current arena, or in a new one if it is full. */
static fj_status reserve(cc_cache *c, size_t len, cc_txn *t) {
    int fits;
    fj_status st = cc_arena_reserve(c->cur, len, t, &fits);
    if (st != FJ_OK || fits) return st;
    cc_arena *a;
    st = cc_arena_new(c->kind, len, &a);
    if (st != FJ_OK) return st;
    cc_arena *old = c->cur;
    st = attach(c, a);
    if (st != FJ_OK) {
        cc_arena_release(a);
        cc_arena_free(a);
        return st;
    }
    if (all_dead(old)) retire(old);
    st = cc_arena_reserve(a, len, t, &fits);
    if (st == FJ_OK && !fits) st = fj_fail(FJ_ERR_OS, "codecache: new arena too small");
    return st;
}

fj_status cc_place(cc_cache *c, const uint8_t *code, size_t len, const char *name,
                   cc_entry **out) {
    if (out) *out = NULL;
    if (!c || !code || !out || len == 0)
        return fj_fail(FJ_ERR_INVALID_ARG, "codecache: cc_place: %s",
                       !c ? "cache is NULL" : !code ? "code is NULL" : !out ? "out is NULL"
                                                                        : "empty kernel");
    if (!name) name = "";
    if (len > SIZE_MAX / 2) return fj_fail(FJ_ERR_INVALID_ARG, "codecache: kernel too large");
    size_t need = align_up(len);
    size_t nlen = strlen(name);
    cc_rec *r = fj_malloc(sizeof *r + nlen + 1);
    if (!r) return fj_fail(FJ_ERR_NO_MEMORY, "codecache: entry record for '%s'", name);
    memcpy(r->name, name, nlen + 1);

    pthread_mutex_lock(&c->lock);
    fj_status st;
    if (need > c->capacity - c->live) {
        st = fj_fail(FJ_ERR_CACHE_FULL,
                     "codecache: kernel '%s' needs %zu bytes; %zu of %zu bytes in use", name, need,
                     c->live, c->capacity);
        goto fail;
    }
    cc_txn t;
    st = reserve(c, len, &t);
    if (st != FJ_OK) goto fail;
    st = vec_room(t.a);
    if (st != FJ_OK) {
        cc_arena_abort(&t);
        goto fail;
    }
    /* Fill the rest of the kernel's last line (anonymous: page) with int3:
     * the next kernel starts on lines nobody is executing. */
    memcpy(t.w, code, len);
    memset(t.w + len, 0xcc, t.span - len);
    st = cc_arena_commit(&t);
    if (st != FJ_OK) goto fail;

    /* Publish: the record is complete before count makes it visible. The
     * executing thread learns the address through its own synchronization
     * (a release/acquire pair), which orders these stores before its
     * instruction fetch; the bytes were never executed before, so no stale
     * copy can be in any core's instruction cache. */
    r->e.start = t.a->lo + t.off;
    r->e.size = len;
    r->e.name = r->name;
    r->arena = t.a;
    atomic_init(&r->dead, 0);
    cc_vec *v = atomic_load_explicit(&t.a->vec, memory_order_relaxed);
    size_t n = atomic_load_explicit(&t.a->count, memory_order_relaxed);
    v->items[n] = r;
    atomic_store_explicit(&t.a->count, n + 1, memory_order_release);
    c->live += need;
    pthread_mutex_unlock(&c->lock);
    fj_log(2, "codecache: placed '%s' (%zu bytes) at %#lx", name, len, (unsigned long)r->e.start);
    *out = &r->e;
    return FJ_OK;
fail:
    pthread_mutex_unlock(&c->lock);
    fj_free(r);
    return st;
}

void cc_remove(cc_cache *c, cc_entry *e) {
    if (!c || !e) return;
    cc_rec *r = (cc_rec *)e;
    pthread_mutex_lock(&c->lock);
    cc_arena *a = r->arena;
    if (a->owner == c && !atomic_exchange(&r->dead, 1)) {
        c->live -= align_up(e->size);
        a->ndead++;
        if (a != c->cur && all_dead(a)) retire(a);
    }
    pthread_mutex_unlock(&c->lock);
}

const char *cc_entry_path(const cc_entry *e) {
    const cc_arena *a = ((const cc_rec *)e)->arena;
    return a->path[0] && !a->retired ? a->path : NULL;
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
     * one starting at or before pc. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->items[mid]->e.start <= pc) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    cc_rec *r = v->items[lo - 1];
    if (pc - r->e.start >= r->e.size) return NULL;
    if (atomic_load_explicit(&r->dead, memory_order_acquire)) return NULL;
    return &r->e;
}

const cc_entry *cc_lookup(uintptr_t pc) {
    const cc_entry *found = NULL;
    unsigned e = grace_enter();
    int n = atomic_load_explicit(&g_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        cc_arena *a = atomic_load_explicit(&g_slots[i], memory_order_acquire);
        if (a && pc >= a->lo && pc < a->hi) {
            found = arena_find(a, pc);
            break; /* arenas never overlap */
        }
    }
    grace_exit(e);
    return found;
}
