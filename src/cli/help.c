/*
 * help.c: the program's usage and --help texts, and the table of
 * subcommands they list (main.c dispatches on the same table).
 */
#include <stdio.h>

#include "cli.h"
#include "cli/repl/cmd.h"

const struct cli_subcommand cli_subcommands[] = {
	{ "tokenize", sub_tokenize, "tokenize -m FILE [--parse-special] [--bos]" },
	{ "detokenize", sub_detokenize, "detokenize -m FILE" },
	{ "info", sub_info, "info -m FILE" },
	{ "generate", sub_generate, "generate -m FILE [-p TEXT | --prompt-ids IDS] [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--ids] [--logprobs K] [--json] [--force IDS] [--threads N]" },
	{ "bench", sub_bench, "bench -m FILE [-p 512] [-n 128] [--threads N]" },
	{ "perplexity", sub_perplexity, "perplexity -m FILE -f TEXT [-c N] [--chunks K] [--threads N]" },
	{ "convert-llama2c", sub_convert_llama2c, "convert-llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf" },
	{ NULL, NULL, NULL },
};

void
cli_usage(FILE *f)
{
	fprintf(f, "usage: kvchat [-m MODEL] [options]          chat (see kvchat(1))\n");
	for (const struct cli_subcommand *c = cli_subcommands; c->name; c++)
		fprintf(f, "       kvchat %s\n", c->usage);
	fprintf(f, "       kvchat --help | --version\n");
}

/*
 * The whole --help text, in one place: man/kvchat.1 documents the same
 * options, commands, files and environment.
 */
void
cli_help(FILE *f)
{
	fprintf(f,
"usage: kvchat [-m MODEL] [options]\n"
"Chat with a local GGUF model in the terminal; conversations are kept in a\n"
"SQLite database with snapshots of their KV cache, so they resume instantly.\n"
"\n"
"Model and engine:\n"
"  -m, --model MODEL       GGUF file or ollama name (qwen2.5:7b); default: pick\n"
"                          from the models found (see FILES)\n"
"  --chat-template NAME    chatml, llama3, llama2, mistral, phi3, deepseek, gemma,\n"
"                          glm\n"
"                          (default: detected from the model)\n"
"  --threads N             CPU threads (default: number of cores)\n"
"  --ctx N                 context size in tokens (default: min(model, 8192))\n"
"  --kv-type f16|f32       KV cache type (default f16)\n"
"  --kv-budget SIZE        memory for all resident caches, e.g. 512M, 2G; the\n"
"                          least recently used conversation leaves memory when\n"
"                          it is exceeded (default: half of physical memory;\n"
"                          0 = unlimited)\n"
"  --ctx-overflow drop|stop  full context: drop the oldest exchanges and\n"
"                          recompute (default), or refuse the turn\n"
"  --device auto|cpu|cuda  backend (default auto)\n"
"  --gpu N                 CUDA device (default 0)\n"
"\n"
"Conversations:\n"
"  --db PATH               database (default $XDG_DATA_HOME/kvchat/sessions.db)\n"
"  --session NAME          continue the conversation titled NAME, or create it\n"
"  --resume [ID|TITLE]     continue a conversation (default: the most recent)\n"
"  --new [TITLE]           start a new conversation (the default)\n"
"  --system TEXT           system prompt of a new conversation\n"
"\n"
"Sampling (stored with the conversation; /set changes them):\n"
"  -n, --max-tokens N      cap each reply at N tokens (default: no cap)\n"
"  --temp T                temperature; 0 = greedy (default 0.8)\n"
"  --top-k K               (default 40; 0 = off)\n"
"  --top-p P               (default 0.95; 1 = off)\n"
"  --min-p P               (default 0.05; 0 = off)\n"
"  --repeat-penalty R      (default 1.1; 1 = off)\n"
"  --seed S                random seed (same seed, same text)\n"
"\n"
"Output:\n"
"  --stats-json PATH       append one JSON object per turn to PATH: turn,\n"
"                          conversation_id, title, prompt_tokens, reused_tokens,\n"
"                          prefill_tokens, gen_tokens, ttft_ms, prefill_tps,\n"
"                          decode_tps, context_used, context_total,\n"
"                          resumed_from_snapshot, rebuilt, dropped_tokens,\n"
"                          interrupted (also prefill_tok_s, decode_tok_s,\n"
"                          ctx_used, ctx_size)\n"
"  --no-color              no colour (also when NO_COLOR is set or not a tty)\n"
"  -h, --help              this text\n"
"  --version               print the version\n"
"\n"
"When standard input is not a terminal, each line is one user message (the\n"
"two characters \\n stand for a newline); each reply goes to stdout followed\n"
"by an empty line; statistics and notices go to stderr. Exit status: 0 at\n"
"end of input, 1 on errors, 2 on bad usage.\n"
"\n"
"Commands in the chat:\n");
	cmd_print_help(f);
	fprintf(f,
"\n"
"Input: end a line with \\ to continue it; wrap several lines in \"\"\" ... \"\"\".\n"
"Ctrl-C stops a reply (the partial reply is kept) or clears the line; Ctrl-D\n"
"leaves.\n"
"\n"
"Other commands:\n");
	for (const struct cli_subcommand *c = cli_subcommands; c->name; c++)
		fprintf(f, "  kvchat %s\n", c->usage);
	fprintf(f,
"\n"
"Files:\n"
"  $XDG_DATA_HOME/kvchat/sessions.db    conversations (default ~/.local/share)\n"
"  $XDG_DATA_HOME/kvchat/models/        models kvchat finds by itself\n"
"  $XDG_STATE_HOME/kvchat/history       line-editing history (default ~/.local/state)\n"
"  also searched for models: ollama's store (~/.ollama/models), the Hugging\n"
"  Face hub cache, LM Studio's models folder\n"
"\n"
"Environment:\n"
"  KVCHAT_MODEL     model file used when -m is not given\n"
"  XDG_DATA_HOME    where the database and models folder live\n"
"  XDG_STATE_HOME   where the history file lives\n"
"  NO_COLOR         when set (non-empty), no colour\n"
"\n"
"See kvchat(1).\n");
}
