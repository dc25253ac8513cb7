/* flatten.c - names for the leaves of an object tree (see flatten.h). */
#include "model/flatten.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/sort.h"
#include "model/walk.h"

/* In discovery order until sorted (stably: among equal names, the later
 * found stays later, and wins) */
typedef struct flat_entry {
    const char *name;
    const ckpt_value *value;
} flat_entry;

/* Entries found so far, in memory of their own (ckpt_malloc) until they
 * are sorted: only the sorted, unique names go to the arena. */
typedef struct entries {
    flat_entry *e;
    size_t n, cap;
} entries;

typedef struct flattener {
    ckpt_arena *a;
    const ckpt_limits *lim;
    const char *file, *member;
    uint64_t bytes, max_bytes;
    entries tensors, values;
} flattener;

/* What one entry is charged against max_bytes: an entry, its output
 * (ckpt_named_value) and its name, the name rounded up to the arena's
 * 16-byte alignment. */
static uint64_t entry_bytes(size_t name_len) {
    return sizeof(flat_entry) + sizeof(ckpt_named_value) +
           (((uint64_t)name_len + 16) & ~(uint64_t)15);
}

static int nomem(const flattener *fl) {
    return ckpt_err(CKPT_E_NOMEM, fl->file, fl->member, CKPT_NO_OFFSET, "out of memory");
}

static int add_entry(flattener *fl, int tensor, const ckpt_walk *w, const ckpt_walk_frame *node) {
    size_t len = node->name_len;
    size_t found = fl->tensors.n + fl->values.n;
    if (found >= fl->lim->max_tensors)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "more than %llu tensors and values (max_tensors)",
                        (unsigned long long)fl->lim->max_tensors);
    fl->bytes += entry_bytes(len);
    if (fl->bytes > fl->max_bytes)
        return ckpt_err(CKPT_E_LIMIT, fl->file, fl->member, CKPT_NO_OFFSET,
                        "the flattened names of %zu tensors and values already take more "
                        "than %llu bytes, this input's budget (max_inflate_bytes, at most "
                        "max_inflate_ratio times its size): shared containers expand "
                        "into more names than the input holds",
                        found + 1, (unsigned long long)fl->max_bytes);
    entries *to = tensor ? &fl->tensors : &fl->values;
    if (to->n == to->cap) { /* doubling: to->cap < max_tensors, checked above */
        size_t cap = to->cap ? 2 * to->cap : 64;
        if (cap > SIZE_MAX / sizeof *to->e) return nomem(fl);
        flat_entry *e = ckpt_realloc(to->e, cap * sizeof *e);
        if (!e) return nomem(fl);
        to->e = e;
        to->cap = cap;
    }
    /* a top-level string key is its own name: its text is shared, not
     * copied again (NUL-terminated, in the same file's arena). The name
     * is the key's text when it is all of the node's segment, which is
     * the key's text (a key is a dict value's, whose segment is it) */
    const ckpt_value *k = node->key;
    const char *name = k && k->kind == CKPT_KIND_STR && k->u.s.len == len && node->seg_len == len
                           ? k->u.s.p
                           : ckpt_arena_strndup(fl->a, w->name, len);
    if (!name) return nomem(fl);
    to->e[to->n++] = (flat_entry){name, node->value};
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
    return strcmp(((const flat_entry *)a)->name, ((const flat_entry *)b)->name);
}

/* The entries from e[from] on whose name equals the previous entry's and
 * whose value does not: the values the later ones shadow. */
static size_t count_shadowed(const flat_entry *e, size_t from, size_t n) {
    size_t k = 0;
    for (size_t i = from; i < n; i++)
        k += strcmp(e[i - 1].name, e[i].name) == 0 && e[i - 1].value != e[i].value;
    return k;
}

/* Sorts, keeps the last of equal names and copies them to the arena in
 * the output form. Names come in the tree's order, most often a few
 * sorted runs (ckpt_sort). With `shadowed` (NULL on entry), the other
 * values of equal names are copied there (an array from `a`; left NULL
 * when there are none). NULL when out of memory. */
static ckpt_named_value *sort_unique(ckpt_arena *a, flat_entry *e, size_t n, size_t *out_n,
                                     ckpt_named_value **shadowed, size_t *nshadowed) {
    if (ckpt_sort(e, n, sizeof *e, cmp_entry)) return NULL;
    size_t w = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && strcmp(e[w - 1].name, e[i].name) == 0) {
            /* e[w - 1] is e[i - 1], which is still in place: the array
             * is sized at the first value shadowed, from there on */
            if (shadowed && e[w - 1].value != e[i].value) {
                if (!*shadowed &&
                    !(*shadowed = ckpt_arena_array(a, count_shadowed(e, i, n), sizeof **shadowed)))
                    return NULL;
                (*shadowed)[k++] = (ckpt_named_value){e[w - 1].name, e[w - 1].value};
            }
            e[w - 1] = e[i];
        } else {
            e[w++] = e[i];
        }
    }
    if (nshadowed) *nshadowed = k;
    /* w <= n entries of flat_entry's size were allocated: no overflow */
    ckpt_named_value *o = ckpt_arena_alloc_raw(a, (w ? w : 1) * sizeof *o);
    if (!o) return NULL;
    for (size_t i = 0; i < w; i++) o[i] = (ckpt_named_value){e[i].name, e[i].value};
    *out_n = w;
    return o;
}

int ckpt_flatten(ckpt_flat *out, ckpt_arena *a, const ckpt_value *root, const ckpt_limits *lim,
                 uint64_t max_visits, uint64_t max_bytes, const char *file, const char *member) {
    *out = (ckpt_flat){0};
    flattener fl = {.a = a, .lim = lim, .file = file, .member = member, .max_bytes = max_bytes};
    ckpt_walk w;
    ckpt_walk_init(&w, lim, file, member);
    w.max_visits = max_visits;
    w.names = 1;
    w.enter = enter;
    w.ctx = &fl;
    /* a DAG of shared containers expands into a tree: every entry is
     * charged against max_bytes before it is made, so an expansion is
     * refused at the same entry as by a walk that only counted */
    int rc = ckpt_walk_run(&w, root);
    if (!rc) {
        out->tensors = sort_unique(a, fl.tensors.e, fl.tensors.n, &out->ntensors, &out->shadowed,
                                   &out->nshadowed);
        out->values = sort_unique(a, fl.values.e, fl.values.n, &out->nvalues, NULL, NULL);
        if (!out->tensors || !out->values) {
            *out = (ckpt_flat){0};
            rc = ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET,
                          "out of memory to sort %zu names", fl.tensors.n + fl.values.n);
        }
    }
    ckpt_free(fl.tensors.e);
    ckpt_free(fl.values.e);
    return rc;
}
