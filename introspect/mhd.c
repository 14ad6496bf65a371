/* mhd.c - libmicrohttpd, loaded when the first server starts.
 *
 * libsefer.so is meant to be preloaded into any program.  Linking
 * libmicrohttpd would load it, and with it GnuTLS, nettle, gmp, p11-kit and
 * five more libraries, into every such program at start-up (3.7 million
 * instructions and a dozen files opened, measured with callgrind on
 * /bin/true), whether introspection is enabled or not.  So sefer compiles
 * against libmicrohttpd's header but opens the library with dlopen only when
 * a server starts, and resolves the few functions it calls.  Loading happens
 * with server.c's srv_lock held, which the fork handlers hold across fork():
 * no lock of its own here, so none to leave locked in a fork() child. */
#include "introspect.h"

#include <dlfcn.h>
#include <stdio.h>

#ifndef SF_MHD_SONAME
#define SF_MHD_SONAME "libmicrohttpd.so.12"
#endif

static sf_mhd_t mhd;
static bool loaded;

static bool resolve(void *lib, const char *name, void **slot, char *why, size_t whylen) {
    *slot = dlsym(lib, name);
    if (*slot != NULL) return true;
    snprintf(why, whylen, "%s has no %s (libmicrohttpd too old?)", SF_MHD_SONAME, name);
    return false;
}

static bool load_locked(char *why, size_t whylen) {
    void *lib = dlopen(SF_MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(why, whylen, "cannot load %s: %s (install libmicrohttpd12)", SF_MHD_SONAME,
                 e ? e : "unknown error");
        return false;
    }
    sf_mhd_t m;
    bool ok = resolve(lib, "MHD_start_daemon", (void **)&m.start_daemon, why, whylen) &&
              resolve(lib, "MHD_stop_daemon", (void **)&m.stop_daemon, why, whylen) &&
              resolve(lib, "MHD_create_response_from_buffer_with_free_callback",
                      (void **)&m.response_from_buffer, why, whylen) &&
              resolve(lib, "MHD_add_response_header", (void **)&m.add_header, why, whylen) &&
              resolve(lib, "MHD_queue_response", (void **)&m.queue_response, why, whylen) &&
              resolve(lib, "MHD_destroy_response", (void **)&m.destroy_response, why, whylen) &&
              resolve(lib, "MHD_lookup_connection_value", (void **)&m.lookup_value, why, whylen) &&
              resolve(lib, "MHD_get_connection_values", (void **)&m.get_values, why, whylen) &&
              resolve(lib, "MHD_get_connection_info", (void **)&m.connection_info, why, whylen) &&
              resolve(lib, "MHD_add_connection", (void **)&m.add_connection, why, whylen) &&
              resolve(lib, "MHD_run", (void **)&m.run, why, whylen) &&
              resolve(lib, "MHD_get_timeout", (void **)&m.get_timeout, why, whylen) &&
              resolve(lib, "MHD_get_daemon_info", (void **)&m.daemon_info, why, whylen) &&
              resolve(lib, "MHD_suspend_connection", (void **)&m.suspend, why, whylen) &&
              resolve(lib, "MHD_resume_connection", (void **)&m.resume, why, whylen);
    if (!ok) {
        dlclose(lib);
        return false;
    }
    mhd = m; /* the library stays loaded for the life of the process */
    return true;
}

const sf_mhd_t *sf_mhd_load(char *why, size_t whylen) {
    if (!loaded) loaded = load_locked(why, whylen);
    return loaded ? &mhd : NULL;
}
