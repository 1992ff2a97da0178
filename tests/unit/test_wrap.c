/*
 * test_wrap.c: a streamed reply wrapped at word boundaries (src/cli/wrap.c).
 * What kvc_wrap_put writes is played on a small terminal (the VT100 subset
 * it may use, with an xterm's autowrap: a character past the last column
 * goes to the next row), then checked against the text: every character
 * shown once and in order, the terminal never had to wrap a row itself, a
 * row ends inside a word only where the word is longer than a row or at a
 * wide character. Texts come in pieces cut at random bytes (inside UTF-8
 * characters and escape sequences too). Width 0 writes the bytes unchanged.
 */
#include "test.h"

#include <utf8proc.h>

#include "cli/wrap.h"

#define ROWS 400
#define COLS 128

/* The terminal: each cell the index in the text of the character it shows (-1 none). */
struct term {
	int w, row, col;
	bool pending;		/* at the last column, written: the next character wraps */
	int cell[ROWS][COLS];
	int autowraps;		/* rows the terminal wrapped itself */
};

/* Code points of the text, and for each whether it is blank, its width. */
struct text {
	utf8proc_int32_t cp[4096];
	int n;
};

static void
decode(const char *s, struct text *t)
{
	t->n = 0;
	for (size_t i = 0, n = strlen(s); i < n;) {
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
		    (utf8proc_ssize_t)(n - i), &t->cp[t->n]);

		t->n++;
		i += k > 0 ? (size_t)k : 1;
	}
}

/* Plays out[0..n) on the terminal; each shown character is matched to the text's next one. */
static void
play(struct term *tm, const char *out, size_t n, const struct text *t)
{
	int next = 0;

	memset(tm->cell, -1, sizeof tm->cell);
	tm->row = tm->col = tm->autowraps = 0;
	tm->pending = false;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)out[i];
		utf8proc_int32_t cp;

		if (c == 0x1b && i + 1 < n && out[i + 1] == '[') {
			size_t j = i + 2;
			int arg = 0;

			while (j < n && out[j] >= '0' && out[j] <= '9')
				arg = arg * 10 + (out[j++] - '0');
			if (j < n && out[j] == 'C') {
				tm->col = tm->col + (arg ? arg : 1) < tm->w ? tm->col + (arg ? arg : 1) : tm->w - 1;
				tm->pending = false;
			} else if (j < n && out[j] == 'K') {
				/* a word erased to be written again: the text resumes at its start */
				int first = -1;

				for (int k = tm->col; k < COLS; k++) {
					if (tm->cell[tm->row][k] >= 0 && first < 0)
						first = tm->cell[tm->row][k];
					tm->cell[tm->row][k] = -1;
				}
				if (first >= 0)
					next = first;
			} else if (j < n && out[j] == 'm') {
				/* the text's own colours: past them in the text too */
				while (next < t->n && t->cp[next] != 0x1b)
					next++;
				while (next < t->n && t->cp[next] != 'm')
					next++;
				next++;
			}
			i = j + 1;
			continue;
		}
		if (c == '\r') {
			tm->col = 0;
			tm->pending = false;
			i++;
			continue;
		}
		if (c == '\n') {
			tm->row++;
			tm->col = 0;
			tm->pending = false;
			/* the text's own newline, or a blank the wrap turned into one */
			if (next < t->n && (t->cp[next] == '\n' || t->cp[next] == ' ' || t->cp[next] == '\t'))
				next++;
			i++;
			continue;
		}
		if (c == '\t') {
			tm->col = (tm->col / 8 + 1) * 8;
			if (tm->col >= tm->w)
				tm->col = tm->w - 1;
			while (next < t->n && t->cp[next] != '\t')
				next++;
			next++;
			i++;
			continue;
		}
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)out + i,
		    (utf8proc_ssize_t)(n - i), &cp);
		int cw = utf8proc_charwidth(cp);

		i += (size_t)k;
		/* a character written again after a move: the same text index as before */
		while (next < t->n && t->cp[next] != cp)
			next++;
		if (cw == 0)
			continue;
		if (tm->pending || tm->col + cw > tm->w) {
			tm->autowraps++;
			tm->row++;
			tm->col = 0;
			tm->pending = false;
		}
		tm->cell[tm->row][tm->col] = next;
		if (cw == 2)
			tm->cell[tm->row][tm->col + 1] = -1;
		tm->col += cw;
		if (tm->col >= tm->w) {
			tm->col = tm->w - 1;
			tm->pending = true;
		}
		next++;
	}
}

/* Writes text through the wrapper in pieces cut at random bytes; the bytes written. */
static size_t
wrap_text(const char *text, int width, unsigned seed, char *out, size_t len)
{
	FILE *f = fmemopen(out, len, "w");
	struct kvc_wrap w;
	size_t n = strlen(text), i = 0, got;

	kvc_wrap_begin(&w, width);
	srand(seed);
	while (i < n) {
		size_t k = 1 + (size_t)rand() % 7;

		if (k > n - i)
			k = n - i;
		kvc_wrap_put(&w, f, text + i, k);
		i += k;
	}
	fflush(f);
	got = (size_t)ftell(f);
	fclose(f);
	return got;
}

static bool
blank(utf8proc_int32_t c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

/* Width of the word (run of non-blanks) around text index at. */
static int
word_width(const struct text *t, int at)
{
	int a = at, b = at, w = 0;

	while (a > 0 && !blank(t->cp[a - 1]))
		a--;
	while (b < t->n && !blank(t->cp[b]))
		b++;
	for (int i = a; i < b; i++)
		w += utf8proc_charwidth(t->cp[i]) > 0 ? utf8proc_charwidth(t->cp[i]) : 0;
	return w;
}

static void
check_text(const char *name, const char *text, int width)
{
	static struct term tm;
	static struct text t;
	static char out[1 << 16];
	int row_of[4096], seen = 0, mid_word = 0, last = -1, bad_order = 0;

	decode(text, &t);
	for (unsigned seed = 1; seed <= 20; seed++) {
		size_t n = wrap_text(text, width, seed, out, sizeof out);

		tm.w = width;
		play(&tm, out, n, &t);
		test_cond(tm.autowraps == 0, "%s, width %d, seed %u: the terminal wrapped %d rows "
		    "itself", name, width, seed, tm.autowraps);
		for (int i = 0; i < t.n; i++)
			row_of[i] = -1;
		seen = 0;
		last = -1;
		bad_order = 0;
		for (int r = 0; r <= tm.row && r < ROWS; r++)
			for (int c = 0; c < width; c++)
				if (tm.cell[r][c] >= 0) {
					int x = tm.cell[r][c];

					if (x <= last)
						bad_order++;
					last = x;
					row_of[x] = r;
					seen++;
				}
		int want = 0;

		for (int i = 0; i < t.n; i++) {
			if (t.cp[i] == 0x1b) {
				while (i < t.n && t.cp[i] != 'm')
					i++;	/* a colour: no character shown */
				continue;
			}
			want += utf8proc_charwidth(t.cp[i]) > 0 && !blank(t.cp[i]) ? 1 : 0;
		}
		int shown_nonblank = 0;

		for (int i = 0; i < t.n; i++)
			shown_nonblank += row_of[i] >= 0 && !blank(t.cp[i]) ? 1 : 0;
		test_cond(shown_nonblank == want && bad_order == 0, "%s, width %d, seed %u: %d of "
		    "%d characters shown, %d out of order", name, width, seed, shown_nonblank, want,
		    bad_order);
		mid_word = 0;
		for (int i = 1; i < t.n; i++) {
			if (row_of[i] < 0 || row_of[i - 1] < 0 || row_of[i] == row_of[i - 1] ||
			    blank(t.cp[i]) || blank(t.cp[i - 1]))
				continue;
			if (utf8proc_charwidth(t.cp[i]) >= 2 || utf8proc_charwidth(t.cp[i - 1]) >= 2)
				continue;
			if (word_width(&t, i) > width)
				continue;
			mid_word++;
		}
		test_cond(mid_word == 0, "%s, width %d, seed %u: %d words cut across rows", name,
		    width, seed, mid_word);
	}
}

int
main(void)
{
	static char out[1 << 16];
	const char *prose = "The lighthouse keeper climbed the stairs every evening, counting "
	    "them as his father had: one hundred and twelve. From the lamp room the harbour "
	    "looked small, the ships like toys left out in the rain.\nThen the storm came, "
	    "and with it a sound he had never heard before.";
	const char *longword = "a Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch "
	    "station and supercalifragilisticexpialidocious words, short ones too.";
	const char *cjk = "灯塔看守人每天傍晚都爬上楼梯，像他父亲那样数着台阶。 mixed with English "
	    "words between 汉字 and 한국어 text, ｆｕｌｌｗｉｄｔｈ too.";
	const char *marks = "Cafe\xcc\x81s and nai\xcc\x88ve re\xcc\x81sume\xcc\x81s: combining "
	    "marks take no column, so these words are as wide as their letters.";
	const char *sgr = "\033[2m<think>short reasoning here</think>\033[0m\n\nThe answer "
	    "follows the reasoning, in words long enough to wrap a few times.";
	const char *tabs = "col\tumns\tand\ttabs\tin a row of text\twith\ttabs everywhere.";

	/* width 0 (not a terminal): byte for byte what came in */
	size_t n = wrap_text(prose, 0, 3, out, sizeof out);
	test_cond(n == strlen(prose) && memcmp(out, prose, n) == 0, "width 0 changed the text");
	n = wrap_text(cjk, 0, 4, out, sizeof out);
	test_cond(n == strlen(cjk) && memcmp(out, cjk, n) == 0, "width 0 changed the CJK text");

	for (int w = 8; w <= 80; w += 9) {
		check_text("prose", prose, w);
		check_text("long words", longword, w);
		check_text("CJK", cjk, w);
		check_text("combining marks", marks, w);
		check_text("colours", sgr, w);
		check_text("tabs", tabs, w);
	}
	/* a word that does not fit is moved whole: "stairs" starts the second row at 20 columns */
	n = wrap_text("The keeper climbed stairs.", 20, 1, out, sizeof out);
	out[n] = '\0';
	test_cond(strstr(out, "\r\033[15C\033[K\nstairs.") != NULL || strstr(out, "\nstairs.") != NULL,
	    "the word was not moved to the next row: '%s'", out);
	return test_done();
}
