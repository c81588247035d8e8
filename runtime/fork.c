/* fork.c: a forked child can go on using framejit.
 *
 * fork copies one thread. Whatever lock another thread held at that
 * moment stays held in the child forever, and the pool's workers are not
 * there to take jobs: without these handlers a child's first parallel
 * call waited for workers that did not exist. So before fork every lock
 * of every layer is taken, outermost first (the order the code nests them:
 * a runtime's pool, placement, code cache, kernel table and kernel-list
 * locks, then the process-wide ones of the image writer, the code cache
 * and the unwind back-ends); the parent releases them, and the child,
 * alone now, makes them anew, drops the inherited pools (the next
 * parallel call starts its own) and forgets kernels that another thread
 * was generating. What needs no handler: the code cache sends the child's
 * new kernels to arenas and files of its own (cc_self_pid), since the
 * inherited arenas are shared with the parent, which never rewrites a
 * placed kernel's bytes.
 *
 * Left as it is: references that other threads' GEMM memos held stay
 * counted in the child (each keeps a kernel's arena from eviction), and a
 * child made by a raw clone without fork's handlers must not use the
 * library. */
#include "runtime/rt.h"

#include "runtime/publish.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"

static void runtime_locks(fj_runtime *rt, int phase) {
    pthread_mutex_t *order[] = {&rt->pool_lock, &rt->place_lock, NULL, &rt->kc_lock, &rt->lock};
    int n = (int)(sizeof order / sizeof order[0]);
    for (int i = 0; i < n; i++) {
        /* Taken outermost first, released innermost first. */
        int j = phase == FJ_FORK_PREPARE ? i : n - 1 - i;
        if (order[j]) fj_fork_mutex(order[j], phase);
        else cc_fork(rt->cache, phase);
    }
}

static void prepare(void) {
    rt_live_fork(FJ_FORK_PREPARE);
    for (fj_runtime *rt = rt_live_first(); rt; rt = rt->live_next)
        runtime_locks(rt, FJ_FORK_PREPARE);
    rt_image_fork(FJ_FORK_PREPARE);
    cc_fork_global(FJ_FORK_PREPARE);
    uw_fork(FJ_FORK_PREPARE);
}

static void parent(void) {
    uw_fork(FJ_FORK_PARENT);
    cc_fork_global(FJ_FORK_PARENT);
    rt_image_fork(FJ_FORK_PARENT);
    for (fj_runtime *rt = rt_live_first(); rt; rt = rt->live_next)
        runtime_locks(rt, FJ_FORK_PARENT);
    rt_live_fork(FJ_FORK_PARENT);
}

static void child(void) {
    uw_fork(FJ_FORK_CHILD);
    cc_fork_global(FJ_FORK_CHILD);
    rt_image_fork(FJ_FORK_CHILD);
    for (fj_runtime *rt = rt_live_first(); rt; rt = rt->live_next) {
        runtime_locks(rt, FJ_FORK_CHILD);
        /* Waiters on it were other threads: gone. */
        pthread_cond_init(&rt->kc_cond, NULL);
        rt_kcache_fork_child(rt);
        rt_pool_forget(rt->pool);
        rt->pool = NULL;
    }
    rt_live_fork(FJ_FORK_CHILD);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void install(void) {
    if (pthread_atfork(prepare, parent, child) != 0)
        fj_log(1, "runtime: pthread_atfork failed: a forked child may not use framejit");
}

void rt_fork_init(void) { pthread_once(&once, install); }
