/* sub_common.c: option parsing shared by kvchat generate and kvchat bench. */
#include <stdio.h>
#include <string.h>

#include "sub_common.h"

int
sub_usage(const char *name, const char *usage, const char *why, const char *arg)
{
	if (why)
		fprintf(stderr, "kvchat: %s: %s%s%s\n", name, why, arg ? ": " : "", arg ? arg : "");
	fputs(usage, stderr);
	return 2;
}

int
sub_engine_option(const char *opt, const char *val, struct kvc_engine_params *ep,
    const char **why)
{
	long v;

	if (strcmp(opt, "--threads") == 0 || strcmp(opt, "-t") == 0) {
		if (kvc_parse_long(val, 0, 1024, &v) != KVC_OK) {
			*why = "bad --threads";
			return -1;
		}
		ep->n_threads = (int)v;
		if (v > kvc_n_cores())
			fprintf(stderr, "kvchat: warning: --threads %ld is more than the %d cores this "
			    "process may run on; the extra threads only share them\n", v, kvc_n_cores());
	} else if (strcmp(opt, "--kv-type") == 0) {
		if (strcmp(val, "f16") == 0) {
			ep->kv_type = GGML_TYPE_F16;
		} else if (strcmp(val, "f32") == 0) {
			ep->kv_type = GGML_TYPE_F32;
		} else {
			*why = "bad --kv-type (f16 or f32)";
			return -1;
		}
	} else if (strcmp(opt, "--device") == 0) {
		ep->device = val;
	} else if (strcmp(opt, "--gpu") == 0) {
		if (kvc_parse_long(val, 0, 1024, &v) != KVC_OK) {
			*why = "bad --gpu";
			return -1;
		}
		ep->gpu = (int)v;
	} else {
		return 0;
	}
	return 1;
}
