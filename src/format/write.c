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

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "model/dtype.h"
#include "base/error.h"
#include "base/utf8.h"
#include "model/file.h"
#include "format/pickle.h"
#include "model/tensor.h"

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

/* ------------------------------------------------------------ the walk */

const char *ckpt_wr_dtype_ref(const ckpt_value *v) {
    /* torch.long is torch.int64: pickles name the canonical attribute, the
     * one torch's weights_only allowlist knows (str(dtype)) */
    static const char *const alias[][2] = {
        {"float", "float32"}, {"double", "float64"}, {"half", "float16"},
        {"long", "int64"},    {"int", "int32"},      {"short", "int16"},
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
    uint64_t visits, max_visits;
    uint32_t max_depth;
    size_t max_name;
    const ckpt_value **path; /* containers from the root to the current node */
    char *buf;               /* current name */
    size_t len, bufcap;
    /* > 0 while walking a dict's BUILD state, which holds no tensors */
    uint32_t in_state;
    /* first failure, and the opaque objects found (reported together) */
    int rc;
    size_t nopaque;
    char opaque[512];
} collector;

/* Records a failure unless one is recorded already; returns rc. */
static int fail_once(collector *c, int rc) {
    if (!c->rc) c->rc = rc;
    return c->rc;
}

static const char *cur_name(const collector *c) {
    return c->len ? c->buf : "(root)";
}

static int push_name(collector *c, const char *seg, size_t n, size_t *saved) {
    *saved = c->len;
    size_t need = c->len + (c->len ? 1 : 0) + n + 1;
    if (need > c->max_name)
        return fail_once(c, ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                                     "flattened name longer than %zu bytes",
                                     c->max_name));
    if (need > c->bufcap) {
        char *nb = ckpt_realloc(c->buf, need * 2);
        if (!nb)
            return fail_once(c, ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET,
                                         "out of memory"));
        c->buf = nb;
        c->bufcap = need * 2;
    }
    if (c->len) c->buf[c->len++] = '.';
    memcpy(c->buf + c->len, seg, n);
    c->len += n;
    c->buf[c->len] = '\0';
    return 0;
}


static void note_opaque(collector *c, const char *what) {
    if (c->nopaque++ >= MAX_OPAQUE_NAMED) return;
    size_t used = strlen(c->opaque);
    snprintf(c->opaque + used, sizeof c->opaque - used, "%s%s at \"%s\"",
             used ? ", " : "", what, cur_name(c));
}

/* Dict keys must be hashable data Python can rebuild: scalars, strings,
 * dtypes and tuples of those. */
static int key_ok(const ckpt_value *k, uint32_t depth) {
    switch (k->kind) {
    case CKPT_KIND_NONE: case CKPT_KIND_BOOL: case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT: case CKPT_KIND_STR: case CKPT_KIND_BYTES:
        return 1;
    case CKPT_KIND_GLOBAL_: return ckpt_wr_dtype_ref(k) != NULL;
    case CKPT_KIND_TUPLE:
        if (depth > 16) return 0;
        for (size_t i = 0; i < k->u.seq.n; i++)
            if (!key_ok(k->u.seq.items[i], depth + 1)) return 0;
        return 1;
    default: return 0;
    }
}

static int add_tensor(collector *c, const ckpt_value *v) {
    /* attributes are not flattened: such a tensor would have no name */
    if (c->in_state)
        return fail_once(c, ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                     "cannot write a tensor held in the attributes "
                                     "(BUILD state) of a dict, at \"%s\"", cur_name(c)));
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        wr_named *ni = ckpt_realloc(c->items, cap * sizeof *ni);
        if (!ni || cap > SIZE_MAX / 2 / sizeof *ni)
            return fail_once(c, ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET,
                                         "out of memory"));
        c->items = ni;
        c->cap = cap;
    }
    /* names are C strings everywhere (reader, digests, safetensors keys) */
    if (c->len && memchr(c->buf, '\0', c->len))
        return fail_once(c, ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                     "cannot write a tensor whose name contains a "
                                     "NUL byte (\"%s...\")", c->buf));
    char *name = ckpt_malloc(c->len + 1);
    if (!name)
        return fail_once(c, ckpt_err_nomem());
    memcpy(name, c->buf ? c->buf : "", c->len);
    name[c->len] = '\0';
    c->items[c->n] = (wr_named){name, v, c->n};
    c->n++;
    return 0;
}

static int walk(collector *c, const ckpt_value *v, uint32_t depth) {
    if (c->rc) return c->rc;
    if (++c->visits > c->max_visits)
        return fail_once(c, ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                                     "object graph too large (shared "
                                     "substructures repeated)"));
    if (depth > c->max_depth)
        return fail_once(c, ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                                     "containers nested deeper than %u at \"%s\"",
                                     c->max_depth, cur_name(c)));
    char tmp[32];
    size_t saved;
    switch (v->kind) {
    case CKPT_KIND_NONE: case CKPT_KIND_BOOL: case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT: case CKPT_KIND_STR: case CKPT_KIND_BYTES:
        return 0;
    case CKPT_KIND_TENSOR: return add_tensor(c, v);
    case CKPT_KIND_GLOBAL_:
        if (!ckpt_wr_dtype_ref(v)) note_opaque(c, v->u.global.qualname);
        return 0;
    case CKPT_KIND_OBJECT:
        note_opaque(c, v->u.obj.name);
        return 0;
    case CKPT_KIND_LIST: case CKPT_KIND_TUPLE: case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        break;
    default:
        note_opaque(c, "an unresolved pickle value");
        return 0;
    }
    for (uint32_t i = 0; i < depth; i++)
        if (c->path[i] == v)
            return fail_once(c, ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                         "cannot write a cyclic structure: \"%s\" "
                                         "contains itself", cur_name(c)));
    c->path[depth] = v;
    if (v->kind == CKPT_KIND_DICT) {
        for (size_t i = 0; i < v->u.dict.n; i++) {
            const ckpt_value *k = v->u.dict.keys[i];
            size_t klen;
            const char *kt = ckpt_value_key_text(k, tmp, sizeof tmp, &klen);
            if (push_name(c, kt, klen, &saved)) return c->rc;
            if (!key_ok(k, 0))
                return fail_once(c, ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                             "cannot write a dict key of kind %s at "
                                             "\"%s\"", ckpt_value_kind_name(k->kind),
                                             cur_name(c)));
            walk(c, v->u.dict.vals[i], depth + 1);
            c->len = saved;
            if (c->buf) c->buf[c->len] = '\0';
        }
        if (v->u.dict.state) { /* checked like the items, named by attribute */
            c->in_state++;
            walk(c, v->u.dict.state, depth + 1);
            c->in_state--;
        }
    } else {
        for (size_t i = 0; i < v->u.seq.n; i++) {
            int n = snprintf(tmp, sizeof tmp, "%zu", i);
            if (push_name(c, tmp, (size_t)n, &saved)) return c->rc;
            walk(c, v->u.seq.items[i], depth + 1);
            c->len = saved;
            if (c->buf) c->buf[c->len] = '\0';
        }
    }
    return c->rc;
}

void ckpt_wr_named_free(wr_named *v, size_t n) {
    for (size_t i = 0; i < n; i++) ckpt_free((void *)v[i].name);
    ckpt_free(v);
}

int ckpt_wr_collect(wr_named **out, size_t *n, const ckpt_value *root) {
    ckpt_limits lim = CKPT_LIMITS_INIT;
    collector c = {0};
    c.max_depth = lim.max_depth;
    c.max_visits = lim.max_tensors * 4 + 1024;
    c.max_name = lim.max_name_bytes;
    *out = NULL;
    *n = 0;
    c.path = ckpt_malloc(((size_t)c.max_depth + 1) * sizeof *c.path);
    if (!c.path) return ckpt_err_nomem();
    int rc = walk(&c, root, 0);
    if (!rc && c.nopaque)
        rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                      "cannot convert %zu opaque object%s: %s%s (leave %s out with "
                      "--select)", c.nopaque, c.nopaque == 1 ? "" : "s", c.opaque,
                      c.nopaque > MAX_OPAQUE_NAMED ? ", ..." : "",
                      c.nopaque == 1 ? "it" : "them");
    ckpt_free(c.path);
    ckpt_free(c.buf);
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
        if (strncmp(k, CKPT_META_PREFIX, strlen(CKPT_META_PREFIX)) == 0)
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata key \"%s\": keys starting with \"%s\" are "
                            "reserved for ckpt", k, CKPT_META_PREFIX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(o->meta_keys[j], k) == 0)
                return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                                "metadata key \"%s\" given twice", k);
    }
    return 0;
}

int ckpt_write_value_to(ckpt_atomic *a, const ckpt_value *root, ckpt_format format,
                        const ckpt_write_options *opts,
                        ckpt_write_stats *stats) {
    ckpt_write_stats local;
    if (!stats) stats = &local;
    *stats = (ckpt_write_stats){0};
    if (!a || !root)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "atomic file or root is NULL");
    int rc = ckpt_wr_check_options(opts);
    if (rc) return rc;
    if (format == CKPT_FORMAT_SAFETENSORS)
        return ckpt_write_safetensors(a, root, opts, stats);
    if (format == CKPT_FORMAT_TORCH_ZIP) return ckpt_write_torch(a, root, opts, stats);
    return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                    "can only write safetensors or torch-zip, not %s",
                    ckpt_format_name(format));
}

int ckpt_write_value(const ckpt_value *root, const char *path, ckpt_format format,
                     const ckpt_write_options *opts,
                     ckpt_write_stats *stats) {
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
