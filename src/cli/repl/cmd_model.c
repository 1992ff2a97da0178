/* cmd_model.c: /show (model, memory, settings) and /system. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "cli/discover.h"
#include "model/model.h"

static int
cmd_show_exec(struct kvc_repl *r, const char *args)
{
	const struct kvc_model *mo = eng_model(r->e);
	const struct conv_settings *s = conv_get_settings(r->cur);
	struct kvc_buf d = {0};
	char b1[32], b2[32], seed[24] = "random";
	int n_open, n_res, n_pos;
	size_t kv = conv_mgr_kv_bytes(r->mgr, &n_open, &n_res);

	(void)conv_stream(r->cur, &n_pos);
	if (s->smp.seed != KVC_SEED_RANDOM)
		snprintf(seed, sizeof seed, "%" PRIu64, s->smp.seed);
	printf("model       %s\n", r->model_path);
	printf("            %s, %d layers, width %d, %d heads (%d kv), vocab %d, %s\n",
	    model_arch_name(mo->hp.arch), mo->hp.n_layer, mo->hp.n_embd, mo->hp.n_head,
	    mo->hp.n_head_kv, mo->hp.n_vocab, disc_format_size(mo->weight_bytes, b1, sizeof b1));
	printf("fingerprint %s\n", eng_fingerprint(r->e));
	printf("backend     %s\n", eng_backend_name(r->e));
	printf("template    %s\n", chat_family_name(conv_mgr_family(r->mgr)));
	printf("context     %d of %d positions, cache %s, %zu bytes per position "
	    "(memory and snapshot)\n", n_pos, eng_n_ctx(r->e), eng_kv_type_name(eng_kv_type(r->e)),
	    eng_kv_bytes_per_pos(r->e));
	printf("caches      %s in %d of %d open conversations (budget %s)\n",
	    disc_format_size(kv, b1, sizeof b1), n_res, n_open,
	    r->kv_budget ? disc_format_size(r->kv_budget, b2, sizeof b2) : "unlimited");
	eng_describe(r->e, &d);
	if (d.n)
		printf("%s%s", d.p, d.p[d.n - 1] == '\n' ? "" : "\n");
	kvc_buf_free(&d);
	printf("conversation %" PRId64 " (%s), %d messages\n", conv_id(r->cur), conv_title(r->cur),
	    conv_n_msgs(r->cur));
	printf("system      %s\n", conv_system(r->cur) ? conv_system(r->cur) : "(default)");
	printf("settings    temperature %g top_k %d top_p %g min_p %g repeat_penalty %g "
	    "seed %s max_tokens %d\n", (double)s->smp.temp, s->smp.top_k,
	    (double)s->smp.top_p, (double)s->smp.min_p, (double)s->smp.repeat_penalty,
	    seed, s->max_tokens);
	printf("database    %s\n", r->db_path);
	return 0;
}

static int
cmd_system_exec(struct kvc_repl *r, const char *args)
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
	{ "show", "", "model, memory, settings", cmd_show_exec },
	{ "system", "TEXT", "set the system prompt (recomputes the conversation)", cmd_system_exec },
	{ NULL, NULL, NULL, NULL },
};
