/*
 * cmd_plot.c — `zinc plot metrics.jsonl -o loss.svg`: the loss curve of a `zinc train --metrics`
 * file as a self-contained SVG (no scripts, no external fonts), with the entropy floor of the
 * synthetic data drawn as a dashed line when the metrics carry it.
 *
 * Input: JSON lines; every object with numeric "step" and "loss" is a point, "entropy_floor"
 * (if any) the floor. Lines that are not such objects are skipped with a count on stderr. When
 * a resumed run appended steps already present, the later value of a step wins.
 */
#include <errno.h>
#include <float.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "tools/commands.h"

#define CMD "plot"

typedef struct {
    double step, loss;
    size_t line;     /* order in the file: ties on step keep it */
} pt;

static void usage(FILE *f)
{
    fprintf(f, "usage: zinc plot METRICS.jsonl [-o OUT.svg] [--title TEXT] [--log]\n"
               "\n"
               "Draws the loss curve of a `zinc train --metrics` file as an SVG, with the entropy\n"
               "floor (the best possible loss) of synthetic data as a dashed line.\n"
               "\n"
               "  -o, --output FILE  SVG to write (default: METRICS with .svg for its extension)\n"
               "  --title TEXT       title (default: the metrics file name)\n"
               "  --log              logarithmic loss axis\n");
}

static int cmp_pt(const void *a, const void *b)
{
    const pt *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* 1, 2 or 5 times a power of ten, near range/target, given half the range (a range between
 * two finite doubles can overflow, -1e308..1e308; its half cannot). */
static double nice_step(double half, int target)
{
    double raw = half / target * 2, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* An axis from lo to hi, both finite, lo < hi. Positions are computed from halves, so that no
 * difference of two finite values overflows (1e308 - -1e308 is inf, and inf/inf wrote NaN
 * coordinates into the SVG). */
typedef struct {
    double lo, hi;
} axis;

/* [v, v] widened to a range that exists: +1 as before, or a relative step where +1 is lost in
 * rounding (1e20 + 1 == 1e20 made the range 0). */
static axis axis_of(double lo, double hi)
{
    if (hi <= lo) {
        double w = fmax(1.0, fabs(lo) * 0x1p-20);
        hi = lo + w;
        if (!isfinite(hi)) hi = lo, lo = hi - w;
    }
    return (axis){lo, hi};
}

static double axis_half(axis a) { return a.hi / 2 - a.lo / 2; }

/* Where v lies on a, 0 at lo and 1 at hi. */
static double axis_frac(axis a, double v) { return (v / 2 - a.lo / 2) / axis_half(a); }

/* a with 5% more on each side, at most to the largest double. */
static axis axis_padded(axis a)
{
    double pad = 0.1 * axis_half(a), lo = a.lo - pad, hi = a.hi + pad;
    return (axis){isfinite(lo) ? lo : -DBL_MAX, isfinite(hi) ? hi : DBL_MAX};
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

int cmd_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *title = NULL;
    int logy = 0;
    if (zarg_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (zarg_value(CMD, argv[i], i + 1 < argc ? argv[i + 1] : NULL)) return 2;
            out = argv[++i];
        } else if (!strcmp(argv[i], "--title")) {
            if (zarg_value(CMD, argv[i], i + 1 < argc ? argv[i + 1] : NULL)) return 2;
            title = argv[++i];
        } else if (!strcmp(argv[i], "--log")) {
            logy = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return zarg_usage_error(CMD, "unknown option '%s'", argv[i]);
        } else if (in) {
            return zarg_usage_error(CMD, "one metrics file, got '%s' and '%s'", in, argv[i]);
        } else {
            in = argv[i];
        }
    }
    if (!in) return zarg_usage_error(CMD, "which metrics file? (zinc train --metrics FILE)");
    char outbuf[PATH_MAX + 8];
    if (!out) {
        /* cut short, the name would be another file's ("metrics_lo" for a long path) */
        if (strlen(in) >= PATH_MAX)
            return zarg_usage_error(CMD, "a metrics path of %zu bytes; give -o FILE.svg",
                                    strlen(in));
        snprintf(outbuf, sizeof outbuf, "%s", in);
        char *dot = strrchr(outbuf, '.'), *slash = strrchr(outbuf, '/');
        if (dot && (!slash || dot > slash)) *dot = 0;
        strcat(outbuf, ".svg");
        out = outbuf;
    }
    if (zarg_same_file(in, out))
        return zarg_usage_error(CMD, "the output '%s' is the metrics file itself; give -o FILE.svg",
                                out);
    int rc = zarg_output_file_ok(CMD, "the output", out);
    if (rc) return rc;
    FILE *f = zfile_fopen_regular(in);
    if (!f) {
        fprintf(stderr, "zinc plot: cannot read '%s': %s\n", in, zfile_strerror(errno));
        return 2;
    }
    size_t n = 0, cap = 256;
    int skipped = 0, nonpos = 0, nonfinite = 0; /* lines skipped; points left out */
    pt *p = malloc(cap * sizeof *p);
    double floor_v = NAN;
    char *line = NULL;
    size_t lcap = 0;
    while (p && getline(&line, &lcap, f) > 0) {
        json_object *o = json_tokener_parse(line), *js, *jl, *jf;
        if (!o || !json_object_is_type(o, json_type_object) ||
            !json_object_object_get_ex(o, "step", &js) ||
            !json_object_object_get_ex(o, "loss", &jl) ||
            !(json_object_is_type(js, json_type_int) || json_object_is_type(js, json_type_double)) ||
            !(json_object_is_type(jl, json_type_int) || json_object_is_type(jl, json_type_double))) {
            /* zinc train --gpu-timing's closing line is expected there, not a damaged one */
            if (line[0] != '\n' && !json_object_object_get_ex(o, "gpu_timing", NULL)) skipped++;
            json_object_put(o);
            continue;
        }
        if (json_object_object_get_ex(o, "entropy_floor", &jf) &&
            (json_object_is_type(jf, json_type_double) || json_object_is_type(jf, json_type_int)))
            floor_v = json_object_get_double(jf);
        if (n == cap) {
            pt *q = realloc(p, 2 * cap * sizeof *p);
            if (!q) break;
            p = q;
            cap *= 2;
        }
        p[n].step = json_object_get_double(js);
        p[n].loss = json_object_get_double(jl);
        p[n].line = n;
        if (!isfinite(p[n].loss) || !isfinite(p[n].step))
            nonfinite++;
        else if (logy && p[n].loss <= 0)
            nonpos++;
        else
            n++;
        json_object_put(o);
    }
    free(line);
    fclose(f);
    if (!p) {
        fprintf(stderr, "zinc plot: out of memory\n");
        return 1;
    }
    if (skipped) fprintf(stderr, "zinc plot: skipped %d lines without numeric step and loss\n", skipped);
    /* said, not dropped silently: a curve missing its points looks like a whole one */
    if (nonfinite)
        fprintf(stderr, "zinc plot: left out %d point%s whose step or loss is not a finite number\n",
                nonfinite, nonfinite == 1 ? "" : "s");
    if (nonpos && n == 0) {
        free(p);
        return zarg_usage_error(CMD, "every loss in '%s' is <= 0 (%d point%s), which --log "
                                "cannot draw; plot without --log", in, nonpos,
                                nonpos == 1 ? "" : "s");
    }
    if (nonpos)
        fprintf(stderr, "zinc plot: left out %d point%s with a loss <= 0, which --log cannot draw\n",
                nonpos, nonpos == 1 ? "" : "s");
    if (n == 0) {
        free(p);
        fprintf(stderr, "zinc plot: '%s' holds no {\"step\":..,\"loss\":..} lines\n", in);
        return 2;
    }
    /* sort by step (file order on ties), then the last value of a repeated step wins (a resumed run re-logs) */
    qsort(p, n, sizeof *p, cmp_pt);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && p[m - 1].step == p[i].step) m--;
        p[m++] = p[i];
    }
    n = m;

    double x0 = p[0].step, x1 = p[n - 1].step, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (p[i].loss < y0) y0 = p[i].loss;
        if (p[i].loss > y1) y1 = p[i].loss;
    }
    if (isfinite(floor_v) && (!logy || floor_v > 0)) {
        if (floor_v < y0) y0 = floor_v;
        if (floor_v > y1) y1 = floor_v;
    }
    axis ax = axis_of(x0, x1);
    double (*tr)(double) = logy ? log10 : NULL;
    axis ay = axis_padded(axis_of(tr ? tr(y0) : y0, tr ? tr(y1) : y1));
    double ly0 = ay.lo, ly1 = ay.hi;
    if (!logy && ly0 < 0 && y0 >= 0) ay.lo = ly0 = 0;

    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50;
    const double pw = W - L - R, ph = H - T - Bm;
#define SX(x) (L + axis_frac(ax, x) * pw)
#define SY(y) (T + ph - axis_frac(ay, tr ? tr(y) : (y)) * ph)
    /* written beside the output and renamed: a failed write leaves the old file, not half one */
    char tmp[1100];
    FILE *o = zfile_create_beside(out, tmp, sizeof tmp);
    if (!o) {
        fprintf(stderr, "zinc plot: cannot write beside '%s': %s\n", out, strerror(errno));
        free(p);
        return 2;
    }
    fprintf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(o, "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    xml_text(o, title ? title : in);
    fprintf(o, "</text>\n");
    /* grid and ticks */
    /* Ticks counted, not summed: where a step is below the values' spacing (x += xs left x as
     * it was near 1e20), the loop would not end; 64 is past any nice_step's count. A tick
     * past the largest double is inf, and so is the end's slack there: both stop it. */
    double xs = nice_step(axis_half(ax), 8), xf = ceil(ax.lo / xs);
    for (int k = 0; k < 64; k++) {
        double x = (xf + k) * xs;
        if (!isfinite(x) || x > ax.hi + 1e-9 * xs) break;
        fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n",
                SX(x), T, SX(x), T + ph);
        fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", SX(x),
                T + ph + 16, x);
    }
    if (logy) {
        for (int e = (int)floor(ly0); e <= (int)ceil(ly1); e++)
            for (int k = 1; k < 10; k++) {
                double v = k * pow(10.0, e), lv = log10(v);
                if (lv < ly0 || lv > ly1) continue;
                fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#e6e6e6\"/>\n", L, SY(v), L + pw, SY(v));
                if (k == 1 || k == 2 || k == 5)
                    fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                            L - 6, SY(v) + 4, v);
            }
    } else {
        double ys = nice_step(axis_half(ay), 6), yf = ceil(ly0 / ys);
        for (int k = 0; k < 64; k++) {
            double y = (yf + k) * ys;
            if (!isfinite(y) || y > ly1 + 1e-9 * ys) break;
            fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n",
                    L, SY(y), L + pw, SY(y));
            fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6,
                    SY(y) + 4, fabs(y) < 1e-12 * ys ? 0.0 : y);
        }
    }
    fprintf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#444\"/>\n", L, T, pw, ph);
    fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">optimizer step</text>\n",
            L + pw / 2, H - 12);
    fprintf(o, "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">"
               "loss (nats/token)</text>\n", T + ph / 2, T + ph / 2);
    if (isfinite(floor_v) && (!logy || floor_v > 0)) {
        fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" "
                   "stroke-dasharray=\"6 4\"/>\n", L, SY(floor_v), L + pw, SY(floor_v));
        fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#c0392b\">entropy "
                   "floor %.4f</text>\n", L + pw - 6, SY(floor_v) - 6, floor_v);
    }
    fprintf(o, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.8\" points=\"");
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%.1f,%.1f", i ? " " : "", SX(p[i].step), SY(p[i].loss));
    fprintf(o, "\"/>\n");
    if (n == 1)
        fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f77b4\"/>\n", SX(p[0].step),
                SY(p[0].loss));
    fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">loss: %g at step "
               "%g</text>\n", L + pw - 6, T + 16, p[n - 1].loss, p[n - 1].step);
    fprintf(o, "</svg>\n");
#undef SX
#undef SY
    int bad = ferror(o);
    if (fclose(o) != 0 || bad || rename(tmp, out) != 0) {
        fprintf(stderr, "zinc plot: writing '%s' failed: %s\n", out, strerror(errno));
        remove(tmp);
        free(p);
        return 1;
    }
    printf("zinc plot: %zu points -> %s\n", n, out);
    free(p);
    return 0;
}
