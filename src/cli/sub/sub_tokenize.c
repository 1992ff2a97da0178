/*
 * sub_tokenize.c: `kvchat tokenize` and `kvchat detokenize`, the stable
 * command-line contract tests and benchmarks use:
 *
 *   kvchat tokenize -m FILE [--parse-special] [--bos]
 *	all of stdin (UTF-8) -> token ids on one line, single spaces, newline
 *   kvchat detokenize -m FILE
 *	whitespace-separated ids on stdin -> text (special tokens' text included)
 *
 * Exit status: 0 ok, 1 error (bad model, invalid UTF-8, bad id), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* What separates the ids detokenize reads. */
#define ID_SPACE " \t\n\r"

static int
read_all(FILE *in, struct kvc_buf *b)
{
	char chunk[65536];
	size_t n;

	while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
		if (kvc_buf_append(b, chunk, n) != KVC_OK)
			return KVC_ENOMEM;
	return ferror(in) ? KVC_EIO : KVC_OK;
}

static int
load_tokenizer(const char *path, struct kvc_tokenizer **tok)
{
	struct gguf_file *f;
	char err[512];

	if (gguf_open(&f, path, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		return 1;
	}
	if (tok_load(tok, f, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: %s\n", err);
		gguf_close(f);
		return 1;
	}
	gguf_close(f);
	return 0;
}

/* Parse -m FILE plus the flags this command allows; 0 ok, 2 usage. */
static int
parse_args(int argc, char **argv, bool allow_flags, const char **path, bool *special, bool *bos)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "parse-special", no_argument, NULL, 's' },
		{ "bos", no_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			*path = optarg;
			break;
		case 's':
			if (!allow_flags)
				goto unknown;
			*special = true;
			break;
		case 'b':
			if (!allow_flags)
				goto unknown;
			*bos = true;
			break;
		case 'h':
			return -1;
		default:
			goto unknown;
		}
	}
	if (*path == NULL) {
		fprintf(stderr, "kvchat %s: -m FILE is required\n", argv[0]);
		return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "kvchat %s: unexpected argument '%s'\n", argv[0], argv[optind]);
		return 2;
	}
	return 0;
unknown:
	fprintf(stderr, "kvchat %s: unknown option '%s'\n", argv[0], argv[optind - 1]);
	return 2;
}

static void
usage(FILE *f, bool tokenize)
{
	if (tokenize)
		fprintf(f, "usage: kvchat tokenize -m FILE [--parse-special] [--bos] < text\n");
	else
		fprintf(f, "usage: kvchat detokenize -m FILE < ids\n");
}

int
sub_tokenize(int argc, char **argv)
{
	const char *path = NULL;
	bool special = false, bos = false;
	struct kvc_tokenizer *tok = NULL;
	struct kvc_buf in = { 0 }, line = { 0 };
	struct kvc_tokens ids = { 0 };
	char err[512];
	int rc = parse_args(argc, argv, true, &path, &special, &bos), status = 1;

	if (rc != 0) {
		usage(rc < 0 ? stdout : stderr, true);
		return rc < 0 ? 0 : 2;
	}
	if (load_tokenizer(path, &tok) != 0)
		return 1;
	if (read_all(stdin, &in) != KVC_OK) {
		fprintf(stderr, "kvchat: reading standard input: %s\n", strerror(errno));
		goto out;
	}
	rc = tok_encode(tok, in.p ? in.p : "", in.n, (special ? TOK_PARSE_SPECIAL : 0) |
	    (bos ? TOK_ADD_BOS : 0), &ids, err, sizeof err);
	if (rc != KVC_OK) {
		fprintf(stderr, "kvchat: standard input: %s\n", err);
		goto out;
	}
	for (size_t i = 0; i < ids.n; i++)
		if (kvc_buf_printf(&line, i ? " %d" : "%d", ids.v[i]) != KVC_OK) {
			fprintf(stderr, "kvchat: out of memory\n");
			goto out;
		}
	if (kvc_buf_append(&line, "\n", 1) != KVC_OK) {
		fprintf(stderr, "kvchat: out of memory\n");
		goto out;
	}
	if (fwrite(line.p, 1, line.n, stdout) != line.n || fflush(stdout) != 0) {
		fprintf(stderr, "kvchat: writing standard output: %s\n", strerror(errno));
		goto out;
	}
	status = 0;
out:
	kvc_buf_free(&in);
	kvc_buf_free(&line);
	kvc_tokens_free(&ids);
	tok_free(tok);
	return status;
}

int
sub_detokenize(int argc, char **argv)
{
	const char *path = NULL;
	bool special = false, bos = false;
	struct kvc_tokenizer *tok = NULL;
	struct kvc_buf in = { 0 }, text = { 0 };
	struct tok_detok d;
	int rc = parse_args(argc, argv, false, &path, &special, &bos), status = 1;
	char *p, *end;

	if (rc != 0) {
		usage(rc < 0 ? stdout : stderr, false);
		return rc < 0 ? 0 : 2;
	}
	if (load_tokenizer(path, &tok) != 0)
		return 1;
	if (read_all(stdin, &in) != KVC_OK || kvc_buf_append(&in, "", 1) != KVC_OK) {
		fprintf(stderr, "kvchat: reading standard input failed\n");
		goto out;
	}
	tok_detok_init(&d, TOK_DETOK_SPECIAL);
	for (p = in.p;;) {
		long v;
		char c;

		p += strspn(p, ID_SPACE);
		if (*p == '\0')
			break;
		/* One id: cut it out of the text while it is parsed. */
		end = p + strcspn(p, ID_SPACE);
		c = *end;
		*end = '\0';
		rc = kvc_parse_long(p, 0, tok_n_vocab(tok) - 1, &v);
		*end = c;
		if (rc != KVC_OK) {
			fprintf(stderr, "kvchat: standard input: '%.20s' is not a token id of this vocabulary (0..%d)\n",
			    p, tok_n_vocab(tok) - 1);
			goto out;
		}
		if (tok_detok_push(tok, &d, (int32_t)v, &text) != KVC_OK) {
			fprintf(stderr, "kvchat: out of memory\n");
			goto out;
		}
		p = end;
	}
	if (tok_detok_flush(&d, &text) != KVC_OK) {
		fprintf(stderr, "kvchat: out of memory\n");
		goto out;
	}
	if (fwrite(text.p ? text.p : "", 1, text.n, stdout) != text.n || fflush(stdout) != 0) {
		fprintf(stderr, "kvchat: writing standard output: %s\n", strerror(errno));
		goto out;
	}
	status = 0;
out:
	kvc_buf_free(&in);
	kvc_buf_free(&text);
	tok_free(tok);
	return status;
}
