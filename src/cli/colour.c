/* colour.c: the colour decision (terminal, NO_COLOR, TERM) and SGR codes on or off. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colour.h"

bool
kvc_use_color(int fd)
{
	const char *nc = getenv("NO_COLOR");
	const char *term = getenv("TERM");

	/* no-color.org: set and not empty means no colour. */
	if (nc != NULL && nc[0] != '\0')
		return false;
	if (term != NULL && strcmp(term, "dumb") == 0)
		return false;
	return isatty(fd) != 0;
}

const char *
kvc_sgr(bool on, const char *seq)
{
	return on ? seq : "";
}
