/*
 * test_config_corpus.c — runs every row of tests/config/cases.txt: parses the corpus file with
 * the row's world size and overrides, and checks the outcome (accept / warn / warn1 / reject /
 * reject1 / malformed) and that a diagnostic line names the expected key path (and carries the hint:
 * a did-you-mean suggestion, the offending value, or the line:column of a JSON syntax error).
 * Every file of tests/config/corpus/ must have a row, so a new file cannot go untested.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "testutil.h"

#ifndef ZINC_SOURCE_DIR
#define ZINC_SOURCE_DIR "."
#endif

#define MAX_ROWS 256

static char listed[MAX_ROWS][128];
static int nlisted;

static void print_diag(const zcfg_diag *d)
{
    for (int i = 0; i < d->nwarnings; i++) fprintf(stderr, "    warning: %s\n", d->warnings[i]);
    for (int i = 0; i < d->nerrors; i++) fprintf(stderr, "    error: %s\n", d->errors[i]);
}

/* Whether one of the lines starts with "key: " (any line when key is "-") and contains hint. */
static int has_line(char **lines, int n, const char *key, const char *hint)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s: ", key);
    for (int i = 0; i < n; i++) {
        if (strcmp(key, "-") != 0 && strncmp(lines[i], prefix, strlen(prefix)) != 0) continue;
        if (strcmp(hint, "-") != 0 && !strstr(lines[i], hint)) continue;
        return 1;
    }
    return 0;
}

static int parse_overrides(const char *s, zcfg_overrides *ov)
{
    if (!strcmp(s, "-")) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) return -1;
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(tok, "micro")) ov->micro_batch = atoll(v);
        else if (!strcmp(tok, "ga")) ov->grad_accum = atoll(v);
        else if (!strcmp(tok, "tbs")) ov->train_batch_size = atoll(v);
        else if (!strcmp(tok, "lr")) ov->lr = atof(v);
        else return -1;
    }
    return 0;
}

static void run_row(int lineno, const char *file, int world, const char *outcome, const char *key,
                    const char *hint, const char *ovs)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/config/corpus/%s", ZINC_SOURCE_DIR, file);
    zcfg_overrides ov = {.world_size = world, .lr = -1.0};
    ZT_CHECK(parse_overrides(ovs, &ov) == 0, "cases.txt:%d: bad overrides '%s'", lineno, ovs);
    zcfg c;
    zcfg_diag d = {0};
    zinc_status s = zcfg_parse_file(path, &ov, &c, &d);
    int ok;
    if (!strcmp(outcome, "accept")) {
        ok = s == ZINC_OK && d.nerrors == 0 && d.nwarnings == 0;
    } else if (!strcmp(outcome, "warn")) {
        ok = s == ZINC_OK && d.nerrors == 0 && has_line(d.warnings, d.nwarnings, key, hint);
    } else if (!strcmp(outcome, "warn1")) {
        ok = s == ZINC_OK && d.nerrors == 0 && d.nwarnings == 1 &&
             has_line(d.warnings, d.nwarnings, key, hint);
    } else if (!strcmp(outcome, "reject")) {
        ok = s == ZINC_ERR_CONFIG && has_line(d.errors, d.nerrors, key, hint);
    } else if (!strcmp(outcome, "reject1")) {
        ok = s == ZINC_ERR_CONFIG && d.nerrors == 1 && d.nwarnings == 0 &&
             has_line(d.errors, d.nerrors, key, hint);
    } else if (!strcmp(outcome, "malformed")) {
        char where[300];
        snprintf(where, sizeof where, "%s:%s: malformed JSON", file, hint);
        ok = s == ZINC_ERR_CONFIG && d.nerrors == 1 && strstr(d.errors[0], where) != NULL;
    } else {
        ok = 0;
    }
    ZT_CHECK(ok, "cases.txt:%d: %s (world %d, overrides %s): expected %s naming '%s' with '%s', "
             "got status %d", lineno, file, world, ovs, outcome, key, hint, (int)s);
    if (!ok) print_diag(&d);
    zcfg_diag_free(&d);
}

int main(void)
{
    char table[1024];
    snprintf(table, sizeof table, "%s/tests/config/cases.txt", ZINC_SOURCE_DIR);
    FILE *f = fopen(table, "r");
    ZT_CHECK(f != NULL, "cannot open %s", table);
    if (!f) return zt_finish("test_config_corpus");
    char line[1024];
    int lineno = 0, rows = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        char file[128], outcome[32], key[256], hint[128], ovs[128];
        int world;
        int n = sscanf(line, "%127s %d %31s %255s %127s %127s", file, &world, outcome, key, hint, ovs);
        ZT_CHECK(n == 6, "cases.txt:%d: expected 6 columns, got %d", lineno, n);
        if (n != 6) continue;
        run_row(lineno, file, world, outcome, key, hint, ovs);
        rows++;
        int seen = 0;
        for (int i = 0; i < nlisted; i++) seen |= !strcmp(listed[i], file);
        if (!seen && nlisted < MAX_ROWS) snprintf(listed[nlisted++], sizeof listed[0], "%s", file);
    }
    fclose(f);

    /* Every corpus file has a row. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/config/corpus", ZINC_SOURCE_DIR);
    DIR *dp = opendir(dir);
    ZT_CHECK(dp != NULL, "cannot open %s", dir);
    int nfiles = 0;
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (e->d_name[0] == '.') continue;
        nfiles++;
        int seen = 0;
        for (int i = 0; i < nlisted; i++) seen |= !strcmp(listed[i], e->d_name);
        ZT_CHECK(seen, "corpus/%s has no row in cases.txt", e->d_name);
    }
    if (dp) closedir(dp);
    ZT_CHECK(nfiles >= 30, "the corpus has only %d files", nfiles);
    printf("test_config_corpus: %d rows over %d files\n", rows, nfiles);
    return zt_finish("test_config_corpus");
}
