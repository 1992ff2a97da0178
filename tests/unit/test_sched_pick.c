/*
 * test_sched_pick.c (issue 24, "new requests' prefill cut into slices
 * between decode steps so a newcomer's TTFT stays bounded"): the
 * scheduler's choice of the prefill that gets the next slice, checked by
 * its logic, not by timing. A small simulation runs the scheduler's passes
 * (one slice of slice_pos positions to the chosen prefill, the others'
 * wait growing by one pass) over arrivals given pass by pass, and records
 * the pass at which each prompt is done: its time to first token in
 * passes. Checked: prompts arriving together finish one after another in
 * arrival order (never all at the end); a short newcomer goes before a
 * long prefill under way; shorter prompts first among those waiting; a
 * long prompt is not starved by an endless stream of short ones; and when
 * a prefill is sliced at all.
 */
#include "test.h"
#include "server/srv_int.h"

#define MAXJ 600
#define SLICE 100

struct sim {
	int len[MAXJ];		/* prompt positions */
	int arrive[MAXJ];	/* the pass it is placed at */
	int n;
	/* results */
	int done_at[MAXJ];	/* the pass whose slice finished it, -1: never */
	int first_at[MAXJ];	/* the pass of its first slice, -1: none */
};

/* Run passes [0, passes): returns the number of passes that had a prefill to run. */
static int
run(struct sim *s, int passes)
{
	int left[MAXJ], waited[MAXJ], busy = 0;

	for (int i = 0; i < s->n; i++) {
		left[i] = s->len[i];
		waited[i] = 0;
		s->done_at[i] = s->first_at[i] = -1;
	}
	for (int pass = 0; pass < passes; pass++) {
		struct srv_pending p[MAXJ];
		int at[MAXJ], n = 0, k;

		for (int i = 0; i < s->n; i++)
			if (s->arrive[i] <= pass && left[i] > 0) {
				p[n] = (struct srv_pending){ left[i], waited[i], (unsigned long)i + 1 };
				at[n++] = i;
			}
		if (n == 0)
			continue;
		busy++;
		k = at[sched_pick_prefill(p, n, SLICE)];
		for (int i = 0; i < n; i++)
			if (at[i] != k)
				waited[at[i]]++;
		if (s->first_at[k] < 0)
			s->first_at[k] = pass;
		left[k] -= left[k] < SLICE ? left[k] : SLICE;
		if (left[k] == 0)
			s->done_at[k] = pass;
	}
	return busy;
}

static void
test_together(void)
{
	static struct sim s;
	bool order = true;

	/* sixteen 1000-position prompts at once: ten slices each, one after another */
	s.n = 16;
	for (int i = 0; i < 16; i++) {
		s.len[i] = 1000;
		s.arrive[i] = 0;
	}
	run(&s, 200);
	for (int i = 0; i < 16; i++)
		order = order && s.done_at[i] == 10 * (i + 1) - 1;
	test_cond(order, "16 equal prompts together: done in arrival order, each after its own 10 "
	    "slices and those before it (first %d, last %d)", s.done_at[0], s.done_at[15]);
	/* their median time to first token is half the last's, as with a queue (not all at the end) */
	test_cond(s.done_at[7] == 79 && s.done_at[15] == 159, "p50 %d, last %d", s.done_at[7],
	    s.done_at[15]);
}

static void
test_newcomer(void)
{
	static struct sim s;

	/* a 5000-position prompt under way; at pass 5 a 200-position one arrives */
	s.n = 2;
	s.len[0] = 5000;
	s.arrive[0] = 0;
	s.len[1] = 200;
	s.arrive[1] = 5;
	run(&s, 100);
	test_cond(s.first_at[1] == 5 && s.done_at[1] == 6,
	    "the short newcomer is served at once and done after its own 2 slices (first %d, done %d)",
	    s.first_at[1], s.done_at[1]);
	test_cond(s.done_at[0] == 51, "the long one finishes 2 passes later than alone (%d)",
	    s.done_at[0]);

	/* together: shorter first (800, 100, 400 -> 100, 400, 800) */
	s.n = 3;
	s.len[0] = 800;
	s.len[1] = 100;
	s.len[2] = 400;
	s.arrive[0] = s.arrive[1] = s.arrive[2] = 0;
	run(&s, 100);
	test_cond(s.done_at[1] == 0 && s.done_at[2] == 4 && s.done_at[0] == 12,
	    "shortest first: %d %d %d", s.done_at[1], s.done_at[2], s.done_at[0]);
}

static void
test_no_starving(void)
{
	static struct sim s;
	int bound;

	/* a 2000-position prompt, and a 50-position one arriving at every pass from the first */
	s.n = MAXJ;
	s.len[0] = 2000;
	s.arrive[0] = 0;
	for (int i = 1; i < MAXJ; i++) {
		s.len[i] = 50;
		s.arrive[i] = i - 1;
	}
	run(&s, MAXJ);
	/*
	 * Its first slice after about AGING times its own slices of waiting,
	 * then it keeps the lead: done within (AGING + 1) x its 20 slices, plus
	 * the short ones that still came first.
	 */
	bound = (SRV_PREFILL_AGING + 1) * 20 + 20;
	test_cond(s.done_at[0] >= 0 && s.done_at[0] <= bound,
	    "the long prompt is done by pass %d (bound %d), first slice at %d", s.done_at[0], bound,
	    s.first_at[0]);
	test_cond(s.first_at[0] > 0, "the short ones go first while it has waited little (%d)",
	    s.first_at[0]);
	test_cond(s.done_at[1] == 0 && s.done_at[2] == 1, "short ones are served as they come (%d, %d)",
	    s.done_at[1], s.done_at[2]);
}

static void
test_ties(void)
{
	struct srv_pending p[3] = { { 300, 0, 7 }, { 300, 0, 3 }, { 300, 0, 5 } };

	test_cond(sched_pick_prefill(p, 3, SLICE) == 1, "equal: the oldest");
	p[0].waited = 1;	/* a quarter slice of credit: 300 - 25 beats 300 */
	test_cond(sched_pick_prefill(p, 3, SLICE) == 0, "a wait counts");
	p[2].remaining = 270;	/* 30 fewer left beats 25 of credit */
	test_cond(sched_pick_prefill(p, 3, SLICE) == 2, "what is left counts more than a short wait");
	test_cond(sched_pick_prefill(p, 3, 0) == 2, "a slice of 0 positions counts as 1");
	test_cond(sched_pick_prefill(p, 1, SLICE) == 0, "alone");
}

static void
test_slicing(void)
{
	test_cond(!sched_slice_prefill(false, 1, false), "alone, nobody decoding: the whole prompt");
	test_cond(sched_slice_prefill(true, 1, false), "others decoding: a slice");
	test_cond(sched_slice_prefill(false, 2, false), "another prefill waiting: a slice");
	test_cond(sched_slice_prefill(false, 1, true), "a newcomer waiting for a slot: a slice");
}

int
main(void)
{
	test_together();
	test_newcomer();
	test_no_starving();
	test_ties();
	test_slicing();
	return test_done();
}
