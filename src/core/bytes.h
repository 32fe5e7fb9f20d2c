/* Byte counts: parsed as people write them in config files and flags
 * ("512KiB", "1.5GB"), and written for a person to read ("12.0 MiB",
 * "640.0 KiB", "1.23 GB", "789 kB", "512 B"). */
#ifndef SHARDSWAP_CORE_BYTES_H
#define SHARDSWAP_CORE_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* Parses s into *out: a whole number of bytes ("1048576", "100B") or a
 * number with a unit, K/M/G/T and KiB/MiB/GiB/TiB counting in 1024s,
 * KB/MB/GB/TB in 1000s ("512KiB", "1.5GB", "2 MiB": one blank before the
 * unit; units in any case: "2gb" is 2GB, "2gib" 2GiB). A fraction of a
 * unit rounds down to whole bytes. No sign, no
 * leading blanks, no exponent. ERR_INVALID quoting s and saying what was
 * expected (or that it passes 2^64 - 1); *out is unchanged then. */
int bytes_parse(const char *s, uint64_t *out);

enum bytes_units {
    BYTES_BINARY,  /* powers of 1024: "%.2f GiB", "%.1f MiB", "%.1f KiB" (messages, logs) */
    BYTES_DECIMAL, /* powers of 1000: "%.2f GB", "%.1f MB", "%.0f kB" (file sizes) */
};

/* Writes n into buf (cap bytes, cut to fit) in the largest unit of the
 * system it reaches, at that unit's digits above; under the smallest unit
 * "%llu B". Gi/G is the largest unit: more is "17179869184.00 GiB". The
 * digits round (1048575 is "1024.0 KiB"). Returns buf. */
const char *bytes_format(char *buf, size_t cap, uint64_t n, enum bytes_units units);

#endif
