/* gemm_act64.c: the f64 GEMM epilogue's activations in packed-double instructions, AVX-512 and AVX2.
 *
 * One code path for both ISAs: the vector width comes from the builder,
 * constants are full vectors in the kernel's constant pool (memory
 * operands: the packed-double rows have no {1to8} form), and only the
 * selects differ (AVX-512: vcmppd into a mask and a merge-masked move;
 * AVX2: vcmppd into a vector and vblendvps, whose sign-bit test sees the
 * same all-ones lanes). alpha and beta are read at run time (ca, cb).
 *
 * Accuracy (tests/test_gemm_f64_act.c, against long double; the bounds
 * and the measured maxima are in include/framejit.h): exp and log within
 * 1 ulp of double, sigmoid 2, tanh, swish and gelu_tanh 3, gelu_erf 6,
 * the simple ops correctly rounded but hardswish (three roundings). The
 * common pieces:
 * - e^r: n = round(x log2e) through the magic constant 1.5 * 2^52 (the
 *   FMA's rounding), r = x - n ln2 with ln2 in two parts (n * LN2_HI is
 *   exact: LN2_HI has 21 trailing zero bits), |r| <= ln2/2, then
 *   e^r = 1 + (r + r^2 Q(r)), Q the Taylor terms 1/2! .. 1/13! (the
 *   truncation is below 2^-57 relative there).
 * - 2^n from the magic sum's low bits, in two factors 2^floor(n/2) and
 *   2^ceil(n/2), each normal, so that a denormal or overflowing result
 *   rounds once, at the last multiply.
 * - Clamps put the argument second in vminpd/vmaxpd so NaN passes. */
#include "kernels/gen/gemm_gen.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/builder/builder_int.h"

#define LOG2E 1.44269504088896340736
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define SIGN 0x8000000000000000ull
#define ABS 0x7fffffffffffffffull
/* 1.5 * 2^52 plus an exponent bias: the sum's low bits hold n + bias. */
#define MAGIC_2046 6755399441057790.0 /* 1.5 * 2^52 + 2046 */
#define MAGIC_1023 6755399441056767.0 /* 1.5 * 2^52 + 1023 */
/* exp's clamp: e^710 overflows (ln DBL_MAX = 709.78), e^-746 rounds to 0
 * (below half the smallest denormal, 2^-1075); n stays in [-1076, 1025]. */
#define EXP_HI 710.0
#define EXP_LO -746.0
/* x e^-|z|'s clamp: e^-1416 has n = -2043, both factors of 2^n normal;
 * below it the product is taken as 0 (exact unless |x| > 1e290). */
#define XEXP_LO -1416.0
/* tanh rounds to +-1 from |x| = 19.1 on (1 - tanh x ~ 2e^-2x < 2^-54). */
#define TANH_MAX 20.0
#define GELU_C1 1.5957691216057307117597842397375 /* 2 sqrt(2/pi) */
#define GELU_C2 0.071354816272600469681           /* 2 sqrt(2/pi) 0.044715 */

enum { CMP_EQ_OQ = 0x00, CMP_LT_OQ = 0x11, CMP_GE_OQ = 0x1d, CMP_NLT_UQ = 0x15, CMP_NGT_UQ = 0x1a };

/* Q(r) of e^r = 1 + r + r^2 Q(r): 1/13!, 1/12!, ..., 1/2! (highest first). */
static const double exp_q[12] = {
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
    1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
    1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
};

typedef struct a64 {
    fj_builder *b;
    int avx512;
    fj_reg ca, cb;      /* alpha, beta (broadcast) */
    const fj_reg *t;    /* scratch vectors */
    fj_reg k;           /* AVX-512 scratch mask */
} a64;

#define B (s->b)
#define V(r) fj_vec(s->b, (r))

/* A constant as a full-vector memory operand. */
static fj_opnd cst(a64 *s, double v) {
    double buf[8];
    const uint32_t n = s->avx512 ? 8 : 4;
    for (uint32_t i = 0; i < n; i++) buf[i] = v;
    return fj_const_data(B, buf, n * 8, n * 8, 0);
}
static fj_opnd cbits(a64 *s, uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return cst(s, d);
}
static void ld(a64 *s, fj_reg d, double v) { fj_emit(B, FJ_VMOVUPD, V(d), cst(s, v)); }

/* dst := (p pred q) ? yes : dst, q a memory or register operand, yes
 * anything vmovupd / vblendvps take. AVX2 uses mask as the vector mask. */
static void sel(a64 *s, fj_reg dst, fj_reg p, fj_opnd q, int pred, fj_opnd yes, fj_reg mask) {
    if (s->avx512) {
        fj_emit(B, FJ_VCMPPD, fj_k(s->k), V(p), q, fj_imm(pred));
        fj_emit(B, FJ_VMOVUPD, fj_masked(V(dst), s->k, 0), yes);
        return;
    }
    fj_emit(B, FJ_VCMPPD, V(mask), V(p), q, fj_imm(pred));
    fj_emit(B, FJ_VBLENDVPS, V(dst), V(dst), yes, V(mask));
}

/* x := e^x for x in [EXP_LO, EXP_HI] or NaN. Scratch t0..t2. Without
 * finish, x is left as e^r 2^floor(n/2) (normal) and t0 as 2^ceil(n/2),
 * so that a caller can multiply x by something first and round once. */
static void exp_core(a64 *s, fj_reg x, fj_reg t0, fj_reg t1, fj_reg t2, int finish) {
    ld(s, t0, MAGIC_2046);
    fj_emit(B, FJ_VFMADD231PD, V(t0), V(x), cst(s, LOG2E));
    fj_emit(B, FJ_VSUBPD, V(t1), V(t0), cst(s, MAGIC_2046)); /* n */
    fj_emit(B, FJ_VFNMADD231PD, V(x), V(t1), cst(s, LN2_HI));
    fj_emit(B, FJ_VFNMADD231PD, V(x), V(t1), cst(s, LN2_LO)); /* r */
    ld(s, t1, exp_q[0]);
    for (int i = 1; i < 12; i++) fj_emit(B, FJ_VFMADD213PD, V(t1), V(x), cst(s, exp_q[i]));
    fj_emit(B, FJ_VMULPD, V(t2), V(x), V(x));
    fj_emit(B, FJ_VFMADD213PD, V(t1), V(t2), V(x)); /* r + r^2 Q */
    fj_emit(B, FJ_VADDPD, V(t1), V(t1), cst(s, 1.0));
    /* t0's low bits: m = n + 2046; (t0 >> 1) and t0 - (t0 >> 1) carry
     * floor(m/2) and ceil(m/2), both biased exponents of normal numbers
     * (the magic's upper bits shift out of the left shift) */
    fj_emit(B, FJ_VPSRLQ, V(t2), V(t0), fj_imm(1));
    fj_emit(B, FJ_VPSUBQ, V(t0), V(t0), V(t2));
    fj_emit(B, FJ_VPSLLQ, V(t2), V(t2), fj_imm(52));
    fj_emit(B, FJ_VPSLLQ, V(t0), V(t0), fj_imm(52));
    fj_emit(B, FJ_VMULPD, V(x), V(t1), V(t2));
    if (finish) fj_emit(B, FJ_VMULPD, V(x), V(x), V(t0));
}

static void emit_exp(a64 *s, fj_reg x) {
    const fj_reg *t = s->t;
    ld(s, t[0], EXP_HI);
    fj_emit(B, FJ_VMINPD, V(x), V(t[0]), V(x));
    ld(s, t[0], EXP_LO);
    fj_emit(B, FJ_VMAXPD, V(x), V(t[0]), V(x));
    exp_core(s, x, t[0], t[1], t[2], 1);
}

/* tanh x = copysign(|y|, x), y = em / (em + 2), em = e^(2z) - 1 for
 * z = -min(|x|, 20) <= 0: with w = 2z = n ln2 + r, em = 2^n (r + r^2 Q(r))
 * + (2^n - 1), which keeps its relative accuracy near 0 (n = 0: em is the
 * expm1 polynomial itself) and has no cancellation elsewhere (em <= -0.29
 * once n <= -1). 2^n - 1 is exact for n >= -53; below, y rounds to -1. */
static void emit_tanh(a64 *s, fj_reg x) {
    const fj_reg *t = s->t;
    fj_emit(B, FJ_VANDPS, V(t[3]), V(x), cbits(s, SIGN));
    fj_emit(B, FJ_VORPS, V(x), V(x), cbits(s, SIGN));
    ld(s, t[4], -TANH_MAX);
    fj_emit(B, FJ_VMAXPD, V(x), V(t[4]), V(x)); /* z (NaN stays) */
    fj_emit(B, FJ_VADDPD, V(x), V(x), V(x));    /* w = 2z, exact */
    ld(s, t[0], MAGIC_1023);
    fj_emit(B, FJ_VFMADD231PD, V(t[0]), V(x), cst(s, LOG2E));
    fj_emit(B, FJ_VSUBPD, V(t[1]), V(t[0]), cst(s, MAGIC_1023)); /* n */
    fj_emit(B, FJ_VFNMADD231PD, V(x), V(t[1]), cst(s, LN2_HI));
    fj_emit(B, FJ_VFNMADD231PD, V(x), V(t[1]), cst(s, LN2_LO)); /* r */
    ld(s, t[2], exp_q[0]);
    for (int i = 1; i < 12; i++) fj_emit(B, FJ_VFMADD213PD, V(t[2]), V(x), cst(s, exp_q[i]));
    fj_emit(B, FJ_VMULPD, V(t[4]), V(x), V(x));
    fj_emit(B, FJ_VFMADD213PD, V(t[2]), V(t[4]), V(x)); /* expm1(r) */
    fj_emit(B, FJ_VPSLLQ, V(t[0]), V(t[0]), fj_imm(52)); /* 2^n, n in [-58, 0] */
    fj_emit(B, FJ_VSUBPD, V(t[1]), V(t[0]), cst(s, 1.0));
    fj_emit(B, FJ_VFMADD213PD, V(t[2]), V(t[0]), V(t[1])); /* em */
    fj_emit(B, FJ_VADDPD, V(t[0]), V(t[2]), cst(s, 2.0));
    fj_emit(B, FJ_VDIVPD, V(x), V(t[2]), V(t[0]));         /* y <= 0 */
    fj_emit(B, FJ_VANDPS, V(x), V(x), cbits(s, ABS));
    fj_emit(B, FJ_VORPS, V(x), V(x), V(t[3]));
}

/* log x = k ln2 + log(1 + f), x = m 2^k, m in [0.75, 1.5), f = m - 1
 * (exact), with s = f / (2 + f): log(1 + f) = f - (h - s (h + R(s^2))),
 * h = f^2 / 2, R = 2/3 z + 2/5 z^2 + ... (z = s^2 <= 0.04: 11 terms), and
 * k ln2 in two parts, the high one added last with one rounding. k and m
 * come from the bits: u = bits(x) - bits(0.75) + 2^63, k + 2048 = u >> 52
 * (made a double by the 2^52 trick), m's bits = (u & mantissa) +
 * bits(0.75). Denormal x is scaled by 2^52 first. */
static const double log_l[11] = {
    2.0 / 23, 2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15, 2.0 / 13,
    2.0 / 11, 2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3,
};
static void emit_log(a64 *s, fj_reg x) {
    const fj_reg *t = s->t;
    fj_emit(B, FJ_VMULPD, V(t[1]), V(x), cst(s, 4503599627370496.0)); /* x 2^52 */
    fj_emit(B, FJ_VMOVUPD, V(t[2]), V(x));
    sel(s, t[2], x, cst(s, DBL_MIN), CMP_LT_OQ, V(t[1]), t[0]);
    fj_emit(B, FJ_VXORPS, V(t[3]), V(t[3]), V(t[3]));
    sel(s, t[3], x, cst(s, DBL_MIN), CMP_LT_OQ, cst(s, 52.0), t[0]);
    fj_emit(B, FJ_VPSUBQ, V(t[1]), V(t[2]), cbits(s, 0xbfe8000000000000ull)); /* u */
    fj_emit(B, FJ_VANDPS, V(t[2]), V(t[1]), cbits(s, 0x000fffffffffffffull));
    fj_emit(B, FJ_VPSUBQ, V(t[2]), V(t[2]), cbits(s, 0xc018000000000000ull)); /* m */
    fj_emit(B, FJ_VPSRLQ, V(t[1]), V(t[1]), fj_imm(52));
    fj_emit(B, FJ_VORPS, V(t[1]), V(t[1]), cbits(s, 0x4330000000000000ull));
    fj_emit(B, FJ_VSUBPD, V(t[1]), V(t[1]), cst(s, 4503599627372544.0)); /* 2^52 + 2048 */
    fj_emit(B, FJ_VSUBPD, V(t[1]), V(t[1]), V(t[3]));                     /* k */
    fj_emit(B, FJ_VSUBPD, V(t[2]), V(t[2]), cst(s, 1.0));                 /* f */
    fj_emit(B, FJ_VADDPD, V(t[3]), V(t[2]), cst(s, 2.0));
    fj_emit(B, FJ_VDIVPD, V(t[3]), V(t[2]), V(t[3]));                     /* s */
    fj_emit(B, FJ_VMULPD, V(t[4]), V(t[3]), V(t[3]));                     /* z */
    ld(s, t[5], log_l[0]);
    for (int i = 1; i < 11; i++) fj_emit(B, FJ_VFMADD213PD, V(t[5]), V(t[4]), cst(s, log_l[i]));
    fj_emit(B, FJ_VMULPD, V(t[5]), V(t[5]), V(t[4]));                     /* R */
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[2]), V(t[2]));
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[0]), cst(s, 0.5));                 /* h */
    fj_emit(B, FJ_VADDPD, V(t[5]), V(t[5]), V(t[0]));
    fj_emit(B, FJ_VMULPD, V(t[4]), V(t[1]), cst(s, LN2_LO));
    fj_emit(B, FJ_VFMADD213PD, V(t[5]), V(t[3]), V(t[4]));  /* s (h + R) + k LN2_LO */
    fj_emit(B, FJ_VSUBPD, V(t[0]), V(t[0]), V(t[5]));
    fj_emit(B, FJ_VSUBPD, V(t[2]), V(t[2]), V(t[0]));
    fj_emit(B, FJ_VFMADD231PD, V(t[2]), V(t[1]), cst(s, LN2_HI));
    /* x < 0 or NaN: NaN; +-0: -inf; +inf: +inf */
    sel(s, t[2], x, cst(s, 0.0), CMP_NGT_UQ, cst(s, NAN), t[0]);
    sel(s, t[2], x, cst(s, 0.0), CMP_EQ_OQ, cst(s, -INFINITY), t[0]);
    sel(s, t[2], x, cst(s, INFINITY), CMP_EQ_OQ, cst(s, INFINITY), t[0]);
    fj_emit(B, FJ_VMOVUPD, V(x), V(t[2]));
}

/* e := e^-|z| (in (0, 1]: nothing overflows) and d := 1 + e. Scratch t[1..3]. */
static void sig_core(a64 *s, fj_reg z, fj_reg e, fj_reg d) {
    const fj_reg *t = s->t;
    fj_emit(B, FJ_VORPS, V(e), V(z), cbits(s, SIGN));
    ld(s, t[1], EXP_LO);
    fj_emit(B, FJ_VMAXPD, V(e), V(t[1]), V(e));
    exp_core(s, e, t[1], t[2], t[3], 1);
    fj_emit(B, FJ_VADDPD, V(d), V(e), cst(s, 1.0));
}

/* sigmoid x = 1 / (1 + e) for x >= 0, e / (1 + e) below, e = e^-|x|: no
 * cancellation on either side, denormal results included. */
static void emit_sigmoid(a64 *s, fj_reg x) {
    const fj_reg *t = s->t;
    sig_core(s, x, t[0], t[1]);
    sel(s, t[0], x, cst(s, 0.0), CMP_GE_OQ, cst(s, 1.0), t[2]);
    fj_emit(B, FJ_VDIVPD, V(x), V(t[0]), V(t[1]));
}

/* x sigmoid(z) = x / (1 + e) for z >= 0, x e / (1 + e) below (e = e^-|z|),
 * z = x * c for swish (c = alpha) or the gelu_tanh argument v = x (C1 +
 * C2 x^2). x is clamped to +-DBL_MAX for z and x e so that an infinite x
 * gives the limit (0, or x itself), not inf * 0. x e is x times e's
 * first (normal) factor, then the second: one rounding even where e
 * alone would be denormal; its own clamp is XEXP_LO (zero below), e's
 * for d is EXP_LO. */
static void emit_xsig(a64 *s, fj_reg x, int gelu) {
    const fj_reg *t = s->t;
    fj_reg xc = t[4], m = s->avx512 ? t[4] : t[5];
    ld(s, t[0], -DBL_MAX);
    fj_emit(B, FJ_VMAXPD, V(xc), V(t[0]), V(x));
    ld(s, t[0], DBL_MAX);
    fj_emit(B, FJ_VMINPD, V(xc), V(t[0]), V(xc));
    if (gelu) {
        fj_emit(B, FJ_VMULPD, V(t[0]), V(xc), V(xc));
        ld(s, t[1], GELU_C1);
        fj_emit(B, FJ_VFMADD231PD, V(t[1]), V(t[0]), cst(s, GELU_C2));
        fj_emit(B, FJ_VMULPD, V(t[0]), V(xc), V(t[1])); /* v */
    } else {
        fj_emit(B, FJ_VMULPD, V(t[0]), V(xc), V(s->ca)); /* z */
    }
    /* z's sign, before z's register becomes e */
    if (s->avx512) fj_emit(B, FJ_VCMPPD, fj_k(s->k), V(t[0]), cst(s, 0.0), fj_imm(CMP_LT_OQ));
    else fj_emit(B, FJ_VCMPPD, V(m), V(t[0]), cst(s, 0.0), fj_imm(CMP_LT_OQ));
    /* lanes where x e is 0: z < XEXP_LO (AVX-512: z kept for later, the
     * one mask register holds z's sign until then) */
    if (s->avx512) fj_emit(B, FJ_VMOVUPD, V(t[5]), V(t[0]));
    else fj_emit(B, FJ_VCMPPD, V(t[6]), V(t[0]), cst(s, XEXP_LO), fj_imm(CMP_LT_OQ));
    fj_emit(B, FJ_VORPS, V(t[0]), V(t[0]), cbits(s, SIGN)); /* -|z| */
    ld(s, t[1], XEXP_LO);
    fj_emit(B, FJ_VMAXPD, V(t[0]), V(t[1]), V(t[0]));
    exp_core(s, t[0], t[1], t[2], t[3], 0);
    fj_emit(B, FJ_VMULPD, V(t[2]), V(t[0]), V(t[1]));     /* e (0 below EXP_LO) */
    fj_emit(B, FJ_VADDPD, V(t[3]), V(t[2]), cst(s, 1.0)); /* d */
    fj_emit(B, FJ_VMULPD, V(t[0]), V(xc), V(t[0]));
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[0]), V(t[1])); /* x e */
    if (s->avx512) {
        fj_emit(B, FJ_VMOVUPD, fj_masked(V(x), s->k, 0), V(t[0]));
        fj_emit(B, FJ_VCMPPD, fj_k(s->k), V(t[5]), cst(s, XEXP_LO), fj_imm(CMP_NLT_UQ));
        fj_emit(B, FJ_VMOVUPD, fj_masked(V(x), s->k, 1), V(x));
    } else {
        fj_emit(B, FJ_VANDNPS, V(t[0]), V(t[6]), V(t[0]));
        fj_emit(B, FJ_VBLENDVPS, V(x), V(x), V(t[0]), V(m));
    }
    fj_emit(B, FJ_VDIVPD, V(x), V(x), V(t[3]));
}

/* gelu_erf x = x Phi(x) = x - x H(|x|) for x >= 0, x H(|x|) below, with
 * H(a) = erfc(a / sqrt2) / 2 = e^(-a^2/2) t P(s): t = 3 / (3 + a), s =
 * 2.15 t - 1.15 in [-1, 1] over a in [0, 40], P a degree-25 Chebyshev fit
 * of H e^(a^2/2) / t (under 1e-18 absolute: P is in [0.08, 0.5]). a^2/2
 * is split exactly (hi + lo, an FMA) so that e^-(a^2/2) keeps its
 * relative accuracy up to a = 40 (e^-hi (1 - lo)); x is clamped to +-40,
 * where H has underflowed. x H is x P t (1 - lo) times e^-hi's first
 * factor, then its second (one rounding for denormal results). */
static const double gelu_p[26] = {
    -4.5483113981102796e-11, -5.005622875044899e-11,  5.75988499885203e-10,
    -6.76797758408589e-11,   -2.9716898607948704e-09, 3.805284969099194e-09,
    5.539943392419745e-09,   -2.3300677840566067e-08, 2.3401125470081732e-08,
    5.2993989036552963e-08,  -2.1707620971107894e-07, 1.6947836545442423e-07,
    7.743946468984105e-07,   -2.271301690659561e-06,  -3.552106711913469e-07,
    1.3383053268398097e-05,  -1.6923337015293917e-05, -6.275185085851099e-05,
    0.0001765787046535561,   0.000323845338968566,    -0.0014954814985190439,
    -0.0031969227493255695,  0.01180919672136467,     0.06910578990714626,
    0.16809383195237299,     0.2552512935927586,
};
static void emit_gelu_erf(a64 *s, fj_reg x) {
    const fj_reg *t = s->t;
    ld(s, t[4], -40.0);
    fj_emit(B, FJ_VMAXPD, V(t[4]), V(t[4]), V(x));
    ld(s, t[0], 40.0);
    fj_emit(B, FJ_VMINPD, V(t[4]), V(t[0]), V(t[4]));            /* xc */
    fj_emit(B, FJ_VANDPS, V(t[5]), V(t[4]), cbits(s, ABS));      /* a */
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[5]), V(t[5]));             /* fl(a^2) */
    fj_emit(B, FJ_VMOVUPD, V(t[1]), V(t[0]));
    fj_emit(B, FJ_VFNMADD231PD, V(t[1]), V(t[5]), V(t[5]));       /* fl(a^2) - a^2 */
    fj_emit(B, FJ_VMULPD, V(t[1]), V(t[1]), cst(s, 0.5));         /* -lo */
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[0]), cst(s, -0.5));        /* -hi */
    fj_emit(B, FJ_VADDPD, V(t[2]), V(t[5]), cst(s, 3.0));
    ld(s, t[3], 3.0);
    fj_emit(B, FJ_VDIVPD, V(t[2]), V(t[3]), V(t[2]));             /* t */
    ld(s, t[3], -1.15);
    fj_emit(B, FJ_VFMADD231PD, V(t[3]), V(t[2]), cst(s, 2.15));   /* s */
    ld(s, t[5], gelu_p[0]);
    for (int i = 1; i < 26; i++) fj_emit(B, FJ_VFMADD213PD, V(t[5]), V(t[3]), cst(s, gelu_p[i]));
    fj_emit(B, FJ_VMULPD, V(t[5]), V(t[5]), V(t[2]));             /* t P */
    fj_emit(B, FJ_VFMADD231PD, V(t[5]), V(t[5]), V(t[1]));        /* t P (1 - lo) */
    fj_emit(B, FJ_VMULPD, V(t[5]), V(t[5]), V(t[4]));             /* xc t P (1 - lo) */
    exp_core(s, t[0], t[1], t[2], t[3], 0);
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[0]), V(t[5]));
    fj_emit(B, FJ_VMULPD, V(t[0]), V(t[0]), V(t[1]));             /* x H */
    fj_emit(B, FJ_VSUBPD, V(t[1]), V(x), V(t[0]));
    sel(s, t[0], x, cst(s, 0.0), CMP_GE_OQ, V(t[1]), t[2]);
    fj_emit(B, FJ_VMOVUPD, V(x), V(t[0]));
}

int kg_gemm_act64(int act, double alpha) {
    (void)alpha;
    return act > 0 && act < FJ_ELT__COUNT;
}

int kg_act64_vregs(int act, int avx512) {
    switch (act) {
    case FJ_ELT_ABS: case FJ_ELT_SQRT: case FJ_ELT_SQUARE: case FJ_ELT_LINEAR:
    case FJ_ELT_CLIP: return 0;
    case FJ_ELT_RELU: case FJ_ELT_LEAKY_RELU: case FJ_ELT_HARDSWISH: return 2;
    case FJ_ELT_EXP: return 3;
    case FJ_ELT_SIGMOID: return 4;
    case FJ_ELT_TANH: return 5;
    case FJ_ELT_LOG: case FJ_ELT_GELU_ERF: return 6;
    default: return avx512 ? 6 : 7; /* swish, gelu_tanh */
    }
}

int kg_act64_kregs(int act, int avx512) {
    if (!avx512) return 0;
    return act == FJ_ELT_SIGMOID || act == FJ_ELT_SWISH || act == FJ_ELT_GELU_TANH ||
           act == FJ_ELT_LOG || act == FJ_ELT_GELU_ERF;
}

void kg_act64_emit(fj_builder *b, int avx512, int act, float key, fj_reg x, fj_reg ca, fj_reg cb,
                   const fj_reg *t, const fj_reg *k) {
    a64 st = {.b = b, .avx512 = avx512, .ca = ca, .cb = cb, .t = t, .k = k[0]};
    a64 *s = &st;
    switch (act) {
    case FJ_ELT_RELU:
    case FJ_ELT_LEAKY_RELU:
        /* x > 0 ? x : alpha*x: relu with alpha 0 is max(0, x) (0 * -inf
         * would be NaN; ca holds 0); for alpha <= 1 it is max(alpha*x, x),
         * for alpha > 1 min(alpha*x, x); a negative alpha (key < 0) takes
         * alpha * min(x, 0) + max(x, 0), one rounding, zeros' signs as
         * alpha * x gives them. */
        if (key == 0) {
            fj_emit(B, FJ_VMAXPD, V(x), V(ca), V(x));
        } else if (key < 0) {
            fj_emit(B, FJ_VXORPS, V(t[0]), V(t[0]), V(t[0]));
            fj_emit(B, FJ_VMINPD, V(t[1]), V(t[0]), V(x));
            fj_emit(B, FJ_VMAXPD, V(x), V(t[0]), V(x));
            fj_emit(B, FJ_VFMADD231PD, V(x), V(t[1]), V(ca));
        } else {
            fj_emit(B, FJ_VMULPD, V(t[0]), V(x), V(ca));
            fj_emit(B, key <= 1 ? FJ_VMAXPD : FJ_VMINPD, V(x), V(t[0]), V(x));
        }
        break;
    case FJ_ELT_CLIP:
        fj_emit(B, FJ_VMAXPD, V(x), V(ca), V(x));
        fj_emit(B, FJ_VMINPD, V(x), V(cb), V(x));
        break;
    case FJ_ELT_LINEAR:
        fj_emit(B, FJ_VFMADD213PD, V(x), V(ca), V(cb)); /* one rounding */
        break;
    case FJ_ELT_SQUARE: fj_emit(B, FJ_VMULPD, V(x), V(x), V(x)); break;
    case FJ_ELT_ABS: fj_emit(B, FJ_VANDPS, V(x), V(x), cbits(s, ABS)); break;
    case FJ_ELT_SQRT: fj_emit(B, FJ_VSQRTPD, V(x), V(x)); break;
    case FJ_ELT_HARDSWISH:
        /* max(x, -3) (min(max(x + 3, 0), 6) / 6): x clamped below so
         * that -inf gives 0 (the limit), not -inf * 0; the division first
         * so that x >= 3 is x exactly (no overflow near DBL_MAX) */
        fj_emit(B, FJ_VADDPD, V(t[0]), V(x), cst(s, 3.0));
        fj_emit(B, FJ_VXORPS, V(t[1]), V(t[1]), V(t[1]));
        fj_emit(B, FJ_VMAXPD, V(t[0]), V(t[1]), V(t[0]));
        ld(s, t[1], 6.0);
        fj_emit(B, FJ_VMINPD, V(t[0]), V(t[1]), V(t[0]));
        ld(s, t[1], -3.0);
        fj_emit(B, FJ_VDIVPD, V(t[0]), V(t[0]), cst(s, 6.0));
        fj_emit(B, FJ_VMAXPD, V(x), V(t[1]), V(x));
        fj_emit(B, FJ_VMULPD, V(x), V(x), V(t[0]));
        break;
    case FJ_ELT_EXP: emit_exp(s, x); break;
    case FJ_ELT_LOG: emit_log(s, x); break;
    case FJ_ELT_TANH: emit_tanh(s, x); break;
    case FJ_ELT_SIGMOID: emit_sigmoid(s, x); break;
    case FJ_ELT_SWISH: emit_xsig(s, x, 0); break;
    case FJ_ELT_GELU_TANH: emit_xsig(s, x, 1); break;
    case FJ_ELT_GELU_ERF: emit_gelu_erf(s, x); break;
    default: break;
    }
}
