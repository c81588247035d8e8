/* cpu.h: CPU feature detection (cpuid + xgetbv). */
#ifndef FJ_CPU_H
#define FJ_CPU_H

#include <stdint.h>
#include "base/base.h"

/* X64_F_* features the CPU and the OS (saved register state) support. */
FJ_INTERNAL uint32_t kc_cpu_features(void);
/* 1 if the features are enough for isa (AVX2 + FMA, or AVX-512 F/BW/DQ/VL). */
FJ_INTERNAL int kc_isa_supported(uint32_t features, fj_isa isa);

#endif
