/*
 * sub_generate.c: kvchat generate: raw completion (no chat template).
 * Generated text (or ids) to stdout as it comes; timings to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sub_common.h"
#include "engine/engine.h"
#include "sampler/sampler.h"

static const char gen_usage[] =
    "usage: kvchat generate -m FILE [-p TEXT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
    "                       [--min-p P] [--repeat-penalty R] [--seed S] [--ids] [--threads N]\n"
    "                       [--ctx N] [--kv-type f16|f32] [--device auto|cpu|cuda] [--gpu N]\n";

static int
usage(const char *why, const char *arg)
{
	return sub_usage("generate", gen_usage, why, arg);
}

static bool
parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (s[0] == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end != '\0')
		return false;
	*out = v;
	return true;
}

static bool
parse_float(const char *s, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end != '\0' || v != v)
		return false;
	*out = v;
	return true;
}

int
sub_generate(int argc, char **argv)
{
	struct kvc_engine_params ep = kvc_engine_default_params();
	struct kvc_sampler_params sp = kvc_sampler_default_params();
	const char *model = NULL, *prompt = NULL;
	long n_predict = -1, v;
	bool ids = false;
	struct kvc_engine *e = NULL;
	struct kvc_seq *s = NULL;
	struct kvc_sampler *smp = NULL;
	const struct kvc_tokenizer *tok;
	struct kvc_tokens in = { 0 }, hist = { 0 };
	struct kvc_buf text = { 0 };
	struct tok_detok dt;
	struct eng_stats st;
	char err[512] = "";
	int rc = 1, n_gen = 0, n_dec = 0, max_gen;
	double t_start, t_first = 0, t_end;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL, *why;
		bool takes = true;
		int eo;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(gen_usage, stdout);
			return 0;
		} else if (strcmp(a, "--ids") == 0) {
			ids = true;
			takes = false;
		} else if (val == NULL && a[0] == '-') {
			return usage("option needs a value or is unknown", a);
		} else if ((eo = sub_engine_option(a, val, &ep, &why)) != 0) {
			if (eo < 0)
				return usage(why, val);
		} else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
			model = val;
		} else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
			prompt = val;
		} else if (strcmp(a, "-n") == 0) {
			if (!sub_parse_long(val, 0, 1L << 30, &n_predict))
				return usage("bad -n", val);
		} else if (strcmp(a, "--temp") == 0) {
			if (!parse_float(val, &sp.temp))
				return usage("bad --temp", val);
		} else if (strcmp(a, "--top-k") == 0) {
			if (!sub_parse_long(val, -1, 1L << 30, &v))
				return usage("bad --top-k", val);
			sp.top_k = (int)v;
		} else if (strcmp(a, "--top-p") == 0) {
			if (!parse_float(val, &sp.top_p))
				return usage("bad --top-p", val);
		} else if (strcmp(a, "--min-p") == 0) {
			if (!parse_float(val, &sp.min_p))
				return usage("bad --min-p", val);
		} else if (strcmp(a, "--repeat-penalty") == 0) {
			if (!parse_float(val, &sp.repeat_penalty) || sp.repeat_penalty <= 0)
				return usage("bad --repeat-penalty", val);
		} else if (strcmp(a, "--seed") == 0) {
			if (!parse_u64(val, &sp.seed))
				return usage("bad --seed", val);
		} else if (strcmp(a, "--ctx") == 0 || strcmp(a, "-c") == 0) {
			if (!sub_parse_long(val, 0, 1L << 24, &v))
				return usage("bad --ctx", val);
			ep.n_ctx = (int)v;
		} else {
			return usage("unknown argument", a);
		}
		if (takes)
			i++;
	}
	if (model == NULL)
		return usage("no model given (-m FILE)", NULL);

	if (eng_open(&e, model, &ep, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", err);
		return 1;
	}
	tok = eng_tokenizer(e);
	t_start = kvc_now();
	if (prompt) {
		unsigned flags = tok_add_bos_default(tok) ? TOK_ADD_BOS : 0;

		if (tok_encode(tok, prompt, strlen(prompt), flags, &in, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: generate: prompt: %s\n", err);
			goto out;
		}
	}
	if (in.n == 0) {
		if (tok_bos(tok) < 0) {
			fprintf(stderr, "kvchat: generate: the model has no BOS token to start from; give a prompt with -p\n");
			goto out;
		}
		if (kvc_tokens_push(&in, tok_bos(tok)) != 0)
			goto nomem;
	}
	if (in.n > (size_t)eng_n_ctx(e)) {
		fprintf(stderr, "kvchat: generate: the prompt has %zu tokens, the context only %d (--ctx)\n",
		    in.n, eng_n_ctx(e));
		goto out;
	}
	/* The last generated token is never run through the model, so it needs no slot. */
	max_gen = eng_n_ctx(e) - (int)in.n + 1;
	if (n_predict < 0)
		n_predict = 256;
	if (n_predict > max_gen)
		n_predict = max_gen;

	if (smp_new(&smp, &sp, eng_n_vocab(e)) != 0)
		goto nomem;
	if (eng_seq_new(e, &s, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", err);
		goto out;
	}
	if (eng_seq_append(s, in.v, (int)in.n, &st, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: prefill: %s\n", err);
		goto out;
	}
	if (kvc_tokens_append(&hist, in.v, in.n) != 0)
		goto nomem;
	/* A completion continues the prompt, so its first space is kept. */
	tok_detok_init(&dt, prompt ? TOK_DETOK_KEEP_LEADING_SPACE : 0);
	while (n_gen < n_predict) {
		int32_t id = smp_sample(smp, eng_seq_logits(s), hist.v, hist.n);

		if (n_gen == 0)
			t_first = kvc_now();
		if (tok_is_eog(tok, id))
			break;
		n_gen++;
		if (kvc_tokens_push(&hist, id) != 0)
			goto nomem;
		if (ids) {
			printf(n_gen > 1 ? " %d" : "%d", (int)id);
		} else {
			text.n = 0;
			if (tok_detok_push(tok, &dt, id, &text) != 0)
				goto nomem;
			if (text.n)
				fwrite(text.p, 1, text.n, stdout);
		}
		fflush(stdout);
		if (n_gen == n_predict)
			break;
		if (eng_seq_append(s, &id, 1, NULL, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: generate: decode: %s\n", err);
			goto out;
		}
		n_dec++;
	}
	t_end = kvc_now();
	if (!ids) {
		text.n = 0;
		tok_detok_flush(&dt, &text);
		if (text.n)
			fwrite(text.p, 1, text.n, stdout);
	}
	if (ids || isatty(STDOUT_FILENO))
		putchar('\n');
	fflush(stdout);
	if (t_first == 0)
		t_first = t_end;
	fprintf(stderr, "kvchat: %s, %s cache: prompt %zu tokens, prefill %.1f tok/s (%.3f s); "
	    "first token after %.1f ms; %d generated, decode %.1f tok/s\n",
	    eng_backend_name(e), gguf_dtype_name(eng_kv_type(e)), in.n,
	    st.t_prefill > 0 ? (double)st.n_computed / st.t_prefill : 0.0, st.t_prefill,
	    (t_first - t_start) * 1e3, n_gen,
	    n_dec > 0 && t_end > t_first ? n_dec / (t_end - t_first) : 0.0);
	rc = 0;
	goto out;
nomem:
	fprintf(stderr, "kvchat: generate: out of memory\n");
out:
	eng_seq_free(s);
	if (smp)
		smp_free(smp);
	eng_close(e);
	kvc_tokens_free(&in);
	kvc_tokens_free(&hist);
	kvc_buf_free(&text);
	return rc;
}
