/* fuzz_corpus.c - replays the fuzz corpus without libFuzzer (meson test
 * "fuzz-corpus"): each file under the given directories goes through
 * LLVMFuzzerTestOneInput (fuzz_config.c, with its checks).  Besides "no
 * crash", the seed names carry expectations: valid-* must parse without an
 * error and set at least one knob (valid-empty/valid-comments: none),
 * err-* must report at least one error. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern unsigned fuzz_config_last_errors, fuzz_config_last_sets;

static int run_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    unsigned errs = fuzz_config_last_errors, sets = fuzz_config_last_sets;
    if (!strncmp(name, "valid-", 6)) {
        bool empty = !strcmp(name, "valid-empty.toml") || !strcmp(name, "valid-comments.toml");
        if (errs != 0 || (!empty && sets == 0)) {
            fprintf(stderr, "%s: %u errors, %u knobs set (expected no error and some knobs)\n", path,
                    errs, sets);
            return 1;
        }
    } else if (!strncmp(name, "err-", 4) && errs == 0) {
        fprintf(stderr, "%s: no error reported\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int failed = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            failed += run_file(argv[i], e->d_name);
            files++;
        }
        closedir(d);
    }
    printf("fuzz-corpus: %d files, %d failed\n", files, failed);
    return failed || files == 0;
}
