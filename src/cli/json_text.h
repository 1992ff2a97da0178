/*
 * json_text.h: the JSON the program writes (/export json, --stats-json,
 * kvchat batch's output lines), built as jansson values and written by
 * jansson. What jansson lacks is a string value of bytes that may not be
 * UTF-8 (a hand-edited database): here, so what kvchat writes is always JSON.
 */
#ifndef KVC_CLI_JSON_TEXT_H
#define KVC_CLI_JSON_TEXT_H

#include <stddef.h>

#include <jansson.h>

#include "core/kvc.h"

/*
 * s[0..n) as a JSON string value (s NULL: ""): the bytes themselves when
 * they are UTF-8 (NULs included), else with each byte that is not part of
 * a valid character replaced by U+FFFD. NULL only when out of memory.
 */
json_t *cli_json_text(const char *s, size_t n);

/* cli_json_text of a C string (NULL: ""). */
json_t *cli_json_cstr(const char *s);

/*
 * Sets o[key] = v, v's reference taken even on failure (jansson's
 * json_object_set_new), and keeps the first failure in *bad: a record is
 * built member by member and checked once. v NULL (out of memory) fails.
 */
void cli_json_put(json_t *o, const char *key, json_t *v, bool *bad);

/*
 * Appends v, compact (no spaces, members in the order they were set),
 * then a newline, to b; jansson's flags beside JSON_COMPACT (e.g.
 * JSON_REAL_PRECISION). 0 or KVC_ENOMEM.
 */
int cli_json_line(const json_t *v, size_t flags, struct kvc_buf *b);

#endif
