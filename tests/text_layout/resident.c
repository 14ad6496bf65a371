/* tests/text_layout/resident.c - which pages of libsefer.so's code a
 * process that only allocates keeps resident.
 *
 * Runs the paths every program under sefer takes (small, medium and large
 * blocks, calloc, realloc that grows and shrinks, aligned requests, a
 * second thread whose frees are cross-thread, a thread that exits), then
 * prints the file offset of every resident page of the library's
 * executable mapping ("page 0x4000"), read from /proc/self/pagemap (bit
 * 63, present: readable without privilege), and of its read-only data
 * ("data 0x3d000").  check.py compares them with where lib/hot_text.ld
 * put the common code and lib/hot_rodata.ld the library's own tables
 * (docs/design.md, "Code layout").  Exits 77 when pagemap or the mapping cannot be read. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 512

static void *slots[SLOTS];

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random sizes over a range, each block written, freed in random order. */
static void churn(size_t lo, size_t hi, int steps, uint64_t seed) {
    for (int i = 0; i < steps; i++) {
        size_t k = next(&seed) % SLOTS;
        free(slots[k]);
        size_t n = lo + next(&seed) % (hi - lo + 1);
        slots[k] = malloc(n);
        if (slots[k] == NULL) exit(1);
        memset(slots[k], (int)k, n < 64 ? n : 64);
    }
}

static void release_all(void) {
    for (int k = 0; k < SLOTS; k++) {
        free(slots[k]);
        slots[k] = NULL;
    }
}

/* A thread that allocates and hands half its blocks back to the caller,
 * which frees them: cross-thread frees. */
static void *producer(void *arg) {
    void **out = arg;
    for (int i = 0; i < 4096; i++) {
        void *p = malloc(16 + (size_t)(i % 97) * 8);
        if (p == NULL) exit(1);
        if (i % 2) out[i / 2] = p;
        else free(p);
    }
    return NULL;
}

static void exercise(void) {
    churn(16, 512, 20000, 1);
    /* (enough that the slow paths' allocations pass 16 MiB, where the heap
     * profile's countdown runs out with the profile off: profile.c,
     * SF_SAMPLE_IDLE; a busy program's every 16 MiB) */
    churn(16, 2048, 400000, 2);
    release_all();
    churn(2048, 65536, 40000, 3);
    churn(65536, 262144, 600, 4);
    release_all();
    for (int i = 0; i < 8; i++) { /* large blocks, taken and freed */
        void *p = malloc((size_t)(1 + i) << 20);
        if (p == NULL) exit(1);
        memset(p, 1, 4096);
        free(p);
    }
    for (int i = 0; i < 1000; i++) {
        void *c = calloc(1 + (size_t)i % 40, 24);
        void *r = realloc(NULL, 40);
        for (size_t n = 40; n < 300000; n *= 2) r = realloc(r, n);
        r = realloc(r, 24);
        void *a = aligned_alloc(64, 256);
        void *m = NULL;
        if (c == NULL || r == NULL || a == NULL || posix_memalign(&m, 4096, 100) != 0) exit(1);
        free(c);
        free(r);
        free(a);
        free(m);
    }
    void **handed = calloc(2048, sizeof(void *));
    if (handed == NULL) exit(1);
    for (int round = 0; round < 4; round++) {
        pthread_t t;
        if (pthread_create(&t, NULL, producer, handed) != 0 || pthread_join(t, NULL) != 0) exit(1);
        for (int i = 0; i < 2048; i++) free(handed[i]);
    }
    free(handed);
}

int main(void) {
    exercise();
    FILE *maps = fopen("/proc/self/maps", "r");
    int pagemap = open("/proc/self/pagemap", O_RDONLY);
    if (maps == NULL || pagemap < 0) {
        puts("skip: /proc/self/maps or /proc/self/pagemap unreadable");
        return 77;
    }
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end, offset;
        char perms[8];
        if (strstr(line, "libsefer") == NULL || sscanf(line, "%lx-%lx %7s %lx", &start, &end, perms, &offset) != 4 ||
            perms[1] == 'w')
            continue;
        const char *kind = perms[2] == 'x' ? "page" : "data";
        found |= perms[2] == 'x';
        /* (where it lies: fault-around windows are aligned in addresses) */
        printf("map %#lx %#lx %#lx %s\n", start, end, offset, perms);
        for (unsigned long a = start; a < end; a += 4096) {
            uint64_t entry;
            if (pread(pagemap, &entry, sizeof entry, (off_t)(a / 4096 * 8)) != sizeof entry) {
                puts("skip: pagemap unreadable");
                return 77;
            }
            if (entry >> 63) printf("%s %#lx\n", kind, offset + (a - start));
        }
    }
    if (!found) {
        puts("skip: no executable mapping of libsefer in /proc/self/maps (not preloaded?)");
        return 77;
    }
    return 0;
}
