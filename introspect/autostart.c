/* autostart.c - the server started from a constructor when
 * introspect.enabled is true.
 *
 * The constructor has priority 110, so it runs after sefer's own (101, in
 * lib/init.c), which has read the configuration.  It never runs from inside
 * malloc.  Whatever goes wrong (the port is taken, the address needs a token,
 * libmicrohttpd is missing) is said once on stderr and the program goes on
 * without a server.  The fork handler and the stop at exit are installed by
 * the start itself (server.c), so that they also exist where this file does
 * not: a program linked with libsefer.a gets autostart.o only if it asks for
 * it (--whole-archive), since nothing refers to it.
 *
 * `sefer run` exports SEFER_INTROSPECT_PID, the pid of the program it runs.
 * The program's children inherit SEFER_INTROSPECT_ENABLED with it; on a
 * fixed port each of them would find the port taken and say so on stderr
 * (configure scripts and shells run hundreds of them).  So a process whose
 * pid is not that one stays silent and starts no server, unless the listen
 * address lets it take a port of its own ("HOST:PORT+" or port 0). */
#include "introspect.h"

#include <stdlib.h>
#include <unistd.h>

/* A descendant of the program `sefer run` started, whose listen address
 * gives it no port of its own (a fixed port, or a malformed address, which
 * the program has reported already). */
static bool inherited_fixed_port(void) {
    const char *pid = secure_getenv("SEFER_INTROSPECT_PID");
    if (pid == NULL || *pid == '\0' || strtol(pid, NULL, 10) == (long)getpid()) return false;
    char listen[SF_KNOB_STR_MAX], why[200];
    sf_listen_t l;
    if (sefer_config_get("introspect.listen", listen, sizeof listen) != 0) listen[0] = '\0';
    if (!sf_listen_parse(listen, &l, why, sizeof why)) return true; /* the program said it */
    return !l.next_free && !l.any_port;
}

__attribute__((constructor(110))) static void sf_introspect_autostart(void) {
    sf_ensure_init();
    if (sf_knob(SF_KNOB_INTROSPECT_ENABLED) && !inherited_fixed_port())
        sf_introspect_start_reporting(NULL);
    sf_profile_output_init();
}
