/*
 * log.h — the one logger, and the error-message helpers every module uses.
 *
 * ZINC_LOG selects levels per subsystem: "info" (default), "debug", "warn,ckpt=debug", "off"
 * (nothing, errors neither), ...
 * Lines are prefixed with the rank ("[zinc r3 ckpt] ..."). Progress is printed by rank 0 only
 * (the callers decide); errors by every rank.
 */
#ifndef ZINC_BASE_LOG_H
#define ZINC_BASE_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "zinc.h"

typedef enum { ZLOG_ERROR = 0, ZLOG_WARN = 1, ZLOG_INFO = 2, ZLOG_DEBUG = 3 } zlog_level;

/* Whether a line of `level` for `subsys` ("engine", "comm", "ckpt", "config", ...) is printed. */
int zlog_enabled(zlog_level level, const char *subsys);
/* Prints one line to stderr when enabled; rank < 0 omits the rank. Thread-safe. */
void zlog(zlog_level level, const char *subsys, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* From now on, `subsys` prints errors only (what ZINC_LOG=subsys=error does): for a program that
 * has already shown that subsystem's warnings its own way (zinc train prints its config's). */
void zlog_quiet(const char *subsys);

/* While the calling thread's hold count is above 0, its warnings and lower print nothing (errors
 * still do): for a look that a later call repeats and reports (zinc train's checks of a resume
 * before the load, which prints the same tag-search warnings once, on rank 0). Returns the count
 * after the change: zlog_hold(1) to begin, zlog_hold(-1) to end; calls nest. */
int zlog_hold(int delta);

/* Formats a message into buf (size n) and returns s: `return zerr_fmt(e->err, sizeof e->err,
 * ZINC_ERR_USAGE, "zinc_step: called before zinc_finalize");`. */
zinc_status zerr_fmt(char *buf, size_t n, zinc_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The calling thread's last error (what zinc_last_error(NULL) returns). */
zinc_status zerr_thread(zinc_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *zerr_thread_message(void);

#endif
