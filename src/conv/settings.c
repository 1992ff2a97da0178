/*
 * settings.c: the per-conversation settings and their text form, the one
 * the store keeps ("temp=0.8;top_k=40;...").
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"

struct conv_settings
conv_default_settings(void)
{
	struct conv_settings s;

	s.smp = kvc_sampler_default_params();
	s.max_tokens = 0;
	return s;
}

int
conv_settings_format(const struct conv_settings *s, struct kvc_buf *out)
{
	int rc;

	out->n = 0;
	rc = kvc_buf_printf(out, "temp=%g;top_k=%d;top_p=%g;min_p=%g;repeat_penalty=%g;"
	    "max_tokens=%d;seed=", (double)s->smp.temp, s->smp.top_k,
	    (double)s->smp.top_p, (double)s->smp.min_p, (double)s->smp.repeat_penalty,
	    s->max_tokens);
	if (rc == 0)
		rc = s->smp.seed == KVC_SEED_RANDOM ? kvc_buf_printf(out, "random") :
		    kvc_buf_printf(out, "%" PRIu64, s->smp.seed);
	return rc;
}

static int
parse_num(const char *v, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(v, &end);
	if (end == v || *end != '\0' || errno != 0)
		return -1;
	return 0;
}

int
conv_settings_set(struct conv_settings *s, const char *name, const char *value,
    char *err, size_t errlen)
{
	double v;

	if (strcmp(name, "seed") == 0) {
		char *end;

		/* Seeds are 64-bit: a double would round them. */
		if (value && (strcmp(value, "random") == 0 || strcmp(value, "-1") == 0)) {
			s->smp.seed = KVC_SEED_RANDOM;
			return KVC_OK;
		}
		errno = 0;
		if (value != NULL && value[0] != '-')
			s->smp.seed = strtoull(value, &end, 10);
		if (value == NULL || value[0] == '-' || end == value || *end != '\0' || errno) {
			kvc_err(err, errlen, "seed: not a number (or 'random'): '%s'",
			    value ? value : "");
			return KVC_EINVAL;
		}
		return KVC_OK;
	}
	if (value == NULL || parse_num(value, &v) != 0) {
		kvc_err(err, errlen, "%s: not a number: '%s'", name, value ? value : "");
		return KVC_EINVAL;
	}
	if (strcmp(name, "temperature") == 0 || strcmp(name, "temp") == 0)
		s->smp.temp = (float)v;
	else if (strcmp(name, "top_p") == 0)
		s->smp.top_p = (float)v;
	else if (strcmp(name, "top_k") == 0)
		s->smp.top_k = (int)v;
	else if (strcmp(name, "min_p") == 0)
		s->smp.min_p = (float)v;
	else if (strcmp(name, "repeat_penalty") == 0)
		s->smp.repeat_penalty = (float)v;
	else if (strcmp(name, "max_tokens") == 0) {
		if (v < 0) {
			kvc_err(err, errlen, "max_tokens: must be >= 0 (0 = no limit)");
			return KVC_EINVAL;
		}
		s->max_tokens = (int)v;
	} else {
		kvc_err(err, errlen, "unknown setting '%s' (temperature, top_p, top_k, min_p, "
		    "repeat_penalty, seed, max_tokens)", name);
		return KVC_EINVAL;
	}
	return KVC_OK;
}

void
conv_settings_parse(const char *text, struct conv_settings *s)
{
	char name[32], value[64];
	const char *p = text, *eq, *semi;
	size_t nl, vl;

	while (p != NULL && *p != '\0') {
		semi = strchr(p, ';');
		eq = strchr(p, '=');
		if (eq == NULL || (semi != NULL && eq > semi))
			goto next;
		nl = (size_t)(eq - p);
		vl = semi ? (size_t)(semi - eq - 1) : strlen(eq + 1);
		if (nl >= sizeof name || vl >= sizeof value)
			goto next;
		memcpy(name, p, nl);
		name[nl] = '\0';
		memcpy(value, eq + 1, vl);
		value[vl] = '\0';
		(void)conv_settings_set(s, name, value, NULL, 0);
next:
		p = semi ? semi + 1 : NULL;
	}
}
