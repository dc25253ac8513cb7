/* flatten.c - names for the leaves of an object tree (see flatten.h). */
#include "model/flatten.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/walk.h"

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
} flattener;

static int add_entry(flattener *fl, int tensor, const ckpt_walk *w, const ckpt_walk_frame *node) {
    flat_entry **arr = tensor ? &fl->tensors : &fl->values;
    size_t *n = tensor ? &fl->nt : &fl->nv, *cap = tensor ? &fl->ct : &fl->cv;
    if (fl->nt + fl->nv >= fl->lim->max_tensors)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "more than %llu tensors and values",
                        (unsigned long long)fl->lim->max_tensors);
    /* on the heap, not the arena: an arena keeps every outgrown copy, and
     * a state dict of a million tensors would hold them all */
    if (*n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 64;
        flat_entry *grown =
            ncap < SIZE_MAX / sizeof **arr ? ckpt_realloc(*arr, ncap * sizeof **arr) : NULL;
        if (!grown)
            return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
        *arr = grown;
        *cap = ncap;
    }
    /* a top-level string key is its own name: its text is shared, not
     * copied again (NUL-terminated, in the same file's arena) */
    size_t len = node->name_len;
    const ckpt_value *k = node->key;
    const char *name =
        k && k->kind == CKPT_KIND_STR && k->u.s.len == len && memcmp(k->u.s.p, w->name, len) == 0
            ? k->u.s.p
            : ckpt_arena_strndup(fl->a, w->name, len);
    if (!name) return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
    (*arr)[(*n)++] = (flat_entry){name, node->value, fl->seq++};
    return 0;
}

static int enter(ckpt_walk *w, ckpt_walk_frame *node) {
    flattener *fl = w->ctx;
    const ckpt_value *v = node->value;
    int rc;
    switch (v->kind) {
    case CKPT_KIND_TENSOR: rc = add_entry(fl, 1, w, node); break;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT: return CKPT_WALK_DESCEND;
    case CKPT_KIND_MARK_:
        return ckpt_err(CKPT_E_FORMAT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "pickle left a MARK in the result");
    default: rc = add_entry(fl, 0, w, node); break; /* leaves, objects, global refs */
    }
    return rc ? rc : CKPT_WALK_SKIP;
}

static int cmp_entry(const void *a, const void *b) {
    const flat_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorts e (heap, freed here), keeps the last of equal names and returns
 * them in the output form, in the arena (NULL: out of memory). */
static ckpt_named_value *sort_unique(ckpt_arena *a, flat_entry *e, size_t n, size_t *out_n) {
    if (n) qsort(e, n, sizeof *e, cmp_entry);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(e[w - 1].name, e[i].name) == 0)
            e[w - 1] = e[i];
        else
            e[w++] = e[i];
    }
    ckpt_named_value *o = ckpt_arena_array(a, w ? w : 1, sizeof *o);
    for (size_t i = 0; o && i < w; i++) o[i] = (ckpt_named_value){e[i].name, e[i].value};
    ckpt_free(e);
    *out_n = w;
    return o;
}

int ckpt_flatten(ckpt_flat *out, ckpt_arena *a, const ckpt_value *root, const ckpt_limits *lim,
                 uint64_t max_visits, const char *file, const char *member) {
    *out = (ckpt_flat){0};
    flattener fl = {.a = a, .lim = lim, .file = file, .member = member};
    ckpt_walk w;
    ckpt_walk_init(&w, lim, file, member);
    w.max_visits = max_visits;
    w.names = 1;
    w.enter = enter;
    w.ctx = &fl;
    int rc = ckpt_walk_run(&w, root);
    if (rc) {
        ckpt_free(fl.tensors);
        ckpt_free(fl.values);
        return rc;
    }
    out->tensors = sort_unique(a, fl.tensors, fl.nt, &out->ntensors);
    out->values = sort_unique(a, fl.values, fl.nv, &out->nvalues);
    if (!out->tensors || !out->values)
        return ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET, "out of memory");
    return 0;
}
