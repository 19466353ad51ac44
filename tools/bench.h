/*
 * bench.h — what the `zinc bench` benchmarks share (tools/cmd_bench.c, tools/bench_offload.c):
 * the clock, the median of repeated timings, and the list argument.
 */
#ifndef ZINC_TOOLS_BENCH_H
#define ZINC_TOOLS_BENCH_H

typedef struct {
    double median, min, max;
} timing;

/* Monotonic seconds. */
double zb_now(void);
/* Sorts t[0..n) (n >= 1) and returns its median, minimum and maximum. */
timing zb_summarize(double *t, int n);
/* Parses "1e6,4e6" into v (at most cap values, each in [lo, hi]). Returns the count, or -1. */
int zb_parse_list(const char *s, long long *v, int cap, long long lo, long long hi);

/* zinc bench offload (tools/bench_offload.c). */
int bench_offload(int argc, char **argv);

#endif
