/* prog.c - compiled with gcc -O2 while gcc itself runs under the preloaded
 * malloc (cc1, as and ld inherit LD_PRELOAD), then run.  It is linked with
 * gen.c, written by gen_c.py, whose size sets how long the compile takes.
 * Prints only allocator-independent figures. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t gen_all(uint64_t seed);

struct entry {
    char *key;
    unsigned count;
    struct entry *next;
};

static uint64_t rng_state = 88172645463325252ull;

static uint64_t next_rand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static unsigned hash_str(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a;
    const struct entry *y = *(const struct entry *const *)b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* Word counting in a chained hash table that grows. */
static void word_counts(int n)
{
    size_t nbuckets = 16, used = 0;
    struct entry **tab = calloc(nbuckets, sizeof *tab);
    if (!tab)
        exit(2);
    for (int i = 0; i < n; i++) {
        char word[16];
        int len = 1 + (int)(next_rand() % 4);
        for (int j = 0; j < len; j++)
            word[j] = (char)('a' + next_rand() % 6);
        word[len] = '\0';
        unsigned h = hash_str(word);
        struct entry *e;
        for (e = tab[h % nbuckets]; e; e = e->next)
            if (strcmp(e->key, word) == 0)
                break;
        if (e) {
            e->count++;
            continue;
        }
        e = malloc(sizeof *e);
        if (!e || !(e->key = strdup(word)))
            exit(2);
        e->count = 1;
        e->next = tab[h % nbuckets];
        tab[h % nbuckets] = e;
        if (++used > nbuckets * 2) {
            size_t nb = nbuckets * 4;
            struct entry **nt = calloc(nb, sizeof *nt);
            if (!nt)
                exit(2);
            for (size_t b = 0; b < nbuckets; b++) {
                while (tab[b]) {
                    struct entry *m = tab[b];
                    tab[b] = m->next;
                    m->next = nt[hash_str(m->key) % nb];
                    nt[hash_str(m->key) % nb] = m;
                }
            }
            free(tab);
            tab = nt;
            nbuckets = nb;
        }
    }
    struct entry **all = malloc(used * sizeof *all);
    if (!all)
        exit(2);
    size_t k = 0;
    for (size_t b = 0; b < nbuckets; b++)
        for (struct entry *e = tab[b]; e; e = e->next)
            all[k++] = e;
    qsort(all, k, sizeof *all, cmp_entry);
    printf("words distinct=%zu top=%s:%u,%s:%u last=%s:%u\n", k, all[0]->key, all[0]->count,
           all[1]->key, all[1]->count, all[k - 1]->key, all[k - 1]->count);
    for (size_t i = 0; i < k; i++) {
        free(all[i]->key);
        free(all[i]);
    }
    free(all);
    free(tab);
}

/* A growing buffer built with realloc, then sorted as integers. */
static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void realloc_growth(int n)
{
    uint32_t *v = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        if (len == cap) {
            cap = cap ? cap + cap / 2 : 4;
            uint32_t *nv = realloc(v, cap * sizeof *v);
            if (!nv)
                exit(2);
            v = nv;
        }
        v[len++] = (uint32_t)next_rand();
    }
    qsort(v, len, sizeof *v, cmp_u32);
    uint64_t acc = 0;
    for (size_t i = 0; i < len; i += 97)
        acc = acc * 31 + v[i];
    printf("realloc n=%zu min=%u max=%u acc=%llu\n", len, v[0], v[len - 1],
           (unsigned long long)acc);
    free(v);
}

int main(int argc, char **argv)
{
    int scale = argc > 1 ? atoi(argv[1]) : 1;
    if (scale < 1)
        scale = 1;
    word_counts(200000 * scale);
    realloc_growth(300000 * scale);
    printf("generated %llu\n", (unsigned long long)gen_all(12345));
    return 0;
}
