/* flatten.c - names for the leaves of an object tree (see flatten.h). */
#include "model/flatten.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct flat_entry {
    const char *name;
    const ckpt_value *value;
    size_t seq; /* discovery order: later wins among equal names */
} flat_entry;

typedef struct flattener {
    ckpt_arena *a;
    const ckpt_limits *lim;
    const char *file, *member;
    flat_entry *tensors, *values;
    size_t nt, ct, nv, cv, seq;
    uint64_t visits, max_visits;
    char *buf; /* current name prefix */
    size_t len, cap;
} flattener;

static int name_push(flattener *fl, const char *seg, size_t n, size_t *saved) {
    *saved = fl->len;
    size_t need = fl->len + (fl->len ? 1 : 0) + n + 1;
    if (n >= fl->lim->max_name_bytes || need > fl->lim->max_name_bytes)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "flattened name longer than %llu bytes",
                        (unsigned long long)fl->lim->max_name_bytes);
    if (need > fl->cap) {
        size_t ncap = need * 2;
        char *nb = ckpt_realloc(fl->buf, ncap);
        if (!nb) return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
        fl->buf = nb;
        fl->cap = ncap;
    }
    if (fl->len) fl->buf[fl->len++] = '.';
    memcpy(fl->buf + fl->len, seg, n);
    fl->len += n;
    fl->buf[fl->len] = '\0';
    return 0;
}

static int add_entry(flattener *fl, int tensor, const ckpt_value *v) {
    flat_entry **arr = tensor ? &fl->tensors : &fl->values;
    size_t *n = tensor ? &fl->nt : &fl->nv, *cap = tensor ? &fl->ct : &fl->cv;
    if (fl->nt + fl->nv >= fl->lim->max_tensors)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "more than %llu tensors and values",
                        (unsigned long long)fl->lim->max_tensors);
    if (ckpt_arena_grow(fl->a, (void **)arr, cap, *n + 1, sizeof(flat_entry)))
        return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
    const char *name = ckpt_arena_strndup(fl->a, fl->buf ? fl->buf : "", fl->len);
    if (!name) return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
    (*arr)[(*n)++] = (flat_entry){name, v, fl->seq++};
    return 0;
}

static int walk(flattener *fl, const ckpt_value *v, uint32_t depth) {
    if (++fl->visits > fl->max_visits)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "object graph too large (shared substructures repeated)");
    if (depth > fl->lim->max_depth)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "containers nested deeper than %u (or cyclic)", fl->lim->max_depth);
    char tmp[32];
    size_t saved;
    int rc;
    switch (v->kind) {
    case CKPT_KIND_TENSOR: return add_entry(fl, 1, v);
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        for (size_t i = 0; i < v->u.seq.n; i++) {
            int n = snprintf(tmp, sizeof tmp, "%zu", i);
            if ((rc = name_push(fl, tmp, (size_t)n, &saved))) return rc;
            if ((rc = walk(fl, v->u.seq.items[i], depth + 1))) return rc;
            fl->len = saved;
        }
        return 0;
    case CKPT_KIND_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            size_t klen;
            const char *k = ckpt_value_key_text(v->u.dict.keys[i], tmp, sizeof tmp, &klen);
            if ((rc = name_push(fl, k, klen, &saved))) return rc;
            if ((rc = walk(fl, v->u.dict.vals[i], depth + 1))) return rc;
            fl->len = saved;
        }
        return 0;
    case CKPT_KIND_MARK_:
        return ckpt_err(CKPT_E_FORMAT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "pickle left a MARK in the result");
    default: return add_entry(fl, 0, v); /* leaves, objects, global refs */
    }
}

static int cmp_entry(const void *a, const void *b) {
    const flat_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorts, keeps the last of equal names and converts to the output form
 * (in place: a ckpt_named_value is no larger than a flat_entry). */
static ckpt_named_value *sort_unique(flat_entry *e, size_t n, size_t *out_n) {
    if (n) qsort(e, n, sizeof *e, cmp_entry);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(e[w - 1].name, e[i].name) == 0)
            e[w - 1] = e[i];
        else
            e[w++] = e[i];
    }
    ckpt_named_value *o = (ckpt_named_value *)(void *)e;
    for (size_t i = 0; i < w; i++) o[i] = (ckpt_named_value){e[i].name, e[i].value};
    *out_n = w;
    return o;
}

int ckpt_flatten(ckpt_flat *out, ckpt_arena *a, const ckpt_value *root,
                 const ckpt_limits *lim, uint64_t max_visits, const char *file,
                 const char *member) {
    *out = (ckpt_flat){0};
    flattener fl = {0};
    fl.a = a;
    fl.lim = lim;
    fl.file = file;
    fl.member = member;
    fl.max_visits = max_visits;
    int rc = walk(&fl, root, 0);
    ckpt_free(fl.buf);
    if (rc) return rc;
    out->tensors = sort_unique(fl.tensors, fl.nt, &out->ntensors);
    out->values = sort_unique(fl.values, fl.nv, &out->nvalues);
    return 0;
}
