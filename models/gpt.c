/*
 * gpt.c — the fp32 math of the built-in model (see gpt.h): layout of the parameter groups,
 * initialisation, and forward/backward of each piece on plain float pointers.
 *
 * Everything here is deterministic for any thread count: a parallel loop hands each thread a
 * range of independent outputs (rows of an activation, rows of a weight gradient, one
 * (sequence, head) pair of attention), and every output is summed in one fixed order. Reductions
 * across rows (bias and LayerNorm parameter gradients) run on one thread.
 */
#include "models/gpt.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/rng.h"

/* ---- spec and layout ------------------------------------------------------------------------ */

int zm_spec_parse(const char *s, zm_spec *out, char *err, size_t n)
{
    zm_spec sp = {0, 0, 0, 0, ZM_VOCAB};
    int *field[4] = {&sp.L, &sp.D, &sp.H, &sp.T};
    const char *names = "LDHT";
    const int maxv[4] = {64, 4096, 256, 4096};
    if (!s || !*s) {
        snprintf(err, n, "empty model spec; expected e.g. \"%s\"", ZM_DEFAULT_SPEC);
        return -1;
    }
    const char *p = s;
    while (*p) {
        const char *k = strchr(names, toupper((unsigned char)*p));
        if (!k) {
            snprintf(err, n, "model spec \"%s\": unknown field '%c' (fields are L, D, H, T as in "
                     "\"%s\")", s, *p, ZM_DEFAULT_SPEC);
            return -1;
        }
        int i = (int)(k - names);
        p++;
        if (!isdigit((unsigned char)*p)) {
            snprintf(err, n, "model spec \"%s\": field %c needs a number", s, names[i]);
            return -1;
        }
        long v = 0;
        while (isdigit((unsigned char)*p) && v <= 1000000) v = v * 10 + (*p++ - '0');
        if (*field[i]) {
            snprintf(err, n, "model spec \"%s\": field %c given twice", s, names[i]);
            return -1;
        }
        if (v < 1 || v > maxv[i]) {
            snprintf(err, n, "model spec \"%s\": %c must be 1..%d", s, names[i], maxv[i]);
            return -1;
        }
        *field[i] = (int)v;
        if (*p == '-') {
            p++;
            if (!*p) {
                snprintf(err, n, "model spec \"%s\": trailing '-'", s);
                return -1;
            }
        } else if (*p) {
            snprintf(err, n, "model spec \"%s\": expected '-' after %c%ld", s, names[i], v);
            return -1;
        }
    }
    for (int i = 0; i < 4; i++)
        if (!*field[i]) {
            snprintf(err, n, "model spec \"%s\": field %c is missing (e.g. \"%s\")", s, names[i],
                     ZM_DEFAULT_SPEC);
            return -1;
        }
    if (sp.D % sp.H) {
        snprintf(err, n, "model spec \"%s\": width D=%d is not a multiple of heads H=%d", s, sp.D,
                 sp.H);
        return -1;
    }
    *out = sp;
    return 0;
}

int zm_group_count(const zm_spec *s) { return s->L + 1; }

static void add_tensor(zm_tensor *t, int *nt, int64_t *off, const char *name, int64_t a,
                       int64_t b)
{
    zm_tensor *x = &t[(*nt)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = b ? 2 : 1;
    x->shape[0] = a;
    x->shape[1] = b;
    x->numel = b ? a * b : a;
    x->offset = *off;
    *off += x->numel;
}

int zm_tensors(const zm_spec *s, int g, zm_tensor *t)
{
    int nt = 0;
    int64_t off = 0, D = s->D;
    char nm[48];
    if (g == 0) {
        add_tensor(t, &nt, &off, "wte", s->V, D);
        add_tensor(t, &nt, &off, "wpe", s->T, D);
        add_tensor(t, &nt, &off, "lnf.w", D, 0);
        add_tensor(t, &nt, &off, "lnf.b", D, 0);
        return nt;
    }
    static const char *const suffix[12] = {"ln1.w",      "ln1.b",      "attn.qkv.w", "attn.qkv.b",
                                           "attn.proj.w", "attn.proj.b", "ln2.w",      "ln2.b",
                                           "mlp.fc.w",   "mlp.fc.b",   "mlp.proj.w", "mlp.proj.b"};
    const int64_t shp[12][2] = {{D, 0},     {D, 0}, {3 * D, D}, {3 * D, 0}, {D, D},     {D, 0},
                                {D, 0},     {D, 0}, {4 * D, D}, {4 * D, 0}, {D, 4 * D}, {D, 0}};
    for (int i = 0; i < 12; i++) {
        snprintf(nm, sizeof nm, "h%d.%s", g - 1, suffix[i]);
        add_tensor(t, &nt, &off, nm, shp[i][0], shp[i][1]);
    }
    return nt;
}

int64_t zm_group_numel(const zm_spec *s, int g)
{
    zm_tensor t[ZM_MAX_TENSORS];
    int n = zm_tensors(s, g, t);
    return t[n - 1].offset + t[n - 1].numel;
}

int64_t zm_param_total(const zm_spec *s)
{
    int64_t n = 0;
    for (int g = 0; g < zm_group_count(s); g++) n += zm_group_numel(s, g);
    return n;
}

void zm_embed_views(const zm_spec *s, float *base, zm_embed *o)
{
    zm_tensor t[ZM_MAX_TENSORS];
    zm_tensors(s, 0, t);
    o->wte = base + t[0].offset;
    o->wpe = base + t[1].offset;
    o->lnf_w = base + t[2].offset;
    o->lnf_b = base + t[3].offset;
}

void zm_block_views(const zm_spec *s, float *base, zm_block *o)
{
    zm_tensor t[ZM_MAX_TENSORS];
    zm_tensors(s, 1, t);
    float **v[12] = {&o->ln1_w, &o->ln1_b, &o->qkv_w, &o->qkv_b, &o->attn_w, &o->attn_b,
                     &o->ln2_w, &o->ln2_b, &o->fc_w,  &o->fc_b,  &o->fcp_w,  &o->fcp_b};
    for (int i = 0; i < 12; i++) *v[i] = base + t[i].offset;
}

void zm_init_group(const zm_spec *s, int g, uint64_t seed, float *base)
{
    zm_tensor t[ZM_MAX_TENSORS];
    int nt = zm_tensors(s, g, t);
    for (int i = 0; i < nt; i++) {
        float *p = base + t[i].offset;
        const char *nm = t[i].name;
        size_t len = strlen(nm);
        int is_bias = len >= 2 && !strcmp(nm + len - 2, ".b");
        int is_lnw = !is_bias && strstr(nm, "ln") && t[i].ndim == 1;
        if (is_bias || is_lnw) {
            for (int64_t j = 0; j < t[i].numel; j++) p[j] = is_lnw ? 1.0f : 0.0f;
            continue;
        }
        /* Projections into the residual stream are scaled down so that the residual's variance
         * does not grow with depth (GPT-2). */
        double std = 0.02;
        if (strstr(nm, "attn.proj.w") || strstr(nm, "mlp.proj.w")) std /= sqrt(2.0 * s->L);
        uint64_t st = seed * 0xD1B54A32D192ED03ull + (uint64_t)g * 0x100000001B3ull + (uint64_t)i;
        for (int64_t j = 0; j < t[i].numel; j += 2) {
            double u1 = zrng_unit(&st), u2 = zrng_unit(&st), r = sqrt(-2.0 * log(u1));
            p[j] = (float)(std * r * cos(6.283185307179586 * u2));
            if (j + 1 < t[i].numel) p[j + 1] = (float)(std * r * sin(6.283185307179586 * u2));
        }
    }
}

/* ---- activations ---------------------------------------------------------------------------- */

typedef struct zm_layer_acts {
    float *x;                 /* [BT, D] residual input of the layer */
    float *ln1;               /* [BT, D] */
    float *ln1_mean, *ln1_rstd; /* [BT] */
    float *qkv;               /* [BT, 3D] */
    float *att;               /* [B, H, T, T] softmax probabilities (t2 <= t used) */
    float *atty;              /* [BT, D] attention output before its projection */
    float *xmid;              /* [BT, D] residual after attention */
    float *ln2;               /* [BT, D] */
    float *ln2_mean, *ln2_rstd; /* [BT] */
    float *fch;               /* [BT, 4D] before GELU */
    float *fcg;               /* [BT, 4D] after GELU */
} zm_layer_acts;

struct zm_acts {
    zm_spec s;
    int B, threads;
    /* Activation checkpointing: every layer keeps its input x, and the layers share one set of
     * the other activations, which zm_block_backward recomputes from x (a second forward of the
     * block, without its output projection) unless they already hold that layer's. */
    int checkpoint;
    int inner_layer;          /* the layer whose activations the shared set holds; -1 none */
    zm_layer_acts *layer;     /* [L] */
    float *xfinal;            /* [BT, D] residual output of the last layer */
    float *lnf, *lnf_mean, *lnf_rstd; /* [BT, D], [BT], [BT] */
    float *probs;             /* [BT, V] softmax, then d logits */
    float *losses;            /* [BT] */
    /* backward scratch */
    float *dres;              /* [BT, D] gradient of the residual stream */
    float *dtmp;              /* [BT, D] */
    float *dqkv;              /* [BT, 3D] */
    float *dfc;               /* [BT, 4D] */
    float *block;             /* the one allocation */
    size_t bytes;
};

/* Floats of zm_acts_create's one allocation (the views it hands out below); 0 when the count
 * does not fit a size_t's bytes. */
static size_t acts_floats(const zm_spec *s, int B, int checkpoint)
{
    /* per layer: its input x, and the rest (one shared set when checkpointing): ln1, atty, xmid,
     * ln2; the four statistics; qkv; att; fch, fcg */
    double BT = (double)B * s->T, D = s->D, T = s->T;
    double inner = BT * D * 4 + BT * 4 + BT * 3 * D + (double)B * s->H * T * T + BT * 8 * D;
    double sets = s->L == 0 ? 0 : checkpoint ? 1 : s->L;
    double total = BT * D * s->L + inner * sets + BT * D * 2 + BT * 3 + BT * s->V + BT * D * 2 +
                   BT * 3 * D + BT * 4 * D;
    /* doubles hold these integers exactly below 2^53; past 2^52 floats the bytes are far beyond
     * any machine, so larger counts are refused rather than computed exactly */
    return total < 0x1p52 && total * sizeof(float) < (double)SIZE_MAX ? (size_t)total : 0;
}

size_t zm_acts_bytes_for(const zm_spec *s, int B, int checkpoint)
{
    size_t n = B < 1 ? 0 : acts_floats(s, B, checkpoint != 0);
    return n ? n * sizeof(float) : SIZE_MAX;
}

zinc_status zm_acts_create(const zm_spec *s, int B, int threads, int checkpoint, zm_acts **out)
{
    *out = NULL;
    if (B < 1 || threads < 1) return ZINC_ERR_INVALID_ARG;
    zm_acts *a = calloc(1, sizeof *a);
    if (!a) return ZINC_ERR_NOMEM;
    a->s = *s;
    a->B = B;
    a->threads = threads;
    a->checkpoint = checkpoint != 0;
    a->inner_layer = -1;
    size_t BT = (size_t)B * s->T, D = (size_t)s->D, H = (size_t)s->H, T = (size_t)s->T;
    size_t total = acts_floats(s, B, a->checkpoint);
    if (total == 0) {
        zm_acts_destroy(a);
        return ZINC_ERR_NOMEM;
    }
    a->layer = calloc((size_t)s->L, sizeof *a->layer);
    a->block = malloc(total * sizeof(float));
    if (!a->layer || !a->block) {
        zm_acts_destroy(a);
        return ZINC_ERR_NOMEM;
    }
    a->bytes = total * sizeof(float);
    float *p = a->block;
#define TAKE(n) (p += (n), p - (n))
    for (int l = 0; l < s->L; l++) {
        zm_layer_acts *la = &a->layer[l];
        if (l > 0 && a->checkpoint) {
            *la = a->layer[0];
            la->x = TAKE(BT * D);
            continue;
        }
        la->x = TAKE(BT * D);
        la->ln1 = TAKE(BT * D);
        la->ln1_mean = TAKE(BT);
        la->ln1_rstd = TAKE(BT);
        la->qkv = TAKE(BT * 3 * D);
        la->att = TAKE((size_t)B * H * T * T);
        la->atty = TAKE(BT * D);
        la->xmid = TAKE(BT * D);
        la->ln2 = TAKE(BT * D);
        la->ln2_mean = TAKE(BT);
        la->ln2_rstd = TAKE(BT);
        la->fch = TAKE(BT * 4 * D);
        la->fcg = TAKE(BT * 4 * D);
    }
    a->xfinal = TAKE(BT * D);
    a->lnf = TAKE(BT * D);
    a->lnf_mean = TAKE(BT);
    a->lnf_rstd = TAKE(BT);
    a->losses = TAKE(BT);
    a->probs = TAKE(BT * (size_t)s->V);
    a->dres = TAKE(BT * D);
    a->dtmp = TAKE(BT * D);
    a->dqkv = TAKE(BT * 3 * D);
    a->dfc = TAKE(BT * 4 * D);
#undef TAKE
    if (p != a->block + total) { /* the sum above and the pieces taken disagree */
        zm_acts_destroy(a);
        return ZINC_ERR_INTERNAL;
    }
    /* Attention rows beyond t are never written; zero them once so the buffer is defined. */
    memset(a->block, 0, a->bytes);
    *out = a;
    return ZINC_OK;
}

void zm_acts_destroy(zm_acts *a)
{
    if (!a) return;
    free(a->block);
    free(a->layer);
    free(a);
}

size_t zm_acts_bytes(const zm_acts *a) { return a->bytes; }

/* ---- threading ------------------------------------------------------------------------------ */

typedef void (*range_fn)(void *ctx, int lo, int hi);

typedef struct {
    range_fn fn;
    void *ctx;
    int lo, hi;
} range_job;

static void *range_main(void *p)
{
    range_job *j = p;
    j->fn(j->ctx, j->lo, j->hi);
    return NULL;
}

/* Runs fn over [0, n) split into contiguous ranges, one per thread. Threads are started per
 * call: the model's pieces are coarse (a whole layer's rows), so the start cost is small, and no
 * pool has to outlive the model. If a thread cannot be started its range runs here. */
static void par_for(int threads, int n, range_fn fn, void *ctx)
{
    if (threads > n) threads = n;
    if (threads <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    pthread_t th[64];
    range_job job[64];
    int started[64] = {0};
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) {
        job[i] = (range_job){fn, ctx, (int)((int64_t)n * i / threads),
                             (int)((int64_t)n * (i + 1) / threads)};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, range_main, &job[i]) == 0;
    }
    fn(ctx, job[0].lo, job[0].hi);
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(ctx, job[i].lo, job[i].hi);
    }
}

/* ---- kernels -------------------------------------------------------------------------------- */

/* Dot product with eight partial sums: vectorisable without reassociation flags, and still one
 * fixed order of additions. */
static float dot(const float *a, const float *b, int n)
{
    float p[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) p[k] += a[i + k] * b[i + k];
    for (; i < n; i++) p[0] += a[i] * b[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* y += a x, in blocks of eight that -O2's vectoriser takes (elementwise, so the result is the
 * same however it is vectorised). */
static void axpy(float *restrict y, float a, const float *restrict x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) y[i + k] += a * x[i + k];
    for (; i < n; i++) y[i] += a * x[i];
}

/* out[r, o] = b[o] + sum_i in[r, i] w[o, i] */
typedef struct {
    float *out, *din, *dw, *db;
    const float *in, *w, *b, *dout;
    int R, IC, OC;
} mm_ctx;

static void mm_fwd_rows(void *c, int lo, int hi)
{
    mm_ctx *m = c;
    for (int r = lo; r < hi; r++) {
        const float *x = m->in + (size_t)r * m->IC;
        float *y = m->out + (size_t)r * m->OC;
        for (int o = 0; o < m->OC; o++)
            y[o] = (m->b ? m->b[o] : 0.0f) + dot(x, m->w + (size_t)o * m->IC, m->IC);
    }
}

static void mm_bwd_in_rows(void *c, int lo, int hi)
{
    mm_ctx *m = c;
    for (int r = lo; r < hi; r++) {
        const float *dy = m->dout + (size_t)r * m->OC;
        float *dx = m->din + (size_t)r * m->IC;
        for (int o = 0; o < m->OC; o++) axpy(dx, dy[o], m->w + (size_t)o * m->IC, m->IC);
    }
}

static void mm_bwd_w_rows(void *c, int lo, int hi)
{
    mm_ctx *m = c;
    for (int o = lo; o < hi; o++) {
        float *dw = m->dw + (size_t)o * m->IC;
        float db = 0.0f;
        for (int r = 0; r < m->R; r++) {
            float dy = m->dout[(size_t)r * m->OC + o];
            axpy(dw, dy, m->in + (size_t)r * m->IC, m->IC);
            db += dy;
        }
        if (m->db) m->db[o] += db;
    }
}

static void matmul_fwd(int th, float *out, const float *in, const float *w, const float *b,
                       int R, int IC, int OC)
{
    mm_ctx m = {.out = out, .in = in, .w = w, .b = b, .R = R, .IC = IC, .OC = OC};
    par_for(th, R, mm_fwd_rows, &m);
}

/* Adds d in (when din != NULL), d w and d b. */
static void matmul_bwd(int th, float *din, float *dw, float *db, const float *dout,
                       const float *in, const float *w, int R, int IC, int OC)
{
    mm_ctx m = {.din = din, .dw = dw, .db = db, .dout = dout, .in = in, .w = w,
                .R = R, .IC = IC, .OC = OC};
    if (din) par_for(th, R, mm_bwd_in_rows, &m);
    par_for(th, OC, mm_bwd_w_rows, &m);
}

#define LN_EPS 1e-5f

typedef struct {
    float *out, *mean, *rstd, *dx;
    const float *x, *w, *b, *dout;
    int C;
} ln_ctx;

static void ln_fwd_rows(void *c, int lo, int hi)
{
    ln_ctx *l = c;
    int C = l->C;
    for (int r = lo; r < hi; r++) {
        const float *x = l->x + (size_t)r * C;
        float m = 0.0f, v = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= (float)C;
        float rs = 1.0f / sqrtf(v + LN_EPS);
        float *y = l->out + (size_t)r * C;
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * rs * l->w[i] + l->b[i];
        l->mean[r] = m;
        l->rstd[r] = rs;
    }
}

static void ln_bwd_rows(void *c, int lo, int hi)
{
    ln_ctx *l = c;
    int C = l->C;
    for (int r = lo; r < hi; r++) {
        const float *x = l->x + (size_t)r * C, *dy = l->dout + (size_t)r * C;
        float m = l->mean[r], rs = l->rstd[r], s1 = 0.0f, s2 = 0.0f;
        for (int i = 0; i < C; i++) {
            float dn = dy[i] * l->w[i];
            s1 += dn;
            s2 += dn * (x[i] - m) * rs;
        }
        s1 /= (float)C;
        s2 /= (float)C;
        float *dx = l->dx + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            float xh = (x[i] - m) * rs;
            dx[i] += rs * (dy[i] * l->w[i] - s1 - xh * s2);
        }
    }
}

static void layernorm_fwd(int th, float *out, float *mean, float *rstd, const float *x,
                          const float *w, const float *b, int R, int C)
{
    ln_ctx l = {.out = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .C = C};
    par_for(th, R, ln_fwd_rows, &l);
}

/* Adds into dx, dw, db. */
static void layernorm_bwd(int th, float *dx, float *dw, float *db, const float *dout,
                          const float *x, const float *mean, const float *rstd, const float *w,
                          int R, int C)
{
    ln_ctx l = {.dx = dx, .dout = dout, .x = x, .mean = (float *)mean, .rstd = (float *)rstd,
                .w = w, .C = C};
    par_for(th, R, ln_bwd_rows, &l);
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * C, *dy = dout + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            dw[i] += dy[i] * (xr[i] - mean[r]) * rstd[r];
            db[i] += dy[i];
        }
    }
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define GELU_K 0.7978845608028654f

typedef struct {
    float *a;
    const float *b;
} ew_ctx;

static void gelu_fwd_range(void *c, int lo, int hi)
{
    ew_ctx *e = c;
    for (int i = lo; i < hi; i++) {
        float x = e->b[i];
        e->a[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

/* a = d out (in), becomes d in; b = the GELU input. */
static void gelu_bwd_range(void *c, int lo, int hi)
{
    ew_ctx *e = c;
    for (int i = lo; i < hi; i++) {
        float x = e->b[i], u = GELU_K * (x + 0.044715f * x * x * x), t = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        e->a[i] *= 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
}

typedef struct {
    const zm_acts *a;
    zm_layer_acts *la;
    const float *datty;
    float *dqkv;
} att_ctx;

/* One job = one (sequence b, head h) pair: its q/k/v columns and its attention matrix. */
static void att_fwd_pairs(void *c, int lo, int hi)
{
    att_ctx *x = c;
    int T = x->a->s.T, D = x->a->s.D, H = x->a->s.H, hs = D / H;
    float scale = 1.0f / sqrtf((float)hs);
    for (int bh = lo; bh < hi; bh++) {
        int b = bh / H, h = bh % H;
        const float *qkv = x->la->qkv + (size_t)b * T * 3 * D;
        float *att = x->la->att + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) {
            const float *q = qkv + (size_t)t * 3 * D + h * hs;
            float *p = att + (size_t)t * T, mx = -INFINITY, sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                p[t2] = scale * dot(q, qkv + (size_t)t2 * 3 * D + D + h * hs, hs);
                if (p[t2] > mx) mx = p[t2];
            }
            for (int t2 = 0; t2 <= t; t2++) {
                p[t2] = expf(p[t2] - mx);
                sum += p[t2];
            }
            float inv = 1.0f / sum;
            float *y = x->la->atty + ((size_t)b * T + t) * D + h * hs;
            memset(y, 0, (size_t)hs * sizeof *y);
            for (int t2 = 0; t2 <= t; t2++) {
                p[t2] *= inv;
                axpy(y, p[t2], qkv + (size_t)t2 * 3 * D + 2 * D + h * hs, hs);
            }
        }
    }
}

static void att_bwd_pairs(void *c, int lo, int hi)
{
    att_ctx *x = c;
    int T = x->a->s.T, D = x->a->s.D, H = x->a->s.H, hs = D / H;
    float scale = 1.0f / sqrtf((float)hs);
    float dp[4096]; /* T <= 4096 (zm_spec_parse) */
    for (int bh = lo; bh < hi; bh++) {
        int b = bh / H, h = bh % H;
        const float *qkv = x->la->qkv + (size_t)b * T * 3 * D;
        float *dqkv = x->dqkv + (size_t)b * T * 3 * D;
        const float *att = x->la->att + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) {
            const float *p = att + (size_t)t * T;
            const float *dy = x->datty + ((size_t)b * T + t) * D + h * hs;
            float s = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = qkv + (size_t)t2 * 3 * D + 2 * D + h * hs;
                dp[t2] = dot(dy, v, hs);
                axpy(dqkv + (size_t)t2 * 3 * D + 2 * D + h * hs, p[t2], dy, hs);
                s += p[t2] * dp[t2];
            }
            const float *q = qkv + (size_t)t * 3 * D + h * hs;
            float *dq = dqkv + (size_t)t * 3 * D + h * hs;
            for (int t2 = 0; t2 <= t; t2++) {
                float ds = p[t2] * (dp[t2] - s) * scale;
                axpy(dq, ds, qkv + (size_t)t2 * 3 * D + D + h * hs, hs);
                axpy(dqkv + (size_t)t2 * 3 * D + D + h * hs, ds, q, hs);
            }
        }
    }
}

/* Plain-buffer entries to att_fwd_pairs / att_bwd_pairs: a zm_acts holding only what they read
 * (s, B) and a layer whose qkv, att and atty are the caller's (read only where const). */
void zm_attention_forward(const zm_spec *s, int B, const float *qkv, float *att, float *y)
{
    zm_acts a = {.s = *s, .B = B, .threads = 1};
    zm_layer_acts la = {.qkv = (float *)qkv, .att = att, .atty = y};
    att_ctx ac = {.a = &a, .la = &la};
    att_fwd_pairs(&ac, 0, B * s->H);
}

void zm_attention_backward(const zm_spec *s, int B, const float *qkv, const float *att,
                           const float *dy, float *dqkv)
{
    zm_acts a = {.s = *s, .B = B, .threads = 1};
    zm_layer_acts la = {.qkv = (float *)qkv, .att = (float *)att};
    att_ctx ac = {.a = &a, .la = &la, .datty = dy, .dqkv = dqkv};
    att_bwd_pairs(&ac, 0, B * s->H);
}

/* ---- the model pieces ----------------------------------------------------------------------- */

void zm_embed_forward(zm_acts *a, const zm_embed *w, const uint16_t *tokens)
{
    int T = a->s.T, D = a->s.D, BT = a->B * T;
    float *x = a->s.L ? a->layer[0].x : a->xfinal;
    for (int r = 0; r < BT; r++) {
        const float *te = w->wte + (size_t)tokens[r] * D, *pe = w->wpe + (size_t)(r % T) * D;
        for (int i = 0; i < D; i++) x[(size_t)r * D + i] = te[i] + pe[i];
    }
}

/* Block l's forward from its input layer[l].x; xout NULL stops before the output projection
 * (the recomputation for backward, which needs every activation but not the output). */
static void block_fwd(zm_acts *a, int l, const zm_block *w, float *xout)
{
    zm_layer_acts *la = &a->layer[l];
    int th = a->threads, D = a->s.D, BT = a->B * a->s.T;
    a->inner_layer = l;
    layernorm_fwd(th, la->ln1, la->ln1_mean, la->ln1_rstd, la->x, w->ln1_w, w->ln1_b, BT, D);
    matmul_fwd(th, la->qkv, la->ln1, w->qkv_w, w->qkv_b, BT, D, 3 * D);
    att_ctx ac = {.a = a, .la = la};
    par_for(th, a->B * a->s.H, att_fwd_pairs, &ac);
    matmul_fwd(th, la->xmid, la->atty, w->attn_w, w->attn_b, BT, D, D);
    for (size_t i = 0; i < (size_t)BT * D; i++) la->xmid[i] += la->x[i];
    layernorm_fwd(th, la->ln2, la->ln2_mean, la->ln2_rstd, la->xmid, w->ln2_w, w->ln2_b, BT, D);
    matmul_fwd(th, la->fch, la->ln2, w->fc_w, w->fc_b, BT, D, 4 * D);
    ew_ctx ec = {la->fcg, la->fch};
    par_for(th, BT * 4 * D, gelu_fwd_range, &ec);
    if (!xout) return;
    matmul_fwd(th, xout, la->fcg, w->fcp_w, w->fcp_b, BT, 4 * D, D);
    for (size_t i = 0; i < (size_t)BT * D; i++) xout[i] += la->xmid[i];
}

void zm_block_forward(zm_acts *a, int l, const zm_block *w)
{
    block_fwd(a, l, w, l + 1 < a->s.L ? a->layer[l + 1].x : a->xfinal);
}

typedef struct {
    zm_acts *a;
    const float *wte;
    const uint16_t *targets;
    float dscale;
    float *dwte;
} head_ctx;

static void head_logits_rows(void *c, int lo, int hi)
{
    head_ctx *h = c;
    int D = h->a->s.D, V = h->a->s.V;
    for (int r = lo; r < hi; r++) {
        const float *x = h->a->lnf + (size_t)r * D;
        float *p = h->a->probs + (size_t)r * V, mx = -INFINITY, sum = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = dot(x, h->wte + (size_t)v * D, D);
            if (p[v] > mx) mx = p[v];
        }
        int tg = h->targets[r];
        float zt = p[tg] - mx;
        for (int v = 0; v < V; v++) {
            p[v] = expf(p[v] - mx);
            sum += p[v];
        }
        /* log-softmax of the target from its shifted logit, not log(p): stays finite when p
         * underflows. */
        h->a->losses[r] = logf(sum) - zt;
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) p[v] *= inv;
    }
}

/* d logits = (p - onehot) * dscale, in place; then d lnf rows into dtmp. */
static void head_bwd_rows(void *c, int lo, int hi)
{
    head_ctx *h = c;
    int D = h->a->s.D, V = h->a->s.V;
    for (int r = lo; r < hi; r++) {
        float *p = h->a->probs + (size_t)r * V, *dx = h->a->dtmp + (size_t)r * D;
        p[h->targets[r]] -= 1.0f;
        memset(dx, 0, (size_t)D * sizeof *dx);
        for (int v = 0; v < V; v++) {
            p[v] *= h->dscale;
            axpy(dx, p[v], h->wte + (size_t)v * D, D);
        }
    }
}

static void head_bwd_wte_rows(void *c, int lo, int hi)
{
    head_ctx *h = c;
    int D = h->a->s.D, V = h->a->s.V, BT = h->a->B * h->a->s.T;
    for (int v = lo; v < hi; v++)
        for (int r = 0; r < BT; r++)
            axpy(h->dwte + (size_t)v * D, h->a->probs[(size_t)r * V + v], h->a->lnf + (size_t)r * D,
                 D);
}

double zm_head(zm_acts *a, const zm_embed *w, const uint16_t *targets, float dloss, zm_embed *g)
{
    int th = a->threads, D = a->s.D, BT = a->B * a->s.T;
    layernorm_fwd(th, a->lnf, a->lnf_mean, a->lnf_rstd, a->xfinal, w->lnf_w, w->lnf_b, BT, D);
    head_ctx h = {.a = a, .wte = w->wte, .targets = targets, .dscale = dloss / (float)BT};
    par_for(th, BT, head_logits_rows, &h);
    double loss = 0.0;
    for (int r = 0; r < BT; r++) loss += a->losses[r];
    loss /= BT;
    if (!g) return loss;
    par_for(th, BT, head_bwd_rows, &h);
    h.dwte = g->wte;
    par_for(th, a->s.V, head_bwd_wte_rows, &h);
    memset(a->dres, 0, (size_t)BT * D * sizeof(float));
    layernorm_bwd(th, a->dres, g->lnf_w, g->lnf_b, a->dtmp, a->xfinal, a->lnf_mean, a->lnf_rstd,
                  w->lnf_w, BT, D);
    return loss;
}

void zm_block_backward(zm_acts *a, int l, const zm_block *w, zm_block *g)
{
    zm_layer_acts *la = &a->layer[l];
    int th = a->threads, D = a->s.D, BT = a->B * a->s.T;
    size_t nD = (size_t)BT * D;
    /* Checkpointing: the same operations on the same input give the forward's values bit for
     * bit; the last layer's are still there from the forward. */
    if (a->checkpoint && a->inner_layer != l) block_fwd(a, l, w, NULL);
    /* x_out = xmid + fcp(gelu(fc(ln2(xmid)))): dres is d x_out and stays as the residual part */
    memset(a->dfc, 0, nD * 4 * sizeof(float));
    matmul_bwd(th, a->dfc, g->fcp_w, g->fcp_b, a->dres, la->fcg, w->fcp_w, BT, 4 * D, D);
    ew_ctx ec = {a->dfc, la->fch};
    par_for(th, BT * 4 * D, gelu_bwd_range, &ec);
    memset(a->dtmp, 0, nD * sizeof(float));
    matmul_bwd(th, a->dtmp, g->fc_w, g->fc_b, a->dfc, la->ln2, w->fc_w, BT, D, 4 * D);
    layernorm_bwd(th, a->dres, g->ln2_w, g->ln2_b, a->dtmp, la->xmid, la->ln2_mean, la->ln2_rstd,
                  w->ln2_w, BT, D);
    /* xmid = x + proj(attention(qkv(ln1(x)))): dres is now d xmid */
    memset(a->dtmp, 0, nD * sizeof(float));
    matmul_bwd(th, a->dtmp, g->attn_w, g->attn_b, a->dres, la->atty, w->attn_w, BT, D, D);
    memset(a->dqkv, 0, nD * 3 * sizeof(float));
    att_ctx ac = {.a = a, .la = la, .datty = a->dtmp, .dqkv = a->dqkv};
    par_for(th, a->B * a->s.H, att_bwd_pairs, &ac);
    memset(a->dtmp, 0, nD * sizeof(float));
    matmul_bwd(th, a->dtmp, g->qkv_w, g->qkv_b, a->dqkv, la->ln1, w->qkv_w, BT, D, 3 * D);
    layernorm_bwd(th, a->dres, g->ln1_w, g->ln1_b, a->dtmp, la->x, la->ln1_mean, la->ln1_rstd,
                  w->ln1_w, BT, D);
}

void zm_embed_backward(zm_acts *a, const uint16_t *tokens, zm_embed *g)
{
    int T = a->s.T, D = a->s.D, BT = a->B * T;
    for (int r = 0; r < BT; r++) {
        const float *d = a->dres + (size_t)r * D;
        axpy(g->wte + (size_t)tokens[r] * D, 1.0f, d, D);
        axpy(g->wpe + (size_t)(r % T) * D, 1.0f, d, D);
    }
}

double zm_forward_backward(zm_acts *a, float *const *params, float *const *grads,
                           const uint16_t *tokens, const uint16_t *targets, float dloss)
{
    zm_embed ew, eg;
    zm_block bw, bg;
    zm_embed_views(&a->s, params[0], &ew);
    zm_embed_forward(a, &ew, tokens);
    for (int l = 0; l < a->s.L; l++) {
        zm_block_views(&a->s, params[l + 1], &bw);
        zm_block_forward(a, l, &bw);
    }
    if (!grads) return zm_head(a, &ew, targets, dloss, NULL);
    zm_embed_views(&a->s, grads[0], &eg);
    double loss = zm_head(a, &ew, targets, dloss, &eg);
    for (int l = a->s.L - 1; l >= 0; l--) {
        zm_block_views(&a->s, params[l + 1], &bw);
        zm_block_views(&a->s, grads[l + 1], &bg);
        zm_block_backward(a, l, &bw, &bg);
    }
    zm_embed_backward(a, tokens, &eg);
    return loss;
}
