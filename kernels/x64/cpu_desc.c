/* cpu_desc.c: the CPU description for the GEMM blocking model: cpuid
 * leaves read raw, decoded apart from the instruction (tests feed recorded
 * values), and the per-microarchitecture FMA table. */
#include "kernels/x64/cpu_desc.h"

#include <cpuid.h>
#include <string.h>
#include <unistd.h>

static kc_cpuid_regs cpuid(uint32_t leaf, uint32_t sub) {
    kc_cpuid_regs r;
    __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
    return r;
}

void kc_cpuid_read(kc_cpuid_raw *r) {
    memset(r, 0, sizeof *r);
    r->l0 = cpuid(0, 0);
    uint32_t max = r->l0.a;
    if (max >= 1) r->l1 = cpuid(1, 0);
    if (max >= 7) r->l7 = cpuid(7, 0);
    if (max >= 4)
        for (int i = 0; i < KC_CPUID_SUBLEAVES; i++)
            if (!((r->l4[i] = cpuid(4, (uint32_t)i)).a & 0x1f)) break; /* type 0: no more */
    r->e0 = cpuid(0x80000000u, 0);
    uint32_t emax = r->e0.a;
    if (emax < 0x80000001u || emax > 0x8000ffffu) return;
    r->e1 = cpuid(0x80000001u, 0);
    if (emax >= 0x80000004u)
        for (uint32_t i = 0; i < 3; i++) r->brand[i] = cpuid(0x80000002u + i, 0);
    if (emax >= 0x80000005u) r->e5 = cpuid(0x80000005u, 0);
    if (emax >= 0x80000006u) r->e6 = cpuid(0x80000006u, 0);
    /* 0x8000001D needs TOPOEXT (0x80000001 ecx bit 22). */
    if (emax >= 0x8000001du && (r->e1.c >> 22 & 1))
        for (int i = 0; i < KC_CPUID_SUBLEAVES; i++)
            if (!((r->e1d[i] = cpuid(0x8000001du, (uint32_t)i)).a & 0x1f)) break;
}

void kc_cache_complete(kc_cache_info *c) {
    if (c->size <= 0) return;
    if (c->line <= 0) c->line = 64;
    if (c->ways <= 0) c->ways = 8;
    if (c->sets <= 0) c->sets = (int)(c->size / ((int64_t)c->ways * c->line));
    if (c->sets <= 0) c->sets = 1;
}

/* Leaf 4 and leaf 0x8000001D share their layout: eax[4:0] type (1 data,
 * 3 unified), eax[7:5] level, eax[25:14] sharing - 1; ebx[11:0] line - 1,
 * ebx[21:12] partitions - 1, ebx[31:22] ways - 1; ecx sets - 1. Returns
 * how many levels it found. */
static int decode_det(const kc_cpuid_regs *l, kc_cpu_desc *d) {
    int found = 0;
    for (int i = 0; i < KC_CPUID_SUBLEAVES; i++) {
        uint32_t type = l[i].a & 0x1f, level = l[i].a >> 5 & 7;
        if (!type) break;
        if (type != 1 && type != 3) continue; /* instruction caches */
        kc_cache_info c = {.line = (int)(l[i].b & 0xfff) + 1,
                           .ways = (int)(l[i].b >> 22) + 1,
                           .sets = (int)l[i].c + 1,
                           .sharing = (int)(l[i].a >> 14 & 0xfff) + 1};
        c.size = (int64_t)c.line * ((l[i].b >> 12 & 0x3ff) + 1) * c.ways * c.sets;
        kc_cache_info *dst = level == 1 ? &d->l1d : level == 2 ? &d->l2 : level == 3 ? &d->l3 : NULL;
        if (dst) {
            *dst = c;
            found++;
        }
    }
    return found;
}

/* AMD's 4-bit associativity codes of leaf 0x80000006 (Intel uses the
 * same ones for its L2 there); 0: unknown or "see 0x8000001D". */
static int amd_ways(uint32_t code) {
    static const int w[16] = {0, 1, 2, 3, 4, 0, 8, 0, 16, 0, 32, 48, 64, 96, 128, 0};
    return code == 5 ? 6 : w[code & 15];
}

/* The legacy AMD leaves: 0x80000005 ecx (L1d: size KiB, ways, line) and
 * 0x80000006 ecx (L2: size KiB, way code, line), edx (L3: size in
 * 512 KiB units, way code, line). */
static int decode_legacy(const kc_cpuid_raw *r, kc_cpu_desc *d) {
    int found = 0;
    if (r->e5.c >> 24) {
        uint32_t w = r->e5.c >> 16 & 0xff;
        d->l1d = (kc_cache_info){.size = (int64_t)(r->e5.c >> 24) << 10,
                                 .ways = w == 0xff ? 0 : (int)w, .line = (int)(r->e5.c & 0xff)};
        found++;
    }
    if (r->e6.c >> 16) {
        d->l2 = (kc_cache_info){.size = (int64_t)(r->e6.c >> 16) << 10,
                                .ways = amd_ways(r->e6.c >> 12 & 15), .line = (int)(r->e6.c & 0xff)};
        found++;
    }
    if (r->e6.d >> 18) {
        d->l3 = (kc_cache_info){.size = (int64_t)(r->e6.d >> 18) << 19,
                                .ways = amd_ways(r->e6.d >> 12 & 15), .line = (int)(r->e6.d & 0xff)};
        found++;
    }
    return found;
}

static void put_regs(char *dst, const kc_cpuid_regs *r, int order_bdc) {
    uint32_t v[4] = {r->a, r->b, r->c, r->d};
    if (order_bdc) {
        memcpy(dst, &v[1], 4);
        memcpy(dst + 4, &v[3], 4);
        memcpy(dst + 8, &v[2], 4);
    } else {
        memcpy(dst, v, 16);
    }
}

void kc_cpu_decode(const kc_cpuid_raw *r, kc_cpu_desc *d) {
    memset(d, 0, sizeof *d);
    put_regs(d->vendor, &r->l0, 1);
    d->vendor[12] = 0;
    if (r->brand[0].a) {
        for (int i = 0; i < 3; i++) put_regs(d->brand + 16 * i, &r->brand[i], 0);
        d->brand[48] = 0;
        /* Brand strings are padded with spaces on either side. */
        size_t lead = strspn(d->brand, " ");
        memmove(d->brand, d->brand + lead, strlen(d->brand + lead) + 1);
        for (size_t n = strlen(d->brand); n && d->brand[n - 1] == ' ';) d->brand[--n] = 0;
    }
    uint32_t sig = r->l1.a, base_fam = sig >> 8 & 15;
    d->family = (int)base_fam + (base_fam == 15 ? (int)(sig >> 20 & 0xff) : 0);
    d->model = (int)(sig >> 4 & 15) | (base_fam == 6 || base_fam == 15 ? (int)(sig >> 16 & 15) << 4 : 0);
    d->stepping = (int)(sig & 15);
    d->avx512 = r->l0.a >= 7 && (r->l7.b >> 16 & 1);
    d->vec_bits = d->avx512 ? 512 : r->l0.a >= 1 && (r->l1.c >> 12 & 1) ? 256 : 0;
    d->cache_src = "";
    if (decode_det(r->l4, d)) d->cache_src = "leaf4";
    else if (decode_det(r->e1d, d)) d->cache_src = "leaf8000001d";
    else if (decode_legacy(r, d)) d->cache_src = "leaf80000005";
    kc_cache_complete(&d->l1d);
    kc_cache_complete(&d->l2);
    kc_cache_complete(&d->l3);
    kc_cpu_fma(d);
}

/* One microarchitecture: vendor, family, a model range, and its FMA
 * pipes (per cycle, at 256 and 512 bits) and latency. From the vendors'
 * optimization manuals; where SKUs differ, the row states its choice. */
typedef struct uarch_row {
    const char *name;
    char amd;            /* 1: AuthenticAMD (and HygonGenuine), 0: GenuineIntel */
    int family, lo, hi;  /* model range, inclusive */
    int fma256, fma512, lat;
} uarch_row;

static const uarch_row uarch_table[] = {
    {"haswell", 0, 6, 0x3c, 0x3c, 2, 0, 5},
    {"haswell", 0, 6, 0x3f, 0x3f, 2, 0, 5},
    {"haswell", 0, 6, 0x45, 0x46, 2, 0, 5},
    {"broadwell", 0, 6, 0x3d, 0x3d, 2, 0, 5},
    {"broadwell", 0, 6, 0x47, 0x47, 2, 0, 5},
    {"broadwell", 0, 6, 0x4f, 0x4f, 2, 0, 5},
    {"broadwell", 0, 6, 0x56, 0x56, 2, 0, 5},
    {"skylake", 0, 6, 0x4e, 0x4e, 2, 0, 4},
    {"skylake", 0, 6, 0x5e, 0x5e, 2, 0, 4},
    {"skylake", 0, 6, 0x8e, 0x8e, 2, 0, 4}, /* Kaby, Coffee, Comet, Amber Lake */
    {"skylake", 0, 6, 0x9e, 0x9e, 2, 0, 4},
    {"skylake", 0, 6, 0xa5, 0xa6, 2, 0, 4},
    /* Skylake-SP, Cascade Lake, Cooper Lake: two 512-bit FMA units
     * (Gold 6000/8000 and Platinum; Bronze, Silver and some Gold 5000
     * SKUs have one: 2 assumed, cpuid cannot tell them apart). */
    {"skylake-sp", 0, 6, 0x55, 0x55, 2, 2, 4},
    {"knights-landing", 0, 6, 0x57, 0x57, 2, 2, 6},
    {"knights-mill", 0, 6, 0x85, 0x85, 2, 2, 6},
    /* Client cores with AVX-512: one 512-bit FMA (ports 0+1 fused). */
    {"cannon-lake", 0, 6, 0x66, 0x66, 2, 1, 4},
    {"ice-lake", 0, 6, 0x7d, 0x7e, 2, 1, 4},
    {"tiger-lake", 0, 6, 0x8c, 0x8d, 2, 1, 4},
    {"rocket-lake", 0, 6, 0xa7, 0xa7, 2, 1, 4},
    /* Server cores from Ice Lake-SP on: two 512-bit FMA units. */
    {"ice-lake-sp", 0, 6, 0x6a, 0x6a, 2, 2, 4},
    {"ice-lake-sp", 0, 6, 0x6c, 0x6c, 2, 2, 4},
    {"sapphire-rapids", 0, 6, 0x8f, 0x8f, 2, 2, 4},
    {"emerald-rapids", 0, 6, 0xcf, 0xcf, 2, 2, 4},
    {"granite-rapids", 0, 6, 0xad, 0xae, 2, 2, 4},
    /* Hybrid client parts (P-cores' figures; no AVX-512). */
    {"alder-lake", 0, 6, 0x97, 0x97, 2, 0, 4},
    {"alder-lake", 0, 6, 0x9a, 0x9a, 2, 0, 4},
    {"raptor-lake", 0, 6, 0xb7, 0xb7, 2, 0, 4},
    {"raptor-lake", 0, 6, 0xba, 0xba, 2, 0, 4},
    {"raptor-lake", 0, 6, 0xbf, 0xbf, 2, 0, 4},
    {"meteor-lake", 0, 6, 0xaa, 0xac, 2, 0, 4},
    /* Zen, Zen+: 128-bit FMA units, a 256-bit FMA is two of them. */
    {"zen", 1, 0x17, 0x00, 0x2f, 1, 0, 5},
    {"zen", 1, 0x18, 0x00, 0xff, 1, 0, 5}, /* Hygon Dhyana */
    {"zen2", 1, 0x17, 0x30, 0xff, 2, 0, 5},
    /* Zen 4 runs a 512-bit FMA as two 256-bit halves. */
    {"zen4", 1, 0x19, 0x10, 0x1f, 2, 1, 4},
    {"zen4", 1, 0x19, 0x60, 0x7f, 2, 1, 4},
    {"zen4", 1, 0x19, 0xa0, 0xaf, 2, 1, 4},
    {"zen3", 1, 0x19, 0x00, 0xff, 2, 0, 4}, /* after the Zen 4 rows: the rest */
    /* Zen 5 mobile (Strix Point, Krackan Point): a 256-bit datapath. */
    {"zen5-mobile", 1, 0x1a, 0x20, 0x2f, 2, 1, 4},
    {"zen5-mobile", 1, 0x1a, 0x60, 0x6f, 2, 1, 4},
    {"zen5", 1, 0x1a, 0x00, 0xff, 2, 2, 4},
};

void kc_cpu_fma(kc_cpu_desc *d) {
    int amd = !strcmp(d->vendor, "AuthenticAMD") || !strcmp(d->vendor, "HygonGenuine");
    int intel = !strcmp(d->vendor, "GenuineIntel");
    /* Unknown CPUs: two FMAs a cycle at either width, latency 4 (the
     * figures of every recent core with two FMA pipes). */
    const uarch_row *row = NULL;
    for (size_t i = 0; i < sizeof uarch_table / sizeof uarch_table[0] && !row; i++) {
        const uarch_row *u = &uarch_table[i];
        if ((u->amd ? amd : intel) && u->family == d->family && d->model >= u->lo && d->model <= u->hi)
            row = u;
    }
    d->uarch = row ? row->name : "unknown";
    d->fma256 = row ? row->fma256 : 2;
    d->fma512 = row ? row->fma512 : 2;
    d->fma_lat = row ? row->lat : 4;
    if (!d->avx512) d->fma512 = 0;
    if (!d->vec_bits) d->fma256 = 0;
}

/* A sysconf cache figure, or 0. */
static long sc(int name) {
    long v = sysconf(name);
    return v > 0 ? v : 0;
}

static void from_sysconf(kc_cache_info *c, long size, long ways, long line) {
    if (c->size > 0 || size <= 0) return;
    *c = (kc_cache_info){.size = size, .ways = (int)(ways > 0 && ways < 1024 ? ways : 0),
                         .line = (int)line};
    kc_cache_complete(c);
}

void kc_cpu_describe(kc_cpu_desc *d) {
    kc_cpuid_raw r;
    kc_cpuid_read(&r);
    kc_cpu_decode(&r, d);
    int had = d->l1d.size > 0 && d->l2.size > 0;
    from_sysconf(&d->l1d, sc(_SC_LEVEL1_DCACHE_SIZE), sc(_SC_LEVEL1_DCACHE_ASSOC),
                 sc(_SC_LEVEL1_DCACHE_LINESIZE));
    from_sysconf(&d->l2, sc(_SC_LEVEL2_CACHE_SIZE), sc(_SC_LEVEL2_CACHE_ASSOC),
                 sc(_SC_LEVEL2_CACHE_LINESIZE));
    from_sysconf(&d->l3, sc(_SC_LEVEL3_CACHE_SIZE), sc(_SC_LEVEL3_CACHE_ASSOC),
                 sc(_SC_LEVEL3_CACHE_LINESIZE));
    if (!had && d->l1d.size > 0 && d->l2.size > 0) d->cache_src = "sysconf";
    if (d->l1d.size <= 0 || d->l2.size <= 0) d->cache_src = "default";
    if (d->l1d.size <= 0) d->l1d = (kc_cache_info){.size = 32 << 10, .ways = 8, .line = 64};
    if (d->l2.size <= 0) d->l2 = (kc_cache_info){.size = 1 << 20, .ways = 16, .line = 64};
    kc_cache_complete(&d->l1d);
    kc_cache_complete(&d->l2);
}
