/*
 * cmd_model.c: /show (and its views info, parameters, system, template)
 * and /system.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "gguf/gguf.h"
#include "model/model.h"

/* Sizes in one unit system everywhere in /show: binary (KiB, MiB, GiB). */
static const char *
fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int u = -1;

	while (v >= 1024.0 && u < 3) {
		v /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* The weight bytes the file holds: every tensor's data, as stored. */
static uint64_t
file_weight_bytes(const struct gguf_file *f)
{
	uint64_t sum = 0;

	for (int64_t i = 0; i < gguf_n_tensors(f); i++)
		sum += gguf_tensor(f, i)->nbytes;
	return sum;
}

/*
 * The backend's own line ("backend cpu: 2 threads, ...") and, for experts
 * packed as they are chosen or ahead, how many are packed so far
 * ("experts: 40 of 384 packed so far ..."): of what the engine describes,
 * the rest is said above in /show's words.
 */
static void
print_backend_lines(struct kvc_repl *r)
{
	struct kvc_buf d = {0};
	const char *p, *nl;

	eng_describe(r->e, &d);
	for (p = d.p; p != NULL && p < d.p + d.n; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(d.p + d.n - p));
		if (nl == NULL)
			nl = d.p + d.n;
		if (strncmp(p, "backend ", 8) == 0)
			printf("%-12s %.*s\n", "backend", (int)(nl - p - 8), p + 8);
		else if (strncmp(p, "experts: ", 9) == 0 && memmem(p, (size_t)(nl - p), " packed so far", 14) != NULL)
			printf("%-12s %.*s\n", "experts", (int)(nl - p - 9), p + 9);
	}
	kvc_buf_free(&d);
}

static void
show_info(struct kvc_repl *r)
{
	const struct kvc_model *mo = eng_model(r->e);
	const struct kvc_hparams *hp = &mo->hp;
	uint64_t wb = file_weight_bytes(eng_gguf(r->e));
	char b1[32], b2[32], b3[32], t[256], ffn[128];
	int n_open, n_res, n_pos;
	size_t kv = conv_mgr_kv_bytes(r->mgr, &n_open, &n_res);

	(void)conv_stream(r->cur, &n_pos);
	printf("%-12s %s\n", "model", r->model_path);
	model_ffn_desc(hp, ffn, sizeof ffn);
	printf("%-12s %s, %d layers, width %d, %d heads (%d kv, head %d), %s, vocab %d\n",
	    "architecture", model_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_head,
	    hp->n_head_kv, hp->head_dim, ffn, hp->n_vocab);
	printf("%-12s %.1f M\n", "parameters", (double)mo->n_params / 1e6);
	printf("%-12s %s (%" PRIu64 " bytes in the file)\n", "weights", fmt_bytes(wb, b1,
	    sizeof b1), wb);
	printf("%-12s %d of %d positions used (the model was trained with %d)\n", "context",
	    n_pos, eng_n_ctx(r->e), hp->n_ctx_train);
	printf("%-12s %s, %s per position (%s); %s resident for %d of %d "
	    "open conversations (budget %s)\n", "kv cache", gguf_dtype_name(eng_kv_type(r->e)),
	    fmt_bytes(eng_kv_bytes_per_pos(r->e), b1, sizeof b1),
	    eng_kv_window_bytes(r->e) > 0 ? "snapshot" : "memory and snapshot",
	    fmt_bytes(kv, b2, sizeof b2),
	    n_res, n_open, r->kv_budget ? fmt_bytes(r->kv_budget, b3, sizeof b3) : "unlimited");
	if (eng_kv_window_bytes(r->e) > 0)
		printf("%-12s windowed layers bounded: in memory %s per position plus at most %s\n",
		    "", fmt_bytes(eng_kv_mem_bytes_per_pos(r->e), b1, sizeof b1),
		    fmt_bytes(eng_kv_window_bytes(r->e), b2, sizeof b2));
	print_backend_lines(r);
	printf("%-12s %s\n", "fingerprint", eng_fingerprint(r->e));
	printf("%-12s %s\n", "database", r->db_path);
	printf("%-12s %" PRId64 " (%s), %d messages\n", "conversation", conv_id(r->cur),
	    repl_title(conv_title(r->cur), t, sizeof t), conv_n_msgs(r->cur));
}

/* One setting a line, by the names /set takes. */
static void
show_parameters(struct kvc_repl *r)
{
	const struct conv_settings *s = conv_get_settings(r->cur);
	struct kvc_buf v = {0};

	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		v.n = 0;
		if (conv_setting_text(s, &conv_setting_table[i], &v) == 0 && v.p)
			printf("%-15s %.*s\n", conv_setting_table[i].name, (int)v.n, v.p);
	}
	kvc_buf_free(&v);
	printf("%-15s %s\n", "stats line", r->quiet ? "off" : "on");
}

static void
show_system(struct kvc_repl *r)
{
	printf("%s\n", conv_system(r->cur) ? conv_system(r->cur) :
	    "(none: the template's default)");
}

/* The family kvchat renders with; with "template" alone, the file's own text too. */
static void
show_template(struct kvc_repl *r, bool text)
{
	const char *jinja = gguf_get_str(eng_gguf(r->e), "tokenizer.chat_template", NULL);

	printf("%-12s %s (%s)\n", "template", chat_family_name(conv_mgr_family(r->mgr)),
	    conv_mgr_family(r->mgr) == CHAT_JINJA ? "rendered as the file or --chat-template gives it" :
	    jinja ? "the file has a chat template" : "the file has no chat template");
	if (text && jinja)
		printf("%s%s", jinja, jinja[0] && jinja[strlen(jinja) - 1] == '\n' ? "" : "\n");
}

static int
cmd_show_exec(struct kvc_repl *r, const char *args)
{
	if (args[0] == '\0') {
		show_info(r);
		show_template(r, false);
		printf("%-12s ", "system");
		show_system(r);
		printf("\n");
		show_parameters(r);
	} else if (strcmp(args, "info") == 0) {
		show_info(r);
	} else if (strcmp(args, "parameters") == 0) {
		show_parameters(r);
	} else if (strcmp(args, "system") == 0) {
		show_system(r);
	} else if (strcmp(args, "template") == 0) {
		show_template(r, true);
	} else {
		repl_error(r, "usage: /show [info|parameters|system|template]");
		return 1;
	}
	return 0;
}

int
cmd_system_set(struct kvc_repl *r, const char *args)
{
	char err[512];
	bool had;
	int n;

	if (args[0] == '\0') {
		printf("%s\n", conv_system(r->cur) ? conv_system(r->cur) : "(default)");
		return 0;
	}
	had = conv_n_msgs(r->cur) > 0;
	if (conv_change_system(r->cur, args, &n, err, sizeof err)) {
		repl_error(r, "/system: %s", err);
		return 1;
	}
	if (had)
		printf("system prompt changed: %d tokens recomputed\n", n);
	return 0;
}

const struct kvc_cmd_entry cmd_model_entries[] = {
	{ "show", "[info|parameters|system|template]", "model, memory, settings (all by default)",
	    cmd_show_exec },
	{ "system", "TEXT", "set the system prompt (recomputes the conversation)", cmd_system_set },
	{ NULL, NULL, NULL, NULL },
};
