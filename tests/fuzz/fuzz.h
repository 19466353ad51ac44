/*
 * fuzz.h — what every fuzz target of tests/fuzz/ shares. Each target is one
 * LLVMFuzzerTestOneInput over one parser; the same source links either into a libFuzzer binary
 * (make fuzz, clang) or into replay.c's main() (make test, any compiler), which feeds it every
 * file of the target's seed corpus. A target returns 0 for any input the parser handles, and
 * calls FUZZ_CHECK for the parser's contract (status codes, messages, round trips): a broken
 * contract aborts, which libFuzzer reports as a crash and the replay as a failed test.
 */
#ifndef ZINC_TESTS_FUZZ_H
#define ZINC_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "%s:%d: fuzz contract broken: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#endif
