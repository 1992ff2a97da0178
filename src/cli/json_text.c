/* json_text.c: strings that may not be UTF-8 as JSON values, and a value as a line. */
#include <stdlib.h>
#include <string.h>

#include "cli/json_text.h"

/* U+FFFD, in place of a byte that is not UTF-8. */
#define REPLACEMENT "\xef\xbf\xbd"

json_t *
cli_json_text(const char *s, size_t n)
{
	struct kvc_buf b = {0};
	json_t *j;
	size_t i = 0;

	if (s == NULL || n == 0)
		return json_string("");
	if (kvc_utf8_valid_prefix(s, n) == n)
		return json_stringn(s, n);
	/* jansson refuses invalid UTF-8 outright: mend it, one U+FFFD per bad byte */
	while (i < n) {
		size_t ok = kvc_utf8_valid_prefix(s + i, n - i);
		bool bad = ok < n - i;

		if (kvc_buf_append(&b, s + i, ok) != KVC_OK ||
		    (bad && kvc_buf_append(&b, REPLACEMENT, 3) != KVC_OK)) {
			kvc_buf_free(&b);
			return NULL;
		}
		i += ok + (bad ? 1 : 0);
	}
	j = json_stringn(b.p, b.n);
	kvc_buf_free(&b);
	return j;
}

json_t *
cli_json_cstr(const char *s)
{
	return cli_json_text(s, s ? strlen(s) : 0);
}

void
cli_json_put(json_t *o, const char *key, json_t *v, bool *bad)
{
	if (json_object_set_new(o, key, v) != 0)
		*bad = true;
}

int
cli_json_line(const json_t *v, size_t flags, struct kvc_buf *b)
{
	char *s = json_dumps(v, JSON_COMPACT | flags);
	int rc;

	if (s == NULL)
		return KVC_ENOMEM;
	rc = kvc_buf_append(b, s, strlen(s));
	rc = rc ? rc : kvc_buf_append(b, "\n", 1);
	free(s);
	return rc;
}
