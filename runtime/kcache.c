/* kcache.c: kernels keyed by descriptor: one per key, generated once,
 * reference counted, evicted when the code cache needs room. A slot is
 * inserted in the "generating" state before the generator runs (outside
 * the lock), so concurrent requests for the same key wait for it instead
 * of generating their own.
 *
 * References: the table holds one on each kernel, every user one more
 * (rt_kernel_acquire .. rt_kernel_unref, i.e. while it runs). New
 * references are only ever taken through the table, under kc_lock, so a
 * kernel whose count is 1 there is held by nobody else and cannot become
 * held while kc_lock is kept: that is what makes eviction safe. The one
 * other way is rt_kernel_ref on a kernel the caller holds already (its
 * count is then at least 2 and eviction leaves it alone), which is how
 * thread-local memos (rt_khold) keep theirs.
 *
 * Eviction is driven by the code cache (cc_place, when a kernel would not
 * fit): it picks the least recently used arena, whose last use is the
 * newest LRU tick any of its kernels got here, and asks
 *   kc_evict_detach (cache lock held): every live kernel of the arena is
 *     ours and unreferenced? then unlink them all from the table;
 *   kc_evict_free (no lock): drop the table's references, which frees
 *     each kernel (its unwind info, then its code), emptying the arena.
 * Lock order: cache lock -> kc_lock; kc_lock is never held while calling
 * into the cache other than cc_touch/cc_set_owner (lock-free). */
#include "runtime/kcache.h"

#include <string.h>

#include "kernels/builder/builder_int.h"
#include "runtime/rt.h"

struct rt_kslot {
    uint64_t hash;
    size_t key_len;
    fj_kernel *k;        /* NULL while generating */
    rt_kslot *next;
    uint8_t key[];       /* one allocation with the slot */
};

static uint64_t hash_key(const void *key, size_t n) {
    /* FNV-1a: keys are short descriptors, and this is not on a path an
     * attacker controls. */
    const uint8_t *p = key;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static rt_kslot **find(fj_runtime *rt, uint64_t h, const void *key, size_t n) {
    rt_kslot **pp = &rt->kc_buckets[h & (rt->kc_nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->key_len == n && !memcmp((*pp)->key, key, n)) return pp;
    return pp;
}

static int grow_table(fj_runtime *rt) {
    size_t nb = rt->kc_nbuckets ? rt->kc_nbuckets * 2 : 256;
    rt_kslot **b = fj_calloc(nb, sizeof *b);
    if (!b) return 0;
    for (size_t i = 0; i < rt->kc_nbuckets; i++)
        for (rt_kslot *s = rt->kc_buckets[i], *next; s; s = next) {
            next = s->next;
            s->next = b[s->hash & (nb - 1)];
            b[s->hash & (nb - 1)] = s;
        }
    fj_free(rt->kc_buckets);
    rt->kc_buckets = b;
    rt->kc_nbuckets = nb;
    return 1;
}

/* Under kc_lock: a use, for the LRU order. */
static void touch(fj_runtime *rt, fj_kernel *k) { cc_touch(k->entry, ++rt->kc_tick); }

void rt_kernel_ref(fj_kernel *k) { atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed); }

void rt_kernel_unref(fj_kernel *k) {
    if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) == 1) rt_kernel_free(k);
}

void *rt_kernel_fn(const fj_kernel *k) { return k->fn; }

fj_status rt_kernel_acquire(fj_runtime *rt, const rt_kdesc *d, fj_kernel **out) {
    uint64_t h = hash_key(d->key, d->key_len);
    pthread_mutex_lock(&rt->kc_lock);
    for (;;) {
        if (rt->kc_count >= rt->kc_nbuckets && !grow_table(rt)) {
            pthread_mutex_unlock(&rt->kc_lock);
            return fj_fail(FJ_ERR_NO_MEMORY, "kernel cache: out of memory");
        }
        rt_kslot **pp = find(rt, h, d->key, d->key_len);
        if (!*pp) break;
        if ((*pp)->k) {
            fj_kernel *k = (*pp)->k;
            rt_kernel_ref(k);
            touch(rt, k);
            atomic_fetch_add_explicit(&rt->kc_hits, 1, memory_order_relaxed);
            pthread_mutex_unlock(&rt->kc_lock);
            *out = k;
            return FJ_OK;
        }
        /* Another thread is generating this key: wait, then look again
         * (it may have failed and removed the slot). */
        pthread_cond_wait(&rt->kc_cond, &rt->kc_lock);
    }
    rt_kslot *s = fj_malloc(sizeof *s + d->key_len);
    if (!s) {
        pthread_mutex_unlock(&rt->kc_lock);
        return fj_fail(FJ_ERR_NO_MEMORY, "kernel cache: out of memory");
    }
    *s = (rt_kslot){h, d->key_len, NULL, NULL};
    if (d->key_len) memcpy(s->key, d->key, d->key_len);
    rt_kslot **pp = find(rt, h, d->key, d->key_len);
    *pp = s;
    rt->kc_count++;
    atomic_fetch_add_explicit(&rt->kc_misses, 1, memory_order_relaxed);
    pthread_mutex_unlock(&rt->kc_lock);

    fj_builder *b;
    fj_kernel *k = NULL;
    char nbuf[208];
    const char *name = d->name;
    if (!name) {
        d->name_fn(d->ctx, nbuf, sizeof nbuf);
        name = nbuf;
    }
    fj_status st = kb_new(name, d->nargs, rt->isa, rt->features, rt, &b);
    if (st == FJ_OK) {
        d->gen(b, d->ctx);
        st = rt_finish(rt, b, &k);
    }

    pthread_mutex_lock(&rt->kc_lock);
    pp = find(rt, h, d->key, d->key_len);
    if (st == FJ_OK) {
        rt_kernel_ref(k); /* one for the cache, one for the caller */
        s->k = k;
        /* From here on eviction may consider it (while it has no owner the
         * arena counts as in use). */
        cc_set_owner(k->entry, s);
        touch(rt, k);
    } else {
        *pp = s->next;
        rt->kc_count--;
        fj_free(s);
    }
    pthread_cond_broadcast(&rt->kc_cond);
    pthread_mutex_unlock(&rt->kc_lock);
    *out = k;
    return st;
}

/* ------------------------------------------------------------------------
 * Eviction hooks (see the top of the file)
 * ---------------------------------------------------------------------- */

/* The slot owning e if e is a cached kernel nobody else holds, else NULL.
 * Under kc_lock. */
static rt_kslot *evictable(const cc_entry *e) {
    rt_kslot *s = e->owner;
    if (!s || !s->k || s->k->entry != e) return NULL;
    /* acquire: pairs with the release in the last user's unref, so its
     * use of the kernel happens before the kernel is freed. */
    return atomic_load_explicit(&s->k->refs, memory_order_acquire) == 1 ? s : NULL;
}

static long kc_evict_detach(void *ctx, const cc_arena_info *a, void **detached) {
    fj_runtime *rt = ctx;
    size_t n = cc_arena_count(a);
    pthread_mutex_lock(&rt->kc_lock);
    for (size_t i = 0; i < n; i++) {
        const cc_entry *e = cc_arena_entry(a, i);
        if (e && !evictable(e)) {
            pthread_mutex_unlock(&rt->kc_lock);
            return -1;
        }
    }
    rt_kslot *list = NULL;
    long cnt = 0;
    for (size_t i = 0; i < n; i++) {
        cc_entry *e = cc_arena_entry(a, i);
        if (!e) continue;
        rt_kslot *s = e->owner;
        rt_kslot **pp = &rt->kc_buckets[s->hash & (rt->kc_nbuckets - 1)];
        while (*pp != s) pp = &(*pp)->next;
        *pp = s->next;
        rt->kc_count--;
        cc_set_owner(e, NULL);
        s->next = list;
        list = s;
        cnt++;
    }
    pthread_mutex_unlock(&rt->kc_lock);
    *detached = list;
    return cnt;
}

static void kc_evict_free(void *ctx, void *detached) {
    fj_runtime *rt = ctx;
    uint64_t n = 0;
    for (rt_kslot *s = detached, *next; s; s = next) {
        next = s->next;
        rt_kernel_unref(s->k); /* the table's reference, the last one */
        fj_free(s);
        n++;
    }
    atomic_fetch_add_explicit(&rt->kc_evictions, n, memory_order_relaxed);
}

/* ---- held references (rt_khold) ---------------------------------------
 * A memo may outlive the runtime of its kernel (destroy frees every kernel,
 * held or not), and another runtime may then be made at the same address:
 * serials tell them apart. Dropping a held reference needs the runtime
 * alive, which this list of live runtimes answers; destroy leaves it
 * before freeing anything, so an unref made under live_lock never races
 * with the kernel's freeing (and never frees: the table's reference stays
 * until destroy). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static fj_runtime *live;
static atomic_uint_least64_t last_serial;

static void khold_release(fj_runtime *rt, fj_kernel *k) {
    rt_kernel_unref(k);
    atomic_fetch_sub_explicit(&rt->khold_n, 1, memory_order_relaxed);
}

void rt_khold_drop(rt_khold *h) {
    if (!h->k) return;
    pthread_mutex_lock(&live_lock);
    for (fj_runtime *r = live; r; r = r->live_next)
        if (r == h->rt && r->serial == h->serial) {
            khold_release(r, h->k);
            break;
        }
    pthread_mutex_unlock(&live_lock);
    *h = (rt_khold){0};
}

int rt_khold_set(rt_khold *h, fj_runtime *rt, fj_kernel *k) {
    /* A kernel of this very runtime (not of an earlier one at its address),
     * which the caller keeps alive: no registry needed. */
    if (h->k && h->rt == rt && h->serial == rt->serial) khold_release(rt, h->k);
    else rt_khold_drop(h);
    *h = (rt_khold){0};
    if (atomic_fetch_add_explicit(&rt->khold_n, 1, memory_order_relaxed) >= rt->khold_max) {
        atomic_fetch_sub_explicit(&rt->khold_n, 1, memory_order_relaxed);
        return 0;
    }
    *h = (rt_khold){rt, rt->serial, k};
    return 1;
}

void rt_live_fork(int phase) { fj_fork_mutex(&live_lock, phase); }

fj_runtime *rt_live_first(void) { return live; }

void rt_kcache_fork_child(fj_runtime *rt) {
    /* A key another thread was generating when the process was copied: its
     * kernel never arrives here, and a lookup would wait for it forever.
     * The next acquire generates it again. */
    for (size_t i = 0; i < rt->kc_nbuckets; i++)
        for (rt_kslot **pp = &rt->kc_buckets[i]; *pp;) {
            rt_kslot *s = *pp;
            if (s->k) {
                pp = &s->next;
                continue;
            }
            *pp = s->next;
            rt->kc_count--;
            fj_free(s);
        }
}

void rt_kcache_init(fj_runtime *rt) {
    rt->serial = atomic_fetch_add_explicit(&last_serial, 1, memory_order_relaxed) + 1;
    size_t q = cc_arena_slots(rt->cache) / 4;
    rt->khold_max = q < 1 ? 1 : q > 1 << 20 ? 1 << 20 : (int)q;
    pthread_mutex_lock(&live_lock);
    rt->live_next = live;
    live = rt;
    pthread_mutex_unlock(&live_lock);
    /* .retire destroys the arena's unwind registration before its memory
     * goes back (invariant 4). */
    cc_hooks h = {.ctx = rt, .evict_detach = kc_evict_detach, .evict_free = kc_evict_free,
                  .retire = rt_arena_retire};
    cc_set_hooks(rt->cache, &h);
}

fj_status fj_test_kernel_get(fj_runtime *rt, const void *key, size_t key_len, const char *name,
                             int nargs, void (*gen)(fj_builder *b, const void *ctx),
                             const void *ctx, fj_kernel **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "fj_test_kernel_get: out is NULL");
    *out = NULL;
    if (!rt || (!key && key_len) || !name || !gen)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_test_kernel_get: NULL argument");
    rt_kdesc d = {key, key_len, name, nargs, gen, ctx, NULL};
    return rt_kernel_acquire(rt, &d, out);
}

void rt_kcache_clear(fj_runtime *rt) {
    pthread_mutex_lock(&live_lock);
    fj_runtime **pp = &live;
    while (*pp && *pp != rt) pp = &(*pp)->live_next;
    if (*pp) *pp = rt->live_next;
    pthread_mutex_unlock(&live_lock);
    for (size_t i = 0; i < rt->kc_nbuckets; i++)
        for (rt_kslot *s = rt->kc_buckets[i], *next; s; s = next) {
            next = s->next;
            if (s->k) rt_kernel_unref(s->k);
            fj_free(s);
        }
    fj_free(rt->kc_buckets);
    rt->kc_buckets = NULL;
    rt->kc_nbuckets = rt->kc_count = 0;
}
