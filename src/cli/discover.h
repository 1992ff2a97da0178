/*
 * discover.h: find GGUF model files the user already has, and resolve the
 * value of -m (a path or an ollama model name) to a file.
 *
 * Places searched, in this order (each only if it exists):
 *   $KVCHAT_MODEL (a file)
 *   $XDG_DATA_HOME/kvchat/models/ (default ~/.local/share/kvchat/models), recursively
 *   ollama: $OLLAMA_MODELS or ~/.ollama/models; each manifest
 *     manifests/HOST/NAMESPACE/NAME/TAG (JSON) whose layer of mediaType
 *     "application/vnd.ollama.image.model" has digest "sha256:HEX" names the
 *     blob blobs/sha256-HEX
 *   Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
 *     ~/.cache/huggingface/hub; models--ORG--NAME/snapshots/REV/, recursively, *.gguf
 *   LM Studio: ~/.lmstudio/models/ and ~/.cache/lm-studio/models/, recursively
 * A file is listed once (the first place that names it wins; duplicates are
 * detected by device+inode). Only files that start with the GGUF magic are
 * listed; their type comes from the header (gguf_open), read once.
 */
#ifndef KVC_DISCOVER_H
#define KVC_DISCOVER_H

#include "core/kvc.h"

enum disc_source {
	DISC_ENV = 0,		/* $KVCHAT_MODEL */
	DISC_KVCHAT,		/* kvchat's own models folder */
	DISC_OLLAMA,
	DISC_HF,
	DISC_LMSTUDIO,
	DISC_PATH,		/* disc_resolve: a path given by the user */
};

struct disc_model {
	char *path;		/* file to open (an ollama blob for DISC_OLLAMA) */
	char *name;		/* display name: "qwen2.5:7b", "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf", file name, ... */
	uint64_t size;		/* bytes on disk */
	char type[24];		/* "Q4_K_M", "F16", ... (general.file_type, else first matrix's tensor type); "?" if unknown */
	char arch[24];		/* general.architecture, "" if unknown */
	char why[160];		/* why kvchat cannot run it (model_load's refusal), "" if it can */
	enum disc_source source;
};

/*
 * Search every place above. *out (free with disc_free) gets *n models, in
 * search order, names sorted within each place. Places that are missing
 * or unreadable are skipped silently; files that are not valid GGUF are
 * skipped. Returns 0 (also when nothing is found: *n = 0) or KVC_ENOMEM.
 */
int disc_find_all(struct disc_model **out, int *n, char *err, size_t errlen);
void disc_free(struct disc_model *v, int n);

/*
 * Resolve an -m value to a file path (*path_out malloc'ed, caller frees):
 *   - an existing file: itself;
 *   - an ollama name "[HOST/][NAMESPACE/]NAME[:TAG]" (tag default "latest",
 *     namespace "library", host "registry.ollama.ai") whose manifest and
 *     blob exist in ollama's store.
 * KVC_ENOTFOUND with a one-line message naming what was tried otherwise;
 * KVC_EFORMAT when the manifest exists but names no model layer.
 */
int disc_resolve(const char *arg, char **path_out, char *err, size_t errlen);

/* Several lines (each ending in '\n') saying where kvchat looks for models. */
const char *disc_help_where(void);
/*
 * The folder of kvchat's own models as discovery searches it now
 * ($XDG_DATA_HOME/kvchat/models, or under $HOME): a new string, or NULL
 * without either variable.
 */
char *disc_models_dir(void);

/* Type name of a GGUF general.file_type value ("Q4_K_M"), or NULL if unknown. */
const char *disc_file_type_name(int64_t ftype);

/* "1.2 GB", "340 MB", "12 KB", "512 B" into buf. Returns buf. */
char *disc_format_size(uint64_t bytes, char *buf, size_t len);

#endif
