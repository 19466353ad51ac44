/*
 * ckpt.h — the checkpoint module's internal interface (format in docs/checkpoint-format.md).
 *
 * Three layers, none of which needs an engine:
 *   codec     (codec.c)    one chunk: byte-shuffle into planes, zstd, XXH3-64 of raw and stored
 *   manifest  (manifest.c) the in-memory manifest and its JSON form (the only format parser)
 *   writer / reader (writer.c, reader.c) a rank's shard file and the commit protocol over a
 *             zcomm_t; the resharding reader, tag selection and verification
 * The engine bridge (api.c) fills these from a rank's shard, seen through engine/view.h, and implements
 * the public zinc_ckpt_* calls; tools/cmd_ckpt.c and the tests use the layers directly.
 *
 * Errors: every fallible call returns a zinc_status and writes one sentence into `err`
 * (ZCK_ERR bytes) naming what failed, where (file, chunk), and what to do.
 */
#ifndef ZINC_CKPT_CKPT_H
#define ZINC_CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/view.h"
#include "shard/comm.h"
#include "zinc.h"

/* 2: the manifest carries its own checksum (manifest_xxh3). Version-1 checkpoints are still read. */
#define ZCK_FORMAT_VERSION 2
#define ZCK_MANIFEST_SUM_KEY "manifest_xxh3"
#define ZCK_ERR 1024
#define ZCK_NAME_MAX 128
#define ZCK_MAX_DIMS 8
#define ZCK_TAG_MAX 256
#define ZCK_MANIFEST "manifest.json"
/* The largest step a manifest may hold: 2^53, where JSON numbers stop being exact integers (the
 * engine's counters have the same bound, engine/view.h's ZENG_COUNTER_MAX). */
#define ZCK_STEP_MAX 9007199254740992LL
#define ZCK_LATEST "latest"
#define ZCK_BLOB "client.bin"
#define ZCK_FILE_MAGIC "ZINCSHRD"      /* 8 bytes, then u32 version, u32 rank (little-endian) */
#define ZCK_FILE_HEADER 16

/* Streams of a rank file. Every stream of one rank file holds the same pieces in the same order;
 * only the element type differs. */
typedef enum {
    ZCK_MASTER = 0,      /* fp32 master weights */
    ZCK_ADAM_M = 1,      /* fp32 Adam first moment */
    ZCK_ADAM_V = 2,      /* fp32 Adam second moment */
    ZCK_WEIGHTS16 = 3,   /* the 16-bit working weights (fp16 or bf16), optional */
    ZCK_NSTREAMS = 4
} zck_stream;

#define ZCK_OPTIM_MASK ((1u << ZCK_ADAM_M) | (1u << ZCK_ADAM_V))

const char *zck_stream_name(int s);     /* "master", "adam_m", "adam_v", "weights16" */
int zck_stream_from_name(const char *s);/* -1 when unknown */
int zck_dtype_from_name(const char *s, zinc_dtype *out); /* "fp32" ... -> 0, else -1 */

/* ---- codec -------------------------------------------------------------------------------- */

/* Byte-shuffle: n elements of esize bytes become esize planes of n bytes (plane b holds byte b
 * of every element). Floats of similar magnitude share exponent bytes, which zstd then finds. */
void zck_shuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t esize);
void zck_unshuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t esize);

/* Upper bound of an encoded chunk of raw_len bytes. */
size_t zck_encode_bound(size_t raw_len);

typedef struct zck_codec_ctx zck_codec_ctx;   /* zstd contexts and a shuffle scratch buffer */
zck_codec_ctx *zck_codec_ctx_create(size_t max_raw);
void zck_codec_ctx_free(zck_codec_ctx *c);

/* Encodes raw_len bytes (a multiple of esize): shuffle (when shuffle != 0), zstd at `level`.
 * Writes at most zck_encode_bound(raw_len) bytes to out. raw_xxh3 / comp_xxh3 receive the XXH3-64
 * of the raw input and of the encoded output. */
zinc_status zck_encode(zck_codec_ctx *c, const void *raw, size_t raw_len, size_t esize,
                       int shuffle, int level, void *out, size_t *out_len, uint64_t *raw_xxh3,
                       uint64_t *comp_xxh3, char *err);
/* Decodes one chunk into raw (raw_len bytes), verifying both checksums. `where` names the chunk
 * in messages ("rank-00001.zck, stream master, chunk 3 (bytes 16..4096)"). */
zinc_status zck_decode(zck_codec_ctx *c, const void *comp, size_t comp_len, uint64_t comp_xxh3,
                       void *raw, size_t raw_len, uint64_t raw_xxh3, size_t esize, int shuffle,
                       const char *where, char *err);

/* ---- manifest ----------------------------------------------------------------------------- */

typedef struct zck_tensor {
    char name[ZCK_NAME_MAX];
    int ndim;
    int64_t shape[ZCK_MAX_DIMS];
    uint64_t numel;
    zinc_dtype dtype;           /* the working dtype the model registered */
} zck_tensor;

typedef struct zck_chunk {
    uint64_t raw_off, raw_len;  /* bytes in the decompressed stream */
    uint64_t file_off, comp_len;/* bytes in the rank file */
    uint64_t raw_xxh3, comp_xxh3;
} zck_chunk;

typedef struct zck_stream_info {
    int present;
    zinc_dtype dtype;
    uint64_t file_off;          /* where its first chunk starts */
    uint64_t raw_bytes, comp_bytes;
    int nchunks;
    zck_chunk *chunks;
} zck_stream_info;

/* Elements [lo, hi) of the flattened tensor, stored at element `elem_off` of every stream. */
typedef struct zck_piece_rec {
    int tensor;
    uint64_t lo, hi;
    uint64_t elem_off;
} zck_piece_rec;

typedef struct zck_rankfile {
    int rank;
    char file[64];              /* "rank-00003.zck", relative to the tag directory */
    uint64_t bytes;             /* file size */
    zck_stream_info streams[ZCK_NSTREAMS];
    int npieces;
    zck_piece_rec *pieces;
} zck_rankfile;

typedef struct zck_manifest {
    int version;
    char zinc_version[32];
    char tag[ZCK_TAG_MAX];
    int64_t step;
    char config_hash[32];
    char settings_hash[32];     /* the config's without its batch sizes; "" before 2026-11-30 */
    int latest_left;            /* saved leaving `latest` as it was (DeepSpeed's save_latest=False):
                                   never taken over latest's tag as a save that stopped before
                                   updating it (reader.c, find_tag) */
    int world_size, stage;
    zinc_dtype dtype;           /* working dtype at save */
    int level;
    uint64_t chunk_bytes;
    int shuffle;
    unsigned streams;           /* mask of zck_stream stored by every rank */
    int ntensors;
    zck_tensor *tensors;
    int nranks;
    zck_rankfile *ranks;        /* [nranks], index = rank */
    char *engine_state;         /* JSON object text, or NULL */
    int has_blob;
    uint64_t blob_bytes, blob_xxh3;
} zck_manifest;

void zck_manifest_free(zck_manifest *m);
/* JSON text (caller frees) of a complete manifest, sealed with its checksum (manifest_xxh3: the
 * XXH3-64 of the text with that value's 16 hex digits written as zeros). */
char *zck_manifest_to_json(const zck_manifest *m);
/* Recomputes the checksum of a manifest text in place (for tools and tests that edit a manifest
 * on purpose). Returns -1 when the text has no manifest_xxh3 member. */
int zck_manifest_reseal(char *text, size_t len);
/* Parses a manifest; `where` labels messages. Refuses a newer format version (UNSUPPORTED) and
 * any structural inconsistency (CORRUPT): unknown tensor index, pieces past a tensor's end,
 * chunks that do not tile their stream, ranges past the file. */
zinc_status zck_manifest_parse(const char *text, size_t len, const char *where, zck_manifest *m,
                               char *err);
/* The part of one rank file's description written by that rank (rank-N.json in <tag>.tmp/),
 * merged by rank 0 into the manifest. */
char *zck_rankfile_to_json(const zck_rankfile *rf);
zinc_status zck_rankfile_parse(const char *text, size_t len, const char *where, zck_rankfile *rf,
                               char *err);
void zck_rankfile_free(zck_rankfile *rf);

/* ---- files -------------------------------------------------------------------------------- */

/* Opens path for reading, refusing anything but a regular file: a FIFO, device or directory in
 * a checkpoint's place would block or mislead the reader. Opened non-blocking, so a FIFO with no
 * writer cannot hang the open itself. Returns the fd, or -1 with errno set (EINVAL: not a
 * regular file) and the sentence in err. */
int zck_open_regular(const char *path, char *err);
/* Reads a whole (small) file; caller frees. */
zinc_status zck_read_file(const char *path, char **out, size_t *len, char *err);
/* Writes a whole file durably: path.tmp, fsync, rename, fsync of the directory. */
zinc_status zck_write_file_atomic(const char *path, const void *data, size_t len, char *err);
zinc_status zck_fsync_dir(const char *dir, char *err);
/* 1 when the file at path is JSON whose "format" is "zinc-checkpoint" (a zinc manifest, sealed
 * or not, damaged elsewhere or not): not a user's file of that name. */
int zck_manifest_is_zinc(const char *path);
/* 1 when name is one the writer makes in a tag directory (manifest.json, client.bin,
 * rank-NNNNN.zck/.json/.failed, and their .tmp): the only files a save ever deletes. */
int zck_is_writer_name(const char *name);
/* 0 when dir is a directory (not a symlink) holding only writer-named regular files; else -1
 * with the reason (n bytes, "it holds X, ...") in why. */
int zck_dir_owned(const char *dir, char *why, size_t n);
/* Removes a directory and the writer-named files in it (one level: tag directories are flat).
 * -1 with errno ENOTEMPTY when it holds anything else: the directory and those other files stay,
 * but the writer's files in it are gone by then (zck_dir_owned first, to keep a tag whole);
 * ENOTDIR for a symlink. */
int zck_rmdir_flat(const char *dir);
/* A flat directory's newest modification time (its own and its entries') and the bytes of its
 * regular files: 0, or -1 when it cannot be read. */
int zck_dir_usage(const char *dir, time_t *newest, unsigned long long *bytes);
/* A save's .tmp directory nothing changed in for this long (or twice the save's collective
 * timeout, when longer: a save may wait that long in a barrier without writing) is a leftover (a
 * killed save), not a save still writing: zck_sweep_stale_tmps removes it. */
#define ZCK_STALE_TMP_S (15 * 60)
/* Rank 0 preparing a save into dir: removes the <tag>.tmp directories of other tags that
 * earlier saves left (killed, crashed) — only zck_dir_owned ones, unchanged for ZCK_STALE_TMP_S
 * or more (a save writing there now, from another engine, keeps its own), and without a
 * manifest (one killed between its manifest and its rename is whole: kept, with a warning) —
 * each with a warning naming it and its size; and the .<tag>.pruning directories a stopped
 * zck_prune_tags left, whatever their age. keep_tag's own .tmp is the caller's. Never fails the
 * save: the number removed. */
int zck_sweep_stale_tmps(const char *dir, const char *keep_tag, double timeout_s, int rank);
/* Rank 0, right after tag (at step) was committed into dir (zinc.ckpt_keep_last, retention.c):
 * removes the run's older tags — default-named (global_step<N>, step<NNNNNN>) for their step,
 * with config_hash, a lower step, and only the writer's files — but the newest keep - 1 by step,
 * each logged; a tag holding files zinc did not write stays whole, with a warning. Never fails
 * the save: the number removed. */
int zck_prune_tags(const char *dir, const char *tag, const char *config_hash, int64_t step,
                   int keep, int rank);
/* Exchanges two directory entries in one rename (Linux renameat2 RENAME_EXCHANGE): 0, or -1 with
 * errno — EINVAL, ENOSYS or ENOTSUP where the kernel or the file system cannot (NFS, CIFS, FUSE,
 * a kernel before 3.15), through the system call itself, so that a C library without the
 * wrapper (glibc < 2.28) builds and answers ENOSYS. */
int zck_exchange(const char *a, const char *b);
/* The tag a `latest` file at path names (one line; a trailing newline, CR or spaces allowed),
 * into tag (n bytes): 0, or -1 when it cannot be read or is not one valid tag name. */
int zck_latest_read(const char *path, char *tag, size_t n);
/* 0 when what a save replaces in dir is the writer's: dir/latest absent, a symlink, empty or
 * naming a tag; dir/latest.tmp absent, empty or naming a tag that is there (a stopped save's
 * leftover). Else -1 with the reason, naming the path, in why (n bytes). */
int zck_latest_check(const char *dir, char *why, size_t n);
/* 0 when a save of tag into dir may replace what is there: zck_latest_check; dir/tag, its .tmp
 * and .old each absent or zck_dir_owned, a manifest in them zinc's, dir/tag holding one. Else -1
 * with the reason, naming the path, in why. */
int zck_save_target_check(const char *dir, const char *tag, char *why, size_t n);

/* ---- writer ------------------------------------------------------------------------------- */

/* One piece of this rank's shard, as host pointers to element 0 of the piece in each stream
 * (NULL for streams not saved). */
typedef struct zck_piece {
    int tensor;
    uint64_t lo, hi;
    const void *data[ZCK_NSTREAMS];
} zck_piece;

typedef struct zck_save_desc {
    const char *dir, *tag;
    int rank, world_size, stage;
    int64_t step;
    const char *config_hash;      /* may be NULL */
    const char *settings_hash;    /* zcfg.settings_hash_hex; may be NULL */
    const char *engine_state;     /* JSON object text (rank 0), may be NULL */
    const void *blob;             /* rank 0's caller blob, may be NULL */
    size_t blob_bytes;
    int ntensors;
    const zck_tensor *tensors;
    int npieces;
    const zck_piece *pieces;      /* this rank's pieces */
    unsigned streams;             /* mask; every rank the same */
    zinc_dtype dtype;             /* working dtype; the weights16 stream's element type */
    int level;                    /* zstd level */
    size_t chunk_bytes;           /* raw bytes per chunk (rounded down to a multiple of 4) */
    int threads;                  /* compression threads; 0 = 2 */
    int shuffle;                  /* 1 (the format's default); 0 only for benchmarks */
    double timeout_s;             /* how long rank 0 waits for the other ranks' files */
    int keep_last;                /* > 0: after the commit, the run's older tags beyond the newest
                                     keep_last go (zck_prune_tags); 0: all stay */
    int leave_latest;             /* 1: `latest` is not replaced (nor anything pruned): DeepSpeed's
                                     save_latest=False */
} zck_save_desc;

/* Phase 1, collective: rank 0 removes a stale <tag>.tmp and creates it; barrier. */
zinc_status zck_save_prepare(zcomm_t *c, const zck_save_desc *d, char *err);
/* Phase 2, not collective (may run on a background thread): writes and fsyncs this rank's file
 * and its description rank-N.json (or rank-N.failed with the message on failure). */
zinc_status zck_save_write(const zck_save_desc *d, char *err);
/* Phase 3, rank 0 only, not collective: waits (up to timeout_s) for every rank's description,
 * writes the manifest and the blob, renames <tag>.tmp to <tag> and replaces `latest`. */
zinc_status zck_save_commit(const zck_save_desc *d, char *err);
/* All three, collective, synchronous; every rank returns rank 0's commit result. */
zinc_status zck_save(zcomm_t *c, const zck_save_desc *d, char *err);
/* Collective: the lowest rank that passed failed != 0 into *root (-1: none) and its message
 * `mine` into out (n bytes) on every rank. A world of one (c NULL) makes no call. Returns the
 * comm's status (*root -1 when it failed). */
zinc_status zck_first_failure(zcomm_t *c, int failed, const char *mine, int *root, char *out,
                              size_t n);

/* Test hook: when set, called with a phase name at each step of the commit protocol
 * ("file", "fsync", "rankjson", "manifest", "rename", "latest"); used by the fault tests. */
extern void (*zck_test_hook)(const char *phase);
/* Test hooks for the fault tests: zck_test_no_exchange nonzero makes a save over an existing tag
 * take the fallback of a file system that cannot exchange two directories (the old tag moved to
 * <tag>.old, then the new one renamed into place); zck_test_fail, when set and nonzero for
 * (phase, rank), makes that rank's write fail there ("rankjson-written": after its rank-N.json
 * is in place, as a failed fsync of the directory does). */
extern int zck_test_no_exchange;
extern int (*zck_test_fail)(const char *phase, int rank);

/* ---- reader ------------------------------------------------------------------------------- */

typedef struct zck_reader zck_reader;

/* Opens a tag directory: parses and checks the manifest, checks every rank file exists with
 * the recorded size, and the blob's checksum. */
zinc_status zck_open(const char *tagdir, zck_reader **out, char *err);
void zck_close(zck_reader *r);
const zck_manifest *zck_reader_manifest(const zck_reader *r);
const char *zck_reader_dir(const zck_reader *r);

/* The manifest of tagdir, read and parsed (its seal and structure checked; the rank files are not
 * opened). *m is the caller's to zck_manifest_free, whatever the status. */
zinc_status zck_manifest_read(const char *tagdir, zck_manifest *m, char *err);
/* Finds the tag to load in save directory `dir`: `tag` given -> that one (error if damaged);
 * NULL or "latest" -> the tag `latest` names, unless a tag of a higher step was committed after
 * `latest` was written (the whole order: reader.c, cmp_cand), the damaged ones skipped, each
 * warned about (zlog, rank `logrank`) with why. Every manifest is read, but only the tags tried
 * are opened: a damaged tag past the one taken is not named (zck_resolve_path opens all). Fills
 * tagdir (path) and tagname. When skip_upto > 0 the first skip_upto valid candidates are passed
 * over too (for a retry after a chunk failed to decode). */
zinc_status zck_find_tag(const char *dir, const char *tag, int skip_upto, int logrank,
                         char *tagdir, size_t tagdir_n, char *tagname, size_t tagname_n,
                         char *err);
/* What entry `name` of save directory `dir` is to a load (find_tag, and `zinc ckpt verify --all`);
 * `latest`: the tag the directory's `latest` names (a directory of that name without a manifest
 * is a damaged tag), or "" / NULL. */
typedef enum {
    ZCK_ENTRY_NONE,        /* not a tag: a file, a hidden or unrelated directory */
    ZCK_ENTRY_SHADOWED,    /* T.old while T is there: never read */
    ZCK_ENTRY_UNFINISHED,  /* T.tmp: a save that did not finish, never a tag */
    ZCK_ENTRY_DEEPSPEED,   /* a DeepSpeed checkpoint's tag folder */
    ZCK_ENTRY_LOST,        /* a tag that lost its manifest (it has rank files, or latest names it) */
    ZCK_ENTRY_UNREADABLE,  /* a directory whose manifest cannot even be looked for (permissions,
                            * an I/O error) that is a tag by its name (latest names it; stepN,
                            * global_stepN, T.old): damaged. errno says why on return */
    ZCK_ENTRY_UNKNOWN,     /* such a directory of another name (another user's folder in a shared
                            * directory, say): named in a warning, not counted (errno: why). Not
                            * lost+found, a file system's own, which is NONE */
    ZCK_ENTRY_TAG          /* holds a manifest (whether it reads is for the caller to find) */
} zck_entry;
zck_entry zck_save_dir_entry(const char *dir, const char *name, const char *latest);
/* Resolves what a user named: a tag directory (has a manifest), or a save directory: the tag a
 * load of it takes (zck_find_tag with no tag: the newest valid one) — every tag of it opened, so
 * that each damaged one is named (a load opens only those it tries). ZINC_ERR_IO when path is
 * not a directory or holds no checkpoint at all. */
zinc_status zck_resolve_path(const char *path, char *tagdir, size_t n, char *err);

/* A destination: elements [lo, hi) of tensor `tensor`, written to dst as the stream's dtype. */
typedef struct zck_target {
    int tensor;
    uint64_t lo, hi;
    void *dst;
} zck_target;

/* Fills every target from stream `s`, whatever layout saved it: finds the stored pieces that
 * overlap each target and decompresses only the chunks they need (threads in parallel),
 * verifying checksums. Fails (CORRUPT, naming file and chunk) on damage, (INVALID_ARG) when a
 * target is not fully covered, (UNSUPPORTED/MISMATCH) when the stream was not saved. */
zinc_status zck_read(zck_reader *r, int s, const zck_target *t, int n, int threads, char *err);
/* The caller blob into buf (cap bytes); *bytes receives its size (0 when none). */
zinc_status zck_read_blob(zck_reader *r, void *buf, size_t cap, size_t *bytes, char *err);
/* Reads and checks every chunk of every stream, the blob and the coverage of every tensor.
 * Reports the first problem. raw/comp receive per-stream byte totals (may be NULL). */
zinc_status zck_verify(zck_reader *r, int threads, char *err);

/* ---- engine state (state.c) ---------------------------------------------------------------- */

/* The manifest's engine_state object (caller frees); lr is informational. */
char *zck_state_to_json(const zengine_state *st, double lr);
/* Parses and range-checks engine_state into *st (left unchanged on error: CORRUPT naming the
 * field). zck_verify runs it too, so what verifies also loads. */
zinc_status zck_state_parse(const char *text, zengine_state *st, char *err);

/* ---- async save (async.c) ----------------------------------------------------------------- */

typedef struct zck_async zck_async;

/* Collective: runs zck_save_prepare, then writes (and on rank 0 commits) on a background thread.
 * The descriptor is copied; the piece data must stay valid until zck_async_wait: it normally
 * points into `staging`, which the save takes over and frees (free()) when it ends. */
zinc_status zck_async_start(zcomm_t *c, const zck_save_desc *d, void *staging, zck_async **out,
                            char *err);
/* 1 when the background work has finished (zck_async_wait will not block). */
int zck_async_done(zck_async *a);
/* Waits for the background work, returns its result and frees `a` (accepts NULL: ZINC_OK).
 * Rank 0's result includes the commit; other ranks report their own file. */
zinc_status zck_async_wait(zck_async *a, char *err);

/* ---- safetensors (safetensors.c) ---------------------------------------------------------- */

/* Writes the master weights of a tag as a .safetensors file in `dt` (fp32, fp16 or bf16),
 * tensor by tensor (memory: the largest tensor), tensors sorted by name; the output is the same
 * bytes for the same checkpoint. Written to out.tmp and renamed. */
zinc_status zck_export_safetensors(const char *tagdir, const char *out, zinc_dtype dt,
                                   int threads, char *err);

typedef struct zst_entry {
    char name[ZCK_NAME_MAX];
    char dtype_name[16];          /* as in the file: "F32", "F16", "BF16", "I64", ... */
    int supported;                /* F32, F16 or BF16 */
    zinc_dtype dtype;
    int ndim;
    int64_t shape[ZCK_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;          /* data_offsets, relative to the data section */
} zst_entry;

typedef struct zst_file {
    int fd;
    char path[4096];
    uint64_t data_off;            /* 8 + header length */
    int n;
    zst_entry *e;
} zst_file;

zinc_status zst_open(const char *path, zst_file **out, char *err);
void zst_close(zst_file *f);
int zst_find(const zst_file *f, const char *name);   /* index or -1 */
/* Elements [lo, hi) of entry i as fp32. */
zinc_status zst_read_f32(zst_file *f, int i, uint64_t lo, uint64_t hi, float *dst, char *err);

#endif
