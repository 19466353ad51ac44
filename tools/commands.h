/*
 * commands.h — the subcommands of the `zinc` CLI. Each lives in tools/cmd_<name>.c and is
 * listed in the table of tools/zinc.c (`zinc train` has its pieces in tools/train_*.c, listed in
 * tools/train.h). A command returns the process exit code:
 * 0 success, 1 runtime failure, 2 bad usage or rejected input.
 */
#ifndef ZINC_TOOLS_COMMANDS_H
#define ZINC_TOOLS_COMMANDS_H

#include <stdio.h>

#include "zinc.h"

int cmd_estimate(int argc, char **argv);   /* zinc estimate   — memory plan per rank         */
int cmd_config(int argc, char **argv);     /* zinc config check — validate a DeepSpeed config */
int cmd_bench(int argc, char **argv);      /* zinc bench adam|...                            */
int cmd_train(int argc, char **argv);      /* zinc train      — the built-in model            */
int cmd_ckpt(int argc, char **argv);       /* zinc ckpt verify|inspect|export                 */
int cmd_plot(int argc, char **argv);       /* zinc plot       — loss curve as SVG             */
int cmd_plan(int argc, char **argv);       /* zinc plan       — predicted step time, scaling  */

/* Shared argument helpers (tools/args.c). Numbers are plain decimal and nothing else:
 * [+-] digits [. digits] [e|E [+-] digits], at least one digit before or after the point ("3",
 * "-2.5", ".5", "7e9", "1.5E-3"); no surrounding spaces, no hex, no inf or nan, finite in a
 * double (one below its range reads as the nearest double, 0 for "1e-400"; -0 reads as 0).
 * zarg_int64 takes a whole number, exact to 2^63 when written in digits, or such a float that is
 * integral ("7.5e9", up to 9e18); zarg_double any such float. Both return 0, or -1 leaving *out
 * alone; zarg_int64 returns -2 for a whole number past those bounds ("1e30"), which a message
 * calls out of range, not "not a whole number". zarg_usage_error prints "zinc <cmd>: <msg>" to stderr and returns 2. */
int zarg_int64(const char *s, long long *out);
int zarg_double(const char *s, double *out);
int zarg_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when any of argv[1..argc) is --help or -h. Every command asks before it reads an option,
 * so that help is printed (exit 0) whatever else the line holds: `zinc train --steps 0 --help`
 * was refused for its --steps. An option's value that is "-h" counts as the ask for help. */
int zarg_wants_help(int argc, char **argv);
/* The value `v` given to option `opt` (NULL when the line ended): 0 when it is one, else 2
 * after the usage error naming opt. Empty and "--..." are refused ("-o --log" would otherwise
 * write a file named --log); "-1" and "-" are values. Every option with a value goes through
 * it: `if (zarg_value(CMD, a, v)) return 2;`. */
int zarg_value(const char *cmd, const char *opt, const char *v);
/* 1 when a is one of names (NULL-terminated): an option known before its value is checked, so
 * that "--bogus" is an unknown option rather than one that "needs a value". */
int zarg_one_of(const char *a, const char *const *names);
/* "fp16", "bf16" or "fp32" into *out; -1 for anything else. */
int zarg_dtype(const char *s, zinc_dtype *out);
/* Output-over-input guards: 1 when a and b both exist and are one file (links included). */
int zarg_same_file(const char *a, const char *b);
/* 1 when the directory that would hold `path` (resolved), or for an existing path the directory
 * of the file it resolves to (a symlink into a tag), is a checkpoint's tag: it holds a
 * manifest.json. Nothing but the checkpoint writer puts files there. */
int zarg_in_checkpoint_tag(const char *path);
/* 1 when dir is a checkpoint's tag directory (it holds a manifest.json). */
int zarg_is_checkpoint_tag(const char *dir);
/* 1 when path is (or, not existing yet, would be) a save directory's `latest`: named latest, in
 * a directory with a tag (a subdirectory holding a manifest.json). */
int zarg_is_checkpoint_latest(const char *path);
/* 1 when path is, in a save directory (a directory holding a tag), a name a save there writes
 * (other than latest itself, zarg_is_checkpoint_latest): latest.tmp or .old, a default tag name
 * (stepN, global_stepN), or one with .tmp or .old. */
int zarg_is_save_slot(const char *path);
/* The length of `prefix` and the digits after it when name is prefix, digits, and nothing else
 * or .tmp or .old (a tag and its save's leftovers: "step000100.tmp" -> 10); 0 otherwise. */
size_t zarg_step_tag_len(const char *name, const char *prefix);
/* 0 when dir is an existing directory this user can write in, else 2 after the usage error
 * naming `opt` and the reason. */
int zarg_writable_dir(const char *cmd, const char *opt, const char *dir);
/* path made absolute with symlinks resolved into out (PATH_MAX bytes), also when it does not
 * exist yet: its nearest existing ancestor resolved, the missing names appended. 0 when that
 * cannot be done (an unreadable ancestor, "..", too long). */
int zarg_resolve_loose(const char *path, char *out);
/* An output file that a command writes beside itself and renames over (zinc plot -o, ckpt export
 * --out, plan --calibrate --out), checked before the work: not a directory, in an existing
 * writable directory, not a checkpoint's file (in or under a tag, a save directory's latest).
 * 0, or 2 after the usage error naming opt and the path. */
int zarg_output_file_ok(const char *cmd, const char *opt, const char *out);
/* 1 when path, or any directory above it (resolved as zarg_resolve_loose does), is a checkpoint
 * tag, or zarg_in_checkpoint_tag: a save directory or output there would be a checkpoint's
 * contents. */
int zarg_inside_tag(const char *path);
/* The usage error for an unknown option arg of cmd: with owner (not NULL), the other command it
 * is an option of ("--seed" given to plan is train's: its nearest name in plan, --seq, means
 * something else); otherwise "did you mean X?" when one of names[0..n) (each "--...", at most
 * 64) is within a typo or two (base/suggest.h). Returns 2. */
int zarg_unknown_option(const char *cmd, const char *arg, const char *const *names, int n,
                        const char *owner);
/* 1 when arg is exactly one of zinc train's / zinc plan's options (the owner above). */
int ztrain_has_option(const char *arg);
int zplan_has_option(const char *arg);
/* s as a JSON string, quotes and escapes included (json-c's), written to f: for a path or host
 * name inside JSON a command prints (a '"' in it made the output invalid). */
void zarg_json_string(FILE *f, const char *s);


/* The memory plan per rank that `zinc estimate` prints (tools/cmd_estimate.c), shared with
 * `zinc plan` so that both print the same numbers: device bytes per category (buffers sized by
 * the largest group `group`: `buckets` gradient buckets at stages 2-3, `gathers` gather buffers
 * at stage 3), host bytes with offload, and their sums. */
typedef struct {
    uint64_t dev[ZINC_MEM_COUNT], host[ZINC_MEM_COUNT];  /* bytes per category */
    uint64_t state;       /* device model state: param16 + grad + master + m + v */
    uint64_t total;       /* state + buckets + gather buffers */
    uint64_t host_total;  /* sum of host[] */
} zest_mem;
/* grad_fp32: the gradient sums in fp32 (data_types.grad_accum_dtype "fp32", stages 1-3);
 * reduce_fp32: and reduced in fp32 (communication_data_type "fp32", zcfg_reduces_fp32), through
 * an fp32 scratch of the largest group beside the buckets. */
void zest_memory(long long params, int world, int stage, zinc_dtype dtype, int offload,
                 int offload_param, int grad_fp32, int reduce_fp32, long long group, int buckets,
                 int gathers, zest_mem *m);
/* zinc estimate's defaults, which zinc plan uses too: the largest group is all the parameters
 * up to DeepSpeed's default bucket size (5e8 elements); the engine's default zinc.grad_buckets
 * and zinc.gather_buffers. */
#define ZEST_GROUP_CAP 500000000LL
#define ZEST_BUCKETS 2
#define ZEST_GATHERS 2
static inline long long zest_default_group(long long params)
{
    return params < ZEST_GROUP_CAP ? params : ZEST_GROUP_CAP;
}
/* Its JSON members (no braces): model_state_bytes_per_rank, total_bytes_per_rank,
 * host_bytes_per_rank, bytes_per_rank {...}, host_bytes {...}. */
void zest_memory_json(const zest_mem *m);
/* --nvme: the host categories of `m` (from zest_memory with offload) become the NVMe tier's
 * buffers (engine/offload_nvme.c's layout, DeepSpeed's default buffer_count); returns the
 * scratch file's bytes per rank. */
uint64_t zest_nvme(zest_mem *m, int world, zinc_dtype dtype, int offload_param, long long group);

#endif
