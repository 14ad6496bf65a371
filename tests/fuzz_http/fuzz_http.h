/* fuzz_http.h - what the corpus replay (fuzz_http_corpus.c) uses of the
 * HTTP fuzz target (fuzz_http.c). */
#ifndef SEFER_FUZZ_HTTP_H
#define SEFER_FUZZ_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* The token the server runs with (introspect.token, set through
 * SEFER_INTROSPECT_TOKEN); the seeds and http.dict carry it too. */
#define FUZZ_HTTP_TOKEN "fuzz-http-token-4c1e9a7b"

/* Re-executes the program with the token in the environment if it is not
 * there, then starts the server.  Replays and libFuzzer call it once. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input being replayed, named in the message of a failed check. */
extern const char *fuzz_http_input;
/* Status of the last input's first reply (after any 100 Continue); 0 when
 * the server closed without one, -1 for an input of the direct mode. */
extern int fuzz_http_last_status;
/* Connections the server kept open after the client had sent its request
 * and half-closed, waiting for bytes that could not come (each is reset and
 * the server asked for /healthz meanwhile).  With FUZZ_HTTP_STRICT_CLOSE=1
 * in the environment the first one is a failed check. */
extern unsigned long fuzz_http_lingered;

/* Aborts unless GET /healthz answers 200 {"status":"ok"}. */
void fuzz_http_healthz(void);
/* The last health check, then the server is stopped.  Also run at exit. */
void fuzz_http_finish(void);

#endif /* SEFER_FUZZ_HTTP_H */
