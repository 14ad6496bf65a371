/* host.c - a program for the introspection tests to run under
 * LD_PRELOAD=libsefer.so (it does not link sefer itself).
 *
 *   introspect_host [--alloc N SIZE] [--threads T] [--spawn-child] [--exit]
 *
 * Names its threads (it-host, it-worker-K), keeps N blocks of SIZE bytes
 * live, starts T threads that keep 100 blocks each, prints "ready" on
 * stdout, then waits until its stdin is closed and exits 0.  --spawn-child
 * first runs itself again with --exit and the same environment (a child
 * that inherits SEFER_* variables) and prints "child-exit STATUS". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int done, started;

static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "it-worker-%ld", (long)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    void *keep[100];
    for (int i = 0; i < 100; i++) keep[i] = malloc(100);
    pthread_mutex_lock(&lock);
    started++;
    pthread_cond_broadcast(&done_cond);
    while (!done) pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 100; i++) free(keep[i]);
    return NULL;
}

int main(int argc, char **argv) {
    long n = 0, size = 0, threads = 0;
    int spawn = 0, quit = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--alloc") == 0 && i + 2 < argc) {
            n = atol(argv[++i]);
            size = atol(argv[++i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atol(argv[++i]);
        } else if (strcmp(argv[i], "--spawn-child") == 0) {
            spawn = 1;
        } else if (strcmp(argv[i], "--exit") == 0) {
            quit = 1;
        } else {
            fprintf(stderr, "usage: introspect_host [--alloc N SIZE] [--threads T] [--spawn-child] [--exit]\n");
            return 2;
        }
    }
    pthread_setname_np(pthread_self(), "it-host");
    char **blocks = calloc((size_t)n + 1, sizeof *blocks);
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc((size_t)size);
        memset(blocks[i], 1, (size_t)size);
    }
    pthread_t *t = calloc((size_t)threads + 1, sizeof *t);
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    pthread_mutex_lock(&lock); /* "ready" means every worker has its blocks */
    while (started < threads) pthread_cond_wait(&done_cond, &lock);
    pthread_mutex_unlock(&lock);
    if (spawn) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", "introspect_host", "--exit", (char *)NULL);
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        printf("child-exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    if (quit) return 0;
    printf("ready\n");
    fflush(stdout);
    {
        char buf[64];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
    }
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    free(t);
    return 0;
}
