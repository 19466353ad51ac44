/*
 * fixture.h — synthetic model state for the checkpoint tests: a small tensor table laid out by
 * the real partition plan (shard/plan.h) for any world size, with every stored value a pure
 * function of (stream, tensor, element). A reader's output is checked against that function, so
 * the tests never compare the code with itself.
 */
#ifndef ZINC_TESTS_CKPT_FIXTURE_H
#define ZINC_TESTS_CKPT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "shard/plan.h"

#define FX_NTENSORS 7

/* The tensor table (bf16 working dtype) and its plan for `world` ranks; free with zplan_free. */
void fx_tensors(zck_tensor t[FX_NTENSORS]);
void fx_plan(int world, zplan *p);

/* The value stored for element `i` of tensor `t` in stream `s`, as raw bits (fp32 bits for
 * master/m/v, bf16 bits in the low 16 for weights16). `salt` changes every value (a later save). */
uint32_t fx_bits(int s, int t, uint64_t i, uint32_t salt);

/* One rank's state for a plan: shard buffers per stream (plan->shard_numel elements) filled
 * with fx_bits at the rank's pieces, and the pieces pointing into them. */
typedef struct {
    void *buf[ZCK_NSTREAMS];
    zck_piece *pieces;
    int npieces;
} fx_rank;

void fx_rank_make(const zplan *p, int rank, unsigned streams, uint32_t salt, fx_rank *out);
void fx_rank_free(fx_rank *r);

/* A save descriptor for rank `rank` of `p` (tensors must outlive it). */
zck_save_desc fx_desc(const char *dir, const char *tag, const zplan *p, int rank,
                      const zck_tensor *tensors, const fx_rank *fr, unsigned streams);

/* Loads stream `s` of the checkpoint at tagdir into rank `rank`'s layout of plan `p` and counts
 * elements that differ from fx_bits(salt). Returns -1 when the read fails (message in err). */
long fx_check_rank(zck_reader *r, const zplan *p, int rank, int s, uint32_t salt, char *err);

/* Saves the whole world (threads on a local comm). Returns the first failed rank's status. */
/* The step the next saves record (manifest and engine state); 7 unless a test sets it. */
extern long long fx_step;
/* The config hash the next saves record; "0123456789abcdef" unless a test sets it. */
extern const char *fx_config_hash;
/* 1: the next saves leave `latest` as it was (save_latest=False); 0 unless a test sets it. */
extern int fx_leave_latest;
zinc_status fx_save_world(const char *dir, const char *tag, int world, unsigned streams,
                          uint32_t salt, size_t chunk_bytes, int async);
/* The same (synchronous), copying each rank's message into errs[rank] (world entries). */
zinc_status fx_save_world_errs(const char *dir, const char *tag, int world, unsigned streams,
                               uint32_t salt, size_t chunk_bytes, char (*errs)[ZCK_ERR]);

/* A fresh directory for one test process: $TMPDIR (or /tmp)/zinc-ckpt-<name>-<pid>, created;
 * its path in out (n bytes). */
void fx_tmproot(char *out, size_t n, const char *name);

/* rm -rf of a test directory (two levels: save dir and its tags). */
void fx_rmtree(const char *dir);

/* Damages a file: with flip, XORs the byte at off with 0x5a; then cuts truncate_by bytes off
 * its end (0: none). */
void fx_edit_file(const char *path, long off, int flip, long truncate_by);

#endif
