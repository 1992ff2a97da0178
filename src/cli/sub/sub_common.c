/*
 * sub_common.c: option parsing shared by kvchat generate, bench and
 * perplexity, and the log-softmax generate and perplexity score with.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "sub_common.h"
#include "cli/progress.h"
#include "cli/repl/repl.h"

int
sub_usage(const char *name, const char *usage, const char *why, const char *arg)
{
	if (why)
		fprintf(stderr, "kvchat: %s: %s%s%s\n", name, why, arg ? ": " : "", arg ? arg : "");
	fputs(usage, stderr);
	return 2;
}

/*
 * sub_eng_open's Ctrl-C: the one piece of state its handler touches, handed
 * to the load as its interrupt flag and read nowhere else.
 */
static volatile sig_atomic_t load_sigint;

static void
on_load_sigint(int sig)
{
	(void)sig;
	load_sigint = 1;
}

int
sub_eng_open(struct kvc_engine **e, const char *path, struct kvc_engine_params *ep, char *err,
    size_t errlen)
{
	struct kvc_progress bar;
	struct sigaction sa, old;
	bool caught = false;
	int rc;

	/* only where Ctrl-C would kill us: a SIGINT ignored (a background job) stays so */
	load_sigint = 0;
	if (sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_load_sigint;
		sigemptyset(&sa.sa_mask);
		caught = sigaction(SIGINT, &sa, NULL) == 0;
	}
	progress_start_load(&bar);
	ep->progress = progress_load;
	ep->progress_arg = &bar;
	ep->notice = progress_notice;
	ep->notice_arg = &bar;
	ep->interrupt = caught ? &load_sigint : NULL;
	rc = eng_open(e, path, ep, err, errlen);
	progress_end(&bar);
	if (caught)
		sigaction(SIGINT, &old, NULL);
	/* a Ctrl-C between the load's last look at the flag and the handler's removal */
	if (rc == KVC_OK && load_sigint) {
		eng_close(*e);
		*e = NULL;
		kvc_err(err, errlen, "interrupted while loading the weights");
		rc = KVC_EINTR;
	}
	/* the bar and the flag are gone: a draft model opened later with ep uses neither */
	ep->progress = NULL;
	ep->progress_arg = NULL;
	ep->notice_arg = NULL;
	ep->interrupt = NULL;
	return rc;
}

int
sub_open_draft(struct kvc_engine *main, const char *path, const struct kvc_engine_params *ep,
    struct kvc_engine **de, struct kvc_seq **ds)
{
	struct kvc_engine_params p = *ep;
	char err[512] = "";

	*de = NULL;
	*ds = NULL;
	p.n_ctx = eng_n_ctx(main);
	if (eng_open(de, path, &p, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: draft model: %s\n", err);
		return 1;
	}
	if (!eng_same_vocab(main, *de)) {
		fprintf(stderr, "kvchat: draft model %s: its vocabulary differs from the model's\n", path);
	} else if (eng_seq_new(*de, ds, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: draft model: %s\n", err);
	} else {
		return 0;
	}
	eng_close(*de);
	*de = NULL;
	return 1;
}

int
sub_engine_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why)
{
	long v;

	if (strcmp(opt, "--threads") == 0 || strcmp(opt, "-t") == 0) {
		if (kvc_parse_long(val, 0, 1024, &v) != KVC_OK) {
			*why = "bad --threads";
			return -1;
		}
		ep->n_threads = (int)v;
		repl_cap_threads(ep);
	} else if (strcmp(opt, "--kv-type") == 0) {
		if (eng_kv_type_parse(val, &ep->kv_type) != KVC_OK) {
			*why = "bad --kv-type (f16, f32 or q8_0)";
			return -1;
		}
	} else if (strcmp(opt, "--device") == 0) {
		ep->device = val;
	} else if (strcmp(opt, "--gpu") == 0) {
		if (kvc_parse_long(val, 0, 1024, &v) != KVC_OK) {
			*why = "bad --gpu";
			return -1;
		}
		ep->gpu = (int)v;
	} else {
		return 0;
	}
	return 1;
}

int
sub_ctx_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why)
{
	long v;

	if (strcmp(opt, "--ctx") != 0 && strcmp(opt, "-c") != 0)
		return 0;
	if (kvc_parse_long(val, 0, 1L << 24, &v) != KVC_OK) {
		*why = "bad --ctx";
		return -1;
	}
	ep->n_ctx = (int)v;
	return 1;
}

double
sub_log_sum_exp(const float *x, int n)
{
	double mx = x[0], s = 0;
	int i;

	for (i = 1; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	for (i = 0; i < n; i++)
		s += exp((double)x[i] - mx);
	return mx + log(s);
}

double
sub_log_softmax(const float *logits, int n, int tok)
{
	return (double)logits[tok] - sub_log_sum_exp(logits, n);
}
