/* file.c - ckpt_open: mapping, format detection, flattening, accessors. */
#include "model/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/once.h"
#include "base/pages.h"
#include "base/source.h"
#include "container/zip.h"
#include "format/detect.h"
#include "format/write.h"
#include "model/tensor.h"
#include "model/walk.h"
#include "open/dcp.h"
#include "open/hf_cache.h"
#include "open/model_dir.h"
#include "open/store_dir.h"
#include "open/sharded.h"

static ckpt_file *file_new(const char *path, const ckpt_open_options *opts) {
    ckpt_file *f = ckpt_malloc(sizeof *f);
    if (!f) return NULL;
    memset(f, 0, sizeof *f);
    f->source.fd = -1;
    ckpt_open_options defaults = CKPT_OPEN_OPTIONS_INIT;
    f->opts = opts ? *opts : defaults;
    if (f->opts.limits.max_ndim > CKPT_MAX_NDIM) f->opts.limits.max_ndim = CKPT_MAX_NDIM;
    f->path = ckpt_arena_strdup(&f->arena, path ? path : "");
    if (!f->path) {
        ckpt_free(f);
        return NULL;
    }
    return f;
}

void ckpt_close(ckpt_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->nparts; i++) ckpt_close(f->parts[i]);
    for (size_t i = 0; i < f->nshards; i++) ckpt_close(f->shards[i]);
    if (f->mapped) ckpt_unmap_file(f->map, f->map_size);
    if (f->source.fd >= 0 && !f->borrowed) close(f->source.fd);
    ckpt_arena_free(&f->arena);
    ckpt_free(f);
}

/* ------------------------------------------------------------ detection */

static int parent_dir(ckpt_arena *a, const char *path, char **out) {
    const char *slash = strrchr(path, '/');
    *out = slash ? ckpt_arena_strndup(a, path, (size_t)(slash - path) + (slash == path))
                 : ckpt_arena_strdup(a, ".");
    return *out ? 0 : -1;
}

int ckpt_file_head(const ckpt_file *f, uint64_t off, uint8_t head[CKPT_HEAD_BYTES], size_t *n) {
    *n = f->map_size - off < CKPT_HEAD_BYTES ? (size_t)(f->map_size - off) : CKPT_HEAD_BYTES;
    return ckpt_source_read(&f->source, f->map + off, head, *n, NULL);
}

/* The sharded index f is: read whole with pread (never through the
 * mapping), within max_index_bytes. */
static int read_index(ckpt_file *f, const char *dir) {
    size_t n = f->map_size;
    if (n > f->opts.limits.max_index_bytes)
        return ckpt_err(CKPT_E_LIMIT, f->path, NULL, 0,
                        "index of %zu bytes exceeds the limit max_index_bytes = %llu", n,
                        (unsigned long long)f->opts.limits.max_index_bytes);
    uint8_t *json = ckpt_malloc(n ? n : 1);
    if (!json) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    int rc = ckpt_source_read(&f->source, f->map, json, n, NULL);
    if (rc == 0) rc = ckpt_sharded_read(f, json, n, dir);
    ckpt_free(json);
    return rc;
}

/* force: CKPT_FORMAT_DCP for a directory's .metadata, whatever its
 * content (a hostile one must be refused as DCP metadata, not read as a
 * plain pickle); CKPT_FORMAT_UNKNOWN: by content, from the file's head. */
static int read_format(ckpt_file *f, int from_path, ckpt_format force) {
    uint8_t p[CKPT_HEAD_BYTES];
    size_t n = f->map_size, head;
    uint64_t off;
    const char *unsupported;
    char *dir;
    int rc = ckpt_file_head(f, 0, p, &head);
    if (rc) return rc;
    switch (force ? force : ckpt_detect_format(p, head)) {
    case CKPT_FORMAT_DCP:
        if (!from_path)
            return ckpt_err(CKPT_E_UNSUPPORTED, f->path, NULL, 0,
                            "DCP metadata can only be opened from a path (its directory holds "
                            "the data)");
        /* an HF layout's file is its directory (open_dcp_dir) */
        if (!f->dcp_dir && parent_dir(&f->arena, f->path, &dir))
            return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
        return ckpt_dcp_read(f, f->dcp_dir ? f->dcp_dir : dir);
    case CKPT_FORMAT_TORCH_ZIP: return ckpt_torch_read_zip(f);
    case CKPT_FORMAT_SAFETENSORS: return ckpt_safetensors_read(f);
    case CKPT_FORMAT_SAFETENSORS_SHARDED:
        if (!from_path)
            return ckpt_err(CKPT_E_UNSUPPORTED, f->path, NULL, 0,
                            "a sharded index can only be opened from a path");
        if (parent_dir(&f->arena, f->path, &dir))
            return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
        return read_index(f, dir);
    case CKPT_FORMAT_TORCH_LEGACY:
    case CKPT_FORMAT_PICKLE: return ckpt_torch_read_legacy(f);
    default: break;
    }
    if ((unsupported = ckpt_detect_unsupported(p, head, &off)))
        return ckpt_err(CKPT_E_UNSUPPORTED, f->path, NULL, off, "%s", unsupported);
    if (n < 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, NULL, 0,
                        "not a checkpoint: %zu bytes is too small for any format", n);
    return ckpt_err(CKPT_E_FORMAT, f->path, NULL, 0,
                    "not a checkpoint: content is neither a zip archive, a "
                    "pickle nor a safetensors header");
}

static int finish_open(ckpt_file **out, ckpt_file *f, int from_path, ckpt_format force) {
    int rc = read_format(f, from_path, force);
    if (rc == 0) rc = ckpt_file_flatten(f);
    if (rc) {
        ckpt_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

/* ckpt_map_file, keeping the descriptor open in *fd (-1 for an empty
 * file) when fd is non-NULL: tensor bytes are read through it (source.h). */
static int map_open(const char *path, int *keep, const uint8_t **map, size_t *size) {
    *map = NULL;
    *size = 0;
    if (keep) *keep = -1;
    struct stat st;
    const char *why;
    int fd = ckpt_open_regular(path, &st, &why);
    if (fd < 0) /* EISDIR, EINVAL: opened, but no regular file */
        return ckpt_err_os(errno, path, NULL, CKPT_NO_OFFSET, "cannot %s: %s",
                           errno == EISDIR || errno == EINVAL ? "read" : "open", why);
    int rc = 0;
    if ((uint64_t)st.st_size > SIZE_MAX)
        rc = ckpt_err(CKPT_E_LIMIT, path, NULL, CKPT_NO_OFFSET, "file too large to map");
    if (rc == 0 && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = ckpt_err_os(errno, path, NULL, CKPT_NO_OFFSET, "cannot map: %s", strerror(errno));
        } else {
            /* the library reads the file with pread (source.h); the
             * mapping serves a safetensors header and ckpt_tensor_data,
             * whose pages are wanted one by one: no readahead of the tensor
             * data around them */
            madvise(m, (size_t)st.st_size, MADV_RANDOM);
            *map = m;
            *size = (size_t)st.st_size;
            if (keep) {
                *keep = fd;
                return 0;
            }
        }
    }
    close(fd);
    return rc;
}

int ckpt_map_file(const char *path, const uint8_t **map, size_t *size) {
    return map_open(path, NULL, map, size);
}

void ckpt_unmap_file(const uint8_t *map, size_t size) {
    if (map && size) munmap((void *)map, size);
}

static int open_path(ckpt_file **out, const char *path, const ckpt_open_options *opts,
                     ckpt_format force, int raw) {
    *out = NULL;
    if (!path) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "path is NULL");
    const uint8_t *map;
    size_t size;
    int fd;
    int rc = map_open(path, &fd, &map, &size);
    if (rc) return rc;
    ckpt_file *f = file_new(path, opts);
    if (!f) {
        ckpt_unmap_file(map, size);
        if (fd >= 0) close(fd);
        return ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
    }
    f->map = size ? map : (const uint8_t *)"";
    f->map_size = size;
    f->mapped = size != 0;
    f->source = (ckpt_source){.fd = fd, .map = map, .size = size, .path = f->path};
    if (raw) {
        *out = f;
        return 0;
    }
    return finish_open(out, f, 1, force);
}

int ckpt_file_open_path(ckpt_file **out, const char *path, const ckpt_open_options *opts) {
    return open_path(out, path, opts, CKPT_FORMAT_UNKNOWN, 0);
}

int ckpt_file_open_raw(ckpt_file **out, const char *path, const ckpt_open_options *opts) {
    return open_path(out, path, opts, CKPT_FORMAT_UNKNOWN, 1);
}

int ckpt_file_open_part(ckpt_file **out, const ckpt_file *holder, uint64_t off, uint64_t len,
                        const char *name) {
    *out = NULL;
    ckpt_file *f = file_new(name, &holder->opts);
    if (!f) return ckpt_err(CKPT_E_NOMEM, name, NULL, CKPT_NO_OFFSET, "out of memory");
    f->map = len ? holder->map + off : (const uint8_t *)"";
    f->map_size = (size_t)len;
    f->borrowed = 1;
    f->source = holder->source;
    return finish_open(out, f, 0, CKPT_FORMAT_UNKNOWN);
}

/* A model directory (Hugging Face save_pretrained's layout, a Trainer
 * checkpoint folder, a diffusers pipeline's component folder) stands for
 * the weights it holds, found in transformers' from_pretrained order,
 * then diffusers' ModelMixin names in its order. *out: an arena copy of
 * the file's path; CKPT_E_IO when the directory holds none of them. */
static const char *const model_dir_names[] = {"model.safetensors",
                                              "model.safetensors.index.json",
                                              "pytorch_model.bin",
                                              "pytorch_model.bin.index.json",
                                              "diffusion_pytorch_model.safetensors",
                                              "diffusion_pytorch_model.safetensors.index.json",
                                              "diffusion_pytorch_model.bin",
                                              "diffusion_pytorch_model.bin.index.json"};
#define N_MODEL_DIR_NAMES (sizeof model_dir_names / sizeof *model_dir_names)

int ckpt_model_dir_weights_name(const char *name) {
    for (size_t i = 0; i < N_MODEL_DIR_NAMES; i++)
        if (strcmp(name, model_dir_names[i]) == 0) return (int)i + 1;
    return 0;
}

/* name = _add_variant(model_dir_names[i], V) for a non-empty V: the
 * plain name split at its last '.', V between ("model.fp16.safetensors",
 * "model.safetensors.index.fp16.json"); i + 1 and V's length at
 * name + *at, else 0. */
static int variant_of(const char *name, size_t *at, size_t *len) {
    size_t n = strlen(name);
    for (size_t i = 0; i < N_MODEL_DIR_NAMES; i++) {
        const char *plain = model_dir_names[i], *ext = strrchr(plain, '.');
        size_t stem = (size_t)(ext - plain) + 1, k = strlen(ext); /* stem with its '.' */
        if (n > stem + k && strncmp(name, plain, stem) == 0 && strcmp(name + n - k, ext) == 0) {
            *at = stem;
            *len = n - stem - k;
            return (int)i + 1;
        }
    }
    return 0;
}

int ckpt_model_dir_variant(const char *name, char *variant, size_t cap) {
    char index[512];
    size_t at, len;
    int rank = name[0] != '.' && !ckpt_model_dir_shard_index(index, sizeof index, name)
                   ? variant_of(name, &at, &len)
                   : 0;
    if (!rank || len >= cap) return 0;
    memcpy(variant, name + at, len);
    variant[len] = '\0';
    return rank;
}

int ckpt_model_dir_rank(const char *name) {
    char v[256];
    int rank = ckpt_model_dir_weights_name(name);
    if (!rank && (rank = ckpt_model_dir_variant(name, v, sizeof v)) != 0)
        rank += (int)N_MODEL_DIR_NAMES;
    return rank;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const char *ckpt_model_dir_format_misfit(const char *name, ckpt_format fmt) {
    if (ends_with(name, ".safetensors"))
        return fmt == CKPT_FORMAT_SAFETENSORS ? NULL : "safetensors";
    if (ends_with(name, ".bin"))
        return fmt == CKPT_FORMAT_TORCH_ZIP || fmt == CKPT_FORMAT_TORCH_LEGACY ? NULL
                                                                               : "torch.save";
    return NULL;
}

/* A PEFT adapter folder (PeftModel.save_pretrained: adapter_config.json
 * and one of these, in PeftModel.from_pretrained's order) stands for its
 * adapter when it holds no model weights. The adapter is not a copy of
 * the model's weights: ckpt_model_dir_weights_name does not rank it. */
static const char *const adapter_dir_names[] = {"adapter_model.safetensors", "adapter_model.bin"};
#define N_ADAPTER_DIR_NAMES (sizeof adapter_dir_names / sizeof *adapter_dir_names)

const char *ckpt_model_dir_trainer_latest(ckpt_arena *a, const char *dir) {
    DIR *d = opendir(dir);
    char best[64] = "";
    unsigned long long most = 0;
    if (!d) return NULL;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name, *digits = n + strlen("checkpoint-");
        size_t len = strlen(n);
        if (strncmp(n, "checkpoint-", strlen("checkpoint-")) != 0 || len >= sizeof best ||
            !*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 18)
            continue;
        unsigned long long step = strtoull(digits, NULL, 10);
        const char *p = ckpt_arena_printf(a, "%s/%s", dir, n);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (!*best || step > most)) {
            most = step;
            memcpy(best, n, len + 1);
        }
    }
    closedir(d);
    return *best ? ckpt_arena_printf(a, "%s/%s", dir, best) : NULL;
}

int ckpt_model_dir_shard_index(char *index, size_t cap, const char *name) {
    const char *of = strstr(name, "-of-");
    if (!of || of - name < 7 || of[-6] != '-') return 0;
    for (size_t i = 0; i < 5; i++)
        if (of[-5 + (ptrdiff_t)i] < '0' || of[-5 + (ptrdiff_t)i] > '9' || of[4 + i] < '0' ||
            of[4 + i] > '9')
            return 0;
    const char *ext = of + 9;
    if (*ext != '.' || !ext[1] || strchr(ext + 1, '/')) return 0;
    /* a variant's shards ("model.fp16-00001-of-00002.safetensors", as
     * save_pretrained(variant=...) names them) are listed by the variant
     * of the index's name ("model.safetensors.index.fp16.json") */
    char whole[512];
    size_t at, len;
    int k = snprintf(whole, sizeof whole, "%.*s%s", (int)(of - 6 - name), name, ext);
    int rank = k > 0 && (size_t)k < sizeof whole ? variant_of(whole, &at, &len) : 0;
    int n = rank && !strstr(model_dir_names[rank - 1], ".index.")
                ? snprintf(index, cap, "%s.index.%.*s.json", model_dir_names[rank - 1], (int)len,
                           whole + at)
                : snprintf(index, cap, "%.*s%s.index.json", (int)(of - 6 - name), name, ext);
    return n > 0 && (size_t)n < cap;
}

int ckpt_model_dir_orphan_shards(const char *dir) {
    DIR *d = opendir(dir);
    char first[256] = "", index[300];
    size_t count = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        char ix[300];
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof first ||
            !ckpt_model_dir_shard_index(ix, sizeof ix, e->d_name))
            continue;
        count++;
        if (!*first || strcmp(e->d_name, first) < 0) {
            strcpy(first, e->d_name);
            strcpy(index, ix);
        }
    }
    closedir(d);
    if (!count) return 0;
    return ckpt_err(CKPT_E_MISMATCH, dir, NULL, CKPT_NO_OFFSET,
                    "cannot read: shard files of a set (\"%s\"%s) without its index \"%s\": "
                    "a sharded set is read through the weight_map of its index, which is "
                    "missing (copy it in, or name one shard)",
                    first, count > 1 ? " and the others" : "", index);
}

/* The first of `names` present in dir as a regular file: 1 and *out. */
static int first_present(ckpt_arena *a, const char *dir, const char *const *names, size_t n,
                         const char **out) {
    struct stat st;
    for (size_t i = 0; i < n; i++) {
        const char *p = ckpt_arena_printf(a, "%s/%s", dir, names[i]);
        if (!p) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            *out = p;
            return 1;
        }
    }
    return 0;
}

/* A folder whose weights are all under a variant's names (no plain name
 * there): those of the one variant, the first in from_pretrained's order
 * (1 and *out); 0 when there is none; CKPT_E_IO naming two variants when
 * there are several (from_pretrained reads the one variant= names). */
static int variant_weights(ckpt_arena *a, const char *dir, const char **out) {
    DIR *d = opendir(dir);
    char best[256] = "", other[256] = "", v[256], bv[256] = "";
    int rank = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        int r = ckpt_model_dir_variant(e->d_name, v, sizeof v);
        const char *p = r && strlen(e->d_name) < sizeof best
                            ? ckpt_arena_printf(a, "%s/%s", dir, e->d_name)
                            : NULL;
        struct stat st;
        if (!p || stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        /* the smallest variant (bv, its first file in best) and the next
         * (other), whatever the listing order */
        int c = *bv ? strcmp(v, bv) : -1;
        const char *next = c < 0 ? bv : c > 0 ? v : "";
        if (*next && (!*other || strcmp(next, other) < 0))
            snprintf(other, sizeof other, "%s", next);
        if (c < 0 || (c == 0 && r < rank)) {
            rank = r;
            snprintf(best, sizeof best, "%s", e->d_name);
            snprintf(bv, sizeof bv, "%s", v);
        }
    }
    closedir(d);
    if (!rank) return 0;
    if (*other)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                        "cannot read: model weights only under the names of several variants "
                        "(\"%s\" and \"%s\" at least; %s...), none under the plain names: "
                        "from_pretrained(DIR, variant=...) reads the one it is told; name its "
                        "file",
                        bv, other, best);
    *out = ckpt_arena_printf(a, "%s/%s", dir, best);
    return *out ? 1 : ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
}

int ckpt_model_dir_weights(ckpt_arena *a, const char *dir, const char **out) {
    struct stat st;
    int found = first_present(a, dir, model_dir_names, N_MODEL_DIR_NAMES, out);
    if (found == 0) found = variant_weights(a, dir, out);
    if (found == 0) found = first_present(a, dir, adapter_dir_names, N_ADAPTER_DIR_NAMES, out);
    if (found) return found < 0 ? found : 0;
    const char *latest = ckpt_model_dir_trainer_latest(a, dir);
    if (latest)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot read: " CKPT_TRAINER_DIR,
                        latest);
    const char *index = ckpt_arena_printf(a, "%s/model_index.json", dir);
    if (index && stat(index, &st) == 0)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                        "cannot read: a diffusers pipeline directory (model_index.json), whose "
                        "models are its component folders (unet, vae, text_encoder...): name "
                        "one, or `ckpt verify` or `doctor` the directory to check each");
    int rc = ckpt_model_dir_orphan_shards(dir);
    if (rc) return rc;
    return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                    "cannot read: a directory without model weights (model.safetensors, "
                    "model.safetensors.index.json, pytorch_model.bin, "
                    "pytorch_model.bin.index.json or their diffusion_pytorch_model.* "
                    "counterparts, or a variant of them: model.fp16.safetensors...) or a "
                    "PEFT adapter (adapter_model.safetensors or adapter_model.bin)");
}

/* Whether `name` is a model folder's weights file or a PEFT adapter's. */
static int hub_weights_name(const char *name) {
    int known = ckpt_model_dir_weights_name(name) != 0;
    for (size_t i = 0; !known && i < N_ADAPTER_DIR_NAMES; i++)
        known = strcmp(name, adapter_dir_names[i]) == 0;
    return known;
}

/* A file named as a model folder's weights (model.safetensors,
 * pytorch_model.bin, adapter_model.bin...), through its folder or by
 * path, is read by its loaders as its name says
 * (ckpt_model_dir_format_misfit): other bytes, which ckpt would read by
 * their content, are a file no loader of that name reads. So is any
 * "*.safetensors" path: torch.load >= 2.13 hands a path ending in
 * ".safetensors" to safetensors.torch.load_file before looking at its
 * bytes (torch/serialization.py, load), as safe_open reads it. */
const char *ckpt_model_dir_name_misfit(const char *path, ckpt_format fmt) {
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    return hub_weights_name(name) || ends_with(name, ".safetensors")
               ? ckpt_model_dir_format_misfit(name, fmt)
               : NULL;
}

/* transformers' load_state_dict and from_pretrained (huggingface/transformers
 * src/transformers/modeling_utils.py at 040ba146: `if metadata is not None
 * and metadata.get("format") not in ["pt", "tf", "flax", "mlx"]: raise
 * OSError(... "does not contain the valid metadata" ...)`; older
 * versions lack "mlx", and the oldest call metadata.get on None). A set's
 * shards each pass through it. diffusers' load_state_dict
 * (models/model_loading_utils.py) had one (["pt", "flax"], at 00f0bd18)
 * and no longer has (771d7f11); PEFT's load_peft_weights
 * (utils/save_and_load.py) reads with safe_load_file alone. Flax's
 * from_pretrained (modeling_flax_utils.py) refuses a file without
 * __metadata__ too; PyTorch's loads it: the case followed. */
static const char *const transformers_formats[] = {"pt", "tf", "flax", "mlx"};

int ckpt_model_dir_metadata_checked(const char *path) {
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    int rank = ckpt_model_dir_rank(name);
    return rank == 1 || rank == 2 || rank == (int)N_MODEL_DIR_NAMES + 1 ||
           rank == (int)N_MODEL_DIR_NAMES + 2;
}

int ckpt_model_dir_metadata_refused(const ckpt_file *f, const char **found) {
    const char *path = ckpt_file_path(f), *slash = strrchr(path, '/');
    const char *format = NULL;
    *found = NULL;
    if (!ckpt_file_has_metadata(f)) return 0;
    for (size_t i = 0; i < ckpt_file_metadata_count(f); i++)
        if (strcmp(ckpt_file_metadata_key(f, i), "format") == 0)
            format = ckpt_file_metadata_value(f, i);
    for (size_t i = 0; format && i < sizeof transformers_formats / sizeof *transformers_formats;
         i++)
        if (strcmp(format, transformers_formats[i]) == 0) return 0;
    *found = format;
    size_t qlen = ckpt_shell_quote(NULL, 0, path);
    char *q = ckpt_malloc(qlen + 1);
    if (!q) return ckpt_err_nomem();
    ckpt_shell_quote(q, qlen + 1, path);
    int rc = ckpt_err(CKPT_E_MISMATCH, path, NULL, CKPT_NO_OFFSET,
                      "transformers' from_pretrained refuses %s: its __metadata__ %s%s%s, and "
                      "transformers loads a safetensors file only without __metadata__ or with "
                      "\"format\" \"pt\", \"tf\", \"flax\" or \"mlx\" (OSError \"does not "
                      "contain the valid metadata\"); fix: ckpt convert %s %s --meta format=pt",
                      slash ? slash + 1 : path, format ? "has \"format\" \"" : "has no \"format\"",
                      format ? format : "", format ? "\"" : "", q, q);
    ckpt_free(q);
    return rc;
}

static int weights_name_fits(ckpt_file **f, const char *path) {
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    const char *want = ckpt_model_dir_name_misfit(path, (*f)->format);
    if (!want) return 0;
    ckpt_format got = (*f)->format;
    ckpt_close(*f);
    *f = NULL;
    const char *readers =
        strcmp(want, "safetensors") ? "torch.load" : "safetensors.safe_open, torch.load >= 2.13";
    return ckpt_err(CKPT_E_FORMAT, path, NULL, 0,
                    "a %s file named %s: its loaders read that name as %s (%s%s), which cannot "
                    "read it; rename it to what it holds",
                    ckpt_format_name(got), name, want,
                    hub_weights_name(name) ? "from_pretrained, " : "", readers);
}

/* A DCP directory opens as the metadata its loader reads (open/dcp.h
 * layouts): .metadata, read as DCP metadata whatever its content; for a
 * save with use_collectives=False __0.metadata, read with the other
 * ranks' files; for HuggingFaceStorageWriter's sharded layout the
 * directory itself. Without metadata it is corrupt (the data cannot be
 * addressed). */
static int open_dcp_dir(ckpt_file **out, const char *dir, const ckpt_open_options *opts) {
    ckpt_dcp_layout layout = ckpt_dcp_dir_layout(dir);
    if (layout == CKPT_DCP_HF) {
        ckpt_file *f = file_new(dir, opts);
        if (!f) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
        f->map = (const uint8_t *)"";
        f->dcp_dir = f->path;
        return finish_open(out, f, 1, CKPT_FORMAT_DCP);
    }
    ckpt_arena a = {0};
    const char *meta = ckpt_arena_printf(&a, "%s/%s", dir,
                                         layout == CKPT_DCP_RANKS ? "__0.metadata" : ".metadata");
    struct stat st;
    int rc;
    if (!meta)
        rc = ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    else if (layout == CKPT_DCP_RANKS && stat(meta, &st) != 0)
        rc = ckpt_err(CKPT_E_MISMATCH, meta, NULL, CKPT_NO_OFFSET,
                      "missing: the directory holds rank metadata files (a save with "
                      "use_collectives=False) but not rank 0's, which dcp.load without a "
                      "process group and dcp_to_torch_save read");
    else if (stat(meta, &st) != 0)
        rc = ckpt_err(CKPT_E_MISMATCH, meta, NULL, CKPT_NO_OFFSET,
                      "missing: the directory holds DCP data files (*.distcp) but no .metadata, "
                      "so no loader can address them");
    else
        rc = open_path(out, meta, opts, CKPT_FORMAT_DCP, 0);
    ckpt_arena_free(&a);
    return rc;
}

/* What ckpt_open(path) reads: a DCP directory (*dcp set) or a file
 * standing for itself, a ckpt store for the generation its LATEST names
 * (followed once: a generation is never a store), a model folder for its
 * weights. *target is path, or a string in a. */
static int open_target(ckpt_arena *a, const char *path, int follow, const char **target, int *dcp,
                       const char **rev) {
    struct stat st;
    *target = path;
    if (!path || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (ckpt_dcp_is_dir(path)) {
        *dcp = 1;
        return 0;
    }
    if (follow && ckpt_is_store_dir(path)) {
        const char *gen = NULL;
        int rc = ckpt_store_dir_latest(a, path, &gen);
        return rc ? rc : open_target(a, gen, 0, target, dcp, rev);
    }
    /* a Hugging Face cache repository: the snapshot refs/main names */
    if (follow && ckpt_hf_cache_is_repo(path)) {
        const char *snap = NULL;
        int rc = ckpt_hf_cache_snapshot(a, path, &snap, rev);
        return rc ? rc : open_target(a, snap, 0, target, dcp, rev);
    }
    return ckpt_model_dir_weights(a, path, target);
}

/* Weights read under a variant's name ("model.fp16.safetensors") in a
 * folder that holds none under the plain names: from_pretrained reads
 * them only when told the variant (ckpt_file_variant). */
static int note_variant(ckpt_file *f, ckpt_arena *a, const char *path) {
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path, *plain;
    char v[256];
    if (!ckpt_model_dir_variant(name, v, sizeof v)) return 0;
    const char *dir = !slash          ? "."
                      : slash == path ? "/"
                                      : ckpt_arena_printf(a, "%.*s", (int)(slash - path), path);
    int found = dir ? first_present(a, dir, model_dir_names, N_MODEL_DIR_NAMES, &plain)
                    : ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
    if (found) return found < 0 ? found : 0;
    f->variant = ckpt_arena_strdup(&f->arena, v);
    return f->variant ? 0 : ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
}

int ckpt_open(ckpt_file **out, const char *path, const ckpt_open_options *opts) {
    if (!out) return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET, "out is NULL");
    *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_OPEN_OPTIONS_VERSION);
    ckpt_arena a = {0};
    const char *target = NULL, *rev = NULL;
    int dcp = 0;
    int rc = open_target(&a, path, 1, &target, &dcp, &rev);
    if (rc == 0)
        rc = dcp ? open_dcp_dir(out, target, opts) : ckpt_file_open_path(out, target, opts);
    if (rc == 0 && !dcp) rc = weights_name_fits(out, target);
    if (rc == 0 && !dcp) rc = note_variant(*out, &a, target);
    if (rc == 0 && rev && !((*out)->snapshot = ckpt_arena_strdup(&(*out)->arena, rev)))
        rc = ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
    if (rc && *out) {
        ckpt_close(*out);
        *out = NULL;
    }
    ckpt_arena_free(&a);
    return rc;
}

const char *ckpt_file_variant(const ckpt_file *f) { return f ? f->variant : NULL; }

const char *ckpt_file_snapshot(const ckpt_file *f) { return f ? f->snapshot : NULL; }

int ckpt_open_target(char **out, const char *path) {
    if (!out || !path)
        return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET, "NULL argument");
    *out = NULL;
    ckpt_arena a = {0};
    const char *target = NULL, *rev = NULL;
    int dcp = 0;
    int rc = open_target(&a, path, 1, &target, &dcp, &rev);
    if (rc == 0 && (*out = ckpt_malloc(strlen(target) + 1)) == NULL) rc = ckpt_err_nomem();
    if (rc == 0) memcpy(*out, target, strlen(target) + 1);
    ckpt_arena_free(&a);
    return rc;
}

int ckpt_open_memory(ckpt_file **out, const void *data, size_t size, const char *name,
                     const ckpt_open_options *opts) {
    if (!out) return ckpt_err(CKPT_E_INVALID_ARG, name, NULL, CKPT_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!data && size)
        return ckpt_err(CKPT_E_INVALID_ARG, name, NULL, CKPT_NO_OFFSET, "data is NULL");
    CKPT_CHECK_OPTIONS(opts, CKPT_OPEN_OPTIONS_VERSION);
    ckpt_file *f = file_new(name, opts);
    if (!f) return ckpt_err(CKPT_E_NOMEM, name, NULL, CKPT_NO_OFFSET, "out of memory");
    f->map = size ? data : (const uint8_t *)"";
    f->map_size = size;
    return finish_open(out, f, 0, CKPT_FORMAT_UNKNOWN);
}

/* ------------------------------------------------------------ flatten */

/* Bytes a flattening may allocate beyond the input's budget, so that a
 * tiny input (whose budget is a few hundred bytes) still flattens. */
#define FLATTEN_SLACK ((uint64_t)1 << 20)

int ckpt_file_flatten_value(const ckpt_file *f, ckpt_arena *a, const ckpt_value *root,
                            const char *member, ckpt_flat *out) {
    /* visits and names bounded by the input's size too: a small pickle
     * can describe a huge DAG ("billion laughs", wide shared lists) */
    uint64_t input = ckpt_file_size(f),
             by_size = input < UINT64_MAX / 64 - 4096 ? input * 64 + 4096 : UINT64_MAX;
    uint64_t max_visits = ckpt_walk_budget(&f->opts.limits);
    if (by_size < max_visits) max_visits = by_size;
    uint64_t max_bytes = ckpt_zip_budget(&f->opts.limits, (size_t)input);
    max_bytes = max_bytes < UINT64_MAX - FLATTEN_SLACK ? max_bytes + FLATTEN_SLACK : UINT64_MAX;
    return ckpt_flatten(out, a, root, &f->opts.limits, max_visits, max_bytes, f->path, member);
}

/* The tensors a flattening does not name: inside the objects it lists as
 * values (an opaque call's arguments and BUILD state: a quint4x2
 * _rebuild_qtensor's scales, a class's attribute tensors), which loaders
 * hand back (ckpt.Opaque.args). Their storages need ids and the file's
 * source as the named ones' do: without, a loader read storage 0's bytes
 * for them. */
typedef struct inner_tensors {
    ckpt_tensor **t;
    size_t n, cap;
} inner_tensors;

static int inner_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    inner_tensors *in = w->ctx;
    if (node->value->kind != CKPT_KIND_TENSOR) return CKPT_WALK_DESCEND;
    if (in->n == in->cap) {
        size_t cap = in->cap ? 2 * in->cap : 16;
        ckpt_tensor **t = cap < SIZE_MAX / sizeof *t ? ckpt_realloc(in->t, cap * sizeof *t) : NULL;
        if (!t) return CKPT_E_NOMEM;
        in->t = t;
        in->cap = cap;
    }
    in->t[in->n++] = node->value->u.tensor;
    return CKPT_WALK_SKIP;
}

/* Collects into `in` the tensors under the object values of fl; the walks
 * share one visit budget, the flattening's. */
static int inner_collect(const ckpt_file *f, const ckpt_flat *fl, inner_tensors *in) {
    ckpt_walk w;
    ckpt_walk_init(&w, &f->opts.limits, f->path, NULL);
    w.enter = inner_enter;
    w.ctx = in;
    w.follow = CKPT_WALK_KEYS | CKPT_WALK_DICT_STATE | CKPT_WALK_OBJECT_PARTS;
    uint64_t left = w.max_visits;
    for (size_t i = 0; i < fl->nvalues; i++) {
        if (fl->values[i].value->kind != CKPT_KIND_OBJECT) continue;
        w.max_visits = left;
        int rc = ckpt_walk_run(&w, fl->values[i].value);
        if (rc) return rc == CKPT_E_NOMEM ? ckpt_err_nomem() : rc;
        left -= w.visits;
    }
    return 0;
}

/* Every storage reads its bytes through the file that holds them: a
 * shard's were set when the shard was flattened. A legacy storage view is
 * a slice of its root storage, as torch.load makes it (root[offset:offset
 * + size]): its tensors are the root's, so that they share memory with the
 * root's own (a root has no base: a tensor met twice is resolved once). */
static void storage_prepare(ckpt_file *f, ckpt_tensor *t) {
    if (t->storage->base) {
        uint64_t offset;
        ckpt_storage *root = (ckpt_storage *)(uintptr_t)ckpt_wr_root_storage(t, &offset);
        t->storage = root;
        t->storage_offset = offset;
    }
    ckpt_storage *st = t->storage;
    if (!st->source) st->source = &f->source;
    if (st->base && !st->base->source) st->base->source = &f->source;
    st->id = UINT64_MAX; /* no id yet: given below */
}

static void storage_number(ckpt_file *f, ckpt_tensor *t) {
    if (t->storage->id == UINT64_MAX) {
        t->storage->id = f->nstorages;
        f->storages[f->nstorages++] = t->storage;
    }
}

int ckpt_file_flatten(ckpt_file *f) {
    if (f->tree_lazy) return 0;
    ckpt_flat fl = {0};
    int rc = f->root ? ckpt_file_flatten_value(f, &f->arena, f->root, NULL, &fl) : 0;
    if (rc) return rc;
    inner_tensors in = {0};
    if ((rc = inner_collect(f, &fl, &in))) {
        ckpt_free(in.t);
        return rc;
    }

    /* shadowed tensors (a name a later tensor took) too: loaders rebuild
     * them */
    size_t all = fl.ntensors + fl.nshadowed;
    for (size_t i = 0; i < all; i++)
        storage_prepare(
            f, (i < fl.ntensors ? fl.tensors[i] : fl.shadowed[i - fl.ntensors]).value->u.tensor);
    for (size_t i = 0; i < in.n; i++) storage_prepare(f, in.t[i]);
    /* not zeroed: the loop below copies every tensor in (a memset of 6.4
     * MB for 100k tensors, 6.4M instructions) */
    size_t nt = fl.ntensors ? fl.ntensors : 1;
    f->tensors = nt <= SIZE_MAX / sizeof(ckpt_tensor)
                     ? ckpt_arena_alloc_raw(&f->arena, nt * sizeof(ckpt_tensor))
                     : NULL;
    f->storages = ckpt_arena_array(&f->arena, all + in.n ? all + in.n : 1, sizeof(ckpt_storage *));
    if (!f->tensors || !f->storages) {
        ckpt_free(in.t);
        return ckpt_err(CKPT_E_NOMEM, f->path, NULL, CKPT_NO_OFFSET, "out of memory");
    }
    /* storage ids: dense, in order of first use by the sorted tensors, then
     * by the shadowed ones (ckpt_file_read_storages reads any of them),
     * then by the tensors inside objects */
    for (size_t i = 0; i < all; i++) {
        const ckpt_named_value *nv =
            i < fl.ntensors ? &fl.tensors[i] : &fl.shadowed[i - fl.ntensors];
        ckpt_tensor *t = nv->value->u.tensor;
        if (t->name[0] == '\0' && nv->name[0]) t->name = nv->name;
        if (i < fl.ntensors) {
            f->tensors[i] = *t;
            f->tensors[i].name = nv->name;
        }
        storage_number(f, t);
    }
    for (size_t i = 0; i < in.n; i++) storage_number(f, in.t[i]);
    ckpt_free(in.t);
    f->ntensors = fl.ntensors;
    f->values = fl.values;
    f->nvalues = fl.nvalues;
    f->ncollisions = fl.ncollisions;
    f->collision_name = fl.collision_name;
    f->collision_paths[0] = fl.collision_paths[0];
    f->collision_paths[1] = fl.collision_paths[1];
    return 0;
}

/* ------------------------------------------------------------ accessors */

const char *ckpt_format_name(ckpt_format fmt) {
    switch (fmt) {
    case CKPT_FORMAT_SAFETENSORS: return "safetensors";
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return "safetensors-sharded";
    case CKPT_FORMAT_TORCH_SHARDED: return "torch-sharded";
    case CKPT_FORMAT_TORCH_ZIP: return "torch-zip";
    case CKPT_FORMAT_TORCH_LEGACY: return "torch-legacy";
    case CKPT_FORMAT_PICKLE: return "pickle";
    case CKPT_FORMAT_DCP: return "dcp";
    default: return "unknown";
    }
}

ckpt_format ckpt_file_format(const ckpt_file *f) { return f->format; }
const char *ckpt_file_path(const ckpt_file *f) { return f->path; }

uint64_t ckpt_file_size(const ckpt_file *f) {
    uint64_t total = f->map_size;
    for (size_t i = 0; i < f->nshards; i++) total += f->shards[i]->map_size;
    return total;
}

int ckpt_file_tree(const ckpt_value **out, const ckpt_file *cf) {
    ckpt_file *f = (ckpt_file *)cf; /* the lazy tree: a first-call write, under once.h's lock */
    int rc = 0;
    if (CKPT_ONCE_LOAD(&f->tree_lazy)) {
        ckpt_once_lock();
        if (f->tree_lazy) rc = ckpt_safetensors_tree(f);
        ckpt_once_unlock();
    }
    *out = rc ? NULL : f->root;
    return rc;
}

const ckpt_value *ckpt_file_root(const ckpt_file *f) {
    const ckpt_value *root;
    (void)ckpt_file_tree(&root, f);
    return root;
}
size_t ckpt_file_tensor_count(const ckpt_file *f) { return f->ntensors; }

const ckpt_tensor *ckpt_file_tensor(const ckpt_file *f, size_t i) {
    return i < f->ntensors ? &f->tensors[i] : NULL;
}

const ckpt_tensor *ckpt_file_find_tensor(const ckpt_file *f, const char *name) {
    size_t lo = 0, hi = f->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t ckpt_file_value_count(const ckpt_file *f) { return f->nvalues; }

const char *ckpt_file_value_name(const ckpt_file *f, size_t i) {
    return i < f->nvalues ? f->values[i].name : NULL;
}

const ckpt_value *ckpt_file_value(const ckpt_file *f, size_t i) {
    return i < f->nvalues ? f->values[i].value : NULL;
}

int ckpt_file_has_metadata(const ckpt_file *f) { return f->has_metadata; }
size_t ckpt_file_metadata_count(const ckpt_file *f) { return f->nmeta; }

const char *ckpt_file_metadata_key(const ckpt_file *f, size_t i) {
    return i < f->nmeta ? f->meta_keys[i] : NULL;
}

const char *ckpt_file_metadata_value(const ckpt_file *f, size_t i) {
    return i < f->nmeta ? f->meta_vals[i] : NULL;
}

/* ------------------------------------------------------------ storages */

size_t ckpt_file_storage_count(const ckpt_file *f) { return f->nstorages; }

/* Storage `id`: one of the file's, or one ckpt_file_logical_root rebuilt
 * (ids past the file's); NULL when there is none. */
ckpt_storage *ckpt_file_storage_at(const ckpt_file *f, size_t i) {
    return f->storages ? f->storages[i] : f->tensors[i].storage;
}

static const ckpt_storage *storage_by_id(const ckpt_file *f, uint64_t id) {
    if (id < f->nstorages) return ckpt_file_storage_at(f, (size_t)id);
    if (id - f->nstorages < f->nlogical_storages) return f->logical_storages[id - f->nstorages];
    return NULL;
}

int ckpt_file_storage_is_raw(const ckpt_file *f, uint64_t id) {
    const ckpt_storage *st = storage_by_id(f, id);
    return st && !st->big_endian;
}

/* One read of a batch: a whole storage, or a tensor's logical contents. */
typedef struct batch_read {
    const ckpt_storage *st;
    const ckpt_tensor *t; /* NULL: the whole storage */
    void *dst;
} batch_read;

/* File order: by source (shard), then by where the bytes lie. */
static int by_position(const void *x, const void *y) {
    const batch_read *a = x, *b = y;
    uintptr_t sa = (uintptr_t)a->st->source, sb = (uintptr_t)b->st->source;
    if (sa != sb) return sa < sb ? -1 : 1;
    uintptr_t pa = (uintptr_t)a->st->data, pb = (uintptr_t)b->st->data;
    if (pa != pb) return pa < pb ? -1 : 1;
    uint64_t oa = a->t ? a->t->storage_offset : 0, ob = b->t ? b->t->storage_offset : 0;
    return oa < ob ? -1 : oa > ob;
}

/* Storage bytes go into the caller's buffer in pieces of this size, each
 * piece's pages made present just before it is read (base/pages.h): the
 * kernel zeroes a piece while it still fits the core's cache for the copy
 * that overwrites it. A warm 64 MiB load (16 storages of 4 MiB), CPU per
 * load, medians of 8 interleaved processes: 0.0323 s with a fault per
 * page, 0.0325 populated in 4 MiB pieces, 0.0297 in 512 KiB, 0.0289 in
 * 256 KiB; cold loads alike within the noise. */
#define FILL_PIECE ((size_t)256 << 10)

/* Storage st, all its bytes, into the fresh buffer dst. */
static int fill_storage(const ckpt_storage *st, uint8_t *dst, size_t n) {
    for (size_t off = 0; off < n;) {
        size_t k = n - off < FILL_PIECE ? n - off : FILL_PIECE;
        ckpt_pages_populate(dst + off, k);
        int rc = ckpt_storage_read(st, off, dst + off, k);
        if (rc) return rc;
        off += k;
    }
    return 0;
}

static int read_batch(batch_read *order, size_t n) {
    int rc = 0;
    qsort(order, n, sizeof *order, by_position);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ckpt_storage *st = order[i].st;
        /* one hint per file: read front to back from here on */
        if (st->source && (i == 0 || st->source != order[i - 1].st->source))
            ckpt_source_will_stream(st->source);
        rc = order[i].t ? ckpt_tensor_read(order[i].t, order[i].dst, (size_t)order[i].t->nbytes)
                        : fill_storage(st, order[i].dst, (size_t)st->nbytes);
    }
    return rc;
}

static int batch_args(const ckpt_file *f, size_t n, const void *what, void *const *dst,
                      batch_read **order) {
    *order = NULL;
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "file is NULL");
    if (n == 0) return 0;
    if (!what || !dst)
        return ckpt_err(CKPT_E_INVALID_ARG, f->path, NULL, CKPT_NO_OFFSET,
                        "the arrays are required for %zu reads", n);
    if (n > SIZE_MAX / sizeof(batch_read)) return ckpt_err_nomem();
    *order = ckpt_malloc(n * sizeof **order);
    CKPT_CHECK_ALLOC(*order);
    return 0;
}

int ckpt_file_read_storages(const ckpt_file *f, size_t n, const uint64_t *ids, void *const *dst) {
    batch_read *order;
    int rc = batch_args(f, n, ids, dst, &order);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ckpt_storage *st = storage_by_id(f, ids[i]);
        if (!st)
            rc = ckpt_err(CKPT_E_INVALID_ARG, f->path, NULL, CKPT_NO_OFFSET,
                          "storage id %llu out of range (the file has %zu)",
                          (unsigned long long)ids[i], f->nstorages);
        else if ((rc = ckpt_storage_resolve(st)) != 0)
            break;
        else if (st->nbytes && !st->data && !st->chunks)
            rc = ckpt_err(CKPT_E_FORMAT, f->path, st->member, st->file_offset,
                          "storage %s has no data", st->key ? st->key : "");
        else if (st->nbytes && !dst[i])
            rc = ckpt_err(CKPT_E_INVALID_ARG, f->path, st->member, CKPT_NO_OFFSET,
                          "dst[%zu] is NULL", i);
        else if (st->nbytes > SIZE_MAX)
            rc = ckpt_err(CKPT_E_LIMIT, f->path, st->member, st->file_offset,
                          "storage larger than the address space");
        else
            order[i] = (batch_read){st, NULL, dst[i]};
    }
    if (rc == 0 && n) rc = read_batch(order, n);
    ckpt_free(order);
    return rc;
}

int ckpt_file_read_tensors(const ckpt_file *f, size_t n, const ckpt_tensor *const *tensors,
                           void *const *dst) {
    batch_read *order;
    int rc = batch_args(f, n, tensors, dst, &order);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!tensors[i] || !dst[i])
            rc = ckpt_err(CKPT_E_INVALID_ARG, f->path, NULL, CKPT_NO_OFFSET,
                          "tensors[%zu] or dst[%zu] is NULL", i, i);
        else
            order[i] = (batch_read){tensors[i]->storage, tensors[i], dst[i]};
    }
    if (rc == 0 && n) rc = read_batch(order, n);
    ckpt_free(order);
    return rc;
}
