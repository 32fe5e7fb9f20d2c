/* Regular expressions as Python's `re` reads them, for the patterns that
 * checkpoints' config files hold: PEFT's target_modules, rank_pattern and
 * alpha_pattern (adapter_config.json), compressed-tensors' "re:" targets.
 * Those files are written for Python, so their patterns use its syntax
 * ((?:...), \d, \w, lazy quantifiers, (?P<name>...)); PCRE2 reads all of
 * it the same way for names of modules (ASCII, no newlines).
 *
 * A config file is input from anyone, so both steps are bounded: a pattern
 * longer than PYRE_MAX_PATTERN bytes, or one that compiles to more than
 * PYRE_MAX_COMPILED bytes (nested counted repeats), is refused at compile;
 * a match that backtracks past PCRE2's limits (nested quantifiers against
 * a long name) is an error, never unbounded time or memory. */
#ifndef SHARDSWAP_CORE_PYRE_H
#define SHARDSWAP_CORE_PYRE_H

#include <stdbool.h>

#define PYRE_MAX_PATTERN 1024
#define PYRE_MAX_COMPILED (64 * 1024)

struct pyre;

/* Compiles pattern into *out (pyre_free). A refusal is ERR_FORMAT (bad
 * syntax, with PCRE2's words and the offset) or ERR_UNSUPPORTED (over a
 * bound), its message naming the pattern; callers prefix where it came
 * from with err_wrap. */
int pyre_compile(const char *pattern, struct pyre **out);

/* How much of s a match must cover. */
enum pyre_anchor {
    PYRE_MATCH,     /* from s's start, as re.match */
    PYRE_FULLMATCH, /* all of s, as re.fullmatch */
};

/* Whether re matches s as anchor says, in *match. ERR_UNSUPPORTED when the
 * match runs past the limits (the pattern backtracks too much), its
 * message naming the pattern. */
int pyre_match(const struct pyre *re, const char *s, enum pyre_anchor anchor, bool *match);

/* Compiles pattern, matches s, frees: for a pattern used once. */
int pyre_match_once(const char *pattern, const char *s, enum pyre_anchor anchor, bool *match);

void pyre_free(struct pyre *re);

#endif
