/*
 * kernels.c: KVCHAT_KERNELS, the CPU kernel table the user asks for
 * (scalar, avx2, avx2vnni, avx512, neon, neondot, auto), read from the
 * environment once per use and checked by main before any command runs, so a table
 * this CPU cannot run is refused by name, with the tables it can, before
 * anything is opened.
 */
#include "config.h"

#include "cli.h"
#include "kern/kern.h"

#include <stdlib.h>

const char *
cli_kernels(void)
{
	const char *v = getenv("KVCHAT_KERNELS");

	return v != NULL && v[0] != '\0' ? v : NULL;
}

const char *
cli_kernels_name(void)
{
	const struct kern *k;
	char err[160];

	return kern_find(cli_kernels(), &k, err, sizeof err) == 0 ? k->name : "?";
}

int
cli_kernels_check(FILE *f)
{
	const struct kern *k;
	char err[160];

	if (kern_find(cli_kernels(), &k, err, sizeof err) == 0)
		return 0;
	fprintf(f, "kvchat: KVCHAT_KERNELS: %s\n", err);
	return 2;
}
