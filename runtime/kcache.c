/* kcache.c: kernels keyed by descriptor: one per key, generated once,
 * reference counted. A slot is inserted in the "generating" state before
 * the generator runs (outside the lock), so concurrent requests for the
 * same key wait for it instead of generating their own. */
#include "runtime/kcache.h"

#include <string.h>

#include "kernels/builder_int.h"
#include "runtime/rt.h"

struct rt_kslot {
    uint64_t hash;
    uint8_t *key;
    size_t key_len;
    fj_kernel *k;        /* NULL while generating */
    rt_kslot *next;
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
            pthread_mutex_unlock(&rt->kc_lock);
            *out = k;
            return FJ_OK;
        }
        /* Another thread is generating this key: wait, then look again
         * (it may have failed and removed the slot). */
        pthread_cond_wait(&rt->kc_cond, &rt->kc_lock);
    }
    rt_kslot *s = fj_calloc(1, sizeof *s);
    uint8_t *key = fj_malloc(d->key_len ? d->key_len : 1);
    if (!s || !key) {
        fj_free(s);
        fj_free(key);
        pthread_mutex_unlock(&rt->kc_lock);
        return fj_fail(FJ_ERR_NO_MEMORY, "kernel cache: out of memory");
    }
    memcpy(key, d->key, d->key_len);
    *s = (rt_kslot){h, key, d->key_len, NULL, NULL};
    rt_kslot **pp = find(rt, h, d->key, d->key_len);
    *pp = s;
    rt->kc_count++;
    pthread_mutex_unlock(&rt->kc_lock);

    fj_builder *b;
    fj_kernel *k = NULL;
    fj_status st = kb_new(d->name, d->nargs, rt->isa, rt->features, rt, &b);
    if (st == FJ_OK) {
        d->gen(b, d->ctx);
        st = rt_finish(rt, b, &k);
    }

    pthread_mutex_lock(&rt->kc_lock);
    pp = find(rt, h, d->key, d->key_len);
    if (st == FJ_OK) {
        rt_kernel_ref(k); /* one for the cache, one for the caller */
        s->k = k;
    } else {
        *pp = s->next;
        rt->kc_count--;
        fj_free(s->key);
        fj_free(s);
    }
    pthread_cond_broadcast(&rt->kc_cond);
    pthread_mutex_unlock(&rt->kc_lock);
    *out = k;
    return st;
}

void rt_kcache_clear(fj_runtime *rt) {
    for (size_t i = 0; i < rt->kc_nbuckets; i++)
        for (rt_kslot *s = rt->kc_buckets[i], *next; s; s = next) {
            next = s->next;
            if (s->k) rt_kernel_unref(s->k);
            fj_free(s->key);
            fj_free(s);
        }
    fj_free(rt->kc_buckets);
    rt->kc_buckets = NULL;
    rt->kc_nbuckets = rt->kc_count = 0;
}
