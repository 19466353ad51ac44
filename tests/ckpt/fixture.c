/* fixture.c — see fixture.h. */
#include "fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* Sizes chosen so that pieces straddle chunk and slice boundaries, one tensor is smaller than a
 * slice (ranks with nothing of it) and one group is tiny (ranks whose slice is all padding). */
static const struct { const char *name; int group, ndim; int64_t shape[3]; } fx_spec[FX_NTENSORS] = {
    {"embed.weight", 0, 2, {50, 24}},
    {"layer0.w", 1, 2, {24, 40}},
    {"layer0.b", 1, 1, {40}},
    {"layer1.w", 2, 3, {40, 24, 3}},
    {"layer1.b", 2, 1, {5}},
    {"norm.g", 3, 1, {3}},
    {"head.w", 4, 2, {24, 10}},
};
#define FX_NGROUPS 5

void fx_tensors(zck_tensor t[FX_NTENSORS])
{
    memset(t, 0, FX_NTENSORS * sizeof *t);
    for (int i = 0; i < FX_NTENSORS; i++) {
        snprintf(t[i].name, sizeof t[i].name, "%s", fx_spec[i].name);
        t[i].ndim = fx_spec[i].ndim;
        t[i].numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            t[i].shape[d] = fx_spec[i].shape[d];
            t[i].numel *= (uint64_t)fx_spec[i].shape[d];
        }
        t[i].dtype = ZINC_DTYPE_BF16;
    }
}

void fx_plan(int world, zplan *p)
{
    memset(p, 0, sizeof *p);
    p->ngroups = FX_NGROUPS;
    p->nparams = FX_NTENSORS;
    p->groups = calloc(FX_NGROUPS, sizeof *p->groups);
    p->params = calloc(FX_NTENSORS, sizeof *p->params);
    for (int i = 0; i < FX_NTENSORS; i++) {
        zplan_param *P = &p->params[i];
        snprintf(P->name, sizeof P->name, "%s", fx_spec[i].name);
        P->group = fx_spec[i].group;
        P->ndim = fx_spec[i].ndim;
        P->numel = 1;
        for (int d = 0; d < P->ndim; d++) {
            P->shape[d] = fx_spec[i].shape[d];
            P->numel *= (size_t)fx_spec[i].shape[d];
        }
        zplan_group *G = &p->groups[P->group];
        if (G->nparams == 0) G->first_param = i;
        G->nparams++;
        snprintf(G->name, sizeof G->name, "g%d", P->group);
    }
    zplan_layout(p, world);
}

uint32_t fx_bits(int s, int t, uint64_t i, uint32_t salt)
{
    uint64_t z = ((uint64_t)s << 56) ^ ((uint64_t)t << 40) ^ i ^ ((uint64_t)salt << 20);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    /* plausible floats: sign, exponent near 2^-7, random mantissa */
    uint32_t f = (uint32_t)(z & 0x807FFFFFu) | ((uint32_t)(120 + (z >> 40) % 6) << 23);
    return s == ZCK_WEIGHTS16 ? f >> 16 : f;
}

static size_t fx_esize(int s) { return s == ZCK_WEIGHTS16 ? 2 : 4; }

void fx_rank_make(const zplan *p, int rank, unsigned streams, uint32_t salt, fx_rank *out)
{
    memset(out, 0, sizeof *out);
    for (int s = 0; s < ZCK_NSTREAMS; s++)
        if (streams & (1u << s)) out->buf[s] = calloc(p->shard_numel + 1, fx_esize(s));
    out->pieces = calloc((size_t)p->nparams + 1, sizeof *out->pieces);
    for (int t = 0; t < p->nparams; t++) {
        size_t lo, hi, pos;
        if (!zplan_param_in_slice(p, t, rank, &lo, &hi, &pos)) continue;
        zck_piece *pc = &out->pieces[out->npieces++];
        pc->tensor = t;
        pc->lo = lo;
        pc->hi = hi;
        for (int s = 0; s < ZCK_NSTREAMS; s++) {
            if (!out->buf[s]) continue;
            uint8_t *b = (uint8_t *)out->buf[s] + pos * fx_esize(s);
            pc->data[s] = b;
            for (size_t i = lo; i < hi; i++) {
                uint32_t v = fx_bits(s, t, i, salt);
                memcpy(b + (i - lo) * fx_esize(s), &v, fx_esize(s));
            }
        }
    }
}

void fx_rank_free(fx_rank *r)
{
    for (int s = 0; s < ZCK_NSTREAMS; s++) free(r->buf[s]);
    free(r->pieces);
    memset(r, 0, sizeof *r);
}

long long fx_step = 7;
const char *fx_config_hash = "0123456789abcdef";
int fx_leave_latest = 0;

zck_save_desc fx_desc(const char *dir, const char *tag, const zplan *p, int rank,
                      const zck_tensor *tensors, const fx_rank *fr, unsigned streams)
{
    /* per thread: ranks save from threads of their own, each its own copy of the text */
    static _Thread_local char state[512];
    snprintf(state, sizeof state,
             "{\"step\":%lld,\"skipped\":0,\"micro\":0,\"loss_scaler\":{\"dynamic\":false,"
             "\"cur_scale\":1,\"min_scale\":1,\"scale_factor\":2,\"scale_window\":1,"
             "\"delayed_shift\":1,\"cur_hysteresis\":1,\"consecutive_hysteresis\":false,"
             "\"cur_iter\":%lld,\"last_overflow_iter\":-1},\"lr\":0.001}", fx_step, fx_step);
    zck_save_desc d;
    memset(&d, 0, sizeof d);
    d.dir = dir;
    d.tag = tag;
    d.rank = rank;
    d.world_size = p->world;
    d.stage = 2;
    d.step = fx_step;
    d.config_hash = fx_config_hash;
    d.leave_latest = fx_leave_latest;
    /* A complete engine state (what an engine writes): verify and load range-check it. */
    d.engine_state = state;
    d.ntensors = FX_NTENSORS;
    d.tensors = tensors;
    d.npieces = fr->npieces;
    d.pieces = fr->pieces;
    d.streams = streams;
    d.dtype = ZINC_DTYPE_BF16;
    d.level = 3;
    d.chunk_bytes = 4096;
    d.threads = 2;
    d.shuffle = 1;
    d.timeout_s = 30;
    return d;
}

long fx_check_rank(zck_reader *r, const zplan *p, int rank, int s, uint32_t salt, char *err)
{
    size_t es = fx_esize(s);
    uint8_t *buf = calloc(p->shard_numel + 1, es);
    zck_target *t = calloc((size_t)p->nparams + 1, sizeof *t);
    size_t *pos = calloc((size_t)p->nparams + 1, sizeof *pos);
    int n = 0;
    for (int k = 0; k < p->nparams; k++) {
        size_t lo, hi, ps;
        if (!zplan_param_in_slice(p, k, rank, &lo, &hi, &ps)) continue;
        t[n] = (zck_target){k, lo, hi, buf + ps * es};
        pos[n++] = ps;
    }
    long bad = 0;
    if (zck_read(r, s, t, n, 2, err) != ZINC_OK) {
        bad = -1;
    } else {
        for (int j = 0; j < n; j++)
            for (uint64_t i = t[j].lo; i < t[j].hi; i++) {
                uint32_t want = fx_bits(s, t[j].tensor, i, salt), got = 0;
                memcpy(&got, buf + (pos[j] + (i - t[j].lo)) * es, es);
                if (got != want) bad++;
            }
    }
    free(buf);
    free(t);
    free(pos);
    return bad;
}

typedef struct {
    const char *dir, *tag;
    int world, async;
    unsigned streams;
    uint32_t salt;
    size_t chunk_bytes;
    zlocal_world_t *lw;
    zinc_status st[64];
    char (*errs)[ZCK_ERR];
} fx_save_arg;

static void fx_save_rank(int rank, void *arg)
{
    fx_save_arg *a = arg;
    zcomm_t *c = NULL;
    char err[ZCK_ERR] = "";
    if (zcomm_local_create(a->lw, rank, &c) != ZINC_OK) {
        a->st[rank] = ZINC_ERR_COMM;
        return;
    }
    zplan p;
    fx_plan(a->world, &p);
    zck_tensor t[FX_NTENSORS];
    fx_tensors(t);
    fx_rank fr;
    fx_rank_make(&p, rank, a->streams, a->salt, &fr);
    zck_save_desc d = fx_desc(a->dir, a->tag, &p, rank, t, &fr, a->streams);
    d.chunk_bytes = a->chunk_bytes;
    static const char blob[] = "data position 12345, rng 0xfeed";
    if (rank == 0) {
        d.blob = blob;
        d.blob_bytes = sizeof blob;
    }
    zinc_status s;
    if (a->async) {
        zck_async *as;
        /* the staging copy is what the engine bridge would hand over */
        s = zck_async_start(c, &d, NULL, &as, err);
        if (s == ZINC_OK) s = zck_async_wait(as, err);
    } else {
        s = zck_save(c, &d, err);
    }
    if (s != ZINC_OK) fprintf(stderr, "rank %d: %s\n", rank, err);
    if (a->errs) memcpy(a->errs[rank], err, ZCK_ERR);
    a->st[rank] = s;
    fx_rank_free(&fr);
    zplan_free(&p);
    zcomm_destroy(c);
}

static zinc_status save_world(const char *dir, const char *tag, int world, unsigned streams,
                              uint32_t salt, size_t chunk_bytes, int async, char (*errs)[ZCK_ERR])
{
    fx_save_arg a;
    memset(&a, 0, sizeof a);
    a.dir = dir;
    a.tag = tag;
    a.world = world;
    a.streams = streams;
    a.salt = salt;
    a.chunk_bytes = chunk_bytes;
    a.async = async;
    a.errs = errs;
    if (zlocal_world_create(world, &a.lw) != ZINC_OK) return ZINC_ERR_COMM;
    zt_run_ranks(world, fx_save_rank, &a);
    zlocal_world_destroy(a.lw);
    for (int r = 0; r < world; r++)
        if (a.st[r] != ZINC_OK) return a.st[r];
    return ZINC_OK;
}

zinc_status fx_save_world(const char *dir, const char *tag, int world, unsigned streams,
                          uint32_t salt, size_t chunk_bytes, int async)
{
    return save_world(dir, tag, world, streams, salt, chunk_bytes, async, NULL);
}

zinc_status fx_save_world_errs(const char *dir, const char *tag, int world, unsigned streams,
                               uint32_t salt, size_t chunk_bytes, char (*errs)[ZCK_ERR])
{
    return save_world(dir, tag, world, streams, salt, chunk_bytes, 0, errs);
}

void fx_tmproot(char *out, size_t n, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, n, "%s/zinc-ckpt-%s-%d", tmp ? tmp : "/tmp", name, (int)getpid());
    mkdir(out, 0755);
}

void fx_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4200];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        /* a test's own files too, not only the writer's: zck_rmdir_flat would leave them */
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) fx_rmtree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

void fx_edit_file(const char *path, long off, int flip, long truncate_by)
{
    int fd = open(path, O_RDWR);
    struct stat st;
    ZT_CHECK(fd >= 0 && fstat(fd, &st) == 0, "cannot open %s to damage it", path);
    if (fd < 0) return;
    if (flip) {
        unsigned char b = 0;
        ZT_CHECK(pread(fd, &b, 1, off) == 1, "cannot read %s at %ld", path, off);
        b ^= 0x5a;
        ZT_CHECK(pwrite(fd, &b, 1, off) == 1, "cannot write %s at %ld", path, off);
    }
    if (truncate_by)
        ZT_CHECK(ftruncate(fd, st.st_size - truncate_by) == 0, "cannot truncate %s", path);
    close(fd);
}
