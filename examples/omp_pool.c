/* omp_pool.c: an embedder's own threads running framejit kernels, with
 * every sample attributed to the function that handed out the work.
 *
 *     omp_pool [omp|pthread|ompfor] [THREADS] [SECONDS]     (default omp 2 3)
 *     omp_pool signal [THREADS]
 *
 * main -> outer -> inner, and inner captures its place in the stack with
 * fj_origin_capture, then runs a GEMM slice and a relu per thread, on
 * THREADS threads of an OpenMP parallel region (omp) or of a plain pthread
 * pool (pthread), each through fj_origin_run. Profile it with
 *
 *     perf record -g -- ./omp_pool omp 4 2 && perf report --no-children
 *
 * and the samples in the kernels on every thread read kernel -> work ->
 * fj_origin_run -> inner -> outer -> main: the stitch skips libgomp's frames
 * (GOMP_parallel keeps data in rbp, which otherwise ends every walk on the
 * master thread) and the workers' thread starts.
 *
 * `ompfor` hands framejit's own parallel work to OpenMP instead: the
 * runtime gets fj_options.parallel_for (an OpenMP parallel for) and
 * THREADS threads, and inner calls the kernels itself; framejit runs each
 * chunk stitched to its own frame in that call, so the OpenMP threads'
 * samples read kernel -> ... -> fj_worker_run -> fj_gemm_f32 ... -> inner.
 *
 * `signal` interrupts the OpenMP worker threads while they run kernels
 * under fj_origin_run and walks their stacks from a signal handler with
 * glibc backtrace(), libgcc's _Unwind_Backtrace and libunwind's
 * unw_backtrace (both unwinders reached with dlopen): each must end at the
 * thread's start on its own stack (no inner, outer or main: DWARF
 * unwinders never follow the stitch into another thread's frames). It
 * prints one "signal:" line per check and exits non-zero on a failure.
 *
 * framejit's runtime has one thread here: the parallelism is the
 * embedder's. At the end it prints, like callchain, the pid on stdout and
 * the kernels' address ranges on stderr (for the tool tests). */
#include <framejit.h>

#include <dlfcn.h>
#include <execinfo.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

enum { MAXT = 64, N = 192, RELU_N = 64 * 1024 };

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One thread's share of a round: its own matrices and array. */
typedef struct share {
    fj_runtime *rt;
    float *a, *b, *c, *x;
    fj_status s;
    pid_t tid;
} share;

static void work(void *arg) {
    share *w = arg;
    w->tid = (pid_t)syscall(SYS_gettid);
    fj_status s = fj_gemm_f32(w->rt, 'N', 'N', N, N, N, 1.0f, w->a, N, w->b, N, 0.0f, w->c, N);
    if (s == FJ_OK) s = fj_eltwise_f32(w->rt, FJ_ELT_RELU, 0.0f, 0.0f, w->x, w->x, RELU_N);
    if (s != FJ_OK) w->s = s;
    __asm__ volatile("" ::: "memory");
}

/* ---- a plain pthread pool: the caller and THREADS - 1 workers ---------- */

typedef struct ppool {
    int nthreads;
    pthread_t threads[MAXT];
    pthread_barrier_t start, end;
    const fj_origin *origin;    /* the current round's */
    share *shares;
    atomic_int stop;
} ppool;

typedef struct pworker {
    ppool *p;
    int index;
} pworker;

static void *pool_worker(void *arg) {
    pworker *pw = arg;
    ppool *p = pw->p;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (atomic_load(&p->stop)) break;
        fj_origin_run(p->origin, work, &p->shares[pw->index]);
        pthread_barrier_wait(&p->end);
    }
    return NULL;
}

/* ---- the program: main -> outer -> inner ---------------------------- */

typedef enum mode { M_OMP, M_PTHREAD, M_OMPFOR } mode;

/* fj_options.parallel_for on OpenMP: every chunk once, any thread. */
static void omp_parallel_for(void *ctx, int64_t n, fj_parallel_body body, void *arg) {
    int threads = *(const int *)ctx;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < n; i++) body(arg, i);
}

/* Rounds until `seconds` have passed; each round's work is handed out
 * from here, under this frame's origin. */
/* External (and the program linked with -rdynamic): the signal check
 * names frames with dladdr. */
long inner(mode m, int threads, share *sh, ppool *pp, double seconds);
long outer(mode m, int threads, share *sh, ppool *pp, double seconds);

__attribute__((noinline, noclone)) long inner(mode m, int threads, share *sh, ppool *pp,
                                                     double seconds) {
    fj_origin o;
    fj_origin_capture(&o);
    long rounds = 0;
    double end = now_sec() + seconds;
    do {
        if (m == M_OMPFOR) {
            work(&sh[0]); /* framejit splits it over OpenMP itself */
        } else if (m == M_OMP) {
#pragma omp parallel num_threads(threads)
            {
                fj_origin_run(&o, work, &sh[omp_get_thread_num()]);
                __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
            }
        } else {
            pp->origin = &o;
            pthread_barrier_wait(&pp->start);
            fj_origin_run(&o, work, &sh[0]);
            pthread_barrier_wait(&pp->end);
        }
        rounds++;
    } while (now_sec() < end);
    __asm__ volatile("" ::: "memory");
    return rounds;
}

__attribute__((noinline, noclone)) long outer(mode m, int threads, share *sh, ppool *pp,
                                                     double seconds) {
    long rounds = inner(m, threads, sh, pp, seconds);
    __asm__ volatile("" ::: "memory");
    return rounds;
}

/* Prints each framejit kernel's range in the JIT mappings (as callchain). */
static void print_kernels(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8] = {0}, path[768] = {0};
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %767[^\n]", &lo, &hi, perms, path) < 3)
            continue;
        if (perms[2] != 'x') continue;
        if (!(path[0] == 0 || !strncmp(path, "/dev/shm/", 9) || !strncmp(path, "/memfd:", 7)))
            continue;
        if (hi - lo > ((unsigned long)256 << 20)) hi = lo + ((unsigned long)256 << 20);
        for (uintptr_t p = lo; p < hi;) {
            uintptr_t off;
            const char *name = fj_symbolize((const void *)p, &off);
            if (!name) {
                p += 16;
                continue;
            }
            uintptr_t start = p - off, e = p;
            while (e < hi && fj_symbolize((const void *)e, NULL) == name) e++;
            fprintf(stderr, "callchain: kernel 0x%lx-0x%lx %s\n", (unsigned long)start,
                    (unsigned long)e, name);
            p = e;
        }
    }
    fclose(f);
}

/* ---- signal: DWARF walks from a handler on an OpenMP worker ------------ */

enum { SIG_FRAMES = 128 };
static struct {
    atomic_int busy;            /* a handler is walking */
    void *bt[SIG_FRAMES];       /* backtrace() */
    int nbt;
    void *gcc[SIG_FRAMES];      /* _Unwind_Backtrace */
    int ngcc;
    void *lu[SIG_FRAMES];       /* unw_backtrace */
    int nlu;
} sig;
static int (*lu_backtrace)(void **, int);
static _Unwind_Reason_Code (*gcc_backtrace)(_Unwind_Trace_Fn, void *);
static _Unwind_Ptr (*gcc_get_ip)(struct _Unwind_Context *);

static _Unwind_Reason_Code gcc_step(struct _Unwind_Context *ctx, void *arg) {
    (void)arg;
    if (sig.ngcc >= SIG_FRAMES) return _URC_END_OF_STACK;
    sig.gcc[sig.ngcc++] = (void *)gcc_get_ip(ctx);
    return _URC_NO_REASON;
}

static void on_signal(int s) {
    (void)s;
    sig.nbt = backtrace(sig.bt, SIG_FRAMES);
    sig.ngcc = 0;
    gcc_backtrace(gcc_step, NULL);
    sig.nlu = lu_backtrace(sig.lu, SIG_FRAMES);
    atomic_store(&sig.busy, 0);
}

/* One walk: it must end in libc's thread start (clone3, not exported, so
 * known by its library) and pass none of the frames of the thread that
 * handed out the work (inner, outer, spin_rounds, main). */
static int fails_shown;

static int check_walk(const char *who, void **ips, int n, int *in_origin_run) {
    int start = 0, foreign = 0;
    while (n > 1 && !ips[n - 1]) n--; /* libgcc's end mark, as backtrace() drops it */
    for (int i = 0; i < n; i++) {
        Dl_info di;
        int found = dladdr(ips[i], &di);
        const char *name = found && di.dli_sname ? di.dli_sname : "?";
        if (i == n - 1) start = found && di.dli_fname && strstr(di.dli_fname, "libc.so");
        if (!strcmp(name, "main") || !strcmp(name, "inner") || !strcmp(name, "outer") ||
            !strcmp(name, "spin_rounds"))
            foreign = 1;
        if (!strcmp(name, "fj_origin_run")) *in_origin_run = 1;
    }
    if ((!start || foreign) && fails_shown++ < 5) {
        printf("signal: FAIL: %s: %d frames, %s%s\n", who, n,
               start ? "" : "no thread start ", foreign ? "reached the main thread's frames" : "");
    }
    return start && !foreign;
}

static int sig_threads;

void *spin_rounds(void *arg);
void *spin_rounds(void *arg) {
    outer(M_OMP, sig_threads, arg, NULL, 3.0);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

static int run_signal(int threads, share *sh) {
    void *lg = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lg) return printf("signal: FAIL: dlopen libgcc_s: %s\n", dlerror()), 1;
    *(void **)&gcc_backtrace = dlsym(lg, "_Unwind_Backtrace");
    *(void **)&gcc_get_ip = dlsym(lg, "_Unwind_GetIP");
    void *warm[4];
    void *lu = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!lu) return printf("signal: FAIL: dlopen libunwind: %s\n", dlerror()), 1;
    *(void **)&lu_backtrace = dlsym(lu, "unw_backtrace");
    if (!gcc_backtrace || !gcc_get_ip || !lu_backtrace)
        return printf("signal: FAIL: dlsym: %s\n", dlerror()), 1;
    lu_backtrace(warm, 4);
    backtrace(warm, 4); /* loads libgcc_s for backtrace() outside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    /* The rounds run on a thread of their own (its OpenMP team's workers
     * are the targets), so this thread is free to send signals. */
    sig_threads = threads;
    pthread_t t;
    pthread_create(&t, NULL, spin_rounds, sh);
    usleep(300000);
    int ok = 1, walks = 0, under_run = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 1; i < threads; i++) {
            pid_t tid = sh[i].tid;
            if (!tid) continue;
            atomic_store(&sig.busy, 1);
            if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) != 0) continue;
            for (int w = 0; w < 100000 && atomic_load(&sig.busy); w++) usleep(10);
            if (atomic_load(&sig.busy)) continue;
            int r1 = 0, r2 = 0, r3 = 0;
            ok &= check_walk("backtrace()", sig.bt, sig.nbt, &r1);
            ok &= check_walk("_Unwind_Backtrace", sig.gcc, sig.ngcc, &r2);
            ok &= check_walk("unw_backtrace", sig.lu, sig.nlu, &r3);
            walks++;
            under_run += r1 && r2 && r3;
        }
        usleep(2000);
    }
    pthread_join(t, NULL);
    printf("signal: %d walks on OpenMP workers, %d of them from inside fj_origin_run\n", walks,
           under_run);
    if (!walks || !under_run) {
        printf("signal: FAIL: no walk from inside fj_origin_run\n");
        ok = 0;
    }
    if (ok) printf("signal: every walk ended at its thread's start\n");
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *ms = argc > 1 ? argv[1] : "omp";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    double seconds = argc > 3 ? atof(argv[3]) : 3.0;
    int is_signal = !strcmp(ms, "signal");
    mode m = !strcmp(ms, "pthread") ? M_PTHREAD : !strcmp(ms, "ompfor") ? M_OMPFOR : M_OMP;
    if ((!is_signal && strcmp(ms, "omp") && strcmp(ms, "pthread") && strcmp(ms, "ompfor")) ||
        threads < 1 ||
        threads > MAXT || seconds <= 0 || (is_signal && threads < 2)) {
        fprintf(stderr, "usage: %s [omp|pthread|ompfor] [THREADS] [SECONDS] | signal [THREADS >= 2]\n",
                argv[0]);
        return 2;
    }
    fj_options opts;
    fj_options_init(&opts);
    opts.threads = 1; /* the embedder's threads are the parallelism */
    if (m == M_OMPFOR) {
        opts.threads = threads; /* framejit's split, run by OpenMP */
        opts.parallel_for = omp_parallel_for;
        opts.parallel_ctx = &threads;
    }
    fj_runtime *rt;
    fj_status s = fj_runtime_create(&opts, &rt);
    if (s != FJ_OK) {
        fprintf(stderr, "omp_pool: fj_runtime_create: %s: %s\n", fj_status_str(s), fj_last_error());
        return 1;
    }
    share sh[MAXT];
    memset(sh, 0, sizeof sh);
    for (int t = 0; t < threads; t++) {
        sh[t].rt = rt;
        sh[t].a = malloc(N * N * sizeof(float));
        sh[t].b = malloc(N * N * sizeof(float));
        sh[t].c = malloc(N * N * sizeof(float));
        sh[t].x = malloc(RELU_N * sizeof(float));
        if (!sh[t].a || !sh[t].b || !sh[t].c || !sh[t].x) return 1;
        for (int i = 0; i < N * N; i++) {
            sh[t].a[i] = (float)(i % 7) * 0.25f;
            sh[t].b[i] = (float)((i + t) % 5) * 0.5f;
        }
        for (int i = 0; i < RELU_N; i++) sh[t].x[i] = (float)((i % 11) - 5);
    }
    if (is_signal) {
        int rc = run_signal(threads, sh);
        fj_runtime_destroy(rt);
        return rc;
    }

    ppool *pp = NULL;
    pworker pw[MAXT];
    if (m == M_PTHREAD) {
        pp = calloc(1, sizeof *pp);
        if (!pp) return 1;
        pp->nthreads = threads;
        pp->shares = sh;
        pthread_barrier_init(&pp->start, NULL, (unsigned)threads);
        pthread_barrier_init(&pp->end, NULL, (unsigned)threads);
        for (int t = 1; t < threads; t++) {
            pw[t] = (pworker){pp, t};
            pthread_create(&pp->threads[t], NULL, pool_worker, &pw[t]);
        }
    }
    double t0 = now_sec();
    long rounds = outer(m, threads, sh, pp, seconds);
    double dt = now_sec() - t0;
    __asm__ volatile("" ::: "memory");
    if (pp) {
        atomic_store(&pp->stop, 1);
        pthread_barrier_wait(&pp->start);
        for (int t = 1; t < threads; t++) pthread_join(pp->threads[t], NULL);
        free(pp);
    }
    int rc = 0;
    for (int t = 0; t < threads; t++)
        if (sh[t].s != FJ_OK) {
            fprintf(stderr, "omp_pool: thread %d: %s: %s\n", t, fj_status_str(sh[t].s),
                    fj_last_error());
            rc = 1;
        }
    printf("callchain: pid %ld: %ld rounds on %d %s threads in %.2f s\n", (long)getpid(), rounds,
           threads, m == M_PTHREAD ? "pthread" : "OpenMP", dt);
    fflush(stdout);
    print_kernels();
    for (int t = 0; t < threads; t++) {
        free(sh[t].a);
        free(sh[t].b);
        free(sh[t].c);
        free(sh[t].x);
    }
    fj_runtime_destroy(rt);
    return rc;
}
