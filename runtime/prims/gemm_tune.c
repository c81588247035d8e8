/* gemm_tune.c: the FRAMEJIT_GEMM_TUNE knob parser, for blocking experiments
 * and the GEMM tests; not in the default library (meson -Dgemm_tune). */
#include <stdio.h>
#include <string.h>

#include "runtime/prims/gemm_int.h"
#include "runtime/prims/gemm_tune.h"

void gemm_tune_parse(gemm_tune *t, const char *e) {
    while (e && *e) {
        char key[16];
        long v;
        int used;
        if (sscanf(e, "%15[a-z0-9_]=%ld%n", key, &v, &used) != 2) break;
        if (!strcmp(key, "mr")) t->mr512 = t->mr2 = (int)v;
        else if (!strcmp(key, "nv")) t->nv512 = t->nv2 = (int)v;
        else if (!strcmp(key, "unroll")) t->unroll = (int)v;
        else if (!strcmp(key, "pfa")) t->pf_a = (int)v;
        else if (!strcmp(key, "pfc")) t->pf_c = (int)v;
        else if (!strcmp(key, "pfb")) t->pf_b = (int)v;
        else if (!strcmp(key, "kc")) t->kc = v;
        else if (!strcmp(key, "mc")) t->mc = v;
        else if (!strcmp(key, "nc")) t->nc = v;
        else if (!strcmp(key, "direct")) t->direct = (int)v;
        else if (!strcmp(key, "da")) t->da = (int)v;
        else if (!strcmp(key, "db")) t->db = (int)v;
        else if (!strcmp(key, "mt")) t->mt_flops = v;
        else if (!strcmp(key, "areg")) t->a_reg = (int)v;
        else if (!strcmp(key, "bcopy")) t->b_copy = (int)v;
        else if (!strcmp(key, "bpf")) t->bpf_rows = (int)v;
        else if (!strcmp(key, "shortk")) t->shortk = v;
        else if (!strcmp(key, "shared")) t->shared_min = v;
        else if (!strcmp(key, "sharek")) t->share_k = v;
        else if (!strcmp(key, "rpt")) t->rpt = v > 0 ? (int)v : 1;
        else if (!strcmp(key, "splitn")) t->split_n = (int)v;
        else if (!strcmp(key, "ways")) t->l1_ways = v > 0 && v < 64 ? (int)v : 8;
        else if (!strcmp(key, "l2")) t->l2 = v >= 4096 ? v : t->l2;
        else if (!strcmp(key, "l1")) t->l1 = v >= 1024 ? v : t->l1;
        e += used;
        if (*e == ',') e++;
    }
}

void gemm_test_tune(const char *spec) {
    gemm_tune t;
    gemm_tune_defaults(&t);
    gemm_tune_parse(&t, spec);
    gemm_tune_set(&t);
}
