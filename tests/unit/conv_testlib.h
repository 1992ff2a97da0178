/*
 * conv_testlib.h: what the conversation tests (test_conv, test_conv_work,
 * test_conv_slide) share: the fixture model, the manager they open, and
 * the stored message count. Checks stay in the tests (the test.h counters
 * are per program file).
 */
#ifndef KVC_CONV_TESTLIB_H
#define KVC_CONV_TESTLIB_H

#include <stdint.h>

#include "conv/conv.h"

/*
 * tests/fixtures/mkmodel's tiny f32 qwen2 model at OUT, with more mkmodel
 * options OPTS (a seed, a vocabulary); system()'s status, 0 when made.
 */
int conv_test_mkmodel(const char *out, const char *opts);

/* Room for the notices a test collects with conv_test_notice. */
#define CONV_TEST_NOTICES 4096

/*
 * A conv_params.notice callback: appends LINE and a newline to the
 * NUL-terminated char[CONV_TEST_NOTICES] at ARG (notice_arg), cut short
 * when it is full.
 */
void conv_test_notice(void *arg, const char *line);

/* conv_mgr_new with *P for the ChatML family; NULL (the reason printed) on failure. */
struct conv_mgr *conv_test_mgr(struct kvc_engine *e, struct sess_store *st,
    struct conv_params *p);

/* How many messages the store holds for conversation ID; -1 when they cannot be loaded. */
int conv_test_stored_msgs(struct sess_store *st, int64_t id);

#endif
