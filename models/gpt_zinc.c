/*
 * gpt_zinc.c — the built-in model as a zinc client: the worked example of include/zinc.h.
 *
 * Registration: one group per transformer block plus group "embed" (token and position
 * embeddings and the final LayerNorm; the LM head is the token embedding). Parameters are
 * registered in the engine's working dtype.
 *
 * One micro-step (zm_model_micro_step), in group order 0 = embed, 1..L = blocks:
 *
 *   forward   gather(embed) -> embeddings -> release
 *             for each block: gather -> convert to fp32 -> block forward -> release
 *             gather(embed) -> final LN, logits, loss and their backward -> release
 *   backward  for each block, last first: gather -> block backward into fp32 scratch (with
 *             activation checkpointing it first recomputes the block's activations from its
 *             input, with the gathered weights) -> add into the gradient views -> release ->
 *             grads_ready(block)
 *             embedding backward -> gather(embed) -> add -> release -> grads_ready(embed)
 *
 * The embed group's gradient (head + embeddings) is collected in its own fp32 scratch and handed
 * to the engine only at the end, so at most one group holds un-handed-over gradients at any time
 * (zinc's stage 2-3 bucket budget), and the engine's views are touched only while gathered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt.h"
#include "models/half.h"

struct zm_model {
    zinc_engine_t *e;
    zm_spec s;
    int B;
    zinc_dtype dt;
    int ngroups;
    int *gid;                 /* [ngroups] engine group ids */
    int *pid;                 /* [nparams] engine param ids, group by group */
    int *first;               /* [ngroups + 1] index of a group's first param in pid */
    int nparams;
    zm_tensor *tensors;       /* [nparams] layout, parallel to pid */
    float *p0, *g0;           /* [numel(embed)] fp32 params / grads of the embed group */
    float *pb, *gb;           /* [numel(block)] fp32 params / grads of the block in hand */
    zm_acts *acts;
    size_t bytes;
};

#define CK(call)                                                                              \
    do {                                                                                      \
        zinc_status s_ = (call);                                                              \
        if (s_ != ZINC_OK) return s_;                                                         \
    } while (0)

zinc_status zm_register(zinc_engine_t *e, const zm_spec *s, zinc_dtype dt, int *gid, int *first,
                        int *pid, zm_tensor *tensors, int *nparams)
{
    int ngroups = zm_group_count(s);
    *nparams = 0;
    for (int g = 0; g < ngroups; g++) {
        char name[32];
        if (g == 0)
            snprintf(name, sizeof name, "embed");
        else
            snprintf(name, sizeof name, "h%d", g - 1);
        zinc_status st = zinc_group_add(e, name, &gid[g]);
        if (st != ZINC_OK) return st;
        first[g] = *nparams;
        zm_tensor t[ZM_MAX_TENSORS];
        int nt = zm_tensors(s, g, t);
        for (int i = 0; i < nt; i++) {
            st = zinc_param_add(e, gid[g], t[i].name, t[i].ndim, t[i].shape, dt, &pid[*nparams]);
            if (st != ZINC_OK) return st;
            tensors[(*nparams)++] = t[i];
        }
    }
    first[ngroups] = *nparams;
    return ZINC_OK;
}

zinc_status zm_model_create(zinc_engine_t *e, const zm_spec *s, int B, int threads,
                            int checkpoint, zm_model **out)
{
    *out = NULL;
    zm_model *m = calloc(1, sizeof *m);
    if (!m) return ZINC_ERR_NOMEM;
    m->e = e;
    m->s = *s;
    m->B = B;
    m->dt = zinc_engine_dtype(e);
    m->ngroups = zm_group_count(s);
    size_t cap = (size_t)m->ngroups * ZM_MAX_TENSORS;
    m->gid = calloc((size_t)m->ngroups, sizeof *m->gid);
    m->first = calloc((size_t)m->ngroups + 1, sizeof *m->first);
    m->pid = calloc(cap, sizeof *m->pid);
    m->tensors = calloc(cap, sizeof *m->tensors);
    size_t n0 = (size_t)zm_group_numel(s, 0), nb = (size_t)zm_group_numel(s, 1);
    m->p0 = malloc(n0 * sizeof(float));
    m->g0 = malloc(n0 * sizeof(float));
    m->pb = malloc(nb * sizeof(float));
    m->gb = malloc(nb * sizeof(float));
    zinc_status st = ZINC_ERR_NOMEM;
    if (!m->gid || !m->first || !m->pid || !m->tensors || !m->p0 || !m->g0 || !m->pb || !m->gb)
        goto fail;
    st = zm_acts_create(s, B, threads, checkpoint, &m->acts);
    if (st != ZINC_OK) goto fail;
    m->bytes = (2 * n0 + 2 * nb) * sizeof(float) + zm_acts_bytes(m->acts);

    st = zm_register(e, s, m->dt, m->gid, m->first, m->pid, m->tensors, &m->nparams);
    if (st != ZINC_OK) goto fail;
    *out = m;
    return ZINC_OK;
fail:
    zm_model_destroy(m);
    return st;
}

void zm_model_destroy(zm_model *m)
{
    if (!m) return;
    zm_acts_destroy(m->acts);
    free(m->gid);
    free(m->first);
    free(m->pid);
    free(m->tensors);
    free(m->p0);
    free(m->g0);
    free(m->pb);
    free(m->gb);
    free(m);
}

zinc_status zm_model_init(zm_model *m, uint64_t seed)
{
    for (int g = 0; g < m->ngroups; g++) {
        float *buf = g == 0 ? m->p0 : m->pb;
        zm_init_group(&m->s, g, seed, buf);
        for (int i = m->first[g]; i < m->first[g + 1]; i++)
            CK(zinc_param_set(m->e, m->pid[i], buf + m->tensors[i].offset));
    }
    return ZINC_OK;
}

/* Gathered group g's working copy -> fp32 scratch. */
static zinc_status load_group(zm_model *m, int g, float *dst)
{
    for (int i = m->first[g]; i < m->first[g + 1]; i++) {
        void *v;
        CK(zinc_param_data(m->e, m->pid[i], &v));
        zm_load(dst + m->tensors[i].offset, v, m->dt, (size_t)m->tensors[i].numel);
    }
    return ZINC_OK;
}

/* fp32 gradient scratch of group g -> added into the engine's gradient views. */
static zinc_status add_grads(zm_model *m, int g, const float *src)
{
    for (int i = m->first[g]; i < m->first[g + 1]; i++) {
        void *v;
        CK(zinc_param_grad(m->e, m->pid[i], &v));
        zm_add_into(v, src + m->tensors[i].offset, m->dt, (size_t)m->tensors[i].numel);
    }
    return ZINC_OK;
}

zinc_status zm_model_micro_step(zm_model *m, const uint16_t *tokens, const uint16_t *targets,
                                double *loss)
{
    zinc_engine_t *e = m->e;
    const zm_spec *s = &m->s;
    zm_embed ew, eg;
    zm_block bw, bg;
    zm_embed_views(s, m->p0, &ew);
    zm_embed_views(s, m->g0, &eg);
    zm_block_views(s, m->pb, &bw);
    zm_block_views(s, m->gb, &bg);
    size_t n0 = (size_t)zm_group_numel(s, 0), nb = (size_t)zm_group_numel(s, 1);

    CK(zinc_gather(e, m->gid[0]));
    CK(load_group(m, 0, m->p0));
    CK(zinc_release(e, m->gid[0]));
    zm_embed_forward(m->acts, &ew, tokens);
    for (int l = 0; l < s->L; l++) {
        CK(zinc_gather(e, m->gid[l + 1]));
        CK(load_group(m, l + 1, m->pb));
        CK(zinc_release(e, m->gid[l + 1]));
        zm_block_forward(m->acts, l, &bw);
    }

    /* The objective is loss * multiplier (loss scale / accumulation steps), as DeepSpeed's
     * engine.backward scales it; the reported loss is the unscaled mean. */
    float mult = zinc_loss_multiplier(e);
    CK(zinc_gather(e, m->gid[0]));
    CK(load_group(m, 0, m->p0));
    CK(zinc_release(e, m->gid[0]));
    memset(m->g0, 0, n0 * sizeof(float));
    double l0 = zm_head(m->acts, &ew, targets, mult, &eg);

    for (int l = s->L - 1; l >= 0; l--) {
        int g = l + 1;
        CK(zinc_gather(e, m->gid[g]));
        CK(load_group(m, g, m->pb));
        memset(m->gb, 0, nb * sizeof(float));
        zm_block_backward(m->acts, l, &bw, &bg);
        CK(add_grads(m, g, m->gb));
        CK(zinc_release(e, m->gid[g]));
        CK(zinc_grads_ready(e, m->gid[g]));
    }
    zm_embed_backward(m->acts, tokens, &eg);
    CK(zinc_gather(e, m->gid[0]));
    CK(add_grads(m, 0, m->g0));
    CK(zinc_release(e, m->gid[0]));
    CK(zinc_grads_ready(e, m->gid[0]));
    if (loss) *loss = l0;
    return ZINC_OK;
}

const int *zm_model_params(const zm_model *m, int *n)
{
    if (n) *n = m->nparams;
    return m->pid;
}

const zm_spec *zm_model_spec(const zm_model *m) { return &m->s; }

size_t zm_model_bytes(const zm_model *m) { return m->bytes; }

size_t zm_model_bytes_for(const zm_spec *s, int B, int checkpoint)
{
    size_t acts = zm_acts_bytes_for(s, B, checkpoint);
    size_t scratch = (2 * (size_t)zm_group_numel(s, 0) + 2 * (size_t)zm_group_numel(s, 1)) *
                     sizeof(float);
    return acts > SIZE_MAX - scratch ? SIZE_MAX : acts + scratch;
}
