/* suggest.c — see suggest.h. */
#include "base/suggest.h"

#include <ctype.h>
#include <string.h>

/* Optimal-string-alignment distance, capped: names longer than 127 characters are never close. */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 127 || m > 127) return 1000;
    int d[128][128];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

int zsuggest_distance(const char *name, const char *cand)
{
    int len = (int)strlen(name);
    int limit = len / 4 > 2 ? len / 4 : 2;
    if (limit >= len) limit = len - 1;
    int d = edit_distance(name, cand);
    return d <= limit ? d : -1;
}

const char *zsuggest(const char *name, const char *const *names, int n)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = zsuggest_distance(name, names[i]);
        if (d >= 0 && d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}
