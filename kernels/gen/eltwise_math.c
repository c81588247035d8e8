/* eltwise_math.c: exp, log, tanh, sigmoid, swish, gelu (tanh and erf) for
 * the eltwise emitter, AVX-512 and AVX2.
 *
 * Accuracy (measured by tests/test_eltwise.c against double libm over the
 * normal range): exp, log, tanh, sigmoid within 2 ulp, swish within 3;
 * gelu within 1e-6 absolute (x <= 12) and 3 ulp relative above (the
 * public header lists the measured maxima). Infinities give
 * the limits (exp(-inf) = 0, log(0) = -inf, tanh(+-inf) = +-1, gelu(-inf) =
 * -0 ...), NaN gives NaN, overflow and underflow round as libm does
 * (denormal results included, through vscalefps or a two-step scale).
 *
 * Common pieces:
 * - exp(r): n = round(x / ln2), r = x - n*ln2 with ln2 split in two (Cody-
 *   Waite; n*LN2_HI is exact for |n| < 2^9), |r| <= ln2/2, then
 *   e^r = 1 + r + r^2 Q(r) with Q a degree-4 near-minimax fit (0.16 ulp;
 *   degree 3 = 6.8 ulp, too coarse for exp itself but fine for gelu), then
 *   scaled by 2^n.
 * - Clamps put the argument second in vminps/vmaxps so NaN passes through,
 *   and keep infinities out of the reduction (inf - inf would be NaN).
 * - 1/d: vrcp14ps (2^-14) and one Newton step (2^-28) on AVX-512; AVX2's
 *   vrcpps (2^-11.5) would need two steps, so it divides (vdivps), as
 *   swish does on both (see there).
 * - n = round(y) on AVX-512 through the magic constant 1.5 * 2^23 (one FMA
 *   and one subtraction; vrndscaleps is two uops and twice the latency). */
#include "kernels/gen/eltwise_int.h"

#include <float.h>
#include <math.h>

#define LOG2E 1.44269504088896341f
/* ln2 = LN2_HI + LN2_LO; LN2_HI has 9 trailing zero bits so n * LN2_HI is
 * exact, and LN2_LO > 0 so that log(0) = -inf * LN2_HI + -inf * LN2_LO
 * stays -inf instead of -inf + inf. */
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723e-6f
#define LN2 0.693147180559945309f
#define SIGN 0x80000000u
#define ABS 0x7fffffffu
/* exp clamp: above 89, e^x overflows anyway (ln FLT_MAX = 88.72); below
 * -104 it rounds to 0 (e^-104 < 2^-150, half the smallest denormal). The
 * scaled exponent n then stays in [-150, 128]. */
#define EXP_HI 89.0f
#define EXP_LO -104.0f

/* Q of e^r = 1 + r + r^2 Q(r) on |r| <= ln2/2, highest degree first. */
static const float exp_q4[5] = {1.392617589e-03f, 8.363173343e-03f, 4.166655615e-02f,
                                1.666657776e-01f, 5.000000000e-01f};
static const float exp_q3[4] = {8.357199840e-03f, 4.183380306e-02f, 1.666663140e-01f,
                                4.999974966e-01f};
/* P of log(1+f) = f + f^2 P(f) on f in [-0.25, 0.5) (degree 8: 0.19 ulp;
 * degree 7 would be 1.35 ulp). */
static const float log_p[9] = {-4.738242552e-02f, 1.062562913e-01f, -1.312287748e-01f,
                               1.443845630e-01f, -1.664764434e-01f, 1.999359280e-01f,
                               -2.500015497e-01f, 3.333339691e-01f, -5.000000000e-01f};
/* Abramowitz & Stegun 7.1.26: erfc(z) = t P(t) e^{-z^2}, t = 1/(1 + p z),
 * |error| <= 1.5e-7; coefficients halved (gelu needs erfc / 2). */
#define AS_P 0.3275911f
static const float as_a[5] = {0.5f * 1.061405429f, 0.5f * -1.453152027f, 0.5f * 1.421413741f,
                              0.5f * -0.284496736f, 0.5f * 0.254829592f};

#define B (s->b)
#define V(r) elt_v(s, (r))
#define C(f) elt_cf(s, (f))
#define CR(f) elt_crf(s, (f))
#define CB(u) elt_c(s, (u))

/* acc := polynomial c[0] r^(n-1) + ... + c[n-1] (Horner, one FMA a term). */
static void horner(kg_elt_state *s, fj_reg acc, fj_reg r, const float *c, int n) {
    elt_load(s, acc, elt_bits(c[1]));
    elt_emit(s, FJ_VFMADD231PS, V(acc), V(r), C(c[0]));
    for (int i = 2; i < n; i++) elt_emit(s, FJ_VFMADD213PS, V(acc), V(r), C(c[i]));
}

/* The e^r polynomial: 1 + r + r^2 Q(r), Q of degree qdeg (3 or 4). If neg,
 * r holds -r (the sign is folded into the coefficients). */
static void exp_poly(kg_elt_state *s, fj_reg acc, fj_reg r, int qdeg, int neg) {
    float c[7];
    const float *q = qdeg == 4 ? exp_q4 : exp_q3;
    int n = qdeg + 3;
    for (int i = 0; i <= qdeg; i++) c[i] = q[i];
    c[qdeg + 1] = 1.0f;
    c[qdeg + 2] = 1.0f;
    /* c[i] multiplies r^(n-1-i): flip odd powers for -r */
    if (neg)
        for (int i = 0; i < n; i++)
            if ((n - 1 - i) & 1) c[i] = -c[i];
    horner(s, acc, r, c, n);
}

/* Scales: AVX2 2^n from the bits of t = x*log2e + magic, whose low bits hold
 * n + bias. One factor (bias 127) when n stays in [-126, 127]; otherwise
 * two (bias 254: 2^floor(n/2) * 2^ceil(n/2), each normal), so that results
 * that are denormal or overflow round once, at the last multiply. */
#define MAGIC_127 12583039.0f /* 1.5 * 2^23 + 127 */
#define MAGIC_254 12583166.0f /* 1.5 * 2^23 + 254 */

/* x := e^x for x in [EXP_LO, EXP_HI] (or NaN). neg: compute e^-x instead.
 * qdeg 4 and two-part ln2 for full accuracy; qdeg 3 / one-part ln2 when an
 * absolute error of ~1e-7 is enough (gelu). wide: n may leave [-126, 127].
 * Scratch: t0, t1 (AVX-512), t0..t2 (AVX2). */
static void exp_core(kg_elt_state *s, fj_reg x, int neg, int qdeg, int split, int wide, int t) {
    const float l2e = neg ? -LOG2E : LOG2E;
    fj_reg T0 = elt_t(s, t), T1 = elt_t(s, t + 1);
    /* With neg, x holds y and we want e^-y: n = round(-y log2e),
     * r' = y + n ln2 = -r. */
    const fj_op red = neg ? FJ_VFMADD231PS : FJ_VFNMADD231PS;
    if (s->avx512) {
        /* n = round(x log2e) through the magic constant (one FMA and a
         * subtraction: cheaper than vrndscaleps, same nearest-even n) */
        elt_load(s, T0, elt_bits(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T0), V(x), C(l2e));
        elt_emit(s, FJ_VSUBPS, V(T0), V(T0), C(MAGIC_127));
        elt_emit(s, red, V(x), V(T0), C(split ? LN2_HI : LN2));
        if (split) elt_emit(s, red, V(x), V(T0), C(LN2_LO));
        exp_poly(s, T1, x, qdeg, neg);
        elt_emit(s, FJ_VSCALEFPS, V(x), V(T1), V(T0));
        return;
    }
    fj_reg T2 = elt_t(s, t + 2);
    const float magic = wide ? MAGIC_254 : MAGIC_127;
    elt_load(s, T0, elt_bits(magic));
    elt_emit(s, FJ_VFMADD231PS, V(T0), V(x), C(l2e)); /* rounds x log2e to an integer */
    elt_emit(s, FJ_VSUBPS, V(T1), V(T0), C(magic));   /* n */
    elt_emit(s, red, V(x), V(T1), C(split ? LN2_HI : LN2));
    if (split) elt_emit(s, red, V(x), V(T1), C(LN2_LO));
    exp_poly(s, T1, x, qdeg, neg);
    if (wide) {
        /* low 9 bits of T0: n + 254; (T0 >> 1): floor(n/2) + 127, and
         * T0 - (T0 >> 1): ceil(n/2) + 127 (the magic's upper bits shift out) */
        elt_emit(s, FJ_VPSRLD, V(T2), V(T0), fj_imm(1));
        elt_emit(s, FJ_VPSUBD, V(T0), V(T0), V(T2));
        elt_emit(s, FJ_VPSLLD, V(T2), V(T2), fj_imm(23));
        elt_emit(s, FJ_VPSLLD, V(T0), V(T0), fj_imm(23));
        elt_emit(s, FJ_VMULPS, V(x), V(T1), V(T2));
        elt_emit(s, FJ_VMULPS, V(x), V(x), V(T0));
    } else {
        elt_emit(s, FJ_VPSLLD, V(T0), V(T0), fj_imm(23));
        elt_emit(s, FJ_VMULPS, V(x), V(T1), V(T0));
    }
}

/* q := 1 / d to ~2^-28 (AVX-512 only; d is clobbered). */
static void recip(kg_elt_state *s, fj_reg q, fj_reg d) {
    elt_emit(s, FJ_VRCP14PS, V(q), V(d));
    elt_emit(s, FJ_VFMADD213PS, V(d), V(q), C(-1.0f)); /* d q - 1 */
    elt_emit(s, FJ_VFNMADD231PS, V(q), V(q), V(d));    /* q - q (d q - 1) */
}

/* ---- exp, log ------------------------------------------------------------- */

static void emit_exp(kg_elt_state *s, fj_reg x) {
    elt_emit(s, FJ_VMINPS, V(x), CR(EXP_HI), V(x));
    elt_emit(s, FJ_VMAXPS, V(x), CR(EXP_LO), V(x));
    exp_core(s, x, 0, 4, 1, 1, 0);
}

/* log x = k ln2 + log(m), x = m 2^k, m in [0.75, 1.5), f = m - 1 exact;
 * log(1+f) = f + f^2 P(f). Summed as (f + k LN2_HI) + (f^2 P + k LN2_LO):
 * the first sum is exact or one rounding, so results near 0 (x near 1, or
 * k = -1 with m near 1.5) keep their relative accuracy. */
static void emit_log(kg_elt_state *s, fj_reg x) {
    fj_reg T0 = elt_t(s, 0), T1 = elt_t(s, 1), T2 = elt_t(s, 2);
    if (s->avx512) {
        fj_reg K = elt_k(s, 0);
        /* imm 0x0b: interval [0.75, 1.5), NaN for a negative sign. Both
         * instructions take denormals as they are (no DAZ). */
        elt_emit(s, FJ_VGETMANTPS, V(T0), V(x), fj_imm(0x0b));
        elt_emit(s, FJ_VGETEXPPS, V(T1), V(x));
        elt_emit(s, FJ_VCMPPS, fj_k(K), V(T0), C(1.0f), fj_imm(ELT_CMP_LT_OQ));
        elt_emit(s, FJ_VADDPS, fj_masked(V(T1), K, 0), V(T1), C(1.0f)); /* m < 1: x = m 2^(e+1) */
        elt_emit(s, FJ_VSUBPS, V(T0), V(T0), C(1.0f));
        horner(s, x, T0, log_p, 9);
        elt_emit(s, FJ_VMULPS, V(T2), V(T0), V(T0));
        elt_emit(s, FJ_VMULPS, V(x), V(x), V(T2));
        elt_emit(s, FJ_VFMADD231PS, V(x), V(T1), C(LN2_LO));
        elt_emit(s, FJ_VFMADD231PS, V(T0), V(T1), C(LN2_HI));
        /* +-0: getexp -inf, getmant +-1: -inf; +inf: inf + 0: inf */
        elt_emit(s, FJ_VADDPS, V(x), V(T0), V(x));
        return;
    }
    fj_reg T3 = elt_t(s, 3);
    /* Denormal inputs: scale by 2^23 first, subtract 23 from k. */
    elt_emit(s, FJ_VCMPPS, V(T0), V(x), C(FLT_MIN), fj_imm(ELT_CMP_LT_OQ));
    elt_emit(s, FJ_VMULPS, V(T1), V(x), C(8388608.0f));
    elt_emit(s, FJ_VBLENDVPS, V(T2), V(x), V(T1), V(T0));
    elt_emit(s, FJ_VANDPS, V(T0), V(T0), C(23.0f));
    /* u = bits - bits(0.75) + 2^31: the sign flip lets a logical shift give
     * k + 256; the low 23 bits are the mantissa relative to [0.75, 1.5). */
    elt_emit(s, FJ_VPADDD, V(T1), V(T2), CB(0x40c00000u));
    elt_emit(s, FJ_VANDPS, V(T2), V(T1), CB(0x007fffffu));
    elt_emit(s, FJ_VPADDD, V(T2), V(T2), CB(0x3f400000u));
    elt_emit(s, FJ_VPSRLD, V(T1), V(T1), fj_imm(23));
    elt_emit(s, FJ_VCVTDQ2PS, V(T1), V(T1));
    elt_emit(s, FJ_VADDPS, V(T0), V(T0), C(256.0f));
    elt_emit(s, FJ_VSUBPS, V(T1), V(T1), V(T0)); /* k */
    elt_emit(s, FJ_VSUBPS, V(T2), V(T2), C(1.0f)); /* f */
    horner(s, T0, T2, log_p, 9);
    elt_emit(s, FJ_VMULPS, V(T3), V(T2), V(T2));
    elt_emit(s, FJ_VMULPS, V(T0), V(T0), V(T3));
    elt_emit(s, FJ_VFMADD231PS, V(T0), V(T1), C(LN2_LO));
    elt_emit(s, FJ_VFMADD231PS, V(T2), V(T1), C(LN2_HI));
    elt_emit(s, FJ_VADDPS, V(T0), V(T2), V(T0));
    /* Specials: x < 0 or NaN -> NaN, +-0 -> -inf, +inf -> +inf. */
    elt_emit(s, FJ_VCMPPS, V(T1), V(x), C(0.0f), fj_imm(ELT_CMP_NGT_UQ));
    elt_emit(s, FJ_VBLENDVPS, V(T0), V(T0), C(NAN), V(T1));
    elt_emit(s, FJ_VCMPPS, V(T1), V(x), C(0.0f), fj_imm(ELT_CMP_EQ_OQ));
    elt_emit(s, FJ_VBLENDVPS, V(T0), V(T0), C(-INFINITY), V(T1));
    elt_emit(s, FJ_VCMPPS, V(T1), V(x), C(INFINITY), fj_imm(ELT_CMP_EQ_OQ));
    elt_emit(s, FJ_VBLENDVPS, V(x), V(T0), C(INFINITY), V(T1));
}

/* ---- tanh ------------------------------------------------------------------- */

/* AVX2: tanh x = g / (g + 1), g = expm1(2x) / 2: no cancellation near 0 (expm1
 * keeps its relative accuracy) and no blend between formulas. x is clamped
 * to +-10 (tanh rounds to +-1 from 9.01 on), so 2^n stays in [2^-29, 2^29].
 * With r = 2x - n ln2 and h = r/2 = x - n ln2/2:
 *     g = 2^n qh + (2^n - 1)/2,  qh = expm1(r)/2 = h + h^2 Q''(h)
 * (the factors of 2 folded into Q''). The rounding of d = g + 1 would cost
 * up to 1 ulp (d sits in a coarser binade than the result), so its error
 * d_lo = g - (d - 1) (exact: Fast2Sum, g > -1/2) goes into one Newton
 * correction of the quotient: q = q0 + (g - q0 d - q0 d_lo) / d.
 *
 * AVX-512: tanh x = copysign(|y|, x), y = tanh z = em / (em + 2) for
 * z = -min(|x|, 10) <= 0, em = e^(2z) - 1 in (-1, 0]:
 *     n = round(2z log2e), t = z - n ln2/2 (one-part ln2: the error of
 *     n ln2 is scaled by e^(2z) <= 2^-n on the way to the result),
 *     e^(2t) - 1 = t P(t), P of degree 5 (2^-26 relative on |t| <= ln2/4),
 *     em = 2^n t P(t) + (2^n - 1)   (2^n - 1 exact, one rounding).
 * The quotient: q0 = em r (r = vrcp14ps(em + 2)), then one correction
 * with the residual em - q0 (em + 2) computed without rounding em + 2:
 * em - 2 q0 is exact (Sterbenz: 2 q0 / em is in [1, 2)), then - q0 em.
 * Max error 1.85 ulp (every float checked against double tanh). */
static const float tanh_p[6] = {8.884808421e-02f, 2.677284777e-01f, 6.666752100e-01f,
                                1.333323479e+00f, 1.999999881e+00f, 2.0f};

static void emit_tanh512(kg_elt_state *s, fj_reg x) {
    fj_reg T0 = elt_t(s, 0), T1 = elt_t(s, 1), T2 = elt_t(s, 2), T3 = elt_t(s, 3);
    elt_emit(s, FJ_VORPS, V(T0), V(x), CB(SIGN));
    elt_emit(s, FJ_VMAXPS, V(T0), CR(-10.0f), V(T0));              /* z (NaN stays) */
    elt_load(s, T1, elt_bits(MAGIC_127));
    elt_emit(s, FJ_VFMADD231PS, V(T1), V(T0), C(2.0f * LOG2E));
    elt_emit(s, FJ_VPSLLD, V(T2), V(T1), fj_imm(23));               /* 2^n */
    elt_emit(s, FJ_VSUBPS, V(T1), V(T1), C(MAGIC_127));             /* n */
    elt_emit(s, FJ_VFMADD231PS, V(T0), V(T1), C(-0.5f * LN2));      /* t */
    horner(s, T1, T0, tanh_p, 6);                                   /* P(t) */
    elt_emit(s, FJ_VMULPS, V(T0), V(T0), V(T2));                    /* 2^n t */
    elt_emit(s, FJ_VSUBPS, V(T2), V(T2), C(1.0f));                  /* 2^n - 1 */
    elt_emit(s, FJ_VFMADD213PS, V(T1), V(T0), V(T2));               /* em */
    elt_emit(s, FJ_VADDPS, V(T0), V(T1), C(2.0f));
    elt_emit(s, FJ_VRCP14PS, V(T2), V(T0));                         /* r */
    elt_emit(s, FJ_VMULPS, V(T0), V(T1), V(T2));                    /* q0 */
    elt_emit(s, FJ_VMOVAPS, V(T3), V(T1));
    elt_emit(s, FJ_VFNMADD231PS, V(T3), V(T0), C(2.0f));            /* em - 2 q0, exact */
    elt_emit(s, FJ_VFNMADD231PS, V(T3), V(T0), V(T1));              /* residual */
    elt_emit(s, FJ_VFMADD213PS, V(T3), V(T2), V(T0));               /* y */
    /* x's sign bit, y's other bits (|y|: y <= 0): imm 0xe4 = SIGN ? x : y.
     * One instruction, and right for zeros: y is +0 when x is +-0. */
    elt_emit(s, FJ_VPTERNLOGD, V(x), V(T3), CB(SIGN), fj_imm(0xe4));
}

static void emit_tanh(kg_elt_state *s, fj_reg x) {
    if (s->avx512) {
        emit_tanh512(s, x);
        return;
    }
    fj_reg T0 = elt_t(s, 0), T1 = elt_t(s, 1), T2 = elt_t(s, 2), T3 = elt_t(s, 3);
    fj_reg T4 = elt_t(s, 4);
    float c[5];
    /* x's sign, put back at the end: the result has it anyway except at
     * -0, where qh = h^2 Q'' + h rounds -0 to +0. */
    elt_emit(s, FJ_VANDPS, V(T4), V(x), CB(SIGN));
    /* Q''(h) = Q'(h)/2 = sum 2 2^i q_i h^i */
    for (int i = 0; i < 5; i++) c[i] = exp_q4[i] * (float)(2 << (4 - i));
    elt_emit(s, FJ_VMINPS, V(x), CR(10.0f), V(x));
    elt_emit(s, FJ_VMAXPS, V(x), CR(-10.0f), V(x));
    if (s->avx512) {
        elt_emit(s, FJ_VMULPS, V(T0), V(x), C(2.0f * LOG2E));
        elt_emit(s, FJ_VRNDSCALEPS, V(T0), V(T0), fj_imm(0x08));
    } else {
        elt_load(s, T3, elt_bits(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T3), V(x), C(2.0f * LOG2E));
        elt_emit(s, FJ_VSUBPS, V(T0), V(T3), C(MAGIC_127));
    }
    elt_emit(s, FJ_VFNMADD231PS, V(x), V(T0), C(0.5f * LN2_HI));
    elt_emit(s, FJ_VFNMADD231PS, V(x), V(T0), C(0.5f * LN2_LO)); /* h */
    elt_emit(s, FJ_VMULPS, V(T2), V(x), V(x));
    horner(s, T1, x, c, 5);
    elt_emit(s, FJ_VFMADD213PS, V(T1), V(T2), V(x));  /* qh */
    if (s->avx512) {
        elt_load(s, x, elt_bits(1.0f));
        elt_emit(s, FJ_VSCALEFPS, V(x), V(x), V(T0)); /* 2^n */
    } else {
        elt_emit(s, FJ_VPSLLD, V(x), V(T3), fj_imm(23));
    }
    elt_load(s, T0, elt_bits(-0.5f));
    elt_emit(s, FJ_VFMADD231PS, V(T0), V(x), C(0.5f)); /* (2^n - 1)/2, exact */
    elt_emit(s, FJ_VFMADD231PS, V(T0), V(x), V(T1));   /* g */
    elt_emit(s, FJ_VADDPS, V(x), V(T0), C(1.0f));      /* d */
    elt_emit(s, FJ_VSUBPS, V(T1), V(x), C(1.0f));
    elt_emit(s, FJ_VSUBPS, V(T1), V(T0), V(T1));       /* d_lo */
    if (s->avx512) {
        elt_emit(s, FJ_VRCP14PS, V(T2), V(x));
        elt_emit(s, FJ_VMULPS, V(T3), V(T0), V(T2));   /* q0 */
    } else {
        elt_emit(s, FJ_VDIVPS, V(T3), V(T0), V(x));
        elt_emit(s, FJ_VRCPPS, V(T2), V(x));           /* enough for the tiny correction */
    }
    elt_emit(s, FJ_VFNMADD231PS, V(T0), V(T3), V(x));
    elt_emit(s, FJ_VFNMADD231PS, V(T0), V(T3), V(T1));
    elt_emit(s, FJ_VFMADD213PS, V(T0), V(T2), V(T3));
    elt_emit(s, FJ_VORPS, V(x), V(T0), V(T4));
}

/* ---- sigmoid, swish, gelu ----------------------------------------------------- */

/* e := e^-|z| and d := 1 + e for the sigmoid family: e is in (0, 1], so
 * nothing overflows; sigmoid(z) = 1/d for z >= 0, e/d for z < 0 (no
 * cancellation on either side). z is left untouched. Scratch from t. */
static void sig_core(kg_elt_state *s, fj_reg z, fj_reg e, fj_reg d, int t) {
    elt_emit(s, FJ_VORPS, V(e), V(z), CB(SIGN));
    elt_emit(s, FJ_VMAXPS, V(e), CR(EXP_LO), V(e));
    exp_core(s, e, 0, 4, 1, 1, t);
    elt_emit(s, FJ_VADDPS, V(d), V(e), C(1.0f));
}

/* The quotient num / d, d = 1 + e rounded, d_lo = e - (d - 1) its exact
 * error (Fast2Sum, 0 < e <= 1): q = q0 + (num - q0 d - q0 d_lo) / d, so
 * the rounding of d costs nothing. num and e are consumed; result in num.
 * Scratch: t, t+1. */
static void div_1pe(kg_elt_state *s, fj_reg num, fj_reg e, fj_reg d, int t) {
    fj_reg R = elt_t(s, t), Q = elt_t(s, t + 1);
    if (s->avx512) {
        /* The residual num - q0 (1 + e) without rounding 1 + e: num - q0
         * is exact (Sterbenz: q0 / num = 1 / (1 + e) is in [1/2, 1]), then
         * - q0 e. */
        elt_emit(s, FJ_VRCP14PS, V(R), V(d));
        elt_emit(s, FJ_VMULPS, V(Q), V(num), V(R));
        elt_emit(s, FJ_VSUBPS, V(num), V(num), V(Q));
        elt_emit(s, FJ_VFNMADD231PS, V(num), V(Q), V(e));
        elt_emit(s, FJ_VFMADD213PS, V(num), V(R), V(Q));
        return;
    }
    elt_emit(s, FJ_VSUBPS, V(R), V(d), C(1.0f));
    elt_emit(s, FJ_VSUBPS, V(e), V(e), V(R)); /* d_lo */
    if (s->avx512) {
        elt_emit(s, FJ_VRCP14PS, V(R), V(d));
        elt_emit(s, FJ_VMULPS, V(Q), V(num), V(R));
    } else {
        elt_emit(s, FJ_VDIVPS, V(Q), V(num), V(d));
        elt_emit(s, FJ_VRCPPS, V(R), V(d));
    }
    elt_emit(s, FJ_VFNMADD231PS, V(num), V(Q), V(d));
    elt_emit(s, FJ_VFNMADD231PS, V(num), V(Q), V(e));
    elt_emit(s, FJ_VFMADD213PS, V(num), V(R), V(Q));
}

static void emit_sigmoid(kg_elt_state *s, fj_reg x) {
    fj_reg E = elt_t(s, 0), D = elt_t(s, 1), T = elt_t(s, 2);
    sig_core(s, x, E, D, 2);
    if (s->avx512) {
        fj_reg K = elt_k(s, 0);
        elt_emit(s, FJ_VCMPPS, fj_k(K), V(x), C(0.0f), fj_imm(ELT_CMP_GE_OQ));
        elt_emit(s, FJ_VBLENDMPS, fj_masked(V(x), K, 0), V(E), C(1.0f)); /* numerator */
    } else {
        elt_emit(s, FJ_VCMPPS, V(T), V(x), C(0.0f), fj_imm(ELT_CMP_GE_OQ));
        elt_emit(s, FJ_VBLENDVPS, V(x), V(E), C(1.0f), V(T));
    }
    div_1pe(s, x, E, D, 2);
}

/* swish x = x sigmoid(alpha x): x / d for z = alpha x >= 0, x e / d below.
 * x is clamped to +-FLT_MAX first (in z and in x e) so that an infinite x
 * gives the limit, not NaN (0 * inf, or inf * e with e = 0). Accurate to
 * the 2-3 ulp of sigmoid given z = fl(alpha x): the rounding of the product
 * itself is the caller's (it shifts e^-z by up to |z| 2^-24).
 * AVX-512 keeps the clamped x in a register of its own for x e, and takes
 * z's sign into a mask before z becomes -|z|, so that z's register holds
 * e: x e then goes straight into x's lanes under the mask, and one
 * division by d (in exp's polynomial register, dead by then) ends the
 * chain: 22 instructions a copy. Four scratch registers a copy (exp's
 * other scratch is the third), so the one saved per interleaved copy
 * holds a constant that would otherwise be a constant-pool operand, which
 * costs more to generate. The division replaced vrcp14ps, a Newton step
 * and a multiplication: the quotient is correctly rounded instead of
 * within 2^-28, one constant (-1) fewer, fewer host instructions to make
 * the kernel, and a faster kernel (three dependent instructions fewer on
 * the chain). */
static void emit_swish(kg_elt_state *s, fj_reg x) {
    if (s->avx512) {
        fj_reg X = elt_t(s, 0), Z = elt_t(s, 1), D = elt_t(s, 3); /* exp's scratch: 2 */
        fj_reg K = elt_k(s, 0);
        elt_emit(s, FJ_VMAXPS, V(X), CR(-FLT_MAX), V(x));
        elt_emit(s, FJ_VMINPS, V(X), CR(FLT_MAX), V(X));          /* x clamped */
        elt_emit(s, FJ_VMULPS, V(Z), V(X), elt_c(s, s->alpha));   /* z */
        elt_emit(s, FJ_VCMPPS, fj_k(K), V(Z), C(0.0f), fj_imm(ELT_CMP_LT_OQ));
        sig_core(s, Z, Z, D, 2);                                  /* e in Z, d in D */
        elt_emit(s, FJ_VMULPS, fj_masked(V(x), K, 0), V(X), V(Z));
        elt_emit(s, FJ_VDIVPS, V(x), V(x), V(D));
        return;
    }
    fj_reg Z = elt_t(s, 0), E = elt_t(s, 1), D = elt_t(s, 2), T = elt_t(s, 3);
    elt_emit(s, FJ_VMAXPS, V(D), CR(-FLT_MAX), V(x));
    elt_emit(s, FJ_VMINPS, V(D), CR(FLT_MAX), V(D));
    elt_emit(s, FJ_VMULPS, V(Z), V(D), elt_c(s, s->alpha));
    sig_core(s, Z, E, D, 3);
    elt_emit(s, FJ_VCMPPS, V(Z), V(Z), C(0.0f), fj_imm(ELT_CMP_LT_OQ));
    elt_emit(s, FJ_VMAXPS, V(T), CR(-FLT_MAX), V(x));
    elt_emit(s, FJ_VMINPS, V(T), CR(FLT_MAX), V(T));
    elt_emit(s, FJ_VMULPS, V(T), V(T), V(E));
    elt_emit(s, FJ_VBLENDVPS, V(x), V(x), V(T), V(Z));
    elt_emit(s, FJ_VDIVPS, V(x), V(x), V(D));
}

/* gelu_tanh x = 0.5x(1 + tanh u) = x sigmoid(2u) = x / (1 + e^-v),
 * v = 2u = x (C1 + C2 x^2). Only an absolute error of ~1e-7 is needed
 * here, so exp uses Q of degree 3 and one-part ln2. x is clamped to
 * [-10, 10] for v (|v| <= 87.3: e^-v and 1 + e^-v stay finite) and to -10
 * from below for the product (gelu(-10) = -1.2e-37: below that the result
 * is that, not the -0 of the limit, an absolute error < 1e-36). */
#define GELU_C1 1.59576912160573071f /* 2 sqrt(2/pi) */
#define GELU_C2 0.0713548162726008f  /* 2 sqrt(2/pi) 0.044715 */
static void emit_gelu_tanh(kg_elt_state *s, fj_reg x) {
    fj_reg T0 = elt_t(s, 0), T1 = elt_t(s, 1);
    elt_emit(s, FJ_VMAXPS, V(x), CR(-10.0f), V(x));
    elt_emit(s, FJ_VMINPS, V(T0), CR(10.0f), V(x));
    elt_emit(s, FJ_VMULPS, V(T1), V(T0), V(T0));
    elt_emit(s, FJ_VFMADD132PS, V(T1), CR(GELU_C1), C(GELU_C2));
    elt_emit(s, FJ_VMULPS, V(T0), V(T0), V(T1)); /* v */
    exp_core(s, T0, 1, 3, 0, 0, 1);              /* e^-v */
    elt_emit(s, FJ_VADDPS, V(T0), V(T0), C(1.0f));
    if (s->avx512) {
        recip(s, T1, T0);
        elt_emit(s, FJ_VMULPS, V(x), V(x), V(T1));
    } else {
        elt_emit(s, FJ_VDIVPS, V(x), V(x), V(T0));
    }
}

/* gelu_erf x = 0.5x(1 + erf(x/sqrt2)): with h = erfc(|z|)/2 (A&S 7.1.26)
 * and s = x h, the result is x - s for x >= 0 and s for x < 0 (no
 * cancellation for negative x). x is clamped to [-10, 10] for h and s
 * (h(10) ~ 1e-23), and kept as it is in x - s, so +inf stays +inf and
 * -inf gives -10 h(10), a tiny negative number (the limit is -0). */
static void emit_gelu_erf(kg_elt_state *s, fj_reg x) {
    fj_reg T0 = elt_t(s, 0), T1 = elt_t(s, 1), T2 = elt_t(s, 2), T3 = elt_t(s, 3);
    elt_emit(s, FJ_VMAXPS, V(T0), CR(-10.0f), V(x));
    elt_emit(s, FJ_VMINPS, V(T0), CR(10.0f), V(T0));          /* xc */
    elt_emit(s, FJ_VMULPS, V(T1), V(T0), C(0.707106781186547524f)); /* z */
    elt_emit(s, FJ_VANDPS, V(T2), V(T1), CB(ABS));
    elt_emit(s, FJ_VFMADD132PS, V(T2), CR(1.0f), C(AS_P));   /* 1 + p|z| */
    if (s->avx512) {
        recip(s, T3, T2);                                     /* t */
    } else {
        elt_load(s, T3, elt_bits(1.0f));
        elt_emit(s, FJ_VDIVPS, V(T3), V(T3), V(T2));
    }
    horner(s, T2, T3, as_a, 5);
    elt_emit(s, FJ_VMULPS, V(T2), V(T2), V(T3));              /* t P(t) / 2 */
    elt_emit(s, FJ_VMULPS, V(T2), V(T2), V(T0));              /* xc t P / 2 */
    elt_emit(s, FJ_VMULPS, V(T1), V(T1), V(T1));              /* z^2 <= 50 */
    /* e^-z^2; the scratch of exp_core starts at T3 (t is used up) and
     * continues into T0 (xc is used up). */
    if (s->avx512) {
        elt_load(s, T3, elt_bits(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T3), V(T1), C(-LOG2E));
        elt_emit(s, FJ_VSUBPS, V(T3), V(T3), C(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T1), V(T3), C(LN2));
        exp_poly(s, T0, T1, 3, 1);
        elt_emit(s, FJ_VSCALEFPS, V(T1), V(T0), V(T3));
    } else {
        elt_load(s, T3, elt_bits(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T3), V(T1), C(-LOG2E));
        elt_emit(s, FJ_VSUBPS, V(T0), V(T3), C(MAGIC_127));
        elt_emit(s, FJ_VFMADD231PS, V(T1), V(T0), C(LN2));
        exp_poly(s, T0, T1, 3, 1);
        elt_emit(s, FJ_VPSLLD, V(T3), V(T3), fj_imm(23));
        elt_emit(s, FJ_VMULPS, V(T1), V(T0), V(T3));
    }
    elt_emit(s, FJ_VMULPS, V(T2), V(T2), V(T1));              /* s */
    if (s->avx512) {
        fj_reg K = elt_k(s, 0);
        elt_emit(s, FJ_VCMPPS, fj_k(K), V(x), C(0.0f), fj_imm(ELT_CMP_GE_OQ));
        elt_emit(s, FJ_VSUBPS, fj_masked(V(T2), K, 0), V(x), V(T2));
        elt_emit(s, FJ_VMOVAPS, V(x), V(T2));
    } else {
        elt_emit(s, FJ_VSUBPS, V(T1), V(x), V(T2));
        elt_emit(s, FJ_VCMPPS, V(T0), V(x), C(0.0f), fj_imm(ELT_CMP_GE_OQ));
        elt_emit(s, FJ_VBLENDVPS, V(x), V(T2), V(T1), V(T0));
    }
}

void elt_math_emit(kg_elt_state *s, fj_reg x) {
    switch (s->op) {
    case FJ_ELT_EXP: emit_exp(s, x); break;
    case FJ_ELT_LOG: emit_log(s, x); break;
    case FJ_ELT_TANH: emit_tanh(s, x); break;
    case FJ_ELT_SIGMOID: emit_sigmoid(s, x); break;
    case FJ_ELT_SWISH: emit_swish(s, x); break;
    case FJ_ELT_GELU_TANH: emit_gelu_tanh(s, x); break;
    case FJ_ELT_GELU_ERF: emit_gelu_erf(s, x); break;
    default: break;
    }
}
