/*
 * quant_ref.h: quantising floats into the block formats of quant.h
 * (quant_ref.c). Only for the fixture generator, tests and benchmarks,
 * which link libkvcref.a; the program never quantises.
 */
#ifndef KVC_QUANT_REF_H
#define KVC_QUANT_REF_H

#include "quant/quant.h"

/*
 * Quantise n floats (multiple of the block size) into dst, which may be at
 * any address. Returns 0 or KVC_EUNSUPPORTED.
 */
int q_quantize_row(enum gguf_dtype t, const float *src, void *dst, int64_t n);

#endif
