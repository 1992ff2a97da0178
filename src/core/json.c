/* json.c: JSON string literals (escaping) for the JSON the program writes. */
#include "kvc.h"

int
kvc_json_str(struct kvc_buf *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t run = 0;	/* bytes at p[i - run .. i) that need no escape */
	int rc;

	if ((rc = kvc_buf_append(b, "\"", 1)) != KVC_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		const char *esc = NULL;

		switch (p[i]) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		default:
			if (p[i] >= 0x20) {
				run++;
				continue;
			}
		}
		/* Copy the plain bytes before this one in one piece. */
		if (run > 0 && (rc = kvc_buf_append(b, p + i - run, run)) != KVC_OK)
			return rc;
		run = 0;
		rc = esc ? kvc_buf_append(b, esc, 2) : kvc_buf_printf(b, "\\u%04x", p[i]);
		if (rc != KVC_OK)
			return rc;
	}
	if (run > 0 && (rc = kvc_buf_append(b, p + n - run, run)) != KVC_OK)
		return rc;
	return kvc_buf_append(b, "\"", 1);
}
