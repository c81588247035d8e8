/* pool.c: a small pthread pool for parallel kernels.
 *
 * Why not OpenMP: libgomp's GOMP_parallel keeps a data pointer in rbp when
 * it calls the outlined function, so samples in JIT code on the master
 * thread lose the caller's stack. Here the caller runs chunks itself,
 * directly from its own frame, and workers are plain pthreads built with
 * frame pointers. */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/rt.h"

struct rt_pool {
    int nworkers;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation;    /* bumped for each job */
    int stop;
    /* The current job. */
    rt_chunk_fn fn;
    void *ctx;
    int64_t nchunks;
    int active;             /* workers allowed to join this job */
    atomic_llong next;      /* next chunk to claim */
    int running;            /* workers still inside the job */
};

static void run_chunks(rt_pool *p) {
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->nchunks) break;
        p->fn(p->ctx, i);
    }
}

typedef struct worker_arg {
    rt_pool *p;
    int index;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    fj_free(arg);
    rt_pool *p = wa.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        if (wa.index >= p->active) continue;
        pthread_mutex_unlock(&p->lock);
        run_chunks(p);
        pthread_mutex_lock(&p->lock);
        if (--p->running == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

fj_status rt_pool_create(int workers, rt_pool **out) {
    rt_pool *p = fj_calloc(1, sizeof *p);
    if (!p || !(p->threads = fj_calloc((size_t)workers, sizeof(pthread_t)))) {
        fj_free(p);
        return fj_fail(FJ_ERR_NO_MEMORY, "thread pool: out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < workers; i++) {
        worker_arg *wa = fj_malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            fj_free(wa);
            p->nworkers = i;
            rt_pool_destroy(p);
            return fj_fail(FJ_ERR_OS, "thread pool: cannot start worker %d", i);
        }
        p->nworkers = i + 1;
    }
    *out = p;
    return FJ_OK;
}

void rt_pool_destroy(rt_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    fj_free(p->threads);
    fj_free(p);
}

int rt_threads(const fj_runtime *rt) { return rt->opts.threads; }

void rt_parallel(fj_runtime *rt, int64_t nchunks, int nthreads, rt_chunk_fn fn, void *ctx) {
    if (nchunks <= 0) return;
    if (nthreads > rt->opts.threads) nthreads = rt->opts.threads;
    if (nthreads > nchunks) nthreads = (int)nchunks;
    rt_pool *p = NULL;
    if (nthreads > 1) {
        pthread_mutex_lock(&rt->pool_lock);
        if (!rt->pool && rt_pool_create(rt->opts.threads - 1, &rt->pool) != FJ_OK)
            rt->pool = NULL;
        p = rt->pool;
        if (!p) pthread_mutex_unlock(&rt->pool_lock);
        /* pool_lock stays held for the job: one parallel job per runtime at a
         * time; other callers wait (their work is still done, just later). */
    }
    if (!p) {
        /* Serial (or the pool could not start): same chunks, same results. */
        for (int64_t i = 0; i < nchunks; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->nchunks = nchunks;
    p->active = nthreads - 1;
    p->running = nthreads - 1;
    atomic_store(&p->next, 0);
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_chunks(p); /* the caller's share, from the caller's own frame */
    pthread_mutex_lock(&p->lock);
    while (p->running > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&rt->pool_lock);
}
