/*
 * colour.h: whether to colour the program's output, and the SGR escape
 * sequences it uses.
 */
#ifndef KVC_COLOUR_H
#define KVC_COLOUR_H

#include <stdbool.h>

/*
 * True when fd is a terminal, NO_COLOR is unset or empty, and TERM is not
 * "dumb".
 */
bool kvc_use_color(int fd);

/* seq (one of KVC_SGR_*) when on, else "": kvc_sgr(color, KVC_SGR_BOLD). */
const char *kvc_sgr(bool on, const char *seq);
#define KVC_SGR_RESET "\033[0m"
#define KVC_SGR_BOLD "\033[1m"
#define KVC_SGR_DIM "\033[2m"
#define KVC_SGR_RED "\033[31m"
#define KVC_SGR_GREEN "\033[32m"
#define KVC_SGR_YELLOW "\033[33m"
#define KVC_SGR_CYAN "\033[36m"

#endif
