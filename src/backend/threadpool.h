/*
 * threadpool.h: a fixed set of worker threads that run one function on all
 * threads at once and wait for all of them (fork-join), for the CPU
 * backend's matrix products and attention. Not reentrant: one tp_run at a
 * time per pool.
 */
#ifndef KVC_THREADPOOL_H
#define KVC_THREADPOOL_H

#include "core/kvc.h"

struct tp_pool;

/* fn(arg, ith, nth) runs once for each ith in [0, nth); the caller's thread is ith 0. */
typedef void (*tp_fn)(void *arg, int ith, int nth);

/* Start n - 1 workers (n >= 1). 0 or KVC_ENOMEM. */
int tp_new(struct tp_pool **out, int n, char *err, size_t errlen);
void tp_free(struct tp_pool *p);
int tp_size(const struct tp_pool *p);
/* Run fn on every thread; returns when all are done. */
void tp_run(struct tp_pool *p, tp_fn fn, void *arg);

#endif
