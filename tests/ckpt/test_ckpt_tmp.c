/*
 * test_ckpt_tmp.c — a failed save leaves no <tag>.tmp behind (issue 12; labels ckpt, fault).
 *
 * Three local ranks save with the checkpoint layers directly (fixture.h). Failures:
 *  - the world is aborted while the ranks write (the commit hook, on rank 1's thread, at
 *    "rankjson"): the synchronous save's all-reduce of the failure flags fails on every rank;
 *  - the world is aborted before the save: prepare's collective fails after rank 0 made the
 *    .tmp, synchronous and asynchronous (zck_async_start) alike;
 *  - rank 1's write fails (its rank-N.json cannot be created), synchronous and asynchronous:
 *    rank 0's commit fails on rank 1's note.
 * Each must fail on every rank and leave the save directory as it was: the previous tag, its
 * `latest`, and no .tmp.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "shard/comm.h"
#include "testutil.h"

#define WORLD 3

enum { FAIL_ABORT_WHILE_WRITING, FAIL_ABORT_BEFORE, FAIL_RANK1_WRITE };

typedef struct {
    const char *dir, *tag;
    int async, mode;
    zlocal_world_t *lw;
    zinc_status st[WORLD];
} tmp_arg;

static __thread int hook_rank = -1;   /* the rank of the thread running zck_save_write */
static tmp_arg *hook_arg;

static void abort_hook(const char *phase)
{
    if (hook_rank == 1 && !strcmp(phase, "rankjson"))
        zlocal_world_abort(hook_arg->lw, 1, "test hook: rank 1 stops while writing");
}

static void save_rank(int rank, void *arg)
{
    tmp_arg *a = arg;
    hook_rank = rank;
    zcomm_t *c = NULL;
    char err[ZCK_ERR] = "";
    if (zcomm_local_create(a->lw, rank, &c) != ZINC_OK) {
        a->st[rank] = ZINC_ERR_COMM;
        return;
    }
    zcomm_set_timeout(c, 20);
    zplan p;
    fx_plan(WORLD, &p);
    zck_tensor t[FX_NTENSORS];
    fx_tensors(t);
    fx_rank fr;
    fx_rank_make(&p, rank, 0x7, 77, &fr);
    zck_save_desc d = fx_desc(a->dir, a->tag, &p, rank, t, &fr, 0x7);
    d.chunk_bytes = 4096;
    d.timeout_s = 20;
    zinc_status s;
    if (a->async) {
        zck_async *as = NULL;
        s = zck_async_start(c, &d, NULL, &as, err);
        if (s == ZINC_OK) s = zck_async_wait(as, err);
    } else {
        s = zck_save(c, &d, err);
    }
    a->st[rank] = s;
    fx_rank_free(&fr);
    zplan_free(&p);
    zcomm_destroy(c);
}

/* Makes rank 1's rank-00001.json impossible to create, even as root: a dangling symbolic link
 * where its temporary file goes (zck_write_file_atomic writes <name>.tmp, then renames it). */
static void block_rank1_json(const char *dir, const char *tag)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/%s.tmp/rank-00001.json.tmp", dir, tag);
    if (symlink("/nonexistent-zinc-test/x", p) != 0) perror(p);
}

static void block_hook(const char *phase)
{
    if (hook_rank == 1 && !strcmp(phase, "rankjson")) block_rank1_json(hook_arg->dir, hook_arg->tag);
}

/* For the asynchronous save the hook runs on the save's own thread, whose rank it cannot know:
 * the first caller blocks rank 1's json, whoever it is. */
static int blocked;
static void block_hook_any(const char *phase)
{
    if (!strcmp(phase, "rankjson") && !__atomic_exchange_n(&blocked, 1, __ATOMIC_SEQ_CST))
        block_rank1_json(hook_arg->dir, hook_arg->tag);
}

static void scenario(const char *root, const char *name, int mode, int async)
{
    char dir[700], tmp[800], latest[800];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    ZT_OK(fx_save_world(dir, "s1", WORLD, 0x7, 1, 4096, 0));

    tmp_arg a = {.dir = dir, .tag = "s2", .async = async, .mode = mode};
    ZT_OK(zlocal_world_create(WORLD, &a.lw));
    if (!a.lw) return;
    hook_arg = &a;
    blocked = 0;
    if (mode == FAIL_ABORT_BEFORE) zlocal_world_abort(a.lw, 2, "test: aborted before the save");
    zck_test_hook = mode == FAIL_ABORT_WHILE_WRITING ? abort_hook
                    : mode == FAIL_RANK1_WRITE      ? (async ? block_hook_any : block_hook)
                                                    : NULL;
    zt_run_ranks(WORLD, save_rank, &a);
    zck_test_hook = NULL;
    zlocal_world_destroy(a.lw);

    /* An async save's thread reports its own rank's part (rank 2 wrote its file); rank 0's
     * includes the commit. */
    for (int r = 0; r < WORLD; r++)
        if (!(async && mode == FAIL_RANK1_WRITE && r == 2))
            ZT_CHECK(a.st[r] != ZINC_OK, "%s: rank %d's save succeeded", name, r);
    snprintf(tmp, sizeof tmp, "%s/s2.tmp", dir);
    struct stat sb;
    ZT_CHECK(stat(tmp, &sb) != 0, "%s: the failed save left %s behind", name, tmp);
    snprintf(tmp, sizeof tmp, "%s/s2", dir);
    ZT_CHECK(stat(tmp, &sb) != 0, "%s: the failed save left a tag %s", name, tmp);
    char *txt = NULL, err[ZCK_ERR];
    size_t len;
    snprintf(latest, sizeof latest, "%s/latest", dir);
    ZT_OK(zck_read_file(latest, &txt, &len, err));
    ZT_CHECK(txt && !strncmp(txt, "s1", 2), "%s: latest is now %s", name, txt ? txt : "(none)");
    free(txt);
    fx_rmtree(dir);
}

int main(void)
{
    char root[512];
    fx_tmproot(root, sizeof root, "tmp");
    scenario(root, "abort-while-writing", FAIL_ABORT_WHILE_WRITING, 0);
    scenario(root, "abort-before-sync", FAIL_ABORT_BEFORE, 0);
    scenario(root, "abort-before-async", FAIL_ABORT_BEFORE, 1);
    scenario(root, "rank1-write-sync", FAIL_RANK1_WRITE, 0);
    scenario(root, "rank1-write-async", FAIL_RANK1_WRITE, 1);
    rmdir(root);
    return zt_finish("ckpt_tmp");
}
