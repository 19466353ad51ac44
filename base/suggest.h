/*
 * suggest.h — "did you mean ...?" for a mistyped name: a config key, an optimizer type, a
 * command-line option. One rule everywhere: the candidate within the fewest edits, allowing about
 * one typo per four characters.
 */
#ifndef ZINC_BASE_SUGGEST_H
#define ZINC_BASE_SUGGEST_H

/* The edit distance from name to cand (Levenshtein plus adjacent transpositions, ASCII
 * case-insensitive) when it is within about one typo per four characters of name (at least two,
 * but fewer than name has: any two-letter name is two edits from any other); else -1. */
int zsuggest_distance(const char *name, const char *cand);

/* The closest of names[0..n) by zsuggest_distance (the first of equals), or NULL. */
const char *zsuggest(const char *name, const char *const *names, int n);

#endif
