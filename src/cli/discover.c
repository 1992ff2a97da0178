/* discover.c: find the GGUF files a user already has; resolve -m values. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>

#include "discover.h"
#include "model/model.h"
#include "gguf/gguf.h"

#define MAX_DEPTH 8		/* directory recursion; also stops symlink loops */
#define MAX_MANIFEST (1 << 20)	/* bytes: real manifests are < 2 KB */
#define OLLAMA_HOST "registry.ollama.ai"
#define OLLAMA_MODEL_MEDIA "application/vnd.ollama.image.model"

/* Accumulates results; remembers dev/ino so a file is listed once. */
struct disc_list {
	struct disc_model *v;
	int n, cap;
	struct { dev_t dev; ino_t ino; } *seen;
	int n_seen, cap_seen;
	int err;		/* first KVC_ENOMEM */
};

/* llama.cpp's general.file_type numbering (part of the GGUF convention). */
static const char *const ftype_names[] = {
	[0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1",
	[7] = "Q8_0", [8] = "Q5_0", [9] = "Q5_1", [10] = "Q2_K",
	[11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
	[15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K",
	[19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
	[23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S",
	[27] = "IQ3_M", [28] = "IQ2_S", [29] = "IQ2_M", [30] = "IQ4_XS",
	[31] = "IQ1_M", [32] = "BF16", [36] = "TQ1_0", [37] = "TQ2_0", [38] = "MXFP4_MOE",
};

const char *
disc_file_type_name(int64_t ftype)
{
	/* Newer writers may set bit 10 ("guessed"); the type is in the low bits. */
	ftype &= ~(int64_t)1024;
	if (ftype < 0 || ftype >= (int64_t)(sizeof ftype_names / sizeof ftype_names[0]))
		return NULL;
	return ftype_names[ftype];
}

char *
disc_format_size(uint64_t bytes, char *buf, size_t len)
{
	/* Decimal units, as ollama and the hub show sizes. */
	if (bytes >= 1000000000ULL)
		snprintf(buf, len, "%.1f GB", (double)bytes / 1e9);
	else if (bytes >= 1000000ULL)
		snprintf(buf, len, "%.0f MB", (double)bytes / 1e6);
	else if (bytes >= 1000ULL)
		snprintf(buf, len, "%.0f KB", (double)bytes / 1e3);
	else
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	return buf;
}

const char *
disc_help_where(void)
{
	return
	    "kvchat looks for GGUF model files in:\n"
	    "  $KVCHAT_MODEL                      a file\n"
	    "  $XDG_DATA_HOME/kvchat/models/      (default ~/.local/share/kvchat/models/)\n"
	    "  $OLLAMA_MODELS or ~/.ollama/models ollama's store (e.g. after 'ollama pull qwen2.5:7b')\n"
	    "  $HF_HUB_CACHE, $HF_HOME/hub or $XDG_CACHE_HOME/huggingface/hub\n"
	    "                                     Hugging Face downloads (default ~/.cache)\n"
	    "  ~/.lmstudio/models/, $XDG_CACHE_HOME/lm-studio/models/    LM Studio\n";
}

static char *
xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = malloc(n);

	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

/* "a" + "/" + "b" into a new string, or NULL. */
static char *
path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);

	if (p == NULL)
		return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

static bool
ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && strcasecmp(s + ls - lx, suffix) == 0;
}

static bool
has_gguf_magic(const char *path)
{
	char m[4];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return false;
	r = read(fd, m, 4);
	close(fd);
	return r == 4 && memcmp(m, "GGUF", 4) == 0;
}

/*
 * Whether kvchat can run the file: model_load's checks (architecture,
 * hyper-parameters, every tensor's name, shape and type) read only the
 * header, so the picker can mark a file it would refuse, with the reason.
 */
static void
check_runnable(struct disc_model *m, const struct gguf_file *g)
{
	struct kvc_model mo;
	char err[256] = "";
	const char *why = err;
	size_t pl = strlen(m->path);

	m->why[0] = '\0';
	if (model_load(&mo, g, err, sizeof err) == 0) {
		model_free(&mo);
		return;
	}
	/* the message starts with the path, which the picker shows already */
	if (strncmp(err, m->path, pl) == 0 && strncmp(err + pl, ": ", 2) == 0)
		why = err + pl + 2;
	snprintf(m->why, sizeof m->why, "%s", why);
}

/* Type and architecture from the header: general.file_type, else the first block matrix's type. */
static void
read_type(struct disc_model *m)
{
	struct gguf_file *g;
	const char *s;
	int64_t ft;

	snprintf(m->type, sizeof m->type, "?");
	m->arch[0] = '\0';
	if (gguf_open(&g, m->path, NULL, 0) != 0)
		return;
	s = gguf_get_str(g, "general.architecture", "");
	snprintf(m->arch, sizeof m->arch, "%s", s);
	check_runnable(m, g);
	ft = gguf_get_int(g, "general.file_type", -1);
	if ((s = disc_file_type_name(ft)) != NULL) {
		snprintf(m->type, sizeof m->type, "%s", s);
	} else {
		const struct gguf_tensor *first = NULL;

		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const struct gguf_tensor *t = gguf_tensor(g, i);

			if (t->n_dims < 2)
				continue;
			if (first == NULL)
				first = t;
			if (strncmp(t->name, "blk.", 4) == 0) {
				first = t;
				break;
			}
		}
		if (first != NULL)
			snprintf(m->type, sizeof m->type, "%s", gguf_dtype_name(first->type));
	}
	gguf_close(g);
}

/* Add path under name; ignores non-GGUF files and files already listed. */
static void
list_add(struct disc_list *l, const char *path, const char *name, enum disc_source src)
{
	struct stat st;
	struct disc_model *m;

	if (l->err != 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	for (int i = 0; i < l->n_seen; i++)
		if (l->seen[i].dev == st.st_dev && l->seen[i].ino == st.st_ino)
			return;
	if (!has_gguf_magic(path))
		return;
	if (l->n_seen == l->cap_seen) {
		int cap = l->cap_seen ? 2 * l->cap_seen : 16;
		void *p = realloc(l->seen, (size_t)cap * sizeof *l->seen);

		if (p == NULL)
			goto nomem;
		l->seen = p;
		l->cap_seen = cap;
	}
	l->seen[l->n_seen].dev = st.st_dev;
	l->seen[l->n_seen].ino = st.st_ino;
	l->n_seen++;
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 16;
		void *p = realloc(l->v, (size_t)cap * sizeof *l->v);

		if (p == NULL)
			goto nomem;
		l->v = p;
		l->cap = cap;
	}
	m = &l->v[l->n];
	memset(m, 0, sizeof *m);
	m->path = xstrdup(path);
	m->name = xstrdup(name);
	if (m->path == NULL || m->name == NULL) {
		free(m->path);
		free(m->name);
		goto nomem;
	}
	m->size = (uint64_t)st.st_size;
	m->source = src;
	read_type(m);
	l->n++;
	return;
nomem:
	l->err = KVC_ENOMEM;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entry names of dir (no "." / ".."); NULL with *n = 0 if unreadable. */
static char **
list_dir(const char *dir, int *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	int cap = 0;

	*n = 0;
	if (d == NULL)
		return NULL;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (*n == cap) {
			int c = cap ? 2 * cap : 32;
			char **p = realloc(v, (size_t)c * sizeof *v);

			if (p == NULL)
				break;
			v = p;
			cap = c;
		}
		if ((v[*n] = xstrdup(e->d_name)) == NULL)
			break;
		(*n)++;
	}
	closedir(d);
	if (*n > 1)
		qsort(v, (size_t)*n, sizeof *v, cmp_str);
	return v;
}

static void
free_names(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/*
 * A shard "-0000K-of-0000N.gguf" other than the first is part of a split
 * model: the first shard stands for all of them.
 */
static bool
is_later_shard(const char *name)
{
	const char *p = strstr(name, "-of-");

	if (p == NULL || p - name < 5)
		return false;
	for (const char *q = p - 5; q < p; q++)
		if (*q < '0' || *q > '9')
			return false;
	return strncmp(p - 5, "00001", 5) != 0;
}

/*
 * Walk dir recursively adding *.gguf files. Display names are prefix +
 * the path relative to the walk's root.
 */
static void
walk_gguf(struct disc_list *l, const char *dir, const char *prefix, int depth,
    enum disc_source src)
{
	int n;
	char **names;

	if (depth > MAX_DEPTH)
		return;
	names = list_dir(dir, &n);
	for (int i = 0; i < n && l->err == 0; i++) {
		struct stat st;
		char *p = path_join(dir, names[i]);
		char *disp = prefix[0] ? path_join(prefix, names[i]) : xstrdup(names[i]);

		if (p == NULL || disp == NULL) {
			l->err = KVC_ENOMEM;
		} else if (names[i][0] == '.') {
			/* hidden: partial downloads, caches */
		} else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			walk_gguf(l, p, disp, depth + 1, src);
		} else if (ends_with(names[i], ".gguf") && !is_later_shard(names[i])) {
			list_add(l, p, disp, src);
		}
		free(p);
		free(disp);
	}
	free_names(names, n);
}

/* Whether there is a home folder (kvc_home_dir). */
static bool
have_home(void)
{
	char home[4096];

	return kvc_home_dir(home, sizeof home, NULL, 0) == KVC_OK;
}

/* $VAR if set and not empty, else HOME/rest (new string) or NULL. HOME is
 * kvc_home_dir's: the password database's when $HOME is unset or relative,
 * never the current folder. */
static char *
env_or_home(const char *var, const char *rest)
{
	const char *v = var ? getenv(var) : NULL;
	char home[4096];

	if (v != NULL && v[0] != '\0')
		return xstrdup(v);
	if (rest == NULL || kvc_home_dir(home, sizeof home, NULL, 0) != KVC_OK)
		return NULL;
	return path_join(home, rest);
}

/*
 * $VAR/rest when $VAR is an absolute path, else HOME/home_rest/rest (new
 * string) or NULL: the XDG base folders (XDG_DATA_HOME, XDG_CACHE_HOME),
 * whose spec ignores a relative value, as the database path does.
 */
static char *
xdg_or_home(const char *var, const char *home_rest, const char *rest)
{
	const char *v = getenv(var);
	char *base, *p;

	if (v != NULL && v[0] == '/')
		return path_join(v, rest);
	if ((base = env_or_home(NULL, home_rest)) == NULL)
		return NULL;
	p = path_join(base, rest);
	free(base);
	return p;
}

/* ---- ollama manifests ---- */

/*
 * The digest of the first object, depth first in document order (an
 * object's members before the object itself), whose "mediaType" is the
 * model layer's; NULL if none within 16 levels. The strings are v's.
 */
static const char *
model_digest(json_t *v, int depth)
{
	const char *key, *d;
	json_t *m;
	size_t i;

	if (depth > 16)
		return NULL;
	if (json_is_object(v)) {
		const char *media = json_string_value(json_object_get(v, "mediaType"));

		json_object_foreach(v, key, m)
			if ((d = model_digest(m, depth + 1)) != NULL)
				return d;
		d = json_string_value(json_object_get(v, "digest"));
		if (media != NULL && d != NULL && strcmp(media, OLLAMA_MODEL_MEDIA) == 0)
			return d;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, m)
			if ((d = model_digest(m, depth + 1)) != NULL)
				return d;
	}
	return NULL;
}

/*
 * The blob path named by a manifest file: 0, KVC_ENOTFOUND (no manifest),
 * KVC_EFORMAT (no model layer / bad digest), KVC_ENOMEM.
 */
static int
ollama_blob(const char *root, const char *manifest, char **blob_out, char *err, size_t errlen)
{
	char digest[96] = "", *buf, name[128];
	const char *d;
	json_t *doc;
	FILE *f;
	size_t n;

	*blob_out = NULL;
	if ((f = fopen(manifest, "rb")) == NULL) {
		kvc_err(err, errlen, "%s: %s", manifest, strerror(errno));
		return KVC_ENOTFOUND;
	}
	if ((buf = malloc(MAX_MANIFEST)) == NULL) {
		fclose(f);
		return KVC_ENOMEM;
	}
	n = fread(buf, 1, MAX_MANIFEST, f);
	fclose(f);
	/* a manifest is JSON (jansson); one that is not names no layer */
	doc = json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL);
	free(buf);
	if (doc != NULL && (d = model_digest(doc, 0)) != NULL)
		snprintf(digest, sizeof digest, "%s", d);
	json_decref(doc);
	/* "sha256:" and 64 hex digits, nothing else: it becomes a file name. */
	if (strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64 ||
	    strspn(digest + 7, "0123456789abcdef") != 64) {
		kvc_err(err, errlen, "%s: no model layer (%s) with a sha256 digest",
		    manifest, OLLAMA_MODEL_MEDIA);
		return KVC_EFORMAT;
	}
	snprintf(name, sizeof name, "blobs/sha256-%s", digest + 7);
	if ((*blob_out = path_join(root, name)) == NULL)
		return KVC_ENOMEM;
	return 0;
}

/* Display name of manifests/HOST/NS/NAME/TAG as ollama prints it. */
static void
ollama_display(char *out, size_t len, const char *host, const char *ns,
    const char *name, const char *tag)
{
	if (strcmp(host, OLLAMA_HOST) != 0)
		snprintf(out, len, "%s/%s/%s:%s", host, ns, name, tag);
	else if (strcmp(ns, "library") != 0)
		snprintf(out, len, "%s/%s:%s", ns, name, tag);
	else
		snprintf(out, len, "%s:%s", name, tag);
}

static void
find_ollama(struct disc_list *l)
{
	char *root = env_or_home("OLLAMA_MODELS", ".ollama/models");
	char *mdir;
	char **hosts;
	int nh;

	if (root == NULL) {
		l->err = have_home() ? KVC_ENOMEM : 0;
		return;
	}
	if ((mdir = path_join(root, "manifests")) == NULL) {
		free(root);
		l->err = KVC_ENOMEM;
		return;
	}
	hosts = list_dir(mdir, &nh);
	for (int a = 0; a < nh && l->err == 0; a++) {
		char *hdir = path_join(mdir, hosts[a]);
		int nn;
		char **nss = hdir ? list_dir(hdir, &nn) : NULL;

		if (hdir == NULL)
			nn = 0, l->err = KVC_ENOMEM;
		for (int b = 0; b < nn && l->err == 0; b++) {
			char *nsdir = path_join(hdir, nss[b]);
			int nm;
			char **models = nsdir ? list_dir(nsdir, &nm) : NULL;

			if (nsdir == NULL)
				nm = 0, l->err = KVC_ENOMEM;
			for (int c = 0; c < nm && l->err == 0; c++) {
				char *modir = path_join(nsdir, models[c]);
				int nt;
				char **tags = modir ? list_dir(modir, &nt) : NULL;

				if (modir == NULL)
					nt = 0, l->err = KVC_ENOMEM;
				for (int d = 0; d < nt && l->err == 0; d++) {
					char *man = path_join(modir, tags[d]), *blob = NULL;
					char disp[512];
					int rc;

					if (man == NULL) {
						l->err = KVC_ENOMEM;
						break;
					}
					rc = ollama_blob(root, man, &blob, NULL, 0);
					if (rc == KVC_ENOMEM)
						l->err = rc;
					if (rc == 0) {
						ollama_display(disp, sizeof disp, hosts[a], nss[b],
						    models[c], tags[d]);
						list_add(l, blob, disp, DISC_OLLAMA);
					}
					free(blob);
					free(man);
				}
				free_names(tags, nt);
				free(modir);
			}
			free_names(models, nm);
			free(nsdir);
		}
		free_names(nss, nn);
		free(hdir);
	}
	free_names(hosts, nh);
	free(mdir);
	free(root);
}

/* models--ORG--NAME/snapshots/REV/...: shown as ORG/NAME/relative-path. */
static void
find_hf(struct disc_list *l)
{
	char *hub = NULL;
	const char *v;
	char **repos;
	int nr;

	if ((v = getenv("HF_HUB_CACHE")) != NULL && v[0] != '\0')
		hub = xstrdup(v);
	else if ((v = getenv("HF_HOME")) != NULL && v[0] != '\0')
		hub = path_join(v, "hub");
	else
		hub = xdg_or_home("XDG_CACHE_HOME", ".cache", "huggingface/hub");
	if (hub == NULL)
		return;
	repos = list_dir(hub, &nr);
	for (int i = 0; i < nr && l->err == 0; i++) {
		char disp[512], *snap, *q;
		int ns;
		char **revs;

		if (strncmp(repos[i], "models--", 8) != 0)
			continue;
		/* "--" separates org and name; neither may contain "--" on the hub. */
		snprintf(disp, sizeof disp, "%s", repos[i] + 8);
		if ((q = strstr(disp, "--")) != NULL) {
			*q = '/';
			memmove(q + 1, q + 2, strlen(q + 2) + 1);
		}
		{
			char *rdir = path_join(hub, repos[i]);

			snap = rdir ? path_join(rdir, "snapshots") : NULL;
			free(rdir);
		}
		if (snap == NULL) {
			l->err = KVC_ENOMEM;
			break;
		}
		revs = list_dir(snap, &ns);
		for (int r = 0; r < ns && l->err == 0; r++) {
			char *rev = path_join(snap, revs[r]);

			if (rev == NULL) {
				l->err = KVC_ENOMEM;
				break;
			}
			walk_gguf(l, rev, disp, 1, DISC_HF);
			free(rev);
		}
		free_names(revs, ns);
		free(snap);
	}
	free_names(repos, nr);
	free(hub);
}

static void
find_dir(struct disc_list *l, char *dir, enum disc_source src)
{
	if (dir == NULL)
		return;
	walk_gguf(l, dir, "", 0, src);
	free(dir);
}

char *
disc_models_dir(void)
{
	return xdg_or_home("XDG_DATA_HOME", ".local/share", "kvchat/models");
}

int
disc_find_all(struct disc_model **out, int *n, char *err, size_t errlen)
{
	struct disc_list l = {0};
	const char *v;

	*out = NULL;
	*n = 0;
	if ((v = getenv("KVCHAT_MODEL")) != NULL && v[0] != '\0')
		list_add(&l, v, v, DISC_ENV);
	find_dir(&l, disc_models_dir(), DISC_KVCHAT);
	find_ollama(&l);
	find_hf(&l);
	find_dir(&l, env_or_home(NULL, ".lmstudio/models"), DISC_LMSTUDIO);
	find_dir(&l, xdg_or_home("XDG_CACHE_HOME", ".cache", "lm-studio/models"), DISC_LMSTUDIO);
	free(l.seen);
	if (l.err != 0) {
		disc_free(l.v, l.n);
		kvc_err(err, errlen, "looking for models: %s", kvc_strerror(l.err));
		return l.err;
	}
	*out = l.v;
	*n = l.n;
	return 0;
}

void
disc_free(struct disc_model *v, int n)
{
	if (v == NULL)
		return;
	for (int i = 0; i < n; i++) {
		free(v[i].path);
		free(v[i].name);
	}
	free(v);
}

/* A name component that is safe to use as one directory level. */
static bool
safe_component(const char *s, size_t n)
{
	if (n == 0 || n > 200 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20)
			return false;
	return true;
}

/*
 * Split "[HOST/][NS/]NAME[:TAG]" into manifests-relative "HOST/NS/NAME/TAG".
 * false if arg does not look like an ollama name.
 */
static bool
ollama_manifest_rel(const char *arg, char *out, size_t len)
{
	const char *parts[3];
	size_t plen[3];
	int np = 0;
	const char *p = arg, *slash, *colon, *tag = "latest";
	size_t name_len, tag_len = 6;
	char host[256], ns[256], name[256];

	if (arg[0] == '\0' || arg[0] == '/' || arg[0] == '.' || ends_with(arg, ".gguf"))
		return false;
	while ((slash = strchr(p, '/')) != NULL) {
		if (np == 2)
			return false;
		parts[np] = p;
		plen[np] = (size_t)(slash - p);
		np++;
		p = slash + 1;
	}
	colon = strchr(p, ':');
	name_len = colon ? (size_t)(colon - p) : strlen(p);
	if (colon != NULL) {
		tag = colon + 1;
		tag_len = strlen(tag);
		if (!safe_component(tag, tag_len) || strchr(tag, ':') != NULL)
			return false;
	}
	if (!safe_component(p, name_len))
		return false;
	for (int i = 0; i < np; i++)
		if (!safe_component(parts[i], plen[i]))
			return false;
	snprintf(name, sizeof name, "%.*s", (int)name_len, p);
	snprintf(host, sizeof host, "%s", OLLAMA_HOST);
	snprintf(ns, sizeof ns, "library");
	if (np == 2) {
		snprintf(host, sizeof host, "%.*s", (int)plen[0], parts[0]);
		snprintf(ns, sizeof ns, "%.*s", (int)plen[1], parts[1]);
	} else if (np == 1) {
		snprintf(ns, sizeof ns, "%.*s", (int)plen[0], parts[0]);
	}
	snprintf(out, len, "%s/%s/%s/%.*s", host, ns, name, (int)tag_len, tag);
	return true;
}

int
disc_resolve(const char *arg, char **path_out, char *err, size_t errlen)
{
	struct stat st;
	char rel[1024], why[512] = "";
	struct disc_model *v;
	int n, rc;

	*path_out = NULL;
	if (arg == NULL || arg[0] == '\0') {
		kvc_err(err, errlen, "no model given");
		return KVC_EINVAL;
	}
	if (stat(arg, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			kvc_err(err, errlen, "%s: is a directory, not a GGUF file", arg);
			return KVC_EINVAL;
		}
		if ((*path_out = xstrdup(arg)) == NULL)
			return KVC_ENOMEM;
		return 0;
	}
	if (ollama_manifest_rel(arg, rel, sizeof rel)) {
		char *root = env_or_home("OLLAMA_MODELS", ".ollama/models");
		char *mdir = root ? path_join(root, "manifests") : NULL;
		char *man = mdir ? path_join(mdir, rel) : NULL;
		char *blob = NULL;

		if (man == NULL) {
			rc = root == NULL && !have_home() ? KVC_ENOTFOUND : KVC_ENOMEM;
		} else {
			rc = ollama_blob(root, man, &blob, why, sizeof why);
			if (rc == KVC_ENOTFOUND)
				snprintf(why, sizeof why, "no ollama manifest %s", man);
		}
		if (rc == 0 && stat(blob, &st) != 0) {
			snprintf(why, sizeof why, "ollama manifest %s names %s, which is missing",
			    man, blob);
			rc = KVC_ENOTFOUND;
		}
		free(root);
		free(mdir);
		free(man);
		if (rc == 0) {
			*path_out = blob;
			return 0;
		}
		free(blob);
		if (rc == KVC_ENOMEM || rc == KVC_EFORMAT) {
			if (rc == KVC_EFORMAT)
				kvc_err(err, errlen, "model '%s': %s", arg, why);
			return rc;
		}
	}
	/* Last, a name as the model list shows it, or a file name in it. */
	if ((rc = disc_find_all(&v, &n, err, errlen)) != 0)
		return rc;
	for (int i = 0; i < n; i++) {
		const char *base = strrchr(v[i].name, '/');

		base = base ? base + 1 : v[i].name;
		if (strcmp(v[i].name, arg) == 0 || strcmp(base, arg) == 0) {
			*path_out = v[i].path;
			v[i].path = NULL;
			break;
		}
	}
	disc_free(v, n);
	if (*path_out != NULL)
		return 0;
	kvc_err(err, errlen, "model '%s' not found: no such file%s%s; not among the %d models found (run kvchat without -m to list them)",
	    arg, why[0] ? "; " : "", why, n);
	return KVC_ENOTFOUND;
}
