/*
 * progress.h: a progress bar on stderr for long loads and restores.
 *
 * The bar is drawn only when stderr is a terminal and the operation has been
 * running for more than KVC_PROGRESS_DELAY seconds (a fast load prints
 * nothing); redraws are throttled; progress_end clears the line, so nothing
 * of the bar is left behind in the scrollback.
 */
#ifndef KVC_PROGRESS_H
#define KVC_PROGRESS_H

#include "core/kvc.h"

#define KVC_PROGRESS_DELAY 0.5	/* seconds before the bar appears */

struct kvc_progress {
	char label[48];		/* "loading weights", "restoring snapshot" */
	int fd;			/* where to draw (2 = stderr) */
	bool enabled;		/* fd is a terminal */
	bool shown;		/* something has been drawn and must be cleared */
	uint64_t total;		/* units of work (bytes, positions); 0 = unknown */
	uint64_t done;
	double t0;		/* kvc_now() at start, seconds */
	double t_last;		/* last redraw, seconds */
	int width;		/* terminal columns at start */
	bool rate;		/* positions: drawn as counts, rate and time left, not a bar */
	long delay_ms;		/* progress_load's sleep per report (KVCHAT_TEST_LOAD_DELAY_MS) */
};

/* Start an operation of total units (0 if unknown) on stderr. */
void progress_start(struct kvc_progress *p, const char *label, uint64_t total);
/* Same on another descriptor; force = draw even if fd is not a terminal and with no delay (tests). */
void progress_start_fd(struct kvc_progress *p, int fd, bool force, const char *label,
    uint64_t total);
/* Record progress; redraws at most every 0.1 s. total != 0 updates the total. */
void progress_set(struct kvc_progress *p, uint64_t done, uint64_t total);
/*
 * The callback shape of kvc_engine_params.progress: arg is a struct
 * kvc_progress that progress_start has set up.
 */
void progress_update(void *arg, uint64_t done, uint64_t total);
/*
 * A model's load: the "loading weights" bar on stderr, and progress_load,
 * its kvc_engine_params.progress callback. For tests only,
 * KVCHAT_TEST_LOAD_DELAY_MS makes progress_load sleep that long (a signal
 * ends the sleep) before each report, so that a small model's load lasts
 * long enough to be seen and interrupted (tests/e2e/test_load_interrupt.sh).
 */
void progress_start_load(struct kvc_progress *p);
void progress_load(void *arg, uint64_t done, uint64_t total);
/*
 * The callback shape of kvc_engine_params.notice: "kvchat: MSG" on stderr,
 * the bar's line (arg: a struct kvc_progress, or NULL) cleared first; the
 * bar is drawn again at its next update.
 */
void progress_notice(void *arg, const char *msg);
/* Clear the bar's line if one was drawn. */
void progress_end(struct kvc_progress *p);

/*
 * The conversation layer's work (prefill, rebuild) in cache positions:
 * "prefill 1200/3651 positions, 210 tok/s, ETA 12s"; into buf, no escapes.
 */
void progress_format_rate(char *buf, size_t len, const char *label, uint64_t done,
    uint64_t total, double elapsed);
/* Start drawing work in positions (progress_format_rate's line) on stderr. */
void progress_start_rate(struct kvc_progress *p, const char *label, uint64_t total);

/* Render the bar text for a given state into buf (no escapes); for tests. */
void progress_format(char *buf, size_t len, const char *label, uint64_t done,
    uint64_t total, double elapsed, int width);

#endif
