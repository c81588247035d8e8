/* builder_create.c: the public builder's own entry checks (kernel name,
 * argument count) and fj_builder_destroy; runtime/finish.c adds the
 * runtime's ISA and CPU features. */
#include "kernels/builder/builder_int.h"

#include <string.h>

fj_status kb_create(const char *name, int nargs, fj_isa isa, uint32_t cpu_features,
                    fj_runtime *rt, fj_builder **out) {
    *out = NULL;
    if (!name || !*name) return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: empty kernel name");
    size_t len = strlen(name);
    if (len > 200) return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: name longer than 200");
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        /* Names end up in ELF symbol tables, perf output and file names. */
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: kernel name '%s' has a "
                           "character outside [A-Za-z0-9_.-]", name);
    }
    /* The System V ABI passes six integer arguments in registers. */
    if (nargs < 0 || nargs > 6)
        return fj_fail(FJ_ERR_INVALID_ARG, "fj_builder_create: nargs = %d (0..6)", nargs);
    return kb_new(name, nargs, isa, cpu_features, rt, out);
}

void fj_builder_destroy(fj_builder *b) { kb_free(b); }
