/* cpu_desc.h: the CPU as the GEMM blocking model sees it: caches, vendor
 * and model, vector FMA pipes (decoded from raw cpuid values). */
#ifndef FJ_CPU_DESC_H
#define FJ_CPU_DESC_H

#include <stdint.h>
#include "base/base.h"

/* One data (or unified) cache level; all zero when unknown. */
typedef struct kc_cache_info {
    int64_t size;        /* bytes */
    int ways;            /* associativity (a fully associative cache: its lines) */
    int line;            /* bytes per line */
    int sets;            /* size / (ways * line) */
    int sharing;         /* logical processors sharing it (0: unknown) */
} kc_cache_info;

typedef struct kc_cpu_desc {
    char vendor[13];     /* "GenuineIntel", "AuthenticAMD", ... */
    char brand[49];      /* the brand string, "" when the CPU has none */
    int family, model, stepping; /* display family and model (extended fields added) */
    int avx512;          /* the CPU has AVX-512F (whether or not the OS enables it) */
    int vec_bits;        /* its widest FMA vectors: 512, 256 (FMA3), 0 (none) */
    kc_cache_info l1d, l2, l3;
    const char *cache_src; /* where the caches came from: "leaf4", "leaf8000001d",
                              "leaf80000005", "sysconf", "default" */
    /* From the microarchitecture table (cpuid does not report pipes): */
    const char *uarch;   /* the table row's name, "unknown" for the default row */
    int fma256, fma512;  /* FMAs retired per cycle at 256 and 512 bits (0: none) */
    int fma_lat;         /* FMA latency, cycles */
} kc_cpu_desc;

/* The registers of one cpuid call. */
typedef struct kc_cpuid_regs {
    uint32_t a, b, c, d;
} kc_cpuid_regs;

enum { KC_CPUID_SUBLEAVES = 8 };

/* The leaves the description is decoded from, as cpuid returned them
 * (leaves the CPU lacks: zero). Tests feed recorded values. */
typedef struct kc_cpuid_raw {
    kc_cpuid_regs l0, l1, l7;                    /* leaves 0, 1, 7 (sub-leaf 0) */
    kc_cpuid_regs l4[KC_CPUID_SUBLEAVES];        /* leaf 4 (Intel deterministic caches) */
    kc_cpuid_regs e0, e1, brand[3], e5, e6;      /* 0x80000000, 1, 2-4, 5, 6 */
    kc_cpuid_regs e1d[KC_CPUID_SUBLEAVES];       /* 0x8000001D (AMD with TOPOEXT) */
} kc_cpuid_raw;

/* Runs cpuid for every leaf kc_cpuid_raw holds (each a trap to the
 * hypervisor in a VM: call once per process). */
FJ_INTERNAL void kc_cpuid_read(kc_cpuid_raw *r);
/* Decodes vendor, family/model, brand and caches from r, then fills the
 * FMA fields from the microarchitecture table. Caches r does not describe
 * stay zero (kc_cpu_describe fills them from sysconf). Pure. */
FJ_INTERNAL void kc_cpu_decode(const kc_cpuid_raw *r, kc_cpu_desc *d);
/* The FMA pipes and latency of d's vendor/family/model (d->avx512 and
 * d->vec_bits set; none at a width the CPU lacks):
 * the table row, or the default row for an unknown CPU. Pure. */
FJ_INTERNAL void kc_cpu_fma(kc_cpu_desc *d);
/* Completes a cache level from what is known: sets from size, ways and
 * line; a default line of 64 bytes. */
FJ_INTERNAL void kc_cache_complete(kc_cache_info *c);
/* This CPU: kc_cpuid_read + kc_cpu_decode, caches cpuid does not describe
 * from sysconf, then from defaults (32 KiB 8-way L1, 1 MiB 16-way L2). */
FJ_INTERNAL void kc_cpu_describe(kc_cpu_desc *d);

#endif
