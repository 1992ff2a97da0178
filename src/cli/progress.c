/* progress.c: the load/restore progress bar. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "progress.h"

#define REDRAW_INTERVAL 0.1	/* seconds: a terminal need not see more */

static int
term_width(int fd)
{
	struct winsize ws;

	if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

void
progress_start_fd(struct kvc_progress *p, int fd, bool force, const char *label,
    uint64_t total)
{
	memset(p, 0, sizeof *p);
	snprintf(p->label, sizeof p->label, "%s", label ? label : "");
	p->fd = fd;
	p->enabled = force || isatty(fd);
	p->total = total;
	p->t0 = kvc_now();
	/* Forcing also drops the delay, so tests see a bar at once. */
	if (force)
		p->t0 -= KVC_PROGRESS_DELAY;
	p->t_last = 0;
	p->width = p->enabled ? term_width(fd) : 80;
}

void
progress_start(struct kvc_progress *p, const char *label, uint64_t total)
{
	progress_start_fd(p, STDERR_FILENO, false, label, total);
}

void
progress_format(char *buf, size_t len, const char *label, uint64_t done,
    uint64_t total, double elapsed, int width)
{
	char tail[48];
	int bar, fill, n;

	if (len == 0)
		return;
	if (total == 0) {
		snprintf(buf, len, "%s ... %.1fs", label, elapsed);
		return;
	}
	if (done > total)
		done = total;
	double frac = (double)done / (double)total;
	snprintf(tail, sizeof tail, " %3d%% %.1fs", (int)(frac * 100.0), elapsed);
	/* label, space, [bar], tail; keep one column free so no line wraps. */
	bar = width - 1 - (int)strlen(label) - 1 - 2 - (int)strlen(tail);
	if (bar > 50)
		bar = 50;
	if (bar < 5) {
		snprintf(buf, len, "%s%s", label, tail);
		return;
	}
	fill = (int)(frac * bar);
	n = snprintf(buf, len, "%s [", label);
	for (int i = 0; i < bar && n >= 0 && (size_t)n + 1 < len; i++)
		buf[n++] = i < fill ? '#' : (i == fill ? '>' : '.');
	if (n >= 0 && (size_t)n < len) {
		buf[n] = '\0';
		snprintf(buf + n, len - (size_t)n, "]%s", tail);
	}
}

void
progress_format_rate(char *buf, size_t len, const char *label, uint64_t done,
    uint64_t total, double elapsed)
{
	double tps = elapsed > 0 ? (double)done / elapsed : 0;

	if (done > total)
		done = total;
	if (tps > 0)
		snprintf(buf, len, "%s %" PRIu64 "/%" PRIu64 " positions, %.0f tok/s, ETA %.0fs",
		    label, done, total, tps, (double)(total - done) / tps);
	else
		snprintf(buf, len, "%s %" PRIu64 "/%" PRIu64 " positions", label, done, total);
}

void
progress_start_rate(struct kvc_progress *p, const char *label, uint64_t total)
{
	progress_start(p, label, total);
	p->rate = true;
}

static void
write_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;	/* a progress bar is not worth an error */
		s += w;
		n -= (size_t)w;
	}
}

static void
draw(struct kvc_progress *p, double now)
{
	char line[256], out[272];
	int n;

	if (p->rate)
		progress_format_rate(line, sizeof line, p->label, p->done, p->total, now - p->t0);
	else
		progress_format(line, sizeof line, p->label, p->done, p->total,
		    now - p->t0, p->width < (int)sizeof line ? p->width : (int)sizeof line - 1);
	/* \r then the line then erase-to-end: shorter redraws leave no debris. */
	n = snprintf(out, sizeof out, "\r%s\033[K", line);
	if (n > 0)
		write_all(p->fd, out, (size_t)n < sizeof out ? (size_t)n : sizeof out - 1);
	p->shown = true;
	p->t_last = now;
}

void
progress_set(struct kvc_progress *p, uint64_t done, uint64_t total)
{
	double now;

	if (p == NULL)
		return;
	p->done = done;
	if (total != 0)
		p->total = total;
	if (!p->enabled)
		return;
	now = kvc_now();
	if (now - p->t0 < KVC_PROGRESS_DELAY)
		return;
	if (p->shown && now - p->t_last < REDRAW_INTERVAL && done < p->total)
		return;
	draw(p, now);
}

void
progress_update(void *arg, uint64_t done, uint64_t total)
{
	progress_set(arg, done, total);
}

void
progress_start_load(struct kvc_progress *p)
{
	const char *v = getenv("KVCHAT_TEST_LOAD_DELAY_MS");

	progress_start(p, "loading weights", 0);
	if (v == NULL || kvc_parse_long(v, 0, 10000, &p->delay_ms) != KVC_OK)
		p->delay_ms = 0;
}

void
progress_load(void *arg, uint64_t done, uint64_t total)
{
	struct kvc_progress *p = arg;

	/* before the report: a delayed load draws its bar at the first one */
	if (p->delay_ms > 0) {
		struct timespec ts = { p->delay_ms / 1000, p->delay_ms % 1000 * 1000000L };

		nanosleep(&ts, NULL);
	}
	progress_set(p, done, total);
}

void
progress_notice(void *arg, const char *msg)
{
	struct kvc_progress *p = arg;

	if (p != NULL && p->shown) {
		write_all(p->fd, "\r\033[K", 4);
		p->shown = false;
	}
	fprintf(stderr, "kvchat: %s\n", msg);
}

void
progress_end(struct kvc_progress *p)
{
	if (p == NULL)
		return;
	if (p->shown)
		write_all(p->fd, "\r\033[K", 4);
	p->shown = false;
	p->enabled = false;
}
