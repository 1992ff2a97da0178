/*
 * sub_template.c: `kvchat template`, a chat template rendered as the chat
 * renders it, for users debugging a model and for the tests:
 *
 *   kvchat template (-m FILE | --template FILE) [--add-generation-prompt]
 *		     [--var NAME=VALUE]... [--ids] < messages.json
 *
 * Standard input is a JSON array of messages ({"role", "content", ...}) or
 * an object whose members are the variables (messages, tools, ...). With
 * -m the template is the file's tokenizer.chat_template (--template
 * overrides it) and bos_token / eos_token are its tokens' text. --var
 * NAME=VALUE sets one variable: VALUE as JSON when it parses as JSON
 * (true, 3, "x", [...]), else as a string; it wins over standard input.
 * strftime_now shows SOURCE_DATE_EPOCH when set, else the current time.
 * --ids prints the rendered text's token ids (special tokens parsed, no BOS
 * added: the template writes its own) instead of the text.
 *
 * Exit status: 0 ok, 1 error (unreadable model or template, bad JSON, a
 * template that fails or refuses the messages), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/sub/sub_common.h"
#include "gguf/gguf.h"
#include "jinja/jinja.h"
#include "tokenizer/tokenizer.h"

#define USAGE "usage: kvchat template (-m FILE | --template FILE) [--add-generation-prompt]\n" \
	      "                       [--var NAME=VALUE]... [--ids] < messages.json\n"
#define MAX_VARS 64

struct tmpl_opts {
	const char *model, *template;
	bool agp, ids;
	const char *var[MAX_VARS];	/* NAME=VALUE as given */
	int n_var;
};

static int
read_stream(FILE *in, struct kvc_buf *b)
{
	char chunk[65536];
	size_t n;

	while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
		if (kvc_buf_append(b, chunk, n) != KVC_OK)
			return KVC_ENOMEM;
	return ferror(in) ? KVC_EIO : KVC_OK;
}

static int
read_path(const char *path, struct kvc_buf *b)
{
	FILE *f = fopen(path, "rb");
	int rc;

	if (!f) {
		fprintf(stderr, "kvchat template: %s: %s\n", path, strerror(errno));
		return 1;
	}
	rc = read_stream(f, b);
	fclose(f);
	if (rc != KVC_OK) {
		fprintf(stderr, "kvchat template: %s: read failed\n", path);
		return 1;
	}
	return 0;
}

static int
parse_opts(int argc, char **argv, struct tmpl_opts *o)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "template", required_argument, NULL, 't' },
		{ "add-generation-prompt", no_argument, NULL, 'g' },
		{ "var", required_argument, NULL, 'v' },
		{ "ids", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 't': o->template = optarg; break;
		case 'g': o->agp = true; break;
		case 'i': o->ids = true; break;
		case 'v':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return sub_usage("template", USAGE, "--var wants NAME=VALUE", optarg);
			if (o->n_var == MAX_VARS)
				return sub_usage("template", USAGE, "too many --var", NULL);
			o->var[o->n_var++] = optarg;
			break;
		case 'h':
			fputs(USAGE, stdout);
			return -1;
		default:
			return sub_usage("template", USAGE, "unknown option", argv[optind - 1]);
		}
	}
	if (optind != argc)
		return sub_usage("template", USAGE, "unexpected argument", argv[optind]);
	if (!o->model && !o->template)
		return sub_usage("template", USAGE, "-m FILE or --template FILE is required", NULL);
	if (o->ids && !o->model)
		return sub_usage("template", USAGE, "--ids needs -m FILE (its vocabulary)", NULL);
	return 0;
}

/* What the render needs beside the options: the model's pieces, the text. */
struct tmpl_ctx {
	struct gguf_file *f;
	struct kvc_tokenizer *tok;
	struct kvc_buf src, in;
	json_t *stdin_json;
	json_t *var_json[MAX_VARS];
	char *var_name[MAX_VARS];
	json_t *bos, *eos, *agp;
	struct jinja_var vars[4 + 256 + MAX_VARS];	/* defaults, standard input, --var */
	size_t n;
};

/* How standard input and --var values are read: any value, NULs in strings kept (as
 * Python's json.loads keeps them), a key given twice refused rather than one dropped. */
#define TMPL_JSON_FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES)

static void
ctx_free(struct tmpl_ctx *c)
{
	kvc_buf_free(&c->src);
	kvc_buf_free(&c->in);
	json_decref(c->stdin_json);
	for (int i = 0; i < MAX_VARS; i++) {
		json_decref(c->var_json[i]);
		free(c->var_name[i]);
	}
	json_decref(c->bos);
	json_decref(c->eos);
	json_decref(c->agp);
	tok_free(c->tok);
	if (c->f)
		gguf_close(c->f);
}

static int
load_model(const struct tmpl_opts *o, struct tmpl_ctx *c)
{
	char err[512];
	const char *piece = NULL;
	size_t len = 0;
	int32_t id;

	if (gguf_open(&c->f, o->model, err, sizeof err) != KVC_OK ||
	    tok_load(&c->tok, c->f, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat template: %s\n", err);
		return 1;
	}
	/* The pieces as the vocabulary has them, bytes unchecked: the template sees
	 * what the tokenizer would write (the render never writes them out as JSON). */
	if ((id = tok_bos(c->tok)) >= 0)
		piece = tok_piece(c->tok, id, &len);
	c->bos = id >= 0 && piece ? json_stringn_nocheck(piece, len) : json_string("");
	piece = NULL;
	if ((id = tok_eos(c->tok)) >= 0)
		piece = tok_piece(c->tok, id, &len);
	c->eos = id >= 0 && piece ? json_stringn_nocheck(piece, len) : json_string("");
	if (!c->bos || !c->eos) {
		fprintf(stderr, "kvchat template: out of memory\n");
		return 1;
	}
	c->vars[c->n++] = (struct jinja_var){ "bos_token", c->bos };
	c->vars[c->n++] = (struct jinja_var){ "eos_token", c->eos };
	if (!o->template) {
		const char *t = gguf_get_str(c->f, "tokenizer.chat_template", NULL);

		if (!t) {
			fprintf(stderr, "kvchat template: %s has no tokenizer.chat_template (give --template FILE)\n",
				o->model);
			return 1;
		}
		if (kvc_buf_append(&c->src, t, strlen(t)) != KVC_OK)
			return 1;
	}
	return 0;
}

/* Standard input's variables, then --var's, after the defaults. */
static int
collect_vars(const struct tmpl_opts *o, struct tmpl_ctx *c)
{
	json_error_t je;
	const char *key;
	json_t *v;

	c->agp = json_boolean(o->agp);
	c->vars[c->n++] = (struct jinja_var){ "add_generation_prompt", c->agp };
	if (read_stream(stdin, &c->in) != KVC_OK) {
		fprintf(stderr, "kvchat template: reading standard input failed\n");
		return 1;
	}
	if (c->in.n > 0) {
		c->stdin_json = json_loadb(c->in.p, c->in.n, TMPL_JSON_FLAGS, &je);
		if (c->stdin_json == NULL) {
			fprintf(stderr, "kvchat template: standard input: JSON: %s (line %d, column %d)\n",
				je.text, je.line, je.column);
			return 1;
		}
		if (json_is_array(c->stdin_json)) {
			c->vars[c->n++] = (struct jinja_var){ "messages", c->stdin_json };
		} else if (json_is_object(c->stdin_json) && json_object_size(c->stdin_json) <= 256) {
			json_object_foreach(c->stdin_json, key, v)
				c->vars[c->n++] = (struct jinja_var){ key, v };
		} else {
			fprintf(stderr, "kvchat template: standard input must be a JSON array of messages "
				"or an object of at most 256 variables\n");
			return 1;
		}
	}
	for (int i = 0; i < o->n_var; i++) {
		const char *eq = strchr(o->var[i], '=');

		c->var_name[i] = strndup(o->var[i], (size_t)(eq - o->var[i]));
		if (!c->var_name[i])
			return 1;
		/* VALUE as JSON if it is JSON, else the text as a string. */
		c->var_json[i] = json_loads(eq + 1, TMPL_JSON_FLAGS, NULL);
		if (c->var_json[i] == NULL)
			c->var_json[i] = json_string(eq + 1);
		if (c->var_json[i] == NULL) {
			fprintf(stderr, "kvchat template: --var %s: the value is not valid UTF-8\n",
				c->var_name[i]);
			return 1;
		}
		c->vars[c->n++] = (struct jinja_var){ c->var_name[i], c->var_json[i] };
	}
	return 0;
}

static int
print_ids(const struct tmpl_ctx *c, const struct kvc_buf *text)
{
	struct kvc_tokens ids = {0};
	struct kvc_buf line = {0};
	char err[512];
	int rc = tok_encode(c->tok, text->p ? text->p : "", text->n, TOK_PARSE_SPECIAL, &ids, err, sizeof err);

	for (size_t i = 0; rc == KVC_OK && i < ids.n; i++)
		rc = kvc_buf_printf(&line, i ? " %d" : "%d", ids.v[i]);
	if (rc == KVC_OK)
		rc = kvc_buf_append(&line, "\n", 1);
	if (rc == KVC_OK && (fwrite(line.p, 1, line.n, stdout) != line.n || fflush(stdout) != 0))
		rc = KVC_EIO;
	if (rc != KVC_OK)
		fprintf(stderr, "kvchat template: %s\n", rc == KVC_EFORMAT ? err : kvc_strerror(rc));
	kvc_tokens_free(&ids);
	kvc_buf_free(&line);
	return rc == KVC_OK ? 0 : 1;
}

static int64_t
render_time(void)
{
	const char *e = getenv("SOURCE_DATE_EPOCH");
	long v;

	if (e && kvc_parse_long(e, 0, 253402300799L, &v) == KVC_OK)
		return v;
	return (int64_t)time(NULL);
}

int
sub_template(int argc, char **argv)
{
	struct tmpl_opts o = {0};
	struct tmpl_ctx *c;
	struct jinja_tmpl *t = NULL;
	struct kvc_buf out = {0};
	char err[512];
	int rc = parse_opts(argc, argv, &o), status = 1;

	if (rc != 0)
		return rc < 0 ? 0 : rc;
	c = calloc(1, sizeof(*c));
	if (!c) {
		fprintf(stderr, "kvchat template: out of memory\n");
		return 1;
	}
	if ((o.model && load_model(&o, c) != 0) || (o.template && read_path(o.template, &c->src) != 0) ||
	    collect_vars(&o, c) != 0)
		goto done;
	if (jinja_parse(c->src.p ? c->src.p : "", c->src.n, NULL, &t, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat template: %s: %s\n", o.template ? o.template : "tokenizer.chat_template", err);
		goto done;
	}
	if (jinja_render(t, c->vars, c->n, render_time(), &out, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat template: %s\n", err);
		goto done;
	}
	if (o.ids) {
		status = print_ids(c, &out);
	} else if (fwrite(out.p ? out.p : "", 1, out.n, stdout) != out.n || fflush(stdout) != 0) {
		fprintf(stderr, "kvchat template: writing standard output: %s\n", strerror(errno));
	} else {
		status = 0;
	}
done:
	jinja_free(t);
	kvc_buf_free(&out);
	ctx_free(c);
	free(c);
	return status;
}
