/*
 * world.c — the public world handles: a local world (ranks are threads) or an MPI world (one
 * process per rank). A world only says who the ranks are; each engine opens its own comm on it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "base/log.h"
#include "kernels/cuda/bootstrap.h"

static zinc_world_t *world_new(void)
{
    zinc_world_t *w = calloc(1, sizeof *w);
    if (w) pthread_mutex_init(&w->comms_mu, NULL);
    return w;
}

/* The handle itself; its local world and MPI are closed by the caller. */
static void world_free(zinc_world_t *w)
{
    pthread_mutex_destroy(&w->comms_mu);
    free(w->comms);
    free(w);
}

zinc_status zworld_add_comm(zinc_world_t *w, zcomm_t *c)
{
    pthread_mutex_lock(&w->comms_mu);
    zinc_status s = ZINC_OK;
    if (w->ncomms == w->comms_cap) {
        int cap = w->comms_cap ? 2 * w->comms_cap : 4;
        zcomm_t **grown = realloc(w->comms, (size_t)cap * sizeof *grown);
        if (grown) {
            w->comms = grown;
            w->comms_cap = cap;
        } else {
            s = zerr_thread(ZINC_ERR_NOMEM, "zinc_engine_create: out of memory for the world's "
                                            "list of comms");
        }
    }
    if (s == ZINC_OK) w->comms[w->ncomms++] = c;
    /* An engine created after the world was aborted with no engine alive: its first
     * collective fails here, and tells the other ranks (theirs fail too, instead of running on
     * without this rank). An abort with engines alive went through their comms; the engines
     * created after it start afresh, as a local world's do not. */
    if (s == ZINC_OK && w->aborted) c->iface->abort(c, w->abort_why);
    pthread_mutex_unlock(&w->comms_mu);
    return s;
}

void zworld_remove_comm(zinc_world_t *w, zcomm_t *c)
{
    pthread_mutex_lock(&w->comms_mu);
    for (int i = 0; i < w->ncomms; i++)
        if (w->comms[i] == c) {
            w->comms[i] = w->comms[--w->ncomms];
            break;
        }
    pthread_mutex_unlock(&w->comms_mu);
}

zinc_status zinc_world_create_local(int world_size, zinc_world_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_create_local: out is NULL");
    *out = NULL;
    if (world_size < 1 || world_size > 4096)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zinc_world_create_local: world_size %d is outside 1..4096", world_size);
    zinc_world_t *w = world_new();
    if (!w) return zerr_thread(ZINC_ERR_NOMEM, "zinc_world_create_local: out of memory");
    w->size = world_size;
    zinc_status s = zlocal_world_create(world_size, &w->local);
    if (s != ZINC_OK) {
        world_free(w);
        return zerr_thread(s, "zinc_world_create_local: cannot create a world of %d ranks",
                           world_size);
    }
    *out = w;
    return ZINC_OK;
}

zinc_status zinc_world_create_mpi(zinc_world_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_create_mpi: out is NULL");
    *out = NULL;
    int rank = 0, size = 1, inited = 0;
    zinc_status s = zmpi_init(&rank, &size, &inited);
    if (s == ZINC_ERR_UNSUPPORTED)
        return zerr_thread(s, "zinc_world_create_mpi: this zinc was built without MPI "
                              "(install libopenmpi-dev and rebuild)");
    if (s != ZINC_OK) return zerr_thread(s, "zinc_world_create_mpi: MPI initialisation failed");
    zinc_world_t *w = world_new();
    if (!w) return zerr_thread(ZINC_ERR_NOMEM, "zinc_world_create_mpi: out of memory");
    w->size = size;
    w->is_mpi = 1;
    w->mpi_rank = rank;
    w->we_initialised_mpi = inited;
    *out = w;
    return ZINC_OK;
}

zinc_status zinc_world_create_launched(zinc_world_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_create_launched: out is NULL");
    *out = NULL;
    zboot_info bi;
    char err[512] = "";
    zinc_status s = zboot_detect(&bi, err, sizeof err);
    if (s != ZINC_OK) return zerr_thread(s, "zinc_world_create_launched: %s", err);
    if (!strcmp(bi.method, "mpi")) {
        s = zinc_world_create_mpi(out);
        /* Detection initialised MPI: the world finalises it when destroyed. */
        if (s == ZINC_OK && bi.mpi_initialised) (*out)->we_initialised_mpi = 1;
        return s;
    }
    /* A launch of one process (`deepspeed train.py`, torchrun --nproc-per-node 1, RANK=0
     * WORLD_SIZE=1 set for DeepSpeed's own setup) has no peer to connect: a world of one, which
     * runs on any device, as without a launcher. */
    if (!strcmp(bi.method, "single") || bi.size == 1) return zinc_world_create_local(1, out);
    zinc_world_t *w = world_new();
    if (!w) return zerr_thread(ZINC_ERR_NOMEM, "zinc_world_create_launched: out of memory");
    w->size = bi.size;
    w->is_env = 1;
    w->mpi_rank = bi.rank;
    *out = w;
    return ZINC_OK;
}

void zinc_world_destroy(zinc_world_t *w)
{
    if (!w) return;
    if (w->local) zlocal_world_destroy(w->local);
    if (w->is_mpi && w->we_initialised_mpi) zmpi_finalize();
    world_free(w);
}

int zinc_world_size(const zinc_world_t *w) { return w ? w->size : 0; }

int zinc_world_rank(const zinc_world_t *w)
{
    return w && (w->is_mpi || w->is_env) ? w->mpi_rank : -1;
}

/* The world-level collectives outside an engine go over MPI only: ZINC_ERR_UNSUPPORTED naming
 * `fn` and the kind of world otherwise. */
static zinc_status mpi_only(const zinc_world_t *w, const char *fn)
{
    if (w->is_mpi) return ZINC_OK;
    return zerr_thread(ZINC_ERR_UNSUPPORTED, "%s: only MPI worlds (mpirun) have collectives "
                       "outside an engine; this world is %s", fn,
                       w->local ? "local (threads)" : "the launcher's environment");
}

zinc_status zinc_world_broadcast(zinc_world_t *w, void *buf, size_t bytes, int root)
{
    if (!w || (!buf && bytes))
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_broadcast: NULL world or buffer");
    if (root < 0 || root >= w->size)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_broadcast: root %d is outside 0..%d",
                           root, w->size - 1);
    if (w->size == 1) return ZINC_OK;
    zinc_status s = mpi_only(w, "zinc_world_broadcast");
    return s == ZINC_OK ? zmpi_world_bcast(buf, bytes, root) : s;
}

zinc_status zinc_world_barrier(zinc_world_t *w)
{
    if (!w) return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_world_barrier: NULL world");
    if (w->size == 1) return ZINC_OK;
    zinc_status s = mpi_only(w, "zinc_world_barrier");
    return s == ZINC_OK ? zmpi_world_barrier() : s;
}

void zinc_world_abort(zinc_world_t *w, int rank, const char *why)
{
    if (!w) return;
    if (w->local) {
        zlocal_world_abort(w->local, rank, why ? why : "aborted");
        return;
    }
    if (!why) why = "aborted";
    /* Every CPU engine's comm: a rank may be blocked in any of them (two models, as a GAN's).
     * A CUDA engine's NCCL comm is not on the list: NCCL cannot tell the other ranks, and its
     * abort is not safe against the stepping thread (docs/cuda.md). */
    pthread_mutex_lock(&w->comms_mu);
    for (int i = 0; i < w->ncomms; i++) w->comms[i]->iface->abort(w->comms[i], why);
    if (w->is_mpi && w->ncomms == 0) {
        /* No comm to tell the others through: the next engine's comm carries it. */
        if (!w->aborted) {
            w->aborted = 1;
            snprintf(w->abort_why, sizeof w->abort_why, "%s", why);
        }
        /* And another rank may be busy where no exit notice reaches it (outside zinc): without
         * this, MPI_Finalize at exit waits for it forever. zinc's end of the job (inside
         * MPI_Finalize) ends the job with MPI_Abort unless every rank arrives within the grace
         * (all failed alike: then they keep their own exit statuses), and its exit notices
         * carry this failure to ranks waiting in zinc's calls. */
        char msg[300];
        snprintf(msg, sizeof msg, "rank %d aborted: %s", rank, why);
        zmpi_note_failure(ZINC_ERR_ABORTED, msg, ZMPI_LONE_ABORT_GRACE_S);
    }
    pthread_mutex_unlock(&w->comms_mu);
}
