/*
 * tok_testlib.h: what the tokenizer conformance tests (test_tok_vectors,
 * test_tok_roundtrip) share: the vocabularies llama.cpp has test vectors
 * for, and reading them from $SHARED_DATA. Checks stay in the tests (the
 * test.h counters are per program file).
 */
#ifndef KVC_TOK_TESTLIB_H
#define KVC_TOK_TESTLIB_H

#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* NAMEs of $SHARED_DATA/llama.cpp-vocab/ggml-vocab-NAME.gguf. */
extern const char *const tok_test_vocabs[];
extern const size_t tok_test_n_vocabs;

/* The whole file (malloc'ed, NUL-terminated, *len bytes before the NUL); NULL if unreadable. */
char *tok_test_slurp(const char *path, size_t *len);

/*
 * The tokenizer of $dir/llama.cpp-vocab/ggml-vocab-NAME.gguf into *tok (free
 * with tok_free). 0, or the gguf/tokenizer error code with err filled.
 */
int tok_test_load_vocab(const char *dir, const char *name, struct kvc_tokenizer **tok,
    char *err, size_t errlen);

#endif
