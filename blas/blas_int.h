/* blas_int.h: internals of libframejit_blas.so shared by its files. */
#ifndef FJ_BLAS_INT_H
#define FJ_BLAS_INT_H

#define FJB_HIDDEN __attribute__((visibility("hidden")))

/* The forwarded routines, in slot order (generated from blas_symbols.txt). */
FJB_HIDDEN extern const char *const fjb_names[];
FJB_HIDDEN extern const int fjb_nnames;
/* Their resolved addresses (the generated stubs jump through them). */
FJB_HIDDEN extern void *fjb_slots[];

/* The system BLAS's routine `name` (never ours), or NULL. */
FJB_HIDDEN void *fjb_real(const char *name);
/* Slot i resolved (called by the stubs' slow path); reports and aborts if
 * no fallback BLAS has the routine, as the dynamic linker would. */
FJB_HIDDEN void *fjb_resolve(int i);

#endif
