/* OpenBLAS's kernels for the CPU we run on, even when OpenBLAS does not know
 * the CPU.
 *
 * A dynamic-arch OpenBLAS picks its kernels in a library constructor, before
 * main, from its own CPU table; an older OpenBLAS (Debian's 0.3.21) does not
 * know newer Intel Xeons and falls back to "Prescott" (SSE3) kernels, 6x
 * slower at sgemm than the SkylakeX ones the CPU can run. The only fix that
 * works from the program is the library's own override, OPENBLAS_CORETYPE,
 * which it reads only in that constructor: hence a re-exec. */
#ifndef SHARDSWAP_CORE_BLAS_CORE_H
#define SHARDSWAP_CORE_BLAS_CORE_H

/* Call first thing in main, before any thread or output. When
 * OPENBLAS_CORETYPE is unset and OpenBLAS chose an older core than this CPU
 * supports (by __builtin_cpu_supports: SkylakeX for AVX-512 F/BW/VL/DQ,
 * Haswell for AVX2+FMA, Sandybridge for AVX; AMD CPUs keep Haswell or Zen),
 * sets OPENBLAS_CORETYPE to that core and re-executes /proc/self/exe with
 * argv, so this function does not return. It does so at most once: the
 * marker SHARDSWAP_BLAS_CORE, set to the same name, says the core was ours
 * (also for child processes, which inherit both). Says once on stderr, and
 * returns, when the re-exec fails, when OpenBLAS did not take the core we
 * set, or when a user's OPENBLAS_CORETYPE keeps an older core than the CPU
 * supports. argv must be main's (NULL-terminated). */
void blas_core_check(char **argv);

/* The core OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...): what
 * openblas_get_corename() says. Static storage. */
const char *blas_core_name(void);

/* The core this CPU could run ("SkylakeX", ...), or NULL when it supports
 * nothing newer than OpenBLAS's generic x86-64 kernels (or is not x86). */
const char *blas_core_best(void);

#endif
