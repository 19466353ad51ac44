/*
 * log.c — see log.h. ZINC_LOG is parsed once, lazily; the parse result is a default level plus up
 * to 16 per-subsystem overrides.
 */
#include "base/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char subsys[32]; int level; } zlog_rule;

static pthread_once_t zlog_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t zlog_mutex = PTHREAD_MUTEX_INITIALIZER;
static int zlog_default = ZLOG_INFO;
static zlog_rule zlog_rules[16];
static int zlog_nrules;

/* A level's index (ZLOG_ERROR..ZLOG_DEBUG), -1 for "off" (nothing, errors neither: a program that
 * reports zinc_last_error itself), -2 for anything else. */
static int zlog_parse_level(const char *s, size_t n)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strlen(names[i]) == n && strncmp(s, names[i], n) == 0) return i;
    if (n == 3 && strncmp(s, "off", 3) == 0) return -1;
    return -2;
}

static void zlog_init(void)
{
    const char *env = getenv("ZINC_LOG");
    if (!env) return;
    const char *p = env;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq) {
            int lvl = zlog_parse_level(eq + 1, len - (size_t)(eq + 1 - p));
            size_t sl = (size_t)(eq - p);
            if (lvl >= -1 && zlog_nrules < 16 && sl < sizeof zlog_rules[0].subsys) {
                memcpy(zlog_rules[zlog_nrules].subsys, p, sl);
                zlog_rules[zlog_nrules].subsys[sl] = 0;
                zlog_rules[zlog_nrules++].level = lvl;
            }
        } else {
            int lvl = zlog_parse_level(p, len);
            if (lvl >= -1) zlog_default = lvl;
        }
        p += len;
        if (*p == ',') p++;
    }
}

int zlog_enabled(zlog_level level, const char *subsys)
{
    pthread_once(&zlog_once, zlog_init);
    int limit = zlog_default;
    for (int i = 0; i < zlog_nrules; i++)
        if (subsys && strcmp(zlog_rules[i].subsys, subsys) == 0) limit = zlog_rules[i].level;
    return (int)level <= limit;
}

void zlog_quiet(const char *subsys)
{
    pthread_once(&zlog_once, zlog_init);
    pthread_mutex_lock(&zlog_mutex);
    int i = 0;
    while (i < zlog_nrules && strcmp(zlog_rules[i].subsys, subsys) != 0) i++;
    if (i < 16 && strlen(subsys) < sizeof zlog_rules[0].subsys) {
        /* errors only, or less where ZINC_LOG asked for less ("off") */
        int now = i < zlog_nrules ? zlog_rules[i].level : zlog_default;
        snprintf(zlog_rules[i].subsys, sizeof zlog_rules[i].subsys, "%s", subsys);
        zlog_rules[i].level = now < ZLOG_ERROR ? now : ZLOG_ERROR;
        if (i == zlog_nrules) zlog_nrules++;
    }
    pthread_mutex_unlock(&zlog_mutex);
}

static _Thread_local int zlog_held;

int zlog_hold(int delta)
{
    zlog_held += delta;
    if (zlog_held < 0) zlog_held = 0;
    return zlog_held;
}

void zlog(zlog_level level, const char *subsys, int rank, const char *fmt, ...)
{
    if ((zlog_held && level > ZLOG_ERROR) || !zlog_enabled(level, subsys)) return;
    static const char *tags[] = {"error: ", "warning: ", "", "debug: "};
    char line[2048];
    int off;
    if (rank >= 0)
        off = snprintf(line, sizeof line, "[zinc r%d %s] %s", rank, subsys, tags[level]);
    else
        off = snprintf(line, sizeof line, "[zinc %s] %s", subsys, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + off, sizeof line - (size_t)off, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&zlog_mutex);
    fprintf(stderr, "%s\n", line);
    pthread_mutex_unlock(&zlog_mutex);
}

zinc_status zerr_fmt(char *buf, size_t n, zinc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return s;
}

static _Thread_local char zerr_tls[1024];

zinc_status zerr_thread(zinc_status s, const char *fmt, ...)
{
    /* Formatted aside first: a caller wrapping the previous message passes zerr_thread_message()
     * as an argument, which must not be the buffer being written. */
    char buf[sizeof zerr_tls];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(zerr_tls, buf, sizeof buf);
    return s;
}

const char *zerr_thread_message(void) { return zerr_tls; }
