/* uw_backends.c: FRAMEJIT_UNWIND, the choice of unwinder back-ends to
 * register kernels with. */
#include "unwindinfo/uw_int.h"

#include <string.h>
#include <strings.h>

/* ---- FRAMEJIT_UNWIND ------------------------------------------------------ */

static const struct {
    const char *word;
    unsigned mask;
} backend_words[] = {
    {"libgcc", UW_LIBGCC},
    {"libunwind", UW_LIBUNWIND},
    {"gdb", UW_GDB},
    {"all", UW_ALL},
};

fj_status uw_parse_backends(const char *s, unsigned *out) {
    if (!out) return fj_fail(FJ_ERR_INVALID_ARG, "uw_parse_backends: NULL output");
    if (!s || !*s) {  /* unset or empty: the default */
        *out = UW_ALL;
        return FJ_OK;
    }
    unsigned mask = 0;
    int none = 0, words = 0;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",");
        const char *w = p;
        p += n;
        if (*p == ',') p++;
        /* Tolerate spaces around words ("libgcc, gdb"). */
        while (n && (*w == ' ' || *w == '\t')) w++, n--;
        while (n && (w[n - 1] == ' ' || w[n - 1] == '\t')) n--;
        if (n == 0) continue;
        words++;
        if (n == 4 && strncasecmp(w, "none", 4) == 0) {
            none = 1;
            continue;
        }
        size_t k = 0;
        const size_t nwords = sizeof backend_words / sizeof backend_words[0];
        while (k < nwords && !(strlen(backend_words[k].word) == n &&
                               strncasecmp(w, backend_words[k].word, n) == 0))
            k++;
        if (k == nwords)
            return fj_fail(FJ_ERR_INVALID_ARG,
                           "FRAMEJIT_UNWIND: unknown back-end '%.*s' (use libgcc, libunwind, gdb, "
                           "all or none)",
                           (int)n, w);
        mask |= backend_words[k].mask;
    }
    if (none && words > 1)
        return fj_fail(FJ_ERR_INVALID_ARG, "FRAMEJIT_UNWIND: 'none' cannot be combined: '%s'",
                       s);
    *out = none ? 0 : words ? mask : UW_ALL;
    return FJ_OK;
}
