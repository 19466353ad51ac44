/*
 * test_offload_nvme.c — ZeRO-Infinity's optimizer tier (issue 39): offload_optimizer
 * {"device": "nvme"}, the fp32 master, Adam m and v in a scratch file (engine/offload_nvme.c),
 * through the public API on the toy model (toy.h).
 *
 *  1. bitwise: the same training as on the device at stages 1-3 (stage 3 with and without
 *     persistent groups), 1, 2 and 4 local ranks, fp16 (with an overflow step skipped), bf16 and
 *     fp32, gradient accumulation, offload_param "cpu" and "nvme"; the pipeline in one chunk and in chunks of 1024
 *     elements that cut through groups, with and without pipeline_read/pipeline_write, and with
 *     the fewest buffers. CTest runs it also with ZINC_NVME_BACKEND=deferred (every read and
 *     write done only at the wait that covers it) and with the cpu device's copies done when
 *     queued: a missing wait anywhere in the pipeline gives other weights.
 *  2. volume and placement: each applied step reads and writes the whole state once
 *     (zinc_nvme_bytes), a skipped one touches nothing; the host holds the chunk buffers, not the
 *     state (zinc_memory_host); the file exists under nvme_path while the engine lives and is
 *     gone after zinc_engine_destroy; a stale file of a gone process is removed at finalize.
 *     With offload_param "nvme" the file holds the 16-bit shard too, written once per step.
 *  3. the host cap: under a zinc.host_memory_limit that cpu offload cannot meet, finalize with
 *     cpu offload fails with ZINC_ERR_NOMEM naming the category, and NVMe offload trains with
 *     the unlimited run's weights.
 *  4. checkpoints: save with NVMe, load without offload and with cpu offload (and the reverse),
 *     then train on: bitwise an uninterrupted run; the scratch file is not in the checkpoint.
 *  5. failures: an I/O error in the step (ZINC_NVME_FAULT) is ZINC_ERR_IO naming the file;
 *     every later step and state read is refused saying the state was lost, until a
 *     checkpoint's load, after which the engine trains bitwise as a new one from it; the engine
 *     is still destroyed cleanly, removing its file. A file-size limit too small for the file fails
 *     finalize naming the path. A file changed between steps (the master's chunk, the 16-bit
 *     stream's group slice) is ZINC_ERR_CORRUPT at the read that finds it (a step, a save), unless
 *     zinc.nvme_checksum is false. A relative nvme_path and a chdir after finalize: the file is
 *     named by its absolute path and removed.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "toy.h"

static char g_dir[256];   /* nvme_path for every run here */

/* zero_json members for NVMe offload with `extra` members after it (each followed by ", "). */
static const char *nvme_json(const char *extra)
{
    static char buf[8][1024];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"%s}, ",
             g_dir, extra ? extra : "");
    return b;
}

/* Files named zinc-nvme-* in g_dir. */
static int nvme_files(void)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *x; d && (x = readdir(d));)
        n += strncmp(x->d_name, "zinc-nvme-", 10) == 0;
    if (d) closedir(d);
    return n;
}

/* One micro-step and zinc_step of a one-rank engine (an inf injected when `inject`), and the
 * bytes the step read from and wrote to the scratch file. */
static zinc_status nvme_step(zinc_engine_t *e, int step, int np, int inject, zinc_step_info_t *info,
                             uint64_t *read, uint64_t *written)
{
    uint64_t r0, w0, r1, w1;
    zinc_nvme_bytes(e, NULL, &r0, &w0);
    zinc_status s = toy_micro_step(e, 0, 1, step, np, inject);
    *info = (zinc_step_info_t){0};
    if (s == ZINC_OK) s = zinc_step(e, info);
    zinc_nvme_bytes(e, NULL, &r1, &w1);
    *read = r1 - r0;
    *written = w1 - w0;
    return s;
}

/* ---- 1. bitwise ---------------------------------------------------------------------------- */

static void compare(toy_run ref, const char *label)
{
    /* one chunk; chunks of 1024 elements cutting groups, all waits at once; the same pipelined
     * with the fewest buffers (3) and with more (5) */
    const char *chunked = "\"sub_group_size\": 1024, ";
    struct { const char *extra, *zero_after, *name; } v[] = {
        {NULL, NULL, "one chunk"},
        {NULL, chunked, "1024-element chunks, unpipelined"},
        {", \"pipeline_read\": true, \"pipeline_write\": true, \"buffer_count\": 3", chunked,
         "pipelined, 3 buffers"},
        {", \"pipeline_read\": true, \"pipeline_write\": false, \"buffer_count\": 5", chunked,
         "reads ahead, 5 buffers"},
        /* more buffers than chunks (the config's most): they were all reserved, and the
         * step's per-buffer bookkeeping on the stack overflowed it (a crash past ~400000) */
        {", \"pipeline_read\": true, \"pipeline_write\": true, \"buffer_count\": 1048576",
         chunked, "2^20 buffers"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char zero[1536], l[200];
        snprintf(zero, sizeof zero, "%s%s", nvme_json(v[i].extra), v[i].zero_after ? v[i].zero_after : "");
        snprintf(l, sizeof l, "%s, %s", label, v[i].name);
        toy_expect_same_with_zero(ref, zero, "nvme offload", l);
    }
    ZT_CHECK(nvme_files() == 0, "%s: %d scratch file(s) left behind", label, nvme_files());
}

static void test_bitwise(void)
{
    const int worlds[] = {1, 2, 4};
    const zinc_dtype dts[] = {ZINC_DTYPE_FP16, ZINC_DTYPE_BF16, ZINC_DTYPE_FP32};
    for (int wi = 0; wi < 3; wi++)
        for (int di = 0; di < 3; di++)
            for (int st = 1; st <= 4; st++) {
                /* 4 ranks in bf16 only: the cases differ in the partition, not the dtype */
                if (worlds[wi] == 4 && dts[di] != ZINC_DTYPE_BF16) continue;
                toy_run r = {.world = worlds[wi], .stage = st > 3 ? 3 : st, .accum = 1,
                             .steps = 8, .dtype = dts[di], .clip = 1.0, .inject_inf_step = -1,
                             .persist_threshold = st > 3 ? -1 : 0};
                if (dts[di] == ZINC_DTYPE_FP16) {
                    r.inject_inf_step = 3;
                    r.inject_rank = worlds[wi] - 1;
                }
                char label[96];
                snprintf(label, sizeof label, "world %d stage %d%s %s", r.world, r.stage,
                         st > 3 ? " (none persistent)" : "", zinc_dtype_name(r.dtype));
                compare(r, label);
            }
    for (int st = 1; st <= 3; st++) {
        toy_run r = {.world = 2, .stage = st, .accum = 3, .steps = 4, .dtype = ZINC_DTYPE_BF16,
                     .clip = 0.5, .inject_inf_step = -1};
        char label[64];
        snprintf(label, sizeof label, "accum 3 world 2 stage %d bf16", st);
        compare(r, label);
    }
    /* offload_param "cpu": the host 16-bit shard is the Adam's output; with the master in the
     * file it is a buffer of its own in fp32 mode too. offload_param "nvme": the shard is the
     * file's 4th stream, written by the chunk pipeline and read by every gather (persistent
     * groups and none, accumulation, an fp16 overflow, 1 and 2 ranks, one chunk and many). */
    const zinc_dtype pd[] = {ZINC_DTYPE_BF16, ZINC_DTYPE_FP32, ZINC_DTYPE_FP16};
    const char *pdev[] = {"cpu", "nvme"};
    for (int pi = 0; pi < 2; pi++)
        for (int i = 0; i < 3; i++)
            for (int w = 1; w <= 2; w++)
                for (int persist = 0; persist < 2; persist++) {
                    if (pi == 0 && (w == 1 || persist || i == 2)) continue; /* cpu: as before */
                    toy_run r = {.world = w, .stage = 3, .accum = persist ? 2 : 1, .steps = 6,
                                 .dtype = pd[i], .clip = 1.0, .inject_inf_step = -1,
                                 .persist_threshold = persist ? 0 : -1};
                    if (pd[i] == ZINC_DTYPE_FP16) {
                        r.inject_inf_step = 2;
                        r.inject_rank = w - 1;
                    }
                    char zero[1536];
                    snprintf(zero, sizeof zero, "%s%s\"offload_param\": {\"device\": \"%s\"}, ",
                             nvme_json(persist ? NULL
                                               : ", \"pipeline_read\": true, \"pipeline_write\": true"),
                             persist ? "" : "\"sub_group_size\": 1024, ", pdev[pi]);
                    char label[128];
                    snprintf(label, sizeof label, "offload_param %s world %d %s%s", pdev[pi], w,
                             zinc_dtype_name(pd[i]), persist ? " (persistent groups, accum 2)" : "");
                    toy_expect_same_with_zero(r, zero, "nvme offload with offload_param", label);
                }
}

/* ---- 2. volume and placement ---------------------------------------------------------------- */

static void test_volume(void)
{
    /* A stale file of a process that is gone (pid 2^22 + 12345 is above the default pid_max). */
    char stale[512];
    snprintf(stale, sizeof stale, "%s/zinc-nvme-4206649-r0.swap", g_dir);
    FILE *f = fopen(stale, "w");
    if (f) fclose(f);
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_FP16, .clip = 1.0};
    char zero[1536];
    snprintf(zero, sizeof zero, "%s\"sub_group_size\": 1024, ",
             nvme_json(", \"pipeline_read\": true, \"pipeline_write\": true"));
    r.zero_json = zero;
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, "nvme");
    if (!e) return;
    zinc_status s = ZINC_OK;
    struct stat st;
    ZT_CHECK(stat(stale, &st) != 0, "the stale scratch file %s was not removed", stale);
    ZT_CHECK(nvme_files() == 1, "%d scratch files under %s while the engine lives, want 1",
             nvme_files(), g_dir);
    uint64_t file = 0, rd = 1, wr = 1, dp[ZINC_MEM_COUNT], hp[ZINC_MEM_COUNT], ha[ZINC_MEM_COUNT];
    ZT_OK(zinc_nvme_bytes(e, &file, &rd, &wr));
    zinc_memory(e, dp, NULL);
    zinc_memory_host(e, hp, ha);
    /* The shard: the host's gradient block at stage 2 (none on the device). The file: 3
     * streams of it in blocks. */
    uint64_t shard = hp[ZINC_MEM_GRAD] / 2, spad = (shard + 1023) / 1024 * 1024;
    ZT_CHECK(dp[ZINC_MEM_GRAD] == 0, "a device gradient block with offload: %llu",
             (unsigned long long)dp[ZINC_MEM_GRAD]);
    ZT_CHECK(file == 12 * spad && rd == 0 && wr == 0, "file %llu bytes (want %llu), read %llu, "
             "written %llu before any step", (unsigned long long)file,
             (unsigned long long)(12 * spad), (unsigned long long)rd, (unsigned long long)wr);
    /* Host: 4 buffers (DeepSpeed's default buffer_count) of 1024 elements per state, together
     * less than the state itself. */
    uint64_t bufs = 4 * 1024 * 4;
    ZT_CHECK(3 * bufs < 12 * shard, "the chunk buffers (%llu bytes) hold more than the state",
             (unsigned long long)(3 * bufs));
    ZT_CHECK(memcmp(hp, ha, sizeof hp) == 0 && hp[ZINC_MEM_MASTER] == bufs &&
                 hp[ZINC_MEM_ADAM_M] == bufs && hp[ZINC_MEM_ADAM_V] == bufs &&
                 hp[ZINC_MEM_GRAD] == shard * 2 && hp[ZINC_MEM_PARAM16] == shard * 2 &&
                 dp[ZINC_MEM_MASTER] == 0 && dp[ZINC_MEM_ADAM_M] == 0,
             "host plan: master %llu m %llu v %llu grad %llu param16 %llu (want %llu buffers, "
             "%llu per staging buffer)", (unsigned long long)hp[ZINC_MEM_MASTER],
             (unsigned long long)hp[ZINC_MEM_ADAM_M], (unsigned long long)hp[ZINC_MEM_ADAM_V],
             (unsigned long long)hp[ZINC_MEM_GRAD], (unsigned long long)hp[ZINC_MEM_PARAM16],
             (unsigned long long)bufs, (unsigned long long)(shard * 2));
    ZT_CHECK(shard > 2 * 1024, "the toy's shard (%llu) should need several chunks",
             (unsigned long long)shard);
    for (int step = 0; step < 5 && s == ZINC_OK; step++) {
        zinc_step_info_t info;
        uint64_t read, written;
        s = nvme_step(e, step, np, step == 2, &info, &read, &written);
        uint64_t want = info.applied ? file : 0;
        ZT_CHECK(read == want && written == want, "step %d (%s): read %llu, wrote %llu, want "
                 "%llu each", step, info.applied ? "applied" : "skipped",
                 (unsigned long long)read, (unsigned long long)written, (unsigned long long)want);
        ZT_CHECK(step != 2 || !info.applied, "the overflow step was applied");
    }
    ZT_CHECK(s == ZINC_OK, "steps: %s", zinc_last_error(e));
    zinc_engine_destroy(e);
    ZT_CHECK(nvme_files() == 0, "%d scratch file(s) left after zinc_engine_destroy", nvme_files());
}

/* offload_param "nvme": the file gains the 16-bit shard (2 bytes per element, in 4096-byte
 * blocks: the shard padded to 2048 elements), each applied step writes it once more (the Adam's
 * output) and reads only the state; the host holds chunk buffers and 4 staging slots instead of
 * the shard; the device holds no model state. */
static void test_param_volume(void)
{
    toy_run r = {.world = 1, .stage = 3, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0,
                 .persist_threshold = -1};
    char zero[1536];
    snprintf(zero, sizeof zero, "%s\"sub_group_size\": 2048, \"offload_param\": {\"device\": \"nvme\"}, ",
             nvme_json(", \"pipeline_read\": true, \"pipeline_write\": true"));
    r.zero_json = zero;
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, "nvme params");
    if (!e) return;
    zinc_status s = ZINC_OK;
    uint64_t file = 0, dp[ZINC_MEM_COUNT], hp[ZINC_MEM_COUNT];
    zinc_nvme_bytes(e, &file, NULL, NULL);
    zinc_memory(e, dp, NULL);
    zinc_memory_host(e, hp, NULL);
    uint64_t shard = hp[ZINC_MEM_GRAD] / 2, spad = (shard + 2047) / 2048 * 2048;
    ZT_CHECK(file == 12 * spad + 2 * spad, "file %llu bytes, want %llu (shard %llu)",
             (unsigned long long)file, (unsigned long long)(14 * spad), (unsigned long long)shard);
    ZT_CHECK(dp[ZINC_MEM_PARAM16] == 0 && dp[ZINC_MEM_GRAD] == 0 && dp[ZINC_MEM_MASTER] == 0,
             "model state on the device: param16 %llu grad %llu master %llu",
             (unsigned long long)dp[ZINC_MEM_PARAM16], (unsigned long long)dp[ZINC_MEM_GRAD],
             (unsigned long long)dp[ZINC_MEM_MASTER]);
    /* the host's parameter bytes are 4 chunk buffers of 2048 bf16 elements (fewer when the
     * shard has fewer chunks: the toy's 3; a buffer past the chunks is never used) plus 4
     * staging slots of the largest slice, which at one rank is the largest group: the bucket
     * block holds 3 of them (zinc.grad_buckets' default 2, and the host gradient's scratch
     * slice); the toy is too small for that to be less than its shard, a model of any size is
     * not */
    uint64_t chunks = spad / 2048, nbuf = chunks < 4 ? chunks : 4;
    ZT_CHECK(chunks == 3, "the toy's shard in %llu chunks of 2048, want 3", (unsigned long long)chunks);
    uint64_t want_p16 = nbuf * 2048 * 2 + 4 * (dp[ZINC_MEM_BUCKET] / 3);
    ZT_CHECK(hp[ZINC_MEM_PARAM16] == want_p16, "the host holds %llu bytes of parameters, want "
             "%llu (the shard is %llu)", (unsigned long long)hp[ZINC_MEM_PARAM16],
             (unsigned long long)want_p16, (unsigned long long)(shard * 2));
    for (int step = 0; step < 3 && s == ZINC_OK; step++) {
        zinc_step_info_t info;
        uint64_t read, written;
        s = nvme_step(e, step, np, 0, &info, &read, &written);
        ZT_CHECK(info.applied && read == 12 * spad && written == 14 * spad,
                 "step %d: read %llu (want %llu), wrote %llu (want %llu)", step,
                 (unsigned long long)read, (unsigned long long)(12 * spad),
                 (unsigned long long)written, (unsigned long long)(14 * spad));
    }
    ZT_CHECK(s == ZINC_OK, "steps: %s", zinc_last_error(e));
    zinc_engine_destroy(e);
}

/* ---- 3. the host cap ------------------------------------------------------------------------ */

static void test_host_limit(void)
{
    char nv[1536];
    snprintf(nv, sizeof nv, "%s\"sub_group_size\": 1024, ", nvme_json(", \"buffer_count\": 1"));
    toy_run base = {.world = 1, .stage = 2, .accum = 1, .steps = 6, .dtype = ZINC_DTYPE_BF16,
                    .clip = 1.0, .inject_inf_step = -1};
    toy_run cpu = base, nvme = base;
    cpu.zero_json = "\"offload_optimizer\": {\"device\": \"cpu\"}, ";
    nvme.zero_json = nv;
    uint64_t need_cpu = toy_memory_total(&cpu, 1), need_nvme = toy_memory_total(&nvme, 1);
    ZT_CHECK(need_nvme < need_cpu, "NVMe should need less host memory: %llu vs %llu",
             (unsigned long long)need_nvme, (unsigned long long)need_cpu);
    char zinc_json[96];
    snprintf(zinc_json, sizeof zinc_json, "\"host_memory_limit\": %llu, ",
             (unsigned long long)need_nvme);
    cpu.zinc_json = nvme.zinc_json = zinc_json;
    zinc_engine_t *e = NULL;
    int np;
    zinc_status s = toy_engine(&cpu, &e, &np);
    const char *msg = zinc_last_error(e);
    ZT_CHECK(s == ZINC_ERR_NOMEM && strstr(msg, "zinc.host_memory_limit") &&
                 (strstr(msg, "master") || strstr(msg, "adam")),
             "cpu offload over the host cap: %s (%s)", zinc_status_string(s), msg);
    zinc_engine_destroy(e);
    toy_run ref = base;
    if (toy_run_ok(&ref, "unlimited, on the device") && toy_run_ok(&nvme, "nvme under the host cap"))
        toy_expect_same_training(&ref, &nvme, "nvme under a host cap cpu offload cannot meet");
    toy_free(&ref);
    toy_free(&nvme);
}

/* ---- 4. checkpoints ------------------------------------------------------------------------- */

#define CK_STEPS 3

static void test_ckpt(void)
{
    char dir[] = "/tmp/zinc_nvme_ckpt_XXXXXX";
    ZT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char nv[1536];
    snprintf(nv, sizeof nv, "%s\"sub_group_size\": 1024, ",
             nvme_json(", \"pipeline_read\": true, \"pipeline_write\": true"));
    const char *cpu = "\"offload_optimizer\": {\"device\": \"cpu\"}, ";
    char nvp[1600];   /* the parameters in the file too (stage 3; elsewhere warned, no effect) */
    snprintf(nvp, sizeof nvp, "%s\"offload_param\": {\"device\": \"nvme\"}, ", nv);
    const char *modes[][2] = {{nv, NULL}, {NULL, nv}, {nv, cpu}, {cpu, nv}, {nv, nv}, {nvp, NULL},
                              {NULL, nvp}};
    const char *names[] = {"nvme -> none", "none -> nvme", "nvme -> cpu", "cpu -> nvme",
                           "nvme -> nvme", "nvme params -> none", "none -> nvme params"};
    for (int st = 1; st <= 3; st++) {
        toy_run ref = {.world = 2, .stage = st, .accum = 1, .steps = 2 * CK_STEPS,
                       .dtype = ZINC_DTYPE_BF16, .clip = 1.0, .inject_inf_step = -1};
        if (!toy_run_ok(&ref, "uninterrupted")) continue;
        for (int m = 0; m < 7; m++) {
            if (m >= 5 && st != 3) continue;
            char sub[256], cmd[300];
            snprintf(sub, sizeof sub, "%s/s%d_m%d", dir, st, m);
            toy_run out = {0};
            toy_resume_run(st, ZINC_DTYPE_BF16, modes[m][0], modes[m][1], sub, CK_STEPS, &out);
            ZT_CHECK(toy_weights_equal(&ref, &out), "stage %d checkpoint %s: the resumed weights "
                     "differ from the uninterrupted run's", st, names[m]);
            toy_free(&out);
            /* nothing of the scratch file went into the checkpoint */
            snprintf(cmd, sizeof cmd, "grep -rlq zinc-nvme '%s'", sub);
            ZT_CHECK(system(cmd) != 0, "stage %d %s: the checkpoint names a scratch file", st,
                     names[m]);
            snprintf(cmd, sizeof cmd, "find '%s' -name '*.swap' | grep -q .", sub);
            ZT_CHECK(system(cmd) != 0, "stage %d %s: a scratch file in the checkpoint", st, names[m]);
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", sub);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", sub);
        }
        toy_free(&ref);
    }
    rmdir(dir);
}

/* ---- 5. failures ---------------------------------------------------------------------------- */

/* The scratch file's path (one engine alive). */
static void scratch_path(char *path, size_t n)
{
    path[0] = 0;
    DIR *d = opendir(g_dir);
    for (struct dirent *x; d && (x = readdir(d));)
        if (!strncmp(x->d_name, "zinc-nvme-", 10)) snprintf(path, n, "%s/%s", g_dir, x->d_name);
    if (d) closedir(d);
}

/* Two steps, zinc_param_set of parameter `param` (a write outside the step, read back
 * unchecked, not taken for a change) and a step, then 16 bytes at `at` of the scratch file's
 * master stream (param_stream 0) or 16-bit stream (1) overwritten: the next micro-step and
 * step must fail with ZINC_ERR_CORRUPT naming `want` and the file, and every later step say the
 * state was lost — unless zinc.nvme_checksum is false (`checked` 0), when nothing is looked at.
 * `save`: a checkpoint's save (with the 16-bit weights) comes first instead, and must fail the
 * same way, leaving no tag behind: it used to copy the changed bytes into a checkpoint that its
 * own checksums then vouched for. */
static void changed_file(toy_run r, int param, int param_stream, long at, const char *want,
                         int checked, int save, const char *label)
{
    r.zinc_json = checked ? NULL : "\"nvme_checksum\": false, ";
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, label);
    if (!e) return;
    zinc_step_info_t info;
    uint64_t rd, wr, file = 0;
    zinc_status s = ZINC_OK;
    for (int step = 0; step < 2 && s == ZINC_OK; step++) s = nvme_step(e, step, np, 0, &info, &rd, &wr);
    ZT_CHECK(s == ZINC_OK, "%s: steps before the change: %s", label, zinc_last_error(e));
    float *v = malloc((size_t)zinc_param_numel(e, param) * sizeof *v);
    ZT_OK(zinc_param_get(e, param, v));
    v[0] += 0.5f;
    ZT_OK(zinc_param_set(e, param, v));
    free(v);
    s = nvme_step(e, 2, np, 0, &info, &rd, &wr);
    ZT_CHECK(s == ZINC_OK, "%s: the step after zinc_param_set: %s", label, zinc_last_error(e));
    /* the file: master, m, v, then (offload_param) the 16-bit stream, spad elements each */
    zinc_nvme_bytes(e, &file, NULL, NULL);
    long start = param_stream ? (long)(file / 14 * 12) : 0;
    char path[600];
    scratch_path(path, sizeof path);
    FILE *f = fopen(path, "r+b");
    ZT_CHECK(f != NULL, "%s: opening the scratch file '%s'", label, path);
    if (f) {
        static const unsigned char junk[16] = {0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
        fseek(f, start + at, SEEK_SET);
        fwrite(junk, 1, sizeof junk, f);
        fclose(f);
    }
    if (save && checked) {
        char ck[600], tag[700];
        snprintf(ck, sizeof ck, "%s/ck", g_dir);
        snprintf(tag, sizeof tag, "%s/t", ck);
        zinc_ckpt_save_options_t o = {.save_weights16 = 1, .async = 0};
        s = zinc_ckpt_save(e, ck, "t", &o);
        const char *msg = zinc_last_error(e);
        struct stat st;
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(msg, "checksum") && strstr(msg, want) &&
                     strstr(msg, path) && strstr(msg, "checkpoint saved before"),
                 "%s: the save after the file changed: %s (%s)", label, zinc_status_string(s),
                 msg);
        ZT_CHECK(stat(tag, &st) != 0, "%s: the refused save left %s", label, tag);
        remove(tag);
        remove(ck);
        s = nvme_step(e, 3, np, 0, &info, &rd, &wr);
        /* the reason the state is lost names what changed: a chunk, or a 16-bit slice */
        const char *why = strstr(want, "chunk") ? "lost to a chunk that read back changed"
                                                : "lost to a group's 16-bit slice";
        ZT_CHECK(s != ZINC_OK && strstr(zinc_last_error(e), why), "%s: the step after: %s "
                 "(%s), want '%s'", label, zinc_status_string(s), zinc_last_error(e), why);
        zinc_engine_destroy(e);
        ZT_CHECK(nvme_files() == 0, "%s: %d scratch file(s) left", label, nvme_files());
        return;
    }
    s = nvme_step(e, 3, np, 0, &info, &rd, &wr);
    const char *msg = zinc_last_error(e);
    if (!checked) {
        ZT_CHECK(s == ZINC_OK, "%s, unchecked: the step after the change failed: %s", label, msg);
        zinc_engine_destroy(e);
        return;
    }
    ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(msg, "checksum") && strstr(msg, want) &&
                 strstr(msg, path) && strstr(msg, "last checkpoint"),
             "%s: the step after the file changed: %s (%s)", label, zinc_status_string(s), msg);
    s = nvme_step(e, 4, np, 0, &info, &rd, &wr);
    ZT_CHECK(s != ZINC_OK && strstr(zinc_last_error(e), "lost"), "%s: the step after: %s (%s)",
             label, zinc_status_string(s), zinc_last_error(e));
    zinc_engine_destroy(e);
    ZT_CHECK(nvme_files() == 0, "%s: %d scratch file(s) left", label, nvme_files());
}

/* The file changed under the engine between two steps (a bad disk, another process): the
 * next step's read of that chunk fails its checksum, ZINC_ERR_CORRUPT naming the file, instead
 * of training on (it trained into NaN with every later step skipped): the master's second
 * chunk. With offload_param "nvme" the 16-bit stream is checked by the gather that reads it
 * back (the forward ran on what the disk left), naming the group; its chunks are 2048 elements
 * (sub_group_size 1024 rounded up to whole 4096-byte blocks of bf16) and cut through the toy's
 * groups: element 2080 lies in the group [1536, 5664) that chunks 0-2 hold, whose checksum is
 * formed from pieces of the three. */
static void test_changed_file(int checked)
{
    char zero[1536];
    snprintf(zero, sizeof zero, "%s\"sub_group_size\": 1024, ", nvme_json(NULL));
    toy_run r = {.world = 1, .stage = 1, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0,
                 .zero_json = zero};
    changed_file(r, 0, 0, 1024 * 4 + 64, "chunk 1 ", checked, 0, "nvme, changed file");
    if (checked)
        changed_file(r, 0, 0, 1024 * 4 + 64, "chunk 1 ", checked, 1, "nvme, changed file, save");
    char zero_p[1536];
    snprintf(zero_p, sizeof zero_p, "%s\"sub_group_size\": 1024, \"offload_param\": "
             "{\"device\": \"nvme\"}, ", nvme_json(NULL));
    toy_run rp = {.world = 1, .stage = 3, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0,
                  .persist_threshold = -1, .zero_json = zero_p};
    changed_file(rp, 1, 1, 2080 * 2, "offload_param", checked, 0, "nvme params, changed file");
    if (checked)
        changed_file(rp, 1, 1, 2080 * 2, "group '", checked, 1, "nvme params, changed file, save");
}

/* A relative nvme_path ("./DIR/"), and the process changes directory after finalize (a
 * script's os.chdir): the file is made, named and removed under the absolute path. It used to
 * stay behind (unlinked relative to the new directory), named by the relative path. */
static void test_relative_path(void)
{
    char cwd[4096], rel[512], zero[1536];
    const char *base = strrchr(g_dir, '/');
    if (!getcwd(cwd, sizeof cwd) || !base) {
        ZT_CHECK(0, "relative path: getcwd or the directory's name");
        return;
    }
    snprintf(rel, sizeof rel, "./%s/", base + 1);
    snprintf(zero, sizeof zero, "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
             "\"%s\"}, ", rel);
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0,
                 .zero_json = zero};
    /* g_dir's parent is the working directory (main) */
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, "nvme, relative path");
    if (!e) return;
    char path[600];
    scratch_path(path, sizeof path);
    ZT_CHECK(chdir("/") == 0, "chdir /");
    zinc_step_info_t info;
    uint64_t rd, wr;
    zinc_status s = nvme_step(e, 0, np, 0, &info, &rd, &wr);
    ZT_CHECK(s == ZINC_OK, "relative path: a step after chdir: %s", zinc_last_error(e));
    /* the file cut short: the error names it by its absolute path, without "//" */
    ZT_CHECK(truncate(path, 4096) == 0, "relative path: truncating %s", path);
    s = nvme_step(e, 1, np, 0, &info, &rd, &wr);
    const char *msg = zinc_last_error(e);
    ZT_CHECK(s != ZINC_OK && strstr(msg, path) && !strstr(msg, "//") && !strstr(msg, rel),
             "relative path: the error should name %s: %s", path, msg);
    zinc_engine_destroy(e);
    ZT_CHECK(chdir(cwd) == 0, "chdir back");
    ZT_CHECK(nvme_files() == 0, "relative path: %d scratch file(s) left after a chdir and "
             "zinc_engine_destroy", nvme_files());
}

/* e's masters equal f's, bitwise. */
static int same_masters(zinc_engine_t *e, zinc_engine_t *f, int np)
{
    int same = 1;
    for (int p = 0; p < np && same; p++) {
        int64_t n = zinc_param_numel(e, p);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        same = a && b && zinc_param_get(e, p, a) == ZINC_OK && zinc_param_get(f, p, b) == ZINC_OK &&
               !memcmp(a, b, (size_t)n * sizeof *a);
        free(a);
        free(b);
    }
    return same;
}

/* An engine e whose state was lost loads ck/tag, a new engine of r loads it too, and both train
 * 3 steps from global step `first`: the same masters, bitwise (the load into e was refused:
 * "lost"). */
static void expect_resumes_as_new(const toy_run *r, zinc_engine_t *e, int np, const char *ck,
                                  const char *tag, int first, const char *label)
{
    zinc_status s = zinc_ckpt_load(e, ck, tag, NULL);
    ZT_CHECK(s == ZINC_OK, "%s: the load after the loss: %s (%s)", label, zinc_status_string(s),
             zinc_last_error(e));
    int nf = 0;
    zinc_engine_t *f = toy_engine_checked(r, &nf, label);
    if (!f || s != ZINC_OK) {
        zinc_engine_destroy(f);
        return;
    }
    ZT_OK(zinc_ckpt_load(f, ck, tag, NULL));
    s = toy_steps(e, 0, 1, first, 3, np);
    ZT_CHECK(s == ZINC_OK, "%s: steps after the load: %s", label, zinc_last_error(e));
    ZT_OK(toy_steps(f, 0, 1, first, 3, nf));
    ZT_CHECK(s == ZINC_OK && same_masters(e, f, np), "%s: after the load, other weights than a "
             "new engine from the checkpoint", label);
    zinc_engine_destroy(f);
}

/* The scratch file cut short under the engine (another process, a disk): the step that reads
 * past its end loses the state; a checkpoint's load restores the file's whole size and the state,
 * and training goes on as from a new engine's load of it. The load used to leave the file ending
 * at the last element it wrote, and every later step read past the end again. */
static void test_truncated_recovery(void)
{
    toy_run r = {.world = 1, .stage = 2, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0};
    char zero[1536];
    snprintf(zero, sizeof zero, "%s\"sub_group_size\": 1024, ", nvme_json(NULL));
    r.zero_json = zero;
    int np = 0;
    zinc_engine_t *e = toy_engine_checked(&r, &np, "nvme, truncated file");
    if (!e) return;
    char ck[600], path[600];
    snprintf(ck, sizeof ck, "%s/ck_trunc", g_dir);
    zinc_status s = toy_steps(e, 0, 1, 0, 2, np);
    if (s == ZINC_OK) s = zinc_ckpt_save(e, ck, "s2", NULL);
    ZT_CHECK(s == ZINC_OK, "truncated file: steps and save: %s", zinc_last_error(e));
    scratch_path(path, sizeof path);
    ZT_CHECK(truncate(path, 4096) == 0, "truncating %s", path);
    s = toy_steps(e, 0, 1, 2, 1, np);
    ZT_CHECK(s != ZINC_OK, "the step after the file was cut short succeeded");
    expect_resumes_as_new(&r, e, np, ck, "s2", 2, "nvme, truncated file");
    zinc_engine_destroy(e);
    ZT_CHECK(nvme_files() == 0, "%d scratch file(s) left", nvme_files());
}

static void test_io_error(void)
{
    /* Call 7 of the step's asynchronous I/O fails: reads of chunks 0-1 are calls 0-5. */
    setenv("ZINC_NVME_FAULT", "7", 1);
    toy_run r = {.world = 1, .stage = 1, .accum = 1, .dtype = ZINC_DTYPE_BF16, .clip = 1.0};
    char zero[1536];
    snprintf(zero, sizeof zero, "%s\"sub_group_size\": 1024, ",
             nvme_json(", \"pipeline_read\": true, \"pipeline_write\": true"));
    r.zero_json = zero;
    zinc_engine_t *e = NULL;
    int np = 0;
    zinc_status s = toy_engine(&r, &e, &np);
    unsetenv("ZINC_NVME_FAULT");
    ZT_CHECK(s == ZINC_OK, "engine: %s", zinc_last_error(e));
    /* the state before the step, to come back to (a save reads the file with positioned
     * reads, not the counted asynchronous calls) */
    char ck[600];
    snprintf(ck, sizeof ck, "%s/ck_io", g_dir);
    if (s == ZINC_OK) s = zinc_ckpt_save(e, ck, "s0", NULL);
    ZT_CHECK(s == ZINC_OK, "the save before the step: %s", zinc_last_error(e));
    if (s == ZINC_OK) s = toy_micro_step(e, 0, 1, 0, np, 0);
    if (s == ZINC_OK) s = zinc_step(e, NULL);
    const char *msg = zinc_last_error(e);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(msg, g_dir) && strstr(msg, "zinc-nvme-") &&
                 strstr(msg, "last checkpoint"),
             "the failed step: %s (%s)", zinc_status_string(s), msg);
    /* Later use of the state is refused, naming the loss. */
    ZT_OK(toy_micro_step(e, 0, 1, 1, np, 0));
    s = zinc_step(e, NULL);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(zinc_last_error(e), "lost"), "a step after the loss: %s (%s)",
             zinc_status_string(s), zinc_last_error(e));
    float v[8];
    s = zinc_param_get(e, 0, v);
    ZT_CHECK(s == ZINC_ERR_IO && strstr(zinc_last_error(e), "lost"),
             "zinc_param_get after the loss: %s (%s)", zinc_status_string(s), zinc_last_error(e));
    /* only a checkpoint's load may write into the lost state: a parameter set is refused */
    float *w = calloc((size_t)zinc_param_numel(e, 0), sizeof *w);
    s = w ? zinc_param_set(e, 0, w) : ZINC_ERR_NOMEM;
    free(w);
    /* (its message is the scratch file's: it was the compute device's, empty or stale) */
    ZT_CHECK(s == ZINC_ERR_IO && strstr(zinc_last_error(e), "lost") &&
                 strstr(zinc_last_error(e), "zinc-nvme-"),
             "zinc_param_set after the loss: %s (%s)", zinc_status_string(s), zinc_last_error(e));
    /* A load of a checkpoint rewrites the whole state: the same engine goes on from it. */
    expect_resumes_as_new(&r, e, np, ck, "s0", 0, "nvme, I/O error");
    zinc_engine_destroy(e);
    ZT_CHECK(nvme_files() == 0, "the failed engine left %d scratch file(s)", nvme_files());

    /* The disk cannot hold the file (a file-size limit in a child): finalize fails naming it. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit lim = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &lim);
        toy_run q = r;
        zinc_engine_t *x = NULL;
        int n;
        zinc_status fs = toy_engine(&q, &x, &n);
        const char *m = zinc_last_error(x);
        int ok = fs == ZINC_ERR_IO && strstr(m, "zinc_finalize") && strstr(m, "zinc-nvme-") &&
                 strstr(m, "nvme_path");
        if (!ok) fprintf(stderr, "finalize past the file-size limit: %s (%s)\n",
                         zinc_status_string(fs), m);
        zinc_engine_destroy(x);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ZT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "a file-size limit below the scratch file: finalize did not fail cleanly (status %d)",
             status);
    ZT_CHECK(nvme_files() == 0, "the refused engine left %d scratch file(s)", nvme_files());
}

int main(void)
{
    /* A directory on disk (./, the build tree) where O_DIRECT applies; /tmp may be tmpfs. */
    if (zt_disk_dir(g_dir, sizeof g_dir, "zinc-nvme-engine")) return 1;
    test_volume();
    test_param_volume();
    test_bitwise();
    test_host_limit();
    test_ckpt();
    test_changed_file(1);
    test_changed_file(0);
    test_relative_path();
    test_truncated_recovery();
    test_io_error();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return zt_finish("test_offload_nvme");
}
