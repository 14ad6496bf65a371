/* first_alloc.c - a library the probe links whose constructor allocates.
 * The dynamic loader runs the constructors of a program's libraries before
 * that of a preloaded libsefer.so (libselinux's, which fopens
 * /proc/filesystems, in sed, tar, find and ls), so the
 * process's first allocation comes before sefer's constructor: sefer
 * initialises inside it.  That first block must be the guard level's
 * (it was a level-1 block, and its free at level 2 or 3 reported an
 * overflow and aborted), aligned as asked.
 *
 * FIRST_ALLOC names the first call: malloc, calloc, realloc, aligned (64),
 * page (memalign 4096), medium, span, or overflow (malloc(24) and a write
 * past it, which level 2 must report at its free).  A block of each kind is
 * also kept for main (first_alloc_release). */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int first_alloc_release(void);

static void *kept[4];
static int bad;

static void *first(const char *what) {
    void *p = NULL;
    if (strcmp(what, "calloc") == 0) {
        p = calloc(3, 8);
        for (int i = 0; p != NULL && i < 24; i++)
            if (((char *)p)[i] != 0) bad = 1;
    } else if (strcmp(what, "realloc") == 0) {
        p = realloc(NULL, 24);
    } else if (strcmp(what, "aligned") == 0) {
        if (posix_memalign(&p, 64, 64) != 0) p = NULL;
        if ((uintptr_t)p % 64 != 0) bad = 1;
    } else if (strcmp(what, "page") == 0) {
        p = memalign(4096, 4096);
        if ((uintptr_t)p % 4096 != 0) bad = 1;
    } else if (strcmp(what, "medium") == 0) {
        p = malloc(40000);
    } else if (strcmp(what, "span") == 0) {
        p = malloc(3u << 20);
    } else {
        p = malloc(24);
    }
    if (p == NULL) bad = 1;
    return p;
}

__attribute__((constructor)) static void first_alloc(void) {
    const char *what = getenv("FIRST_ALLOC");
    if (what == NULL) return;
    volatile char *p = first(what); /* (volatile: stores before a free are not dead) */
    for (int i = 0; p != NULL && i < 24; i++) p[i] = 'x';
    if (p != NULL && strcmp(what, "overflow") == 0) p[24] = 'x'; /* one byte past the request */
    free((void *)p);
    kept[0] = first(what); /* kept past sefer's constructor, freed by main */
    kept[1] = malloc(100);
    kept[2] = memalign(256, 300);
    kept[3] = calloc(1, 70000);
    if ((uintptr_t)kept[2] % 256 != 0) bad = 1;
}

/* Frees what the constructor kept; nonzero if a block was not what was asked. */
int first_alloc_release(void) {
    for (int i = 0; i < 4; i++) {
        if (kept[i] != NULL && malloc_usable_size(kept[i]) == 0) bad = 1;
        free(kept[i]);
    }
    return bad;
}
