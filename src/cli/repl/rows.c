/*
 * rows.c: reading a stored conversation row for display without trusting
 * it. The database may have been edited by hand, by another program or by
 * a damaged disk: a title can hold invalid UTF-8 or terminal escapes, a
 * settings text can be unreadable. /list shows such a row cleaned and says
 * what is wrong with it, instead of failing or writing raw bytes to the
 * terminal.
 */
#include <stdio.h>
#include <string.h>

#include "repl.h"

/* U+FFFD, in place of a byte that is not UTF-8. */
#define REPLACEMENT "\xef\xbf\xbd"

/* Bytes of the UTF-8 character lead starts (a valid one). */
static size_t
char_len(unsigned char lead)
{
	return lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
}

/* C0 and C1 control characters and DEL: what moves a terminal's cursor or worse. */
static bool
is_control(const char *p)
{
	unsigned char c = (unsigned char)p[0];

	return c < 0x20 || c == 0x7f || (c == 0xc2 && (unsigned char)p[1] < 0xa0);
}

bool
repl_clean_text(const char *in, char *out, size_t len)
{
	size_t n = strlen(in), o = 0, k, valid;
	bool clean = true, full = len == 0;
	const char *put;

	for (size_t i = 0; i < n;) {
		valid = kvc_utf8_valid_prefix(in + i, n - i);
		if (valid == 0) {
			put = REPLACEMENT;	/* one byte that is not UTF-8 */
			k = 3;
			i++;
			clean = false;
		} else if (is_control(in + i)) {
			put = "?";
			i += char_len((unsigned char)in[i]);
			k = 1;
			clean = false;
		} else {
			put = in + i;
			k = char_len((unsigned char)in[i]);
			i += k;
		}
		if (!full && o + k < len) {
			memcpy(out + o, put, k);
			o += k;
		} else {
			full = true;
		}
	}
	if (len > 0)
		out[o] = '\0';
	return clean;
}

const char *
repl_conv_damage(const struct sess_conv *c, char *buf, size_t len)
{
	char why[256];
	size_t n = 0;

	buf[0] = '\0';
	if (c->title == NULL)
		n += (size_t)snprintf(buf, len, "no title");
	else if (!repl_clean_text(c->title, NULL, 0))
		n += (size_t)snprintf(buf, len, "the title is not clean UTF-8 text");
	if (n < len && conv_settings_check(c->settings, why, sizeof why) != KVC_OK)
		n += (size_t)snprintf(buf + n, len - n, "%sthe settings: %s", n ? "; " : "", why);
	return n ? buf : NULL;
}
