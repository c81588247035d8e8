/* forward.c: finding the system BLAS that libframejit_blas.so forwards to.
 *
 * Order: the library FRAMEJIT_BLAS_FALLBACK names (a path or a soname);
 * else libblas.so.3 as the dynamic linker finds it, unless that is this
 * very library (installed as the libblas.so.3 alternative); else the other
 * registered libblas.so.3 alternatives, highest priority first; else the
 * usual Debian paths. A candidate whose file is this library is never
 * opened. Symbols are looked up in the fallback's own scope (dlsym on its
 * handle), so a preloaded shim never finds itself. */
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas/blas_int.h"

static void *fallback;
static char fallback_name[PATH_MAX];
static pthread_once_t open_once = PTHREAD_ONCE_INIT;

/* This library's own file, resolved. */
static int self_path(char *out) {
    Dl_info info;
    if (!dladdr((void *)fjb_real, &info) || !info.dli_fname) return 0;
    return realpath(info.dli_fname, out) != NULL;
}

static int is_self(const char *path, const char *self) {
    char real[PATH_MAX];
    return self[0] && realpath(path, real) && !strcmp(real, self);
}

/* dlopen(name) unless it is (or turns out to be) this library. */
static void *try_open(const char *name, const char *self) {
    if (strchr(name, '/') && is_self(name, self)) return NULL;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) return NULL;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0] &&
        is_self(lm->l_name, self)) {
        dlclose(h);
        return NULL;
    }
    snprintf(fallback_name, sizeof fallback_name, "%s",
             lm && lm->l_name && lm->l_name[0] ? lm->l_name : name);
    return h;
}

/* The registered libblas.so.3 alternatives (update-alternatives' state
 * file: a path line is followed by its priority line), best first. */
static void *try_alternatives(const char *self) {
    glob_t g;
    if (glob("/var/lib/dpkg/alternatives/libblas.so.3*", 0, NULL, &g)) return NULL;
    void *h = NULL;
    for (size_t f = 0; f < g.gl_pathc && !h; f++) {
        FILE *fp = fopen(g.gl_pathv[f], "r");
        if (!fp) continue;
        char line[PATH_MAX], prev[PATH_MAX] = "", best[8][PATH_MAX];
        long prio[8];
        int n = 0;
        while (fgets(line, sizeof line, fp)) {
            line[strcspn(line, "\n")] = 0;
            char *end;
            long p = strtol(line, &end, 10);
            if (line[0] && !*end && prev[0] == '/' && n < 8) {
                snprintf(best[n], PATH_MAX, "%s", prev);
                prio[n++] = p;
            }
            snprintf(prev, sizeof prev, "%s", line);
        }
        fclose(fp);
        for (int tries = 0; tries < n && !h; tries++) {
            int b = -1;
            for (int i = 0; i < n; i++)
                if (prio[i] != LONG_MIN && (b < 0 || prio[i] > prio[b])) b = i;
            if (b < 0) break;
            prio[b] = LONG_MIN;
            h = try_open(best[b], self);
        }
    }
    globfree(&g);
    return h;
}

static void open_fallback(void) {
    char self[PATH_MAX] = "";
    (void)self_path(self);
    const char *env = getenv("FRAMEJIT_BLAS_FALLBACK");
    if (env && *env) {
        fallback = try_open(env, self);
        return; /* named: nothing else */
    }
    fallback = try_open("libblas.so.3", self);
    if (!fallback) fallback = try_alternatives(self);
    static const char *const paths[] = {
        "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
        "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3",
        "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3",
        "/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3",
    };
    for (size_t i = 0; !fallback && i < sizeof paths / sizeof paths[0]; i++)
        fallback = try_open(paths[i], self);
}

void *fjb_real(const char *name) {
    pthread_once(&open_once, open_fallback);
    return fallback ? dlsym(fallback, name) : NULL;
}

void *fjb_resolve(int i) {
    void *f = i >= 0 && i < fjb_nnames ? fjb_real(fjb_names[i]) : NULL;
    if (!f) {
        /* What a missing symbol does at load time: say which and stop. */
        fprintf(stderr, "libframejit_blas.so: no fallback BLAS provides %s (%s%s)\n",
                i >= 0 && i < fjb_nnames ? fjb_names[i] : "?",
                fallback ? "fallback " : "no fallback BLAS found; set FRAMEJIT_BLAS_FALLBACK",
                fallback ? fallback_name : "");
        abort();
    }
    atomic_store_explicit((_Atomic(void *) *)&fjb_slots[i], f, memory_order_release);
    return f;
}
