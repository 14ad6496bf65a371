/* symbols.c - names for the addresses of sampled stacks.
 *
 * Runs in the introspection server's thread (and in the exit handler that
 * writes `sefer run --profile`'s file), never inside malloc: it allocates,
 * opens files and takes the dynamic loader's lock freely.  Its own
 * allocations are not sampled (sf_prof_quiet), so symbolizing does not fill
 * the profile with the symbolizer's sites.
 *
 * Functions, files and lines come from elfutils' libdwfl (Debian's libdw1),
 * opened with dlopen the first time a stack is named (like libmicrohttpd and
 * cJSON: a preloaded libsefer.so loads nothing it does not use): it reads
 * the ELF symbol tables of every module and, where the -dbg/-dbgsym package
 * or a debuginfo file is installed, DWARF for file:line.  Without libdw a
 * frame still has its module, its offset in the module's file, and the name
 * dladdr finds (exported symbols only).  C++ names are demangled with
 * __cxa_demangle when libstdc++ is loaded.
 *
 * Results are cached by address for as long as /proc/self/maps does not
 * change (a dlopen or dlclose starts afresh). */
#include "symbols.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(SF_HAVE_LIBDWFL)
#include <elfutils/libdwfl.h>
#endif

static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- mappings (/proc/self/maps) and build ids ---------------------------- */

static uint64_t maps_hash;
static sf_mapping_t *maps;
static size_t nmaps;

static void hex_of(const unsigned char *b, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%02x", b[i]);
    out[k] = '\0';
}

struct build_id_ctx {
    sf_mapping_t *m;
    size_t n;
    char exe[4096];
};

/* The GNU build id of each loaded object, from its PT_NOTE in memory. */
static int note_build_ids(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct build_id_ctx *c = arg;
    const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : c->exe;
    char real[4096];
    if (realpath(name, real) == NULL) snprintf(real, sizeof real, "%s", name);
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + 12 <= end) {
            uint32_t namesz, descsz, type;
            memcpy(&namesz, p, 4);
            memcpy(&descsz, p + 4, 4);
            memcpy(&type, p + 8, 4);
            const unsigned char *desc = p + 12 + ((namesz + 3) & ~3u);
            if (desc + descsz > end) break;
            if (type == 3 && namesz == 4 && memcmp(p + 12, "GNU", 4) == 0) /* NT_GNU_BUILD_ID */
                for (size_t k = 0; k < c->n; k++)
                    if (strcmp(c->m[k].path, real) == 0 && c->m[k].build_id[0] == '\0')
                        hex_of(desc, descsz, c->m[k].build_id, sizeof c->m[k].build_id);
            p = desc + ((descsz + 3) & ~3u);
        }
    }
    return 0;
}

/* Reads the executable file mappings; true if they changed since last time. */
static bool maps_refresh(void) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    ssize_t got;
    while (text != NULL && (got = read(fd, text + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (len + 1 == cap) {
            char *bigger = realloc(text, cap * 2);
            if (bigger == NULL) break;
            text = bigger;
            cap *= 2;
        }
    }
    close(fd);
    if (text == NULL) return false;
    text[len] = '\0';
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
    if (h == maps_hash && maps != NULL) {
        free(text);
        return false;
    }
    maps_hash = h;
    free(maps);
    maps = NULL;
    nmaps = 0;
    size_t room = 0;
    for (char *line = text, *next; line != NULL && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        unsigned long lo, hi, off;
        char perm[8], path[4096];
        path[0] = '\0';
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095[^\n]", &lo, &hi, perm, &off, path) < 4) continue;
        if (strchr(perm, 'x') == NULL || path[0] != '/') continue;
        if (nmaps == room) {
            room = room ? room * 2 : 32;
            sf_mapping_t *m = realloc(maps, room * sizeof *m);
            if (m == NULL) break;
            maps = m;
        }
        sf_mapping_t *m = &maps[nmaps++];
        memset(m, 0, sizeof *m);
        m->start = lo;
        m->limit = hi;
        m->offset = off;
        snprintf(m->path, sizeof m->path, "%s", path);
    }
    free(text);
    struct build_id_ctx *c = malloc(sizeof *c);
    if (c != NULL) {
        c->m = maps;
        c->n = nmaps;
        ssize_t n = readlink("/proc/self/exe", c->exe, sizeof c->exe - 1);
        c->exe[n > 0 ? n : 0] = '\0';
        dl_iterate_phdr(note_build_ids, c);
        /* the program first: pprof takes the first mapping for the main binary */
        for (size_t k = 0; k < nmaps; k++)
            if (strcmp(maps[k].path, c->exe) == 0) {
                maps[k].main = true;
                if (k != 0) {
                    sf_mapping_t t = maps[k];
                    memmove(&maps[1], &maps[0], k * sizeof *maps);
                    maps[0] = t;
                }
                break;
            }
        free(c);
    }
    return true;
}

/* ---- the cache of names --------------------------------------------------- */

struct entry {
    uintptr_t addr; /* 0: empty */
    sf_sym_t sym;
};
static struct entry *cache;
static size_t cache_cap, cache_used;

static void cache_clear(void) {
    for (size_t i = 0; i < cache_cap; i++) {
        if (cache[i].addr == 0) continue;
        free((char *)cache[i].sym.function);
        free((char *)cache[i].sym.file);
    }
    free(cache);
    cache = NULL;
    cache_cap = cache_used = 0;
}

static size_t cache_slot(uintptr_t a) { return (size_t)((a * 0x9e3779b97f4a7c15ull) >> 20) & (cache_cap - 1); }

static struct entry *cache_find(uintptr_t a) {
    if (cache_cap == 0) return NULL;
    for (size_t j = cache_slot(a); cache[j].addr != 0; j = (j + 1) & (cache_cap - 1))
        if (cache[j].addr == a) return &cache[j];
    return NULL;
}

static struct entry *cache_add(uintptr_t a) {
    if ((cache_used + 1) * 2 > cache_cap) {
        size_t n = cache_cap ? cache_cap * 2 : 1024;
        struct entry *fresh = calloc(n, sizeof *fresh), *old = cache;
        if (fresh == NULL) return NULL;
        size_t old_cap = cache_cap;
        cache = fresh;
        cache_cap = n;
        for (size_t i = 0; i < old_cap; i++) {
            if (old[i].addr == 0) continue;
            size_t j = cache_slot(old[i].addr);
            while (cache[j].addr != 0) j = (j + 1) & (n - 1);
            cache[j] = old[i];
        }
        free(old);
    }
    size_t j = cache_slot(a);
    while (cache[j].addr != 0) j = (j + 1) & (cache_cap - 1);
    cache[j].addr = a;
    memset(&cache[j].sym, 0, sizeof cache[j].sym);
    cache_used++;
    return &cache[j];
}

/* ---- libdwfl -------------------------------------------------------------- */

#if defined(SF_HAVE_LIBDWFL)
static struct {
    __typeof__(dwfl_begin) *begin;
    __typeof__(dwfl_end) *end;
    __typeof__(dwfl_report_begin) *report_begin;
    __typeof__(dwfl_report_end) *report_end;
    __typeof__(dwfl_linux_proc_report) *proc_report;
    __typeof__(dwfl_addrmodule) *addrmodule;
    __typeof__(dwfl_module_addrname) *addrname;
    __typeof__(dwfl_module_getsrc) *getsrc;
    __typeof__(dwfl_lineinfo) *lineinfo;
    Dwfl_Callbacks callbacks;
} dw;
static Dwfl *dwfl;
static int dw_state; /* 0: not tried, 1: loaded, -1: not available */

static bool dw_load(void) {
    if (dw_state != 0) return dw_state > 0;
    dw_state = -1;
    void *lib = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return false;
#define SF_DW_(slot, name) ((dw.slot = (__typeof__(dw.slot))dlsym(lib, name)) != NULL)
    void *find_elf = dlsym(lib, "dwfl_linux_proc_find_elf"), *find_debug = dlsym(lib, "dwfl_standard_find_debuginfo");
    if (!(SF_DW_(begin, "dwfl_begin") && SF_DW_(end, "dwfl_end") && SF_DW_(report_begin, "dwfl_report_begin") &&
          SF_DW_(report_end, "dwfl_report_end") && SF_DW_(proc_report, "dwfl_linux_proc_report") &&
          SF_DW_(addrmodule, "dwfl_addrmodule") && SF_DW_(addrname, "dwfl_module_addrname") &&
          SF_DW_(getsrc, "dwfl_module_getsrc") && SF_DW_(lineinfo, "dwfl_lineinfo")) ||
        find_elf == NULL || find_debug == NULL)
        return false;
#undef SF_DW_
    dw.callbacks.find_elf = (__typeof__(dw.callbacks.find_elf))find_elf;
    dw.callbacks.find_debuginfo = (__typeof__(dw.callbacks.find_debuginfo))find_debug;
    dw_state = 1;
    return true;
}

static void dw_report(void) {
    if (!dw_load()) return;
    if (dwfl == NULL) dwfl = dw.begin(&dw.callbacks);
    if (dwfl == NULL) return;
    dw.report_begin(dwfl);
    dw.proc_report(dwfl, getpid());
    dw.report_end(dwfl, NULL, NULL);
}

static void dw_name(uintptr_t a, sf_sym_t *s) {
    if (dwfl == NULL) return;
    Dwfl_Module *mod = dw.addrmodule(dwfl, a);
    if (mod == NULL) return;
    const char *name = dw.addrname(mod, a);
    if (name != NULL && s->function == NULL) s->function = strdup(name);
    Dwfl_Line *line = dw.getsrc(mod, a);
    int lineno = 0;
    const char *file = line ? dw.lineinfo(line, NULL, &lineno, NULL, NULL, NULL) : NULL;
    if (file != NULL) {
        s->file = strdup(file);
        s->line = lineno;
    }
}
#else
static void dw_report(void) {}
static void dw_name(uintptr_t a, sf_sym_t *s) {
    (void)a;
    (void)s;
}
#endif

static char *demangle(const char *name) {
    typedef char *demangle_fn(const char *, char *, size_t *, int *);
    static demangle_fn *fn;
    static bool looked;
    if (!looked) {
        fn = (demangle_fn *)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        looked = true;
    }
    if (fn == NULL || strncmp(name, "_Z", 2) != 0) return NULL;
    int status = -1;
    char *out = fn(name, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static void name_address(uintptr_t a, sf_sym_t *s) {
    s->mapping = UINT32_MAX;
    for (size_t k = 0; k < nmaps; k++)
        if (a >= maps[k].start && a < maps[k].limit) {
            s->mapping = (uint32_t)k;
            s->module_offset = a - maps[k].start + maps[k].offset;
            break;
        }
    dw_name(a, s);
    if (s->function == NULL) { /* exported symbols only, and only inside one */
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        if (dladdr1((void *)a, &info, (void **)&sym, RTLD_DL_SYMENT) != 0 && info.dli_sname != NULL &&
            sym != NULL && a - (uintptr_t)info.dli_saddr < sym->st_size)
            s->function = strdup(info.dli_sname);
    }
    if (s->function != NULL) { /* "__libc_start_main@@GLIBC_2.34": the name without its version */
        char *at = strchr(s->function, '@');
        if (at != NULL && at != s->function) *at = '\0';
        char *d = demangle(s->function);
        if (d != NULL) {
            free((char *)s->function);
            s->function = d;
        }
    }
}

/* ---- the interface ------------------------------------------------------- */

/* Whether this thread holds sym_lock: the exit writer of profile.output
 * names frames in the host's thread, and a fork() from a signal handler
 * there leaves the lock held by the child's own thread, whose state is
 * whole. */
static __thread bool sym_held_here;

static void sym_after_fork_child(void);
static pthread_once_t sym_once = PTHREAD_ONCE_INIT;
static void sym_install(void) { pthread_atfork(NULL, NULL, sym_after_fork_child); }

void sf_sym_begin(void) {
    pthread_once(&sym_once, sym_install); /* (before the lock: a fork holds atfork's) */
    sf_lock(&sym_lock);
    sym_held_here = true;
    sf_prof_quiet(true);
    if (maps_refresh()) {
        cache_clear();
        dw_report();
    }
}

void sf_sym_end(void) {
    sf_prof_quiet(false);
    sym_held_here = false;
    sf_unlock(&sym_lock);
}

/* In a fork() child (a handler installed by the first sf_sym_begin, in
 * every process that names frames, serving or not): a thread that was
 * naming addresses when the parent forked (a server's reply, one stopped
 * without waiting for its thread included, or the exit writer of
 * profile.output) left sym_lock held and the cache or libdwfl's state
 * perhaps half changed.  That thread is not in the child: start afresh,
 * with a new lock and nothing cached.  The old structures are left as they
 * are, not freed: half changed, they cannot be walked safely.  libdw is
 * tried again (a dlopen cut by the fork left it marked unavailable). */
static void sym_after_fork_child(void) {
    if (sym_held_here || !sf_lock_lost_at_fork(&sym_lock)) return; /* (held here: this thread's own section, whole) */
    maps_hash = 0;
    maps = NULL;
    nmaps = 0;
    cache = NULL;
    cache_cap = cache_used = 0;
#if defined(SF_HAVE_LIBDWFL)
    dwfl = NULL;
    if (dw_state < 0) dw_state = 0;
#endif
}

static bool allocator_name(const char *f);

const sf_sym_t *sf_sym_lookup(uintptr_t addr) {
    static const sf_sym_t unknown = {.mapping = UINT32_MAX};
    struct entry *e = cache_find(addr);
    if (e != NULL) return &e->sym;
    e = cache_add(addr);
    if (e == NULL) return &unknown;
    name_address(addr, &e->sym);
    e->sym.allocator_name = allocator_name(e->sym.function);
    return &e->sym;
}

const sf_mapping_t *sf_sym_mappings(size_t *n) {
    *n = nmaps;
    return maps;
}

/* Frames of sefer's own (the top of a stack captured before sefer knew
 * where its code is, or in a program linked with libsefer.a) are not the
 * program's sites. */
bool sf_sym_is_allocator(uintptr_t addr, const sf_sym_t *s) {
    uintptr_t lo, hi;
    sf_prof_self_range(&lo, &hi);
    return (addr >= lo && addr < hi) || s->allocator_name;
}

/* (asked of every site's first frames on every request: its string
 * comparisons were 7 % of the server thread's time in a scrape of 16 000
 * sites, perf; now once an address, when it is named) */
static bool allocator_name(const char *f) {
    if (f == NULL) return false;
    static const char *const names[] = {"malloc", "calloc", "realloc", "reallocarray", "aligned_alloc",
                                        "posix_memalign", "memalign", "valloc", "pvalloc", "__libc_malloc",
                                        "__libc_calloc", "__libc_realloc", "__libc_memalign", "operator new",
                                        NULL};
    if (strncmp(f, "sf_", 3) == 0 || strncmp(f, "sefer_", 6) == 0) return true;
    for (unsigned i = 0; names[i]; i++)
        if (strncmp(f, names[i], strlen(names[i])) == 0 && (f[strlen(names[i])] == '\0' || f[strlen(names[i])] == '('))
            return true;
    return false;
}
