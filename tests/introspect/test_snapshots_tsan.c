/* test_snapshots_tsan.c - the introspection server under ThreadSanitizer: snapshots
 * of segments, pages, heaps and rings taken while other threads allocate,
 * free across threads, exit and start.  Prefixed API only (sefer_malloc ...),
 * so it runs in the -Doverride=false ThreadSanitizer build as well as in
 * the release build; scripts/test.sh runs it in both (its name contains
 * "tsan").  A data race between a snapshot and an allocating thread is a
 * ThreadSanitizer report, which fails the test.  /history is sampled every
 * 100 ms (meson sets the interval) and /events read while trims record
 * events. */
#include "itest.h"

#if defined(__SANITIZE_THREAD__)
#define ROUNDS 60
#else
#define ROUNDS 300
#endif

static atomic_bool stop;
static atomic_long bad;
static int port;

struct mailbox {
    pthread_mutex_t lock;
    void *slot[256];
    unsigned count;
};
static struct mailbox box = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Allocates, keeps some, hands some to the other workers to free. */
static void *worker(void *arg)
{
    uint64_t seed = (uintptr_t)arg * 104729 + 3;
    void *own[128] = {0};
    while (!atomic_load(&stop)) {
        unsigned i = (unsigned)(st_rand(&seed) % 128);
        size_t n = 1 + st_rand(&seed) % (st_rand(&seed) % 8 == 0 ? 300000 : 2000);
        void *p = sefer_malloc(n);
        if (p == NULL) {
            atomic_fetch_add(&bad, 1);
            continue;
        }
        memset(p, 0x5a, n < 64 ? n : 64);
        pthread_mutex_lock(&box.lock);
        if (box.count < 256 && (st_rand(&seed) & 1)) {
            box.slot[box.count++] = p;
            p = NULL;
        } else if (box.count > 0) {
            sefer_free(box.slot[--box.count]); /* likely another thread's block */
        }
        pthread_mutex_unlock(&box.lock);
        if (p) {
            sefer_free(own[i]);
            own[i] = p;
        }
    }
    for (int i = 0; i < 128; i++)
        sefer_free(own[i]);
    return NULL;
}

/* Threads that start, allocate a little and exit (abandoned heaps). */
static void *short_lived(void *arg)
{
    (void)arg;
    void *p[32];
    for (int i = 0; i < 32; i++)
        p[i] = sefer_malloc(24 + i);
    for (int i = 0; i < 32; i += 2)
        sefer_free(p[i]);
    pthread_mutex_lock(&box.lock);
    for (int i = 1; i < 32 && box.count < 256; i += 2)
        box.slot[box.count++] = p[i];
    pthread_mutex_unlock(&box.lock);
    return NULL;
}

static void *spawner(void *arg)
{
    (void)arg;
    for (unsigned n = 0; !atomic_load(&stop); n++) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, NULL) == 0)
            pthread_join(t, NULL);
        if (n % 16 == 0)
            sefer_trim(); /* an event, recorded while the server reads /events */
    }
    return NULL;
}

START_TEST(test_snapshots_while_allocating)
{
    port = it_start();
    pthread_t w[3], s;
    for (long i = 0; i < 3; i++)
        pthread_create(&w[i], NULL, worker, (void *)i);
    pthread_create(&s, NULL, spawner, NULL);
    static const char *const paths[] = {"/segments?limit=10000", "/heaps", "/rings", "/stats", "/config",
                                        "/metrics", "/healthz", "/history", "/events"};
    for (int r = 0; r < ROUNDS; r++) {
        const char *path = paths[r % 9];
        it_resp_t resp;
        it_get(port, path, &resp);
        ck_assert_msg(resp.status == 200, "%s: %d", path, resp.status);
        if (strcmp(path, "/metrics") != 0) {
            cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
            ck_assert_msg(j != NULL, "%s: not JSON", path);
            if (r % 9 == 0) {
                const cJSON *segs = it_item(j, "segments");
                for (const cJSON *g = segs->child; g; g = g->next)
                    ck_assert_uint_le(it_u64(g, "blocks_used"), it_u64(g, "blocks_total"));
            }
            cJSON_Delete(j);
        }
        it_free(&resp);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(w[i], NULL);
    pthread_join(s, NULL);
    for (unsigned i = 0; i < box.count; i++)
        sefer_free(box.slot[i]);
    ck_assert_int_eq(atomic_load(&bad), 0);
    sefer_introspect_stop();
}
END_TEST

START_TEST(test_start_stop_while_allocating)
{
    pthread_t w[2];
    atomic_store(&stop, false);
    for (long i = 0; i < 2; i++)
        pthread_create(&w[i], NULL, worker, (void *)i);
    for (int round = 0; round < 10; round++) {
        port = it_start();
        cJSON *j = it_json(port, "/segments?limit=50");
        cJSON_Delete(j);
        sefer_introspect_stop();
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    for (unsigned i = 0; i < box.count; i++)
        sefer_free(box.slot[i]);
    box.count = 0;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-tsan");
    TCase *tc = tcase_create("concurrent");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_snapshots_while_allocating);
    tcase_add_test(tc, test_start_stop_while_allocating);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
