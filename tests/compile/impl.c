/* tests/compile/impl.c - the one translation unit that holds the implementation.

   Linked with user.c (declarations only) to check that the header links as two translation
   units without duplicate or missing symbols. It includes the header three times, the way real
   code does: declarations first (as from another header), then the implementation, then once
   more, which the implementation guard makes harmless. Built as C99 -pedantic, as C++, and with
   FLASHATTN_NO_BLAS by the Makefile's test-compile rule. */
#include "flashattn.h"

#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "flashattn.h"

#ifndef FLASHATTN__IMPLEMENTATION_DONE
#error "FLASHATTN_IMPLEMENTATION did not compile the implementation"
#endif

/* a symbol of this unit's own, so that the object is not empty of user code */
int fa_compile_impl_unit(void);
int fa_compile_impl_unit(void) { return FLASHATTN_VERSION_MAJOR * 100 + FLASHATTN_VERSION_MINOR; }
