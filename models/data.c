/*
 * data.c — the data sources of the built-in model (see data.h).
 *
 * The synthetic chain: SYN_A states, each with SYN_K distinct successors. Successor 0 of state i
 * is i+1 (mod A), which makes the chain irreducible; the others are random. Transition weights
 * are Dirichlet(1,...,1) draws (normalised exponentials). The stationary distribution pi comes
 * from power iteration on the lazy chain (P + I) / 2, which has the same pi and is aperiodic, and
 * the entropy rate is H = -sum_i pi_i sum_j P_ij ln P_ij.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "models/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/files.h"
#include "models/rng.h"

#define SYN_A 32
#define SYN_K 4
static const char syn_alphabet[SYN_A + 1] = "abcdefghijklmnopqrstuvwxyz .,;!?";

#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801
#define LLMC_HEADER_BYTES 1024

struct zm_data {
    int synthetic;
    uint64_t seed, source_id;
    /* synthetic */
    int succ[SYN_A][SYN_K];
    double cum[SYN_A][SYN_K];      /* cumulative transition probabilities */
    double pi_cum[SYN_A];          /* cumulative stationary distribution */
    double entropy;
    /* file: read with pread at each batch (not mapped: a file rewritten or truncated while a run
     * reads it would fault the mapping, SIGBUS, or feed it unchecked tokens); its size and
     * modification time at open, checked before each read */
    int fd;
    uint64_t base;                 /* byte offset of the first token */
    int width;                     /* bytes per token: 1, 2 or 4 */
    uint64_t ntok;
    off_t file_bytes;
    struct timespec mtime;
    char path[256];
    char desc[512];
};

/* The generator state of global sequence k: independent of how sequences are split over ranks. */
static uint64_t seq_state(uint64_t seed, uint64_t k)
{
    uint64_t s = seed ^ 0x243F6A8885A308D3ull;
    s = zrng_next(&s) ^ (k * 0x9E3779B97F4A7C15ull);
    zrng_next(&s);
    return s;
}

zinc_status zm_data_open_synthetic(uint64_t seed, zm_data **out)
{
    *out = NULL;
    zm_data *d = calloc(1, sizeof *d);
    if (!d) return ZINC_ERR_NOMEM;
    d->synthetic = 1;
    d->seed = seed;
    uint64_t st = seed * 0xD6E8FEB86659FD93ull + 1;
    double P[SYN_A][SYN_K];
    for (int i = 0; i < SYN_A; i++) {
        d->succ[i][0] = (i + 1) % SYN_A;
        for (int k = 1; k < SYN_K; k++) {
            int j, dup;
            do {
                j = (int)(zrng_next(&st) % SYN_A);
                dup = 0;
                for (int q = 0; q < k; q++) dup |= d->succ[i][q] == j;
            } while (dup);
            d->succ[i][k] = j;
        }
        double sum = 0.0;
        for (int k = 0; k < SYN_K; k++) sum += P[i][k] = -log(zrng_unit(&st));
        double c = 0.0;
        for (int k = 0; k < SYN_K; k++) {
            P[i][k] /= sum;
            c += P[i][k];
            d->cum[i][k] = c;
        }
        d->cum[i][SYN_K - 1] = 1.0;
    }
    double pi[SYN_A], nx[SYN_A];
    for (int i = 0; i < SYN_A; i++) pi[i] = 1.0 / SYN_A;
    for (int it = 0; it < 200000; it++) {
        for (int i = 0; i < SYN_A; i++) nx[i] = 0.5 * pi[i];
        for (int i = 0; i < SYN_A; i++)
            for (int k = 0; k < SYN_K; k++) nx[d->succ[i][k]] += 0.5 * pi[i] * P[i][k];
        double diff = 0.0, s = 0.0;
        for (int i = 0; i < SYN_A; i++) {
            diff += fabs(nx[i] - pi[i]);
            s += nx[i];
        }
        for (int i = 0; i < SYN_A; i++) pi[i] = nx[i] / s;
        if (diff < 1e-15) break;
    }
    double h = 0.0, c = 0.0;
    for (int i = 0; i < SYN_A; i++) {
        for (int k = 0; k < SYN_K; k++) h -= pi[i] * P[i][k] * log(P[i][k]);
        c += pi[i];
        d->pi_cum[i] = c;
    }
    d->pi_cum[SYN_A - 1] = 1.0;
    d->entropy = h;
    uint64_t idv[3] = {SYN_A, SYN_K, seed};
    d->source_id = XXH64(idv, sizeof idv, 0);
    snprintf(d->desc, sizeof d->desc,
             "synthetic Markov chain (seed %llu): %d symbols, %d successors each, entropy rate "
             "%.4f nats/token",
             (unsigned long long)seed, SYN_A, SYN_K, h);
    *out = d;
    return ZINC_OK;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Token i of a buffer of `width`-byte little-endian tokens. */
static uint32_t token_in(const unsigned char *b, int width, uint64_t i)
{
    const unsigned char *p = b + i * (uint64_t)width;
    if (width == 1) return p[0];
    if (width == 2) return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return rd32(p);
}

/* Reads exactly n bytes at offset `at`; 0, or -1 with errno (0 for end of file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t at)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        at += (uint64_t)r;
    }
    return 0;
}

#define SCAN_CHUNK (1u << 20)

/* The token region read through once at open: its hash (the source id a resume checks) and,
 * for 2- and 4-byte tokens, that every one is < 256. */
static zinc_status scan_tokens(zm_data *d, const char *path, char *err, size_t errn)
{
    unsigned char *buf = malloc(SCAN_CHUNK);
    XXH64_state_t *h = XXH64_createState();
    zinc_status st = ZINC_OK;
    if (!buf || !h) {
        st = ZINC_ERR_NOMEM;
        snprintf(err, errn, "data file '%s': out of memory", path);
        goto done;
    }
    XXH64_reset(h, 0);
    uint64_t bytes = d->ntok * (uint64_t)d->width;
    for (uint64_t at = 0; at < bytes;) {
        size_t n = bytes - at < SCAN_CHUNK ? (size_t)(bytes - at) : SCAN_CHUNK;
        if (pread_all(d->fd, buf, n, d->base + at) != 0) {
            st = ZINC_ERR_IO;
            snprintf(err, errn, "cannot read data file '%s': %s", path,
                     errno ? strerror(errno) : "it ended early (truncated while opening?)");
            goto done;
        }
        XXH64_update(h, buf, n);
        for (uint64_t i = 0; d->width > 1 && i < n / (uint64_t)d->width; i++) {
            uint32_t t = token_in(buf, d->width, i);
            if (t >= 256) {
                st = ZINC_ERR_INVALID_ARG;
                snprintf(err, errn, "data file '%s': token %u at position %llu is outside the "
                         "vocabulary of the built-in model (256, byte-level); give it a text "
                         "file or a token file with ids < 256", path, t,
                         (unsigned long long)(at / (uint64_t)d->width + i));
                goto done;
            }
        }
        at += n;
    }
    d->source_id = XXH64_digest(h);
done:
    XXH64_freeState(h);
    free(buf);
    return st;
}

zinc_status zm_data_open_file(const char *path, uint64_t seed, zm_data **out, char *err,
                              size_t errn)
{
    *out = NULL;
    zm_data *d = calloc(1, sizeof *d);
    if (!d) return ZINC_ERR_NOMEM;
    d->fd = -1;
    d->seed = seed;
    zinc_status st = ZINC_ERR_IO;
    /* a FIFO is refused at once instead of waiting for a writer (base/files.h) */
    int fd = zfile_open_regular(path);
    struct stat sb;
    if (fd < 0 && errno == EINVAL) {
        snprintf(err, errn, "data file '%s' is not a regular file", path);
        goto fail;
    }
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, errn, "cannot read data file '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (sb.st_size == 0) {
        snprintf(err, errn, "data file '%s' is empty", path);
        st = ZINC_ERR_INVALID_ARG;
        goto fail;
    }
    d->fd = fd;
    fd = -1;
    d->file_bytes = sb.st_size;
    d->mtime = sb.st_mtim;
    snprintf(d->path, sizeof d->path, "%s", path);
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char b[12] = {0};
    size_t len = strlen(path);
    int is_bin = len >= 4 && !strcmp(path + len - 4, ".bin");
    const char *kind;
    st = ZINC_ERR_INVALID_ARG;
    if (is_bin && size >= 4 && pread_all(d->fd, b, size < sizeof b ? 4 : sizeof b, 0) != 0) {
        snprintf(err, errn, "cannot read data file '%s': %s", path,
                 errno ? strerror(errno) : "it ended early");
        st = ZINC_ERR_IO;
        goto fail;
    }
    if (is_bin && size < LLMC_HEADER_BYTES &&
        (rd32(b) == LLMC_MAGIC_U16 || rd32(b) == LLMC_MAGIC_U32)) {
        /* (read as raw tokens, the magic's bytes made token 55432 "outside the vocabulary") */
        snprintf(err, errn, "data file '%s' starts with llm.c's magic but holds %llu bytes, "
                 "less than its %d-byte header (truncated?)", path, (unsigned long long)size,
                 LLMC_HEADER_BYTES);
        goto fail;
    }
    if (is_bin && size >= LLMC_HEADER_BYTES &&
        (rd32(b) == LLMC_MAGIC_U16 || rd32(b) == LLMC_MAGIC_U32)) {
        uint32_t magic = rd32(b), version = rd32(b + 4), n = rd32(b + 8);
        d->width = magic == LLMC_MAGIC_U16 ? 2 : 4;
        /* llm.c's writer (dev/data/data_common.py) pairs each magic with one version: 1 for
         * GPT-2's uint16 tokens, 7 for Llama 3's uint32 ones */
        uint32_t want_version = magic == LLMC_MAGIC_U16 ? 1 : 7;
        if (version != want_version) {
            snprintf(err, errn, "data file '%s': llm.c token file version %u, expected %u for "
                     "magic %u", path, version, want_version, magic);
            goto fail;
        }
        /* exactly the header's tokens, as llm.c's loader checks: more bytes is no token file
         * llm.c wrote (two shards concatenated, whose second header would be read as tokens) */
        uint64_t body = size - LLMC_HEADER_BYTES, want = (uint64_t)n * (uint64_t)d->width;
        if (want != body) {
            snprintf(err, errn, "data file '%s': header says %u tokens (%llu bytes) but the "
                     "file holds %llu bytes after the header (%s)", path, n,
                     (unsigned long long)want, (unsigned long long)body,
                     want > body ? "truncated?" : "files concatenated? llm.c writes one header "
                     "per file");
            goto fail;
        }
        d->base = LLMC_HEADER_BYTES;
        d->ntok = n;
        kind = d->width == 2 ? "llm.c token file (uint16)" : "llm.c token file (uint32)";
    } else if (is_bin) {
        if (size % 2) {
            snprintf(err, errn, "data file '%s': a .bin without llm.c header is read as raw "
                     "uint16 tokens, but its size (%llu bytes) is odd", path,
                     (unsigned long long)size);
            goto fail;
        }
        d->width = 2;
        d->base = 0;
        d->ntok = size / 2;
        kind = "raw uint16 token file";
    } else {
        d->width = 1;
        d->base = 0;
        d->ntok = size;
        kind = "bytes";
    }
    if ((st = scan_tokens(d, path, err, errn)) != ZINC_OK) goto fail;
    snprintf(d->desc, sizeof d->desc, "%s: %s, %llu tokens", path, kind,
             (unsigned long long)d->ntok);
    d->entropy = NAN;
    *out = d;
    return ZINC_OK;
fail:
    if (fd >= 0) close(fd);
    zm_data_close(d);
    return st;
}

void zm_data_close(zm_data *d)
{
    if (!d) return;
    if (!d->synthetic && d->fd >= 0) close(d->fd);
    free(d);
}

double zm_data_entropy(const zm_data *d) { return d->synthetic ? d->entropy : NAN; }
const char *zm_data_describe(const zm_data *d) { return d->desc; }
uint64_t zm_data_source_id(const zm_data *d) { return d->source_id; }
uint64_t zm_data_tokens(const zm_data *d) { return d->synthetic ? 0 : d->ntok; }

zinc_status zm_data_check_context(const zm_data *d, int T, char *err, size_t errn)
{
    if (d->synthetic || d->ntok >= (uint64_t)T + 1) return ZINC_OK;
    snprintf(err, errn, "%s: too short for one sequence of the model's context (%d + 1 tokens)",
             d->desc, T);
    return ZINC_ERR_INVALID_ARG;
}

static int pick(const double *cum, int n, double u)
{
    int i = 0;
    while (i < n - 1 && u >= cum[i]) i++;
    return i;
}

zinc_status zm_data_read(const zm_data *d, uint64_t first, int count, int T, uint16_t *tokens,
                         uint16_t *targets, char *err, size_t errn)
{
    if (!d->synthetic) {
        /* a file changed since it was opened (and scanned) is not read: a rewrite may hold
         * tokens outside the vocabulary, a truncation fewer than the windows need */
        struct stat sb;
        if (fstat(d->fd, &sb) != 0) {
            snprintf(err, errn, "cannot read data file '%s': %s", d->path, strerror(errno));
            return ZINC_ERR_IO;
        }
        if (sb.st_size != d->file_bytes || sb.st_mtim.tv_sec != d->mtime.tv_sec ||
            sb.st_mtim.tv_nsec != d->mtime.tv_nsec) {
            snprintf(err, errn, "data file '%s' changed while training (%lld bytes at the start, "
                     "%lld now%s): the run stops rather than read it; restart it (with --resume "
                     "to continue from a checkpoint) to train on the new contents", d->path,
                     (long long)d->file_bytes, (long long)sb.st_size,
                     sb.st_size == d->file_bytes ? ", written since" : "");
            return ZINC_ERR_IO;
        }
    }
    unsigned char win[4 * 4096 + 4];
    for (int c = 0; c < count; c++) {
        uint64_t st = seq_state(d->seed, first + (uint64_t)c);
        uint16_t *x = tokens + (size_t)c * T, *y = targets + (size_t)c * T;
        if (d->synthetic) {
            int s = pick(d->pi_cum, SYN_A, zrng_unit(&st));
            for (int t = 0; t < T; t++) {
                x[t] = (uint16_t)(unsigned char)syn_alphabet[s];
                s = d->succ[s][pick(d->cum[s], SYN_K, zrng_unit(&st))];
                y[t] = (uint16_t)(unsigned char)syn_alphabet[s];
            }
            continue;
        }
        /* a random window, as nanoGPT's get_batch; T+1 <= ntok was checked. Read in pieces of
         * up to 4096 tokens (the window buffer on the stack). */
        uint64_t start = zrng_next(&st) % (d->ntok - (uint64_t)T);
        for (int t0 = 0; t0 < T; t0 += 4096) {
            int n = T - t0 < 4096 ? T - t0 : 4096;     /* n + 1 tokens: inputs and targets */
            uint64_t at = d->base + (start + (uint64_t)t0) * (uint64_t)d->width;
            if (pread_all(d->fd, win, (size_t)(n + 1) * (size_t)d->width, at) != 0) {
                snprintf(err, errn, "cannot read data file '%s' at byte %llu: %s", d->path,
                         (unsigned long long)at, errno ? strerror(errno) : "it ended early");
                return ZINC_ERR_IO;
            }
            for (int t = 0; t <= n; t++) {
                uint32_t v = token_in(win, d->width, (uint64_t)t);
                if (v >= 256) {
                    snprintf(err, errn, "data file '%s': token %u at position %llu is outside "
                             "the vocabulary (256); was it rewritten while training?", d->path, v,
                             (unsigned long long)(start + (uint64_t)t0 + (uint64_t)t));
                    return ZINC_ERR_IO;
                }
                if (t < n) x[t0 + t] = (uint16_t)v;
                if (t > 0) y[t0 + t - 1] = (uint16_t)v;
            }
        }
    }
    return ZINC_OK;
}
