/*
 * test_discover: model discovery over fake ollama / Hugging Face / LM Studio /
 * kvchat trees in a temporary HOME, ollama name resolution, the progress bar
 * text and the colour decision.
 */
#include "gguf/gguf.h"
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "test.h"
#include "cli/colour.h"
#include "cli/discover.h"
#include "cli/progress.h"

static char root[512];

static void
mkdirs(const char *rel)
{
	char p[1024];

	snprintf(p, sizeof p, "%s/%s", root, rel);
	for (char *s = p + strlen(root) + 1; *s; s++) {
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	}
	mkdir(p, 0755);
}

static void
put_file(const char *rel, const char *text)
{
	char p[1024];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", root, rel);
	f = fopen(p, "w");
	if (f == NULL) {
		perror(p);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

/*
 * A small GGUF at root/rel: arch, file_type (-1 = none), one 2-D tensor
 * "blk.0.attn_q.weight" of type ttype preceded by a 1-D norm; pad bytes of
 * extra data make sizes differ.
 */
static uint64_t
put_gguf(const char *rel, const char *arch, int ftype, enum gguf_dtype ttype, int pad)
{
	struct gguf_writer *w = gguf_writer_new();
	char p[1024], err[256];
	int64_t ne1[1] = { 32 }, ne2[2] = { 32, 4 + pad };
	static float f32[32 * 64];
	static uint16_t f16[32 * 64];
	struct stat st;

	snprintf(p, sizeof p, "%s/%s", root, rel);
	test_cond(w != NULL, "writer");
	gguf_w_str(w, "general.architecture", arch);
	gguf_w_str(w, "general.name", rel);
	if (ftype >= 0)
		gguf_w_u32(w, "general.file_type", (uint32_t)ftype);
	gguf_w_tensor(w, "blk.0.attn_norm.weight", GGML_TYPE_F32, 1, ne1, f32, sizeof(float) * 32);
	if (ttype == GGML_TYPE_F16)
		gguf_w_tensor(w, "blk.0.attn_q.weight", ttype, 2, ne2, f16,
		    sizeof(uint16_t) * 32 * (size_t)ne2[1]);
	else
		gguf_w_tensor(w, "blk.0.attn_q.weight", GGML_TYPE_F32, 2, ne2, f32,
		    sizeof(float) * 32 * (size_t)ne2[1]);
	if (gguf_w_write(w, p, err, sizeof err) != 0) {
		fprintf(stderr, "writing %s: %s\n", p, err);
		exit(1);
	}
	gguf_writer_free(w);
	if (stat(p, &st) != 0) {
		perror(p);
		exit(1);
	}
	return (uint64_t)st.st_size;
}

static const struct disc_model *
find_name(const struct disc_model *v, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0)
			return &v[i];
	return NULL;
}

static void
rel_path(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", root, rel);
}

#define HEX_A "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
#define HEX_B "0000000000000000000000000000000000000000000000000000000000000b0b"
#define HEX_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static void
manifest(const char *rel, const char *model_hex)
{
	char text[2048];

	/* Layer order as ollama writes it: model first is not guaranteed, so put it second. */
	snprintf(text, sizeof text,
	    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\","
	    "\"config\":{\"mediaType\":\"application/vnd.docker.container.image.v1+json\","
	    "\"digest\":\"sha256:" HEX_C "\",\"size\":485},\n"
	    "  \"layers\":[{\"mediaType\":\"application/vnd.ollama.image.template\",\"digest\":\"sha256:" HEX_C "\",\"size\":1482},\n"
	    "   {\"mediaType\" : \"application/vnd.ollama.image.model\", \"digest\" : \"sha256:%s\", \"size\": 123, \"from\": null},\n"
	    "   {\"mediaType\":\"application/vnd.ollama.image.params\",\"digest\":\"sha256:" HEX_C "\",\"size\":[1,2,{\"x\":true}]}]}\n",
	    model_hex);
	put_file(rel, text);
}

static void
test_trees(void)
{
	struct disc_model *v;
	const struct disc_model *m;
	char err[1024], want[1024], *path;
	uint64_t sz_ollama, sz_ns, sz_hf, sz_lms, sz_lms2, sz_mine, sz_shard, sz_env;
	int n, rc;

	/* kvchat's own folder (XDG_DATA_HOME unset: ~/.local/share). */
	mkdirs("home/.local/share/kvchat/models/sub");
	sz_mine = put_gguf("home/.local/share/kvchat/models/mine.gguf", "llama", 7, GGML_TYPE_F32, 1);
	put_file("home/.local/share/kvchat/models/notes.txt", "not a model");
	put_file("home/.local/share/kvchat/models/fake.gguf", "this is not GGUF at all");
	sz_shard = put_gguf("home/.local/share/kvchat/models/sub/big-00001-of-00002.gguf", "llama", 1, GGML_TYPE_F16, 2);
	put_gguf("home/.local/share/kvchat/models/sub/big-00002-of-00002.gguf", "llama", 1, GGML_TYPE_F16, 2);

	/* ollama: two tags of one model share a blob; another namespace; a broken manifest. */
	mkdirs("home/.ollama/models/blobs");
	mkdirs("home/.ollama/models/manifests/registry.ollama.ai/library/qwen2.5");
	mkdirs("home/.ollama/models/manifests/registry.ollama.ai/someone/tiny");
	mkdirs("home/.ollama/models/manifests/registry.ollama.ai/library/broken");
	sz_ollama = put_gguf("home/.ollama/models/blobs/sha256-" HEX_A, "qwen2", 15, GGML_TYPE_F32, 3);
	sz_ns = put_gguf("home/.ollama/models/blobs/sha256-" HEX_B, "qwen3", -1, GGML_TYPE_F16, 4);
	put_file("home/.ollama/models/blobs/sha256-" HEX_C, "{\"template\":1}");
	manifest("home/.ollama/models/manifests/registry.ollama.ai/library/qwen2.5/7b", HEX_A);
	manifest("home/.ollama/models/manifests/registry.ollama.ai/library/qwen2.5/latest", HEX_A);
	manifest("home/.ollama/models/manifests/registry.ollama.ai/someone/tiny/1b", HEX_B);
	put_file("home/.ollama/models/manifests/registry.ollama.ai/library/broken/latest",
	    "{\"layers\":[{\"mediaType\":\"application/vnd.ollama.image.template\",\"digest\":\"sha256:" HEX_C "\"}]}");

	/* Hugging Face: snapshots link into blobs; two revisions, one file. */
	mkdirs("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/blobs");
	mkdirs("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/rev1");
	mkdirs("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/rev2");
	mkdirs("home/.cache/huggingface/hub/datasets--x--y/snapshots/r");
	sz_hf = put_gguf("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/blobs/deadbeef",
	    "qwen2", -1, GGML_TYPE_F16, 5);
	rel_path(want, sizeof want, "home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/rev1/qwen2.5-0.5b-instruct-f16.gguf");
	test_cond(symlink("../../blobs/deadbeef", want) == 0, "symlink: %s", strerror(errno));
	rel_path(want, sizeof want, "home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/rev2/qwen2.5-0.5b-instruct-f16.gguf");
	test_cond(symlink("../../blobs/deadbeef", want) == 0, "symlink: %s", strerror(errno));
	put_gguf("home/.cache/huggingface/hub/datasets--x--y/snapshots/r/data.gguf", "llama", 0, GGML_TYPE_F32, 0);

	/* LM Studio, both places. */
	mkdirs("home/.lmstudio/models/lmstudio-community/Llama-3.2-1B-GGUF");
	mkdirs("home/.cache/lm-studio/models/old");
	sz_lms = put_gguf("home/.lmstudio/models/lmstudio-community/Llama-3.2-1B-GGUF/Llama-3.2-1B-Q8_0.gguf",
	    "llama", 7, GGML_TYPE_F32, 6);
	sz_lms2 = put_gguf("home/.cache/lm-studio/models/old/old.gguf", "llama", 2, GGML_TYPE_F32, 7);

	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0, "disc_find_all: %s", err);
	for (int i = 0; i < n; i++)
		printf("  %-70s %-8s %-6s %8llu %d\n", v[i].name, v[i].type, v[i].arch,
		    (unsigned long long)v[i].size, (int)v[i].source);
	/* mine, big shard, qwen2.5:7b (latest is the same blob), someone/tiny:1b, HF, 2 LM Studio */
	test_cond(n == 7, "found %d models, want 7", n);

	m = find_name(v, n, "mine.gguf");
	test_cond(m && m->source == DISC_KVCHAT && m->size == sz_mine && strcmp(m->type, "Q8_0") == 0 &&
	    strcmp(m->arch, "llama") == 0, "mine.gguf");
	m = find_name(v, n, "sub/big-00001-of-00002.gguf");
	test_cond(m && m->size == sz_shard && strcmp(m->type, "F16") == 0, "first shard listed");
	test_cond(find_name(v, n, "sub/big-00002-of-00002.gguf") == NULL, "later shard not listed");
	test_cond(find_name(v, n, "fake.gguf") == NULL, "non-GGUF skipped");
	/* these headers hold no model: the picker says why kvchat cannot run them */
	test_cond(m && strstr(m->why, "missing key llama.embedding_length") != NULL &&
	    strstr(m->why, root) == NULL, "why (without the path): '%s'", m ? m->why : "");

	m = find_name(v, n, "qwen2.5:7b");
	if (m == NULL)
		m = find_name(v, n, "qwen2.5:latest");
	rel_path(want, sizeof want, "home/.ollama/models/blobs/sha256-" HEX_A);
	test_cond(m && m->source == DISC_OLLAMA && strcmp(m->path, want) == 0 &&
	    m->size == sz_ollama && strcmp(m->type, "Q4_K_M") == 0 && strcmp(m->arch, "qwen2") == 0,
	    "ollama qwen2.5");
	m = find_name(v, n, "someone/tiny:1b");
	test_cond(m && m->size == sz_ns && strcmp(m->type, "F16") == 0 && strcmp(m->arch, "qwen3") == 0,
	    "ollama namespace: type from the first block matrix");

	m = find_name(v, n, "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-f16.gguf");
	test_cond(m && m->source == DISC_HF && m->size == sz_hf && strcmp(m->type, "F16") == 0,
	    "hugging face");
	m = find_name(v, n, "lmstudio-community/Llama-3.2-1B-GGUF/Llama-3.2-1B-Q8_0.gguf");
	test_cond(m && m->source == DISC_LMSTUDIO && m->size == sz_lms && strcmp(m->type, "Q8_0") == 0,
	    "lm studio");
	m = find_name(v, n, "old/old.gguf");
	test_cond(m && m->size == sz_lms2 && strcmp(m->type, "Q4_0") == 0, "lm-studio cache");
	/* Places in order: kvchat, ollama, HF, LM Studio. */
	test_cond(n == 7 && v[0].source == DISC_KVCHAT && v[2].source == DISC_OLLAMA &&
	    v[4].source == DISC_HF && v[6].source == DISC_LMSTUDIO, "search order");
	disc_free(v, n);

	/* Resolution. */
	rel_path(want, sizeof want, "home/.ollama/models/blobs/sha256-" HEX_A);
	rc = disc_resolve("qwen2.5:7b", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve qwen2.5:7b: %d %s", rc, rc ? err : path);
	free(path);
	rc = disc_resolve("qwen2.5", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve qwen2.5 (latest)");
	free(path);
	rc = disc_resolve("library/qwen2.5:7b", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve library/qwen2.5:7b");
	free(path);
	rc = disc_resolve("registry.ollama.ai/library/qwen2.5:latest", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve with host");
	free(path);
	rel_path(want, sizeof want, "home/.ollama/models/blobs/sha256-" HEX_B);
	rc = disc_resolve("someone/tiny:1b", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve someone/tiny:1b");
	free(path);

	rc = disc_resolve("qwen2.5:32b", &path, err, sizeof err);
	test_cond(rc == KVC_ENOTFOUND && path == NULL && strstr(err, "qwen2.5:32b") &&
	    strstr(err, "manifests/registry.ollama.ai/library/qwen2.5/32b"),
	    "missing tag names what was tried: %s", err);
	rc = disc_resolve("broken", &path, err, sizeof err);
	test_cond(rc == KVC_EFORMAT && strstr(err, "no model layer"), "manifest without model layer: %s", err);
	rc = disc_resolve("../../etc:passwd", &path, err, sizeof err);
	test_cond(rc == KVC_ENOTFOUND, "unsafe name refused: %s", err);
	rc = disc_resolve("a/b/c/d:e", &path, err, sizeof err);
	test_cond(rc == KVC_ENOTFOUND, "too many components");

	rel_path(want, sizeof want, "home/.local/share/kvchat/models/mine.gguf");
	rc = disc_resolve(want, &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "existing path is itself");
	free(path);
	rc = disc_resolve("mine.gguf", &path, err, sizeof err);
	test_cond(rc == 0 && strcmp(path, want) == 0, "a listed file name");
	free(path);
	rel_path(want, sizeof want, "home");
	rc = disc_resolve(want, &path, err, sizeof err);
	test_cond(rc == KVC_EINVAL && strstr(err, "directory"), "a directory: %s", err);

	/* Environment overrides. */
	rel_path(want, sizeof want, "home/.lmstudio/models/lmstudio-community/Llama-3.2-1B-GGUF/Llama-3.2-1B-Q8_0.gguf");
	setenv("KVCHAT_MODEL", want, 1);
	rel_path(want, sizeof want, "data");
	setenv("XDG_DATA_HOME", want, 1);
	mkdirs("data/kvchat/models");
	sz_env = put_gguf("data/kvchat/models/x.gguf", "qwen2", 1, GGML_TYPE_F16, 8);
	rel_path(want, sizeof want, "hfcache");
	setenv("HF_HUB_CACHE", want, 1);
	rel_path(want, sizeof want, "olla");
	setenv("OLLAMA_MODELS", want, 1);
	mkdirs("olla/blobs");
	mkdirs("olla/manifests/registry.ollama.ai/library/m");
	put_gguf("olla/blobs/sha256-" HEX_A, "llama", 18, GGML_TYPE_F32, 9);
	manifest("olla/manifests/registry.ollama.ai/library/m/latest", HEX_A);
	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0, "disc_find_all (env)");
	/* env file; x.gguf; m:latest; LM Studio's two (the env one is not listed twice) */
	test_cond(n == 4, "with overrides found %d, want 4", n);
	test_cond(n >= 1 && v[0].source == DISC_ENV && strcmp(v[0].type, "Q8_0") == 0, "KVCHAT_MODEL first");
	m = find_name(v, n, "x.gguf");
	test_cond(m && m->size == sz_env, "XDG_DATA_HOME");
	m = find_name(v, n, "m:latest");
	test_cond(m && strcmp(m->type, "Q6_K") == 0, "OLLAMA_MODELS");
	test_cond(find_name(v, n, "qwen2.5:7b") == NULL, "~/.ollama ignored when OLLAMA_MODELS set");
	disc_free(v, n);
	rc = disc_resolve("m", &path, err, sizeof err);
	rel_path(want, sizeof want, "olla/blobs/sha256-" HEX_A);
	test_cond(rc == 0 && strcmp(path, want) == 0, "resolve under OLLAMA_MODELS");
	free(path);

	/* Nothing anywhere. */
	rel_path(want, sizeof want, "empty");
	mkdirs("empty");
	setenv("HOME", want, 1);
	unsetenv("KVCHAT_MODEL");
	unsetenv("XDG_DATA_HOME");
	unsetenv("HF_HUB_CACHE");
	unsetenv("OLLAMA_MODELS");
	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0 && n == 0 && v == NULL, "empty home: %d models", n);
	test_cond(strstr(disc_help_where(), "kvchat/models") != NULL, "help text");

	/* $HOME relative: the password database's home, never one under the
	 * current folder (issue 10). */
	mkdirs("cwd/rel/.local/share/kvchat/models");
	put_gguf("cwd/rel/.local/share/kvchat/models/cwdmodel.gguf", "llama", 7, GGML_TYPE_F32, 1);
	rel_path(want, sizeof want, "cwd");
	test_cond(chdir(want) == 0, "chdir %s", want);
	setenv("HOME", "rel", 1);
	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0, "relative $HOME: %s", err);
	for (int i = 0; rc == 0 && i < n; i++)
		test_cond(strstr(v[i].path, "cwdmodel") == NULL,
		    "relative $HOME: found %s under the current folder", v[i].path);
	disc_free(v, n);
	test_cond(chdir("/") == 0, "chdir /");

	/*
	 * The XDG base folders (issue 26): XDG_CACHE_HOME holds the Hugging
	 * Face hub and LM Studio's cache, as those programs put them there;
	 * a relative XDG_DATA_HOME or XDG_CACHE_HOME is ignored, as the spec
	 * and the database path ignore it.
	 */
	mkdirs("xc/huggingface/hub/models--org--tiny-GGUF/snapshots/r1");
	put_gguf("xc/huggingface/hub/models--org--tiny-GGUF/snapshots/r1/tiny-q8.gguf", "llama", 7,
	    GGML_TYPE_F32, 1);
	mkdirs("xc/lm-studio/models/pub/repo");
	put_gguf("xc/lm-studio/models/pub/repo/lms.gguf", "llama", 7, GGML_TYPE_F32, 1);
	rel_path(want, sizeof want, "empty");
	setenv("HOME", want, 1);
	rel_path(want, sizeof want, "xc");
	setenv("XDG_CACHE_HOME", want, 1);
	unsetenv("HF_HOME");
	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0 && n == 2, "XDG_CACHE_HOME: %d models, want 2 (%s)", n, err);
	for (int i = 0, hub = 0, lms = 0; rc == 0 && i <= n; i++) {
		if (i == n)
			test_cond(hub == 1 && lms == 1, "under XDG_CACHE_HOME: %d hub, %d LM Studio", hub,
			    lms);
		else if (strstr(v[i].path, "/xc/huggingface/hub/") != NULL)
			hub++;
		else if (strstr(v[i].path, "/xc/lm-studio/models/") != NULL)
			lms++;
	}
	disc_free(v, n);
	setenv("XDG_CACHE_HOME", "xc", 1);
	setenv("XDG_DATA_HOME", "data", 1);
	rel_path(want, sizeof want, ".");
	test_cond(chdir(want) == 0, "chdir %s", want);
	rc = disc_find_all(&v, &n, err, sizeof err);
	test_cond(rc == 0 && n == 0, "relative XDG_CACHE_HOME / XDG_DATA_HOME: %d models, want 0", n);
	disc_free(v, n);
	path = disc_models_dir();
	test_cond(path && strstr(path, "empty/.local/share/kvchat/models"),
	    "relative XDG_DATA_HOME: models folder %s", path ? path : "(none)");
	free(path);
	unsetenv("XDG_CACHE_HOME");
	unsetenv("XDG_DATA_HOME");
	test_cond(chdir("/") == 0, "chdir /");
}

static void
test_names(void)
{
	char b[32];

	test_cond(strcmp(disc_file_type_name(15), "Q4_K_M") == 0, "ftype 15");
	test_cond(strcmp(disc_file_type_name(1), "F16") == 0, "ftype 1");
	test_cond(strcmp(disc_file_type_name(1024 + 17), "Q5_K_M") == 0, "guessed bit");
	test_cond(disc_file_type_name(4) == NULL && disc_file_type_name(99) == NULL &&
	    disc_file_type_name(-1) == NULL, "unknown ftypes");
	test_cond(strcmp(disc_format_size(4683073184ULL, b, sizeof b), "4.7 GB") == 0, "%s", b);
	test_cond(strcmp(disc_format_size(397807936ULL, b, sizeof b), "398 MB") == 0, "%s", b);
	test_cond(strcmp(disc_format_size(512, b, sizeof b), "512 B") == 0, "%s", b);
}

static void
test_progress(void)
{
	char line[256], out[4096];
	struct kvc_progress p;
	int fds[2];
	ssize_t r;
	size_t got = 0;

	progress_format(line, sizeof line, "loading", 50, 100, 1.25, 40);
	/* "loading [" + 20 + "]" + " 50% 1.2s" fits 39 columns */
	test_cond(strlen(line) <= 39 && strstr(line, " 50% ") && strncmp(line, "loading [", 9) == 0,
	    "half bar: '%s'", line);
	{
		const char *a = strchr(line, '['), *b = strchr(line, ']');
		int hashes = 0, barw = a && b ? (int)(b - a - 1) : 0;

		for (const char *c = a ? a : line; a && c < b; c++)
			hashes += *c == '#';
		test_cond(barw >= 10 && hashes == barw / 2 && a[hashes + 1] == '>',
		    "half filled: '%s'", line);
	}
	progress_format(line, sizeof line, "loading", 0, 0, 2.0, 80);
	test_cond(strcmp(line, "loading ... 2.0s") == 0, "unknown total: '%s'", line);
	progress_format(line, sizeof line, "x", 200, 100, 0.0, 80);
	test_cond(strstr(line, "100%") != NULL, "clamped: '%s'", line);
	/* Positions (prefill, rebuild): counts, rate and time left (issue 13). */
	progress_format_rate(line, sizeof line, "prefill", 1000, 3000, 2.0);
	test_cond(strcmp(line, "prefill 1000/3000 positions, 500 tok/s, ETA 4s") == 0,
	    "rate line: '%s'", line);
	progress_format_rate(line, sizeof line, "rebuilding", 0, 3000, 0.0);
	test_cond(strcmp(line, "rebuilding 0/3000 positions") == 0, "no rate yet: '%s'", line);

	/* Not a terminal, not forced: silent. */
	test_cond(pipe(fds) == 0, "pipe");
	progress_start_fd(&p, fds[1], false, "quiet", 10);
	progress_update(&p, 5, 0);
	progress_end(&p);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	r = read(fds[0], out, sizeof out);
	test_cond(r <= 0, "nothing drawn on a pipe (%zd bytes)", r);

	/* Forced: draws, throttles, clears. */
	progress_start_fd(&p, fds[1], true, "restoring", 100);
	for (int i = 1; i <= 100; i++)
		progress_update(&p, (uint64_t)i, 0);
	progress_end(&p);
	while ((r = read(fds[0], out + got, sizeof out - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	{
		int draws = 0;

		for (char *s = out; (s = strstr(s, "restoring [")) != NULL; s++)
			draws++;
		test_cond(draws >= 1 && draws <= 3, "throttled redraws: %d", draws);
	}
	test_cond(strstr(out, "100%") != NULL, "final state drawn");
	test_cond(got >= 4 && memcmp(out + got - 4, "\r\033[K", 4) == 0, "line cleared at end");
	close(fds[0]);
	close(fds[1]);
}

static void
test_color(void)
{
	int m, s;

	unsetenv("NO_COLOR");
	setenv("TERM", "xterm", 1);
	test_cond(!kvc_use_color(-1), "bad fd");
	m = posix_openpt(O_RDWR | O_NOCTTY);
	if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) {
		printf("no pty; colour on a terminal not checked\n");
		return;
	}
	s = open(ptsname(m), O_RDWR | O_NOCTTY);
	test_cond(s >= 0, "pty slave");
	test_cond(kvc_use_color(s), "terminal: colour");
	setenv("NO_COLOR", "1", 1);
	test_cond(!kvc_use_color(s), "NO_COLOR=1: none");
	setenv("NO_COLOR", "", 1);
	test_cond(kvc_use_color(s), "NO_COLOR empty: colour");
	unsetenv("NO_COLOR");
	setenv("TERM", "dumb", 1);
	test_cond(!kvc_use_color(s), "TERM=dumb: none");
	test_cond(strcmp(kvc_sgr(false, KVC_SGR_BOLD), "") == 0 &&
	    strcmp(kvc_sgr(true, KVC_SGR_BOLD), "\033[1m") == 0, "kvc_sgr");
	close(s);
	close(m);
}

int
main(void)
{
	const char *tmp = getenv("TMPDIR");
	char home[600];

	snprintf(root, sizeof root, "%s/kvc-discover.XXXXXX", tmp ? tmp : "/tmp");
	if (mkdtemp(root) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(home, sizeof home, "%s/home", root);
	mkdir(home, 0755);
	setenv("HOME", home, 1);
	unsetenv("KVCHAT_MODEL");
	unsetenv("XDG_DATA_HOME");
	unsetenv("OLLAMA_MODELS");
	unsetenv("HF_HUB_CACHE");
	unsetenv("HF_HOME");

	test_names();
	test_trees();
	test_progress();
	test_color();

	{
		char cmd[700];

		snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", root);
	}
	return test_done();
}
