/*
 * chat_detect.c: the families' names, and which family a model file's
 * template (or, without one, its architecture and vocabulary) implies.
 * chat.c renders them and calls down into this file, never the reverse.
 */
#include <string.h>
#include "chat.h"
#include "gguf/gguf.h"

#define QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static const char *const names[CHAT_FAMILY_COUNT] = {
	[CHAT_CHATML] = "chatml", [CHAT_LLAMA3] = "llama3", [CHAT_LLAMA2] = "llama2",
	[CHAT_MISTRAL] = "mistral", [CHAT_PHI3] = "phi3", [CHAT_DEEPSEEK] = "deepseek",
	[CHAT_GEMMA] = "gemma", [CHAT_GLM] = "glm", [CHAT_CHATGLM3] = "chatglm3",
};

const char *
chat_family_name(enum chat_family f)
{
	if (f == CHAT_JINJA)
		return "jinja";
	if ((unsigned)f >= CHAT_FAMILY_COUNT)
		return "?";
	return names[f];
}

int
chat_family_from_name(const char *name)
{
	static const struct { const char *alias; enum chat_family f; } aliases[] = {
		{ "qwen", CHAT_CHATML }, { "qwen2", CHAT_CHATML }, { "llama-3", CHAT_LLAMA3 },
		{ "llama31", CHAT_LLAMA3 }, { "llama-2", CHAT_LLAMA2 }, { "phi-3", CHAT_PHI3 },
		{ "deepseek2", CHAT_DEEPSEEK }, { "gemma2", CHAT_GEMMA }, { "chatglm4", CHAT_GLM },
		{ "glm4", CHAT_GLM }, { "glm3", CHAT_CHATGLM3 },
	};
	size_t i;

	if (name == NULL)
		return -1;
	if (strcmp(name, "jinja") == 0)
		return CHAT_JINJA;
	for (i = 0; i < CHAT_FAMILY_COUNT; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	for (i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
		if (strcmp(name, aliases[i].alias) == 0)
			return (int)aliases[i].f;
	return -1;
}

int
chat_detect(const char *jinja)
{
	if (jinja == NULL)
		return -1;
	/* Most specific markers first: each family's own control tokens. */
	if (strstr(jinja, "<|im_start|>"))
		return CHAT_CHATML;
	if (strstr(jinja, "<|start_header_id|>") && strstr(jinja, "<|end_header_id|>"))
		return CHAT_LLAMA3;
	if (strstr(jinja, "<start_of_turn>"))
		return CHAT_GEMMA;
	if (strstr(jinja, "<|assistant|>") && strstr(jinja, "<|end|>"))
		return CHAT_PHI3;
	/* GLM-4 writes its prefix "[gMASK]<sop>", ChatGLM3 "[gMASK]sop" (llama.cpp tells them apart the same way) */
	if (strstr(jinja, "[gMASK]<sop>"))
		return CHAT_GLM;
	if (strstr(jinja, "[gMASK]sop"))
		return CHAT_CHATGLM3;
	if (strstr(jinja, "[INST]"))
		return strstr(jinja, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
	if (strstr(jinja, "User: ") && strstr(jinja, "Assistant:"))
		return CHAT_DEEPSEEK;
	return -1;
}

int
chat_family_for_arch(const char *arch, const char *tok_model)
{
	if (arch == NULL)
		return -1;
	/* gemma, gemma2, gemma3: every Gemma release uses <start_of_turn> */
	if (strncmp(arch, "gemma", 5) == 0)
		return CHAT_GEMMA;
	if (strcmp(arch, "phi3") == 0)
		return CHAT_PHI3;
	/*
	 * llama.cpp files both ChatGLM3 and GLM-4 under "chatglm"; ChatGLM3's
	 * vocabulary is SentencePiece ("llama"), GLM-4's byte-level BPE
	 * ("gpt2"). GLM-4-0414 and later are "glm4".
	 */
	if (strcmp(arch, "chatglm") == 0 && tok_model != NULL && strcmp(tok_model, "llama") == 0)
		return CHAT_CHATGLM3;
	if (strcmp(arch, "chatglm") == 0 || strcmp(arch, "glm4") == 0)
		return CHAT_GLM;
	return -1;
}

int
chat_family_for_file(const struct gguf_file *f, const char **jinja)
{
	const char *t = gguf_get_str(f, "tokenizer.chat_template", NULL);

	if (jinja != NULL)
		*jinja = t;
	if (t != NULL)
		return chat_detect(t);
	return chat_family_for_arch(gguf_get_str(f, "general.architecture", NULL),
	    gguf_get_str(f, "tokenizer.ggml.model", NULL));
}

const char *
chat_default_system(enum chat_family f, const char *jinja)
{
	if (f == CHAT_CHATML && jinja != NULL && strstr(jinja, QWEN_SYSTEM) != NULL)
		return QWEN_SYSTEM;
	return NULL;
}

const char *const *
chat_stop_strings(enum chat_family f)
{
	/* DeepSeek's turns are plain text: a model that skips its EOS writes "User:" next. */
	static const char *const deepseek[] = { "User:", NULL };

	return f == CHAT_DEEPSEEK ? deepseek : NULL;
}
