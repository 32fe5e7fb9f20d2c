/* Byte counts as people write them in config files and flags. */
#ifndef SHARDSWAP_CORE_BYTES_H
#define SHARDSWAP_CORE_BYTES_H

#include <stdint.h>

/* Parses s into *out: a whole number of bytes ("1048576", "100B") or a
 * number with a unit, K/M/G/T and KiB/MiB/GiB/TiB counting in 1024s,
 * KB/MB/GB/TB in 1000s ("512KiB", "1.5GB", "2 MiB": one blank before the
 * unit). A fraction of a unit rounds down to whole bytes. No sign, no
 * leading blanks, no exponent. ERR_INVALID quoting s and saying what was
 * expected (or that it passes 2^64 - 1); *out is unchanged then. */
int bytes_parse(const char *s, uint64_t *out);

#endif
