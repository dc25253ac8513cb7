/* flatten.c - names for the leaves of an object tree (see flatten.h). */
#include "model/flatten.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sort.h"
#include "model/walk.h"

/* In discovery order until sorted (stably: among equal names, the later
 * found stays later, and wins) */
typedef struct flat_entry {
    const char *name;
    const ckpt_value *value;
    size_t seq; /* the leaf's number, in the walk's order */
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
    size_t leaves;
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
    to->e[to->n++] = (flat_entry){name, node->value, fl->leaves++};
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

static int cmp_seq(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------ leaves of equal names */

/* The path of one leaf: its frames from the root's child down. */
typedef struct leaf_path {
    ckpt_walk_frame *steps;
    uint32_t n;
} leaf_path;

/* The paths of the leaves numbered want[0..nwant) (ascending, unique),
 * found by a second walk in the first one's order, once the first equal
 * names are met (find_paths): most trees have none, and no second walk. */
typedef struct paths {
    ckpt_arena *a;
    const ckpt_value *root;
    const ckpt_limits *lim;
    uint64_t max_visits;
    const char *file, *member;
    const entries *lists;      /* the tensors and the values, sorted */
    int found;                 /* find_paths ran */
    uint64_t bytes, max_bytes; /* the flattening's, which the paths take too */
    size_t *want, nwant, next, leaves;
    uint64_t compared; /* pairs of leaves of one name compared (replaced) */
    leaf_path *p;
} paths;

static int path_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    paths *ps = w->ctx;
    switch (node->value->kind) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT: return CKPT_WALK_DESCEND;
    default: break;
    }
    if (ps->next < ps->nwant && ps->want[ps->next] == ps->leaves) {
        leaf_path *lp = &ps->p[ps->next++];
        lp->n = w->depth;
        ps->bytes += (uint64_t)w->depth * sizeof *lp->steps;
        if (ps->bytes > ps->max_bytes)
            return ckpt_err(CKPT_E_LIMIT, w->file, w->member, CKPT_NO_OFFSET,
                            "the paths of %zu leaves of equal names take more than %llu bytes, "
                            "this input's budget (max_inflate_bytes, at most max_inflate_ratio "
                            "times its size)",
                            ps->next, (unsigned long long)ps->max_bytes);
        lp->steps = ckpt_arena_array(ps->a, w->depth ? w->depth : 1, sizeof *lp->steps);
        if (!lp->steps)
            return ckpt_err(CKPT_E_NOMEM, w->file, w->member, CKPT_NO_OFFSET, "out of memory");
        for (uint32_t u = 0; u < w->depth; u++) lp->steps[w->depth - 1 - u] = *ckpt_walk_up(w, u);
        if (ps->next == ps->nwant) return CKPT_WALK_STOP;
    }
    ps->leaves++;
    return CKPT_WALK_SKIP;
}

static const leaf_path *path_of(const paths *ps, size_t seq) {
    size_t *at = bsearch(&seq, ps->want, ps->nwant, sizeof seq, cmp_seq);
    return &ps->p[at - ps->want];
}

/* Whether two frames hang from their (same) parent by keys a Python dict
 * holds as one: the same index, or keys Python's == finds equal (a
 * tuple's text is its kind's name: (1,) and (2,) are two keys). Keys are
 * compared up to a fixed count (a tuple can share its items: a DAG),
 * beyond which they are two keys, a collision that verify reports. */
static int same_step(const ckpt_walk_frame *x, const ckpt_walk_frame *y) {
    if (x->role != y->role) return 0;
    if (x->role != CKPT_WALK_VALUE) return x->index == y->index;
    size_t budget = 4096;
    return ckpt_value_key_equal(x->key, y->key, &budget);
}

/* 1 when the later of two leaves of one name replaces the earlier in the
 * tree a loader builds: their paths part where one dict repeats a key
 * (or never part); 0 when they part at different keys (a collision). */
static int replaces(const leaf_path *x, const leaf_path *y) {
    for (uint32_t i = 0; i < x->n && i < y->n; i++) {
        if (!same_step(&x->steps[i], &y->steps[i])) return 0;
        if (x->steps[i].value != y->steps[i].value) return 1;
    }
    return x->n == y->n;
}

/* A leaf's path as Python subscripts: ['a']['b'], [0], [b'w'], [3]. */
static const char *path_text(ckpt_arena *a, const leaf_path *p) {
    size_t len = 0;
    char *out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (uint32_t i = 0; i < p->n; i++) {
            const ckpt_walk_frame *f = &p->steps[i];
            char tmp[32];
            size_t n = 0;
            const char *t = "", *open = "[", *close = "]";
            if (f->role == CKPT_WALK_VALUE) {
                t = ckpt_value_key_text(f->key, tmp, sizeof tmp, &n);
                if (f->key->kind == CKPT_KIND_STR) open = "['", close = "']";
                if (f->key->kind == CKPT_KIND_BYTES) open = "[b'", close = "']";
            } else {
                int k = snprintf(tmp, sizeof tmp, "%zu", f->index);
                n = k < 0 ? 0 : (size_t)k;
                t = tmp;
            }
            size_t no = strlen(open), nc = strlen(close);
            if (out) {
                memcpy(out + at, open, no);
                memcpy(out + at + no, t, n);
                memcpy(out + at + no + n, close, nc);
            }
            at += no + n + nc;
        }
        if (!out) {
            len = at;
            if (!(out = ckpt_arena_alloc_raw(a, len + 1))) return NULL;
        }
    }
    out[len] = '\0';
    return p->n ? out : "(the root)";
}

/* Gathers the numbers of the leaves that share a name with a neighbour,
 * in both sorted lists, then finds their paths. 0, or an error. */
static int find_paths(paths *ps) {
    const entries *lists = ps->lists;
    const char *file = ps->file, *member = ps->member;
    ps->found = 1;
    size_t n = 0;
    for (int l = 0; l < 2; l++)
        for (size_t i = 1; i < lists[l].n; i++)
            n += strcmp(lists[l].e[i - 1].name, lists[l].e[i].name) == 0 ? 2 : 0;
    if (!n) return 0;
    if (!(ps->want = ckpt_malloc(n * sizeof *ps->want)))
        return ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET, "out of memory");
    for (int l = 0; l < 2; l++)
        for (size_t i = 1; i < lists[l].n; i++)
            if (strcmp(lists[l].e[i - 1].name, lists[l].e[i].name) == 0) {
                ps->want[ps->nwant++] = lists[l].e[i - 1].seq;
                ps->want[ps->nwant++] = lists[l].e[i].seq;
            }
    qsort(ps->want, ps->nwant, sizeof *ps->want, cmp_seq);
    size_t u = 0;
    for (size_t i = 0; i < ps->nwant; i++)
        if (!u || ps->want[u - 1] != ps->want[i]) ps->want[u++] = ps->want[i];
    ps->nwant = u;
    if (!(ps->p = ckpt_arena_array(ps->a, u, sizeof *ps->p)))
        return ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET, "out of memory");
    ckpt_walk w;
    ckpt_walk_init(&w, ps->lim, file, member);
    w.max_visits = ps->max_visits;
    w.enter = path_enter;
    w.ctx = ps;
    return ckpt_walk_run(&w, ps->root);
}

/* ------------------------------------------------------------- output */

/* The entries from e[from] on whose name equals the previous entry's:
 * at most the values the later ones shadow. */
static size_t count_shadowed(const flat_entry *e, size_t from, size_t n) {
    size_t k = 0;
    for (size_t i = from; i < n; i++) k += strcmp(e[i - 1].name, e[i].name) == 0;
    return k;
}

/* The kept entry of e[g..w) (one name) that the leaf of entry x
 * replaces, or SIZE_MAX. Any of them can be: {'a.b': x, 'a': {'b': y},
 * 'a.b': z} keeps y and z. Each comparison counts against the walk's
 * budget (ps->max_visits): many leaves of one name that all collide
 * would be compared pairwise. */
static size_t replaced(paths *ps, const flat_entry *e, size_t g, size_t w, const flat_entry *x,
                       int *rc) {
    for (size_t j = w; j-- > g;) {
        if (++ps->compared > ps->max_visits) {
            *rc = ckpt_err(CKPT_E_LIMIT, ps->file, ps->member, CKPT_NO_OFFSET,
                           "%zu leaves named \"%s\" (and others of equal names) take more than "
                           "%llu comparisons to tell which replace each other (max_nodes)",
                           w - g + 1, x->name, (unsigned long long)ps->max_visits);
            return SIZE_MAX - 1;
        }
        if (replaces(path_of(ps, e[j].seq), path_of(ps, x->seq))) return j;
    }
    return SIZE_MAX;
}

/* Keeps the last of equal names that replace each other (replaces), both
 * of a collision, and copies them to the arena in the output form. With
 * `shadowed` (NULL on entry), the other values of replaced names are
 * copied there (an array from `a`; left NULL when there are none). NULL
 * with *rc set on an error. */
static ckpt_named_value *unique(ckpt_arena *a, paths *ps, ckpt_flat *out, flat_entry *e, size_t n,
                                size_t *out_n, ckpt_named_value **shadowed, size_t *nshadowed,
                                int *rc) {
    size_t w = 0, k = 0, g = 0; /* e[g..w): the kept entries of e[i]'s name */
    *rc = CKPT_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!w || strcmp(e[w - 1].name, e[i].name) != 0) {
            g = w;
            e[w++] = e[i];
            continue;
        }
        int frc = ps->found ? 0 : find_paths(ps);
        size_t j = frc ? SIZE_MAX - 1 : replaced(ps, e, g, w, &e[i], &frc);
        if (frc) {
            *rc = frc;
            return NULL;
        }
        if (j == SIZE_MAX) {
            if (!out->ncollisions++) {
                out->collision_name = e[i].name;
                out->collision_paths[0] = path_text(a, path_of(ps, e[w - 1].seq));
                out->collision_paths[1] = path_text(a, path_of(ps, e[i].seq));
                if (!out->collision_paths[0] || !out->collision_paths[1]) return NULL;
            }
            e[w++] = e[i];
        } else {
            if (shadowed && e[j].value != e[i].value) {
                if (!*shadowed &&
                    !(*shadowed = ckpt_arena_array(a, count_shadowed(e, i, n), sizeof **shadowed)))
                    return NULL;
                (*shadowed)[k++] = (ckpt_named_value){e[j].name, e[j].value};
            }
            e[j] = e[i];
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
    /* names come in the tree's order, most often a few sorted runs
     * (ckpt_sort), stably: among equal names the later found stays later */
    if (!rc && (ckpt_sort(fl.tensors.e, fl.tensors.n, sizeof(flat_entry), cmp_entry) ||
                ckpt_sort(fl.values.e, fl.values.n, sizeof(flat_entry), cmp_entry)))
        rc = ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET, "out of memory to sort %zu names",
                      fl.tensors.n + fl.values.n);
    entries lists[2] = {fl.tensors, fl.values};
    paths ps = {.a = a,
                .root = root,
                .lim = lim,
                .max_visits = max_visits,
                .file = file,
                .member = member,
                .lists = lists,
                .bytes = fl.bytes,
                .max_bytes = max_bytes};
    if (!rc) {
        int urc = CKPT_E_NOMEM;
        out->tensors = unique(a, &ps, out, fl.tensors.e, fl.tensors.n, &out->ntensors,
                              &out->shadowed, &out->nshadowed, &urc);
        out->values = out->tensors ? unique(a, &ps, out, fl.values.e, fl.values.n, &out->nvalues,
                                            NULL, NULL, &urc)
                                   : NULL;
        if (!out->tensors || !out->values) {
            *out = (ckpt_flat){0};
            rc = urc != CKPT_E_NOMEM
                     ? urc
                     : ckpt_err(CKPT_E_NOMEM, file, member, CKPT_NO_OFFSET,
                                "out of memory to sort %zu names", fl.tensors.n + fl.values.n);
        }
    }
    ckpt_free(ps.want);
    ckpt_free(fl.tensors.e);
    ckpt_free(fl.values.e);
    return rc;
}
