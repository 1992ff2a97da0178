/*
 * wrap.c: word wrapping of a streamed reply at the terminal's width (see
 * wrap.h). Moving a word uses three plain VT100 controls every terminal
 * kvchat runs on has: CR, cursor forward (CSI n C) and erase to the end of
 * the row (CSI K). A row is never written past its last column, so the
 * terminal's own wrap (and its "pending wrap" state at the last column,
 * which terminals treat differently) only ever meets a CR or a newline.
 */
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <utf8proc.h>

#include "wrap.h"

/* Tab stops every 8 columns, as terminals set them. */
#define TAB 8

int
kvc_wrap_width(int fd)
{
	struct winsize ws;

	if (!isatty(fd) || ioctl(fd, TIOCGWINSZ, &ws) != 0)
		return 0;
	return ws.ws_col;
}

void
kvc_wrap_begin(struct kvc_wrap *w, int width)
{
	memset(w, 0, sizeof *w);
	w->width = width > 1 ? width : 0;
}

/* A word begins after column col (nothing of it written yet). */
static void
word_reset(struct kvc_wrap *w)
{
	w->word_col = w->col;
	w->nword = 0;
	w->word_lost = false;
}

static void
word_add(struct kvc_wrap *w, const char *s, size_t n)
{
	if (w->nword + n > sizeof w->word) {
		w->word_lost = true;
		return;
	}
	memcpy(w->word + w->nword, s, n);
	w->nword += n;
}

static void
new_row(struct kvc_wrap *w, FILE *f)
{
	fputc('\n', f);
	w->col = 0;
	word_reset(w);
}

/*
 * Room for a character of cw columns on this row: the word it continues
 * moves to the next row when it fits there (it began after column 0 and
 * is short enough), else the row ends here and the word is broken.
 */
static void
make_room(struct kvc_wrap *w, FILE *f, int cw)
{
	int len = w->col - w->word_col;

	if (w->col + cw <= w->width)
		return;
	if (w->nword > 0 && !w->word_lost && w->word_col > 0 && len + cw <= w->width) {
		fputc('\r', f);
		fprintf(f, "\033[%dC\033[K\n", w->word_col);
		fwrite(w->word, 1, w->nword, f);
		w->col = len;
		w->word_col = 0;
		return;
	}
	new_row(w, f);
}

/* One whole character s[0..n) (one byte for ASCII). */
static void
put_char(struct kvc_wrap *w, FILE *f, const char *s, size_t n)
{
	unsigned char c = (unsigned char)s[0];
	utf8proc_int32_t cp;
	int cw;

	if (w->esc != 0 || c == 0x1b) {
		/* an escape sequence (the dimmed reasoning's colours): no columns */
		if (c == 0x1b)
			w->esc = 1;
		else if (w->esc == 1)
			w->esc = c == '[' ? 2 : 0;
		else if (c >= 0x40 && c <= 0x7e)
			w->esc = 0;
		fwrite(s, 1, n, f);
		word_add(w, s, n);
		return;
	}
	if (c == '\n' || c == '\r') {
		fputc(c, f);
		w->col = 0;
		word_reset(w);
		return;
	}
	if (c == ' ' || c == '\t') {
		int to = c == ' ' ? w->col + 1 : (w->col / TAB + 1) * TAB;

		if (to > w->width) {
			new_row(w, f);	/* the blank becomes the row's end */
			return;
		}
		fputc(c, f);
		w->col = to;
		word_reset(w);
		return;
	}
	if (utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp) < 0)
		cw = 1;		/* not UTF-8: the terminal shows one replacement */
	else if (cp < 0x20 || cp == 0x7f)
		cw = 0;
	else
		cw = utf8proc_charwidth(cp);
	if (cw >= 2) {
		/* wide (CJK): a row may end before any of them */
		if (w->col + cw > w->width)
			new_row(w, f);
		fwrite(s, 1, n, f);
		w->col += cw;
		word_reset(w);
		return;
	}
	make_room(w, f, cw);
	fwrite(s, 1, n, f);
	w->col += cw;
	word_add(w, s, n);
}

/* Bytes of the UTF-8 character lead begins (1 for a byte that begins none). */
static size_t
char_len(unsigned char lead)
{
	return lead >= 0xf0 && lead < 0xf8 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
}

void
kvc_wrap_put(struct kvc_wrap *w, FILE *f, const char *s, size_t n)
{
	size_t i = 0;

	if (w->width == 0) {
		fwrite(s, 1, n, f);
		return;
	}
	/* a character cut by the last piece's end, completed first */
	while (w->npart > 0 && i < n) {
		size_t need = char_len((unsigned char)w->part[0]);

		w->part[w->npart++] = s[i++];
		if (w->npart == need || ((unsigned char)s[i - 1] & 0xc0) != 0x80) {
			put_char(w, f, w->part, w->npart);
			w->npart = 0;
		}
	}
	while (i < n) {
		size_t k = char_len((unsigned char)s[i]);

		if (i + k > n) {
			memcpy(w->part, s + i, n - i);
			w->npart = n - i;
			return;
		}
		put_char(w, f, s + i, k);
		i += k;
	}
}
