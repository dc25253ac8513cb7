/* dcp.c - a DCP directory as one checkpoint (dcp.h). What a loader does
 * (FileSystemReader.read_data, then narrow and copy into the global
 * tensor; dcp_to_torch_save with _EmptyStateDictLoadPlanner), done without
 * running a pickle: .metadata names each chunk's slice of a data file;
 * the slice is a torch.save zip (read by the torch zip reader exactly as
 * torch.load would read the slice) or, in the safetensors format, the
 * rank's safetensors file from that offset on. */
#include "open/dcp.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/strmap.h"
#include "format/dcp_meta.h"
#include "format/detect.h"
#include "model/dtype.h"
#include "open/sharded.h"

#define DATA_SUFFIX ".distcp"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int ckpt_is_dcp_dir(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode) && ckpt_dcp_is_dir(path);
}

int ckpt_dcp_is_dir(const char *dir) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/.metadata", dir);
    if (n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0) return 1;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = e->d_name[0] != '.' && ends_with(e->d_name, DATA_SUFFIX);
    closedir(d);
    return found;
}

typedef struct opener {
    ckpt_file *f;
    const char *dir;
    ckpt_strmap names; /* canonical data file name -> shard index */
    size_t shard_cap, part_cap;
    /* safetensors parts, opened once per (data file, offset) */
    struct st_part {
        size_t shard;
        uint64_t offset;
        ckpt_file *part;
    } * st;
    size_t nst, st_cap;
} opener;

/* "__RANK_N.distcp" -> RANK, else -1. */
static int rank_of(const char *name) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "__", 2)) return -1;
    char *end;
    long r = strtol(base + 2, &end, 10);
    if (end == base + 2 || *end != '_' || r < 0 || r > 1 << 30) return -1;
    return (int)r;
}

/* The data file `rel` (as .metadata spells it), opened once. */
static int data_file(opener *o, const char *rel, const char *fqn, size_t *index) {
    ckpt_file *f = o->f;
    size_t len = strlen(rel);
    char *canon = ckpt_arena_alloc(&f->arena, len + 1);
    CKPT_CHECK_ALLOC(canon);
    const char *why = ckpt_shard_name(canon, rel, len, NULL);
    if (why)
        return ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                        "\"%s\": data file \"%.200s\" is %s", fqn, rel, why);
    size_t clen = strlen(canon);
    ckpt_strmap_slot *slot =
        ckpt_strmap_find(&o->names, canon, clen, ckpt_strmap_hash(canon, clen));
    if (slot) {
        *index = slot->val;
        return 0;
    }
    const char *path = ckpt_arena_printf(&f->arena, "%s/%s", o->dir, canon);
    CKPT_CHECK_ALLOC(path);
    struct stat st;
    if (stat(path, &st) != 0)
        return ckpt_err(CKPT_E_MISMATCH, path, "", CKPT_NO_OFFSET,
                        "missing: .metadata names it as the data file of \"%s\"", fqn);
    if (ckpt_arena_grow(&f->arena, (void **)&f->shards, &o->shard_cap, f->nshards + 1,
                        sizeof *f->shards))
        return ckpt_err_nomem();
    ckpt_file *shard;
    int rc = ckpt_file_open_raw(&shard, path, &f->opts);
    if (rc) return rc;
    f->shards[f->nshards] = shard;
    *index = f->nshards++;
    if (ckpt_strmap_put(&o->names, canon, clen, *index, &slot) < 0) return ckpt_err_nomem();
    return 0;
}

static int add_part(opener *o, ckpt_file *part) {
    ckpt_file *f = o->f;
    if (ckpt_arena_grow(&f->arena, (void **)&f->parts, &o->part_cap, f->nparts + 1,
                        sizeof *f->parts)) {
        ckpt_close(part);
        return ckpt_err_nomem();
    }
    f->parts[f->nparts++] = part;
    return 0;
}

/* The checkpoint a slice [off, off+len) of data file `shard` is read
 * from, and in *base where it starts: a torch.save zip at off; a
 * safetensors file from off to the file's end (DCP's safetensors format,
 * written after the rank's bytes items); or, when off holds neither, the
 * safetensors file the whole data file is (ckpt.dcp.Writer: the slice is
 * one tensor's data in it). A safetensors file is opened once. */
static int open_slice(opener *o, size_t shard, uint64_t off, uint64_t len, const char *fqn,
                      ckpt_file **out, uint64_t *base) {
    ckpt_file *h = o->f->shards[shard];
    if (off > h->map_size || len > h->map_size - off)
        return ckpt_err(CKPT_E_TRUNCATED, h->path, "", h->map_size,
                        "\"%s\" is at bytes [%llu, %llu) of this file, which ends at %zu", fqn,
                        (unsigned long long)off, (unsigned long long)(off + len), h->map_size);
    uint8_t head[CKPT_HEAD_BYTES];
    size_t n;
    int rc = ckpt_file_head(h, off, head, &n);
    if (rc) return rc;
    ckpt_format at = ckpt_detect_format(head, n);
    *base = off;
    if (at != CKPT_FORMAT_TORCH_ZIP && at != CKPT_FORMAT_SAFETENSORS) {
        if ((rc = ckpt_file_head(h, 0, head, &n))) return rc;
        if (ckpt_detect_format(head, n) == CKPT_FORMAT_SAFETENSORS) {
            at = CKPT_FORMAT_SAFETENSORS;
            *base = 0;
        }
    }
    int safetensors = at == CKPT_FORMAT_SAFETENSORS;
    if (safetensors) {
        for (size_t i = 0; i < o->nst; i++)
            if (o->st[i].shard == shard && o->st[i].offset == *base) {
                *out = o->st[i].part;
                return 0;
            }
        len = h->map_size - *base;
    }
    const char *name =
        ckpt_arena_printf(&o->f->arena, "%s@%llu", h->path, (unsigned long long)*base);
    CKPT_CHECK_ALLOC(name);
    ckpt_file *part;
    rc = ckpt_file_open_part(&part, h, *base, len, name);
    if (rc) return rc;
    if ((rc = add_part(o, part))) return rc;
    if (safetensors) {
        if (ckpt_arena_grow(&o->f->arena, (void **)&o->st, &o->st_cap, o->nst + 1, sizeof *o->st))
            return ckpt_err_nomem();
        o->st[o->nst++] = (struct st_part){shard, *base, part};
    }
    *out = part;
    return 0;
}

/* DCP_SHARDING_INFO's saved_offsets of `fqn` in a safetensors part, when
 * it lists them, must be the chunk's offsets. */
static int check_saved_offsets(const ckpt_file *part, const char *fqn, const ckpt_dcp_chunk *ch,
                               uint32_t ndim) {
    const char *text = NULL;
    for (size_t i = 0; i < part->nmeta; i++)
        if (!strcmp(part->meta_keys[i], "DCP_SHARDING_INFO")) text = part->meta_vals[i];
    if (!text) return 0;
    json_error_t err;
    json_t *doc = json_loads(text, 0, &err);
    const json_t *so = json_object_get(json_object_get(doc, fqn), "saved_offsets");
    int rc = 0;
    if (so) {
        int same = json_is_array(so) && json_array_size(so) == ndim;
        for (uint32_t d = 0; same && d < ndim; d++) {
            const json_t *x = json_array_get(so, d);
            same = json_is_integer(x) && json_integer_value(x) >= 0 &&
                   (uint64_t)json_integer_value(x) == ch->offsets[d];
        }
        if (!same)
            rc = ckpt_err(CKPT_E_MISMATCH, part->path, fqn, CKPT_NO_OFFSET,
                          "DCP_SHARDING_INFO gives \"%s\" other saved_offsets than its chunk "
                          "in .metadata",
                          fqn);
    }
    json_decref(doc);
    return rc;
}

/* The tensor a chunk's slice holds, checked against the chunk. */
static int chunk_tensor(opener *o, const ckpt_dcp_item *it, const ckpt_dcp_chunk *ch, size_t shard,
                        const ckpt_tensor **out) {
    ckpt_file *part;
    uint64_t base;
    int rc = open_slice(o, shard, ch->offset, ch->length, it->fqn, &part, &base);
    if (rc) return rc;
    const ckpt_tensor *t = NULL;
    if (part->format == CKPT_FORMAT_SAFETENSORS) {
        t = ckpt_file_find_tensor(part, it->fqn);
        if (!t)
            return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, CKPT_NO_OFFSET,
                            "the safetensors file holds no tensor \"%s\", which .metadata "
                            "places here",
                            it->fqn);
        if ((rc = check_saved_offsets(part, it->fqn, ch, it->ndim))) return rc;
        /* a slice inside the file is exactly the tensor's data */
        if (base != ch->offset &&
            (ckpt_tensor_file_offset(t) != ch->offset || t->nbytes != ch->length))
            return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, ch->offset,
                            ".metadata places \"%s\" at [%llu, %llu), where the safetensors "
                            "header has no tensor of that name",
                            it->fqn, (unsigned long long)ch->offset,
                            (unsigned long long)(ch->offset + ch->length));
    } else if (part->root && part->root->kind == CKPT_KIND_TENSOR && part->ntensors == 1) {
        t = &part->tensors[0];
    } else {
        return ckpt_err(CKPT_E_FORMAT, part->path, "", 0,
                        "the slice holding a chunk of \"%s\" is not a torch.save of one tensor",
                        it->fqn);
    }
    int same = t->dtype == it->dtype && t->ndim == it->ndim;
    for (uint32_t d = 0; same && d < it->ndim; d++) same = t->shape[d] == ch->sizes[d];
    if (!same)
        return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, CKPT_NO_OFFSET,
                        "chunk of \"%s\" holds a %s tensor of %u dimensions that is not the %s "
                        "chunk of the sizes .metadata gives",
                        it->fqn, ckpt_dtype_name(t->dtype), t->ndim, ckpt_dtype_name(it->dtype));
    *out = t;
    return 0;
}

/* Row-major order of the boxes' starts (a chunk is a box of the global
 * tensor; this is the order ckpt_tensor_chunk lists them in). */
static int by_offsets(const void *x, const void *y) {
    const ckpt_chunk *a = x, *b = y;
    for (uint32_t d = 0; d < a->t->ndim; d++)
        if (a->offsets[d] != b->offsets[d]) return a->offsets[d] < b->offsets[d] ? -1 : 1;
    return 0;
}

/* The chunks tile the tensor: none overlaps another and together they
 * hold numel elements (inside the tensor: dcp_meta.c checked). Sorted by
 * the first offset, a chunk is only compared with those that start before
 * it ends along dimension 0. */
static int check_tiling(const ckpt_file *f, const ckpt_dcp_item *it, ckpt_chunk *k, size_t n) {
    uint64_t numel = 1, total = 0;
    for (uint32_t d = 0; d < it->ndim; d++) numel *= it->size[d]; /* bounded by the view check */
    for (size_t i = 0; i < n; i++) {
        uint64_t m = k[i].t->numel;
        if (ckpt_add_overflow(total, m, &total)) total = UINT64_MAX;
    }
    if (it->ndim == 0) {
        if (n != 1)
            return ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                            "scalar \"%s\" has %zu chunks, expected 1", it->fqn, n);
        return 0;
    }
    if (n > 1) qsort(k, n, sizeof *k, by_offsets);
    for (size_t i = 0; i < n; i++) {
        if (k[i].t->numel == 0) continue;
        for (size_t j = i + 1; j < n && k[j].offsets[0] < k[i].offsets[0] + k[i].t->shape[0]; j++) {
            int overlap = k[j].t->numel != 0;
            for (uint32_t d = 0; overlap && d < it->ndim; d++) {
                uint64_t lo = k[i].offsets[d] > k[j].offsets[d] ? k[i].offsets[d] : k[j].offsets[d];
                uint64_t ei = k[i].offsets[d] + k[i].t->shape[d];
                uint64_t ej = k[j].offsets[d] + k[j].t->shape[d];
                overlap = lo < (ei < ej ? ei : ej);
            }
            if (overlap)
                return ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                                "chunks of \"%s\" overlap: the ones in %s@%llu and %s@%llu "
                                "cover common elements",
                                it->fqn, k[i].file, (unsigned long long)k[i].offset, k[j].file,
                                (unsigned long long)k[j].offset);
        }
    }
    if (total != numel)
        return ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                        "chunks of \"%s\" leave a gap: they hold %llu of its %llu elements",
                        it->fqn, (unsigned long long)total, (unsigned long long)numel);
    return 0;
}

static int tensor_value(opener *o, const ckpt_dcp_item *it, ckpt_value **out) {
    ckpt_file *f = o->f;
    ckpt_chunk *k = ckpt_arena_array(&f->arena, it->nchunks ? it->nchunks : 1, sizeof *k);
    ckpt_chunks *cs = ckpt_arena_alloc(&f->arena, sizeof *cs);
    ckpt_storage *st = ckpt_arena_alloc(&f->arena, sizeof *st);
    uint64_t *stride = ckpt_arena_array(&f->arena, it->ndim ? it->ndim : 1, sizeof *stride);
    CKPT_CHECK_ALLOC(k && cs && st && stride);
    for (size_t c = 0; c < it->nchunks; c++) {
        const ckpt_dcp_chunk *ch = &it->chunks[c];
        size_t shard;
        int rc = data_file(o, ch->path, it->fqn, &shard);
        if (rc == 0) rc = chunk_tensor(o, it, ch, shard, &k[c].t);
        if (rc) return rc;
        k[c].offsets = ch->offsets;
        k[c].file = ch->path;
        k[c].offset = ch->offset;
        k[c].length = ch->length;
        k[c].rank = rank_of(ch->path);
    }
    /* row-major strides; the view check below bounds numel */
    uint64_t numel = 1;
    for (uint32_t d = it->ndim; d-- > 0;) {
        stride[d] = numel;
        if (ckpt_mul_overflow(numel, it->size[d], &numel))
            return ckpt_err(CKPT_E_LIMIT, f->path, it->fqn, CKPT_NO_OFFSET,
                            "\"%s\": element count overflows", it->fqn);
    }
    uint64_t nbytes;
    if (ckpt_mul_overflow(numel, ckpt_dtype_size(it->dtype), &nbytes))
        return ckpt_err(CKPT_E_LIMIT, f->path, it->fqn, CKPT_NO_OFFSET,
                        "\"%s\": byte size overflows", it->fqn);
    *cs = (ckpt_chunks){.ndim = it->ndim, .shape = it->size, .items = k, .n = it->nchunks};
    st->dtype = it->dtype;
    st->nbytes = nbytes;
    st->key = it->fqn;
    st->member = "";
    st->file_offset = CKPT_NO_OFFSET;
    st->chunks = cs;
    int rc = ckpt_tensor_new(out, &f->arena, st, it->dtype, it->ndim, it->size, stride, 0, f->path,
                             it->fqn, CKPT_NO_OFFSET);
    /* after the tensor is built: numel is known to be sane */
    return rc ? rc : check_tiling(f, it, k, it->nchunks);
}

static int bytes_value(opener *o, const ckpt_dcp_item *it, ckpt_value **out) {
    size_t shard;
    ckpt_file *part;
    uint64_t base;
    int rc = data_file(o, it->chunks[0].path, it->fqn, &shard);
    if (rc == 0)
        rc =
            open_slice(o, shard, it->chunks[0].offset, it->chunks[0].length, it->fqn, &part, &base);
    if (rc) return rc;
    if (part->format != CKPT_FORMAT_TORCH_ZIP || !part->root)
        return ckpt_err(CKPT_E_FORMAT, part->path, it->fqn, 0,
                        "bytes item \"%s\" is not a torch.save zip", it->fqn);
    *out = part->root;
    return 0;
}

/* ------------------------------------------------------------ nesting */

/* The state dict as dcp_to_torch_save returns it: every item put back
 * where planner_data's object path says, by the rule of DCP's set_element
 * (_traverse.py): a missing container is a dict when the key that follows
 * is a str and a list when it is an int; lists grow with None up to an
 * index. Dict keys are found through one map keyed by (container, key). */
typedef struct nester {
    ckpt_file *f;
    ckpt_strmap keys;   /* (container, key) -> index of the key in the dict */
    uint64_t max_index; /* list indices past the item count hold no item */
} nester;

/* The map's key for `key` in dict `d`: the container's address, the key's
 * kind and its text or value. */
static int dict_key(nester *n, const ckpt_value *d, const ckpt_value *key, const char **out,
                    size_t *len) {
    size_t klen = key->kind == CKPT_KIND_STR ? key->u.s.len : sizeof(int64_t);
    char *b = ckpt_arena_alloc_raw(&n->f->arena, sizeof d + 1 + klen);
    CKPT_CHECK_ALLOC(b);
    memcpy(b, &d, sizeof d);
    b[sizeof d] = (char)key->kind;
    memcpy(b + sizeof d + 1, key->kind == CKPT_KIND_STR ? (const void *)key->u.s.p : &key->u.i.v,
           klen);
    *out = b;
    *len = sizeof d + 1 + klen;
    return 0;
}

static int path_error(const nester *n, const ckpt_dcp_item *it, const char *why) {
    return ckpt_err(CKPT_E_FORMAT, n->f->path, it->fqn, CKPT_NO_OFFSET,
                    "planner_data path of \"%s\" %s (DCP's set_element fails too)", it->fqn, why);
}

/* Slot i of list l, grown with None to hold it. */
static int list_slot(nester *n, const ckpt_dcp_item *it, ckpt_value *l, const ckpt_value *key,
                     ckpt_value ***slot) {
    if (key->kind != CKPT_KIND_INT) return path_error(n, it, "indexes a list with a str");
    if (key->u.i.v < 0 || (uint64_t)key->u.i.v > n->max_index)
        return path_error(n, it, "has a list index out of range");
    size_t i = (size_t)key->u.i.v;
    while (l->u.seq.n <= i) {
        ckpt_value *none = ckpt_value_new(&n->f->arena, CKPT_KIND_NONE);
        if (!none || ckpt_value_append(&n->f->arena, l, none)) return ckpt_err_nomem();
    }
    *slot = &l->u.seq.items[i];
    return 0;
}

/* Container c's entry for key: the slot of its value, a new entry holding
 * `fresh` when there was none (or None in a list). */
static int entry(nester *n, const ckpt_dcp_item *it, ckpt_value *c, const ckpt_value *key,
                 ckpt_value *fresh, ckpt_value ***slot) {
    if (c->kind == CKPT_KIND_LIST) {
        int rc = list_slot(n, it, c, key, slot);
        if (rc == 0 && (**slot)->kind == CKPT_KIND_NONE) **slot = fresh;
        return rc;
    }
    if (c->kind != CKPT_KIND_DICT)
        return path_error(n, it, "goes through a value that is no container");
    const char *k = NULL;
    size_t len = 0;
    int rc = dict_key(n, c, key, &k, &len);
    if (rc) return rc;
    ckpt_strmap_slot *ms;
    int put = ckpt_strmap_put(&n->keys, k, len, c->u.dict.n, &ms);
    if (put < 0) return ckpt_err_nomem();
    if (put == 1) {
        ckpt_value *kv =
            key->kind == CKPT_KIND_STR
                ? ckpt_value_new_str(&n->f->arena, CKPT_KIND_STR, key->u.s.p, key->u.s.len)
                : ckpt_value_new_int(&n->f->arena, key->u.i.v);
        if (!kv || ckpt_value_dict_set(&n->f->arena, c, kv, fresh)) return ckpt_err_nomem();
    }
    *slot = &c->u.dict.vals[ms->val];
    return 0;
}

static int set_element(nester *n, const ckpt_dcp_item *it, ckpt_value *value) {
    ckpt_value *cur = n->f->root, **slot;
    for (size_t i = 1; i < it->npath; i++) {
        int is_str = it->path[i]->kind == CKPT_KIND_STR;
        ckpt_value *fresh = ckpt_value_new(&n->f->arena, is_str ? CKPT_KIND_DICT : CKPT_KIND_LIST);
        CKPT_CHECK_ALLOC(fresh);
        int rc = entry(n, it, cur, it->path[i - 1], fresh, &slot);
        if (rc) return rc;
        cur = *slot;
    }
    int rc = entry(n, it, cur, it->path[it->npath - 1], value, &slot);
    if (rc == 0) *slot = value; /* an assignment replaces an earlier value */
    return rc;
}

/* The .metadata pickle f is, read whole with pread (never through the
 * mapping: the file may shrink) into scratch memory: the parse copies
 * what it keeps. */
static int parse_meta(ckpt_file *f, ckpt_dcp_meta *meta) {
    uint8_t *p = ckpt_malloc(f->map_size ? f->map_size : 1);
    if (!p) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    int rc = ckpt_source_read(&f->source, f->map, p, f->map_size, NULL);
    if (rc == 0)
        rc = ckpt_dcp_meta_parse(meta, &f->arena, p, f->map_size, f->path, &f->opts.limits);
    ckpt_free(p);
    return rc;
}

int ckpt_dcp_read(ckpt_file *f, const char *dir) {
    ckpt_dcp_meta meta;
    int rc = parse_meta(f, &meta);
    if (rc) return rc;
    f->format = CKPT_FORMAT_DCP;
    f->dcp_dir = ckpt_arena_strdup(&f->arena, dir);
    f->root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    CKPT_CHECK_ALLOC(f->dcp_dir && f->root);
    opener o = {.f = f, .dir = f->dcp_dir};
    nester n = {.f = f, .max_index = meta.nitems};
    for (size_t i = 0; rc == 0 && i < meta.nitems; i++) {
        ckpt_dcp_item *it = &meta.items[i];
        ckpt_value *v = NULL;
        if (!it->path) { /* no planner_data entry: at the top, under its fqn */
            it->top_key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, it->fqn, strlen(it->fqn));
            if (!it->top_key) rc = ckpt_err_nomem();
            it->path = &it->top_key;
            it->npath = 1;
        }
        if (rc == 0) rc = it->is_bytes ? bytes_value(&o, it, &v) : tensor_value(&o, it, &v);
        if (rc == 0) rc = set_element(&n, it, v);
    }
    ckpt_strmap_free(&o.names);
    ckpt_strmap_free(&n.keys);
    return rc;
}

int ckpt_dcp_check_unnamed(const ckpt_file *f) {
    if (f->format != CKPT_FORMAT_DCP) return 0;
    DIR *d = opendir(f->dcp_dir);
    if (!d) return ckpt_err(CKPT_E_IO, f->dcp_dir, "", CKPT_NO_OFFSET, "cannot list the directory");
    size_t dlen = strlen(f->dcp_dir);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!ends_with(e->d_name, DATA_SUFFIX)) continue;
        int named = 0;
        for (size_t i = 0; !named && i < f->nshards; i++) {
            const char *p = f->shards[i]->path;
            named =
                !strncmp(p, f->dcp_dir, dlen) && p[dlen] == '/' && !strcmp(p + dlen + 1, e->d_name);
        }
        if (!named)
            rc = ckpt_err(CKPT_E_MISMATCH, f->dcp_dir, e->d_name, CKPT_NO_OFFSET,
                          "data file %s is not named by .metadata (left by another save, or a "
                          "rank's output the coordinator did not record)",
                          e->d_name);
    }
    closedir(d);
    return rc;
}
