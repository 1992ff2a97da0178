/*
 * help.c: the program's usage and --help texts, and the table of
 * subcommands they list (main.c dispatches on the same table).
 */
#include <stdio.h>

#include "cli.h"

const struct cli_subcommand cli_subcommands[] = {
	{ "tokenize", sub_tokenize, "tokenize -m FILE [--parse-special] [--bos]" },
	{ "detokenize", sub_detokenize, "detokenize -m FILE" },
	{ "template", sub_template, "template (-m FILE | --template FILE) [--add-generation-prompt] [--var NAME=VALUE]... [--ids] < messages.json" },
	{ "info", sub_info, "info -m FILE" },
	{ "generate", sub_generate, "generate -m FILE [-p TEXT | --prompt-ids IDS] [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--ids] [--logprobs K] [--json] [--force IDS] [--threads N]" },
	{ "batch", sub_batch, "batch -m FILE -f PROMPTS.jsonl [-o OUT.jsonl] [--parallel B] [-n N] [--temp T] [--seed S] [--threads N]" },
	{ "serve", sub_serve, "serve -m FILE [--host ADDR] [--port N] [--parallel B] [--db PATH] [--api-key-file F | --no-auth]" },
	{ "bench", sub_bench, "bench -m FILE [-p 512] [-n 128] [-d 0] [--threads N]" },
	{ "perplexity", sub_perplexity, "perplexity -m FILE -f TEXT [-c N] [--chunks K] [--threads N] [--kl-divergence-base FILE [--kl-divergence]]" },
	{ "convert-llama2c", sub_convert_llama2c, "convert-llama2c CHECKPOINT TOKENIZER.bin -o OUT.gguf" },
	{ "backup", sub_backup, "backup [--db PATH] [--force] FILE" },
	{ "recover", sub_recover, "recover IN OUT" },
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

/* The end of --help: environment and what the database file holds. */
static void
help_environment(FILE *f)
{
	fprintf(f,
"Environment:\n"
"  KVCHAT_MODEL     model file used when -m is not given\n"
"  KVCHAT_KERNELS   CPU kernel table: scalar, avx2, avx2vnni, avx512\n"
"                   (x86-64), neon, neondot (aarch64) or auto (default:\n"
"                   the best this CPU runs; one it cannot run, or another\n"
"                   architecture's, is refused)\n"
"  XDG_DATA_HOME    where the database and models folder live\n"
"  XDG_STATE_HOME   where the history file lives\n"
"  NO_COLOR         when set (non-empty), no colour\n"
"  SOURCE_DATE_EPOCH  the time 'kvchat template' shows in strftime_now\n"
"\n"
"Database: every turn is checkpointed into sessions.db, so the file alone\n"
"holds all saved turns; 'kvchat backup FILE' copies it safely while kvchat\n"
"runs, and 'kvchat recover IN OUT' salvages a damaged one. A database that\n"
"cannot be written (read-only file or mount, full disk) opens read-only:\n"
"/list, /resume, /history and /export work, turns are refused.\n"
"\n"
"See kvchat(1).\n");
}

/* The FILES section of --help (the man page's FILES). */
static void
help_files(FILE *f)
{
	fprintf(f,
"\n"
"Files:\n"
"  $XDG_DATA_HOME/kvchat/sessions.db    conversations (default ~/.local/share)\n"
"  $XDG_DATA_HOME/kvchat/models/        models kvchat finds by itself\n"
"  $XDG_STATE_HOME/kvchat/history       line-editing history (default ~/.local/state)\n"
"  also searched for models: ollama's store (~/.ollama/models), the Hugging\n"
"  Face hub cache, LM Studio's models folder\n"
"  Files kvchat writes are created 0600 and its folders 0700; a database\n"
"  folder others can write is refused. ~ is $HOME, or the password database's\n"
"  home when $HOME is unset or relative.\n"
"\n");
}

/*
 * The whole --help text, in one place: man/kvchat.1 documents the same
 * options, commands, files and environment. The chat's /commands come from
 * the caller (the REPL's table): help.c only prints text and calls nothing
 * above it, so the REPL may call it and not the other way round.
 */
void
cli_help(FILE *f, void (*print_commands)(FILE *f))
{
	fprintf(f,
"usage: kvchat [-m MODEL] [options]\n"
"Chat with a local GGUF model in the terminal; conversations are kept in a\n"
"SQLite database with snapshots of their KV cache, so they resume instantly.\n"
"\n"
"Model and engine:\n"
"  -m, --model MODEL       GGUF file or ollama name (qwen2.5:7b); default: pick\n"
"                          from the models found (see FILES)\n"
"  --chat-template NAME|FILE  a built-in family: chatml, llama3, llama2, mistral,\n"
"                          phi3, deepseek, gemma, glm, chatglm3; or a Jinja\n"
"                          template file (default: the model's own template,\n"
"                          rendered as transformers does; a family when it has\n"
"                          none or it cannot be run)\n"
"  --think on|off          the template's enable_thinking (Qwen3, SmolLM3, ...;\n"
"                          default: the template's own; /set think)\n"
"  --reasoning-effort low|medium|high  the template's reasoning_effort (gpt-oss;\n"
"                          /set effort)\n"
"  --show-thinking         print the reasoning when piped too (at a terminal it\n"
"                          streams dimmed; /set show-thinking on|off)\n"
"  --threads N             CPU threads (default: number of cores)\n"
"  --ctx N                 context size in tokens (default: min(model, 8192))\n"
"  --kv-type f16|f32|q8_0  KV cache type (default f16; q8_0: 53%% of the memory\n"
"                          and snapshot bytes; CPU and GPU)\n"
"  --kv-budget SIZE        memory for all resident caches, e.g. 512M, 2G; the\n"
"                          least recently used conversation leaves memory when\n"
"                          it is exceeded (default: half of physical memory;\n"
"                          0 = unlimited)\n"
"  --ctx-overflow drop|stop|slide  full context: drop the oldest exchanges down\n"
"                          to half the context and recompute (default), refuse\n"
"                          the turn, or slide: keep the first --keep positions\n"
"                          and the recent ones, re-rotate them in place,\n"
"                          recompute nothing\n"
"  --keep N                positions slide keeps at the front (default: the\n"
"                          system prompt, or 4)\n"
"  --draft MODEL           speculative decoding: MODEL (same vocabulary)\n"
"                          proposes, one pass of the model verifies; the\n"
"                          replies are the model's own, token for token\n"
"  --lookup N              speculative decoding from n-grams (up to N long)\n"
"                          already in the conversation, no second model\n"
"  --spec-k K              proposals per pass (default 4 with --draft, 8 with\n"
"                          --lookup; at most 16)\n"
"  --device auto|cpu|cuda  backend (default auto: CUDA when a GPU can run the\n"
"                          model, else the CPU with a notice saying why)\n"
"  --gpu N                 CUDA device (default 0)\n"
"\n"
"Conversations:\n"
"  --db PATH               database (default $XDG_DATA_HOME/kvchat/sessions.db)\n"
"  --session NAME          continue the conversation titled NAME, or create it\n"
"  --resume [ID|TITLE]     continue a conversation (default: the most recent\n"
"                          one with messages; a conversation is saved with\n"
"                          its first message); a title several have lists\n"
"                          them and asks for the id; without -m, on the\n"
"                          model it was made with\n"
"  --recap N               on resume, show the last N messages (default 2,\n"
"                          the last exchange; 0 = none)\n"
"  --new [TITLE]           start a new conversation (the default)\n"
"  --system TEXT           system prompt of a new conversation\n"
"  --force-unlock          take over conversation locks held by a kvchat on\n"
"                          another host (or in a copied database), which this\n"
"                          machine cannot check; a holder seen running here is\n"
"                          never taken over\n"
"\n"
"A remote model (no model loaded here; history stored locally, no snapshots):\n"
"  --endpoint URL          chat with an OpenAI-compatible server (vLLM,\n"
"                          SGLang, llama-server, ollama, kvchat serve), e.g.\n"
"                          http://host:8000/v1; takes --db, --resume, --system,\n"
"                          the sampling options (sent when given; else the\n"
"                          server's defaults) and the two below; every /command\n"
"                          works in the chat (/set: what the requests send)\n"
"  --remote-model NAME     the model to ask for (default: the first it lists)\n"
"  --api-key-file F        send the file's first line as the bearer key\n"
"\n"
"Sampling (stored with the conversation; /set changes them):\n"
"  -n, --max-tokens N      cap each reply at N tokens (default: no cap)\n"
"  --temp T                temperature >= 0; 0 = greedy (default 0.8)\n"
"  --top-k K               >= 0 (default 40; 0 = off)\n"
"  --top-p P               in (0, 1] (default 0.95; 1 = off)\n"
"  --min-p P               in [0, 1] (default 0.05; 0 = off)\n"
"  --repeat-penalty R      > 0 (default 1.1; 1 = off)\n"
"  --seed S                random seed (same seed, same text)\n"
"\n"
"Output:\n"
"  --stats-json PATH       append one JSON object per turn to PATH: turn,\n"
"                          conversation_id, title, stop (eos, max tokens,\n"
"                          context full, interrupted), prompt_tokens,\n"
"                          reused_tokens, prefill_tokens, gen_tokens, ttft_ms\n"
"                          (null: no token came), prefill_tps, decode_tps,\n"
"                          context_used, context_total,\n"
"                          resumed_from_snapshot, rebuilt, dropped_tokens,\n"
"                          dropped_messages, recomputed_tokens, recompute_ms,\n"
"                          interrupted (also prefill_tok_s, decode_tok_s,\n"
"                          ctx_used, ctx_size)\n"
"  --no-color              no colour (also when NO_COLOR is set or not a tty)\n"
"  -h, --help              this text\n"
"  --version               print the version and the backends (CUDA: code\n"
"                          built, devices found)\n"
"\n"
"When standard input is not a terminal, each line is one user message (the\n"
"two characters \\n stand for a newline, \\\\ for a backslash); each reply goes\n"
"to stdout followed by an empty line; statistics and notices go to stderr. A\n"
"line that is not UTF-8, holds a NUL byte or is too long for the context is\n"
"reported by its number and skipped. Ctrl-C stops the whole batch, saying\n"
"which line was not answered. Exit status: 0 at end of input, 1 on errors or\n"
"skipped lines, 2 on bad usage, 130 when stopped by Ctrl-C.\n"
"\n"
"Commands in the chat:\n");
	print_commands(f);
	fprintf(f,
"\n"
"Input: end a line with \\ to continue it; wrap several lines in \"\"\" ... \"\"\".\n"
"Ctrl-C stops a reply (the partial reply is kept), a prefill or a rebuild of\n"
"the cache (nothing is stored; the Up key brings the message back), or clears\n"
"the line; Ctrl-D drops an unfinished \"\"\" block, and at an empty prompt leaves.\n"
"\n"
"Other commands:\n");
	for (const struct cli_subcommand *c = cli_subcommands; c->name; c++)
		fprintf(f, "  kvchat %s\n", c->usage);
	help_files(f);
	help_environment(f);
}
