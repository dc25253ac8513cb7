/* sharded.c - sharded safetensors and torch.save sets opened through their index (see
 * sharded.h). An index is a file of files: this is the one place where
 * reading a file opens others (ckpt_file_open_path).
 *
 * Each weight_map entry names its shard; many entries name one shard, and
 * a hostile index may spell one shard many ways ("x", "./x", ".//x"...).
 * Spellings are made canonical (ckpt_shard_name) and looked up in a hash
 * table, and a new canonical name is compared by file identity with the
 * shards open already, so each file is opened and parsed once: the work is
 * O(index + shards), whatever the spellings. */
#include "open/sharded.h"

#include <inttypes.h>
#include <stdio.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "format/index_json.h"
#include "format/safetensors.h"
#include "open/model_dir.h"

/* Nonzero while this thread opens shards: a shard whose content is itself
 * an index would otherwise recurse without end (x.safetensors naming
 * itself). */
static _Thread_local unsigned opening_shards;

/* HF _load_sharded_checkpoint's rules: a shard is a relative path inside
 * the index's directory. Colons are refused with drives ("C:x") because
 * they have no business in a shard name. */
const char *ckpt_shard_name(char *out, const char *name, size_t len, const char *ext) {
    if (len == 0 || memchr(name, '\0', len)) return "empty or holds a NUL byte";
    if (name[0] == '/') return "an absolute path";
    if (memchr(name, '\\', len) || memchr(name, ':', len)) return "a backslash, drive or colon";
    size_t o = 0, seg;
    for (size_t i = 0; i < len; i += seg + 1) {
        const char *p = name + i;
        const char *slash = memchr(p, '/', len - i);
        seg = slash ? (size_t)(slash - p) : len - i;
        if (seg == 2 && p[0] == '.' && p[1] == '.') return "a \"..\" component";
        int dot = seg == 1 && p[0] == '.';
        /* "x/" and "x/." name a directory; "a//x" and "a/./x" are a/x */
        if (i + seg >= len - 1 && (dot || slash)) return "a directory";
        if (seg == 0 || dot) continue;
        if (o) out[o++] = '/';
        memcpy(out + o, p, seg);
        o += seg;
    }
    out[o] = '\0';
    size_t elen = ext ? strlen(ext) : 0;
    if (ext && (o <= elen || memcmp(out + o - elen, ext, elen)))
        return !strcmp(ext, ".bin") ? "not a .bin file" : "not a .safetensors file";
    return NULL;
}

int ckpt_shard_outside(const char *dir, const char *path, char *target, size_t cap) {
    char *real_dir = realpath(dir, NULL), *real = realpath(path, NULL);
    int outside = 0;
    if (real_dir && real) {
        size_t n = strlen(real_dir);
        outside = !(strncmp(real, real_dir, n) == 0 && (real[n] == '/' || n == 1));
        if (outside) snprintf(target, cap, "%s", real);
    }
    free(real_dir);
    free(real);
    return outside;
}

typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int known; /* stat succeeded */
} file_id;

typedef struct index_reader {
    ckpt_file *f;
    const char *dir;
    const char *ext;    /* the shards' extension: ".safetensors" or ".bin" */
    int torch;          /* a set of torch.save shards (ext ".bin") */
    json_t *by_name;    /* canonical name -> shard index */
    const char **names; /* each shard's canonical name (parallels f->shards) */
    file_id *ids;       /* each shard's file */
    char *buf;          /* a canonical name */
    size_t cap;
} index_reader;

static int nomem(const index_reader *r) {
    return ckpt_err(CKPT_E_NOMEM, r->f->path, "", CKPT_NO_OFFSET, "out of memory");
}

/* The canonical form of spelling s into r->buf; why it is refused, or
 * NULL. *rc receives CKPT_E_NOMEM when the buffer cannot grow. */
static const char *canonical(index_reader *r, const char *s, size_t len, int *rc) {
    *rc = 0;
    if (len + 1 > r->cap) {
        char *nb = ckpt_realloc(r->buf, len + 1);
        if (!nb) {
            *rc = nomem(r);
            return "";
        }
        r->buf = nb;
        r->cap = len + 1;
    }
    return ckpt_shard_name(r->buf, s, len, r->ext);
}

/* A shard is a file of its set's format holding a state dict: str names
 * to tensors (a safetensors file always is one; a torch.save file must
 * be). */
static int check_shard(const index_reader *r, const ckpt_file *sf, const char *canon) {
    const ckpt_file *f = r->f;
    const char *want = ckpt_model_dir_format_misfit(canon, sf->format);
    if (want)
        return ckpt_err(CKPT_E_FORMAT, f->path, canon, CKPT_NO_OFFSET,
                        "shard \"%s\" is %s, expected a %s file", canon,
                        ckpt_format_name(sf->format), want);
    const ckpt_value *root;
    if (ckpt_file_tree(&root, sf)) return CKPT_E_NOMEM;
    if (!root || root->kind != CKPT_KIND_DICT)
        return ckpt_err(CKPT_E_FORMAT, f->path, canon, CKPT_NO_OFFSET,
                        "shard \"%s\" holds a %s, expected a state dict", canon,
                        root ? ckpt_kind_name((ckpt_kind)root->kind) : "nothing");
    for (size_t i = 0; i < root->u.dict.n; i++)
        if (root->u.dict.keys[i]->kind != CKPT_KIND_STR ||
            root->u.dict.vals[i]->kind != CKPT_KIND_TENSOR)
            return ckpt_err(CKPT_E_FORMAT, f->path, canon, CKPT_NO_OFFSET,
                            "shard \"%s\": entry %zu is not a tensor under a str name, "
                            "expected a state dict",
                            canon, i);
    return 0;
}

/* Index of the shard weight_map value `spelling` names, opening it on
 * first use. */
static int get_shard(index_reader *r, const json_t *spelling, size_t *out) {
    ckpt_file *f = r->f;
    const char *name = json_string_value(spelling);
    int rc;
    const char *why = canonical(r, name, json_string_length(spelling), &rc);
    if (rc) return rc;
    if (why)
        return ckpt_err(CKPT_E_FORMAT, f->path, name, CKPT_NO_OFFSET,
                        "shard name \"%s\" is %s, expected a relative "
                        "\"*%s\" path inside the index's directory",
                        name, why, r->ext);
    const json_t *known = json_object_get(r->by_name, r->buf);
    if (known) {
        *out = (size_t)json_integer_value(known);
        return 0;
    }
    const char *path = ckpt_arena_printf(&f->arena, "%s/%s", r->dir, r->buf);
    const char *canon = ckpt_arena_strdup(&f->arena, r->buf);
    if (!path || !canon) return nomem(r);
    /* another name of a file open already (a link): the same shard */
    struct stat st;
    file_id id = {0};
    if (stat(path, &st) == 0) id = (file_id){st.st_dev, st.st_ino, 1};
    size_t s = 0;
    while (s < f->nshards &&
           !(id.known && r->ids[s].known && r->ids[s].dev == id.dev && r->ids[s].ino == id.ino))
        s++;
    if (s == f->nshards) {
        ckpt_file *sf;
        opening_shards++;
        rc = ckpt_file_open_path(&sf, path, &f->opts);
        opening_shards--;
        /* a shard that is not there is the set's fault, not an I/O failure */
        if (rc == CKPT_E_IO) {
            char why_io[256];
            snprintf(why_io, sizeof why_io, "%s", ckpt_error_last()->message);
            return ckpt_err(CKPT_E_MISMATCH, path, NULL, CKPT_NO_OFFSET,
                            "shard \"%s\" listed in the weight_map of %s: %s", canon, f->path,
                            why_io);
        }
        if (rc) return rc; /* recorded against the shard's own path */
        f->shards[s] = sf; /* owned from here: ckpt_close frees it */
        r->names[s] = canon;
        r->ids[s] = id;
        f->nshards++;
        if ((rc = check_shard(r, sf, canon))) return rc;
    }
    if (json_object_set_new_nocheck(r->by_name, canon, json_integer((json_int_t)s)))
        return nomem(r);
    *out = s;
    return 0;
}

/* The shard a weight_map value names (every value was opened by
 * get_shard, so it is known). */
static size_t shard_of(index_reader *r, const json_t *spelling) {
    int rc;
    (void)canonical(r, json_string_value(spelling), json_string_length(spelling), &rc);
    const json_t *known = rc ? NULL : json_object_get(r->by_name, r->buf);
    return known ? (size_t)json_integer_value(known) : SIZE_MAX;
}

/* The index "metadata": strings as they are, anything else as compact
 * JSON text. */
static int read_index_metadata(ckpt_file *f, const json_t *md) {
    if (!md || json_is_null(md)) return 0;
    if (!json_is_object(md))
        return ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                        "index \"metadata\" must be an object");
    size_t n = json_object_size(md);
    f->meta_keys = ckpt_arena_array(&f->arena, n ? n : 1, sizeof(char *));
    f->meta_vals = ckpt_arena_array(&f->arena, n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals)
        return ckpt_err(CKPT_E_NOMEM, f->path, "", CKPT_NO_OFFSET, "out of memory");
    const char *key;
    const json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)md, key, val) {
        char *text;
        if (json_is_string(val)) {
            text = ckpt_arena_strndup(&f->arena, json_string_value(val), json_string_length(val));
        } else {
            size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
            size_t len = json_dumpb(val, NULL, 0, flags);
            text = ckpt_arena_alloc(&f->arena, len + 1);
            if (text) json_dumpb(val, text, len, flags);
        }
        f->meta_keys[i] = ckpt_arena_strdup(&f->arena, key);
        f->meta_vals[i] = text;
        if (!f->meta_keys[i] || !text)
            return ckpt_err(CKPT_E_NOMEM, f->path, "", CKPT_NO_OFFSET, "out of memory");
        i++;
    }
    f->nmeta = n;
    f->has_metadata = 1;
    return 0;
}

/* Shard s's tensor key -> val joins the set's root if weight_map lists it
 * (or, for an alias, the stored name `target` it stands for) with shard s. */
static int match_one(index_reader *r, size_t s, ckpt_value *key, ckpt_value *val,
                     const json_t *listed, const json_t *target) {
    ckpt_file *f = r->f;
    const char *name = target ? json_string_value(target) : key->u.s.p;
    if (!listed)
        return ckpt_err(CKPT_E_MISMATCH, f->path, r->names[s], CKPT_NO_OFFSET,
                        "tensor \"%s\" of shard \"%s\" is not listed "
                        "in weight_map",
                        name, r->names[s]);
    if (shard_of(r, listed) != s)
        return ckpt_err(CKPT_E_MISMATCH, f->path, r->names[s], CKPT_NO_OFFSET,
                        "tensor \"%s\" is in shard \"%s\" but "
                        "weight_map maps it to \"%s\"",
                        name, r->names[s], json_string_value(listed));
    /* the set is one checkpoint: say which file holds the bytes */
    val->u.tensor->storage->member = r->names[s];
    return ckpt_value_dict_set(&f->arena, f->root, key, val) ? nomem(r) : 0;
}

/* The shard's "ckpt.aliases" ({alias: stored name}, checked when the shard
 * was read), or NULL if it has none. A new reference. */
static json_t *shard_aliases(const ckpt_file *shard) {
    for (size_t i = 0; i < shard->nmeta; i++)
        if (strcmp(shard->meta_keys[i], "ckpt.aliases") == 0)
            return json_loads(shard->meta_vals[i], 0, NULL);
    return NULL;
}

/* Each shard tensor must be listed in weight_map with that shard, but for
 * an alias the shard itself declares (its "ckpt.aliases": ckpt writes a
 * tied name there and leaves it out of weight_map, as huggingface_hub
 * does) of a tensor so listed; then, if fewer tensors matched than
 * weight_map lists, names the one missing. An index of an older ckpt
 * lists the aliases too, and reads the same. */
static int match_shards(index_reader *r, const json_t *wm) {
    ckpt_file *f = r->f;
    size_t matched = 0;
    json_t *claimed = json_object(); /* alias -> the shard that declared it */
    f->root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    if (!f->root || !claimed) {
        json_decref(claimed);
        return nomem(r);
    }
    for (size_t s = 0; s < f->nshards; s++) {
        const ckpt_value *sroot = ckpt_file_root(f->shards[s]);
        json_t *aliases = shard_aliases(f->shards[s]);
        int rc = 0;
        for (size_t i = 0; !rc && i < sroot->u.dict.n; i++) {
            ckpt_value *key = sroot->u.dict.keys[i];
            ckpt_value *val = sroot->u.dict.vals[i];
            const json_t *listed = json_object_get(wm, key->u.s.p);
            const json_t *target = listed ? NULL : json_object_get(aliases, key->u.s.p);
            if (target) {
                /* two shards naming one alias would be two answers for it
                 * (the loader, reading weight_map, has none) */
                const json_t *first = json_object_get(claimed, key->u.s.p);
                if (first) {
                    rc = ckpt_err(CKPT_E_MISMATCH, f->path, r->names[s], CKPT_NO_OFFSET,
                                  "alias \"%s\" (not in weight_map) is declared by shard "
                                  "\"%s\" and by shard \"%s\"",
                                  key->u.s.p, json_string_value(first), r->names[s]);
                    break;
                }
                if (json_object_set_new(claimed, key->u.s.p, json_string(r->names[s]))) {
                    rc = nomem(r);
                    break;
                }
                listed = json_object_get(wm, json_string_value(target));
            } else if (listed) {
                matched++;
            }
            rc = match_one(r, s, key, val, listed, target);
        }
        json_decref(aliases);
        if (rc) {
            json_decref(claimed);
            return rc;
        }
    }
    json_decref(claimed);
    if (matched == json_object_size(wm)) return 0;
    const char *name;
    const json_t *shard;
    json_object_foreach((json_t *)wm, name, shard) {
        size_t s = shard_of(r, shard);
        if (s < f->nshards && !ckpt_file_find_tensor(f->shards[s], name))
            return ckpt_err(CKPT_E_MISMATCH, f->path, r->names[s], CKPT_NO_OFFSET,
                            "tensor \"%s\" listed in weight_map is missing "
                            "from shard \"%s\"",
                            name, r->names[s]);
    }
    return 0; /* not reached: the counts differ only if one is missing */
}

static int read_index(index_reader *r, const json_t *wm, const json_t *md) {
    ckpt_file *f = r->f;
    size_t count = json_object_size(wm);
    if (count > f->opts.limits.max_tensors)
        return ckpt_err(CKPT_E_LIMIT, f->path, "", CKPT_NO_OFFSET,
                        "weight_map lists %zu tensors, limit max_tensors is "
                        "%" PRIu64,
                        count, f->opts.limits.max_tensors);
    int rc = read_index_metadata(f, md);
    if (rc) return rc;
    /* at most one shard per listed tensor */
    r->names = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *r->names);
    r->ids = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *r->ids);
    f->shards = ckpt_arena_array(&f->arena, count ? count : 1, sizeof(ckpt_file *));
    if (!r->names || !r->ids || !f->shards) return nomem(r);
    const char *name;
    const json_t *shard;
    json_object_foreach((json_t *)wm, name, shard) {
        size_t s;
        if ((rc = get_shard(r, shard, &s))) return rc;
    }
    if ((rc = match_shards(r, wm))) return rc;
    f->format = r->torch ? CKPT_FORMAT_TORCH_SHARDED : CKPT_FORMAT_SAFETENSORS_SHARDED;
    return 0;
}

/* weight_map as Python's json reads it (ckpt_index_read: the last value
 * of a repeated key, NaN and numbers of any size elsewhere), as a jansson
 * object tensor name -> shard name. */
static int weight_map_of(ckpt_file *f, const ckpt_index *ix, json_t **out) {
    if (!ix->has_weight_map)
        return ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                        "index must be a JSON object with a \"weight_map\" "
                        "object");
    if (ix->non_strings)
        return ckpt_err(CKPT_E_FORMAT, f->path, "", ix->first_non_string,
                        "weight_map entry \"%s\" must be a shard file "
                        "name string",
                        ix->non_string_key);
    json_t *wm = json_object();
    if (!wm) return ckpt_err(CKPT_E_NOMEM, f->path, "", CKPT_NO_OFFSET, "out of memory");
    for (size_t i = 0; i < ix->nshards; i++) {
        const ckpt_index_shard *sh = &ix->shards[i];
        const char *why = sh->surrogate ? "a lone surrogate (\\ud800-\\udfff)"
                          : memchr(sh->key, '\0', sh->key_len) ? "a NUL byte in its name"
                                                               : NULL;
        if (why) {
            json_decref(wm);
            return ckpt_err(CKPT_E_FORMAT, f->path, "", sh->offset,
                            "weight_map entry \"%s\" holds %s, expected a "
                            "tensor name and a shard file name",
                            sh->key, why);
        }
        json_t *v = json_stringn_nocheck(sh->name, sh->len);
        if (!v || json_object_setn_new_nocheck(wm, sh->key, sh->key_len, v)) {
            json_decref(wm);
            return ckpt_err(CKPT_E_NOMEM, f->path, "", CKPT_NO_OFFSET, "out of memory");
        }
    }
    *out = wm;
    return 0;
}

ckpt_format ckpt_sharded_format(const char *path) {
    /* transformers' WEIGHTS_INDEX_NAME, pytorch_model.bin.index.json, lists
     * torch.save shards; any other index safetensors shards */
    static const char bin[] = ".bin.index.json";
    size_t plen = strlen(path);
    return plen >= sizeof bin - 1 && !strcmp(path + plen - (sizeof bin - 1), bin)
               ? CKPT_FORMAT_TORCH_SHARDED
               : CKPT_FORMAT_SAFETENSORS_SHARDED;
}

int ckpt_sharded_read(ckpt_file *f, const uint8_t *json, size_t len, const char *dir) {
    if (opening_shards)
        return ckpt_err(CKPT_E_FORMAT, f->path, "", 0,
                        "a shard is itself a sharded index, expected a "
                        "safetensors file");
    /* read as the loaders' json.load reads it (Python's rules, nesting
     * included: json fails near 1000 levels) */
    ckpt_index ix;
    ckpt_arena python = {0};
    json_t *wm = NULL, *md = NULL;
    int rc = ckpt_index_read(&ix, &python, json, len, f->path, f->opts.limits.max_depth);
    if (rc == 0) rc = weight_map_of(f, &ix, &wm);
    if (rc == 0 && ix.metadata_len) {
        /* metadata jansson cannot hold (NaN, integers past 64 bits) is
         * not kept: nothing reads tensors by it */
        json_error_t err;
        md =
            json_loadb((const char *)json + ix.metadata_at, ix.metadata_len, JSON_DECODE_ANY, &err);
    }
    ckpt_arena_free(&python);
    if (rc) return rc;
    int torch = ckpt_sharded_format(f->path) == CKPT_FORMAT_TORCH_SHARDED;
    index_reader r = {.f = f,
                      .dir = dir,
                      .by_name = json_object(),
                      .torch = torch,
                      .ext = torch ? ".bin" : ".safetensors"};
    rc = r.by_name ? read_index(&r, wm, md) : nomem(&r);
    json_decref(r.by_name);
    ckpt_free(r.buf);
    json_decref(wm);
    json_decref(md);
    return rc;
}
