/* autostart.c - the server's life in the process: started from a
 * constructor when introspect.enabled is true, forgotten by a fork() child,
 * stopped at exit.
 *
 * The constructor has priority 110, so it runs after sefer's own (101, in
 * lib/init.c), which has read the configuration.  It never runs from inside
 * malloc.  Whatever goes wrong (the port is taken, the address needs a token,
 * libmicrohttpd is missing) is said once on stderr and the program goes on
 * without a server. */
#include "introspect.h"

__attribute__((constructor(110))) static void sf_introspect_autostart(void) {
    pthread_atfork(NULL, NULL, sf_introspect_after_fork_child);
    sf_ensure_init();
    if (sf_knob(SF_KNOB_INTROSPECT_ENABLED)) sf_introspect_start_reporting(NULL);
}

/* At exit (return from main or exit()): stop the server before the
 * libraries it uses run their own destructors.  Bounded: libmicrohttpd
 * finishes the reply in progress, closes the connections and joins its
 * thread. */
__attribute__((destructor(110))) static void sf_introspect_autostop(void) { sefer_introspect_stop(); }
