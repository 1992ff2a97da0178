/*
 * sched_pick.c: which of the prefills waiting in the scheduler's slots
 * gets the next slice, and whether a prefill is cut into slices at all
 * (the policy is in srv_int.h). Plain logic over numbers, so that
 * tests/unit/test_sched_pick.c checks the order it gives without timing.
 */
#include "srv_int.h"

/*
 * What p has left, less the credit its wait earned, in units of 1/AGING
 * position: remaining - waited * slice_pos / AGING, kept in integers.
 */
static long long
score(const struct srv_pending *p, int slice_pos)
{
	return (long long)p->remaining * SRV_PREFILL_AGING - (long long)p->waited * slice_pos;
}

int
sched_pick_prefill(const struct srv_pending *p, int n, int slice_pos)
{
	int best = 0;

	if (slice_pos < 1)
		slice_pos = 1;
	for (int i = 1; i < n; i++) {
		long long a = score(&p[i], slice_pos), b = score(&p[best], slice_pos);

		if (a < b || (a == b && p[i].order < p[best].order))
			best = i;
	}
	return best;
}

bool
sched_slice_prefill(bool decoding, int n_pending, bool newcomer)
{
	return decoding || n_pending > 1 || newcomer;
}
