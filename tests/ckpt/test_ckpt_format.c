/*
 * test_ckpt_format.c — the codec and the resharding reader, without an engine.
 *
 *  - shuffle against its definition (plane b, index i = byte b of element i), and round trips
 *  - chunk encode/decode round trip, and a flipped byte is caught by the checksum
 *  - save at N = 4 ranks (local comm threads), load at M in {1, 2, 8, 7} and at N: every element
 *    of every stream equals the value the fixture defines; M = 8 and 7 have ranks whose slice of
 *    some group holds only padding
 *  - the manifest: fields, streams, the latest file, no .tmp left; the client blob round trip
 *  - async save gives the same result; a second save of a newer step becomes the one auto picks
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "testutil.h"

static char root[512];

static void test_shuffle(void)
{
    zt_rng g = {1};
    for (size_t es = 1; es <= 8; es *= 2) {
        size_t n = 1000 + es;
        uint8_t *a = malloc(n * es), *b = malloc(n * es), *c = malloc(n * es);
        for (size_t i = 0; i < n * es; i++) a[i] = (uint8_t)zt_next(&g);
        zck_shuffle(b, a, n, es);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < es; k++) bad += b[k * n + i] != a[i * es + k];
        ZT_CHECK(bad == 0, "esize %zu: %d bytes not where the definition puts them", es, bad);
        zck_unshuffle(c, b, n, es);
        ZT_CHECK(memcmp(a, c, n * es) == 0, "esize %zu: unshuffle is not the inverse", es);
        free(a);
        free(b);
        free(c);
    }
}

static void test_codec(void)
{
    size_t n = 10000, raw = n * 4;
    float *x = malloc(raw), *y = malloc(raw);
    zt_rng g = {2};
    for (size_t i = 0; i < n; i++) x[i] = (float)(0.02 * zt_normal(&g));
    zck_codec_ctx *cc = zck_codec_ctx_create(raw);
    uint8_t *enc = malloc(zck_encode_bound(raw));
    size_t len;
    uint64_t rh, ch;
    char err[ZCK_ERR];
    ZT_OK(zck_encode(cc, x, raw, 4, 1, 3, enc, &len, &rh, &ch, err));
    ZT_CHECK(len < raw, "normal floats did not compress: %zu of %zu", len, raw);
    ZT_OK(zck_decode(cc, enc, len, ch, y, raw, rh, 4, 1, "test chunk", err));
    ZT_CHECK(memcmp(x, y, raw) == 0, "round trip changed the data");
    enc[len / 2] ^= 0x10;
    zinc_status s = zck_decode(cc, enc, len, ch, y, raw, rh, 4, 1, "test chunk 7", err);
    ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(err, "test chunk 7"),
             "flipped byte: got %s, \"%s\"", zinc_status_string(s), err);
    free(x);
    free(y);
    free(enc);
    zck_codec_ctx_free(cc);
}

static void check_all(const char *tagdir, int M, unsigned streams, uint32_t salt, const char *what)
{
    char err[ZCK_ERR];
    zck_reader *r;
    zinc_status s = zck_open(tagdir, &r, err);
    ZT_CHECK(s == ZINC_OK, "%s: open: %s", what, err);
    if (s != ZINC_OK) return;
    zplan p;
    fx_plan(M, &p);
    int empty = 0;
    for (int rank = 0; rank < M; rank++) {
        for (int g = 0; g < p.ngroups; g++) {
            int any = 0;
            for (int t = 0; t < p.nparams; t++) {
                size_t lo, hi, pos;
                if (p.params[t].group == g && zplan_param_in_slice(&p, t, rank, &lo, &hi, &pos)) any = 1;
            }
            empty += !any;
        }
        for (int st = 0; st < ZCK_NSTREAMS; st++) {
            if (!(streams & (1u << st))) continue;
            long bad = fx_check_rank(r, &p, rank, st, salt, err);
            ZT_CHECK(bad == 0, "%s: load at M=%d rank %d stream %s: %ld wrong (%s)", what, M, rank,
                     zck_stream_name(st), bad, bad < 0 ? err : "");
        }
    }
    if (M >= 7) ZT_CHECK(empty > 0, "M=%d should have a rank with an empty slice of some group", M);
    zplan_free(&p);
    zck_close(r);
}

static void test_reshard(void)
{
    char dir[600], tagdir[700], path[800];
    snprintf(dir, sizeof dir, "%s/reshard", root);
    unsigned streams = 0xF;
    ZT_OK(fx_save_world(dir, "step7", 4, streams, 1, 4096, 0));
    snprintf(tagdir, sizeof tagdir, "%s/step7", dir);
    int Ms[] = {4, 1, 2, 8, 7};
    for (int i = 0; i < 5; i++) check_all(tagdir, Ms[i], streams, 1, "N=4");

    /* the manifest and the commit */
    char err[ZCK_ERR];
    zck_reader *r;
    ZT_OK(zck_open(tagdir, &r, err));
    if (r) {
        const zck_manifest *m = zck_reader_manifest(r);
        ZT_CHECK(m->version == ZCK_FORMAT_VERSION && m->world_size == 4 && m->step == 7 &&
                     m->stage == 2 && m->ntensors == FX_NTENSORS && m->streams == streams &&
                     !strcmp(m->config_hash, "0123456789abcdef") && m->dtype == ZINC_DTYPE_BF16,
                 "manifest fields differ from what was saved");
        ZT_CHECK(m->engine_state && strstr(m->engine_state, "\"step\""), "engine state lost");
        uint64_t total = 0;
        for (int k = 0; k < m->nranks; k++) total += m->ranks[k].streams[ZCK_MASTER].raw_bytes;
        uint64_t want = 0;
        for (int t = 0; t < m->ntensors; t++) want += m->tensors[t].numel * 4;
        ZT_CHECK(total == want, "master raw bytes %llu, tensors hold %llu",
                 (unsigned long long)total, (unsigned long long)want);
        int multi = 0;
        for (int k = 0; k < m->nranks; k++) multi |= m->ranks[k].streams[ZCK_MASTER].nchunks > 1;
        ZT_CHECK(multi, "chunks of 4 KiB should split some rank's master stream");
        char blob[256];
        size_t nb;
        ZT_OK(zck_read_blob(r, blob, sizeof blob, &nb, err));
        ZT_CHECK(nb == 32 && !strcmp(blob, "data position 12345, rng 0xfeed"), "blob round trip");
        ZT_OK(zck_verify(r, 2, err));
        zck_close(r);
    }
    snprintf(path, sizeof path, "%s/latest", dir);
    char *txt;
    size_t len;
    ZT_OK(zck_read_file(path, &txt, &len, err));
    if (txt) ZT_CHECK(!strcmp(txt, "step7\n"), "latest holds \"%s\"", txt);
    free(txt);
    snprintf(path, sizeof path, "%s/step7.tmp", dir);
    ZT_CHECK(access(path, F_OK) != 0, "the .tmp directory is left behind");

    /* async save of a newer step, then auto selection finds it; an older tag is still valid */
    ZT_OK(fx_save_world(dir, "step9", 3, 0x7, 2, 8192, 1));
    char td[700], tn[256];
    ZT_OK(zck_find_tag(dir, NULL, 0, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "step9"), "auto picked %s, want step9 (newer mtime, same step)", tn);
    check_all(td, 5, 0x7, 2, "async N=3");
    ZT_OK(zck_find_tag(dir, NULL, 1, -1, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "step7"), "the second candidate is %s", tn);
    /* saving the same tag again replaces it */
    ZT_OK(fx_save_world(dir, "step9", 2, 0x7, 3, 8192, 0));
    snprintf(tagdir, sizeof tagdir, "%s/step9", dir);
    check_all(tagdir, 3, 0x7, 3, "re-saved tag");
    ZT_OK(zck_resolve_path(dir, td, sizeof td, err));
    ZT_CHECK(!strcmp(td, tagdir), "resolve_path(save dir) gave %s", td);
    /* a stream that was not saved */
    ZT_OK(zck_open(tagdir, &r, err));
    if (r) {
        zplan p;
        fx_plan(2, &p);
        long bad = fx_check_rank(r, &p, 0, ZCK_WEIGHTS16, 3, err);
        ZT_CHECK(bad < 0 && strstr(err, "weights16"), "reading an absent stream: %s", err);
        zplan_free(&p);
        zck_close(r);
    }
}

/* A damaged manifest is refused, never read out of bounds: random byte edits, truncations and
 * number changes of a real manifest must each parse cleanly or fail with a message (run under
 * ASan/UBSan in the sanitizer builds). */
static void test_manifest_mutations(void)
{
    char dir[600], path[800], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/mut", root);
    ZT_OK(fx_save_world(dir, "m1", 3, 0xF, 1, 4096, 0));
    snprintf(path, sizeof path, "%s/m1/manifest.json", dir);
    char *txt = NULL;
    size_t len = 0;
    ZT_OK(zck_read_file(path, &txt, &len, err));
    if (!txt) return;
    zt_rng g = {7};
    char *buf = malloc(len + 1);
    int refused = 0, accepted = 0;
    static const char repl[] = "0123456789-{}[]\",:x9";
    for (int k = 0; k < 400; k++) {
        memcpy(buf, txt, len + 1);
        size_t n = len;
        int edits = 1 + (int)(zt_next(&g) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(zt_next(&g) % n);
            switch (zt_next(&g) % 3) {
            case 0: buf[at] = repl[zt_next(&g) % (sizeof repl - 1)]; break;
            case 1: n = at; buf[n] = 0; break;               /* truncation */
            default: if (buf[at] >= '0' && buf[at] <= '8') buf[at]++; break;
            }
        }
        zck_manifest m;
        zinc_status s = zck_manifest_parse(buf, n, "mutated", &m, err);
        if (s == ZINC_OK) {
            /* The checksum covers every byte: only a mutation that changed nothing passes. */
            accepted++;
            ZT_CHECK(n == len && !memcmp(buf, txt, len), "a changed manifest was accepted (mutation %d)", k);
            zck_manifest_free(&m);
        } else {
            refused++;
            ZT_CHECK(err[0] != 0, "a refusal without a message");
        }
    }
    ZT_CHECK(refused > 200, "only %d of 400 damaged manifests were refused", refused);
    printf("  manifest mutations: %d refused, %d still well-formed\n", refused, accepted);
    free(buf);
    free(txt);
    fx_rmtree(dir);
}

/* A rank with no piece at all (every slice it owns is padding) still writes a valid file. */
typedef struct { const char *dir; zlocal_world_t *lw; zinc_status st[2]; } empty_arg;

static void empty_rank(int rank, void *arg)
{
    empty_arg *a = arg;
    zcomm_t *c = NULL;
    char err[ZCK_ERR];
    zck_tensor t[FX_NTENSORS];
    fx_tensors(t);
    zplan p;
    fx_plan(1, &p);
    fx_rank fr;
    fx_rank_make(&p, 0, 0x7, 5, &fr);   /* world-1 layout: whole tensors */
    if (rank == 1) fr.npieces = 0;
    zck_save_desc d = fx_desc(a->dir, "e1", &p, rank, t, &fr, 0x7);
    d.world_size = 2;
    zcomm_local_create(a->lw, rank, &c);
    a->st[rank] = c ? zck_save(c, &d, err) : ZINC_ERR_COMM;
    if (a->st[rank] != ZINC_OK) fprintf(stderr, "rank %d: %s\n", rank, err);
    zcomm_destroy(c);
    fx_rank_free(&fr);
    zplan_free(&p);
}

static void test_empty_rank(void)
{
    char dir[600], td[700], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/empty", root);
    empty_arg a = {dir, NULL, {0, 0}};
    zlocal_world_create(2, &a.lw);
    zt_run_ranks(2, empty_rank, &a);
    zlocal_world_destroy(a.lw);
    ZT_CHECK(a.st[0] == ZINC_OK && a.st[1] == ZINC_OK, "save with an empty rank");
    snprintf(td, sizeof td, "%s/e1", dir);
    check_all(td, 3, 0x7, 5, "empty rank 1");
    zck_reader *r;
    ZT_OK(zck_open(td, &r, err));
    if (r) {
        ZT_CHECK(zck_reader_manifest(r)->ranks[1].npieces == 0 &&
                     zck_reader_manifest(r)->ranks[1].bytes == ZCK_FILE_HEADER, "rank 1's file");
        ZT_OK(zck_verify(r, 1, err));
        zck_close(r);
    }
    fx_rmtree(dir);
}

int main(void)
{
    fx_tmproot(root, sizeof root, "format");
    test_shuffle();
    test_codec();
    test_reshard();
    test_manifest_mutations();
    test_empty_rank();
    char sub[700];
    snprintf(sub, sizeof sub, "%s/reshard", root);
    fx_rmtree(sub);
    rmdir(root);
    return zt_finish("test_ckpt_format");
}
