/* probe.c - tells which object serves malloc/free/calloc/realloc in this
 * process and whether a symbol (default "sefer_version") is visible, so the
 * preload suite can prove that LD_PRELOAD really took effect.
 * Usage: preload_probe [SYMBOL]
 * Prints lines "malloc <path of the object defining it>", ..., then
 * "symbol <name> <value of calling it as const char *(void), or absent>". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int first_alloc_release(void); /* first_alloc.c: what its constructor kept */

static const char *owner(const char *name)
{
    void *addr = dlsym(RTLD_DEFAULT, name);
    Dl_info info;
    if (!addr)
        return "(unresolved)";
    if (!dladdr(addr, &info) || !info.dli_fname || !*info.dli_fname)
        return "(unknown)";
    return info.dli_fname;
}

int main(int argc, char **argv)
{
    const char *sym = argc > 1 ? argv[1] : "sefer_version";
    static const char *const names[] = {"malloc", "free", "calloc", "realloc",
                                        "posix_memalign", "aligned_alloc", "malloc_usable_size"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf("%s %s\n", names[i], owner(names[i]));

    const char *(*fn)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, sym);
    if (fn && strcmp(sym, "sefer_version") == 0)
        printf("symbol %s %s\n", sym, fn());
    else
        printf("symbol %s %s\n", sym, fn ? "present" : "absent");

    if (first_alloc_release() != 0)
        return 4;

    /* And the calls work: a few sizes through the interposed functions. */
    for (size_t sz = 1; sz < ((size_t)1 << 24); sz *= 3) {
        char *p = malloc(sz);
        if (!p)
            return 2;
        memset(p, 0x5a, sz);
        p = realloc(p, sz * 2);
        if (!p || p[sz - 1] != 0x5a)
            return 3;
        free(p);
    }
    return 0;
}
