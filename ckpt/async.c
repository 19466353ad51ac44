/*
 * async.c — a save that compresses and writes on a background thread while training goes on.
 *
 * The caller snapshots its shard into host staging memory first (api.c), so training may change
 * the device buffers as soon as zck_async_start returns. The background thread makes no
 * collective call (those belong to the training thread): each rank writes its file and its
 * rank-N.json, and rank 0 learns that the others are done by waiting for their rank-N.json
 * files (or rank-N.failed), then commits.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "base/log.h"

struct zck_async {
    zck_save_desc d;                /* with the copies below */
    char *dir, *tag, *hash, *settings, *state;
    zck_tensor *tensors;
    zck_piece *pieces;
    void *blob;
    void *staging;
    pthread_t th;
    pthread_mutex_t mu;
    int done;
    zinc_status s;
    char err[ZCK_ERR];
};

static void *zck_async_main(void *arg)
{
    zck_async *a = arg;
    char err[ZCK_ERR] = "";
    zinc_status s = zck_save_write(&a->d, err);
    if (a->d.rank == 0) {
        if (s == ZINC_OK) s = zck_save_commit(&a->d, err);
        if (s != ZINC_OK) {
            char tmp[4200];
            snprintf(tmp, sizeof tmp, "%s/%s.tmp", a->d.dir, a->d.tag);
            zck_rmdir_flat(tmp);
        }
    }
    /* The staging memory is the bulk of what an async save holds: give it back now. */
    free(a->staging);
    a->staging = NULL;
    pthread_mutex_lock(&a->mu);
    a->s = s;
    memcpy(a->err, err, sizeof err);
    a->done = 1;
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void zck_async_free(zck_async *a)
{
    free(a->dir);
    free(a->tag);
    free(a->hash);
    free(a->settings);
    free(a->state);
    free(a->tensors);
    free(a->pieces);
    free(a->blob);
    free(a->staging);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

zinc_status zck_async_start(zcomm_t *c, const zck_save_desc *d, void *staging, zck_async **out,
                            char *err)
{
    *out = NULL;
    zck_async *a = calloc(1, sizeof *a);
    if (!a) {
        free(staging);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory");
    }
    pthread_mutex_init(&a->mu, NULL);
    a->staging = staging;
    a->d = *d;
    a->dir = dup_or_null(d->dir);
    a->tag = dup_or_null(d->tag);
    a->hash = dup_or_null(d->config_hash);
    a->settings = dup_or_null(d->settings_hash);
    a->state = dup_or_null(d->engine_state);
    a->tensors = malloc(((size_t)d->ntensors + 1) * sizeof *a->tensors);
    a->pieces = malloc(((size_t)d->npieces + 1) * sizeof *a->pieces);
    if (d->blob && d->blob_bytes) a->blob = malloc(d->blob_bytes);
    if (!a->dir || !a->tag || (d->config_hash && !a->hash) ||
        (d->settings_hash && !a->settings) || (d->engine_state && !a->state) ||
        !a->tensors || !a->pieces || (d->blob && d->blob_bytes && !a->blob)) {
        zck_async_free(a);
        /* still collective: the others must not wait in prepare for this rank */
        zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: out of memory");
        char e2[ZCK_ERR];
        zck_save_prepare(c, d, e2);
        return ZINC_ERR_NOMEM;
    }
    memcpy(a->tensors, d->tensors, (size_t)d->ntensors * sizeof *a->tensors);
    memcpy(a->pieces, d->pieces, (size_t)d->npieces * sizeof *a->pieces);
    if (a->blob) memcpy(a->blob, d->blob, d->blob_bytes);
    a->d.dir = a->dir;
    a->d.tag = a->tag;
    a->d.config_hash = a->hash;
    a->d.settings_hash = a->settings;
    a->d.engine_state = a->state;
    a->d.tensors = a->tensors;
    a->d.pieces = a->pieces;
    a->d.blob = a->blob;
    zinc_status s = zck_save_prepare(c, &a->d, err);
    if (s != ZINC_OK) {
        zck_async_free(a);
        return s;
    }
    if (pthread_create(&a->th, NULL, zck_async_main, a) != 0) {
        zck_async_free(a);
        return zerr_fmt(err, ZCK_ERR, ZINC_ERR_NOMEM, "ckpt save: cannot start the background thread");
    }
    *out = a;
    return ZINC_OK;
}

int zck_async_done(zck_async *a)
{
    if (!a) return 1;
    pthread_mutex_lock(&a->mu);
    int d = a->done;
    pthread_mutex_unlock(&a->mu);
    return d;
}

zinc_status zck_async_wait(zck_async *a, char *err)
{
    if (!a) return ZINC_OK;
    pthread_join(a->th, NULL);
    zinc_status s = a->s;
    if (s != ZINC_OK) memcpy(err, a->err, ZCK_ERR);
    zck_async_free(a);
    return s;
}
