/*
 * replay.c — runs a fuzz target over its seed corpus without libFuzzer: `make test` replays every
 * file of tests/fuzz/corpus/<target>/ (and the other corpora a target names in tests.cmake)
 * through the same LLVMFuzzerTestOneInput that `make fuzz` builds with clang. Deterministic: the
 * files of a folder are taken in name order, each in a buffer of exactly its size (so ASan sees
 * a read one byte past the input, as under libFuzzer).
 *
 *   fuzz_<target>_replay PATH...     PATH: a corpus folder (not recursive) or one input file
 *
 * Each input's path is printed before it runs, so a crash names the input that caused it.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        fprintf(stderr, "replay: cannot stat %s\n", path);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    fclose(f);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int no_dot(const struct dirent *e) { return e->d_name[0] != '.'; }

int main(int argc, char **argv)
{
    long inputs = 0;
    int errors = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[a]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += replay_file(argv[a]) != 0;
            inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[a], &names, no_dot, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s\n", argv[a]);
            errors++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]->d_name);
            struct stat fs;
            if (stat(path, &fs) == 0 && S_ISREG(fs.st_mode)) {
                errors += replay_file(path) != 0;
                inputs++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("%s: replayed %ld inputs, %d unreadable\n", argv[0], inputs, errors);
    return errors || inputs == 0 ? 1 : 0;
}
