/* write.c - what both writers share: option checks, byte buffers, the walk
 * that names tensors and refuses what cannot be written, and the entry
 * points that
 * dispatch to a format through the atomic commit. */
#include "format/write.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/dtype.h"
#include "base/error.h"
#include "base/utf8.h"
#include "model/file.h"
#include "format/pickle.h"
#include "model/tensor.h"
#include "model/walk.h"

/* ------------------------------------------------------------ tensor bytes */

const ckpt_storage *ckpt_wr_root_storage(const ckpt_tensor *t, uint64_t *offset) {
    const ckpt_storage *st = t->storage;
    *offset = t->storage_offset;
    unsigned ssz = ckpt_dtype_size(st->dtype), tsz = ckpt_dtype_size(t->dtype);
    /* legacy views share their root's dtype; anything else stays as is */
    if (st->base && ssz && ssz == tsz) {
        *offset += st->base_elem_offset;
        return st->base;
    }
    return st;
}

int ckpt_wr_source_unverified(const ckpt_ptrmap *seen, const ckpt_storage *root) {
    uint64_t done;
    return (root->has_crc32 || root->has_xxh3) && !ckpt_ptrmap_get(seen, root, &done);
}

int ckpt_wr_verify_source(ckpt_ptrmap *seen, const ckpt_storage *root, int whole, uint32_t crc,
                          uint64_t xxh) {
    if (!ckpt_wr_source_unverified(seen, root)) return 0;
    int rc = whole ? ckpt_storage_check(root, crc, xxh) : ckpt_storage_verify(root);
    return rc ? rc : ckpt_ptrmap_put(seen, root, 1);
}

/* ------------------------------------------------------------ the walk */

const char *ckpt_wr_dtype_ref(const ckpt_value *v) {
    /* torch.long is torch.int64: pickles name the canonical attribute, the
     * one torch's weights_only allowlist knows (str(dtype)) */
    static const char *const alias[][2] = {
        {"float", "float32"},   {"double", "float64"},   {"half", "float16"},
        {"long", "int64"},      {"int", "int32"},        {"short", "int16"},
        {"chalf", "complex32"}, {"cfloat", "complex64"}, {"cdouble", "complex128"}};
    if (v->kind != CKPT_KIND_GLOBAL_ || strcmp(v->u.global.module, "torch") != 0 ||
        ckpt_dtype_from_torch_name(v->u.global.name) == CKPT_DT_UNKNOWN)
        return NULL;
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (strcmp(v->u.global.name, alias[i][0]) == 0) return alias[i][1];
    return v->u.global.name;
}

#define MAX_OPAQUE_NAMED 8

typedef struct collector {
    wr_named *items;
    size_t n, cap;
    /* > 0 while walking a dict's BUILD state, which holds no tensors */
    uint32_t in_state;
    /* the opaque objects found (reported together) */
    size_t nopaque;
    char opaque[512];
} collector;

static const char *cur_name(const ckpt_walk *w) { return w->name[0] ? w->name : "(root)"; }

static void note_opaque(collector *c, const ckpt_walk *w, const char *what) {
    if (c->nopaque++ >= MAX_OPAQUE_NAMED) return;
    size_t used = strlen(c->opaque);
    snprintf(c->opaque + used, sizeof c->opaque - used, "%s%s at \"%s\"", used ? ", " : "", what,
             cur_name(w));
}

/* Dict keys must be hashable data Python can rebuild: scalars, strings,
 * dtypes and tuples of those, nested 16 deep at most. */
static int key_scalar(const ckpt_value *k) {
    switch (k->kind) {
    case CKPT_KIND_NONE:
    case CKPT_KIND_BOOL:
    case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT:
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: return 1;
    case CKPT_KIND_GLOBAL_: return ckpt_wr_dtype_ref(k) != NULL;
    default: return 0;
    }
}

static int key_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    const ckpt_value *k = node->value;
    if (key_scalar(k)) return CKPT_WALK_SKIP;
    if (k->kind == CKPT_KIND_TUPLE && w->depth <= 16) return CKPT_WALK_DESCEND;
    *(int *)w->ctx = 0;
    return CKPT_WALK_STOP;
}

static int key_ok(const ckpt_value *k) {
    if (k->kind != CKPT_KIND_TUPLE) return key_scalar(k);
    int ok = 1;
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "", "");
    w.max_depth = 17;
    w.enter = key_enter;
    w.ctx = &ok;
    return ckpt_walk_run(&w, k) == 0 && ok;
}

static int add_tensor(collector *c, const ckpt_walk *w, const ckpt_value *v) {
    const ckpt_walk_frame *node = ckpt_walk_up(w, 0);
    size_t len = node->name_len;
    /* attributes are not flattened: such a tensor would have no name */
    if (c->in_state || node->role == CKPT_WALK_STATE)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "cannot write a tensor held in the attributes "
                        "(BUILD state) of a dict, at \"%s\"",
                        cur_name(w));
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        wr_named *ni = ckpt_realloc(c->items, cap * sizeof *ni);
        if (!ni || cap > SIZE_MAX / 2 / sizeof *ni) return ckpt_err_nomem();
        c->items = ni;
        c->cap = cap;
    }
    /* names are C strings everywhere (reader, digests, safetensors keys) */
    if (len && memchr(w->name, '\0', len))
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "cannot write a tensor whose name contains a "
                        "NUL byte (\"%s...\")",
                        w->name);
    char *name = ckpt_malloc(len + 1);
    if (!name) return ckpt_err_nomem();
    memcpy(name, w->name, len);
    name[len] = '\0';
    c->items[c->n] = (wr_named){name, v, c->n};
    c->n++;
    return 0;
}

static int collect_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    collector *c = w->ctx;
    const ckpt_value *v = node->value;
    if (node->role == CKPT_WALK_VALUE && !key_ok(node->key))
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "cannot write a dict key of kind %s at \"%s\"",
                        ckpt_value_kind_name(node->key->kind), cur_name(w));
    switch (v->kind) {
    case CKPT_KIND_NONE:
    case CKPT_KIND_BOOL:
    case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT:
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: return CKPT_WALK_SKIP;
    case CKPT_KIND_TENSOR: {
        int rc = add_tensor(c, w, v);
        return rc ? rc : CKPT_WALK_SKIP;
    }
    case CKPT_KIND_GLOBAL_:
        if (!ckpt_wr_dtype_ref(v)) note_opaque(c, w, v->u.global.qualname);
        return CKPT_WALK_SKIP;
    case CKPT_KIND_OBJECT: note_opaque(c, w, v->u.obj.name); return CKPT_WALK_SKIP;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        /* a dict's attributes are checked like its items, named by
         * attribute */
        if (node->role == CKPT_WALK_STATE) c->in_state++;
        return CKPT_WALK_DESCEND;
    default: note_opaque(c, w, "an unresolved pickle value"); return CKPT_WALK_SKIP;
    }
}

static int collect_leave(ckpt_walk *w, ckpt_walk_frame *node) {
    collector *c = w->ctx;
    if (node->role == CKPT_WALK_STATE) c->in_state--;
    return 0;
}

void ckpt_wr_named_free(wr_named *v, size_t n) {
    for (size_t i = 0; i < n; i++) ckpt_free((void *)v[i].name);
    ckpt_free(v);
}

int ckpt_wr_collect(wr_named **out, size_t *n, const ckpt_value *root) {
    collector c = {0};
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "", "");
    w.names = 1;
    w.follow = CKPT_WALK_DICT_STATE;
    w.enter = collect_enter;
    w.leave = collect_leave;
    w.ctx = &c;
    *out = NULL;
    *n = 0;
    int rc = ckpt_walk_run(&w, root);
    if (!rc && c.nopaque)
        rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                      "cannot convert %zu opaque object%s: %s%s (leave %s out with "
                      "--select)",
                      c.nopaque, c.nopaque == 1 ? "" : "s", c.opaque,
                      c.nopaque > MAX_OPAQUE_NAMED ? ", ..." : "", c.nopaque == 1 ? "it" : "them");
    if (rc) {
        ckpt_wr_named_free(c.items, c.n);
        return rc;
    }
    *out = c.items;
    *n = c.n;
    return 0;
}

static int by_name_seq(const void *a, const void *b) {
    const wr_named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

size_t ckpt_wr_named_unique(wr_named *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, by_name_seq);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(v[w - 1].name, v[i].name) == 0) {
            ckpt_free((void *)v[w - 1].name);
            v[w - 1] = v[i];
        } else {
            v[w++] = v[i];
        }
    }
    return w;
}

/* ------------------------------------------------------------ output */

/* ------------------------------------------------------------ entry points */

int ckpt_wr_meta_saved_topic(const char *key) {
    static const struct {
        const char *key;
        ckpt_meta_topic topic;
    } saved[] = {{CKPT_META_SAVED_VERSIONS, CKPT_META_VERSIONS},
                 {CKPT_META_SAVED_MODEL, CKPT_META_ARCHITECTURE},
                 {CKPT_META_SAVED_DTYPE, CKPT_META_DTYPE},
                 {CKPT_META_SAVED_DEVICE, CKPT_META_OTHER}};
    for (size_t i = 0; i < sizeof saved / sizeof *saved; i++)
        if (strcmp(key, saved[i].key) == 0) return (int)saved[i].topic;
    return -1;
}

int ckpt_wr_meta_reserved(const char *key) {
    return strncmp(key, CKPT_META_PREFIX, strlen(CKPT_META_PREFIX)) == 0 &&
           strcmp(key, CKPT_META_JSON) != 0 && strcmp(key, CKPT_META_OPTIMIZERS) != 0 &&
           ckpt_wr_meta_saved_topic(key) < 0;
}

void ckpt_wr_progress(const ckpt_write_options *o, uint64_t done, uint64_t total) {
    if (o && o->progress) o->progress(o->progress_ctx, done, total);
}

int ckpt_wr_check_options(const ckpt_write_options *o) {
    CKPT_CHECK_OPTIONS(o, CKPT_WRITE_OPTIONS_VERSION);
    if (!o || o->nmeta == 0) return 0;
    if (!o->meta_keys || !o->meta_values)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "metadata keys or values are NULL");
    for (size_t i = 0; i < o->nmeta; i++) {
        const char *k = o->meta_keys[i], *v = o->meta_values[i];
        if (!k || !v || !k[0])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata entry %zu: expected a non-empty key and a value", i);
        if (!ckpt_utf8_check(k, strlen(k), 0) || !ckpt_utf8_check(v, strlen(v), 0))
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata entry %zu is not valid UTF-8", i);
        if (ckpt_wr_meta_reserved(k))
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata key \"%s\": keys starting with \"%s\" are "
                            "reserved for ckpt",
                            k, CKPT_META_PREFIX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(o->meta_keys[j], k) == 0)
                return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                                "metadata key \"%s\" given twice", k);
    }
    return 0;
}

ckpt_format ckpt_wr_format_for_path(const char *path) {
    static const struct {
        const char *ext;
        ckpt_format format;
    } exts[] = {{".safetensors", CKPT_FORMAT_SAFETENSORS}, {".pt", CKPT_FORMAT_TORCH_ZIP},
                {".pth", CKPT_FORMAT_TORCH_ZIP},           {".bin", CKPT_FORMAT_TORCH_ZIP},
                {".ckpt", CKPT_FORMAT_TORCH_ZIP},          {".dcp", CKPT_FORMAT_DCP}};
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out.dcp/" names a directory */
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t e = strlen(exts[i].ext);
        if (n > e && strncasecmp(path + n - e, exts[i].ext, e) == 0 &&
            (exts[i].format == CKPT_FORMAT_DCP || path[n] == '\0'))
            return exts[i].format;
    }
    return (ckpt_format)0;
}

int ckpt_write_value_to(ckpt_atomic *a, const ckpt_value *root, ckpt_format format,
                        const ckpt_write_options *opts, ckpt_write_stats *stats) {
    ckpt_write_stats local;
    if (!stats) stats = &local;
    *stats = (ckpt_write_stats){0};
    if (!a || !root)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "atomic file or root is NULL");
    int rc = ckpt_wr_check_options(opts);
    if (rc) return rc;
    if (format == CKPT_FORMAT_SAFETENSORS) return ckpt_write_safetensors(a, root, opts, stats);
    if (format == CKPT_FORMAT_TORCH_ZIP) return ckpt_write_torch(a, root, opts, stats);
    return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                    "can only write safetensors or torch-zip, not %s", ckpt_format_name(format));
}

int ckpt_write_value(const ckpt_value *root, const char *path, ckpt_format format,
                     const ckpt_write_options *opts, ckpt_write_stats *stats) {
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, path);
    if (rc) return rc;
    rc = ckpt_write_value_to(&a, root, format, opts, stats);
    if (rc) {
        ckpt_atomic_abort(&a);
        return rc;
    }
    return ckpt_atomic_commit(&a, opts ? opts->backup : 0);
}

int ckpt_tree_write(const ckpt_value *root, const char *path, ckpt_format format,
                    const ckpt_write_options *opts) {
    if (!root || !path)
        return ckpt_err(CKPT_E_INVALID_ARG, path, "", CKPT_NO_OFFSET, "root or path is NULL");
    return ckpt_write_value(root, path, format, opts, NULL);
}
