/* fuzz_http_corpus.c - replays the HTTP fuzz corpus without libFuzzer (meson
 * test "fuzz-http-corpus"): starts the server as the fuzz target does, sends
 * every file of CORPUS-DIR, in name order, through LLVMFuzzerTestOneInput
 * (fuzz_http.c, with all its checks), and ends with GET /healthz.
 *
 *   fuzz_http_corpus CORPUS-DIR [EXPECT-FILE]
 *
 * EXPECT-FILE (expect.txt) says what the seeds are for: lines "FILE STATUS
 * [STATUS...]", the statuses the first reply to FILE may have (0: the server
 * closed without one); '#' starts a comment.  Every file it names must be in
 * the corpus.  Inputs the fuzzer found have no line: they must only pass the
 * checks. */
#include "fuzz_http.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT_MAX 256
#define STATUS_MAX 4

static struct {
    char file[128];
    int status[STATUS_MAX];
    unsigned count;
    bool seen;
} expect[EXPECT_MAX];
static unsigned expect_count;

static bool load_expectations(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return false;
    }
    char line[512];
    for (unsigned no = 1; fgets(line, sizeof line, f) != NULL; no++) {
        char *save, *word = strtok_r(line, " \t\r\n", &save);
        if (word == NULL || word[0] == '#') continue;
        if (expect_count == EXPECT_MAX || strlen(word) >= sizeof expect[0].file) {
            fprintf(stderr, "%s:%u: too many lines, or the name is too long\n", path, no);
            fclose(f);
            return false;
        }
        snprintf(expect[expect_count].file, sizeof expect[0].file, "%s", word);
        while ((word = strtok_r(NULL, " \t\r\n", &save)) != NULL &&
               expect[expect_count].count < STATUS_MAX)
            expect[expect_count].status[expect[expect_count].count++] = atoi(word);
        expect_count++;
    }
    fclose(f);
    return true;
}

/* Whether the last reply's status is one the file expects (or it has no line). */
static bool as_expected(const char *name) {
    for (unsigned i = 0; i < expect_count; i++) {
        if (strcmp(expect[i].file, name) != 0) continue;
        expect[i].seen = true;
        for (unsigned k = 0; k < expect[i].count; k++)
            if (expect[i].status[k] == fuzz_http_last_status) return true;
        fprintf(stderr, "fuzz-http-corpus: %s: status %d, expected", name, fuzz_http_last_status);
        for (unsigned k = 0; k < expect[i].count; k++)
            fprintf(stderr, " %d", expect[i].status[k]);
        fputc('\n', stderr);
        return false;
    }
    return true;
}

/* The first files after which the server held the connection open
 * (fuzz_http_lingered), for the summary. */
static char lingered[160];

static bool replay(const char *dir, const char *name) {
    static uint8_t buf[1 << 20];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return false;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unsigned long before = fuzz_http_lingered;
    fuzz_http_input = name;
    LLVMFuzzerTestOneInput(buf, n);
    fuzz_http_input = NULL;
    size_t used = strlen(lingered);
    if (fuzz_http_lingered != before && used + strlen(name) + 2 < sizeof lingered)
        snprintf(lingered + used, sizeof lingered - used, " %s", name);
    return as_expected(name);
}

static int visible(const struct dirent *e) {
    return e->d_name[0] != '.';
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s CORPUS-DIR [EXPECT-FILE]\n", argv[0]);
        return 2;
    }
    if (argc == 3 && !load_expectations(argv[2])) return 1;
    struct dirent **names;
    int files = scandir(argv[1], &names, visible, alphasort), failed = 0;
    if (files < 0) {
        perror(argv[1]);
        return 1;
    }
    for (int i = 0; i < files; i++) {
        failed += !replay(argv[1], names[i]->d_name);
        free(names[i]);
    }
    free(names);
    fuzz_http_finish();
    for (unsigned i = 0; i < expect_count; i++) {
        if (expect[i].seen) continue;
        fprintf(stderr, "fuzz-http-corpus: %s is in the expectations but not in %s\n",
                expect[i].file, argv[1]);
        failed++;
    }
    if (fuzz_http_lingered > 0)
        printf("fuzz-http-corpus: %lu connections held open after the client half-closed (reset by "
               "the client), among them:%s\n",
               fuzz_http_lingered, lingered);
    printf("fuzz-http-corpus: %d files (%u with an expected status), %d failed, the server still "
           "answers\n",
           files, expect_count, failed);
    return failed != 0 || files == 0;
}
