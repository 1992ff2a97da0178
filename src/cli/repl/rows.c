/*
 * rows.c: reading a stored conversation row for display without trusting
 * it. The database may have been edited by hand, by another program or by
 * a damaged disk: a title can hold invalid UTF-8 or terminal escapes, a
 * settings text can be unreadable. /list shows such a row cleaned and says
 * what is wrong with it, instead of failing or writing raw bytes to the
 * terminal. The rows as /list shows them, and a conversation named by id
 * or title (/resume, /delete, --resume, --session).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "repl.h"
#include "cli/colour.h"

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
repl_title(const char *title, char *buf, size_t len)
{
	(void)repl_clean_text(title ? title : "", buf, len);
	return buf;
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

void
repl_print_conv_row(struct kvc_repl *r, FILE *f, const struct sess_conv *c, bool cur)
{
	bool bold = r->color && cur && f == stdout;
	time_t t = (time_t)c->updated;
	char when[32], title[256], bad[512];
	struct tm tm;

	if (localtime_r(&t, &tm) == NULL || strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm) == 0)
		snprintf(when, sizeof when, "%-16s", "(no date)");
	(void)repl_clean_text(c->title ? c->title : "", title, sizeof title);
	fprintf(f, "%s%c %4" PRId64 "  %s  %4d msgs  %s%s%s\n", kvc_sgr(bold, KVC_SGR_BOLD),
	    cur ? '*' : ' ', c->id, when, c->n_msgs, title,
	    repl_conv_damage(c, bad, sizeof bad) ? "  (damaged)" : "",
	    kvc_sgr(bold, KVC_SGR_RESET));
}

/*
 * After a title that names none: the titles that start with it (at most
 * five, most recent first), so "--resume Pal" shows "Palettes" and its id
 * rather than only failing. Never taken for the user: a prefix may be a
 * new title on its way (--session) or a typo.
 */
static void
suggest_prefix(struct kvc_repl *r, const struct sess_conv *v, int n, const char *args)
{
	size_t len = strlen(args);
	char t[256];
	int shown = 0;

	for (int i = 0; i < n && shown < 5 && len > 0; i++) {
		if (v[i].title == NULL || strncmp(v[i].title, args, len) != 0)
			continue;
		(void)repl_clean_text(v[i].title, t, sizeof t);
		repl_error(r, "%s '%s' (id %lld)", shown ? "      " : "  titles that start so:", t,
		    (long long)v[i].id);
		shown++;
	}
}

int
repl_pick_conv(struct kvc_repl *r, const char *what, const char *args, FILE *f, int64_t *id)
{
	struct sess_conv *v;
	char err[512], title[256];
	const char *p;
	int n, hits = 0;

	for (p = args; *p >= '0' && *p <= '9'; p++)
		;
	if (*p == '\0' && sess_conv_find(r->st, args, id, err, sizeof err) == 0)
		return 0;	/* an id (or a numeric title) */
	if (sess_conv_list(r->st, &v, &n, err, sizeof err)) {
		repl_error(r, "%s: %s", what, err);
		return KVC_EIO;
	}
	for (int i = 0; i < n; i++)
		if (v[i].title && strcmp(v[i].title, args) == 0 && hits++ == 0)
			*id = v[i].id;
	(void)repl_clean_text(args, title, sizeof title);
	if (hits > 1) {
		repl_error(r, "%s: %d conversations are titled '%s'; give the id:", what, hits, title);
		for (int i = 0; i < n; i++)
			if (v[i].title && strcmp(v[i].title, args) == 0)
				repl_print_conv_row(r, f, &v[i], r->cur && conv_id(r->cur) == v[i].id);
		fflush(f);
	} else if (hits == 0) {
		repl_error(r, "%s: no conversation with id or title '%s'", what, title);
		suggest_prefix(r, v, n, args);
	}
	sess_conv_list_free(v, n);
	return hits == 1 ? 0 : hits > 1 ? KVC_EINVAL : KVC_ENOTFOUND;
}
