/* pool.c: a small pthread pool for parallel kernels.
 *
 * Why not OpenMP: libgomp's GOMP_parallel keeps a data pointer in rbp when
 * it calls the outlined function, so samples in JIT code on the master
 * thread lose the caller's stack. Here the caller runs chunks itself,
 * directly from its own frame, and workers are plain pthreads built with
 * frame pointers.
 *
 * Hand-off: one GEMM makes several rt_parallel calls back to back (pack B,
 * compute, next k block...), and a sleeping thread takes tens of
 * microseconds to wake (more in a VM, where an idle vCPU halts). So a
 * worker spins for a while after a job, then naps in short sleeps for a
 * while longer, and only then sleeps on the condvar; the caller spins for
 * the workers' completion before it sleeps: jobs in quick succession pass
 * through one atomic word each way. The mutex and the condvars are touched
 * only when someone actually sleeps.
 *
 * Placement: a thread woken through a futex may be put on its waker's
 * CPU. A worker woken by its caller then waits behind the caller and
 * joins late or not at all, and the two can stay together: they take
 * turns, so no CPU ever has a queue for the load balancer to spread (seen
 * on a 2-vCPU VM: both threads on one vCPU for hundreds of milliseconds,
 * the other vCPU idle, GEMM at one thread's speed). So an idle worker
 * (past its spin) takes the last caller's CPU out of its own mask until
 * it wakes, and the kernel wakes it elsewhere (after a sleep on the
 * condvar it joined 1-2 ms late or not at all, now within about 0.1 ms);
 * a napping worker wakes from its own timer, or at once for a job that
 * asks for it (RT_PAR_WAKE: the caller's wake costs microseconds, worth
 * it for long jobs only); and a worker that still finds itself on its
 * caller's CPU when it joins moves itself off.
 *
 * Joining: a worker takes part in a job only by joining it while it is
 * open, and the caller, once every chunk is claimed, closes it and waits
 * for the workers that joined, not for the ones it woke. A worker that
 * wakes late (an idle vCPU can take milliseconds to come back) finds the
 * job closed and goes back to waiting: the caller has run its chunks
 * instead of waiting for it. Chunks are the same whoever runs them, so
 * results are too.
 *
 * Stitching (invariant 7): the caller captures its own frame (an origin
 * record) before it publishes a job, and a worker runs its chunks through
 * fj_worker_run (stitch_x86_64.S), whose frame record points at the
 * caller's: a frame-pointer walk from a kernel on a worker goes on through
 * fj_worker_run into the caller's frames up to main. The caller returns
 * only after every worker that joined is done, so those frames are live.
 * DWARF unwinders keep to the worker's own stack (the trampoline's CFI).
 *
 * Worker stacks are mapped low in the address space, below the main
 * thread's stack and below every later mmap (where the stacks of threads
 * created afterwards come from), so a stitched step goes up in address:
 * Linux's deferred user unwinder rejects a step whose frame is not above
 * the current one. */
#include "runtime/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime/rt.h"

/* How long a thread busy-waits before sleeping (nanoseconds): long enough
 * to bridge the gaps between the jobs of one GEMM and between calls in a
 * loop, short enough that it keeps the scheduler's credit of a thread that
 * sleeps. A thread that spins for long (or yields in a loop) is charged
 * like a CPU hog and, on a busy machine, gets preempted for whole time
 * slices while holding a chunk that everyone else then waits for, so
 * longer spins buy nothing when other threads compete for the CPUs. */
enum { WORKER_SPIN_NS = 100 * 1000, CALLER_SPIN_NS = 100 * 1000 };
/* Then a worker naps until 50 ms after its last job, checking for a job
 * after naps of 20 us, 40 us, ... up to 1 ms: about 50 wakeups in all. A
 * job in that time waits up to a nap for the worker, with the caller
 * running chunks meanwhile, unless its caller rings (RT_PAR_WAKE: a job
 * long enough to pay for the wake), which ends the nap at once. The naps
 * grow because every wakeup preempts whatever else runs on that CPU. */
enum { WORKER_POLL_NS = 50 * 1000 * 1000, WORKER_NAP_NS = 20 * 1000 };
enum { WORKER_NAP_MAX_NS = 1000 * 1000 };

struct rt_pool {
    int nworkers;
    pthread_t *threads;
    void *stacks;           /* the workers' stacks, one mapping */
    size_t stacks_bytes;
    /* The current job, written by the caller before it publishes `job`
     * and left alone until every worker that joined it has finished. */
    rt_chunk_fn fn;
    void *ctx;
    int64_t nchunks;
    fj_origin origin;       /* the caller's frame in rt_parallel */
    int stitch;             /* run the workers' chunks under origin */
    /* Claimed chunks, on its own line: every claim writes it. */
    _Alignas(64) atomic_llong next;
    /* (generation << 16) | workers allowed to join: one word, so a worker
     * never pairs one job's generation with another's count. */
    _Alignas(64) _Atomic uint64_t job;
    atomic_int stop;
    atomic_int sleepers;    /* workers in (or about to enter) the wake wait */
    /* Bumped by every job: a napping worker waits on it (a futex) with its
     * nap as the timeout. nappers: workers in (or about to enter) a nap;
     * rung: naps a caller has cut short (a test hook). */
    _Atomic uint32_t bell;
    atomic_int nappers;
    atomic_long rung;
    atomic_int caller_cpu;  /* where the current job's caller runs, or -1 */
    /* (generation << 32) | OPEN | workers that joined: a worker joins with
     * one compare-and-swap while the job is open; the caller's close reads
     * how many did. */
    _Alignas(64) _Atomic uint64_t entry;
    atomic_int finished;              /* joined workers done with the job */
    atomic_int caller_waits;          /* the caller sleeps on `done` */
    _Alignas(64) pthread_mutex_t lock;
    pthread_cond_t wake, done;
};

#define ENTRY_OPEN (1ull << 31)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Called through fj_worker_run on workers (the second argument unused). */
static void run_chunks(void *pv, int64_t unused) {
    (void)unused;
    rt_pool *p = pv;
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

/* One nap of up to ns, cut short when a caller rings the bell. Either the
 * worker sees the job, or the caller sees the napper (seq_cst on both
 * sides), and a ring between the bell's load and the wait makes the wait
 * return at once. */
static void nap(rt_pool *p, uint64_t seen, long ns) {
    uint32_t b = atomic_load_explicit(&p->bell, memory_order_seq_cst);
    atomic_fetch_add_explicit(&p->nappers, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->job, memory_order_seq_cst) == seen &&
        !atomic_load_explicit(&p->stop, memory_order_seq_cst)) {
        struct timespec t = {0, ns};
        syscall(SYS_futex, &p->bell, FUTEX_WAIT_PRIVATE, b, &t, NULL, 0);
    }
    atomic_fetch_sub_explicit(&p->nappers, 1, memory_order_relaxed);
}

static void ring(rt_pool *p) {
    atomic_fetch_add_explicit(&p->bell, 1, memory_order_seq_cst);
    syscall(SYS_futex, &p->bell, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* wait_job past its spin: naps, then the condvar. */
static uint64_t wait_idle(rt_pool *p, uint64_t seen, uint64_t t0) {
    uint64_t j;
    for (long nap_ns = WORKER_NAP_NS;; nap_ns = nap_ns * 2 < WORKER_NAP_MAX_NS ? nap_ns * 2
                                                                            : WORKER_NAP_MAX_NS) {
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return 0;
        j = atomic_load_explicit(&p->job, memory_order_acquire);
        if (j != seen) return j;
        if (fj_now_ns() - t0 > WORKER_POLL_NS) break;
        nap(p, seen, nap_ns);
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
    for (;;) {
        if (atomic_load_explicit(&p->stop, memory_order_seq_cst)) {
            j = 0;
            break;
        }
        j = atomic_load_explicit(&p->job, memory_order_seq_cst);
        if (j != seen) break;
        pthread_cond_wait(&p->wake, &p->lock);
    }
    atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    pthread_mutex_unlock(&p->lock);
    return j;
}

/* The next job word after `seen`, or 0 when the pool stops. An idle
 * worker (past its spin) keeps off the CPU of the last job's caller until
 * it wakes: woken by that caller (a ring, the condvar), the kernel would
 * often put it on the caller's CPU, where it waits behind the caller's
 * chunks (see Placement: 1-2 ms, or until the job is over). */
static uint64_t wait_job(rt_pool *p, uint64_t seen) {
    uint64_t j;
    uint64_t t0 = fj_now_ns();
    for (unsigned spins = 1;; spins++) {
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return 0;
        j = atomic_load_explicit(&p->job, memory_order_acquire);
        if (j != seen) return j;
        cpu_relax();
        if (!(spins & 31) && fj_now_ns() - t0 > WORKER_SPIN_NS) break;
    }
    cpu_set_t own;
    int cc = atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
    int avoided = seen && rt_cpu_avoid(cc, &own);
    j = wait_idle(p, seen, t0);
    if (avoided) sched_setaffinity(0, sizeof own, &own);
    return j;
}

long rt_pool_test_rung(fj_runtime *rt) {
    pthread_mutex_lock(&rt->pool_lock);
    long n = rt->pool ? atomic_load(&rt->pool->rung) : -1;
    pthread_mutex_unlock(&rt->pool_lock);
    return n;
}

int rt_pool_test_sleepers(fj_runtime *rt) {
    pthread_mutex_lock(&rt->pool_lock);
    int n = rt->pool ? atomic_load(&rt->pool->sleepers) : -1;
    pthread_mutex_unlock(&rt->pool_lock);
    return n;
}

/* Joins job generation gen if it is still open: only then may the worker
 * read the job's fields, which the caller leaves alone until every joined
 * worker has finished. */
static int join(rt_pool *p, uint64_t gen) {
    uint64_t e = atomic_load_explicit(&p->entry, memory_order_acquire);
    while ((e >> 32) == (gen & 0xffffffffu) && (e & ENTRY_OPEN))
        if (atomic_compare_exchange_weak_explicit(&p->entry, &e, e + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return 1;
    return 0;
}

int rt_cpu_avoid(int cpu, cpu_set_t *saved) {
    cpu_set_t other;
    if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof *saved, saved) != 0 ||
        !CPU_ISSET(cpu, saved))
        return 0;
    other = *saved;
    CPU_CLR(cpu, &other);
    return CPU_COUNT(&other) && sched_setaffinity(0, sizeof other, &other) == 0;
}

int rt_cpu_leave(int cpu) {
    cpu_set_t mask;
    if (!rt_cpu_avoid(cpu, &mask)) return 0;
    /* Back to the thread's own mask: the kernel leaves it where it is now. */
    sched_setaffinity(0, sizeof mask, &mask);
    return 1;
}

enum { LEAVE_EVERY_NS = 1000 * 1000 };

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    fj_free(arg);
    rt_pool *p = wa.p;
    uint64_t seen = 0, left = 0;
    for (;;) {
        uint64_t j = wait_job(p, seen);
        if (!j) break;
        seen = j;
        if (wa.index >= (int)(j & 0xffff) || !join(p, j >> 16)) continue;
        /* On the caller's CPU (see Placement above): move off, at most
         * once a millisecond (a busy machine may keep putting it back). */
        int cc = atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
        if (cc >= 0 && sched_getcpu() == cc) {
            uint64_t now = fj_now_ns();
            if (now - left >= LEAVE_EVERY_NS) {
                left = now;
                rt_cpu_leave(cc);
            }
        }
        if (p->stitch) fj_worker_run(&p->origin, run_chunks, p, 0);
        else run_chunks(p, 0);
        atomic_fetch_add_explicit(&p->finished, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->caller_waits, memory_order_seq_cst)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
    return NULL;
}

/* Where the workers' stacks go: the first free slot the kernel grants
 * from 1 TiB up (each pool its own slot), else from 1 GiB up. 1 TiB is
 * below a position-independent executable, its heap, the shared
 * libraries, every mmap and the main thread's stack, and far above a fixed
 * executable's heap; 1 GiB is the low application range that the
 * sanitizers' shadow layouts leave free (they hold 1 TiB). Failing both, the
 * kernel's choice: frame-pointer walks still cross to the caller, only the
 * step is then not guaranteed to go up. */
static const uintptr_t stack_bases[] = {(uintptr_t)1 << 40, (uintptr_t)1 << 30};
enum { WORKER_STACK_BYTES = 4 << 20, STACK_SLOTS = 16 };

static void *map_stacks(size_t bytes) {
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK;
    size_t stride = (bytes + ((size_t)1 << 30) - 1) & ~(((size_t)1 << 30) - 1);
    for (size_t b = 0; b < sizeof stack_bases / sizeof stack_bases[0]; b++)
        for (size_t k = 0; k < STACK_SLOTS; k++) {
            void *want = (void *)(stack_bases[b] + k * stride);
            void *m = mmap(want, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
            if (m == want) return m;
            if (m != MAP_FAILED) munmap(m, bytes);
        }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

fj_status rt_pool_create(int workers, rt_pool **out) {
    rt_pool *p = fj_calloc(1, sizeof *p);
    if (workers > 0xffff) workers = 0xffff;
    if (!p || !(p->threads = fj_calloc((size_t)workers, sizeof(pthread_t)))) {
        fj_free(p);
        return fj_fail(FJ_ERR_NO_MEMORY, "thread pool: out of memory");
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    p->stacks_bytes = (size_t)workers * WORKER_STACK_BYTES;
    p->stacks = workers ? map_stacks(p->stacks_bytes) : NULL;
    if (workers && !p->stacks) {
        fj_free(p->threads);
        fj_free(p);
        return fj_fail(FJ_ERR_OS, "thread pool: cannot map %zu bytes of worker stacks",
                       (size_t)workers * WORKER_STACK_BYTES);
    }
    p->stitch = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    for (int i = 0; i < workers; i++) {
        /* Each stack's lowest page is its guard. */
        char *lo = (char *)p->stacks + (size_t)i * WORKER_STACK_BYTES;
        mprotect(lo, page, PROT_NONE);
        pthread_attr_setstack(&attr, lo + page, WORKER_STACK_BYTES - page);
        worker_arg *wa = fj_malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], &attr, worker_main, wa) != 0) {
            fj_free(wa);
            pthread_attr_destroy(&attr);
            p->nworkers = i;
            rt_pool_destroy(p);
            return fj_fail(FJ_ERR_OS, "thread pool: cannot start worker %d", i);
        }
        p->nworkers = i + 1;
        /* Named by the creator: the name is there when the pool is. */
        char name[16];
        snprintf(name, sizeof name, "fj-worker-%hu", (unsigned short)(i + 1));
        pthread_setname_np(p->threads[i], name);
    }
    pthread_attr_destroy(&attr);
    *out = p;
    return FJ_OK;
}

void rt_pool_forget(rt_pool *p) {
    if (!p) return;
    if (p->stacks) munmap(p->stacks, p->stacks_bytes);
    fj_free(p->threads);
    fj_free(p);
}

void rt_pool_destroy(rt_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    ring(p); /* nappers too: no need to wait out their naps */
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    if (p->stacks) munmap(p->stacks, p->stacks_bytes);
    fj_free(p->threads);
    fj_free(p);
}

int rt_threads(const fj_runtime *rt) { return rt->opts.threads; }

void rt_set_stitch(fj_runtime *rt, int on) { rt->no_stitch = !on; }

/* The embedder's pool runs the chunks (fj_options.parallel_for): each one
 * under the caller's origin, wherever it runs. */
typedef struct ext_job {
    rt_chunk_fn fn;
    void *ctx;
    int stitch;
    fj_origin origin;
} ext_job;

static void ext_body(void *arg, int64_t i) {
    const ext_job *j = arg;
    if (j->stitch) fj_worker_run(&j->origin, j->fn, j->ctx, i);
    else j->fn(j->ctx, i);
}

/* noinline: its frame is the one the workers' stitch records point at. */
__attribute__((noinline)) void rt_parallel(fj_runtime *rt, int64_t nchunks, int nthreads,
                                           rt_chunk_fn fn, void *ctx, unsigned flags) {
    if (nchunks <= 0) return;
    if (nthreads > rt->opts.threads) nthreads = rt->opts.threads;
    if (nthreads > nchunks) nthreads = (int)nchunks;
    if (nthreads > 1 && rt->opts.parallel_for) {
        ext_job j = {fn, ctx, !rt->no_stitch, {{0}}};
        rt_origin_capture(&j.origin);
        rt->opts.parallel_for(rt->opts.parallel_ctx, nchunks, ext_body, &j);
        __asm__ volatile("" ::: "memory"); /* no tail call: j lives in this frame */
        return;
    }
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
    int active = nthreads - 1;
    if (active > p->nworkers) active = p->nworkers;
    p->fn = fn;
    p->ctx = ctx;
    p->nchunks = nchunks;
    p->stitch = !rt->no_stitch;
    rt_origin_capture(&p->origin);
    atomic_store_explicit(&p->caller_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    /* Chunk 0 is the caller's before anyone can claim: spinning workers
     * could otherwise take every chunk of a small job, and the caller's
     * samples would not show the kernels under its own stack. */
    atomic_store_explicit(&p->next, 1, memory_order_relaxed);
    uint64_t j = atomic_load_explicit(&p->job, memory_order_relaxed);
    j = ((j >> 16) + 1) << 16 | (uint64_t)active;
    /* Opens the job (release: a worker that joins sees the fields above). */
    atomic_store_explicit(&p->entry, (j >> 16 & 0xffffffffu) << 32 | ENTRY_OPEN,
                          memory_order_release);
    /* Publishes the job, and orders against the sleepers check (seq_cst; a
     * worker going to sleep bumps sleepers before it re-reads job). */
    atomic_store_explicit(&p->job, j, memory_order_seq_cst);
    if ((flags & RT_PAR_WAKE) && atomic_load_explicit(&p->nappers, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&p->rung, 1, memory_order_relaxed);
        ring(p);
    }
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst)) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    fn(ctx, 0); /* the caller's share, from the caller's own frame */
    run_chunks(p, 0);
    /* Every chunk is claimed: close the job, then wait for the workers that
     * joined it (their chunks may still be running). */
    int joined = (int)(atomic_fetch_and_explicit(&p->entry, ~ENTRY_OPEN, memory_order_acq_rel) &
                       0xffff);
    uint64_t t0 = fj_now_ns();
    for (unsigned spins = 1; atomic_load_explicit(&p->finished, memory_order_acquire) < joined;
         spins++) {
        cpu_relax();
        if (!(spins & 31) && fj_now_ns() - t0 > CALLER_SPIN_NS) {
            pthread_mutex_lock(&p->lock);
            atomic_store_explicit(&p->caller_waits, 1, memory_order_seq_cst);
            while (atomic_load_explicit(&p->finished, memory_order_seq_cst) < joined)
                pthread_cond_wait(&p->done, &p->lock);
            atomic_store_explicit(&p->caller_waits, 0, memory_order_relaxed);
            pthread_mutex_unlock(&p->lock);
            break;
        }
    }
    pthread_mutex_unlock(&rt->pool_lock);
}
