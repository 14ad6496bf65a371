/* override_dl.c - dlclose, passed on to glibc's, so that the heap profile's
 * unwinder (unwind.c) forgets the rules it derived from an object's tables
 * once the object can be gone: another object may then be loaded at the
 * same addresses, with other rules.  In the shared library with the
 * standard names only (lib/meson.build): a static program's dlclose is
 * libc.a's, and RTLD_NEXT has nothing below it there. */
#include "profile.h"

#include <dlfcn.h>

typedef int (*dlclose_fn)(void *);

/* from here on the unwinder may keep its rules */
__attribute__((constructor)) static void dlclose_seen(void) {
    __atomic_store_n(&sf_unwind_sees_dlclose, true, __ATOMIC_RELEASE);
}

SEFER_EXPORT int dlclose(void *handle) {
    static dlclose_fn next;
    dlclose_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        f = (dlclose_fn)(uintptr_t)dlsym(RTLD_NEXT, "dlclose");
        if (f == NULL) return -1; /* (no glibc below us: nothing was loaded either) */
        __atomic_store_n(&next, f, __ATOMIC_RELEASE);
    }
    /* before: a rule derived while the object goes is not kept past the
     * generation; after: none derived from it while it went survives */
    sf_unwind_forget();
    int r = f(handle);
    sf_unwind_forget();
    return r;
}
