/*
 * json.h: writing JSON string literals. The program writes its JSON (the
 * /export json file, the --stats-json lines) with kvc_buf_printf; the one
 * part that needs care, escaping text, is done here for all of them.
 */
#ifndef KVC_JSON_H
#define KVC_JSON_H

#include <stddef.h>

#include "core/kvc.h"

/*
 * Appends s[0..n) to b as a JSON string literal, quotes included: '"' and
 * '\' are escaped, \n \r \t by name, other bytes below 0x20 as \u00XX.
 * Every other byte is copied as it is, so UTF-8 passes through unchanged
 * and invalid UTF-8 is not repaired (the caller validates text it takes
 * in). s may be NULL when n is 0. Returns 0 or KVC_ENOMEM.
 */
int kvc_json_str(struct kvc_buf *b, const char *s, size_t n);

#endif
