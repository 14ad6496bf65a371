/* host.c - a program for the introspection tests to run under
 * LD_PRELOAD=libsefer.so (it does not link sefer itself).
 *
 *   introspect_host [--alloc N SIZE] [--threads T] [--spawn-child] [--exit]
 *                   [--fds MODE] [--emfile] [--maps] [--status S]
 *
 * Names its threads (it-host, it-worker-K), keeps N blocks of SIZE bytes
 * live, starts T threads that keep 100 blocks each, prints "ready" on
 * stdout, then waits until its stdin is closed and exits 0 (or S).
 * --spawn-child first runs itself again with --exit and the same
 * environment (a child that inherits SEFER_* variables) and prints
 * "child-exit STATUS".
 *
 * What hosts do to descriptors, before "ready" (--fds): close-all closes
 * every descriptor from 3 up (closefrom, as daemons do), dup2-all puts
 * /dev/null on every open descriptor from 3 up, close-low closes 3..63,
 * dup2-low puts /dev/null on 3 and 4 (a shell's `exec 3>file`).  --emfile,
 * after "ready": lowers RLIMIT_NOFILE to 256, opens /dev/null until EMFILE,
 * prints "full", waits for a line on stdin, closes them and prints "freed".
 * --maps prints "mhd 1" if libmicrohttpd is mapped, else "mhd 0". */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* Every open descriptor from 3 up (at most max), from /proc/self/fd. */
static int open_fds(int *fds, int max) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL && n < max;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > 2 && fd != dirfd(d)) fds[n++] = fd;
    }
    if (d != NULL) closedir(d);
    return n;
}

/* dup2 fails with EBUSY while another thread is between taking a
 * descriptor's number and installing it (Linux's dup2(2)): the
 * introspection thread opens its own descriptors at any time, so a lost
 * race is tried again (it failed CI once as "--fds dup2-low failed"). */
static int dup2_retrying(int from, int to) {
    int r;
    while ((r = dup2(from, to)) < 0 && errno == EBUSY)
        sched_yield();
    return r;
}

static int abuse_fds(const char *mode) {
    int fds[4096], n = open_fds(fds, 4096), nul = open("/dev/null", O_RDONLY);
    if (strcmp(mode, "close-all") == 0) return close_range(3, ~0u, 0);
    if (strcmp(mode, "dup2-all") == 0)
        for (int i = 0; i < n; i++) dup2(nul, fds[i]);
    else if (strcmp(mode, "close-low") == 0)
        for (int fd = 3; fd < 64; fd++) close(fd);
    else if (strcmp(mode, "dup2-low") == 0)
        return dup2_retrying(nul, 3) == 3 && dup2_retrying(nul, 4) == 4 ? 0 : -1;
    else
        return -1;
    return 0;
}

/* Runs this process out of descriptors until a line comes on stdin. */
static void exhaust_fds(void) {
    struct rlimit r = {256, 256};
    setrlimit(RLIMIT_NOFILE, &r);
    static int held[256];
    int n = 0;
    while (n < 256 && (held[n] = open("/dev/null", O_RDONLY)) >= 0) n++;
    printf("full %d\n", n);
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) return;
    while (n > 0) close(held[--n]);
    printf("freed\n");
    fflush(stdout);
}

static int mhd_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) found |= strstr(line, "libmicrohttpd") != NULL;
    if (f != NULL) fclose(f);
    return found;
}

int main(int argc, char **argv) {
    long n = 0, size = 0, threads = 0;
    int spawn = 0, quit = 0, emfile = 0, maps = 0, status = 0;
    const char *fds = NULL, *name = "it-host";
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
        } else if (strcmp(argv[i], "--fds") == 0 && i + 1 < argc) {
            fds = argv[++i];
        } else if (strcmp(argv[i], "--emfile") == 0) {
            emfile = 1;
        } else if (strcmp(argv[i], "--maps") == 0) {
            maps = 1;
        } else if (strcmp(argv[i], "--status") == 0 && i + 1 < argc) {
            status = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else {
            fprintf(stderr, "usage: introspect_host [--alloc N SIZE] [--threads T] [--spawn-child] [--exit]\n"
                            "                       [--fds MODE] [--emfile] [--maps] [--status S] [--name NAME]\n");
            return 2;
        }
    }
    pthread_setname_np(pthread_self(), name);
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
    if (fds != NULL && abuse_fds(fds) != 0) {
        fprintf(stderr, "introspect_host: --fds %s failed\n", fds);
        return 3;
    }
    if (maps) printf("mhd %d\n", mhd_mapped());
    printf("ready\n");
    fflush(stdout);
    if (emfile) exhaust_fds();
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
    return status;
}
