/* cjson.c - cJSON, loaded when the first server starts.
 *
 * Linked, libcjson.so.1 would be a NEEDED entry of libsefer.so, and a
 * machine without the libcjson1 package could not preload sefer at all
 * (ld.so ignores a preload whose dependencies are missing, with one line on
 * stderr).  So, as with libmicrohttpd (mhd.c), sefer compiles against the
 * header and resolves the functions it calls with dlsym when a server
 * starts; cjson_calls.h routes every cJSON_* call of json.c and endpoints.c
 * through the table.  Called with server.c's srv_lock held.
 *
 * What stays shared: a process holds one copy of libcjson.so.1.  A host
 * that uses cJSON itself and installs its own allocator with cJSON_InitHooks
 * changes it for the server too (docs/introspection.md, "Building"). */
#include "introspect.h"

#include <dlfcn.h>
#include <stdio.h>

#ifndef SF_CJSON_SONAME
#define SF_CJSON_SONAME "libcjson.so.1"
#endif

sf_cjson_t sf_cjson;
static bool loaded;

bool sf_cjson_load(char *why, size_t whylen) {
    if (loaded) return true;
    void *lib = dlopen(SF_CJSON_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen, "cannot load %s: %s (install libcjson1)", SF_CJSON_SONAME,
                 e ? e : "unknown error");
        return false;
    }
    sf_cjson_t t;
#define SF_CJSON_RESOLVE_(f)                                                                       \
    if ((*(void **)&t.f = dlsym(lib, #f)) == NULL) {                                               \
        snprintf(why, whylen, "%s has no %s (cJSON older than 1.7.13?)", SF_CJSON_SONAME, #f);     \
        dlclose(lib);                                                                              \
        return false;                                                                              \
    }
    SF_CJSON_FUNCS(SF_CJSON_RESOLVE_)
#undef SF_CJSON_RESOLVE_
    sf_cjson = t; /* the library stays loaded for the life of the process */
    loaded = true;
    return true;
}
