/*
 * parse.h: the program's number parsers, one for each kind of value it
 * reads from a command line or a /command.
 *
 * Each is strict: the whole of s must be the number (leading white space
 * and a sign are taken as strtol/strtod take them; nothing may follow), the
 * value must be in range, and an overflow is an error, never a clamped
 * value. Each returns KVC_OK and stores the value in *out, or returns
 * KVC_EINVAL (not a number) or KVC_ERANGE (out of range) and leaves *out
 * untouched; the caller words the message, which names its option.
 */
#ifndef KVC_PARSE_H
#define KVC_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "core/kvc.h"

/* A decimal integer in [lo, hi]. */
int kvc_parse_long(const char *s, long lo, long hi, long *out);

/* A decimal floating-point number in [lo, hi]; NaN is never in range. */
int kvc_parse_double(const char *s, double lo, double hi, double *out);

/*
 * A size in bytes: a non-negative number, fractions allowed, with an
 * optional binary multiplier k, M, G or T (either case; 1024-based), which
 * may be followed by "i", "B" or "iB": "4096", "512M", "1.5G", "2GiB",
 * "64kB" (a bare "B" is not taken). The result is rounded down to whole
 * bytes.
 */
int kvc_parse_size(const char *s, size_t *out);

/* A sampler seed: a decimal integer in [0, 2^64 - 1], no minus sign. */
int kvc_parse_seed(const char *s, uint64_t *out);

#endif
