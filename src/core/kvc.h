/*
 * kvc.h: what every kvchat module shares: error codes, the error-message
 * convention, growable buffers and a clock.
 *
 * Errors: library functions return 0 (KVC_OK) on success or a negative
 * KVC_E* code, and write one human-readable line (no trailing newline) into
 * the caller's `char *err, size_t errlen` when err is not NULL. Only main()
 * exits; library code never calls exit().
 */
#ifndef KVC_H
#define KVC_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum {
	KVC_OK = 0,
	KVC_ENOMEM = -1,	/* allocation failed */
	KVC_EIO = -2,		/* read/write/open failed (errno-level) */
	KVC_EFORMAT = -3,	/* malformed input (file, blob, text) */
	KVC_EUNSUPPORTED = -4,	/* well-formed but not implemented here */
	KVC_EINVAL = -5,	/* bad argument from the caller */
	KVC_ERANGE = -6,	/* does not fit: context full, value out of range */
	KVC_EBUSY = -7,		/* held by another process */
	KVC_EINTR = -8,		/* interrupted by the user (Ctrl-C) */
	KVC_ECORRUPT = -9,	/* checksum mismatch or inconsistent stored data */
	KVC_ENOTFOUND = -10,	/* no such conversation, key, tensor, file */
};

/* Short name of an error code ("out of memory", "format error", ...). */
const char *kvc_strerror(int code);

/* printf into err (if err != NULL && errlen > 0); always NUL-terminates. */
void kvc_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* CPUs this process may run on (default thread count); at least 1. */
int kvc_n_cores(void);

/* Monotonic time in seconds. */
double kvc_now(void);

/* Growable byte buffer. Zero-initialise ({0}) before first use. */
struct kvc_buf {
	char *p;	/* data, NUL-terminated when n < cap */
	size_t n;	/* bytes used */
	size_t cap;	/* bytes allocated */
};
/* Each returns 0 or KVC_ENOMEM. */
int kvc_buf_reserve(struct kvc_buf *b, size_t extra);
int kvc_buf_append(struct kvc_buf *b, const void *data, size_t len);
int kvc_buf_printf(struct kvc_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kvc_buf_free(struct kvc_buf *b);

/* Growable token-id vector. Zero-initialise before first use. */
struct kvc_tokens {
	int32_t *v;	/* token ids */
	size_t n;	/* used */
	size_t cap;	/* allocated */
};
int kvc_tokens_push(struct kvc_tokens *t, int32_t id);
int kvc_tokens_append(struct kvc_tokens *t, const int32_t *ids, size_t n);
void kvc_tokens_free(struct kvc_tokens *t);

/* Checked size arithmetic: return false on overflow. */
static inline bool kvc_mul_ok(size_t a, size_t b, size_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}
static inline bool kvc_add_ok(size_t a, size_t b, size_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

/*
 * The instruction sets this CPU (and OS) runs, as KVC_CPU_* bits, probed
 * once (util.c). x86-64: KVC_CPU_AVX2: AVX2 + FMA + F16C; KVC_CPU_AVX512:
 * that and AVX512 F, VL, BW and VNNI. aarch64: KVC_CPU_NEON: Advanced SIMD
 * (HWCAP_ASIMD); KVC_CPU_DOTPROD: that and the int8 dot product of ARMv8.2
 * (HWCAP_ASIMDDP, SDOT). KVC_CPU_AVXVNNI: AVX-VNNI (the 256-bit VEX
 * vpdpbusd of Alder Lake, Sapphire Rapids, Zen 5). src/kern compiles one kernel table for each.
 */
#define KVC_CPU_AVX2 1u
#define KVC_CPU_AVX512 2u
#define KVC_CPU_NEON 4u
#define KVC_CPU_DOTPROD 8u
#define KVC_CPU_AVXVNNI 16u
unsigned kvc_cpu_features(void);

/* UTF-8: length of the longest valid prefix of s[0..n) ; == n when valid. */
size_t kvc_utf8_valid_prefix(const char *s, size_t n);


/* ---- number parsers (parse.c) ----
 * One for each kind of value read from a command line or a /command. Each
 * is strict: the whole of s must be the number (leading white space and a
 * sign as strtol/strtod take them; nothing may follow), the value must be
 * in range, and an overflow is an error, never a clamped value. Each
 * returns KVC_OK and stores the value in *out, or returns KVC_EINVAL (not
 * a number) or KVC_ERANGE (out of range) and leaves *out untouched; the
 * caller words the message, which names its option. */
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

/* ---- private files and folders (file.c) ----
 * Conversations are private: every file kvchat writes is created with mode
 * 0600 and every folder it creates 0700, whatever the umask (the mode is
 * set again with fchmod after creation, since a umask can only take bits
 * away and a strict one would leave the user locked out). Folders that hold
 * those files must be the user's own; see docs/SECURITY.md. */
#define KVC_FILE_MODE 0600
#define KVC_DIR_MODE 0700

/*
 * The user's home folder into buf: $HOME when it is an absolute path, else
 * the password database's home of the effective user (never the current
 * folder). 0, KVC_ENOTFOUND (no usable home) or KVC_ERANGE (buf too short).
 */
int kvc_home_dir(char *buf, size_t len, char *err, size_t errlen);

/* The folder part of path into buf ("." when it has none, "/" for a file
 * in /). 0 or KVC_ERANGE. */
int kvc_dir_of(const char *path, char *buf, size_t len);

/*
 * Whether dir may hold private files: once links are resolved it must be a
 * folder owned by the effective user (or root) and writable by nobody else,
 * and each folder above it must be owned by that user or root and, when
 * others can write to it, have the sticky bit (as /tmp has). Group write is taken as
 * "nobody else" only for the user's private group (named after the user,
 * no other members). 0, or KVC_EINVAL (refused: err names the folder and
 * why) or KVC_EIO / KVC_ENOTFOUND (cannot be examined).
 */
int kvc_dir_check(const char *dir, char *err, size_t errlen);

/* mkdir -p dir: each folder it creates gets mode 0700; then kvc_dir_check. */
int kvc_mkdirs_private(const char *dir, char *err, size_t errlen);

/*
 * Creates path as an empty 0600 file if nothing is there (O_EXCL, no link
 * followed); an existing file is left as it is. Used before SQLite opens a
 * database: SQLite gives -wal and -shm the mode of the database file.
 * Returns 1 when it created the file, 0 when something was there already,
 * or KVC_EIO.
 */
int kvc_file_create_private(const char *path, char *err, size_t errlen);

/*
 * Opens path for writing (appending when append, else truncating), created
 * 0600 when absent. In a folder others can write, no link is followed and a
 * file that is not the user's own regular file with one link is refused, so
 * a link or file planted there cannot redirect the write. Returns the descriptor
 * (close it) or a negative KVC_E* code with err set.
 */
int kvc_file_open_write(const char *path, bool append, char *err, size_t errlen);

/* write(2) until all n bytes are written (EINTR retried). 0 or KVC_EIO. */
int kvc_write_all(int fd, const void *p, size_t n);

/*
 * A new temporary file beside path, named path.XXXXXX (mkostemp: a fresh
 * name, O_EXCL, so nothing planted under any name is ever opened), with
 * the given mode exactly. Returns the descriptor and its name in *tmp (the
 * caller frees it, and renames or unlinks the file), or a negative KVC_E*
 * code with err set.
 */
int kvc_file_tmp_beside(const char *path, unsigned mode, char **tmp, char *err, size_t errlen);

/*
 * Replaces path with data[0..n) atomically: a new 0600 file beside it
 * (mkostemp, so never through a planted link or an existing file), written,
 * fsynced and renamed over path. A failure leaves the old file whole.
 */
int kvc_file_replace(const char *path, const void *data, size_t n, char *err, size_t errlen);

/*
 * A one-line warning (no prefix, no newline) into msg when path, path with
 * each suffix of the NULL-terminated list appended, or the folder of path
 * exist and can be read or written by group or others; it names them and
 * the chmod that fixes it. Nothing is changed. Returns true when it wrote one.
 */
bool kvc_file_exposed(const char *path, const char *const *suffixes, char *msg, size_t len);

#endif
