/* linkprog.c - a program that links sefer the way a user's would, built by
 * tests/package/install.sh and deb.sh with nothing but the flags of
 * `pkg-config --cflags --libs sefer` (shared) or `--static` (and -static).
 * It exits 0 when its malloc is sefer's and the prefixed API works. */
#include <sefer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *p = malloc(100);
    if (p == NULL) return 1;
    strcpy(p, "linked");
    /* a block sefer did not hand out has no usable size in sefer's heap */
    size_t usable = sefer_usable_size(p);
    struct sefer_stats st = {.size = sizeof st};
    if (sefer_stats_get(&st, sizeof st) != 0 || st.allocs == 0 || usable < 100) {
        fprintf(stderr, "linkprog: malloc is not sefer's (usable %zu, allocs %llu)\n", usable,
                (unsigned long long)st.allocs);
        return 1;
    }
    printf("%s with sefer %s\n", p, sefer_version());
    free(p);
    return 0;
}
