/*
 * wrap.h: a streamed reply wrapped at word boundaries at the terminal's
 * width, as it comes. The terminal would cut a word at its last column;
 * here a word that would not fit is moved whole to the next row (erased
 * from the row it began on and written again), a word longer than a row
 * is broken, wide characters (CJK) count two columns and may be broken
 * before. Text is written at once, never held back: a reply stopped by
 * Ctrl-C shows exactly what was said. Width 0 (stdout not a terminal)
 * writes the bytes unchanged.
 */
#ifndef KVC_WRAP_H
#define KVC_WRAP_H

#include <stdio.h>

#include "core/kvc.h"

struct kvc_wrap {
	int width;		/* columns of a row; 0: no wrapping */
	int col;		/* columns used on the current row */
	int word_col;		/* column where the word being written began on this row */
	char word[512];		/* its bytes on this row, to write it again on the next */
	size_t nword;
	bool word_lost;		/* it outgrew word[]: broken, not moved */
	char part[4];		/* a UTF-8 character cut by a piece's end */
	size_t npart;
	int esc;		/* in an escape sequence: 1 after ESC, 2 in a CSI */
};

/* The columns of the terminal fd is, or 0 when it is none. */
int kvc_wrap_width(int fd);
/* Start a reply at column 0 of a row width columns wide (0: no wrapping). */
void kvc_wrap_begin(struct kvc_wrap *w, int width);
/* Write s[0..n) to f, wrapped. */
void kvc_wrap_put(struct kvc_wrap *w, FILE *f, const char *s, size_t n);

#endif
