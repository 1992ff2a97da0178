/*
 * gguf_io.c: reading a mapped file's bytes without the mapping, and
 * handing parts of the mapping back.
 *
 * Why not simply read the mapping: a backend that copies a matrix into a
 * layout of its own (the CPU backend's packed copies) would leave the
 * file's pages of that matrix resident beside the copy, and on Linux a
 * file cached in large folios is mapped two megabytes at a time (a PMD),
 * so one byte read through the mapping, or a neighbour's row, maps up to
 * 2 MiB of it. gguf_pread copies the bytes with pread(2), which reads
 * ahead as a sequential read should and maps nothing; gguf_release splits
 * a range off into a mapping of its own (so no large mapping of a
 * neighbour spans it) and unmaps its pages. The range stays readable: a
 * later read through the mapping (another backend on the same model, a
 * test's reference) faults the bytes in again from the page cache.
 */
#include "gguf.h"
#include "gguf_int.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Whether [p, p + n) lies inside the file; *off its offset. */
static bool
in_file(const struct gguf_file *f, const void *p, size_t n, uint64_t *off)
{
	uintptr_t a = (uintptr_t)p, b = (uintptr_t)gguf_base(f);
	uint64_t size = gguf_file_size(f);

	if (a < b || a - b > size || n > size - (a - b))
		return false;
	*off = a - b;
	return true;
}

int
gguf_pread(const struct gguf_file *f, const void *p, size_t n, void *dst, char *err, size_t errlen)
{
	uint64_t off;
	int fd = gguf_fd(f);

	if (!in_file(f, p, n, &off)) {
		kvc_err(err, errlen, "%s: a read of %zu bytes outside the file", gguf_path(f), n);
		return KVC_EINVAL;
	}
	if (fd < 0) {
		memcpy(dst, p, n);
		return KVC_OK;
	}
	for (size_t done = 0; done < n;) {
		ssize_t r = pread(fd, (char *)dst + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			kvc_err(err, errlen, "%s: read at offset %llu: %s", gguf_path(f),
			    (unsigned long long)(off + done), r < 0 ? strerror(errno) : "end of file");
			return KVC_EIO;
		}
		done += (size_t)r;
	}
	return KVC_OK;
}

void
gguf_release(const struct gguf_file *f, const void *p, size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t off;
	uintptr_t a, b;

	if (gguf_fd(f) < 0 || pg <= 0 || !in_file(f, p, n, &off))
		return;
	/* the whole pages inside the range: a page shared with a neighbour stays */
	a = ((uintptr_t)p + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
	b = ((uintptr_t)p + n) / (uintptr_t)pg * (uintptr_t)pg;
	if (b <= a)
		return;
	/*
	 * MADV_RANDOM gives the range a mapping of its own (the flag differs
	 * from its neighbours'), so no 2 MiB mapping spans it again; and a
	 * stray read of it faults in one small window, not a read-ahead.
	 * A failure of either only leaves pages resident.
	 */
	(void)madvise((void *)a, b - a, MADV_RANDOM);
	(void)madvise((void *)a, b - a, MADV_DONTNEED);
}
