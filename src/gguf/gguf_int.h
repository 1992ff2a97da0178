/*
 * gguf_int.h: what gguf.c tells the module's other files about an open
 * file (gguf_io.c reads around the mapping with them).
 */
#ifndef KVC_GGUF_INT_H
#define KVC_GGUF_INT_H

#include "gguf.h"

#include <stdint.h>

/* The first byte of the file: the mapping, or the caller's buffer (gguf_open_mem). */
const uint8_t *gguf_base(const struct gguf_file *f);
/* The descriptor of a mapped file, open for reading; -1 for a caller's buffer. */
int gguf_fd(const struct gguf_file *f);

#endif
