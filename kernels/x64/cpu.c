/* cpu.c: CPU feature detection (cpuid + xgetbv). */
#include "kernels/x64/cpu.h"

#include <cpuid.h>

#include "kernels/x64/x64.h"

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

uint32_t kc_cpu_features(void) {
    unsigned a, b, c, d;
    uint32_t f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = xgetbv0();
    /* The OS must save xmm+ymm state (bits 1, 2) for AVX, and opmask,
     * zmm0-15 upper halves and zmm16-31 (bits 5, 6, 7) for AVX-512. */
    if ((xcr0 & 0x6) != 0x6) return 0;
    f |= X64_F_AVX;
    if (fma) f |= X64_F_FMA;
    if (f16c) f |= X64_F_F16C;
    if (__get_cpuid_max(0, 0) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= X64_F_AVX2;
    if ((b >> 8) & 1) f |= X64_F_BMI2;
    if ((xcr0 & 0xe0) == 0xe0) {
        if ((b >> 16) & 1) f |= X64_F_AVX512F;
        if ((b >> 17) & 1) f |= X64_F_AVX512DQ;
        if ((b >> 30) & 1) f |= X64_F_AVX512BW;
        if ((b >> 31) & 1) f |= X64_F_AVX512VL;
        if ((c >> 11) & 1) f |= X64_F_AVX512VNNI;
    }
    /* Leaf 7 sub-leaf 1: AVX-VNNI (eax bit 4), AVX512_BF16 (eax bit 5). */
    if (a >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if ((a >> 4) & 1) f |= X64_F_AVXVNNI;
        if (((a >> 5) & 1) && (xcr0 & 0xe0) == 0xe0) f |= X64_F_AVX512BF16;
    }
    return f;
}

int kc_isa_supported(uint32_t f, fj_isa isa) {
    uint32_t avx2 = X64_F_AVX | X64_F_AVX2 | X64_F_FMA | X64_F_BMI2;
    uint32_t avx512 = avx2 | X64_F_AVX512F | X64_F_AVX512BW | X64_F_AVX512DQ | X64_F_AVX512VL;
    if (isa == FJ_ISA_AVX2) return (f & avx2) == avx2;
    if (isa == FJ_ISA_AVX512) return (f & avx512) == avx512;
    return 0;
}
