/*
 * test_frozen.c — a frozen engine (zinc_engine_frozen): stage 3 holding parameter values only,
 * as the Python front-end keeps the parameters nobody trains (a LoRA run's base model).
 *
 * At 1 and 2 local ranks, bf16 and fp32, a frozen engine F and a trained engine T with the same
 * registration (three groups: a large one, one of two parameters, and a small one below
 * stage3_param_persistence_threshold, kept whole), each on a local world of its own (a local
 * world's rank holds one engine at a time; the Python front-end's two engines share an MPI or
 * NCCL world):
 *
 *  - zinc_memory: F plans and allocates nothing for GRAD, MASTER, ADAM_M, ADAM_V and BUCKET,
 *    and exactly the rank's shard for PARAM16 (dtype size x shard elements) and T's GATHER;
 *    T has Adam state (and a master in bf16), so the comparison can fail; no host memory.
 *  - values: zinc_param_set with 1 + k * 1e-3 (not representable in bf16), then each group
 *    gathered: F's zinc_param_data views hold exactly the working-dtype rounding of the values
 *    (kernels' zk_store, round to nearest even) and the same bytes as T's views; zinc_param_get
 *    gives them widened to fp32 (fp32: the values themselves). The persistent group too.
 *  - a second zinc_param_set after a prefetch: the stale prefetched copy is dropped and the next
 *    gathers give the new values; zinc_param_set of a gathered group is refused.
 *  - every training call is ZINC_ERR_USAGE naming itself and the frozen engine, and the engine
 *    (and, at 2 ranks, the world) works after them: the values gather right again.
 *
 * zinc_micro_step ends a frozen engine's micro-step (the gather trace that prefetch follows):
 * refused while a group is gathered, and then the prefetch check's copies are dropped as a
 * trained engine's are.
 *
 * Each of those also with the frozen engine's config offloading its parameters (offload_param
 * "cpu", with offload_optimizer "cpu" as the config needs): the shard is then host memory
 * (zinc_memory_host's param16, none on the device), the gathers upload from it, and the values
 * are the same bytes. And with offload_param "nvme" (beside offload_optimizer "nvme"): the
 * shard is a scratch file per rank holding the 16-bit stream alone (zinc_nvme_bytes: the shard
 * rounded up to 4096-byte blocks, nothing for master, m or v), host memory the four staging
 * slots of the largest slice, the device none of it; the same values, and the files gone after
 * the destroy.
 *
 * frozen_nvme_changed: with the shard in the file, a group read once (its sum then taken) whose
 * bytes in the file change is ZINC_ERR_CORRUPT at the next gather, naming the file and the
 * group, and every later read says the shard was lost; with zinc.nvme_checksum false the change
 * is not looked for.
 *
 * Then the setups refused at zinc_engine_frozen (NULL, after zinc_finalize, stage 2, with
 * zinc_grad_buffer_external), and a world where only rank 0 is frozen: zinc_finalize's
 * ZINC_ERR_MISMATCH on both ranks.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/internal.h"
#include "testutil.h"

#define NP 4
#define NG 3
#define MAXN 1000
#define PERSIST_GROUP 2

static const char *const pname[NP] = {"emb.w", "blk.a", "blk.b", "norm.w"};
static const int pgroup[NP] = {0, 1, 1, 2};
static const int pndim[NP] = {1, 1, 2, 1};
static const int64_t pshape[NP][2] = {{MAXN, 0}, {300, 0}, {7, 11}, {24, 0}};
static const char *const gname[NG] = {"emb", "blk", "norm"};

static int64_t numel(int p) { return pndim[p] == 1 ? pshape[p][0] : pshape[p][0] * pshape[p][1]; }

/* Value set 1: 1 + k * 1e-3 in [1, 2), mostly between two bf16 values (their step is 2^-7
 * there); set 2: negative, in (-1.5, -0.5]. */
static float value_of(int set, int p, int64_t i)
{
    if (set == 1) return 1.0f + (float)((i * 7 + p * 131) % 1000) * 1e-3f;
    return -(0.5f + (float)((i * 13 + p * 17) % 997) * 1e-3f);
}

typedef struct {
    zinc_world_t *world;          /* the frozen engines' */
    zinc_world_t *trained_world;  /* the trained engines' */
    int n, bf16;
    int offload;                  /* the frozen engine's config offloads its parameters: OFF_* */
} run_ctx;

enum { OFF_NONE, OFF_CPU, OFF_NVME };

static char g_dir[256];           /* nvme_path of the OFF_NVME runs */
/* The OFF_NVME runs' offload keys, written once in main after g_dir: the ranks are threads, and
 * a buffer each rank's offload_keys wrote again let one rank read it half written (a config
 * that hashed differently on that rank: zinc_finalize refused it, once in a CI run). */
static char g_nvme_keys[1024];

/* What the frozen engine's config adds with run_ctx.offload: offload_param "cpu" or "nvme",
 * which the config takes only with offload_optimizer of the same device (nothing to move in a
 * frozen engine). */
static const char *offload_keys(int offload)
{
    if (offload == OFF_NONE) return "";
    if (offload == OFF_CPU)
        return "\"offload_optimizer\": {\"device\": \"cpu\"}, "
               "\"offload_param\": {\"device\": \"cpu\"}, ";
    return g_nvme_keys;
}

/* Files named zinc-nvme-* in g_dir; the last one's path into `path` when given. */
static int nvme_files(char *path, size_t n)
{
    DIR *d = opendir(g_dir);
    int k = 0;
    for (struct dirent *x; d && (x = readdir(d));)
        if (!strncmp(x->d_name, "zinc-nvme-", 10)) {
            k++;
            if (path) snprintf(path, n, "%s/%s", g_dir, x->d_name);
        }
    if (d) closedir(d);
    return k;
}

static zinc_dtype dtype_of(int bf16) { return bf16 ? ZINC_DTYPE_BF16 : ZINC_DTYPE_FP32; }

/* The config: stage `stage`, the small group persistent, `zero_extra` zero_optimization
 * members each followed by ", ". */
static void config(char *buf, size_t cap, int bf16, int stage, const char *zero_extra)
{
    snprintf(buf, cap,
             "{\"train_micro_batch_size_per_gpu\": 1, %s"
             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
             " \"zero_optimization\": {%s\"stage\": %d,"
             " \"stage3_param_persistence_threshold\": 100}}",
             bf16 ? "\"bf16\": {\"enabled\": true}, " : "", zero_extra, stage);
}

/* Registers the model on `e` (its ids into pid). */
static void register_model(zinc_engine_t *e, int bf16, int pid[NP])
{
    int gid[NG];
    for (int g = 0; g < NG; g++) ZT_OK(zinc_group_add(e, gname[g], &gid[g]));
    for (int p = 0; p < NP; p++)
        ZT_OK(zinc_param_add(e, gid[pgroup[p]], pname[p], pndim[p], pshape[p], dtype_of(bf16),
                             &pid[p]));
}

/* Rank `rank`'s stage-3 engine on c's world, registered and finalized; frozen when asked. NULL
 * after a failed check. */
static zinc_engine_t *make_engine(const run_ctx *c, int rank, int frozen, int pid[NP])
{
    char cfg[2048];
    config(cfg, sizeof cfg, c->bf16, 3, offload_keys(frozen ? c->offload : OFF_NONE));
    zinc_engine_options_t o = {.config_json = cfg, .world = frozen ? c->world : c->trained_world,
                               .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return NULL;
    if (frozen) ZT_OK(zinc_engine_frozen(e));
    register_model(e, c->bf16, pid);
    zinc_status s = zinc_finalize(e);
    ZT_CHECK(s == ZINC_OK, "rank %d: zinc_finalize (%s): %s", rank, frozen ? "frozen" : "trained",
             zinc_last_error(e));
    if (s == ZINC_OK) return e;
    zinc_engine_destroy(e);
    return NULL;
}

static void check_memory(zinc_engine_t *f, zinc_engine_t *t, const char *label)
{
    uint64_t fp[ZINC_MEM_COUNT], fa[ZINC_MEM_COUNT], tp[ZINC_MEM_COUNT], ta[ZINC_MEM_COUNT];
    uint64_t hp[ZINC_MEM_COUNT], ha[ZINC_MEM_COUNT];
    ZT_OK(zinc_memory(f, fp, fa));
    ZT_OK(zinc_memory(t, tp, ta));
    ZT_OK(zinc_memory_host(f, hp, ha));
    const zinc_mem_category none[] = {ZINC_MEM_GRAD, ZINC_MEM_MASTER, ZINC_MEM_ADAM_M,
                                      ZINC_MEM_ADAM_V, ZINC_MEM_BUCKET};
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++)
        ZT_CHECK(fp[none[k]] == 0 && fa[none[k]] == 0, "%s: frozen %s planned %llu, allocated %llu",
                 label, zinc_mem_category_name(none[k]), (unsigned long long)fp[none[k]],
                 (unsigned long long)fa[none[k]]);
    size_t ds = zinc_dtype_size(f->dtype);
    uint64_t shard = (uint64_t)f->plan.shard_numel * ds;
    /* the shard: on the device, or with offload_param in host memory and none on the device;
     * with offload_param nvme in the file, the host holding 4 staging slots of the largest
     * slice, and the file the shard alone, in whole 4096-byte blocks */
    int off = f->offload_param, nvme = off && f->cfg.zero.offload_param == ZCFG_OFFLOAD_NVME;
    size_t slice = 0;
    for (int g = 0; g < f->plan.ngroups; g++)
        if (f->plan.groups[g].slice > slice) slice = f->plan.groups[g].slice;
    uint64_t want = nvme ? 4 * slice * ds : shard;
    const uint64_t *sp = off ? hp : fp, *sa = off ? ha : fa;
    ZT_CHECK(shard > 0 && sp[ZINC_MEM_PARAM16] == want && sa[ZINC_MEM_PARAM16] == want,
             "%s: frozen %s param16 planned %llu, allocated %llu; want %llu (the shard is %llu "
             "bytes)", label, off ? "host" : "device", (unsigned long long)sp[ZINC_MEM_PARAM16],
             (unsigned long long)sa[ZINC_MEM_PARAM16], (unsigned long long)want,
             (unsigned long long)shard);
    uint64_t file = 0, blocks = (shard + 4095) / 4096 * 4096;
    ZT_OK(zinc_nvme_bytes(f, &file, NULL, NULL));
    ZT_CHECK(file == (nvme ? blocks : 0), "%s: the frozen engine's scratch file: %llu bytes, want "
             "%llu", label, (unsigned long long)file, (unsigned long long)(nvme ? blocks : 0));
    ZT_CHECK(!off || (fp[ZINC_MEM_PARAM16] == 0 && fa[ZINC_MEM_PARAM16] == 0),
             "%s: offload_param: device param16 planned %llu, allocated %llu (want 0)", label,
             (unsigned long long)fp[ZINC_MEM_PARAM16], (unsigned long long)fa[ZINC_MEM_PARAM16]);
    ZT_CHECK(shard == tp[ZINC_MEM_PARAM16] &&
                 fp[ZINC_MEM_GATHER] == tp[ZINC_MEM_GATHER] && fa[ZINC_MEM_GATHER] > 0,
             "%s: param16 %llu / %llu, gather %llu / %llu (frozen / trained)", label,
             (unsigned long long)fp[ZINC_MEM_PARAM16], (unsigned long long)tp[ZINC_MEM_PARAM16],
             (unsigned long long)fp[ZINC_MEM_GATHER], (unsigned long long)tp[ZINC_MEM_GATHER]);
    /* the trained engine's state, which the frozen one must not have: Adam's moments always, a
     * master of its own in bf16 (fp32's is its working shard) */
    int bf16 = f->dtype == ZINC_DTYPE_BF16;
    ZT_CHECK(ta[ZINC_MEM_ADAM_M] > 0 && ta[ZINC_MEM_GRAD] > 0 && (!bf16 || ta[ZINC_MEM_MASTER] > 0),
             "%s: the trained engine allocates adam_m %llu, grad %llu, master %llu", label,
             (unsigned long long)ta[ZINC_MEM_ADAM_M], (unsigned long long)ta[ZINC_MEM_GRAD],
             (unsigned long long)ta[ZINC_MEM_MASTER]);
    for (int c = 0; c < ZINC_MEM_COUNT; c++)
        ZT_CHECK((off && c == ZINC_MEM_PARAM16) || (hp[c] == 0 && ha[c] == 0),
                 "%s: frozen host %s: %llu bytes", label,
                 zinc_mem_category_name((zinc_mem_category)c), (unsigned long long)hp[c]);
}

static void set_values(zinc_engine_t *e, const int pid[NP], int set)
{
    float *v = malloc(MAXN * sizeof *v);
    for (int p = 0; p < NP && v; p++) {
        for (int64_t i = 0; i < numel(p); i++) v[i] = value_of(set, p, i);
        ZT_OK(zinc_param_set(e, pid[p], v));
    }
    free(v);
}

/* Elements of a view (numel(p) elements of dt) that are not x rounded to dt. */
static int64_t wrong_rounding(const void *view, zinc_dtype dt, int set, int p)
{
    size_t ds = zinc_dtype_size(dt);
    int64_t bad = 0;
    for (int64_t i = 0; i < numel(p); i++) {
        unsigned char want[4];
        zk_store(want, dt, 0, value_of(set, p, i));
        bad += memcmp((const char *)view + (size_t)i * ds, want, ds) != 0;
    }
    return bad;
}

/* Elements of zinc_param_get's values that are not x rounded to dt and widened back. */
static int64_t wrong_widened(const float *got, zinc_dtype dt, int set, int p)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < numel(p); i++) {
        unsigned char r[4];
        zk_store(r, dt, 0, value_of(set, p, i));
        float want = zk_load(r, dt, 0);
        bad += memcmp(&got[i], &want, 4) != 0;
    }
    return bad;
}

/* Every group gathered on both engines (collective, in the same order on every rank): F's views
 * hold value set `set` rounded and T's bytes; then zinc_param_get on F. */
static void check_values(zinc_engine_t *f, zinc_engine_t *t, const int pid[NP], int set,
                         const char *label)
{
    zinc_dtype dt = f->dtype;
    for (int g = 0; g < NG; g++) {
        ZT_OK(zinc_gather(f, g));
        ZT_OK(zinc_gather(t, g));
        ZT_OK(zinc_stream_wait_gather(f, g, NULL));
        for (int p = 0; p < NP; p++) {
            if (pgroup[p] != g) continue;
            void *fv = NULL, *tv = NULL;
            ZT_OK(zinc_param_data(f, pid[p], &fv));
            ZT_OK(zinc_param_data(t, pid[p], &tv));
            if (!fv || !tv) continue;
            int64_t bad = wrong_rounding(fv, dt, set, p);
            ZT_CHECK(bad == 0, "%s: values %d: '%s' gathered with %lld of %lld elements not the "
                     "%s rounding of the values set", label, set, pname[p], (long long)bad,
                     (long long)numel(p), zinc_dtype_name(dt));
            ZT_CHECK(!memcmp(fv, tv, (size_t)numel(p) * zinc_dtype_size(dt)),
                     "%s: values %d: '%s' gathered differs from the trained engine's", label, set,
                     pname[p]);
        }
        ZT_OK(zinc_release(f, g));
        ZT_OK(zinc_release(t, g));
    }
    float *out = malloc(MAXN * sizeof *out);
    for (int p = 0; p < NP && out; p++) {
        memset(out, 0xff, MAXN * sizeof *out);
        ZT_OK(zinc_param_get(f, pid[p], out));
        int64_t bad = wrong_widened(out, dt, set, p);
        ZT_CHECK(bad == 0, "%s: values %d: zinc_param_get('%s'): %lld elements not the %s "
                 "values widened", label, set, pname[p], (long long)bad, zinc_dtype_name(dt));
    }
    free(out);
}

static int prefetched(const zinc_engine_t *e, int g)
{
    return e->gstate[g].gather_slot >= 0 && !e->gstate[g].held;
}

/* After check_values traced the gathers (emb, blk; norm is persistent): a gather of emb
 * prefetches blk; zinc_param_set drops that copy; the next gathers give the new values. */
static void check_prefetch_dropped(zinc_engine_t *f, zinc_engine_t *t, const int pid[NP],
                                   const char *label)
{
    /* the micro-step's end: refused while a group is gathered, then the trace is done */
    ZT_OK(zinc_gather(f, 0));
    ZT_CHECK(zinc_micro_step(f) == ZINC_ERR_USAGE, "%s: zinc_micro_step with emb gathered is "
             "refused", label);
    ZT_OK(zinc_release(f, 0));
    ZT_OK(zinc_micro_step(f));
    ZT_OK(zinc_gather(f, 0));
    ZT_CHECK(prefetched(f, 1), "%s: gathering emb prefetched blk", label);
    ZT_OK(zinc_release(f, 0));
    set_values(f, pid, 2);
    set_values(t, pid, 2);
    ZT_CHECK(!prefetched(f, 1), "%s: zinc_param_set dropped blk's prefetched copy", label);
    check_values(f, t, pid, 2, label);
    /* a gathered group's view would keep the old values: refused, the group still gathered */
    float *v = calloc(MAXN, sizeof *v);
    ZT_OK(zinc_gather(f, 1));
    zinc_status s = zinc_param_set(f, pid[1], v);
    ZT_CHECK(s == ZINC_ERR_USAGE, "%s: zinc_param_set of a gathered group: %s", label,
             zinc_status_string(s));
    ZT_OK(zinc_release(f, 1));
    free(v);
}

/* A refused call: ZINC_ERR_USAGE and the frozen engine's message naming `fn`. */
static void refused(zinc_engine_t *e, zinc_status s, const char *fn, const char *label)
{
    char want[160];
    snprintf(want, sizeof want, "%s: a frozen engine (zinc_engine_frozen) holds values only and "
             "trains nothing", fn);
    ZT_CHECK(s == ZINC_ERR_USAGE && strstr(zinc_last_error(e), want),
             "%s: %s on a frozen engine: %s: %s", label, fn, zinc_status_string(s),
             zinc_last_error(e));
}

static void check_refusals(zinc_engine_t *f, const int pid[NP], const char *label)
{
    float *buf = calloc(MAXN, sizeof *buf);
    void *view = NULL;
    int slot = 0;
    zinc_step_info_t info;
    refused(f, zinc_step(f, &info), "zinc_step", label);
    refused(f, zinc_grads_ready(f, 0), "zinc_grads_ready", label);
    refused(f, zinc_grads_more(f, 0), "zinc_grads_more", label);
    refused(f, zinc_grads_reduce(f), "zinc_grads_reduce", label);
    refused(f, zinc_grads_clear(f), "zinc_grads_clear", label);
    refused(f, zinc_param_grad(f, pid[0], &view), "zinc_param_grad", label);
    refused(f, zinc_param_grad_get(f, pid[0], buf), "zinc_param_grad_get", label);
    refused(f, zinc_param_grad_set(f, pid[0], buf), "zinc_param_grad_set", label);
    refused(f, zinc_grad_bucket(f, 0, &slot), "zinc_grad_bucket", label);
    refused(f, zinc_grad_bucket_drop(f, 0), "zinc_grad_bucket_drop", label);
    refused(f, zinc_grad_buffer_attach(f, buf, 64), "zinc_grad_buffer_attach", label);
    refused(f, zinc_param_state_get(f, pid[1], ZINC_STATE_EXP_AVG, buf), "zinc_param_state_get",
            label);
    refused(f, zinc_param_state_set(f, pid[1], ZINC_STATE_EXP_AVG_SQ, buf),
            "zinc_param_state_set", label);
    refused(f, zinc_param_local_get(f, pid[2], ZINC_STATE_MASTER, buf), "zinc_param_local_get",
            label);
    refused(f, zinc_param_local_set(f, pid[2], ZINC_STATE_MASTER, buf), "zinc_param_local_set",
            label);
    refused(f, zinc_ckpt_save(f, "frozen-ckpt-never-written", "t", NULL), "zinc_ckpt_save", label);
    refused(f, zinc_ckpt_load(f, "frozen-ckpt-never-written", "t", NULL), "zinc_ckpt_load", label);
    refused(f, zinc_load_safetensors(f, "frozen-never-read.safetensors"),
            "zinc_load_safetensors", label);
    free(buf);
}

static void rank_fn(int rank, void *arg)
{
    run_ctx *c = arg;
    char label[64];
    static const char *const off_name[] = {"", " offload_param cpu", " offload_param nvme"};
    snprintf(label, sizeof label, "%s N=%d%s rank %d", c->bf16 ? "bf16" : "fp32", c->n,
             off_name[c->offload], rank);
    int fpid[NP], tpid[NP];
    zinc_engine_t *f = make_engine(c, rank, 1, fpid);
    zinc_engine_t *t = make_engine(c, rank, 0, tpid);
    if (f && t) {
        ZT_CHECK(zinc_engine_is_frozen(f) == 1 && zinc_engine_is_frozen(t) == 0,
                 "%s: zinc_engine_is_frozen %d (frozen), %d (trained)", label,
                 zinc_engine_is_frozen(f), zinc_engine_is_frozen(t));
        ZT_CHECK(zinc_group_persistent(f, PERSIST_GROUP) && !zinc_group_persistent(f, 0),
                 "%s: group norm persistent, emb not", label);
        check_memory(f, t, label);
        set_values(f, fpid, 1);
        set_values(t, tpid, 1);
        check_values(f, t, fpid, 1, label);
        check_prefetch_dropped(f, t, fpid, label);
        check_refusals(f, fpid, label);
        check_values(f, t, fpid, 2, label);   /* still usable, and the world too */
        zinc_status s = zinc_engine_frozen(t);
        ZT_CHECK(s == ZINC_ERR_USAGE, "%s: zinc_engine_frozen after zinc_finalize: %s", label,
                 zinc_status_string(s));
    }
    zinc_engine_destroy(f);
    zinc_engine_destroy(t);
}

static void test_values(int n, int bf16, int offload)
{
    run_ctx c = {.n = n, .bf16 = bf16, .offload = offload};
    ZT_OK(zinc_world_create_local(n, &c.trained_world));
    if (c.trained_world) zt_run_world(n, &c.world, rank_fn, &c);
    zinc_world_destroy(c.trained_world);
    if (offload == OFF_NVME)
        ZT_CHECK(nvme_files(NULL, 0) == 0, "%s N=%d offload_param nvme: %d scratch file(s) left "
                 "after the destroy", bf16 ? "bf16" : "fp32", n, nvme_files(NULL, 0));
}

/* One rank, bf16, the shard in the file: every group gathered once (each sum then taken), 16
 * bytes of group emb's slice (the first in the file) changed behind the engine, then emb
 * gathered again. */
static void frozen_nvme_changed(int checked)
{
    char zero[1200], cfg[2048];
    snprintf(zero, sizeof zero, "%s", offload_keys(OFF_NVME));
    config(cfg, sizeof cfg, 1, 3, zero);
    if (!checked) {   /* zinc.nvme_checksum false: a "zinc" section before the rest */
        char with[2048];
        snprintf(with, sizeof with, "{\"zinc\": {\"nvme_checksum\": false}, %.1900s", cfg + 1);
        snprintf(cfg, sizeof cfg, "%s", with);
    }
    const char *label = checked ? "frozen nvme, changed file" : "frozen nvme, unchecked";
    zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
    zinc_engine_t *e = NULL;
    int pid[NP];
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    ZT_OK(zinc_engine_frozen(e));
    register_model(e, 1, pid);
    ZT_OK(zinc_finalize(e));
    set_values(e, pid, 1);
    for (int g = 0; g < NG; g++) {
        ZT_OK(zinc_gather(e, g));
        ZT_OK(zinc_release(e, g));
    }
    char path[600] = "";
    ZT_CHECK(nvme_files(path, sizeof path) == 1, "%s: one scratch file in %s", label, g_dir);
    FILE *f = fopen(path, "r+b");
    ZT_CHECK(f != NULL, "%s: opening the scratch file '%s'", label, path);
    if (f) {
        static const unsigned char junk[16] = {0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
        fseek(f, 64, SEEK_SET);
        fwrite(junk, 1, sizeof junk, f);
        fclose(f);
    }
    zinc_status s = zinc_gather(e, 0);
    const char *msg = zinc_last_error(e);
    if (!checked) {
        ZT_CHECK(s == ZINC_OK, "%s: the gather after the change: %s (%s)", label,
                 zinc_status_string(s), msg);
        if (s == ZINC_OK) ZT_OK(zinc_release(e, 0));
    } else {
        ZT_CHECK(s == ZINC_ERR_CORRUPT && strstr(msg, "checksum") && strstr(msg, "'emb'") &&
                     strstr(msg, path),
                 "%s: the gather after the change: %s (%s)", label, zinc_status_string(s), msg);
        float *out = malloc(MAXN * sizeof *out);
        s = out ? zinc_param_get(e, pid[1], out) : ZINC_ERR_NOMEM;
        ZT_CHECK(s != ZINC_OK && strstr(zinc_last_error(e), "parameter shard was lost"),
                 "%s: a read after: %s (%s)", label, zinc_status_string(s), zinc_last_error(e));
        free(out);
    }
    zinc_engine_destroy(e);
    ZT_CHECK(nvme_files(NULL, 0) == 0, "%s: %d scratch file(s) left", label, nvme_files(NULL, 0));
}

/* A one-rank engine of `cfg` (stage 3 unless the config says otherwise), not finalized. */
static zinc_engine_t *bare_engine(int stage, const char *zero_extra)
{
    char cfg[1024];
    config(cfg, sizeof cfg, 1, stage, zero_extra);
    zinc_engine_options_t o = {.config_json = cfg, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    return e;
}

static void expect_refused_setup(int stage, const char *zero_extra, zinc_status want,
                                 const char *needle)
{
    zinc_engine_t *e = bare_engine(stage, zero_extra);
    if (!e) return;
    zinc_status s = zinc_engine_frozen(e);
    ZT_CHECK(s == want && strstr(zinc_last_error(e), needle) && !zinc_engine_is_frozen(e),
             "stage %d {%s}: zinc_engine_frozen: %s: %s (want %s naming %s)", stage, zero_extra,
             zinc_status_string(s), zinc_last_error(e), zinc_status_string(want), needle);
    zinc_engine_destroy(e);
}

static void test_refused_setups(void)
{
    ZT_CHECK(zinc_engine_frozen(NULL) == ZINC_ERR_INVALID_ARG && !zinc_engine_is_frozen(NULL),
             "a NULL engine");
    expect_refused_setup(2, "", ZINC_ERR_UNSUPPORTED, "stage 3 only");
    /* the lent gradient buffer and a frozen engine, in either order */
    zinc_engine_t *e = bare_engine(3, "");
    if (e) {
        ZT_OK(zinc_grad_buffer_external(e));
        zinc_status s = zinc_engine_frozen(e);
        ZT_CHECK(s == ZINC_ERR_USAGE, "zinc_engine_frozen after zinc_grad_buffer_external: %s",
                 zinc_status_string(s));
        zinc_engine_destroy(e);
    }
    if ((e = bare_engine(3, ""))) {
        ZT_OK(zinc_engine_frozen(e));
        refused(e, zinc_grad_buffer_external(e), "zinc_grad_buffer_external", "before finalize");
        zinc_engine_destroy(e);
    }
}

/* Rank 0 frozen, rank 1 trained: the registration differs, on both ranks. */
static void mismatch_rank(int rank, void *arg)
{
    run_ctx *c = arg;
    char cfg[1024];
    config(cfg, sizeof cfg, 1, 3, "");
    zinc_engine_options_t o = {.config_json = cfg, .world = c->world, .rank = rank, .threads = 1};
    zinc_engine_t *e = NULL;
    ZT_OK(zinc_engine_create(&o, &e));
    if (!e) return;
    if (rank == 0) ZT_OK(zinc_engine_frozen(e));
    int pid[NP];
    register_model(e, 1, pid);
    zinc_status s = zinc_finalize(e);
    ZT_CHECK(s == ZINC_ERR_MISMATCH && strstr(zinc_last_error(e), "zinc_engine_frozen"),
             "rank %d: frozen on rank 0 only: zinc_finalize: %s: %s", rank,
             zinc_status_string(s), zinc_last_error(e));
    zinc_engine_destroy(e);
}

static void test_mismatch(void)
{
    run_ctx c = {.n = 2, .bf16 = 1};
    zt_run_world(2, &c.world, mismatch_rank, &c);
}

int main(void)
{
    if (zt_disk_dir(g_dir, sizeof g_dir, "zinc-frozen-nvme")) return 1;
    snprintf(g_nvme_keys, sizeof g_nvme_keys,
             "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, "
             "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}, ", g_dir, g_dir);
    for (int n = 1; n <= 2; n++)
        for (int bf16 = 1; bf16 >= 0; bf16--)
            for (int offload = OFF_NONE; offload <= OFF_NVME; offload++)
                test_values(n, bf16, offload);
    frozen_nvme_changed(1);
    frozen_nvme_changed(0);
    test_refused_setups();
    test_mismatch();
    /* a frozen engine with offload_optimizer "nvme" alone keeps no file (nothing to put there) */
    char zero[600];
    snprintf(zero, sizeof zero, "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
             "\"%s\"}, ", g_dir);
    zinc_engine_t *e = bare_engine(3, zero);
    int pid[NP];
    if (e) {
        ZT_OK(zinc_engine_frozen(e));
        register_model(e, 1, pid);
        ZT_OK(zinc_finalize(e));
        uint64_t file = 1;
        ZT_OK(zinc_nvme_bytes(e, &file, NULL, NULL));
        ZT_CHECK(file == 0 && nvme_files(NULL, 0) == 0, "offload_optimizer nvme alone: a %llu "
                 "byte file, %d in %s", (unsigned long long)file, nvme_files(NULL, 0), g_dir);
        zinc_engine_destroy(e);
    }
    rmdir(g_dir);
    return zt_finish("engine_frozen");
}
