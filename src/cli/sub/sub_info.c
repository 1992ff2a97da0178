/* sub_info.c: `kvchat info -m FILE`, a readable summary of a GGUF model. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "chat/chat.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void
info_usage(FILE *f)
{
	fprintf(f, "usage: kvchat info -m FILE\n");
}

static void
print_size(const char *label, double v)
{
	const char *unit = "";

	if (v >= 1e9) {
		v /= 1e9;
		unit = "B";
	} else if (v >= 1e6) {
		v /= 1e6;
		unit = "M";
	} else if (v >= 1e3) {
		v /= 1e3;
		unit = "K";
	}
	printf("%-18s %.2f%s\n", label, v, unit);
}

/* Key "<arch>.<suffix>" as an integer, or def. */
static int64_t
arch_int(const struct gguf_file *f, const char *arch, const char *suffix, int64_t def)
{
	char key[256];

	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	return gguf_get_int(f, key, def);
}

/*
 * The experts line: count, used, width, the shared expert, leading dense
 * layers (glm4moe), the routing when it is not a softmax. Widths come from
 * the tensors of the first layer that has experts: keys may be absent.
 */
static void
print_experts(const struct gguf_file *f, const char *arch)
{
	const struct gguf_tensor *ex = NULL, *sh = NULL;
	int64_t n_layer = arch_int(f, arch, "block_count", 0);
	int64_t dense = arch_int(f, arch, "leading_dense_block_count", 0);
	int64_t gating = arch_int(f, arch, "expert_gating_func", strcmp(arch, "glm4moe") == 0 ? 2 : 1);
	char name[96];

	for (int64_t il = 0; il < n_layer && il < 4096 && ex == NULL; il++) {
		snprintf(name, sizeof name, "blk.%lld.ffn_up_exps.weight", (long long)il);
		ex = gguf_find_tensor(f, name);
		snprintf(name, sizeof name, "blk.%lld.ffn_up_shexp.weight", (long long)il);
		sh = gguf_find_tensor(f, name);
	}
	printf("%-18s %lld, %lld used per token", "experts", (long long)arch_int(f, arch, "expert_count", 0),
	    (long long)arch_int(f, arch, "expert_used_count", 0));
	if (ex != NULL)
		printf(", %lld wide", (long long)ex->ne[1]);
	if (sh != NULL)
		printf("; shared expert %lld wide", (long long)sh->ne[1]);
	if (dense > 0)
		printf("; first %lld layer%s dense", (long long)dense, dense == 1 ? "" : "s");
	if (gating == 2)
		printf("; sigmoid routing");
	printf("\n");
}

static void
print_special(const struct kvc_tokenizer *t, const char *label, int32_t id)
{
	size_t len;
	const char *s;

	if (id < 0)
		return;
	s = tok_piece(t, id, &len);
	printf("  %-16s %d %.*s\n", label, id, s ? (int)len : 0, s ? s : "");
}

int
sub_info(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *arch, *tmpl;
	struct gguf_file *f;
	struct kvc_tokenizer *tok = NULL;
	char err[512];
	uint64_t n_params = 0, bytes = 0, type_count[GGML_TYPE_COUNT] = { 0 };
	int c, fam;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': path = optarg; break;
		case 'h': info_usage(stdout); return 0;
		default:
			fprintf(stderr, "kvchat info: unknown option '%s'\n", argv[optind - 1]);
			info_usage(stderr);
			return 2;
		}
	}
	if (path == NULL || optind != argc) {
		info_usage(stderr);
		return 2;
	}
	if (gguf_open(&f, path, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: %s\n", err);
		return 1;
	}
	arch = gguf_get_str(f, "general.architecture", "?");
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor(f, i);
		uint64_t n = 1;
		for (int d = 0; d < 4; d++)
			n *= (uint64_t)t->ne[d];
		n_params += n;
		bytes += t->nbytes;
		type_count[t->type]++;
	}
	printf("%-18s %s\n", "file", path);
	printf("%-18s GGUF v%u, %lld keys, %lld tensors\n", "format", gguf_version(f),
	    (long long)gguf_n_kv(f), (long long)gguf_n_tensors(f));
	printf("%-18s %s\n", "name", gguf_get_str(f, "general.name", "?"));
	printf("%-18s %s\n", "architecture", arch);
	print_size("parameters", (double)n_params);
	print_size("tensor bytes", (double)bytes);
	printf("%-18s", "tensor types");
	for (int t = 0; t < GGML_TYPE_COUNT; t++)
		if (type_count[t])
			printf(" %s x%llu", gguf_dtype_name((enum gguf_dtype)t), (unsigned long long)type_count[t]);
	printf("\n");
	printf("%-18s %lld\n", "context length", (long long)arch_int(f, arch, "context_length", 0));
	printf("%-18s %lld\n", "embedding", (long long)arch_int(f, arch, "embedding_length", 0));
	printf("%-18s %lld", "layers", (long long)arch_int(f, arch, "block_count", 0));
	if (arch_int(f, arch, "nextn_predict_layers", 0) > 0)
		printf(" (the last %lld for multi-token prediction, not run)",
		    (long long)arch_int(f, arch, "nextn_predict_layers", 0));
	printf("\n");
	printf("%-18s %lld (kv %lld)\n", "heads", (long long)arch_int(f, arch, "attention.head_count", 0),
	    (long long)arch_int(f, arch, "attention.head_count_kv",
		arch_int(f, arch, "attention.head_count", 0)));
	printf("%-18s %lld\n", "feed-forward", (long long)arch_int(f, arch, "feed_forward_length", 0));
	if (arch_int(f, arch, "expert_count", 0) > 0)
		print_experts(f, arch);

	if (gguf_find_key(f, "tokenizer.ggml.model") < 0) {
		printf("%-18s none\n", "vocabulary");
	} else if (tok_load(&tok, f, err, sizeof err) != 0) {
		printf("%-18s %s (%s)\n", "vocabulary", gguf_get_str(f, "tokenizer.ggml.model", "?"), err);
	} else {
		printf("%-18s %s, %d tokens%s%s\n", "vocabulary", tok_model_name(tok), tok_n_vocab(tok),
		    *tok_pre_name(tok) ? ", pre-tokenizer " : "", tok_pre_name(tok));
		printf("special tokens\n");
		print_special(tok, "bos", tok_bos(tok));
		print_special(tok, "eos", tok_eos(tok));
		print_special(tok, "eot", (int32_t)gguf_get_int(f, "tokenizer.ggml.eot_token_id", -1));
		print_special(tok, "padding", (int32_t)gguf_get_int(f, "tokenizer.ggml.padding_token_id", -1));
		printf("  %-16s %s\n", "add bos", tok_add_bos_default(tok) ? "yes" : "no");
	}
	tmpl = gguf_get_str(f, "tokenizer.chat_template", NULL);
	if (tmpl == NULL && (fam = chat_family_for_arch(gguf_get_str(f, "general.architecture", NULL),
	    gguf_get_str(f, "tokenizer.ggml.model", NULL))) >= 0) {
		printf("%-18s none in file (%s, from the architecture)\n", "chat template",
		    chat_family_name((enum chat_family)fam));
	} else if (tmpl == NULL) {
		printf("%-18s none in file (chatml will be used)\n", "chat template");
	} else {
		fam = chat_detect(tmpl);
		printf("%-18s %s\n", "chat template", fam >= 0 ? chat_family_name((enum chat_family)fam) :
		    "unrecognised (chatml will be used)");
	}
	tok_free(tok);
	gguf_close(f);
	return 0;
}
