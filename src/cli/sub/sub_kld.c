/*
 * sub_kld.c: the KL-divergence base file of kvchat perplexity and the
 * statistics llama-perplexity --kl-divergence reports (layout and error
 * bound in sub_kld.h).
 *
 * Statistics per scored position, in double: this model's log-softmax lq
 * of its logits, the base's log-probabilities a' read back (renormalised);
 * KLD = sum exp(a'_i) (a'_i - lq_i) over the whole vocabulary (KL(base ||
 * this)); NLL = -lq(next) and NLL(base) = -a'(next); "same top" when both
 * argmaxes are the same id (first one on ties); dp = p(next) - p_base(next).
 * Means carry llama.cpp's uncertainty sqrt(var / (n - 1)) (0 for n <= 10),
 * percentiles its linear interpolation, the PPL ratio its covariance term.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/kvc.h"
#include "sub_common.h"
#include "sub_kld.h"

#define KLD_MAGIC "KVCKLD\0\0"
#define KLD_VERSION 1
#define KLD_HEADER 32
#define KLD_RANGE 32.0		/* nats below the top log-probability the codes cover */
#define KLD_ROW_HEAD 24		/* f64 lo, f64 step, u64 check */

struct kld_sums {
	double nll, nll2, nll_b, nll_b2, nll_nll_b;
	double kld, kld2, dp, dp2, dp4;
	long same_top, count;
};

struct kld_base {
	bool compare;
	char *path, *tmp;	/* save mode: the name to rename the temporary file to */
	int fd;
	int n_vocab, n_ctx, n_chunks, n_scored;
	size_t row_bytes;
	unsigned char *row;	/* one row as on disk */
	long rows;		/* rows saved or compared so far */
	struct kld_sums s;
	float *kld_v, *dp_v;	/* per position, for the percentiles */
};

/* FNV-1a's offset and prime applied to 64-bit little-endian words, then the tail bytes. */
static uint64_t
check64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t w;

	for (; n >= 8; n -= 8, c += 8) {
		memcpy(&w, c, 8);
		h = (h ^ w) * 0x100000001b3ULL;
	}
	for (; n > 0; n--, c++)
		h = (h ^ *c) * 0x100000001b3ULL;
	return h;
}

#define CHECK_SEED 0xcbf29ce484222325ULL

static void
put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t
get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static struct kld_base *
kld_alloc(const char *path, int n_vocab, int n_ctx, int n_chunks)
{
	struct kld_base *k = calloc(1, sizeof *k);

	if (k == NULL)
		return NULL;
	k->fd = -1;
	k->n_vocab = n_vocab;
	k->n_ctx = n_ctx;
	k->n_chunks = n_chunks;
	k->n_scored = n_ctx - 1 - n_ctx / 2;
	k->row_bytes = KLD_ROW_HEAD + 2 * (size_t)n_vocab;
	k->row = malloc(k->row_bytes);
	k->path = strdup(path);
	if (k->row == NULL || k->path == NULL) {
		free(k->row);
		free(k->path);
		free(k);
		return NULL;
	}
	return k;
}

/* The header and tokens as on disk, with their check word; NULL when out of memory. */
static unsigned char *
head_bytes(int n_vocab, int n_ctx, int n_chunks, const int32_t *tok, bool bos, size_t *len)
{
	size_t nt = (size_t)n_chunks * n_ctx, n = KLD_HEADER + 4 * nt + 8;
	unsigned char *b = malloc(n);
	uint64_t h;

	if (b == NULL)
		return NULL;
	memcpy(b, KLD_MAGIC, 8);
	put32(b + 8, KLD_VERSION);
	put32(b + 12, (uint32_t)n_vocab);
	put32(b + 16, (uint32_t)n_ctx);
	put32(b + 20, (uint32_t)n_chunks);
	put32(b + 24, (uint32_t)(n_ctx - 1 - n_ctx / 2));
	put32(b + 28, bos ? 1 : 0);
	memcpy(b + KLD_HEADER, tok, 4 * nt);
	h = check64(CHECK_SEED, b, KLD_HEADER + 4 * nt);
	memcpy(b + KLD_HEADER + 4 * nt, &h, 8);
	*len = n;
	return b;
}

int
kld_create(struct kld_base **out, const char *path, int n_vocab, int n_ctx, int n_chunks,
    const int32_t *tok, bool bos)
{
	struct kld_base *k = kld_alloc(path, n_vocab, n_ctx, n_chunks);
	unsigned char *h = NULL;
	size_t n = 0;
	char err[512] = "";

	*out = NULL;
	if (k == NULL || (h = head_bytes(n_vocab, n_ctx, n_chunks, tok, bos, &n)) == NULL) {
		fprintf(stderr, "kvchat: perplexity: out of memory\n");
		goto fail;
	}
	/* a fresh name beside path (O_EXCL): nothing planted there is written through */
	if ((k->fd = kvc_file_tmp_beside(path, 0600, &k->tmp, err, sizeof err)) < 0) {
		fprintf(stderr, "kvchat: perplexity: %s\n", err);
		goto fail;
	}
	if (kvc_write_all(k->fd, h, n) != KVC_OK) {
		fprintf(stderr, "kvchat: perplexity: %s: %s\n", k->tmp, strerror(errno));
		goto fail;
	}
	free(h);
	*out = k;
	return 0;
fail:
	free(h);
	kld_close(k, false);
	return 1;
}

/* Says why the base file cannot be used; always 1. */
static int refuse(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
refuse(const char *path, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvchat: perplexity: %s: ", path);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* Reads exactly n bytes at the file's position: 0, or -1 (short or error). */
static int
read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n > 0) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* What a base file's header says. */
struct kld_head {
	uint32_t n_vocab, n_ctx, n_chunks, n_scored, flags;
};

/*
 * The header read, its own consistency and the file's size checked (so a
 * truncated or damaged file is called that, not a mismatch); 0, or 1 with
 * the reason said.
 */
static int
read_header(const struct kld_base *k, const unsigned char *b, uint64_t size, struct kld_head *h)
{
	const char *p = k->path;
	uint64_t want;

	if (memcmp(b, KLD_MAGIC, 8) != 0)
		return refuse(p, "not a kvchat KL-divergence base file (one that kvchat perplexity "
		    "--kl-divergence-base FILE writes)");
	if (get32(b + 8) != KLD_VERSION)
		return refuse(p, "base file version %u; this kvchat reads version %d", get32(b + 8), KLD_VERSION);
	h->n_vocab = get32(b + 12);
	h->n_ctx = get32(b + 16);
	h->n_chunks = get32(b + 20);
	h->n_scored = get32(b + 24);
	h->flags = get32(b + 28);
	if (h->n_vocab == 0 || h->n_vocab > (1u << 24) || h->n_ctx < 4 || h->n_ctx > (1u << 20) ||
	    h->n_chunks == 0 || h->n_chunks > (1u << 20) || h->n_scored != h->n_ctx - 1 - h->n_ctx / 2 ||
	    h->flags > 1)
		return refuse(p, "corrupt: its header does not hold together");
	want = KLD_HEADER + 4 * (uint64_t)h->n_chunks * h->n_ctx + 8 +
	    (uint64_t)h->n_chunks * h->n_scored * (KLD_ROW_HEAD + 2 * (uint64_t)h->n_vocab);
	if (size < want)
		return refuse(p, "truncated: %llu bytes where its header promises %llu",
		    (unsigned long long)size, (unsigned long long)want);
	if (size > want)
		return refuse(p, "corrupt: %llu bytes where its header promises %llu",
		    (unsigned long long)size, (unsigned long long)want);
	return 0;
}

/* This run against the header: 0, or 1 with the reason said. */
static int
match_header(const struct kld_base *k, const struct kld_head *h, bool bos, int n_chunks)
{
	const char *p = k->path;

	if (h->n_vocab != (uint32_t)k->n_vocab)
		return refuse(p, "the base was made with a vocabulary of %u tokens; this model has %d "
		    "(another model family?)", h->n_vocab, k->n_vocab);
	if (h->n_ctx != (uint32_t)k->n_ctx)
		return refuse(p, "the base was made with -c %u; this run has -c %d", h->n_ctx, k->n_ctx);
	if ((h->flags == 1) != bos)
		return refuse(p, "the base's chunks %s with BOS and this model's %s (another vocabulary?)",
		    h->flags ? "start" : "do not start", bos ? "do" : "do not");
	if (n_chunks > (int)h->n_chunks)
		return refuse(p, "holds %u chunks; --chunks asks for %d", h->n_chunks, n_chunks);
	return 0;
}

/* Reads the tokens and their check word, compares the first n_chunks' with tok[]; 0, or 1 with the reason said. */
static int
check_tokens(struct kld_base *k, const unsigned char *head, const struct kld_head *h, const int32_t *tok)
{
	size_t nt = (size_t)h->n_chunks * h->n_ctx, i;
	int32_t *bt = malloc(nt * 4 + 8);
	uint64_t sum, want;
	int rc = 1;

	if (bt == NULL) {
		fprintf(stderr, "kvchat: perplexity: out of memory\n");
		return 1;
	}
	if (read_all(k->fd, bt, nt * 4 + 8) != 0) {
		refuse(k->path, "cannot read its token list: %s", errno ? strerror(errno) : "short read");
		goto out;
	}
	sum = check64(check64(CHECK_SEED, head, KLD_HEADER), bt, nt * 4);
	memcpy(&want, (char *)bt + nt * 4, 8);
	if (sum != want) {
		refuse(k->path, "corrupt: its header or token list fails its check");
		goto out;
	}
	for (i = 0; i < (size_t)k->n_chunks * k->n_ctx; i++)
		if (bt[i] != tok[i]) {
			refuse(k->path, "the base was made from another text or tokenization: token %zu is %d "
			    "there and %d here", i, (int)bt[i], (int)tok[i]);
			goto out;
		}
	rc = 0;
out:
	free(bt);
	return rc;
}

int
kld_open(struct kld_base **out, const char *path, int n_vocab, int n_ctx, int *n_chunks,
    const int32_t *tok, size_t n_text_tok, bool bos)
{
	struct kld_base *k = kld_alloc(path, n_vocab, n_ctx, 0);
	unsigned char head[KLD_HEADER];
	struct kld_head h = { 0, 0, 0, 0, 0 };
	struct stat st;

	*out = NULL;
	if (k == NULL) {
		fprintf(stderr, "kvchat: perplexity: out of memory\n");
		return 1;
	}
	k->compare = true;
	if ((k->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(k->fd, &st) != 0) {
		fprintf(stderr, "kvchat: perplexity: %s: cannot open the base: %s\n", path, strerror(errno));
		goto fail;
	}
	if (read_all(k->fd, head, sizeof head) != 0) {
		refuse(path, "truncated: %lld bytes, shorter than a base file's header (%d)",
		    (long long)st.st_size, KLD_HEADER);
		goto fail;
	}
	if (read_header(k, head, (uint64_t)st.st_size, &h) || match_header(k, &h, bos, *n_chunks))
		goto fail;
	k->n_chunks = *n_chunks > 0 ? *n_chunks : (int)h.n_chunks;
	if ((size_t)k->n_chunks * n_ctx > n_text_tok) {
		refuse(path, "holds %d chunks; the text has only %zu", k->n_chunks, n_text_tok / (size_t)n_ctx);
		goto fail;
	}
	if (check_tokens(k, head, &h, tok))
		goto fail;
	k->kld_v = malloc((size_t)k->n_chunks * k->n_scored * sizeof *k->kld_v);
	k->dp_v = malloc((size_t)k->n_chunks * k->n_scored * sizeof *k->dp_v);
	if (k->kld_v == NULL || k->dp_v == NULL) {
		fprintf(stderr, "kvchat: perplexity: out of memory\n");
		goto fail;
	}
	*n_chunks = k->n_chunks;
	*out = k;
	return 0;
fail:
	kld_close(k, false);
	return 1;
}

/* Save: the row of logits x (log-softmax in double, 16-bit codes), written. */
static int
save_row(struct kld_base *k, const float *x)
{
	uint16_t *code = (uint16_t *)(k->row + KLD_ROW_HEAD);
	double lse = sub_log_sum_exp(x, k->n_vocab), mx = x[0], mn = x[0], hi, lo, step, inv;
	uint64_t h;
	int i;

	for (i = 1; i < k->n_vocab; i++) {
		mx = x[i] > mx ? x[i] : mx;
		mn = x[i] < mn ? x[i] : mn;
	}
	hi = mx - lse;
	lo = mn - lse > hi - KLD_RANGE ? mn - lse : hi - KLD_RANGE;
	step = (hi - lo) / 65535.0;
	inv = step > 0 ? 1 / step : 0;
	for (i = 0; i < k->n_vocab; i++) {
		double v = ((double)x[i] - lse - lo) * inv;

		code[i] = v <= 0 ? 0 : v >= 65535 ? 65535 : (uint16_t)lrint(v);
	}
	memcpy(k->row, &lo, 8);
	memcpy(k->row + 8, &step, 8);
	h = check64(check64(CHECK_SEED, k->row, 16), code, 2 * (size_t)k->n_vocab);
	memcpy(k->row + 16, &h, 8);
	if (kvc_write_all(k->fd, k->row, k->row_bytes) != KVC_OK) {
		fprintf(stderr, "\nkvchat: perplexity: %s: %s\n", k->tmp, strerror(errno));
		return 1;
	}
	return 0;
}

/* Compare: read the next row, check it, and add this position's statistics. */
static int
compare_row(struct kld_base *k, const float *x, int next)
{
	const uint16_t *code = (const uint16_t *)(k->row + KLD_ROW_HEAD);
	double lo, step, lse_q = sub_log_sum_exp(x, k->n_vocab), lse_b = 0, mb, kl = 0;
	double nll, nll_b, dp;
	uint64_t h, want;
	int i, top_q = 0, top_b = 0;

	if (read_all(k->fd, k->row, k->row_bytes) != 0) {
		fprintf(stderr, "\nkvchat: perplexity: %s: cannot read row %ld: %s\n", k->path, k->rows,
		    errno ? strerror(errno) : "end of file");
		return 1;
	}
	memcpy(&lo, k->row, 8);
	memcpy(&step, k->row + 8, 8);
	memcpy(&want, k->row + 16, 8);
	h = check64(check64(CHECK_SEED, k->row, 16), code, 2 * (size_t)k->n_vocab);
	if (h != want || !isfinite(lo) || !isfinite(step) || step < 0 || lo > 0 || step * 65535 > KLD_RANGE + 1) {
		fprintf(stderr, "\nkvchat: perplexity: %s: corrupt: row %ld (chunk %ld) fails its check\n",
		    k->path, k->rows, k->rows / k->n_scored + 1);
		return 1;
	}
	/* renormalise what was read back: log sum exp of a_i = lo + code_i step */
	for (i = 1; i < k->n_vocab; i++) {
		top_b = code[i] > code[top_b] ? i : top_b;
		top_q = x[i] > x[top_q] ? i : top_q;
	}
	mb = lo + code[top_b] * step;
	for (i = 0; i < k->n_vocab; i++)
		lse_b += exp(lo + code[i] * step - mb);
	lse_b = mb + log(lse_b);
	for (i = 0; i < k->n_vocab; i++) {
		double a = lo + code[i] * step - lse_b;

		kl += exp(a) * (a - ((double)x[i] - lse_q));
	}
	nll = lse_q - x[next];
	nll_b = lse_b - (lo + code[next] * step);
	dp = exp(-nll) - exp(-nll_b);
	k->s.nll += nll;
	k->s.nll2 += nll * nll;
	k->s.nll_b += nll_b;
	k->s.nll_b2 += nll_b * nll_b;
	k->s.nll_nll_b += nll * nll_b;
	k->s.kld += kl;
	k->s.kld2 += kl * kl;
	k->s.dp += dp;
	k->s.dp2 += dp * dp;
	k->s.dp4 += dp * dp * dp * dp;
	k->s.same_top += top_q == top_b;
	k->kld_v[k->s.count] = (float)kl;
	k->dp_v[k->s.count] = (float)dp;
	k->s.count++;
	return 0;
}

int
kld_position(struct kld_base *k, const float *logits, int next)
{
	int rc = k->compare ? compare_row(k, logits, next) : save_row(k, logits);

	k->rows++;
	return rc;
}

bool
kld_comparing(const struct kld_base *k)
{
	return k != NULL && k->compare;
}

/* llama.cpp's mean and its uncertainty, sqrt(var / (n - 1)), 0 for n <= 10. */
static void
mean_unc(double sum, double sum2, long n, double *m, double *u)
{
	double v;

	*m = n > 0 ? sum / n : 0;
	v = n > 0 ? sum2 / n - *m * *m : 0;
	*u = v > 0 && n > 10 ? sqrt(v / (n - 1)) : 0;
}

static double
covariance(double a, double b, double ab, long n)
{
	return n < 10 ? 0 : (ab / n - (a / n) * (b / n)) / (n - 1);
}

struct kld_summary {
	double lp, lp_u, lb, lb_u, cov, ratio, ratio_u, kl, kl_u, rms, rms_u, top, top_u;
};

static void
summarise(const struct kld_sums *s, struct kld_summary *r)
{
	double mse, mse_u;

	mean_unc(s->nll, s->nll2, s->count, &r->lp, &r->lp_u);
	mean_unc(s->nll_b, s->nll_b2, s->count, &r->lb, &r->lb_u);
	r->cov = covariance(s->nll, s->nll_b, s->nll_nll_b, s->count);
	r->ratio = r->lp - r->lb;
	r->ratio_u = sqrt(fmax(0, r->lp_u * r->lp_u + r->lb_u * r->lb_u - 2 * r->cov));
	mean_unc(s->kld, s->kld2, s->count, &r->kl, &r->kl_u);
	mean_unc(s->dp2, s->dp4, s->count, &mse, &mse_u);
	r->rms = sqrt(mse);
	r->rms_u = r->rms > 0 ? 0.5 / r->rms * mse_u : 0;
	r->top = s->count > 0 ? (double)s->same_top / s->count : 0;
	r->top_u = s->count > 1 ? sqrt(r->top * (1 - r->top) / (s->count - 1)) : 0;
}

void
kld_chunk_line(const struct kld_base *k, int chunk)
{
	struct kld_summary r;

	if (chunk == 0)
		printf("chunk             PPL          ln(PPL(Q)/PPL(base))          KL Divergence"
		    "              Δp RMS            Same top p\n");
	summarise(&k->s, &r);
	printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    "
	    "%6.3f ± %6.3f %%\n", chunk + 1, exp(r.lp), exp(r.lp) * r.lp_u, r.ratio, r.ratio_u, r.kl, r.kl_u,
	    100 * r.rms, 100 * r.rms_u, 100 * r.top, 100 * r.top_u);
	fflush(stdout);
}

static int
cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/* llama.cpp's percentile of sorted v[0..n): linear between neighbours. */
static double
percentile(const float *v, long n, double f)
{
	double p;
	long i;

	if (f <= 0)
		return v[0];
	if (f >= 1)
		return v[n - 1];
	p = f * (n - 1);
	i = (long)p;
	p -= i;
	return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

static double
median(const float *v, long n)
{
	return n % 2 == 0 ? 0.5 * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

static void
report_ppl(const struct kld_summary *r)
{
	double ppl = exp(r->lp), ppl_u = ppl * r->lp_u, pb = exp(r->lb), pb_u = pb * r->lb_u;
	double cor = r->lp_u > 0 && r->lb_u > 0 ? r->cov / (r->lp_u * r->lb_u) : 0;
	double rat = exp(r->ratio), pcov = ppl * pb * r->cov;

	printf("====== Perplexity statistics ======\n");
	printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl_u);
	printf("Mean PPL(base)                : %10.6f ± %10.6f\n", pb, pb_u);
	printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cor);
	printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->ratio, r->ratio_u);
	printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", rat, rat * r->ratio_u);
	printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", ppl - pb,
	    sqrt(fmax(0, ppl_u * ppl_u + pb_u * pb_u - 2 * pcov)));
}

void
kld_report(const struct kld_base *k)
{
	static const double kq[] = { 0.999, 0.99, 0.95, 0.90, -1, 0.10, 0.05, 0.01, 0.001 };
	static const double pq[] = { 0.999, 0.99, 0.95, 0.90, 0.75, -1, 0.25, 0.10, 0.05, 0.01, 0.001 };
	struct kld_summary r;
	long n = k->s.count;
	double dm, du;
	size_t i;

	if (n == 0)
		return;
	summarise(&k->s, &r);
	qsort(k->kld_v, (size_t)n, sizeof *k->kld_v, cmp_float);
	qsort(k->dp_v, (size_t)n, sizeof *k->dp_v, cmp_float);
	report_ppl(&r);
	printf("====== KL divergence statistics ======\n");
	printf("Mean    KLD: %10.6f ± %10.6f\n", r.kl, r.kl_u);
	printf("Maximum KLD: %10.6f\n", k->kld_v[n - 1]);
	for (i = 0; i < sizeof kq / sizeof kq[0]; i++)
		if (kq[i] < 0)
			printf("Median  KLD: %10.6f\n", median(k->kld_v, n));
		else
			printf("%4.1f%%   KLD: %10.6f\n", 100 * kq[i], percentile(k->kld_v, n, kq[i]));
	printf("Minimum KLD: %10.6f\n\n", k->kld_v[0]);
	printf("====== Token probability statistics ======\n");
	mean_unc(k->s.dp, k->s.dp2, n, &dm, &du);
	printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * dm, 100 * du);
	printf("Maximum Δp: %6.3f%%\n", 100.0 * k->dp_v[n - 1]);
	for (i = 0; i < sizeof pq / sizeof pq[0]; i++)
		if (pq[i] < 0)
			printf("Median  Δp: %6.3f%%\n", 100 * median(k->dp_v, n));
		else
			printf("%4.1f%%   Δp: %6.3f%%\n", 100 * pq[i], 100 * percentile(k->dp_v, n, pq[i]));
	printf("Minimum Δp: %6.3f%%\n", 100.0 * k->dp_v[0]);
	printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * r.rms, 100 * r.rms_u);
	printf("Same top p: %6.3f ± %5.3f %%\n", 100 * r.top, 100 * r.top_u);
}

int
kld_close(struct kld_base *k, bool ok)
{
	int rc = 0;

	if (k == NULL)
		return 0;
	if (!k->compare && k->tmp != NULL) {
		if (ok && (fsync(k->fd) != 0 || rename(k->tmp, k->path) != 0)) {
			fprintf(stderr, "kvchat: perplexity: %s: cannot save the base: %s\n", k->path,
			    strerror(errno));
			ok = false;
			rc = 1;
		}
		if (!ok)
			(void)unlink(k->tmp);
		else
			fprintf(stderr, "kvchat: perplexity: saved the log-probabilities of %ld positions to %s\n",
			    k->rows, k->path);
	}
	if (k->fd >= 0)
		close(k->fd);
	free(k->tmp);
	free(k->path);
	free(k->row);
	free(k->kld_v);
	free(k->dp_v);
	free(k);
	return rc;
}
