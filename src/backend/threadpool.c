/*
 * threadpool.c: fork-join worker threads. Between jobs a worker polls for
 * the next one for about 100 microseconds (TP_SPIN), then sleeps on a
 * condition variable; the caller polls for the workers' end the same way.
 * Decoding one token runs about five jobs per layer a few microseconds
 * apart, and a futex sleep plus wake-up per job cost a fifth of 2-thread
 * decode time (docs/BENCHMARKS.md); the short bound keeps an idle kvchat
 * from holding a core that a machine shared with other work needs. With
 * more threads than cores (--threads above the count, which the program
 * warns about) nobody polls: a polling thread would hold the core that the
 * thread it waits for needs to finish. A job seen while polling is started
 * without the mutex, and the caller is signalled only if it went to sleep:
 * a worker that blocked on the mutex the caller holds while posting slept
 * in the kernel until the caller let go, once per job.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* Polls before sleeping: PAUSE is 25 ns on the development VM (AMD EPYC), up to ~40 ns on recent Intel. */
#define TP_SPIN 4000

struct tp_pool {
	int n;			/* threads including the caller */
	int spin;		/* polls before sleeping: TP_SPIN, 0 when n > cores */
	pthread_t *th;		/* [n - 1] workers */
	pthread_mutex_t mu;
	pthread_cond_t cv_work;	/* a new generation was posted */
	pthread_cond_t cv_done;	/* pending reached 0 */
	tp_fn fn;
	void *arg;
	unsigned gen;		/* job counter: workers run each generation once */
	int pending;		/* workers still running this generation */
	bool waiting;		/* the caller sleeps on cv_done */
	bool quit;
};

/*
 * gen and pending are written under the mutex with atomic stores, so these
 * polls outside it read them without a data race.
 */
static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void
spin_until_changed(const unsigned *v, unsigned old, int spin)
{
	for (int i = 0; i < spin && __atomic_load_n(v, __ATOMIC_ACQUIRE) == old; i++)
		cpu_relax();
}

static void
spin_until_zero(const int *v, int spin)
{
	for (int i = 0; i < spin && __atomic_load_n(v, __ATOMIC_ACQUIRE) > 0; i++)
		cpu_relax();
}

struct tp_start {
	struct tp_pool *p;
	int ith;
};

static void *
worker(void *a)
{
	struct tp_start *st = a;
	struct tp_pool *p = st->p;
	int ith = st->ith;
	unsigned seen = 0;

	free(st);
	for (;;) {
		spin_until_changed(&p->gen, seen, p->spin);
		/*
		 * A generation seen while polling is taken without the mutex:
		 * the caller holds it while it posts, and a worker blocking
		 * on it then would sleep in the kernel until the caller let go.
		 */
		if (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen) {
			pthread_mutex_lock(&p->mu);
			while (p->gen == seen && !p->quit)
				pthread_cond_wait(&p->cv_work, &p->mu);
			pthread_mutex_unlock(&p->mu);
		}
		if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE))
			return NULL;
		/* fn and arg were stored before gen (release), read after it (acquire) */
		seen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
		p->fn(p->arg, ith, p->n);
		/*
		 * The last one out wakes the caller only if it went to sleep
		 * (seq_cst on both sides: either the caller sees pending at 0
		 * or this sees waiting set, and then signals under the mutex
		 * the caller holds until it waits).
		 */
		if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_SEQ_CST) == 0 &&
		    __atomic_load_n(&p->waiting, __ATOMIC_SEQ_CST)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->cv_done);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

int
tp_new(struct tp_pool **out, int n, char *err, size_t errlen)
{
	struct tp_pool *p;
	int i;

	*out = NULL;
	if (n < 1)
		n = 1;
	p = calloc(1, sizeof *p);
	if (p == NULL || (n > 1 && (p->th = calloc((size_t)n - 1, sizeof *p->th)) == NULL)) {
		free(p);
		kvc_err(err, errlen, "out of memory for %d threads", n);
		return KVC_ENOMEM;
	}
	p->n = 1;
	p->spin = n > kvc_n_cores() ? 0 : TP_SPIN;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_done, NULL);
	for (i = 1; i < n; i++) {
		struct tp_start *st = malloc(sizeof *st);

		if (st == NULL)
			break;
		st->p = p;
		st->ith = i;
		if (pthread_create(&p->th[i - 1], NULL, worker, st) != 0) {
			free(st);
			break;
		}
		p->n = i + 1;
	}
	if (p->n != n) {
		kvc_err(err, errlen, "could not start %d worker threads", n - 1);
		tp_free(p);
		return KVC_ENOMEM;
	}
	*out = p;
	return 0;
}

void
tp_free(struct tp_pool *p)
{
	int i;

	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->quit, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	for (i = 0; i < p->n - 1; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv_work);
	pthread_cond_destroy(&p->cv_done);
	free(p->th);
	free(p);
}

int
tp_size(const struct tp_pool *p)
{
	return p->n;
}

void
tp_run(struct tp_pool *p, tp_fn fn, void *arg)
{
	if (p->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	__atomic_store_n(&p->pending, p->n - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);

	fn(arg, 0, p->n);

	spin_until_zero(&p->pending, p->spin);
	if (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) == 0)
		return;
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->waiting, true, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&p->pending, __ATOMIC_SEQ_CST) > 0)
		pthread_cond_wait(&p->cv_done, &p->mu);
	__atomic_store_n(&p->waiting, false, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&p->mu);
}
