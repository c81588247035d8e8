/* uw_libgcc.h: libgcc's frame registration entry points, which no installed
 * header declares (unwind-dw2-fde.h is libgcc's own), for the back-ends
 * that call them (uw_libgcc.c, uw_object.c). */
#ifndef FJ_UW_LIBGCC_H
#define FJ_UW_LIBGCC_H

extern void __register_frame(void *begin);
extern void __deregister_frame(void *begin);
struct dwarf_eh_bases {
    void *tbase;
    void *dbase;
    void *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

#endif
