/*
 * test_model_data.c — the built-in model's data sources (models/data.c).
 *
 * Synthetic source: its stated entropy rate against the plug-in estimate of the conditional
 * entropy from counted byte pairs of generated sequences (an estimate that never looks at the
 * chain's internals); sequence k is the same however the reads are split.
 * Files: bytes, llm.c headers (uint16 and uint32), raw uint16 .bin, and each rejected input
 * with a message that names the problem; a file rewritten or truncated after it was opened is
 * refused at the next read (check_changed).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models/data.h"
#include "testutil.h"

#define T 64

static char tmpdir[256];

static void write_file(const char *name, const void *p, size_t n, char *path_out)
{
    snprintf(path_out, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(path_out, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

static void check_synthetic(void)
{
    char err[512];
    zm_data *d;
    ZT_OK(zm_data_open_synthetic(1234, &d));
    if (!d) return;
    double H = zm_data_entropy(d);
    ZT_CHECK(H > 0.0 && H <= log(4.0) + 1e-12, "entropy %.6f outside (0, ln 4]", H);
    enum { NSEQ = 3000 };
    uint16_t *x = malloc(sizeof(uint16_t) * NSEQ * T), *y = malloc(sizeof(uint16_t) * NSEQ * T);
    ZT_OK(zm_data_read(d, 0, NSEQ, T, x, y, err, sizeof err));
    static double pair[256][256], row[256];
    memset(pair, 0, sizeof pair);
    memset(row, 0, sizeof row);
    int shifted = 1, symbols = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int t = 0; t < T; t++) {
            int a = x[s * T + t], b = y[s * T + t];
            pair[a][b] += 1;
            row[a] += 1;
            if (t + 1 < T) shifted &= x[s * T + t + 1] == b;
        }
    double N = (double)NSEQ * T, Hhat = 0.0;
    for (int a = 0; a < 256; a++) {
        symbols += row[a] > 0;
        for (int b = 0; b < 256; b++)
            if (pair[a][b] > 0) Hhat += pair[a][b] / N * log(row[a] / pair[a][b]);
    }
    /* sd of the estimate ~ sqrt(var(-ln p) / N) ~ 2e-3; 0.01 is about 5 sd */
    ZT_CHECK(fabs(Hhat - H) < 0.01, "plug-in entropy %.5f vs stated %.5f", Hhat, H);
    ZT_CHECK(shifted, "targets are not the inputs shifted by one");
    ZT_CHECK(symbols == 32, "%d symbols used, expected 32", symbols);
    printf("synthetic: stated entropy %.5f, plug-in estimate %.5f nats/token\n", H, Hhat);

    /* sequence k is the same whatever the split */
    uint16_t a[8 * T], b[8 * T], ay[8 * T], by[8 * T];
    ZT_OK(zm_data_read(d, 100, 8, T, a, ay, err, sizeof err));
    ZT_OK(zm_data_read(d, 100, 3, T, b, by, err, sizeof err));
    ZT_OK(zm_data_read(d, 103, 5, T, b + 3 * T, by + 3 * T, err, sizeof err));
    ZT_CHECK(!memcmp(a, b, sizeof a) && !memcmp(ay, by, sizeof ay), "split reads differ");
    ZT_OK(zm_data_read(d, 101, 1, T, b, by, err, sizeof err));
    ZT_CHECK(memcmp(a, b, T * sizeof *a) != 0, "consecutive sequences are identical");

    zm_data *d2;
    ZT_OK(zm_data_open_synthetic(99, &d2));
    if (d2) {
        ZT_CHECK(zm_data_source_id(d2) != zm_data_source_id(d), "seeds share a source id");
        zm_data_close(d2);
    }
    free(x);
    free(y);
    zm_data_close(d);
}

static int is_window(const unsigned char *file, size_t n, const uint16_t *x, const uint16_t *y)
{
    for (size_t s = 0; s + T < n; s++) {
        int ok = 1;
        for (int t = 0; t < T && ok; t++) ok = file[s + t] == x[t] && file[s + t + 1] == y[t];
        if (ok) return 1;
    }
    return 0;
}

static void expect_error(const char *path, const char *needle)
{
    zm_data *d = NULL;
    char err[512] = "";
    zinc_status s = zm_data_open_file(path, 1, &d, err, sizeof err);
    ZT_CHECK(s != ZINC_OK && d == NULL, "%s: accepted", path);
    ZT_CHECK(strstr(err, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", path, err, needle);
    zm_data_close(d);
}

/* A data file changed after it was opened: the next read is refused naming the file — it was
 * mapped, so a truncation faulted the run (SIGBUS) and a rewrite in place fed the model tokens
 * outside the vocabulary (an embedding read out of bounds, SIGSEGV) — and a read of the
 * unchanged file still gives its windows. */
static void check_changed(const unsigned char *text)
{
    char path[512], err[512] = "";
    uint16_t raw[1000], x[2 * T], y[2 * T];
    for (int i = 0; i < 1000; i++) raw[i] = text[i];
    write_file("changing.bin", raw, sizeof raw, path);
    zm_data *d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (!d) return;
    ZT_OK(zm_data_read(d, 0, 2, T, x, y, err, sizeof err));
    /* rewritten in place, same size: tokens past the vocabulary */
    for (int i = 0; i < 1000; i++) raw[i] = 0xffff;
    FILE *f = fopen(path, "r+b");
    ZT_CHECK(f && fwrite(raw, sizeof raw, 1, f) == 1, "rewrite %s", path);
    if (f) fclose(f);
    struct timespec later[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    utimensat(AT_FDCWD, path, later, 0);       /* (a coarse clock could keep the old mtime) */
    zinc_status s = zm_data_read(d, 0, 2, T, x, y, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(err, "changed while training") && strstr(err, path),
             "a rewritten file: %s: %s", zinc_status_string(s), err);
    zm_data_close(d);
    /* truncated after the open */
    for (int i = 0; i < 1000; i++) raw[i] = text[i];
    write_file("changing.bin", raw, sizeof raw, path);
    d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (!d) return;
    ZT_CHECK(truncate(path, 100) == 0, "truncate %s", path);
    err[0] = 0;
    s = zm_data_read(d, 0, 2, T, x, y, err, sizeof err);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(err, "changed while training") && strstr(err, "2000 bytes"),
             "a truncated file: %s: %s", zinc_status_string(s), err);
    zm_data_close(d);
}

static void check_files(void)
{
    char path[512], err[512];
    unsigned char text[1000];
    for (int i = 0; i < 1000; i++) text[i] = (unsigned char)("hello, zinc! "[i % 13] + i / 13 % 3);
    write_file("a.txt", text, sizeof text, path);
    zm_data *d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (d) {
        uint16_t x[4 * T], y[4 * T];
        ZT_OK(zm_data_read(d, 0, 4, T, x, y, err, sizeof err));
        int ok = 1;
        for (int s = 0; s < 4; s++) ok &= is_window(text, sizeof text, x + s * T, y + s * T);
        ZT_CHECK(ok, "text sequences are not windows of the file");
        ZT_CHECK(zm_data_tokens(d) == 1000 && isnan(zm_data_entropy(d)), "text source");
        ZT_OK(zm_data_check_context(d, 999, err, sizeof err));
        ZT_CHECK(zm_data_check_context(d, 1000, err, sizeof err) != ZINC_OK, "too short accepted");
        zm_data_close(d);
    }

    /* llm.c uint16 file: 1024-byte header then the tokens */
    int32_t hdr[256] = {20240520, 1, 1000};
    unsigned char buf[1024 + 4000];
    memcpy(buf, hdr, sizeof hdr);
    for (int i = 0; i < 1000; i++) buf[1024 + 2 * i] = text[i], buf[1024 + 2 * i + 1] = 0;
    write_file("llmc16.bin", buf, 1024 + 2000, path);
    d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (d) {
        uint16_t x[2 * T], y[2 * T];
        ZT_OK(zm_data_read(d, 7, 2, T, x, y, err, sizeof err));
        ZT_CHECK(is_window(text, 1000, x, y) && is_window(text, 1000, x + T, y + T),
                 "llm.c uint16 sequences are not windows of the tokens");
        ZT_CHECK(zm_data_tokens(d) == 1000 && strstr(zm_data_describe(d), "llm.c"), "%s",
                 zm_data_describe(d));
        zm_data_close(d);
    }
    /* the same tokens in uint32 (llm.c's llama-3 magic, whose version is 7) */
    hdr[0] = 20240801;
    hdr[1] = 7;
    memcpy(buf, hdr, sizeof hdr);
    for (int i = 0; i < 1000; i++) {
        uint32_t v = text[i];
        memcpy(buf + 1024 + 4 * i, &v, 4);
    }
    write_file("llmc32.bin", buf, 1024 + 4000, path);
    d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (d) {
        uint16_t x[T], y[T];
        ZT_OK(zm_data_read(d, 3, 1, T, x, y, err, sizeof err));
        ZT_CHECK(is_window(text, 1000, x, y), "llm.c uint32 sequence is not a window");
        zm_data_close(d);
    }
    /* raw uint16 (nanoGPT train.bin) */
    uint16_t raw[1000];
    for (int i = 0; i < 1000; i++) raw[i] = text[i];
    write_file("raw.bin", raw, sizeof raw, path);
    d = NULL;
    ZT_OK(zm_data_open_file(path, 5, &d, err, sizeof err));
    if (d) {
        uint16_t x[T], y[T];
        ZT_OK(zm_data_read(d, 0, 1, T, x, y, err, sizeof err));
        ZT_CHECK(is_window(text, 1000, x, y) && zm_data_tokens(d) == 1000, "raw uint16 file");
        zm_data_close(d);
    }

    /* rejected inputs */
    raw[500] = 50256;
    write_file("gpt2.bin", raw, sizeof raw, path);
    expect_error(path, "token 50256 at position 500");
    write_file("odd.bin", raw, 7, path);
    expect_error(path, "odd");
    hdr[0] = 20240520;
    hdr[1] = 1;
    hdr[2] = 5000;
    memcpy(buf, hdr, sizeof hdr);
    write_file("trunc.bin", buf, 1024 + 2000, path);
    expect_error(path, "truncated");
    /* a file longer than its header's tokens: two shards concatenated (llm.c's loader refuses
     * it; zinc read the first and dropped the rest in silence) */
    hdr[2] = 1000;
    memcpy(buf, hdr, sizeof hdr);
    memcpy(buf + 1024 + 2000, buf, 1024);
    write_file("concat.bin", buf, 1024 + 2000 + 1024, path);
    expect_error(path, "files concatenated");
    write_file("extra.bin", buf, 1024 + 2000 + 100, path);
    expect_error(path, "holds 2100 bytes after the header");
    /* llm.c pairs the magics with versions: 1 for uint16, 7 for uint32 (its Llama 3 files,
     * which zinc refused as "version 7, expected 1") */
    hdr[1] = 7;
    memcpy(buf, hdr, sizeof hdr);
    write_file("ver.bin", buf, 1024 + 2000, path);
    expect_error(path, "version 7, expected 1 for magic 20240520");
    hdr[0] = 20240801;
    hdr[1] = 1;
    memcpy(buf, hdr, sizeof hdr);
    write_file("ver32.bin", buf, 1024 + 4000, path);
    expect_error(path, "version 1, expected 7 for magic 20240801");
    hdr[0] = 20240520;
    memcpy(buf, hdr, sizeof hdr);
    write_file("short-header.bin", buf, 500, path);     /* (it named token 55432 as the fault) */
    expect_error(path, "less than its 1024-byte header");
    write_file("empty.txt", buf, 0, path);
    expect_error(path, "empty");
    snprintf(path, sizeof path, "%s/no-such-file.txt", tmpdir);
    expect_error(path, "no-such-file.txt");
    expect_error(tmpdir, "not a regular file");
    /* A FIFO with no writer: refused at once, not waited on (open() used to block forever). */
    snprintf(path, sizeof path, "%s/fifo.bin", tmpdir);
    ZT_CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    expect_error(path, "not a regular file");
    unlink(path);
    check_changed(text);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zinc-model-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    check_synthetic();
    check_files();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return zt_finish("test_model_data");
}
