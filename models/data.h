/*
 * data.h — training data for the built-in model: a stream of sequences of T+1 tokens (inputs
 * are tokens 0..T-1, targets tokens 1..T), indexed by a global sequence number.
 *
 * Sources:
 *   - synthetic (default): a seeded random first-order Markov chain over a small byte alphabet.
 *     Every sequence starts from the chain's stationary distribution, so the best possible mean
 *     loss is exactly the chain's entropy rate, which zm_data_entropy() computes (nats/token).
 *   - a file: bytes of any file; or, for names ending in ".bin", a token file of the nanoGPT /
 *     llm.c kind: llm.c's 1024-byte header (int32 magic 20240520 = uint16 tokens or 20240801 =
 *     uint32 tokens, version 1, token count) when present, otherwise raw little-endian uint16
 *     (nanoGPT's train.bin). Every token must be < 256 (the model is byte-level).
 *
 * Sequence k depends only on (source, seed, k), so the same global batch is read whatever the
 * world size, and a run resumed at sequence k reads exactly what the uninterrupted run read.
 * Each rank reads its own share of every global batch: rank r of W with B sequences per rank
 * reads sequences pos + r*B .. pos + r*B + B-1 of the micro-step starting at pos.
 */
#ifndef ZINC_MODELS_DATA_H
#define ZINC_MODELS_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

typedef struct zm_data zm_data;

/* The data position, saved in checkpoints as the client blob (fixed size, little-endian host). */
typedef struct zm_data_pos {
    uint32_t magic;           /* ZM_DATA_POS_MAGIC */
    uint32_t version;         /* 1 */
    uint64_t next_seq;        /* first global sequence number of the next micro-step */
    uint64_t seed;            /* data seed */
    uint64_t source_id;       /* identifies the source (synthetic parameters or file contents) */
    uint64_t micro_steps;     /* micro-steps taken so far */
} zm_data_pos;

#define ZM_DATA_POS_MAGIC 0x5a4d4450u  /* "PDMZ" */

/* Opens the synthetic source. */
zinc_status zm_data_open_synthetic(uint64_t seed, zm_data **out);
/* Opens a file source; on failure writes a sentence naming the file and the problem into err. */
zinc_status zm_data_open_file(const char *path, uint64_t seed, zm_data **out, char *err,
                              size_t errn);
void zm_data_close(zm_data *d);

/* Entropy rate in nats/token: the floor of the mean loss. NaN for file sources. */
double zm_data_entropy(const zm_data *d);
/* One line describing the source ("synthetic Markov chain: 32 symbols, ..."). */
const char *zm_data_describe(const zm_data *d);
uint64_t zm_data_source_id(const zm_data *d);
/* Tokens available (files) or 0 (synthetic, unbounded). */
uint64_t zm_data_tokens(const zm_data *d);

/* Fills count sequences starting at global sequence `first`: tokens and targets [count * T].
 * A file source is read at each call (thread-safe: pread): a file whose size or modification
 * time changed since it was opened, a short read or a token outside the vocabulary gives
 * ZINC_ERR_IO and a sentence naming the file in err. The synthetic source never fails. */
zinc_status zm_data_read(const zm_data *d, uint64_t first, int count, int T, uint16_t *tokens,
                         uint16_t *targets, char *err, size_t errn);

/* Checks that a file source holds at least T+1 tokens (the length of one sequence). */
zinc_status zm_data_check_context(const zm_data *d, int T, char *err, size_t errn);

#endif
