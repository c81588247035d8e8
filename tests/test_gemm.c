/* test_gemm.c: GEMM against a double-precision reference, bad input, threads, unwinding.
 *
 * Both ISAs, every blocking mode (operands packed or read in place, small
 * blocks, other register tiles), fused epilogues, bitwise equality of 1
 * and 2 threads, and fjt_trace_kernel on tiny shapes (plan memos, kernel
 * references and allocation failures: test_gemm_memo.c).
 *
 * FRAMEJIT_FUZZ_ITERS=N sets the random cases per ISA (default 1500, or
 * FRAMEJIT_FUZZ_SCALE times that) and FRAMEJIT_TEST_SEED=S the seed
 * (default fixed), for longer runs:
 *     FRAMEJIT_FUZZ_ITERS=100000 FRAMEJIT_TEST_SEED=$RANDOM meson test gemm */
/* The build defines FJ_TEST for test programs, which would mangle the
 * builder's FJ_TEST enumerator (framejit/builder.h). */
#undef FJ_TEST

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fjtest.h"
#include "framejit.h"
#include "gemmcase.h"
#include "runtime/prims/gemm_int.h"
#include "runtime/prims/span.h"

/* ---- random cases -------------------------------------------------------- */

static const int64_t dims[] = {0,  1,  2,  3,  5,  7,  8,  9,  13, 14, 15,  16,  17,  23, 28,
                               29, 31, 32, 33, 41, 47, 48, 63, 64, 65, 97, 127, 128, 129};
static const float edge[] = {0.0f, 1.0f, -1.0f, 0.5f};

/* Blocking knobs each case runs under: in place and packed operands,
 * small blocks (several k, m and n blocks), other register tiles, and the
 * threading threshold at 1 so that small problems split too. */
static const char *tunes512[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=28,nc=64,mt=1",
    "da=0,db=0,kc=16,mc=28,nc=64,mt=1,shared=1",
    "da=1,db=0,kc=24,mc=14,nc=32,mt=1,shared=1",
    "da=0,db=0,kc=16,mt=1,shared=1,rpt=1",
    "da=0,db=0,kc=24,mc=14,mt=1,shared=1,rpt=16",
    "da=1,db=1,kc=24,mc=14,nc=32,mt=1",
    "da=1,db=0,kc=8,mt=1",
    "mr=6,nv=4,da=0,db=0,mt=1",
    "mr=8,nv=3,kc=40,unroll=4",
    "mr=5,nv=1,unroll=1,kc=20,pfc=0",
    "mr=14,nv=2,da=0,db=0,pfb=512,unroll=2,mt=1",
    "areg=1,da=0,db=1,unroll=8,mt=1",
    "bcopy=0,da=0,db=0,kc=24,mc=28",
    "bpf=1,pfb=256,kc=32,mc=14,nc=64",
};
static const char *tunes2[] = {
    NULL,
    "da=0,db=0",
    "da=1,db=1",
    "da=0,db=0,kc=16,mc=12,nc=32,mt=1",
    "da=0,db=0,kc=16,mc=12,nc=32,mt=1,shared=1",
    "da=1,db=1,kc=24,mc=6,nc=16,mt=1",
    "da=1,db=0,kc=8,mt=1",
    "mr=3,nv=3,da=0,db=0,mt=1",
    "mr=12,nv=1,kc=40,unroll=4",
    "mr=5,nv=1,unroll=1,kc=20,pfc=0",
};

static const gcase_lists lists = {dims, sizeof dims / sizeof dims[0], tunes512, tunes2,
                                  sizeof tunes512 / sizeof tunes512[0],
                                  sizeof tunes2 / sizeof tunes2[0], 0, NULL, 0};

static void fuzz(fj_isa isa, uint64_t salt) { gcase_fuzz(isa, salt, &lists, run_case); }

START_TEST(fuzz_avx512) { fuzz(FJ_ISA_AVX512, 1); }
END_TEST
START_TEST(fuzz_avx2) { fuzz(FJ_ISA_AVX2, 2); }
END_TEST

/* Every alpha/beta edge pair, every transpose, tails of every width. */
START_TEST(edges) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(3);
    int lanes = isa == FJ_ISA_AVX512 ? 16 : 8;
    for (int ai = 0; ai < 4; ai++)
        for (int bi = 0; bi < 4; bi++)
            for (int tr = 0; tr < 4; tr++) {
                gcase t = {.ta = tr & 1, .tb = tr >> 1, .alpha = edge[ai], .beta = edge[bi]};
                t.m = 1 + rnd_to(30);
                t.n = 1 + rnd_to(3 * lanes);
                t.k = rnd_to(40);
                t.lda = (t.ta ? t.m : t.k) + 1;
                t.ldb = (t.tb ? t.k : t.n) + 2;
                t.ldc = t.n + 3;
                run_case(rt, rt2, &t);
            }
    /* Column tails of every width with both operands in place and packed. */
    for (int w = 1; w <= 4 * lanes; w++)
        for (int d = 0; d < 2; d++) {
            gcase t = {.m = 1 + w % 17, .n = w, .k = 1 + w % 9, .alpha = 1, .beta = 0.5f,
                       .tune = d ? "da=1,db=1" : "da=0,db=0"};
            t.lda = t.k;
            t.ldb = t.n;
            t.ldc = t.n;
            run_case(rt, NULL, &t);
        }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* beta = 0 never reads C; k = 0 scales C by beta. */
START_TEST(beta_zero_and_k_zero) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(4);
    for (int kk = 0; kk < 2; kk++)
        for (int b = 0; b < 4; b++) {
            gcase t = {.m = 37, .n = 45, .k = kk ? 19 : 0, .alpha = 2, .beta = edge[b]};
            t.lda = t.k ? t.k : 1;
            t.ldb = t.n;
            t.ldc = t.n + 1;
            t.special = t.beta == 0 ? 3 : 0;
            run_case(rt, NULL, &t);
            /* an infinite alpha must not turn k = 0 into NaN */
            t.alpha = INFINITY;
            if (!t.k) run_case(rt, NULL, &t);
        }
    fj_runtime_destroy(rt);
}
END_TEST

/* Large enough to split across threads and k blocks with default knobs:
 * rows (m > n), column panels (n > m, or forced), rows with B shared. */
START_TEST(threads_bitwise) {
    fj_runtime *rt1 = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(5);
    static const struct {
        const char *tune;
        int wide;   /* n > m */
    } v[] = {{NULL, 0},     {"shared=1", 0}, {"shared=1,rpt=1", 0}, {"shared=1,rpt=64", 0},
             {NULL, 1},     {"splitn=0", 1}, {"splitn=1", 0}};
    for (int tr = 0; tr < 4 * (int)(sizeof v / sizeof v[0]); tr++) {
        const int w = v[tr >> 2].wide;
        gcase t = {.ta = tr & 1, .tb = tr >> 1 & 1, .m = w ? 277 : 301, .n = w ? 301 : 277,
                   .k = 293, .alpha = 0.5f, .beta = -1, .tune = v[tr >> 2].tune};
        t.lda = (t.ta ? t.m : t.k) + 3;
        t.ldb = (t.tb ? t.k : t.n);
        t.ldc = t.n + 2;
        run_case(rt1, rt2, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* Default blocking of problems past 256 rows and columns: row strides that
 * fall into a few L1 sets and short k (the 6-row x 4-vector tile), rows
 * in one set read in place by 8-row tiles (12-way L1s), the B panels
 * packed by the kernels' first row tile (whole panels; the tail panel
 * packed apart), several k blocks (k past 512, and past 1024 for
 * AVX-512: C accumulated without alpha), and the alpha = 1 / beta = 0 or
 * 1 stores. Both L1 kinds' choices are made
 * whatever the host's L1 is (ways=8, ways=12). */
START_TEST(wide_blocks) {
    fj_runtime *rt1 = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(7);
    static const int64_t ldas[] = {512, 1536, 0, 1024};
    static const float ab[][2] = {{1, 0}, {1, 1}, {1, 0.5f}, {-2, 0}, {0.5f, 1}};
    for (int c = 0; c < 40; c++) {
        gcase t = {.ta = c % 5 == 3, .tb = c % 7 == 6, .m = 257 + rnd_to(60), .n = 256 + rnd_to(70),
                   .k = c % 3 ? 40 + rnd_to(60) : c & 1 ? 520 + rnd_to(100) : 1030 + rnd_to(100),
                   .alpha = ab[c % 5][0], .beta = ab[c % 5][1],
                   .tune = c & 1 ? (c & 4 ? "ways=8" : "ways=12") : "mt=1"};
        t.lda = ldas[c % 4] ? ldas[c % 4] : (t.ta ? t.m : t.k) + 5;
        if (t.lda < (t.ta ? t.m : t.k)) t.lda += 1024; /* the same L1 spread */
        t.ldb = (t.tb ? t.k : t.n) + (c & 2 ? 16 : 0);
        t.ldc = t.n + (c & 4 ? 1 : 0);
        run_case(rt1, c & 1 ? rt2 : NULL, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* A read in place and at least four L2s large: column blocks of up to
 * 1024 columns (an L2 of 64 KiB makes test-sized problems large; n past
 * 1024 gives two blocks), other problems and the nc knob as before.
 * n = 1100 takes 48-wide panels (fewer idle lanes than 32-wide ones). */
START_TEST(wide_a_blocks) {
    fj_runtime *rt1 = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    const int avx512 = fj_runtime_isa(rt1) == FJ_ISA_AVX512;
    seed(9);
    static const struct {
        const char *tune;
        int m, n, k;
        int64_t nc;   /* expected on AVX-512, 0: not checked */
    } v[] = {{"l2=65536,ways=12", 280, 1100, 600, 576},
             {"l2=65536,ways=12,mt=1", 301, 1041, 530, 544},
             {"l2=65536,ways=12", 290, 700, 520, 704},
             {"l2=65536,ways=12,nc=256", 280, 1100, 600, 240},
             {"l2=65536,ways=12", 300, 1100, 200, 0}};
    for (int c = 0; c < (int)(sizeof v / sizeof v[0]); c++) {
        gcase t = {.m = v[c].m, .n = v[c].n, .k = v[c].k, .alpha = c & 1 ? 1.0f : 0.5f,
                   .beta = c & 2 ? 1.0f : 0.0f, .tune = v[c].tune};
        t.lda = t.k + 3;
        t.ldb = t.n;
        t.ldc = t.n + 1;
        gemm_test_tune(t.tune);
        gemm_plan p;
        const gemm_desc d = {.dt = KG_DT_F32, .m = t.m, .n = t.n, .k = t.k, .lda = t.lda,
                             .ldb = t.ldb, .ldc = t.ldc, .alpha = t.alpha, .beta = t.beta};
        ck_assert_int_eq(gemm_plan_init(rt1, &p, &d), FJ_OK);
        if (avx512 && v[c].nc) {
            ck_assert_msg(p.direct_a, "case %d: A packed", c);
            ck_assert_msg(p.nc == v[c].nc, "case %d: nc %lld, want %lld", c, (long long)p.nc,
                          (long long)v[c].nc);
        }
        if (!v[c].nc)
            ck_assert_msg(p.nc <= 256, "case %d: k = %lld: nc %lld", c, (long long)t.k,
                          (long long)p.nc);
        gemm_plan_release(&p);
        gemm_test_tune(NULL);
        run_case(rt1, c & 1 ? rt2 : NULL, &t);
    }
    fj_runtime_destroy(rt1);
    fj_runtime_destroy(rt2);
}
END_TEST

/* ---- handles with a fused epilogue --------------------------------------- */

/* The fused epilogue on the default blocking of large row-major problems:
 * A in place with the tallest tile and the kernel packing B (every general
 * register in use before the bias pointer), and the 6 x 64 tile. */
START_TEST(wide_epilogue) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1), *rt2 = fjt_runtime(FJ_ISA_AUTO, 2);
    seed(8);
    for (int c = 0; c < 4; c++) {
        gcase t = {.m = 300, .n = 270 + c, .k = 77 + c, .alpha = c & 1 ? 1.0f : 0.75f,
                   .beta = c & 2 ? 1.0f : 0.0f, .tune = c == 3 ? "mt=1" : NULL};
        t.lda = c & 1 ? 512 : t.k + 5;
        t.ldb = t.n;
        t.ldc = t.n + 1;
        handle_case(rt, c & 1 ? rt2 : NULL, &t, 1, c & 2 ? FJ_ELT_RELU : FJ_ELT_LINEAR, 0.5f,
                    0.25f);
    }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

START_TEST(epilogue) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1), *rt2 = fjt_runtime(isa, 2);
    if (!rt) return;
    seed(6);
    const char **tunes = isa == FJ_ISA_AVX512 ? tunes512 : tunes2;
    int ntunes = isa == FJ_ISA_AVX512 ? (int)(sizeof tunes512 / sizeof tunes512[0])
                                      : (int)(sizeof tunes2 / sizeof tunes2[0]);
    for (int op = 0; op < FJ_ELT__COUNT; op++)
        for (int rep = 0; rep < 6; rep++) {
            gcase t;
            gcase_random(&t, &lists, isa == FJ_ISA_AVX512, rep);
            t.special = 0;
            t.tune = tunes[rep % ntunes];
            float pa = op == FJ_ELT_CLIP ? -0.5f : rep % 2 ? 0.0f : 0.3f;
            float pb = op == FJ_ELT_CLIP ? 0.7f : 0.25f;
            if (op == FJ_ELT_LOG || op == FJ_ELT_SQRT) t.alpha = t.alpha < 0 ? -t.alpha : t.alpha;
            handle_case(rt, rep % 2 ? rt2 : NULL, &t, rep % 3 != 2, (fj_eltwise_op)op, pa,
                        pb);
        }
    fj_runtime_destroy(rt);
    fj_runtime_destroy(rt2);
}
END_TEST

/* ---- bad input ------------------------------------------------------------ */

START_TEST(bad_input) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    float a[64], b[64], c[64], keep[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = 1, c[i] = keep[i] = (float)i;
    FJT_ASSERT_INVALID(fj_gemm_f32(NULL, 'N', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'X', 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'C', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 0, 'N', 2, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', -1, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, -2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 2, -2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 3, b, 3, 0, c, 3));   /* lda < k */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'T', 'N', 5, 3, 4, 1, a, 4, b, 3, 0, c, 3));   /* lda < m */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 2, 0, c, 3));   /* ldb < n */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'T', 2, 3, 4, 1, a, 4, b, 3, 0, c, 3));   /* ldb < k */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, 2));   /* ldc < n */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, -3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, c, 0));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3));
    /* k = 0 still writes C */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 0, 1, a, 1, b, 3, 0, NULL, 3));
    /* Sizes whose byte extents overflow. */
    int64_t big = INT64_MAX / 2;
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', big, 2, 2, 1, a, 2, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 2, big, 1, a, big, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 3, 2, 2, 1, a, INT64_MAX, b, 2, 0, c, 2));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', (int64_t)1 << 31, (int64_t)1 << 31, 1, 1, a, 1, b,
                           (int64_t)1 << 31, 0, c, (int64_t)1 << 62));
    ck_assert_msg(!memcmp(c, keep, sizeof c), "C changed by a failed call");
    /* Empty products are fine with NULL pointers where nothing is read. */
    ck_assert(fj_gemm_f32(rt, 'N', 'N', 0, 3, 4, 1, NULL, 4, NULL, 3, 0, NULL, 3) == FJ_OK);
    ck_assert(fj_gemm_f32(rt, 'N', 'N', 2, 0, 4, 1, NULL, 4, NULL, 1, 0, NULL, 1) == FJ_OK);
    ck_assert(fj_gemm_f32(rt, 'n', 't', 2, 3, 0, 1, NULL, 1, NULL, 1, 0, c, 3) == FJ_OK);
    for (int i = 0; i < 6; i++) ck_assert(c[i] == 0.0f);

    /* Handles. */
    fj_gemm *h = (fj_gemm *)&h;
    fj_gemm_desc d = {'N', 'N', 2, 3, 4, 4, 3, 3, 1, 0, 1, FJ_ELT_RELU, 0, 0};
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &d, NULL));
    FJT_ASSERT_INVALID(fj_gemm_create(NULL, &d, &h));
    ck_assert_ptr_null(h);
    FJT_ASSERT_INVALID(fj_gemm_create(rt, NULL, &h));
    fj_gemm_desc e = d;
    e.post_op = (fj_eltwise_op)999;
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    e = d;
    e.lda = 3;
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    e = d;
    e.transb = 'q';
    FJT_ASSERT_INVALID(fj_gemm_create(rt, &e, &h));
    ck_assert(fj_gemm_create(rt, &d, &h) == FJ_OK);
    memcpy(c, keep, sizeof c);
    FJT_ASSERT_INVALID(fj_gemm_execute(NULL, a, b, b, c));
    FJT_ASSERT_INVALID(fj_gemm_execute(h, a, b, NULL, c)); /* has_bias without bias */
    FJT_ASSERT_INVALID(fj_gemm_execute(h, NULL, b, b, c));
    FJT_ASSERT_INVALID(fj_gemm_execute(h, a, b, b, NULL));
    ck_assert_msg(!memcmp(c, keep, sizeof c), "C changed by a failed execute");
    ck_assert(fj_gemm_execute(h, a, b, b, c) == FJ_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) ck_assert(c[i * 3 + j] == 5.0f); /* relu(4 + 1) */
    fj_gemm_destroy(h);
    fj_gemm_destroy(NULL);
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- aliasing ------------------------------------------------------------- */

/* rt_mat_overlap against a byte map, on random small matrices in one
 * buffer: byte offsets that are not multiples of 4 too, 1-row matrices
 * with any ld, rows that interleave. */
START_TEST(overlap_exact) {
    enum { SPACE = 600 };
    seed(11);
    int hits = 0, interleaved = 0;
    for (int it = 0; it < 20000; it++) {
        rt_mat m[2];
        uintptr_t end[2];
        static unsigned char mark[SPACE];
        memset(mark, 0, sizeof mark);
        int shared = 0;
        for (int w = 0; w < 2; w++) {
            int64_t rows = rnd_to(6), cols = rnd_to(7), ld = cols + rnd_to(9);
            if (ld == 0) ld = 1;
            int64_t span = rows && cols ? ((rows - 1) * ld + cols) * 4 : 0;
            /* The second one often starts just past the first's start. */
            int64_t off = w && rnd() % 2 ? (int64_t)m[0].p + rnd_to(40) : rnd_to(SPACE);
            if (off > SPACE - span) off = SPACE - span;
            m[w] = (rt_mat){(uintptr_t)off, rows, cols, ld};
            end[w] = (uintptr_t)(off + span);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols * 4; j++) {
                    int64_t at = off + i * ld * 4 + j;
                    if (mark[at] && mark[at] != w + 1) shared = 1;
                    mark[at] = (unsigned char)(w + 1);
                }
        }
        /* Spans that meet without a shared byte: the row walk says no. */
        int met = end[0] > m[0].p && end[1] > m[1].p && m[0].p < end[1] && m[1].p < end[0];
        /* Addresses away from 0, as real pointers are. */
        rt_mat a = m[0], b = m[1];
        a.p += 4096;
        b.p += 4096;
        int got = rt_mat_overlap(&a, &b), got2 = rt_mat_overlap(&b, &a);
        ck_assert_msg(got == shared && got2 == shared,
                      "%lldx%lld ld %lld at %lu vs %lldx%lld ld %lld at %lu: got %d/%d, want %d",
                      (long long)a.rows, (long long)a.cols, (long long)a.ld,
                      (unsigned long)m[0].p, (long long)b.rows, (long long)b.cols,
                      (long long)b.ld, (unsigned long)m[1].p, got, got2, shared);
        hits += shared;
        interleaved += met && !shared;
    }
    /* Both answers were exercised, and the row walk's "no" as well. */
    ck_assert_int_gt(hits, 1000);
    ck_assert_int_gt(interleaved, 200);
}
END_TEST

/* C sharing memory with A, B or the bias: an error, C untouched. Column
 * ranges of one array (rows interleaved, no element shared) are fine and
 * computed right. */
START_TEST(alias) {
    fj_runtime *rt = fjt_runtime(FJ_ISA_AUTO, 1);
    enum { M = 7, N = 9, K = 5, LD = K + N };
    float x[M * LD + 64], keep[M * LD + 64];
    seed(12);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = keep[i] = rnd_f();
#define SAME() ck_assert_msg(!memcmp(x, keep, sizeof x), "memory changed by a failed call")
    /* C is A, C is B, C inside B, C's last element on A's first. */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 8, 8, 8, 1, x, 8, x + 64, 8, 0, x, 8));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 8, 8, 8, 1, x + 64, 8, x, 8, 0.5f, x, 8));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'T', 3, 3, 8, 1, x, 8, x + 30, 8, 0, x + 37, 3));
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 2, 3, 2, 1, x + 5, 2, x + 20, 3, 0, x, 3));
    /* Transposed A covers k x m: its last row reaches C (as m x k it
     * would not). */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'T', 'N', 2, 2, 3, 1, x, 4, x + 40, 2, 0, x + 9, 2));
    /* Interleaved, but column k - 1 of A is column 0 of C. */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', M, N, K, 1, x, LD, x + M * LD, N, 0,
                                   x + K - 1, LD));
    SAME();
    /* The same shape twice (the thread's plan memo skips the size checks,
     * never this one). */
    FJT_ASSERT_INVALID(fj_gemm_f32(rt, 'N', 'N', 8, 8, 8, 1, x, 8, x + 64, 8, 0, x, 8));
    SAME();
    /* k = 0 reads neither A nor B: C may sit on them. */
    ck_assert(fj_gemm_f32(rt, 'N', 'N', 2, 2, 0, 1, x, 1, x, 2, 0, x, 2) == FJ_OK);
    ck_assert(x[0] == 0 && x[1] == 0 && x[2] == 0 && x[3] == 0);
    memcpy(x, keep, sizeof x);
    /* A and B may share memory (both are only read). */
    float c[64];
    ck_assert(fj_gemm_f32(rt, 'N', 'T', 4, 4, 6, 1, x, 6, x, 6, 0, c, 4) == FJ_OK);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double d = 0;
            for (int p = 0; p < 6; p++) d += (double)x[i * 6 + p] * x[j * 6 + p];
            ck_assert_msg(fabs(c[i * 4 + j] - d) < 1e-5, "A = B: c[%d][%d]", i, j);
        }
    /* A in columns [0, K) and C in [K, K + N) of one M x LD array, B
     * elsewhere; then B in columns [0, N) and C in [N, 2N) of one array. */
    const float *b = x + M * LD;
    for (int v = 0; v < 2; v++) {
        memcpy(x, keep, sizeof x);
        const int64_t ld = v ? 2 * N : LD, at = v ? N : K;
        float a2[M * K], b2[K * N];
        for (int i = 0; i < M; i++)
            for (int p = 0; p < K; p++) a2[i * K + p] = x[i * LD + p];
        for (int p = 0; p < K * N; p++) b2[p] = v ? x[(p / N) * ld + p % N] : b[p];
        fj_status s = v ? fj_gemm_f32(rt, 'N', 'N', M, N, K, 1, a2, K, x, ld, 0, x + at, ld)
                        : fj_gemm_f32(rt, 'N', 'N', M, N, K, 1, x, ld, b, N, 0, x + at, ld);
        ck_assert_msg(s == FJ_OK, "%s", fj_last_error());
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double d = 0;
                for (int p = 0; p < K; p++) d += (double)a2[i * K + p] * b2[p * N + j];
                float got = x[i * ld + at + j];
                ck_assert_msg(fabs(got - d) < 1e-5, "interleaved %d: c[%d][%d] %g, want %g", v,
                              i, j, got, d);
            }
    }
    memcpy(x, keep, sizeof x);
    /* A handle: the bias too. */
    fj_gemm *h;
    fj_gemm_desc d = {'N', 'N', 4, 4, 4, 4, 4, 4, 1, 0, 1, FJ_ELT_RELU, 0, 0};
    ck_assert(fj_gemm_create(rt, &d, &h) == FJ_OK);
    FJT_ASSERT_INVALID(fj_gemm_execute(h, x, x + 16, x + 35, x + 32));  /* bias in C */
    FJT_ASSERT_INVALID(fj_gemm_execute(h, x + 40, x + 16, x + 60, x + 30)); /* C on A */
    SAME();
    ck_assert(fj_gemm_execute(h, x, x + 16, x + 48, x + 32) == FJ_OK);
    fj_gemm_destroy(h);
#undef SAME
    fj_runtime_destroy(rt);
}
END_TEST

/* ---- every-instruction unwinding ---------------------------------------- */

START_TEST(trace_unwind) {
    fj_isa isa = _i ? FJ_ISA_AVX2 : FJ_ISA_AVX512;
    fj_runtime *rt = fjt_runtime(isa, 1);
    if (!rt) return;
    seed(7);
    /* Tiny shapes: the trap flag stops at every instruction. Tails in both
     * dimensions, both operand modes, both beta paths, and a handle. */
    static const struct { int ta, tb, m, n, k; float beta; const char *tune; int handle; } cs[] = {
        {0, 0, 3, 5, 2, 0, NULL, 0},
        {0, 0, 17, 19, 3, 1, "da=1,db=1", 0},
        {1, 1, 5, 9, 2, 0.5f, "da=0,db=0,kc=2", 0},
        {0, 1, 2, 33, 1, 0, "da=1,db=0", 1},
        {1, 0, 4, 3, 2, 1, "da=0,db=0", 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gcase t = {.ta = cs[i].ta, .tb = cs[i].tb, .m = cs[i].m, .n = cs[i].n, .k = cs[i].k,
                   .alpha = 1, .beta = cs[i].beta, .tune = cs[i].tune};
        t.lda = t.ta ? t.m : t.k;
        t.ldb = t.tb ? t.k : t.n;
        t.ldc = t.n;
        gemm_test_tune(t.tune);
        gbufs g;
        bufs_make(&t, &g);
        float bias[64];
        for (int j = 0; j < 64; j++) bias[j] = rnd_f();
        fj_gemm *h = NULL;
        if (cs[i].handle) {
            fj_gemm_desc d = {t.ta ? 'T' : 'N', t.tb ? 'T' : 'N', t.m, t.n, t.k, t.lda, t.ldb,
                              t.ldc, t.alpha, t.beta, 1, FJ_ELT_RELU, 0, 0};
            ck_assert(fj_gemm_create(rt, &d, &h) == FJ_OK);
        }
        fjt_trace_result *r = calloc(1, sizeof *r);
        fj_status st;
        int ok = gcase_trace(rt, &t, &g, h, bias, r, &st);
        ck_assert_msg(st == FJ_OK, "case %zu: %s", i, fj_last_error());
        ck_assert_msg(ok, "case %zu (%s): %s", i, r->first_name ? r->first_name : "?", r->msg);
        ck_assert_int_gt(r->kernel_steps, 0);
        ck_assert_int_ge(r->rets, 1);
        free(r);
        fj_gemm_destroy(h);
        bufs_free(&g);
        gemm_test_tune(NULL);
    }
    fj_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, overlap_exact);
    tcase_add_test(tc, alias);
    tcase_add_loop_test(tc, edges, 0, 2);
    tcase_add_loop_test(tc, beta_zero_and_k_zero, 0, 2);
    tcase_add_test(tc, threads_bitwise);
    tcase_add_test(tc, wide_blocks);
    tcase_add_test(tc, wide_a_blocks);
    tcase_add_loop_test(tc, epilogue, 0, 2);
    tcase_add_test(tc, wide_epilogue);
    tcase_add_loop_test(tc, trace_unwind, 0, 2);
    tcase_add_test(tc, fuzz_avx512);
    tcase_add_test(tc, fuzz_avx2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fjt_run_suite(suite()); }
