/*
 * test_ckpt_hostile.c — damaged or hostile checkpoints that used to crash, hang or be accepted
 * (issue 12): each case edits one file of a good checkpoint and checks that zck_open/zck_verify
 * refuse it with a message naming the problem, within seconds.
 *
 *   an unsealed manifest edit   two tensor names swapped, the step changed: the manifest's
 *                               checksum (format 2) refuses it
 *   engine_state out of range   scale_window 0 (was SIGFPE in the scaler on resume), negative
 *                               window, cur_iter -2^63, cur_scale 0 and -1, step -1, step 2^62,
 *                               cur_hysteresis above delayed_shift: verify refuses (and so does
 *                               load, which runs the same parse)
 *   a FIFO in a file's place    the rank file and the manifest: refused, not blocked in open()
 *   rank-file header version    0 (damage) and 2 (newer than this reader) refused
 *   safetensors headers         trailing garbage, duplicate names, overlapping offsets, extra
 *                               data, invalid UTF-8, unknown dtypes, non-string metadata
 *   declared chunk sizes        a chunk claiming far more raw bytes than zstd can expand from
 *                               its stored bytes is refused before any buffer is allocated, and a
 *                               4 GiB codec.chunk_bytes no longer sizes the decode buffers
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "fixture.h"
#include "testutil.h"

static char root[512];

/* A fresh good checkpoint (2 ranks) in root/NAME/t; returns the tag directory in td. */
static void fresh(const char *name, char *td, size_t n)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    fx_rmtree(dir);
    ZT_OK(fx_save_world(dir, "t", 2, 0x7, 3, 4096, 0));
    snprintf(td, n, "%s/t", dir);
}

/* zck_open + zck_verify of td: the status, the message in err. */
static zinc_status open_verify(const char *td, char *err)
{
    zck_reader *r = NULL;
    zinc_status s = zck_open(td, &r, err);
    if (s == ZINC_OK) {
        s = zck_verify(r, 2, err);
        zck_close(r);
    }
    return s;
}

/* Sets the member at `path` ("engine_state.loss_scaler.scale_window"; a number selects an
 * array element: "ranks.0.streams.master.chunks.0.1") of the manifest to the JSON `value`,
 * keeping the rest of the file. Returns 0 when the path does not exist. */
static int edit_manifest(const char *td, const char *path, const char *value)
{
    char file[800], keys[256];
    snprintf(file, sizeof file, "%s/%s", td, ZCK_MANIFEST);
    snprintf(keys, sizeof keys, "%s", path);
    json_object *root_o = json_object_from_file(file), *o = root_o, *parent = NULL;
    char *last = NULL, *save = NULL;
    for (char *k = strtok_r(keys, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        parent = o;
        last = k;
        if (json_object_is_type(o, json_type_array)) o = json_object_array_get_idx(o, (size_t)atoi(k));
        else if (!json_object_object_get_ex(o, k, &o)) o = NULL;
    }
    int ok = o != NULL;
    if (ok) {
        json_object *v = json_tokener_parse(value);
        if (json_object_is_type(parent, json_type_array))
            json_object_array_put_idx(parent, (size_t)atoi(last), v);
        else
            json_object_object_add(parent, last, v);
        /* Resealed: these cases test the checks behind the checksum (a manifest that a buggy
         * or foreign writer sealed); test_unsealed_edit tests the seal itself. */
        char *t = strdup(json_object_to_json_string_ext(root_o, JSON_C_TO_STRING_PRETTY));
        FILE *f = fopen(file, "wb");
        ok = t && f && zck_manifest_reseal(t, strlen(t)) == 0 && fputs(t, f) >= 0;
        if (f) fclose(f);
        free(t);
    }
    json_object_put(root_o);
    return ok;
}

/* The case: the names of two same-shaped tensors swapped in the manifest (it would load
 * swapped weights), and a step changed — with no reseal: the checksum refuses both. */
static void test_unsealed_edit(void)
{
    char td[800], file[900], err[ZCK_ERR];
    for (int k = 0; k < 2; k++) {
        fresh("unsealed", td, sizeof td);
        snprintf(file, sizeof file, "%s/%s", td, ZCK_MANIFEST);
        json_object *o = json_object_from_file(file), *ts = NULL, *es = NULL;
        ZT_CHECK(o && json_object_object_get_ex(o, "tensors", &ts), "manifest tensors");
        if (!o || !ts) { json_object_put(o); continue; }
        if (k == 0) {
            json_object *a = json_object_array_get_idx(ts, 0), *b = json_object_array_get_idx(ts, 1);
            json_object *na, *nb;
            json_object_object_get_ex(a, "name", &na);
            json_object_object_get_ex(b, "name", &nb);
            char *sa = strdup(json_object_get_string(na)), *sb = strdup(json_object_get_string(nb));
            json_object_object_add(a, "name", json_object_new_string(sb));
            json_object_object_add(b, "name", json_object_new_string(sa));
            free(sa);
            free(sb);
        } else {
            json_object_object_get_ex(o, "engine_state", &es);
            json_object_object_add(es, "step", json_object_new_int64(8));
        }
        json_object_to_file_ext(file, o, JSON_C_TO_STRING_PRETTY);
        json_object_put(o);
        zinc_status s = open_verify(td, err);
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(err, "checksum"),
                 "%s without a reseal: %s (%s)", k ? "a changed step" : "swapped tensor names",
                 zinc_status_string(s), err);
    }
}

static void test_engine_state(void)
{
    static const struct { const char *path, *to, *field; } cases[] = {
        {"engine_state.loss_scaler.scale_window", "0", "scale_window"},
        {"engine_state.loss_scaler.scale_window", "-4", "scale_window"},
        {"engine_state.loss_scaler.cur_iter", "-9223372036854775808", "cur_iter"},
        {"engine_state.loss_scaler.cur_scale", "0", "cur_scale"},
        {"engine_state.loss_scaler.cur_scale", "-1", "cur_scale"},
        {"engine_state.step", "-1", "step"},
        {"engine_state.step", "4611686018427387904", "step"},
        {"engine_state.loss_scaler.cur_hysteresis", "5", "cur_hysteresis"},
        {"engine_state.loss_scaler.scale_factor", "0", "scale_factor"},
    };
    char td[800], err[ZCK_ERR];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fresh("state", td, sizeof td);
        ZT_CHECK(open_verify(td, err) == ZINC_OK, "the good checkpoint verifies: %s", err);
        ZT_CHECK(edit_manifest(td, cases[i].path, cases[i].to), "manifest has %s", cases[i].path);
        zinc_status s = open_verify(td, err);
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(err, cases[i].field),
                 "engine_state %s: verify gave %s (%s); want CORRUPT naming %s", cases[i].to,
                 zinc_status_string(s), err, cases[i].field);
        /* The load path parses with the same function (what verify refuses, load refuses). */
        zengine_state st;
        memset(&st, 0, sizeof st);
        char path[900];
        snprintf(path, sizeof path, "%s/%s", td, ZCK_MANIFEST);
        json_object *m = json_object_from_file(path), *es = NULL;
        ZT_CHECK(m && json_object_object_get_ex(m, "engine_state", &es), "engine_state in the manifest");
        if (es)
            ZT_CHECK(zck_state_parse(json_object_to_json_string(es), &st, err) == ZINC_ERR_CORRUPT,
                     "zck_state_parse accepts %s = %s", cases[i].path, cases[i].to);
        json_object_put(m);
    }
}

/* The manifest's step, resealed: it picks the newest tag, so a wild one (negative, past 2^53, or
 * not engine_state's) is damage, not a tag that wins over the real newest. */
static void test_manifest_step(void)
{
    static const struct { const char *path, *to, *path2, *says; } cases[] = {
        {"step", "1000000", NULL, "disagrees with engine_state's step"},
        {"step", "-1", "engine_state.step", "out of range"},
        {"step", "1152921504606846976", "engine_state.step", "out of range"},
    };
    char td[800], err[ZCK_ERR];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fresh("mstep", td, sizeof td);
        ZT_CHECK(edit_manifest(td, cases[i].path, cases[i].to), "manifest has %s", cases[i].path);
        if (cases[i].path2)
            ZT_CHECK(edit_manifest(td, cases[i].path2, cases[i].to), "manifest has %s",
                     cases[i].path2);
        zinc_status s = open_verify(td, err);
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(err, cases[i].says),
                 "manifest step %s: %s (%s); want CORRUPT saying '%s'", cases[i].to,
                 zinc_status_string(s), err, cases[i].says);
    }
}

/* A FIFO with no writer: open() without O_NONBLOCK would wait forever. alarm() turns a hang into
 * a failure of this test instead of a CTest timeout. */
static void test_fifo(void)
{
    char td[800], path[900], err[ZCK_ERR];
    const char *files[] = {"rank-00001.zck", ZCK_MANIFEST};
    for (int i = 0; i < 2; i++) {
        fresh("fifo", td, sizeof td);
        snprintf(path, sizeof path, "%s/%s", td, files[i]);
        unlink(path);
        ZT_CHECK(mkfifo(path, 0644) == 0, "mkfifo %s: %s", path, strerror(errno));
        alarm(20);
        zinc_status s = open_verify(td, err);
        alarm(0);
        ZT_CHECK(s != ZINC_OK && strstr(err, "not a regular file"),
                 "a FIFO as %s: %s (%s)", files[i], zinc_status_string(s), err);
    }
}

static void set_header_version(const char *path, uint32_t v)
{
    int fd = open(path, O_WRONLY);
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    ZT_CHECK(fd >= 0 && pwrite(fd, b, 4, 8) == 4, "patch %s", path);
    if (fd >= 0) close(fd);
}

static void test_header_version(void)
{
    char td[800], path[900], err[ZCK_ERR];
    /* The manifest says ZCK_FORMAT_VERSION: any other header version is damage, also one that
     * would be newer (4098: a 2 with one bit flipped was read as "written by a newer zinc") */
    const uint32_t cases[] = {0, 1, ZCK_FORMAT_VERSION + 1, ZCK_FORMAT_VERSION | 1u << 12};
    for (int i = 0; i < 4; i++) {
        fresh("hdr", td, sizeof td);
        snprintf(path, sizeof path, "%s/rank-00000.zck", td);
        set_header_version(path, cases[i]);
        zinc_status s = open_verify(td, err);
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(err, "checkpoint damaged") &&
                     strstr(err, "its manifest 2") && !strstr(err, "newer zinc"),
                 "header version %u: %s (%s)", cases[i], zinc_status_string(s), err);
    }
}

static void test_chunk_expansion(void)
{
    char td[800], err[ZCK_ERR];
    fresh("expand", td, sizeof td);
    /* Claim 4 GiB of raw bytes for rank 0's first master chunk (a few KiB stored). */
    ZT_CHECK(edit_manifest(td, "ranks.0.streams.master.chunks.0.1", "4294967296"),
             "manifest has ranks[0].streams.master.chunks[0]");
    zinc_status s = open_verify(td, err);
    ZT_CHECK(s == ZINC_ERR_CORRUPT, "a 4 GiB chunk claim: %s (%s)", zinc_status_string(s), err);
}

/* codec.chunk_bytes declared as 4 GiB over chunks of a few KiB: the decode buffers follow the
 * chunks the files hold. Checked in a child limited to 1 GiB of address space, where buffers
 * sized by the declaration (4 GiB per thread) cannot be had. */
static void test_declared_chunk_bytes(void)
{
    char td[800], err[ZCK_ERR];
    fresh("chunkbytes", td, sizeof td);
    ZT_CHECK(edit_manifest(td, "codec.chunk_bytes", "4294967296"), "manifest has codec.chunk_bytes");
    pid_t pid = fork();
    if (pid == 0) {
        /* AddressSanitizer reserves terabytes of shadow address space at start, so under it an
         * RLIMIT_AS makes every allocation fail: there the child runs without the limit (the
         * sanitizer build still checks that verify succeeds; the normal build checks the bound). */
#if !ZT_ASAN
        struct rlimit rl = {1ull << 30, 1ull << 30};
        setrlimit(RLIMIT_AS, &rl);
#endif
        zinc_status s = open_verify(td, err);
        if (s != ZINC_OK) fprintf(stderr, "declared chunk_bytes 4 GiB: %s\n", err);
        _exit(s == ZINC_OK ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ZT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
             "verify with codec.chunk_bytes 4 GiB under a 1 GiB address-space limit failed");
}

/* A safetensors file of the given header text and `data` bytes of data (zeros). */
static void write_st(const char *path, const char *hdr, size_t data)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint64_t hl = strlen(hdr);
    unsigned char l8[8];
    for (int b = 0; b < 8; b++) l8[b] = (unsigned char)(hl >> (8 * b));
    fwrite(l8, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    for (size_t k = 0; k < data; k++) fputc(0, f);
    fclose(f);
}

/* safetensors headers the format's reference reader refuses; the good one first. */
static void test_safetensors(void)
{
    static const struct { const char *hdr; size_t data; const char *says; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 8, NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}xx", 8, "after the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "extra bytes"},
        {"{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "UTF-8"},
        {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "__metadata__"},
    };
    char path[700], err[ZCK_ERR];
    snprintf(path, sizeof path, "%s/t.safetensors", root);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_st(path, cases[i].hdr, cases[i].data);
        zst_file *f = NULL;
        err[0] = 0;
        zinc_status s = zst_open(path, &f, err);
        if (!cases[i].says)
            ZT_CHECK(s == ZINC_OK, "the good safetensors file: %s", err);
        else
            ZT_CHECK(s != ZINC_OK && strstr(err, cases[i].says), "safetensors case %zu: %s (%s), "
                     "want a refusal saying '%s'", i, zinc_status_string(s), err, cases[i].says);
        zst_close(f);
    }
}

/* A format-1 checkpoint (no manifest checksum, header version 1) still opens and verifies. */
static void test_v1_still_read(void)
{
    char td[800], file[900], err[ZCK_ERR];
    fresh("v1", td, sizeof td);
    snprintf(file, sizeof file, "%s/%s", td, ZCK_MANIFEST);
    json_object *o = json_object_from_file(file);
    ZT_CHECK(o != NULL, "read the manifest");
    if (!o) return;
    json_object_object_add(o, "format_version", json_object_new_int(1));
    json_object_object_del(o, ZCK_MANIFEST_SUM_KEY);
    json_object_to_file_ext(file, o, JSON_C_TO_STRING_PRETTY);
    json_object_put(o);
    for (int r = 0; r < 2; r++) {
        snprintf(file, sizeof file, "%s/rank-%05d.zck", td, r);
        set_header_version(file, 1);
    }
    zinc_status s = open_verify(td, err);
    ZT_CHECK(s == ZINC_OK, "a format-1 checkpoint: %s (%s)", zinc_status_string(s), err);
}

int main(void)
{
    fx_tmproot(root, sizeof root, "hostile");
    test_unsealed_edit();
    test_engine_state();
    test_manifest_step();
    test_fifo();
    test_header_version();
    test_chunk_expansion();
    test_declared_chunk_bytes();
    test_v1_still_read();
    test_safetensors();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return zt_finish("ckpt_hostile");
}
