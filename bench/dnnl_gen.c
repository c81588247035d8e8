/* dnnl_gen.c (bench): oneDNN's kernel generation, for the generation rows
 * of the sections: a primitive created with oneDNN's primitive cache off,
 * so that each creation makes its kernel again. */
#include "bench.h"

#ifdef FJ_BENCH_DNNL
double bench_dnnl_create_us(int reps, dnnl_status_t (*make)(void *ctx, dnnl_engine_t eng,
                                                            dnnl_primitive_t *prim),
                            void *ctx) {
    int cap = -1, m = 0;
    double v[64];
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_get_primitive_cache_capacity(&cap) == dnnl_success &&
        dnnl_set_primitive_cache_capacity(0) == dnnl_success) {
        for (int rep = 0; rep <= reps && rep < 64; rep++) {
            dnnl_primitive_t prim = NULL;
            double c0 = bench_cpu_ns();
            dnnl_status_t st = make(ctx, eng, &prim);
            double c1 = bench_cpu_ns();
            if (prim) dnnl_primitive_destroy(prim);
            if (st != dnnl_success) break;
            if (rep) v[m++] = (c1 - c0) / 1e3; /* the first sets up more than the kernel */
        }
        dnnl_set_primitive_cache_capacity(cap);
    }
    dnnl_engine_destroy(eng);
    return m ? bench_median(v, m) : 0;
}
#endif
