/* framejit-bench: speed of framejit kernels, side by side with references
 * in the same run (interleaved repetitions, medians, ratios). A human
 * table on stdout; --json FILE writes every row too. */
#include "bench.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double bench_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int bench_shape_listed(const char *list, int m, int n, int k) {
    char want[48], cube[16];
    snprintf(want, sizeof want, "%dx%dx%d", m, n, k);
    snprintf(cube, sizeof cube, "%d", m);
    int is_cube = m == n && n == k;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if ((len == strlen(want) && !strncmp(p, want, len)) ||
            (is_cube && len == strlen(cube) && !strncmp(p, cube, len)))
            return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int bench_threads_listed(int threads) {
    const char *e = getenv("FJ_BENCH_GEMM_THREADS");
    return !e || !*e || atoi(e) == threads;
}

void bench_omp_threads(int threads) {
    static void (*set)(int);
    static int looked;
    if (!looked) {
        looked = 1;
        set = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    }
    if (set) set(threads);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_warm_ns(void (*call)(fj_runtime *rt, void *ctx), fj_runtime *rt, void *ctx,
                   double *wall_ns, double *cpu_ns) {
    double w[BENCH_WARM_CALLS], c[BENCH_WARM_CALLS];
    for (int i = 0; i < BENCH_WARM_CALLS; i++) {
        double t0 = bench_now_ns(), c0 = bench_cpu_ns();
        call(rt, ctx);
        w[i] = bench_now_ns() - t0;
        c[i] = bench_cpu_ns() - c0;
    }
    *wall_ns = bench_median(w, BENCH_WARM_CALLS);
    *cpu_ns = bench_median(c, BENCH_WARM_CALLS);
}

int bench_gen_fresh(const bench_ctx *c, void (*call)(fj_runtime *rt, void *ctx), void *ctx,
                    double *wall_us, double *cpu_us) {
    static float src[1024], dst[1024];
    double v[64], vc[64];
    const int reps = bench_gen_reps(c) < 64 ? bench_gen_reps(c) : 64;
    int n = 0;
    for (int rep = 0; rep < reps; rep++) {
        fj_options o;
        fj_options_init(&o);
        o.threads = 1;
        fj_runtime *rt;
        if (fj_runtime_create(&o, &rt) != FJ_OK) break;
        fj_eltwise_f32(rt, FJ_ELT_ABS, 0, 0, src, dst, 1024); /* the runtime's own first use */
        double t0 = bench_now_ns(), c0 = bench_cpu_ns();
        call(rt, ctx);
        double t1 = bench_now_ns(), c1 = bench_cpu_ns(), ww, wc;
        bench_warm_ns(call, rt, ctx, &ww, &wc);
        v[n] = ((t1 - t0) - ww) / 1e3;
        vc[n++] = ((c1 - c0) - wc) / 1e3;
        fj_runtime_destroy(rt);
    }
    if (n) {
        *wall_us = bench_median(v, n);
        *cpu_us = bench_median(vc, n);
    }
    return n;
}

static FILE *json;
static int json_rows;
static const char *isa_name = "avx2";
/* --isa: appended to every row's section ("gemm-avx2"), so that rows of a
 * run with another ISA than the CPU's best never mix with the default
 * rows (scripts/perf-doc keys rows by section, case and variant). */
static char isa_suffix[16];

const char *bench_isa(void) { return isa_name; }

static void after_one_pause(const char *section, const char *name, int pause_ms, int reps, int nv,
                            const char *const *vnames, int (*run)(int v, void *ctx), void *ctx) {
    enum { MAXR = 64, MAXV = 4 };
    double t[MAXV][MAXR];
    if (reps > MAXR) reps = MAXR;
    if (nv > MAXV) nv = MAXV;
    for (int v = 0; v < nv; v++) run(v, ctx); /* kernels made, buffers touched */
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nv; i++) {
            int v = bench_order(r, i, nv);
            struct timespec ps = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
            nanosleep(&ps, NULL);
            double t0 = bench_now_ns();
            if (!run(v, ctx)) return;
            t[v][r] = bench_now_ns() - t0;
        }
    double med[MAXV];
    for (int v = 0; v < nv; v++) med[v] = bench_median(t[v], reps) / 1e3;
    char label[96];
    snprintf(label, sizeof label, "%s after %d ms", name, pause_ms);
    for (int v = 0; v < nv; v++)
        bench_row(section, label, vnames[v], med[v], "us", nv > 1 ? med[1] / med[v] : 0);
}

void bench_after_pause(const char *section, const char *name, int quick, int nv,
                       const char *const *vnames, int (*run)(int v, void *ctx), void *ctx) {
    for (int ms = 3; ms <= 30; ms *= 10)
        after_one_pause(section, name, ms, quick ? 5 : 21, nv, vnames, run, ctx);
}

void bench_row(const char *section, const char *name, const char *variant, double value,
               const char *unit, double ratio) {
    char sec[48];
    snprintf(sec, sizeof sec, "%s%s", section, isa_suffix);
    if (ratio > 0)
        printf("%-10s %-28s %-16s %12.2f %-8s ratio %.2f\n", sec, name, variant, value, unit,
               ratio);
    else
        printf("%-10s %-28s %-16s %12.2f %-8s\n", sec, name, variant, value, unit);
    fflush(stdout);
    if (json) {
        fprintf(json, "%s  {\"section\": \"%s\", \"case\": \"%s\", \"variant\": \"%s\", "
                "\"value\": %.4f, \"unit\": \"%s\", \"ratio\": %.4f}",
                json_rows++ ? ",\n" : "", sec, name, variant, value, unit, ratio);
    }
}

typedef struct section {
    const char *name;
    void (*run)(const bench_ctx *);
    int isa_in_header;   /* its own header line names the ISA (else main's does) */
} section;

static const section sections[] = {
    {"eltwise", bench_eltwise, 1},
    {"encode", bench_encode, 1},
    {"peak", bench_peak, 1},
    {"gemm", bench_gemm, 1},
    {"gemm_f64", bench_gemm_f64, 1},
    {"lowp", bench_lowp, 1},
    {"unwind", bench_unwind, 0},
    {"profiling", bench_profiling, 1},
    {"cache", bench_cache, 0},
    {"reduce", bench_reduce, 1},
    {"stitch", bench_stitch, 0},
};

/* --isa avx2 (or avx512): framejit's runtimes and oneDNN capped to that
 * ISA through their environment variables. oneDNN reads its own once, at
 * first use, and OpenBLAS's timeout must be set before it loads: both
 * are set here and the program starts again with them (as it does for
 * OpenBLAS alone). 0 on success, else the bad value. */
static int isa_env(int argc, char **argv) {
    const char *want = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--isa")) want = argv[i + 1];
    int again = 0;
#ifdef FJ_BENCH_OPENBLAS
    /* OpenBLAS's idle workers spin (sched_yield) for ~2^28 cycles after each
     * call and steal the second core from whatever runs next, which skewed
     * the 2-thread rows of the library measured after it. The timeout is
     * read when OpenBLAS loads, before main: set it and start again. */
    if (!getenv("OPENBLAS_THREAD_TIMEOUT")) {
        setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
        again = 1;
    }
#endif
    if (want) {
        const char *dnnl = !strcmp(want, "avx2") ? "AVX2" : !strcmp(want, "avx512") ? "AVX512_CORE" : NULL;
        if (!dnnl) return 1;
        const char *cur = getenv("FRAMEJIT_ISA"), *cur_d = getenv("ONEDNN_MAX_CPU_ISA");
        if (!cur || strcmp(cur, want) || !cur_d || strcmp(cur_d, dnnl)) {
            setenv("FRAMEJIT_ISA", want, 1);
            setenv("ONEDNN_MAX_CPU_ISA", dnnl, 1);
            again = 1;
        }
        snprintf(isa_suffix, sizeof isa_suffix, "-%s", want);
    }
    /* If exec fails, carry on: the variables are set, only too late for
     * OpenBLAS's timeout. */
    if (again) execv("/proc/self/exe", argv);
    return 0;
}

/* 1 if name is one of list's comma-separated names. */
static int in_list(const char *list, const char *name) {
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t l = strcspn(p, ",");
        if (l == len && !strncmp(p, name, len)) return 1;
        p += l + (p[l] == ',');
    }
    return 0;
}

/* The host every figure below was measured on: the CPU's name, family and
 * model, and how many CPUs this process may run on. */
static void print_host(void) {
    char line[256], name[128] = "unknown CPU";
    int fam = -1, model = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v) continue;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10) && !strcmp(name, "unknown CPU"))
            snprintf(name, sizeof name, "%s", v);
        else if (!strncmp(line, "cpu family", 10) && fam < 0) fam = atoi(v);
        else if (!strncmp(line, "model\t", 6) && model < 0) model = atoi(v);
        else if (line[0] == '\n' || !strncmp(line, "power management", 16)) break;
    }
    if (f) fclose(f);
    printf("# host: %s (family %d, model %d), %ld CPUs online; framejit isa %s\n", name, fam,
           model, sysconf(_SC_NPROCESSORS_ONLN), isa_name);
}

int main(int argc, char **argv) {
    if (isa_env(argc, argv)) {
        fprintf(stderr, "framejit-bench: --isa takes avx2 or avx512\n");
        return 2;
    }
    bench_ctx c = {.reps = 9};
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) c.quick = 1, c.reps = 5;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) c.filter = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) i++; /* isa_env's */
        else {
            fprintf(stderr, "usage: framejit-bench [--json FILE] [--quick] [--only SECTION[,SECTION...]] "
                    "[--isa avx2|avx512]\n");
            return 2;
        }
    }
    /* The ISA the sections' runtimes get. */
    fj_options o;
    fj_options_init(&o);
    o.threads = 1;
    fj_runtime *rt;
    if (fj_runtime_create(&o, &rt) != FJ_OK) {
        fprintf(stderr, "framejit-bench: %s\n", fj_last_error());
        return 1;
    }
    isa_name = fj_runtime_isa(rt) == FJ_ISA_AVX512 ? "avx512" : "avx2";
    fj_runtime_destroy(rt);
    if (json_path) {
        json = fopen(json_path, "w");
        if (!json) { perror(json_path); return 1; }
        fprintf(json, "{\"rows\": [\n");
    }
    print_host();
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (!c.filter || in_list(c.filter, sections[i].name)) {
            if (!sections[i].isa_in_header) printf("# %s: isa %s\n", sections[i].name, isa_name);
            sections[i].run(&c);
        }
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    return 0;
}
