/* cmd_convert.c: placeholder until the owning module lands. */
#include <stdio.h>
#include "cli.h"

int
cmd_convert_llama2c(int argc, char **argv)
{
	fprintf(stderr, "kvchat: %s: not built yet\n", argv[0]);
	return 1;
}
