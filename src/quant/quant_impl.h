/*
 * quant_impl.h: what quant.c and the reference quantisers (quant_ref.c)
 * share; internal to the quant module.
 */
#ifndef KVC_QUANT_IMPL_H
#define KVC_QUANT_IMPL_H

#include "quant.h"

#include <string.h>

/* One block of any quantised type, for aligned copies of blocks in unaligned rows. */
union any_block {
	block_q8_0 q8_0;
	block_q4_0 q4_0;
	block_q4_1 q4_1;
	block_q5_0 q5_0;
	block_q5_1 q5_1;
	block_q3_K q3_k;
	block_q4_K q4_k;
	block_q5_K q5_k;
	block_q6_K q6_k;
};

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes. */
static inline void
q_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*mn = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

#endif
