/* llama2c.c: llama2.c checkpoint + tokenizer.bin -> GGUF. */
#include "gguf/gguf.h"
#include "llama2c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Read a whole file into memory (caller frees *out). */
static int
read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p;
	long sz;

	if (f == NULL) {
		kvc_err(err, errlen, "%s: %s", path, strerror(errno));
		return KVC_EIO;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		kvc_err(err, errlen, "%s: cannot determine size: %s", path, strerror(errno));
		fclose(f);
		return KVC_EIO;
	}
	p = malloc(sz ? (size_t)sz : 1);
	if (p == NULL) {
		fclose(f);
		kvc_err(err, errlen, "%s: out of memory reading %ld bytes", path, sz);
		return KVC_ENOMEM;
	}
	if (sz && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
		kvc_err(err, errlen, "%s: read failed", path);
		free(p);
		fclose(f);
		return KVC_EIO;
	}
	fclose(f);
	*out = p;
	*len = (size_t)sz;
	return KVC_OK;
}

static int32_t
rd_i32(const unsigned char *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t r;

	memcpy(&r, &v, sizeof r);
	return r;
}

static float
rd_f32(const unsigned char *p)
{
	uint32_t v = (uint32_t)rd_i32(p);
	float r;

	memcpy(&r, &v, sizeof r);
	return r;
}

static int
parse_header(const unsigned char *p, size_t len, struct l2c_config *c,
    const char *path, char *err, size_t errlen)
{
	int32_t h[7];

	if (len < 28) {
		kvc_err(err, errlen, "%s: truncated: %zu bytes, a llama2.c header needs 28", path, len);
		return KVC_EFORMAT;
	}
	for (int i = 0; i < 7; i++)
		h[i] = rd_i32(p + 4 * i);
	c->dim = h[0];
	c->hidden_dim = h[1];
	c->n_layers = h[2];
	c->n_heads = h[3];
	c->n_kv_heads = h[4];
	c->shared_cls = h[5] > 0;
	c->vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
	c->seq_len = h[6];
	/* Bounds keep every product below in 64-bit range and reject garbage. */
	if (c->dim <= 0 || c->dim > 65536 || c->hidden_dim <= 0 || c->hidden_dim > 1 << 20 ||
	    c->n_layers <= 0 || c->n_layers > 1024 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
	    c->vocab_size <= 0 || c->vocab_size > 1 << 22 || c->seq_len <= 0 || c->seq_len > 1 << 22 ||
	    c->dim % c->n_heads != 0 || c->n_heads % c->n_kv_heads != 0 ||
	    (c->dim / c->n_heads) % 2 != 0) {
		kvc_err(err, errlen, "%s: not a llama2.c checkpoint (header dim=%d hidden=%d layers=%d "
		    "heads=%d kv_heads=%d vocab=%d seq_len=%d)", path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
		return KVC_EFORMAT;
	}
	return KVC_OK;
}

/* Vocabulary from tokenizer.bin, in GGUF's SPM form. */
struct l2c_vocab {
	char **tok;		/* [n] NUL-terminated pieces, ' ' replaced by U+2581 */
	size_t *len;		/* [n] byte lengths */
	float *score;		/* [n] */
	int32_t *type;		/* [n] tokenizer.ggml.token_type */
	int n;
};

static void
vocab_free(struct l2c_vocab *v)
{
	if (v->tok)
		for (int i = 0; i < v->n; i++)
			free(v->tok[i]);
	free(v->tok);
	free(v->len);
	free(v->score);
	free(v->type);
	memset(v, 0, sizeof *v);
}

static bool
is_byte_piece(const unsigned char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	return n == 6 && memcmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) && s[3] &&
	    strchr(hex, s[4]) && s[4] && s[5] == '>';
}

static int
parse_vocab(const unsigned char *p, size_t len, int n, struct l2c_vocab *v,
    const char *path, char *err, size_t errlen)
{
	size_t off = 4;

	v->n = n;
	v->tok = calloc((size_t)n, sizeof *v->tok);
	v->len = calloc((size_t)n, sizeof *v->len);
	v->score = calloc((size_t)n, sizeof *v->score);
	v->type = calloc((size_t)n, sizeof *v->type);
	if (!v->tok || !v->len || !v->score || !v->type)
		return KVC_ENOMEM;
	if (len < 4) {
		kvc_err(err, errlen, "%s: truncated tokenizer (no header)", path);
		return KVC_EFORMAT;
	}
	for (int i = 0; i < n; i++) {
		const unsigned char *s;
		int32_t sl;
		size_t spaces = 0, k, j;
		char *t;

		if (len - off < 8) {
			kvc_err(err, errlen, "%s: truncated tokenizer: token %d of %d missing "
			    "(the checkpoint's vocab_size is %d)", path, i, n, n);
			return KVC_EFORMAT;
		}
		v->score[i] = rd_f32(p + off);
		sl = rd_i32(p + off + 4);
		off += 8;
		if (sl < 0 || (size_t)sl > len - off) {
			kvc_err(err, errlen, "%s: token %d has bad length %d", path, i, (int)sl);
			return KVC_EFORMAT;
		}
		s = p + off;
		off += (size_t)sl;
		/* llama2.c wraps BOS/EOS in newlines ("\n<s>\n"); GGUF uses the bare names. */
		if (i == 1) {
			s = (const unsigned char *)"<s>";
			sl = 3;
		} else if (i == 2) {
			s = (const unsigned char *)"</s>";
			sl = 4;
		}
		for (k = 0; k < (size_t)sl; k++)
			spaces += s[k] == ' ';
		t = malloc((size_t)sl + 2 * spaces + 1);
		if (t == NULL)
			return KVC_ENOMEM;
		for (k = 0, j = 0; k < (size_t)sl; k++) {
			if (s[k] == ' ') {	/* U+2581 LOWER ONE EIGHTH BLOCK */
				t[j++] = (char)0xe2;
				t[j++] = (char)0x96;
				t[j++] = (char)0x81;
			} else
				t[j++] = (char)s[k];
		}
		t[j] = '\0';
		v->tok[i] = t;
		v->len[i] = j;
		if (i == 0)
			v->type[i] = 2;		/* unknown */
		else if (i == 1 || i == 2)
			v->type[i] = 3;		/* control */
		else if (is_byte_piece(s, (size_t)sl))
			v->type[i] = 6;		/* byte */
		else
			v->type[i] = 1;		/* normal */
	}
	if (off != len) {
		kvc_err(err, errlen, "%s: has more than the %d tokens the checkpoint's vocab_size says "
		    "(%zu bytes left over): tokenizer and checkpoint do not belong together", path, n, len - off);
		return KVC_EFORMAT;
	}
	return KVC_OK;
}

/* Add one F32 tensor of (n_out, n_in) (or a vector when n_out == 0) from src. */
static int
add_f32(struct gguf_writer *w, const char *name, const unsigned char *src,
    int64_t n_in, int64_t n_out)
{
	int64_t ne[2] = { n_in, n_out ? n_out : 1 };
	size_t nb = (size_t)(n_in * (n_out ? n_out : 1)) * sizeof(float);
	float *tmp;
	int rc;

	/* The checkpoint is little-endian float32; copy through rd_f32 for portability. */
	tmp = malloc(nb);
	if (tmp == NULL)
		return KVC_ENOMEM;
	for (size_t i = 0; i < nb / 4; i++)
		tmp[i] = rd_f32(src + 4 * i);
	rc = gguf_w_tensor(w, name, GGML_TYPE_F32, n_out ? 2 : 1, ne, tmp, nb);
	free(tmp);
	return rc;
}

/*
 * Bytes a checkpoint with header c has: the header, then the float32
 * arrays in the order llama2c.h lists them (the header bounds keep this
 * from overflowing).
 */
static uint64_t
ckpt_bytes(const struct l2c_config *c)
{
	uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
	uint64_t V = (uint64_t)c->vocab_size, head = dim / (uint64_t)c->n_heads;
	uint64_t kv_dim = head * (uint64_t)c->n_kv_heads, need;

	need = V * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim +
	    L * dim + 3 * L * hid * dim + dim + (uint64_t)c->seq_len * head +
	    (c->shared_cls ? 0 : V * dim);
	return 28 + 4 * need;
}

/* The GGUF metadata: llama hyper-parameters and the SPM vocabulary. 0 or KVC_ENOMEM. */
static int
put_metadata(struct gguf_writer *w, const struct l2c_config *c, const struct l2c_vocab *v,
    const char *name)
{
	int rc;

	rc = gguf_w_str(w, "general.architecture", "llama");
	rc = rc ? rc : gguf_w_str(w, "general.name", name);
	rc = rc ? rc : gguf_w_u32(w, "general.file_type", 0);	/* all F32 */
	rc = rc ? rc : gguf_w_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
	rc = rc ? rc : gguf_w_u32(w, "llama.context_length", (uint32_t)c->seq_len);
	rc = rc ? rc : gguf_w_u32(w, "llama.embedding_length", (uint32_t)c->dim);
	rc = rc ? rc : gguf_w_u32(w, "llama.block_count", (uint32_t)c->n_layers);
	rc = rc ? rc : gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
	rc = rc ? rc : gguf_w_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
	rc = rc ? rc : gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
	rc = rc ? rc : gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	rc = rc ? rc : gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
	/*
	 * llama2.c rotates adjacent pairs (2i, 2i+1) of each head, which is
	 * the "llama" convention of model.h, so wq/wk are stored unpermuted.
	 */
	rc = rc ? rc : gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)(c->dim / c->n_heads));
	rc = rc ? rc : gguf_w_str(w, "tokenizer.ggml.model", "llama");
	rc = rc ? rc : gguf_w_arr_strn(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, v->len, (size_t)v->n);
	rc = rc ? rc : gguf_w_arr_f32(w, "tokenizer.ggml.scores", v->score, (size_t)v->n);
	rc = rc ? rc : gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v->type, (size_t)v->n);
	rc = rc ? rc : gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	rc = rc ? rc : gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
	rc = rc ? rc : gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
	rc = rc ? rc : gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
	rc = rc ? rc : gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
	rc = rc ? rc : gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", true);
	return rc;
}

/* Every tensor of the checkpoint ck (size already checked), as F32. 0 or KVC_ENOMEM. */
static int
put_tensors(struct gguf_writer *w, const unsigned char *ck, const struct l2c_config *c)
{
	uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
	uint64_t V = (uint64_t)c->vocab_size, head = dim / (uint64_t)c->n_heads;
	uint64_t kv_dim = head * (uint64_t)c->n_kv_heads;
	const unsigned char *emb = ck + 28, *att, *wq, *wk, *wv, *wo, *ffn, *w1, *w2, *w3, *fin, *cls;
	size_t f = 4;
	char name[96];
	int rc;

	att = emb + V * dim * f;
	wq = att + L * dim * f;
	wk = wq + L * dim * dim * f;
	wv = wk + L * kv_dim * dim * f;
	wo = wv + L * kv_dim * dim * f;
	ffn = wo + L * dim * dim * f;
	w1 = ffn + L * dim * f;
	w2 = w1 + L * hid * dim * f;
	w3 = w2 + L * dim * hid * f;
	fin = w3 + L * hid * dim * f;
	cls = fin + dim * f + (uint64_t)c->seq_len * head * f;

	rc = add_f32(w, "token_embd.weight", emb, (int64_t)dim, (int64_t)V);
	for (uint64_t l = 0; l < L && rc == 0; l++) {
#define T(suffix, src, n_in, n_out) do { \
		snprintf(name, sizeof name, "blk.%llu.%s.weight", (unsigned long long)l, suffix); \
		if (rc == 0) rc = add_f32(w, name, src, (int64_t)(n_in), (int64_t)(n_out)); \
	} while (0)
		T("attn_norm", att + l * dim * f, dim, 0);
		T("attn_q", wq + l * dim * dim * f, dim, dim);
		T("attn_k", wk + l * kv_dim * dim * f, dim, kv_dim);
		T("attn_v", wv + l * kv_dim * dim * f, dim, kv_dim);
		T("attn_output", wo + l * dim * dim * f, dim, dim);
		T("ffn_norm", ffn + l * dim * f, dim, 0);
		T("ffn_gate", w1 + l * hid * dim * f, dim, hid);
		T("ffn_down", w2 + l * dim * hid * f, hid, dim);
		T("ffn_up", w3 + l * hid * dim * f, dim, hid);
#undef T
	}
	if (rc == 0)
		rc = add_f32(w, "output_norm.weight", fin, (int64_t)dim, 0);
	if (rc == 0 && !c->shared_cls)
		rc = add_f32(w, "output.weight", cls, (int64_t)dim, (int64_t)V);
	return rc;
}

int
l2c_convert(const char *ckpt_path, const char *tok_path, const char *out_path,
    struct l2c_config *cfg_out, char *err, size_t errlen)
{
	unsigned char *ck = NULL, *tk = NULL;
	size_t ck_len = 0, tk_len = 0;
	struct l2c_config c;
	struct l2c_vocab v = { 0 };
	struct gguf_writer *w = NULL;
	uint64_t need;
	const char *base;
	int rc;

	rc = read_file(ckpt_path, &ck, &ck_len, err, errlen);
	if (rc)
		goto out;
	rc = parse_header(ck, ck_len, &c, ckpt_path, err, errlen);
	if (rc)
		goto out;
	if (cfg_out)
		*cfg_out = c;
	need = ckpt_bytes(&c);
	if (ck_len != need) {
		kvc_err(err, errlen, "%s: %s: the header (dim=%d hidden=%d layers=%d heads=%d kv_heads=%d "
		    "vocab=%d seq_len=%d) needs %llu bytes, the file has %zu", ckpt_path,
		    ck_len < need ? "truncated" : "unexpected trailing data", c.dim, c.hidden_dim,
		    c.n_layers, c.n_heads, c.n_kv_heads, c.shared_cls ? c.vocab_size : -c.vocab_size,
		    c.seq_len, (unsigned long long)need, ck_len);
		rc = KVC_EFORMAT;
		goto out;
	}
	rc = read_file(tok_path, &tk, &tk_len, err, errlen);
	if (rc)
		goto out;
	rc = parse_vocab(tk, tk_len, c.vocab_size, &v, tok_path, err, errlen);
	if (rc) {
		if (rc == KVC_ENOMEM)
			kvc_err(err, errlen, "%s: out of memory", tok_path);
		goto out;
	}

	w = gguf_writer_new();
	if (w == NULL) {
		rc = KVC_ENOMEM;
		goto nomem;
	}
	base = strrchr(ckpt_path, '/');
	base = base ? base + 1 : ckpt_path;
	if ((rc = put_metadata(w, &c, &v, base)) != 0 || (rc = put_tensors(w, ck, &c)) != 0)
		goto nomem;
	rc = gguf_w_write(w, out_path, err, errlen);
	goto out;
nomem:
	kvc_err(err, errlen, "%s: out of memory building the GGUF", out_path);
out:
	if (w)
		gguf_writer_free(w);
	vocab_free(&v);
	free(ck);
	free(tk);
	return rc;
}
