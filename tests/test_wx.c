/* test_wx.c: invariant 3, "no page is ever writable and executable at the
 * same time". A workload (runtimes for both ISAs and each code backing,
 * relu runs, builder kernels made and released, runtimes destroyed) is
 * checked after every step, and a second thread scans /proc/self/maps
 * continuously while it runs. */

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fjtest.h"
#include "framejit.h"

typedef struct sampler {
    atomic_int stop;
    atomic_long samples;
    atomic_int found;
    char detail[512];
} sampler;

static void *sample_maps(void *p) {
    sampler *s = p;
    char d[512];
    while (!atomic_load(&s->stop)) {
        if (fjt_maps_has_wx(d, sizeof d) && !atomic_exchange(&s->found, 1))
            snprintf(s->detail, sizeof s->detail, "%s", d);
        atomic_fetch_add(&s->samples, 1);
    }
    return NULL;
}

static void no_wx(const char *step) {
    char d[512];
    ck_assert_msg(!fjt_maps_has_wx(d, sizeof d), "after %s: W+X mapping: %s", step, d);
}

/* A kernel that adds a constant to a float array: exercises the constant
 * pool (data next to code) as well as code. */
static fj_status build_addc(fj_runtime *rt, const char *name, float c, fj_kernel **out) {
    fj_builder *b;
    fj_status s = fj_builder_create(rt, name, 2, &b);
    if (s != FJ_OK) return s;
    fj_reg x = fj_arg(b, 0), n = fj_arg(b, 1);
    fj_reg v = fj_vreg(b), k = fj_vreg(b);
    int vb = fj_builder_vbits(b), lanes = vb / 32;
    fj_emit(b, FJ_VBROADCASTSS, fj_vec(b, k), fj_const_f32(b, c));
    fj_label top = fj_label_new(b);
    fj_label_bind(b, top);
    fj_emit(b, FJ_VMOVUPS, fj_vec(b, v), fj_mem(0, x, 0));
    fj_emit(b, FJ_VADDPS, fj_vec(b, v), fj_vec(b, v), fj_vec(b, k));
    fj_emit(b, FJ_VMOVUPS, fj_mem(0, x, 0), fj_vec(b, v));
    fj_emit(b, FJ_ADD, fj_r64(x), fj_imm(lanes * 4));
    fj_emit(b, FJ_SUB, fj_r64(n), fj_imm(lanes));
    fj_emit(b, FJ_JNE, fj_lbl(top));
    fj_emit0(b, FJ_VZEROUPPER);
    fj_return(b, fj_none());
    return fj_builder_finish(b, out);
}

static void workload_round(int round, fj_isa isa, const char *code_file) {
    char step[128];
    if (code_file) setenv("FRAMEJIT_CODE_FILE", code_file, 1);
    else unsetenv("FRAMEJIT_CODE_FILE");
    fj_options o;
    fj_options_init(&o);
    o.isa = isa;
    o.threads = round % 2 ? 1 : 0;
    fj_runtime *rt;
    fj_status s = fj_runtime_create(&o, &rt);
    ck_assert_msg(s == FJ_OK, "create: %s", fj_last_error());
    snprintf(step, sizeof step, "round %d: create isa=%d code_file=%s", round, (int)isa,
             code_file ? code_file : "default");
    no_wx(step);

    float src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (float)(i - 500);
    for (int a = 0; a < 2; a++) {
        for (size_t n = 1; n <= 1000; n = n * 3 + 1) {
            s = fj_eltwise_f32(rt, FJ_ELT_RELU, a ? 0.5f : 0.0f, 0, src, dst, n);
            ck_assert_msg(s == FJ_OK, "relu: %s", fj_last_error());
        }
        snprintf(step, sizeof step, "round %d: relu alpha %d", round, a);
        no_wx(step);
    }

    fj_kernel *ks[8];
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "wx_addc_%d_%d", round, i);
        s = build_addc(rt, name, (float)i, &ks[i]);
        ck_assert_msg(s == FJ_OK, "build %s: %s", name, fj_last_error());
        snprintf(step, sizeof step, "round %d: build %s", round, name);
        no_wx(step);
        /* Run it: the new code is executable while the older ones run. */
        float x[64] = {0};
        ((void (*)(float *, size_t))fj_kernel_entry(ks[i]))(x, 64);
        ck_assert(x[0] == (float)i && x[63] == (float)i);
    }
    fj_kernel *c;
    ck_assert_int_eq(fjt_build_csr_kernel(rt, "wx_csr", NULL, &c), FJ_OK);
    no_wx("build wx_csr");
    for (int i = 0; i < 8; i += 2) fj_kernel_release(ks[i]);
    no_wx("release half");
    /* Build more after releases (reuse of the cache must stay W^X). */
    for (int i = 0; i < 8; i += 2) {
        s = build_addc(rt, "wx_again", 1.0f, &ks[i]);
        ck_assert_msg(s == FJ_OK, "rebuild: %s", fj_last_error());
        no_wx("rebuild");
    }
    /* Writing new kernels never disturbed the old ones: all still run. */
    for (int i = 0; i < 8; i++) {
        float x[64] = {0};
        ((void (*)(float *, size_t))fj_kernel_entry(ks[i]))(x, 64);
        float want = (i % 2) ? (float)i : 1.0f;
        ck_assert_msg(x[0] == want && x[63] == want, "kernel %d after rebuilds: %g", i, x[0]);
    }
    ck_assert_uint_eq(((uint64_t(*)(uint64_t, uint64_t))fj_kernel_entry(c))(0, 0), 0);
    fj_runtime_destroy(rt);
    snprintf(step, sizeof step, "round %d: destroy", round);
    no_wx(step);
}

START_TEST(workload_never_wx) {
    no_wx("start");
    sampler smp;
    memset(&smp, 0, sizeof smp);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, sample_maps, &smp), 0);
    const char *backings[] = {NULL, "0"};
    int round = 0;
    for (int rep = 0; rep < 3; rep++)
        for (int bi = 0; bi < 2; bi++) {
            if (fjt_have_avx512()) workload_round(round++, FJ_ISA_AVX512, backings[bi]);
            workload_round(round++, FJ_ISA_AVX2, backings[bi]);
        }
    /* Let the sampler see at least a few full scans during the workload. */
    atomic_store(&smp.stop, 1);
    pthread_join(th, NULL);
    printf("W^X: %ld concurrent scans of /proc/self/maps, %d workload rounds\n",
           atomic_load(&smp.samples), round);
    ck_assert_msg(!atomic_load(&smp.found), "sampler saw a W+X mapping: %s", smp.detail);
    ck_assert_int_gt(atomic_load(&smp.samples), 0);
}
END_TEST

/* The scanner itself finds a W+X mapping when there is one (so a pass above
 * means something). */
START_TEST(scanner_detects_wx) {
    ck_assert(!fjt_maps_has_wx(NULL, 0));
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) return;   /* a kernel that forbids W+X outright */
    char d[512];
    ck_assert(fjt_maps_has_wx(d, sizeof d));
    munmap(p, 4096);
    ck_assert(!fjt_maps_has_wx(NULL, 0));
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("wx");
    TCase *t = tcase_create("wx");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, scanner_detects_wx);
    tcase_add_test(t, workload_never_wx);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    /* The suites choose ISAs and threads themselves. */
    unsetenv("FRAMEJIT_ISA");
    unsetenv("FRAMEJIT_THREADS");
    return fjt_run_suite(suite());
}
