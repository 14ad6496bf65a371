/* stub.c - the introspection API of a libsefer built without the server
 * (meson option introspect=disabled, or libmicrohttpd/cJSON headers
 * missing): every start fails with ENOSYS, and introspect.enabled says so
 * once on stderr. */
#include "internal.h"

static const char why[] = "this libsefer was built without the introspection server "
                          "(meson option introspect; needs libmicrohttpd-dev and libcjson-dev)";

__attribute__((constructor(110))) static void sf_introspect_autostart(void) {
    sf_ensure_init();
    if (sf_knob(SF_KNOB_INTROSPECT_ENABLED))
        sf_write_stderr("sefer: introspection: this libsefer was built without the introspection "
                        "server: no server in this process\n");
}

SEFER_EXPORT int sefer_introspect_start(const char *listen) {
    (void)listen;
    errno = ENOSYS;
    return -1;
}

SEFER_EXPORT void sefer_introspect_stop(void) {}

SEFER_EXPORT int sefer_introspect_port(void) { return 0; }

SEFER_EXPORT const char *sefer_introspect_error(void) { return why; }
