/*
 * fuzz_jinja.c: libFuzzer entry for the chat-template renderer. The input
 * is a template (a GGUF's tokenizer.chat_template is attacker-controlled);
 * it is parsed and, when accepted, rendered over a small conversation with
 * the variables real templates read, under tight bounds so each input runs
 * in milliseconds. Any crash, sanitizer report, leak or hang is a bug: a
 * template must only ever render or be refused with a message.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "core/kvc.h"
#include "jinja/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char vars_json[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
	" {\"role\": \"user\", \"content\": \"Hi \\\"there\\\" 你好\"},"
	" {\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nHello\","
	"  \"reasoning_content\": \"hm\", \"tool_calls\": [{\"id\": \"abc123def\", \"function\":"
	"  {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
	" {\"role\": \"tool\", \"content\": \"42\"},"
	" {\"role\": \"user\", \"content\": \"Thanks\"}],"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\":"
	"  {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}}}}],"
	" \"add_generation_prompt\": true, \"enable_thinking\": false,"
	" \"reasoning_effort\": \"high\", \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static json_t *vars;
	static struct jinja_var v[16];
	static size_t nv;
	struct jinja_limits lim = jinja_default_limits();
	struct jinja_tmpl *t;
	struct kvc_buf out = {0};
	char err[256];
	const char *key;
	json_t *val;

	if (!vars) {
		if ((vars = json_loads(vars_json, JSON_REJECT_DUPLICATES, NULL)) == NULL)
			__builtin_trap();
		json_object_foreach(vars, key, val)
			if (nv < 16)
				v[nv++] = (struct jinja_var){ key, val };
	}
	lim.max_steps = 200000;
	lim.max_output = 1 << 20;
	lim.max_memory = 64 << 20;
	if (jinja_parse((const char *)data, size, &lim, &t, err, sizeof err) != 0)
		return 0;
	(void)jinja_render(t, v, nv, 0, &out, err, sizeof err);
	kvc_buf_free(&out);
	jinja_free(t);
	return 0;
}
