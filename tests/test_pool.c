/* test_pool.c: Check suite for the runtime's thread pool (runtime/pool.c):
 * every chunk runs exactly once, the caller always runs a share, a worker
 * that comes late never holds the caller up, an idle worker naps (not in
 * the condvar) for a while before it sleeps, off the last caller's CPU,
 * a job that asks for it cuts the nap short, a thread moves off a CPU
 * when its mask allows, and workers are named fj-worker-N. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fjtest.h"
#include "runtime/pool.h"

enum { MAXC = 64 };

typedef struct job {
    atomic_int runs[MAXC];
    atomic_int on_caller, elsewhere;
    atomic_int full_mask;   /* chunks on a worker whose CPU mask was `all` */
    cpu_set_t all;
    pthread_t caller;
    int spin_ns;            /* each chunk busy-waits this long */
} job;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void spin(long ns) {
    long t0 = now_ns();
    while (now_ns() - t0 < ns) {}
}

static void chunk(void *ctx, int64_t i) {
    job *j = ctx;
    atomic_fetch_add(&j->runs[i], 1);
    int mine = pthread_equal(pthread_self(), j->caller);
    atomic_fetch_add(mine ? &j->on_caller : &j->elsewhere, 1);
    cpu_set_t m;
    if (!mine && sched_getaffinity(0, sizeof m, &m) == 0 && CPU_EQUAL(&m, &j->all))
        atomic_fetch_add(&j->full_mask, 1);
    if (j->spin_ns) spin(j->spin_ns);
}

static void run_flags(fj_runtime *rt, job *j, int64_t n, int threads, unsigned flags) {
    for (int i = 0; i < MAXC; i++) atomic_init(&j->runs[i], 0);
    atomic_init(&j->on_caller, 0);
    atomic_init(&j->elsewhere, 0);
    atomic_init(&j->full_mask, 0);
    j->caller = pthread_self();
    rt_parallel(rt, n, threads, chunk, j, flags);
    int wrong = 0;
    for (int64_t i = 0; i < MAXC; i++) wrong += atomic_load(&j->runs[i]) != (i < n);
    ck_assert_msg(wrong == 0, "%lld chunks on %d threads: %d ran other than once", (long long)n,
                  threads, wrong);
}

static void run(fj_runtime *rt, job *j, int64_t n, int threads) { run_flags(rt, j, n, threads, 0); }

/* Whether a worker ran a chunk of any of up to `tries` jobs of 16 chunks,
 * each after a pause of pause_us. */
static int worker_helps(fj_runtime *rt, job *j, int tries, int pause_us) {
    for (int rep = 0; rep < tries; rep++) {
        if (pause_us) usleep((useconds_t)pause_us);
        run(rt, j, 16, 2);
        if (atomic_load(&j->elsewhere) > 0) return 1;
    }
    return 0;
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

/* Holding workers back from outside the pool (the pool has no test hook
 * on its hot path): a signal whose handler waits until released stops a
 * worker wherever it is between jobs, as a vCPU that is slow to wake
 * would. Workers are found by name (fj-worker-N). */
static atomic_int hold_on, held;

static void hold_handler(int sig) {
    (void)sig;
    atomic_fetch_add(&held, 1);
    struct timespec t = {0, 100000};
    while (atomic_load(&hold_on)) nanosleep(&t, NULL);
    atomic_fetch_sub(&held, 1);
}

/* Thread ids of the process's threads named prefix*, up to max. */
static int tids_named(const char *prefix, pid_t *out, int max) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f) && !strncmp(comm, prefix, strlen(prefix)))
            out[n++] = (pid_t)atoi(e->d_name);
        fclose(f);
    }
    closedir(d);
    return n;
}

static void hold_workers(int on) {
    if (!on) {
        atomic_store(&hold_on, 0);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hold_handler;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    pid_t tids[64];
    int n = tids_named("fj-worker-", tids, 64);
    ck_assert_int_gt(n, 0);
    atomic_store(&hold_on, 1);
    for (int i = 0; i < n; i++) syscall(SYS_tgkill, getpid(), tids[i], SIGUSR1);
    for (int ms = 0; ms < 10000 && atomic_load(&held) < n; ms++) usleep(1000);
    ck_assert_int_eq(atomic_load(&held), n);
}

START_TEST(workers_named) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 3);
    job j = {.spin_ns = 0};
    run(rt, &j, 8, 3);
    pid_t tids[8];
    ck_assert_int_eq(tids_named("fj-worker-", tids, 8), 2);
    ck_assert_int_eq(tids_named("fj-worker-1\n", tids, 8), 1);
    ck_assert_int_eq(tids_named("fj-worker-2\n", tids, 8), 1);
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
    hold_workers(1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, late_caller, c), 0);
    for (int ms = 0; ms < 10000 && !atomic_load(&c->done); ms++) usleep(1000);
    int done = atomic_load(&c->done);
    hold_workers(0); /* lets a stalled caller finish, so the test ends */
    pthread_join(t, NULL);
    ck_assert_msg(done, "20 jobs with the worker held back did not finish in 10 s");
    /* All of the last job ran on the caller. */
    ck_assert_int_eq(atomic_load(&c->j.elsewhere), 0);
    free(c);
    /* Released, the worker takes part again: with chunks of 0.2 ms it
     * joins well before the caller could run them all. */
    j.spin_ns = 200000;
    ck_assert_msg(worker_helps(rt, &j, 200, 0),
                  "the worker never ran a chunk after it was released");
    fj_runtime_destroy(rt);
}
END_TEST

/* Between jobs a worker spins, then naps on its own timer (a job in that
 * window needs no wake, and the kernel does not place the worker on the
 * caller's CPU, see pool.c), and only ~50 ms after its last job sleeps on
 * the condvar. */
START_TEST(idle_worker_naps_then_sleeps) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 2);
    job j = {.spin_ns = 200000};
    /* Checked only when the check came well inside the 50 ms (a loaded
     * machine may hold this thread up longer). */
    int checked = 0;
    for (int rep = 0; rep < 50 && checked < 3; rep++) {
        run(rt, &j, 16, 2);
        long t0 = now_ns();
        usleep(5000);
        int sleepers = rt_pool_test_sleepers(rt);
        if (now_ns() - t0 > 30000000L) continue;
        ck_assert_int_eq(sleepers, 0);
        checked++;
    }
    ck_assert_int_eq(checked, 3);
    /* A job in the napping window: the worker takes part unwoken. */
    ck_assert_msg(worker_helps(rt, &j, 50, 5000), "the napping worker never joined a job");
    int slept = 0;
    for (int ms = 0; ms < 5000 && !slept; ms += 10) {
        usleep(10000);
        slept = rt_pool_test_sleepers(rt) == 1;
    }
    ck_assert_msg(slept, "the idle worker never went to sleep on the condvar");
    /* And a sleeping worker is woken for the next job. */
    ck_assert_msg(worker_helps(rt, &j, 50, 0), "the worker never joined after sleeping");
    fj_runtime_destroy(rt);
}
END_TEST

/* A job with RT_PAR_WAKE that comes while the worker naps cuts the nap
 * short (counted by the pool); one without it leaves the worker to wake
 * at its nap's end. Checked only where the pause came well inside the
 * napping window (a loaded machine may hold this thread up longer), so
 * up to 200 pauses: under a parallel test run most can be discarded. */
START_TEST(wake_job_rings_napper) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 2);
    job j = {.spin_ns = 100000};
    run(rt, &j, 16, 2);
    int rang = 0, checked = 0;
    for (int rep = 0; rep < 200 && (rang < 3 || checked < 3); rep++) {
        long t0 = now_ns();
        usleep(5000);
        long before = rt_pool_test_rung(rt);
        int wake = rep % 2;
        run_flags(rt, &j, 16, 2, wake ? RT_PAR_WAKE : 0);
        long after = rt_pool_test_rung(rt);
        if (now_ns() - t0 > 30000000L) continue;
        if (!wake) {
            ck_assert_msg(after == before, "a job without RT_PAR_WAKE rang the bell");
            checked++;
        } else {
            rang += after == before + 1;
        }
    }
    ck_assert_int_ge(checked, 3);
    /* A ring can lose its race with a nap's end (the worker sees the job
     * itself), not most of the time. */
    ck_assert_msg(rang >= 3, "RT_PAR_WAKE jobs rang a napping worker %d times", rang);
    fj_runtime_destroy(rt);
}
END_TEST

/* An idle worker leaves its caller's CPU out of its mask (so that the
 * caller's wake does not put it there), and has its own mask back
 * whenever it runs a chunk. */
START_TEST(idle_worker_avoids_caller_cpu) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AVX2, 2);
    job j = {.spin_ns = 100000};
    ck_assert_int_eq(sched_getaffinity(0, sizeof j.all, &j.all), 0);
    if (CPU_COUNT(&j.all) < 2) {
        fj_runtime_destroy(rt);
        printf("idle_worker_avoids_caller_cpu: one CPU allowed, nothing to avoid\n");
        return;
    }
    run(rt, &j, 16, 2); /* the pool starts with this thread's whole mask */
    pid_t w;
    ck_assert_int_eq(tids_named("fj-worker-1\n", &w, 1), 1);
    int c = -1;
    for (int i = 0; i < CPU_SETSIZE && c < 0; i++)
        if (CPU_ISSET(i, &j.all)) c = i;
    cpu_set_t one, now, want = j.all;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    CPU_CLR(c, &want);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    int avoided = 0, full = 0;
    for (int rep = 0; rep < 40 && (avoided < 3 || full < 3); rep++) {
        run_flags(rt, &j, 16, 2, RT_PAR_WAKE);
        int fm = atomic_load(&j.full_mask), el = atomic_load(&j.elsewhere);
        ck_assert_msg(fm == el, "%d of %d chunks on the worker ran under a narrowed mask",
                      el - fm, el);
        full += el > 0;
        usleep(5000);
        ck_assert_int_eq(sched_getaffinity(w, sizeof now, &now), 0);
        avoided += CPU_EQUAL(&now, &want);
    }
    ck_assert_int_eq(sched_setaffinity(0, sizeof j.all, &j.all), 0);
    ck_assert_msg(avoided >= 3, "the idle worker left CPU %d out of its mask %d times", c, avoided);
    ck_assert_msg(full >= 3, "the worker ran chunks in %d jobs", full);
    fj_runtime_destroy(rt);
}
END_TEST

static void *leave_thread(void *arg) {
    (void)arg;
    cpu_set_t all, one, now;
    ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
    int c = -1;
    for (int i = 0; i < CPU_SETSIZE && c < 0; i++)
        if (CPU_ISSET(i, &all)) c = i;
    ck_assert_int_ge(c, 0);
    /* On c alone: nowhere to go, the mask stays as it is. */
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(sched_getcpu(), c);
    ck_assert_int_eq(rt_cpu_leave(c), 0);
    ck_assert_int_eq(sched_getaffinity(0, sizeof now, &now), 0);
    ck_assert(CPU_EQUAL(&now, &one));
    ck_assert_int_eq(sched_getcpu(), c);
    ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2) {
        printf("cpu_leave: one CPU allowed, only the no-move case checked\n");
        return NULL;
    }
    /* On c with a wider mask: it moves, and keeps its mask. */
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
    ck_assert_int_eq(rt_cpu_leave(c), 1);
    int at = sched_getcpu();
    ck_assert_int_eq(sched_getaffinity(0, sizeof now, &now), 0);
    ck_assert(CPU_EQUAL(&now, &all));
    ck_assert_msg(at != c && CPU_ISSET(at, &all), "on CPU %d after leaving CPU %d", at, c);
    return NULL;
}

START_TEST(cpu_leave) {
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, leave_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(rt_cpu_leave(-1), 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_chunk_once);
    tcase_add_test(tc, workers_named);
    tcase_add_test(tc, late_worker_does_not_stall);
    tcase_add_test(tc, idle_worker_naps_then_sleeps);
    tcase_add_test(tc, wake_job_rings_napper);
    tcase_add_test(tc, idle_worker_avoids_caller_cpu);
    tcase_add_test(tc, cpu_leave);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
