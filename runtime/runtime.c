/* runtime.c: runtime lifecycle, options and environment variables. */
#include "runtime/rt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/builder/builder_int.h"
#include "kernels/x64/cpu.h"
#include "kernels/x64/cpu_desc.h"
#include "runtime/kcache.h"
#include "runtime/pool.h"

void fj_options_init(fj_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
}

static const char *isa_str(fj_isa isa) {
    return isa == FJ_ISA_AVX512 ? "avx512" : isa == FJ_ISA_AVX2 ? "avx2" : "auto";
}

/* The ISA to use: the best the CPU has, capped by opts and FRAMEJIT_ISA.
 * Asking for something the CPU lacks is an error, not a silent downgrade:
 * a user who forces avx512 wants to know it is not there. */
static fj_status choose_isa(const fj_options *o, uint32_t f, fj_isa *out) {
    fj_isa want = o->isa;
    if ((int)want < FJ_ISA_AUTO || want > FJ_ISA_AVX512)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_options.isa = %d is not an fj_isa value", (int)want);
    const char *e = getenv("FRAMEJIT_ISA");
    if (e && *e) {
        if (!strcmp(e, "avx512")) want = FJ_ISA_AVX512;
        else if (!strcmp(e, "avx2")) want = FJ_ISA_AVX2;
        else if (!strcmp(e, "auto")) want = FJ_ISA_AUTO;
        else
            return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_ISA=%s: expected avx512, avx2 or auto", e);
    }
    if (want == FJ_ISA_AUTO) {
        if (kc_isa_supported(f, FJ_ISA_AVX512)) want = FJ_ISA_AVX512;
        else if (kc_isa_supported(f, FJ_ISA_AVX2)) want = FJ_ISA_AVX2;
        else return fj_fail(FJ_ERR_UNSUPPORTED, "this CPU has neither AVX-512 nor AVX2+FMA");
    }
    if (!kc_isa_supported(f, want))
        return fj_fail(FJ_ERR_UNSUPPORTED, "ISA %s requested but this CPU (or OS) does not "
                       "support it", isa_str(want));
    *out = want;
    return FJ_OK;
}

/* What cpuid says of this CPU: its features and its description for the
 * GEMM blocking model. cpuid traps to the hypervisor in a VM
 * (microseconds each): asked once per process. */
static struct {
    uint32_t features;
    kc_cpu_desc desc;
} cpu_v;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static void cpu_init(void) {
    cpu_v.features = kc_cpu_features();
    kc_cpu_describe(&cpu_v.desc);
}

/* FRAMEJIT_VERBOSE: the CPU description and the GEMM blocking the model
 * derives from it for this runtime's ISA. */
static void log_blocking(const fj_runtime *rt) {
    if (fj_verbose() < 1) return;
    char line[512];
    gemm_model_cpu_str(rt->cpu, line, sizeof line);
    fj_log(1, "runtime: %s", line);
    for (int i = 0; i < 2; i++) {
        gemm_model_str(&rt->gemm[i], line, sizeof line);
        fj_log(1, "runtime: %s", line);
    }
}

/* After a normal exit the arena files stay in /dev/shm this long, at most
 * this much in all (cc_config.keep_seconds): long enough for perf record's
 * end, a sanitizer's report or pprof right after the program, small next
 * to the code cache itself. */
#define FJ_KEEP_SECONDS 3600
#define FJ_KEEP_MB 32

/* An integer environment variable in [lo, hi], left as *v when unset. */
static fj_status env_long(const char *name, long lo, long hi, long *v) {
    const char *e = getenv(name);
    if (!e || !*e) return FJ_OK;
    char *end;
    errno = 0;
    long x = strtol(e, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return fj_fail(FJ_ERR_INVALID_ARG, "%s=%s: expected %ld..%ld", name, e, lo, hi);
    *v = x;
    return FJ_OK;
}

fj_status fj_runtime_create(const fj_options *opts, fj_runtime **out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "fj_runtime_create: out is NULL");
    *out = NULL;
    fj_options o;
    fj_options_init(&o);
    if (opts) o = *opts;
    if (o.threads < 0) return fj_fail(FJ_ERR_INVALID_ARG, "fj_options.threads = %d < 0", o.threads);
    const char *te = getenv("FRAMEJIT_THREADS");
    if (te && *te) {
        char *end;
        long t = strtol(te, &end, 10);
        if (*end || t < 0 || t > 4096)
            return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_THREADS=%s: expected 0..4096", te);
        o.threads = (int)t;
    }
    if (o.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n > 0 ? (int)n : 1;
    }
    if (o.cache_bytes == 0) o.cache_bytes = (size_t)64 << 20;

    fj_runtime *rt = fj_calloc(1, sizeof *rt);
    if (!rt) return fj_fail(FJ_ERR_NO_MEMORY, "fj_runtime_create: out of memory");
    rt->opts = o;
    pthread_once(&cpu_once, cpu_init);
    rt->features = cpu_v.features;
    unsigned dis = o.cpu_disable;
    const char *de = getenv("FRAMEJIT_CPU_DISABLE");
    if (de && *de) {
        for (const char *p = de; *p;) {
            size_t n = strcspn(p, ",");
            if (n == 4 && !strncmp(p, "vnni", 4)) dis |= FJ_CPU_NO_VNNI;
            else if (n == 4 && !strncmp(p, "bf16", 4)) dis |= FJ_CPU_NO_BF16;
            else if (n) {
                fj_free(rt);
                return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_CPU_DISABLE=%s: expected a list of "
                               "vnni, bf16", de);
            }
            p += n + (p[n] == ',');
        }
    }
    if (dis & FJ_CPU_NO_VNNI) rt->features &= ~(uint32_t)(X64_F_AVX512VNNI | X64_F_AVXVNNI);
    if (dis & FJ_CPU_NO_BF16) rt->features &= ~(uint32_t)X64_F_AVX512BF16;
    fj_status s = choose_isa(&o, rt->features, &rt->isa);
    if (s == FJ_OK) s = uw_parse_backends(getenv("FRAMEJIT_UNWIND"), &rt->uw_backends);
    if (s != FJ_OK) { fj_free(rt); return s; }
    rt->opts.isa = rt->isa;
    rt->cpu = &cpu_v.desc;
    rt->gemm[0] = gemm_model_of(rt->cpu, rt->isa, 4);
    rt->gemm[1] = gemm_model_of(rt->cpu, rt->isa, 8);
    /* Probe builds only: every kernel of this runtime without a frame
     * pointer (kernels/builder/builder_int.h, KB_NOFP). */
    if (FJ_FP_TAX_PROBE && fj_env_flag("FRAMEJIT_FP_TAX_PROBE")) rt->features |= KB_NOFP;
    rt->verify = o.verify || fj_env_flag("FRAMEJIT_VERIFY");
    rt->perfmap = fj_env_flag("FRAMEJIT_PERFMAP");
    rt->jitdump = fj_env_flag("FRAMEJIT_JITDUMP");
    const char *dump = getenv("FRAMEJIT_DUMP");
    if (dump && *dump && !(rt->dump_dir = fj_strdup(dump))) {
        fj_free(rt);
        return fj_fail(FJ_ERR_NO_MEMORY, "fj_runtime_create: out of memory");
    }
    const char *cf = getenv("FRAMEJIT_CODE_FILE"), *cd = getenv("FRAMEJIT_CORE_CODE");
    cc_config cfg = {.capacity = o.cache_bytes, .code_file = !(cf && !strcmp(cf, "0")),
                     .huge_pages = o.huge_pages || fj_env_flag("FRAMEJIT_HUGEPAGES"),
                     .aux_room = rt->uw_backends & UW_LIBUNWIND ? uw_arena_room : NULL,
                     .shared_code_view = cd && !strcmp(cd, "0")};
    long keep_s = FJ_KEEP_SECONDS, keep_mb = FJ_KEEP_MB;
    if (s == FJ_OK) s = env_long("FRAMEJIT_KEEP_SECONDS", 0, 30L * 24 * 3600, &keep_s);
    if (s == FJ_OK) s = env_long("FRAMEJIT_KEEP_MB", 0, 1L << 20, &keep_mb);
    cfg.keep_seconds = (int)keep_s;
    cfg.keep_bytes = (size_t)keep_mb << 20;
    if (s == FJ_OK) s = cc_create(&cfg, &rt->cache);
    if (s != FJ_OK) {
        fj_free(rt->dump_dir);
        fj_free(rt);
        return s;
    }
    pthread_mutex_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->place_lock, NULL);
    pthread_mutex_init(&rt->kc_lock, NULL);
    pthread_cond_init(&rt->kc_cond, NULL);
    pthread_mutex_init(&rt->pool_lock, NULL);
    rt_fork_init();
    /* [cache] eviction hooks; also makes rt live, where fork's handlers
     * take its locks (initialized above). */
    rt_kcache_init(rt);
    rt_arena_early(rt);
    if (rt->features & KB_NOFP)
        fj_log(1, "runtime: frame-pointer tax probe: kernels use rbp as a GPR, not verified");
    fj_log(1, "runtime: isa=%s threads=%d cache=%zu bytes (%s) unwind=%s%s%s verify=%d",
           isa_str(rt->isa), rt->opts.threads, o.cache_bytes, cc_backing(rt->cache),
           rt->uw_backends & UW_LIBGCC ? "libgcc," : "",
           rt->uw_backends & UW_LIBUNWIND ? "libunwind," : "",
           rt->uw_backends & UW_GDB ? "gdb" : "", rt->verify);
    log_blocking(rt);
    *out = rt;
    return FJ_OK;
}

fj_isa fj_runtime_isa(const fj_runtime *rt) { return rt ? rt->isa : FJ_ISA_AUTO; }

void fj_runtime_destroy(fj_runtime *rt) {
    if (!rt) return;
    rt_pool_destroy(rt->pool);
    rt_kcache_clear(rt);
    /* Kernels still held by the user or by the eltwise slots go too:
     * unwind info before the code it describes (invariant 4). */
    while (rt->kernels) rt_kernel_free(rt->kernels);
    cc_destroy(rt->cache);
    pthread_mutex_destroy(&rt->lock);
    pthread_mutex_destroy(&rt->place_lock);
    pthread_mutex_destroy(&rt->kc_lock);
    pthread_cond_destroy(&rt->kc_cond);
    pthread_mutex_destroy(&rt->pool_lock);
    fj_free(rt->dump_dir);
    fj_free(rt);
}

const char *fj_symbolize(const void *pc, uintptr_t *offset) {
    const cc_entry *e = cc_lookup((uintptr_t)pc);
    if (!e) return NULL;
    if (offset) *offset = (uintptr_t)pc - e->start;
    return e->name;
}
