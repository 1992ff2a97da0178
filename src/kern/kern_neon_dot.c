/*
 * kern_neon_dot.c: the "neondot" table's int8 products, for aarch64 CPUs
 * with the ARMv8.2 dot product (SDOT, HWCAP_ASIMDDP); built with
 * -march=armv8.2-a+dotprod (kern.am), so kern_neon.h's dot16 is one SDOT.
 * The same tiles as the "neon" table's (kern_neon.c), on the same exact
 * integer sums: the two tables' results are bitwise equal.
 */
#include "kern_neon.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error kern_neon_dot.c must be built with the dot product enabled (kern.am)
#endif

NEON_ROWS_I8_ALL

kern_rows_act_fn *const kern_neondot_rows_act[KERN_NTYPE] = {
	NEON_ROWS_I8_TABLE,
};
