/* test_pool.c: Check suite for the runtime's thread pool (runtime/pool.c):
 * every chunk runs exactly once, the caller always runs a share, and a
 * worker that comes late never holds the caller up. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fjtest.h"
#include "runtime/pool.h"

enum { MAXC = 64 };

typedef struct job {
    atomic_int runs[MAXC];
    atomic_int on_caller, elsewhere;
    pthread_t caller;
    int spin_ns;            /* each chunk busy-waits this long */
} job;

static void spin(long ns) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

static void chunk(void *ctx, int64_t i) {
    job *j = ctx;
    atomic_fetch_add(&j->runs[i], 1);
    atomic_fetch_add(pthread_equal(pthread_self(), j->caller) ? &j->on_caller : &j->elsewhere, 1);
    if (j->spin_ns) spin(j->spin_ns);
}

static void run(fj_runtime *rt, job *j, int64_t n, int threads) {
    for (int i = 0; i < MAXC; i++) atomic_init(&j->runs[i], 0);
    atomic_init(&j->on_caller, 0);
    atomic_init(&j->elsewhere, 0);
    j->caller = pthread_self();
    rt_parallel(rt, n, threads, chunk, j);
    int wrong = 0;
    for (int64_t i = 0; i < MAXC; i++) wrong += atomic_load(&j->runs[i]) != (i < n);
    ck_assert_msg(wrong == 0, "%lld chunks on %d threads: %d ran other than once", (long long)n,
                  threads, wrong);
}

START_TEST(every_chunk_once) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 3);
    job j = {.spin_ns = 0};
    for (int rep = 0; rep < 2000; rep++) {
        int64_t n = rep % MAXC;
        int threads = 1 + rep % 3;
        run(rt, &j, n, threads);
        /* The caller always runs a share when there is one. */
        ck_assert_msg(!n || atomic_load(&j.on_caller) >= 1,
                      "%lld chunks on %d threads: none ran on the caller", (long long)n, threads);
    }
    fj_runtime_destroy(rt);
}
END_TEST

/* With the workers held back (as if their vCPU took milliseconds to wake),
 * the caller runs every chunk and returns: it must not wait for a worker
 * that never joined. Before the join protocol it waited until the worker
 * came, here forever. */
typedef struct late_ctx {
    fj_runtime *rt;
    job j;
    atomic_int done;
} late_ctx;

static void *late_caller(void *arg) {
    late_ctx *c = arg;
    for (int i = 0; i < 20; i++) run(c->rt, &c->j, 8, 2);
    atomic_store(&c->done, 1);
    return NULL;
}

START_TEST(late_worker_does_not_stall) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 2);
    job j = {.spin_ns = 0};
    run(rt, &j, 8, 2); /* the pool exists, its worker waits for jobs */
    late_ctx *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->rt = rt;
    rt_pool_test_hold(1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, late_caller, c), 0);
    for (int ms = 0; ms < 10000 && !atomic_load(&c->done); ms++) usleep(1000);
    int done = atomic_load(&c->done);
    rt_pool_test_hold(0); /* lets a stalled caller finish, so the test ends */
    pthread_join(t, NULL);
    ck_assert_msg(done, "20 jobs with the worker held back did not finish in 10 s");
    /* All of the last job ran on the caller. */
    ck_assert_int_eq(atomic_load(&c->j.elsewhere), 0);
    free(c);
    /* Released, the worker takes part again: with chunks of 0.2 ms it
     * joins well before the caller could run them all. */
    j.spin_ns = 200000;
    int helped = 0;
    for (int rep = 0; rep < 200 && !helped; rep++) {
        run(rt, &j, 16, 2);
        helped = atomic_load(&j.elsewhere) > 0;
    }
    ck_assert_msg(helped, "the worker never ran a chunk after it was released");
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_chunk_once);
    tcase_add_test(tc, late_worker_does_not_stall);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
