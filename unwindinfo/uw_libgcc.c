/* uw_libgcc.c: the libgcc back-end: __register_frame / __deregister_frame of
 * an object's .eh_frame, with a lookup self-check. */
#include "unwindinfo/uw_int.h"

/* libgcc's entry points (unwind-dw2-fde.h is not installed). */
extern void __register_frame(void *begin);
extern void __deregister_frame(void *begin);
struct dwarf_eh_bases {
    void *tbase;
    void *dbase;
    void *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

fj_status uw_libgcc_register(uw_object *o) {
    /* libgcc keeps the pointer: o->eh must stay put until deregistration. */
    __register_frame(o->eh);
    /* Look every FDE up again, as LuaJIT's assert builds do: a mismatch
     * means another unwinder's __register_frame was bound, or the bytes are
     * wrong, and every later unwind through these kernels would fail. */
    for (size_t i = 0; i < o->n; i++) {
        struct dwarf_eh_bases bases = {0};
        /* A pc inside the function, as an unwinder asks for a return address. */
        void *pc = (void *)(o->fns[i].start + (o->fns[i].size > 1));
        const void *fde = _Unwind_Find_FDE(pc, &bases);
        if (fde != o->eh + o->fde_off[i] || bases.func != (void *)o->fns[i].start) {
            __deregister_frame(o->eh);
            return fj_fail(FJ_ERR_UNWIND,
                           "libgcc: FDE of %s not found after __register_frame (got %p)",
                           o->fns[i].name, fde);
        }
    }
    return FJ_OK;
}

void uw_libgcc_deregister(uw_object *o) {
    /* Only ever called for a registered object: deregistering anything else
     * aborts inside libgcc. */
    __deregister_frame(o->eh);
}
