/*
 * test_ckpt_mpi.c — the commit protocol across processes (run under mpirun, any rank count):
 * a blocking and an async save by every process over the mpi comm, then every process checks
 * what the others wrote by loading it at another layout (world 2N and 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "testutil.h"

int main(int argc, char **argv)
{
    int rank = 0, size = 1, inited = 0;
    zinc_status s = zmpi_init(&rank, &size, &inited);
    if (s == ZINC_ERR_UNSUPPORTED) return 77;
    zcomm_t *c = NULL;
    ZT_OK(zcomm_mpi_create(&c));
    if (!c) return zt_finish("test_ckpt_mpi");
    /* one directory for the whole job: rank 0's pid, sent to everyone */
    int32_t id = (int32_t)getpid();
    ZT_OK(c->iface->broadcast(c, &id, sizeof id, 0));
    char dir[600], err[ZCK_ERR];
    snprintf(dir, sizeof dir, "%s/zinc-ckpt-mpi-%d", argc > 1 ? argv[1] : "/tmp", (int)id);
    zck_tensor t[FX_NTENSORS];
    fx_tensors(t);
    zplan p;
    fx_plan(size, &p);
    for (int async = 0; async < 2; async++) {
        fx_rank fr;
        fx_rank_make(&p, rank, 0x7, 10u + (unsigned)async, &fr);
        char tag[16];
        snprintf(tag, sizeof tag, "a%d", async);
        zck_save_desc d = fx_desc(dir, tag, &p, rank, t, &fr, 0x7);
        if (async) {
            zck_async *a = NULL;
            s = zck_async_start(c, &d, NULL, &a, err);
            ZT_CHECK(s == ZINC_OK, "rank %d: async start: %s", rank, err);
            if (a) {
                s = zck_async_wait(a, err);
                ZT_CHECK(s == ZINC_OK, "rank %d: async save: %s", rank, err);
            }
        } else {
            s = zck_save(c, &d, err);
            ZT_CHECK(s == ZINC_OK, "rank %d: save: %s", rank, err);
        }
        fx_rank_free(&fr);
    }
    ZT_OK(c->iface->barrier(c));   /* rank 0's async commit is done once its wait returned */
    char td[800], tn[64];
    ZT_OK(zck_find_tag(dir, NULL, 0, rank, td, sizeof td, tn, sizeof tn, err));
    ZT_CHECK(!strcmp(tn, "a1"), "rank %d: auto picked %s", rank, tn);
    zck_reader *r = NULL;
    ZT_OK(zck_open(td, &r, err));
    if (r) {
        int Ms[] = {2 * size, 1};
        for (int k = 0; k < 2; k++) {
            zplan q;
            fx_plan(Ms[k], &q);
            /* this process checks the ranks of the new layout that fall to it */
            for (int nr = rank; nr < Ms[k]; nr += size)
                for (int st = 0; st < 3; st++) {
                    long bad = fx_check_rank(r, &q, nr, st, 11, err);
                    ZT_CHECK(bad == 0, "M=%d rank %d stream %d: %ld (%s)", Ms[k], nr, st, bad, bad < 0 ? err : "");
                }
            zplan_free(&q);
        }
        ZT_OK(zck_verify(r, 2, err));
        zck_close(r);
    }
    ZT_OK(c->iface->barrier(c));
    if (rank == 0) fx_rmtree(dir);
    zplan_free(&p);
    zcomm_destroy(c);
    if (inited) zmpi_finalize();
    return zt_finish("test_ckpt_mpi");
}
