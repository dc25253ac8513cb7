/* match.c - ckpt_match: would a checkpoint load into a model expecting a
 * given set of keys, and which key rewrite would make it (see ckpt.h).
 *
 * Pairing is by exact full name through the manifests' hash indexes, so
 * the cost is O(keys); prefix inference (keys.c) runs only when names are
 * left unmatched on both sides. */
#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xxh.h"
#include "keys/keys.h"
#include "model/tensor.h"

#define NLISTS 8
#define MAX_CANDIDATES 8

struct ckpt_match_result {
    ckpt_arena arena;
    int complete;
    uint64_t matched;
    ckpt_match_item *lists[NLISTS];
    size_t counts[NLISTS], caps[NLISTS];
    int has_rewrite;
    ckpt_rewrite rewrite;
    ckpt_rewrite candidates[MAX_CANDIDATES];
    size_t ncandidates;
    const char *warning;
    const char *tie_note;   /* ckpt_match_tie_note */
    const char *rw_note;    /* ckpt_match_rewrite_note */
    const char **rewritten; /* per checkpoint entry, with has_rewrite */
    const char **ignored;   /* top-level entries the rewrite leaves out */
    size_t nignored;        /* when it selects a subtree, sorted */
};

/* Working state of one ckpt_match call. */
typedef struct matcher {
    ckpt_match_result *r;
    const ckpt_manifest *c, *e;
    const ckpt_match_options *opts;
    size_t *c2e; /* final pairing: checkpoint entry -> expected entry */
    size_t *e2c;
    const ckpt_rule *rule; /* the rewrite the pairing follows (names in
                              r->rewritten), or NULL */
} matcher;

static int globbed(const char *const *globs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (fnmatch(globs[i], name, 0) == 0) return 1;
    return 0;
}

static int same_shape(const ckpt_manifest_entry *a, const ckpt_manifest_entry *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0;
}

static int allowed_missing(const matcher *m, size_t j) {
    return globbed(m->opts->allow_missing, m->opts->nallow_missing, m->e->entries[j].name);
}

static int allowed_unexpected(const matcher *m, size_t i) {
    const ckpt_match_options *o = m->opts;
    return globbed(o->allow_unexpected, o->nallow_unexpected, m->c->entries[i].name) ||
           (m->rule && globbed(o->allow_unexpected, o->nallow_unexpected, m->r->rewritten[i]));
}

/* Fills e2c from c2e. */
static void invert(const matcher *m, const size_t *c2e, size_t *e2c) {
    for (size_t j = 0; j < m->e->n; j++) e2c[j] = CKPT_KEYS_NONE;
    for (size_t i = 0; i < m->c->n; i++)
        if (c2e[i] != CKPT_KEYS_NONE) e2c[c2e[i]] = i;
}

/* A key the pairing's rewrite leaves out: it selects a subtree, and every
 * key it pairs with nothing lies in another top-level entry (keys.c). */
static int left_out(const matcher *m, const size_t *c2e, size_t i) {
    return m->rule && m->rule->select && c2e[i] == CKPT_KEYS_NONE;
}

/* ------------------------------------------------------------ tied weights */

/* 1 when checkpoint entry ci loads into expected entry ej. */
static int loads(const matcher *m, size_t ci, size_t ej) {
    const ckpt_manifest_entry *a = &m->c->entries[ci], *b = &m->e->entries[ej];
    return strcmp(a->dtype, b->dtype) == 0 && same_shape(a, b);
}

typedef struct storage_index {
    const ckpt_manifest *m;
    size_t *ids; /* entries, sorted by (storage id, storage offset, index) */
    size_t n;
} storage_index;

static int storage_before(const ckpt_manifest *m, size_t x, size_t y) {
    const ckpt_tensor *a = m->entries[x].tensor, *b = m->entries[y].tensor;
    uint64_t sa = ckpt_tensor_storage_id(a), sb = ckpt_tensor_storage_id(b);
    if (sa != sb) return sa < sb;
    uint64_t oa = ckpt_tensor_storage_offset(a), ob = ckpt_tensor_storage_offset(b);
    if (oa != ob) return oa < ob;
    return x < y;
}

/* qsort has no context argument and a file-scope one is not thread-safe:
 * a merge sort with the manifest passed along. */
static void merge_sort(const ckpt_manifest *m, size_t *v, size_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2, i = 0, j = h, k = 0;
    merge_sort(m, v, tmp, h);
    merge_sort(m, v + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = storage_before(m, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

/* The ties of one side: its storages (manifests of files) and the groups
 * the manifest records (ckpt_manifest_tie), with, per group, the
 * smallest-named entry that can fill the others (ok[y]). */
typedef struct tie_index {
    storage_index s;
    size_t *best; /* tie root -> entry, or CKPT_KEYS_NONE; NULL: no groups */
} tie_index;

static void tie_index_free(tie_index *t) {
    ckpt_free(t->s.ids);
    ckpt_free(t->best);
    t->s.ids = t->best = NULL;
}

static int tie_index_build(tie_index *t, const ckpt_manifest *m, const unsigned char *ok) {
    memset(t, 0, sizeof *t);
    t->s.m = m;
    if (!m->n) return 0;
    if (m->file) {
        t->s.ids = ckpt_malloc(m->n * sizeof *t->s.ids);
        size_t *tmp = ckpt_malloc(m->n * sizeof *tmp);
        if (!t->s.ids || !tmp) {
            ckpt_free(tmp);
            tie_index_free(t);
            return ckpt_err_nomem();
        }
        for (size_t i = 0; i < m->n; i++) t->s.ids[t->s.n++] = i;
        merge_sort(m, t->s.ids, tmp, t->s.n);
        ckpt_free(tmp);
    }
    if (m->ntie) {
        if (!(t->best = ckpt_malloc(m->ntie * sizeof *t->best))) {
            tie_index_free(t);
            return ckpt_err_nomem();
        }
        for (size_t i = 0; i < m->ntie; i++) t->best[i] = CKPT_KEYS_NONE;
        for (size_t y = 0; y < m->ntie; y++) {
            size_t root = ckpt_manifest_tie_root(m, y);
            if (ok[y] && (t->best[root] == CKPT_KEYS_NONE ||
                          strcmp(m->entries[y].name, m->entries[t->best[root]].name) < 0))
                t->best[root] = y;
        }
    }
    return 0;
}

/* The smallest-named other entry y with ok[y] sharing entry x's tensor:
 * the same storage and storage offset with x's dtype and shape, or x's
 * recorded tie group (one dtype and shape by construction); or
 * CKPT_KEYS_NONE. */
static size_t tie_partner(const tie_index *t, size_t x, const unsigned char *ok) {
    const ckpt_manifest *m = t->s.m;
    const ckpt_manifest_entry *ex = &m->entries[x];
    size_t best = t->best && x < m->ntie ? t->best[ckpt_manifest_tie_root(m, x)] : CKPT_KEYS_NONE;
    if (best == x) best = CKPT_KEYS_NONE;
    if (!t->s.ids) return best;
    size_t lo = 0, hi = t->s.n; /* first position not before x's group */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ckpt_tensor *a = m->entries[t->s.ids[mid]].tensor, *b = ex->tensor;
        if (ckpt_tensor_storage_id(a) < ckpt_tensor_storage_id(b) ||
            (ckpt_tensor_storage_id(a) == ckpt_tensor_storage_id(b) &&
             ckpt_tensor_storage_offset(a) < ckpt_tensor_storage_offset(b)))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k < t->s.n; k++) {
        size_t y = t->s.ids[k];
        const ckpt_manifest_entry *ey = &m->entries[y];
        if (ckpt_tensor_storage_id(ey->tensor) != ckpt_tensor_storage_id(ex->tensor) ||
            ckpt_tensor_storage_offset(ey->tensor) != ckpt_tensor_storage_offset(ex->tensor))
            break;
        if (y == x || !ok[y] || strcmp(ex->dtype, ey->dtype) != 0 || !same_shape(ex, ey)) continue;
        if (best == CKPT_KEYS_NONE || strcmp(ey->name, m->entries[best].name) < 0) best = y;
    }
    return best;
}

/* Metadata aliases "dropped name" -> "kept name" (safetensors save_model)
 * of manifest `src` whose kept name is a paired entry and whose dropped
 * name is not an entry, keyed by the dropped name as the other side calls
 * it (through `rule` for checkpoint aliases under an applied rewrite). */
static int index_aliases(ckpt_strmap *map, ckpt_arena *a, const ckpt_manifest *src,
                         const size_t *paired, const ckpt_rule *rule) {
    for (size_t k = 0; k < src->nmeta; k++) {
        const char *kept = src->meta_vals[k], *name = src->meta_keys[k];
        size_t v = ckpt_manifest_lookup(src, kept, strlen(kept)), len = strlen(name);
        if (v == CKPT_KEYS_NONE || paired[v] == CKPT_KEYS_NONE) continue;
        if (ckpt_manifest_lookup(src, name, len) != CKPT_KEYS_NONE) continue;
        if (rule) {
            char *buf = ckpt_arena_alloc(a, len + rule->add_len + 1);
            if (!buf) return ckpt_err_nomem();
            int covered;
            len = ckpt_rule_apply(rule, name, len, buf, &covered);
            if (!covered) continue;
            name = buf;
        }
        ckpt_strmap_slot *sl;
        if (ckpt_strmap_put(map, name, len, v, &sl) < 0) return ckpt_err_nomem();
    }
    return 0;
}

static size_t alias_partner(const ckpt_strmap *map, const char *name) {
    size_t len = strlen(name);
    ckpt_strmap_slot *sl = ckpt_strmap_find(map, name, len, ckpt_strmap_hash(name, len));
    return sl ? sl->val : CKPT_KEYS_NONE;
}

/* For each expected entry the pairing leaves unpaired, the name of the
 * matched expected key that fills it through a tie of the expected side
 * (see ckpt_match in ckpt.h), or NULL: (*out)[0..e->n), ckpt_malloc'd;
 * *out is NULL when every expected entry is paired (nothing to fill).
 * declared (NULL: not wanted; else e->n slots, all set when *out is not
 * NULL): for an unpaired entry no tie fills, the checkpoint key whose
 * metadata alias names it (a tie the checkpoint declares and the model
 * does not make: it fills nothing), or CKPT_KEYS_NONE. The rewrite is
 * m->rule. */
static int missing_ties(matcher *m, const size_t *c2e, const size_t *e2c, const char ***out,
                        size_t *declared) {
    const ckpt_manifest *c = m->c, *e = m->e;
    size_t nmiss = 0;
    *out = NULL;
    for (size_t j = 0; j < e->n; j++) nmiss += e2c[j] == CKPT_KEYS_NONE;
    if (!nmiss) return 0;
    const char **to = ckpt_malloc(e->n * sizeof *to);
    unsigned char *ok = to ? ckpt_malloc(e->n) : NULL;
    if (!ok) {
        ckpt_free(to);
        return ckpt_err_nomem();
    }
    *out = to;
    for (size_t j = 0; j < e->n; j++) to[j] = NULL;
    /* a partner whose dtype alone differs still fills its tie once cast (the
     * dtype mismatch is reported on the partner, not as a missing key) */
    for (size_t j = 0; j < e->n; j++)
        ok[j] = e2c[j] != CKPT_KEYS_NONE && same_shape(&c->entries[e2c[j]], &e->entries[j]);
    tie_index t;
    ckpt_strmap ac = {0};
    int rc = tie_index_build(&t, e, ok);
    if (!rc && declared) rc = index_aliases(&ac, &m->r->arena, c, c2e, m->rule);
    for (size_t j = 0; !rc && j < e->n; j++) {
        if (declared) declared[j] = CKPT_KEYS_NONE;
        if (e2c[j] != CKPT_KEYS_NONE) continue;
        size_t p = tie_partner(&t, j, ok);
        if (p != CKPT_KEYS_NONE)
            to[j] = e->entries[p].name;
        else if (declared && (p = alias_partner(&ac, e->entries[j].name)) != CKPT_KEYS_NONE &&
                 ok[c2e[p]] && loads(m, p, j))
            declared[j] = p;
    }
    tie_index_free(&t);
    ckpt_free(ok);
    ckpt_strmap_free(&ac);
    return rc;
}

/* ------------------------------------------------------------ BatchNorm counters */

/* For each expected BatchNorm counter the pairing leaves unpaired: 1 when
 * its module fills it (the checkpoint gives the module no version 2;
 * ckpt_manifest_module_fills), in (*out)[0..e->n), ckpt_malloc'd; *out is
 * NULL when the expected side records no counter. The module's checkpoint
 * name is the one a paired key of the same module has (its name less its
 * last segment: the pairing's rewrite included); a module none of whose
 * keys is paired is not known to the checkpoint, so its counter stays
 * missing (it cannot be complete then anyway). */
static int counters_filled(const matcher *m, const size_t *e2c, unsigned char **out) {
    const ckpt_manifest *c = m->c, *e = m->e;
    *out = NULL;
    if (!e->ncounters) return 0;
    unsigned char *fills = ckpt_malloc(e->n);
    ckpt_strmap mods = {0}; /* expected module name -> counter entry */
    int rc = fills ? 0 : ckpt_err_nomem();
    if (!rc) memset(fills, 0, e->n);
    for (size_t k = 0; !rc && k < e->ncounters; k++) {
        size_t j = e->counters[k];
        const char *name = e->entries[j].name, *dot = strrchr(name, '.');
        ckpt_strmap_slot *sl;
        if (e2c[j] == CKPT_KEYS_NONE &&
            ckpt_strmap_put(&mods, name, dot ? (size_t)(dot - name) : 0, j, &sl) < 0)
            rc = ckpt_err_nomem();
    }
    for (size_t j = 0; !rc && mods.n && j < e->n; j++) {
        if (e2c[j] == CKPT_KEYS_NONE) continue;
        const char *name = e->entries[j].name, *dot = strrchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : 0, seg = strlen(name) - len - (dot != NULL);
        ckpt_strmap_slot *sl = ckpt_strmap_find(&mods, name, len, ckpt_strmap_hash(name, len));
        if (!sl || fills[sl->val]) continue;
        const char *cn = c->entries[e2c[j]].name;
        size_t cl = strlen(cn);
        if (cl < seg) continue;
        cl -= seg;
        if (cl && cn[cl - 1] == '.') cl--;
        /* 2: decided (missing), 1: filled; one sibling decides */
        fills[sl->val] = ckpt_manifest_module_fills(c, cn, cl) ? 1 : 2;
    }
    for (size_t j = 0; !rc && j < e->n; j++) fills[j] = fills[j] == 1;
    ckpt_strmap_free(&mods);
    if (rc) {
        ckpt_free(fills);
        return rc;
    }
    *out = fills;
    return 0;
}

/* When a pairing under an unapplied rewrite pairs every checkpoint key it
 * keeps (each loading) and leaves only expected keys missing: r->rw_note
 * names them (ckpt_match_rewrite_note). Returns 0 or CKPT_E_NOMEM. */
#define SHOW_LEFT 8
static int note_left(matcher *m, const size_t *c2e, const size_t *e2c) {
    ckpt_match_result *r = m->r;
    for (size_t i = 0; i < m->c->n; i++) {
        if (left_out(m, c2e, i)) continue;
        if (c2e[i] == CKPT_KEYS_NONE ? !allowed_unexpected(m, i) : !loads(m, i, c2e[i])) return 0;
    }
    const char **to;
    unsigned char *fills = NULL;
    int rc = missing_ties(m, c2e, e2c, &to, NULL);
    if (!rc) rc = counters_filled(m, e2c, &fills);
    const char *names = "";
    size_t n = 0;
    for (size_t j = 0; !rc && j < m->e->n; j++) {
        if (e2c[j] != CKPT_KEYS_NONE || (to && to[j]) || allowed_missing(m, j) ||
            (fills && fills[j]))
            continue;
        if (n++ < SHOW_LEFT &&
            !(names = ckpt_arena_printf(&r->arena, "%s%s%s", names, n > 1 ? ", " : "",
                                        m->e->entries[j].name)))
            rc = ckpt_err_nomem();
    }
    ckpt_free(to);
    ckpt_free(fills);
    if (rc || !n) return rc;
    r->rw_note = ckpt_arena_printf(
        &r->arena,
        "it pairs every checkpoint key; %zu model key%s would stay missing: %s%s (with "
        "them allowed missing, or with strict=False, every checkpoint key loads)",
        n, n == 1 ? "" : "s", names, n > SHOW_LEFT ? ", ..." : "");
    return r->rw_note ? 0 : ckpt_err_nomem();
}

/* Whether a pairing would give a complete match, without building lists:
 * *complete. Returns 0 or CKPT_E_NOMEM. */
static int would_complete(matcher *m, const size_t *c2e, const size_t *e2c, int *complete) {
    uint64_t matched = 0;
    *complete = 0;
    for (size_t i = 0; i < m->c->n; i++) {
        if (left_out(m, c2e, i)) continue;
        if (c2e[i] == CKPT_KEYS_NONE) {
            if (!allowed_unexpected(m, i)) return 0;
            continue;
        }
        if (!loads(m, i, c2e[i])) return 0;
        matched++;
    }
    const char **to;
    unsigned char *fills = NULL;
    int rc = missing_ties(m, c2e, e2c, &to, NULL);
    if (!rc) rc = counters_filled(m, e2c, &fills);
    *complete = !rc && (matched > 0 || m->e->n == 0);
    for (size_t j = 0; *complete && j < m->e->n; j++)
        if (e2c[j] == CKPT_KEYS_NONE && !to[j] && !allowed_missing(m, j) && !(fills && fills[j]))
            *complete = 0;
    ckpt_free(to);
    ckpt_free(fills);
    return rc;
}

static ckpt_match_item *push(matcher *m, ckpt_match_list l, const char *name, size_t ci,
                             size_t ej) {
    ckpt_match_result *r = m->r;
    if (ckpt_arena_grow(&r->arena, (void **)&r->lists[l], &r->caps[l], r->counts[l] + 1,
                        sizeof(ckpt_match_item)))
        return NULL;
    ckpt_match_item *it = &r->lists[l][r->counts[l]++];
    it->name = name;
    it->checkpoint = ci == CKPT_KEYS_NONE ? NULL : &m->c->entries[ci];
    it->expected = ej == CKPT_KEYS_NONE ? NULL : &m->e->entries[ej];
    it->tied_to = NULL;
    return it;
}

static int classify(matcher *m) {
    ckpt_match_result *r = m->r;
    const char **to = NULL;
    unsigned char *fills = NULL;
    size_t *declared = ckpt_malloc((m->e->n ? m->e->n : 1) * sizeof *declared);
    int rc = declared ? missing_ties(m, m->c2e, m->e2c, &to, declared) : ckpt_err_nomem();
    if (!rc) rc = counters_filled(m, m->e2c, &fills);
    for (size_t j = 0; !rc && j < m->e->n; j++) {
        if (m->e2c[j] != CKPT_KEYS_NONE) continue;
        ckpt_match_list l = to[j]                   ? CKPT_MATCH_TIED
                            : allowed_missing(m, j) ? CKPT_MATCH_ALLOWED_MISSING
                            : fills && fills[j]     ? CKPT_MATCH_DEFAULTED
                                                    : CKPT_MATCH_MISSING;
        ckpt_match_item *it = push(m, l, m->e->entries[j].name, CKPT_KEYS_NONE, j);
        if (!it)
            rc = ckpt_err_nomem();
        else
            it->tied_to = to[j];
        /* declared by the checkpoint alone: still missing (a loader that
         * ignores the metadata leaves it at its init), and named in TIED
         * with the checkpoint key that declares it */
        size_t p = declared[j];
        if (rc || l == CKPT_MATCH_TIED || p == CKPT_KEYS_NONE) continue;
        if (!(it = push(m, CKPT_MATCH_TIED, m->e->entries[j].name, p, j)))
            rc = ckpt_err_nomem();
        else
            it->tied_to = m->e->entries[m->c2e[p]].name;
    }
    ckpt_free(to);
    ckpt_free(fills);
    ckpt_free(declared);
    if (rc) return rc;
    for (size_t i = 0; i < m->c->n; i++) {
        size_t j = m->c2e[i];
        const ckpt_manifest_entry *a = &m->c->entries[i];
        if (left_out(m, m->c2e, i)) continue;
        if (j == CKPT_KEYS_NONE) {
            ckpt_match_list l =
                allowed_unexpected(m, i) ? CKPT_MATCH_ALLOWED_UNEXPECTED : CKPT_MATCH_UNEXPECTED;
            if (!push(m, l, a->name, i, CKPT_KEYS_NONE)) return ckpt_err_nomem();
            continue;
        }
        const ckpt_manifest_entry *b = &m->e->entries[j];
        int shape = same_shape(a, b), dtype = strcmp(a->dtype, b->dtype) == 0;
        if (shape && dtype) {
            r->matched++;
            continue;
        }
        if (!shape && !push(m, CKPT_MATCH_SHAPE_MISMATCH, b->name, i, j)) return ckpt_err_nomem();
        if (!dtype && !push(m, CKPT_MATCH_DTYPE_MISMATCH, b->name, i, j)) return ckpt_err_nomem();
    }
    return 0;
}

int ckpt_keys_unpaired_ties(size_t **out, const ckpt_manifest *own, const size_t *own2other,
                            const ckpt_manifest *other, const size_t *other2own,
                            const char *const *names) {
    size_t *to = ckpt_malloc((own->n ? own->n : 1) * sizeof *to);
    unsigned char *ok = ckpt_malloc(own->n ? own->n : 1);
    *out = NULL;
    if (!to || !ok) {
        ckpt_free(to);
        ckpt_free(ok);
        return ckpt_err_nomem();
    }
    for (size_t i = 0; i < own->n; i++) {
        ok[i] = own2other[i] != CKPT_KEYS_NONE;
        to[i] = CKPT_KEYS_NONE;
    }
    tie_index t;
    ckpt_strmap aliases = {0};
    ckpt_arena arena = {0};
    int rc = tie_index_build(&t, own, ok);
    if (!rc) rc = index_aliases(&aliases, &arena, other, other2own, NULL);
    for (size_t i = 0; !rc && i < own->n; i++) {
        if (ok[i]) continue;
        size_t p = tie_partner(&t, i, ok);
        if (p == CKPT_KEYS_NONE &&
            (p = alias_partner(&aliases, names ? names[i] : own->entries[i].name)) !=
                CKPT_KEYS_NONE)
            p = other2own[p];
        to[i] = p;
    }
    tie_index_free(&t);
    ckpt_free(ok);
    ckpt_strmap_free(&aliases);
    ckpt_arena_free(&arena);
    if (rc)
        ckpt_free(to);
    else
        *out = to;
    return rc;
}

/* Unexpected keys tied to a paired checkpoint key (ckpt_keys_unpaired_ties,
 * the expected side's metadata naming them as the rewrite calls them):
 * listed in TIED too. */
static int unexpected_ties(matcher *m) {
    ckpt_match_result *r = m->r;
    size_t nunex = r->counts[CKPT_MATCH_UNEXPECTED] + r->counts[CKPT_MATCH_ALLOWED_UNEXPECTED];
    if (!nunex) return 0;
    size_t *to;
    int rc = ckpt_keys_unpaired_ties(&to, m->c, m->c2e, m->e, m->e2c,
                                     m->rule ? (const char *const *)r->rewritten : NULL);
    static const ckpt_match_list unex[2] = {CKPT_MATCH_UNEXPECTED, CKPT_MATCH_ALLOWED_UNEXPECTED};
    for (int l = 0; !rc && l < 2; l++) {
        for (size_t k = 0; !rc && k < r->counts[unex[l]]; k++) {
            const ckpt_match_item *it = &r->lists[unex[l]][k];
            size_t i = (size_t)(it->checkpoint - m->c->entries);
            if (to[i] == CKPT_KEYS_NONE) continue;
            ckpt_match_item *tied = push(m, CKPT_MATCH_TIED, it->name, i, CKPT_KEYS_NONE);
            if (!tied)
                rc = ckpt_err_nomem();
            else
                tied->tied_to = m->c->entries[to[i]].name;
        }
    }
    ckpt_free(to);
    return rc;
}

/* ------------------------------------------------------------ the match */

typedef struct rewriter {
    matcher *m;
    const ckpt_rule *rule;
    size_t *c2e;
    size_t *e_hit;      /* expected entry -> checkpoint entry naming it */
    ckpt_strmap others; /* other names -> checkpoint entry */
    size_t *clash;
} rewriter;

static int rewrite_key(void *ctx, size_t i, const char *name, size_t len, int covered, size_t j) {
    rewriter *w = ctx;
    ckpt_match_result *r = w->m->r;
    size_t prev = CKPT_KEYS_NONE;
    char *copy = ckpt_arena_strndup(&r->arena, name, len);
    if (!copy) return ckpt_err_nomem();
    r->rewritten[i] = copy;
    /* a key the rule does not cover keeps its name (and pairs by it),
     * unless the rule selects a subtree: the others are left out */
    w->c2e[i] = covered || !w->rule->select ? j : CKPT_KEYS_NONE;
    /* the entries a subtree rewrite leaves out never load: their names
     * cannot clash */
    if (!covered && w->rule->select) return 0;
    if (j != CKPT_KEYS_NONE) {
        prev = w->e_hit[j];
        if (prev == CKPT_KEYS_NONE) w->e_hit[j] = i;
    } else {
        ckpt_strmap_slot *sl;
        int put = ckpt_strmap_put(&w->others, copy, len, i, &sl);
        if (put < 0) return put;
        if (put == 0) prev = sl->val;
    }
    if (prev != CKPT_KEYS_NONE && w->clash[0] == CKPT_KEYS_NONE) {
        w->clash[0] = prev;
        w->clash[1] = i;
    }
    return 0;
}

/* Names every checkpoint key under `rule` into r->rewritten and pairs them
 * (c2e). Returns 0, or CKPT_E_NOMEM; *clash receives two checkpoint
 * entries that the rule maps to one name (keys a subtree rewrite leaves
 * out aside), or stays CKPT_KEYS_NONE. Names that are expected keys clash
 * through e_hit (no hashing); only the others go through a hash set. */
static int rewrite_all(matcher *m, const ckpt_rule *rule, size_t *c2e, size_t clash[2]) {
    ckpt_match_result *r = m->r;
    rewriter w = {m, rule, c2e, ckpt_malloc((m->e->n ? m->e->n : 1) * sizeof(size_t)), {0}, clash};
    r->rewritten = ckpt_arena_array(&r->arena, m->c->n ? m->c->n : 1, sizeof(char *));
    int rc = w.e_hit && r->rewritten ? 0 : ckpt_err_nomem();
    for (size_t j = 0; !rc && j < m->e->n; j++) w.e_hit[j] = CKPT_KEYS_NONE;
    if (!rc) rc = ckpt_rule_lookup_all(rule, m->c, m->e, rewrite_key, &w);
    ckpt_free(w.e_hit);
    ckpt_strmap_free(&w.others);
    return rc;
}

/* ------------------------------------------------------------ tie conflicts */

static int hash_sink(void *ctx, const void *p, size_t n) {
    ckpt_xxh3_update(ctx, p, n);
    return 0;
}

/* 1 when checkpoint entries x and y hold the same values (one tensor, or
 * equal bytes), 0 when they differ, -1 when unknown (no bytes to read, or
 * unreadable: the read error is not the match's). */
static int same_values(const ckpt_manifest *c, size_t x, size_t y) {
    if (x < c->ntie && y < c->ntie && ckpt_manifest_tie_root(c, x) == ckpt_manifest_tie_root(c, y))
        return 1;
    const ckpt_tensor *a = c->entries[x].tensor, *b = c->entries[y].tensor;
    if (!a || !b) return -1;
    if (ckpt_tensor_storage_id(a) == ckpt_tensor_storage_id(b) &&
        ckpt_tensor_storage_offset(a) == ckpt_tensor_storage_offset(b))
        return 1;
    uint64_t h[2];
    for (int k = 0; k < 2; k++) {
        XXH3_state_t st;
        ckpt_xxh3_reset(&st);
        if (ckpt_tensor_stream(k ? b : a, hash_sink, &st)) return -1;
        h[k] = ckpt_xxh3_digest(&st);
    }
    return h[0] == h[1];
}

/* The tie group of each expected entry, as an entry of the group (itself
 * when untied): the recorded groups (ckpt_manifest_tie), else, for the
 * manifest of a file, its tensors sharing a storage and offset with one
 * dtype and shape. (*out)[0..e->n), ckpt_malloc'd. */
static int tie_groups(const ckpt_manifest *e, size_t **out) {
    size_t *grp = ckpt_malloc((e->n ? e->n : 1) * sizeof *grp);
    *out = grp;
    if (!grp) return ckpt_err_nomem();
    for (size_t j = 0; j < e->n; j++) grp[j] = j < e->ntie ? ckpt_manifest_tie_root(e, j) : j;
    if (e->ntie || !e->file) return 0;
    tie_index t;
    int rc = tie_index_build(&t, e, NULL);
    for (size_t k = 1; !rc && k < t.s.n; k++) {
        size_t x = grp[t.s.ids[k - 1]], y = t.s.ids[k];
        const ckpt_tensor *a = e->entries[x].tensor, *b = e->entries[y].tensor;
        if (ckpt_tensor_storage_id(a) == ckpt_tensor_storage_id(b) &&
            ckpt_tensor_storage_offset(a) == ckpt_tensor_storage_offset(b) &&
            strcmp(e->entries[x].dtype, e->entries[y].dtype) == 0 &&
            same_shape(&e->entries[x], &e->entries[y]))
            grp[y] = x;
    }
    tie_index_free(&t);
    if (rc) {
        ckpt_free(grp);
        *out = NULL;
    }
    return rc;
}

/* Groups of expected names tied into one parameter whose members load
 * from checkpoint tensors that are not one (ckpt_match_tie_note). The
 * groups are linked lists over the entries (head and next by group): one
 * pass, in the manifest's order. */
static int tie_conflicts(matcher *m) {
    const ckpt_manifest *c = m->c, *e = m->e;
    ckpt_match_result *r = m->r;
    size_t nt = e->n, shown = 0, *grp;
    if (!nt || (!e->ntie && !e->file)) return 0;
    if (tie_groups(e, &grp)) return ckpt_err_nomem();
    size_t *head = ckpt_malloc(3 * nt * sizeof *head), *tail = head + nt, *next = tail + nt;
    if (!head) {
        ckpt_free(grp);
        return ckpt_err_nomem();
    }
    for (size_t j = 0; j < nt; j++) head[j] = next[j] = CKPT_KEYS_NONE;
    for (size_t j = 0; j < nt; j++) {
        size_t root = grp[j], i = m->e2c[j];
        if (i == CKPT_KEYS_NONE || !loads(m, i, j)) continue;
        if (head[root] == CKPT_KEYS_NONE)
            head[root] = j;
        else
            next[tail[root]] = j;
        tail[root] = j;
    }
    ckpt_free(grp);
    int rc = 0;
    for (size_t root = 0; !rc && root < nt; root++) {
        size_t j = head[root];
        if (j == CKPT_KEYS_NONE || next[j] == CKPT_KEYS_NONE) continue; /* fewer than 2 load */
        const char *names = "", *wins = NULL;
        size_t n = 0;
        int differ = 0, unknown = 0;
        for (size_t k = j; !rc && k != CKPT_KEYS_NONE; k = next[k], n++) {
            if (k != j) {
                int same = same_values(c, m->e2c[j], m->e2c[k]);
                differ |= same == 0;
                unknown |= same < 0;
            }
            if (n < 3 && !(names = ckpt_arena_printf(&r->arena, "%s%s%s", names, n ? ", " : "",
                                                     e->entries[k].name)))
                rc = ckpt_err_nomem();
            wins = e->entries[k].name;
        }
        if (rc || (!differ && !unknown) || shown++ >= 3) continue;
        const char *order = e->file ? "the last in the model's module order wins"
                                    : ckpt_arena_printf(&r->arena, "the last, %s, wins", wins);
        const char *text =
            order ? ckpt_arena_printf(&r->arena,
                                      "%s%s%s%s are one parameter of the model; the checkpoint "
                                      "holds them as %zu tensors whose values %s: loading "
                                      "copies each into it, %s",
                                      r->tie_note ? r->tie_note : "", r->tie_note ? "; " : "",
                                      names, n > 3 ? ", ..." : "", n,
                                      differ ? "differ" : "may differ", order)
                  : NULL;
        if (!text) rc = ckpt_err_nomem();
        r->tie_note = text;
    }
    ckpt_free(head);
    return rc;
}

static int cmp_items(const void *x, const void *y) {
    return strcmp(((const ckpt_match_item *)x)->name, ((const ckpt_match_item *)y)->name);
}

/* Lists come out in manifest order, which is sorted for checkpoints and
 * `ckpt inspect --json` manifests: check before sorting (O(n)). */
static void sort_items(ckpt_match_item *v, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) > 0) {
            qsort(v, n, sizeof *v, cmp_items);
            return;
        }
}

static int finish(matcher *m) {
    ckpt_match_result *r = m->r;
    int rc = classify(m);
    if (!rc) rc = unexpected_ties(m);
    if (!rc) rc = tie_conflicts(m);
    if (rc) return rc;
    /* matched, tied to a matched key, filled by its BatchNorm, or
     * differing in dtype alone (torch's load_state_dict copies it with a
     * cast) */
    uint64_t filled = r->matched + r->counts[CKPT_MATCH_DEFAULTED];
    for (size_t k = 0; k < r->counts[CKPT_MATCH_TIED]; k++)
        filled += r->lists[CKPT_MATCH_TIED][k].expected && !r->lists[CKPT_MATCH_TIED][k].checkpoint;
    for (size_t k = 0; k < r->counts[CKPT_MATCH_DTYPE_MISMATCH]; k++) {
        const ckpt_match_item *it = &r->lists[CKPT_MATCH_DTYPE_MISMATCH][k];
        filled += same_shape(it->checkpoint, it->expected) != 0;
    }
    for (int l = 0; l < NLISTS; l++) sort_items(r->lists[l], r->counts[l]);
    size_t n = m->e->n;
    r->complete = !r->counts[CKPT_MATCH_MISSING] && !r->counts[CKPT_MATCH_UNEXPECTED] &&
                  !r->counts[CKPT_MATCH_SHAPE_MISMATCH] && !r->counts[CKPT_MATCH_DTYPE_MISMATCH] &&
                  (r->matched > 0 || n == 0);
    /* called out even when every exception is allowed */
    if (filled < n - filled) { /* fewer than half load */
        r->warning = r->matched == 0
                         ? ckpt_arena_printf(&r->arena,
                                             "nothing would load: 0 of %zu expected keys match", n)
                         : ckpt_arena_printf(&r->arena,
                                             "almost nothing would load: %" PRIu64
                                             " of %zu expected keys match",
                                             r->matched, n);
        if (!r->warning) return ckpt_err_nomem();
        int nomem;
        const char *adapter = ckpt_adapter_note(m->c, m->e, &r->arena, &nomem);
        if (nomem) return ckpt_err_nomem();
        if (adapter) r->warning = adapter;
    }
    return 0;
}

/* Rewrites every checkpoint key with `best` into c2e_rw (and its inverse
 * e2c_rw); applies it (pairing in c2e/e2c) when asked and complete. */
static int apply(matcher *m, const ckpt_rule *best, size_t *c2e, size_t *e2c, size_t *c2e_rw,
                 size_t *e2c_rw) {
    ckpt_match_result *r = m->r;
    size_t clash[2] = {CKPT_KEYS_NONE, CKPT_KEYS_NONE};
    int rc;
    if ((rc = rewrite_all(m, best, c2e_rw, clash))) return rc;
    if (clash[0] != CKPT_KEYS_NONE) {
        r->rewrite.description = ckpt_arena_printf(
            &r->arena, "%s (not applicable: '%s' and '%s' both become '%s')", best->description,
            m->c->entries[clash[0]].name, m->c->entries[clash[1]].name, r->rewritten[clash[1]]);
        return r->rewrite.description ? 0 : ckpt_err_nomem();
    }
    invert(m, c2e_rw, e2c_rw);
    m->rule = best;
    int complete;
    if ((rc = would_complete(m, c2e_rw, e2c_rw, &complete)) || !complete || !m->opts->normalize) {
        if (!rc && !complete) rc = note_left(m, c2e_rw, e2c_rw);
        m->rule = NULL;
        return rc;
    }
    memcpy(c2e, c2e_rw, m->c->n * sizeof *c2e);
    memcpy(e2c, e2c_rw, m->e->n * sizeof *e2c);
    r->rewrite.applied = 1;
    return 0;
}

/* Infers the rewrite; applies it (pairing in c2e/e2c) when asked and
 * complete. The rewritten pairing is allocated only here, where a rule
 * is tried (two key indices per key, beside c2e and e2c). */
static int infer(matcher *m, size_t *c2e, size_t *e2c, ckpt_rule *rules) {
    ckpt_match_result *r = m->r;
    size_t nrules = 0;
    int rc = ckpt_rules_infer(rules, MAX_CANDIDATES, &nrules, &r->arena, m->c, m->e, c2e);
    if (rc) return rc;
    /* a rule matching half as many keys as the best pairs keys by
     * coincidence ("replace 'conv1.' with 'conv.conv2.'"): not a candidate */
    while (nrules > 1 && rules[nrules - 1].matches * 2 <= rules[0].matches) nrules--;
    for (size_t k = 0; k < nrules; k++)
        r->candidates[k] = (ckpt_rewrite){rules[k].description, rules[k].matches, 0};
    r->ncandidates = nrules;
    const ckpt_rule *best = ckpt_rules_best(rules, nrules);
    if (!best) return 0;
    r->has_rewrite = 1;
    r->rewrite = r->candidates[0];
    if (best->select && (rc = ckpt_rule_others(&r->ignored, &r->nignored, &r->arena, best, m->c)))
        return rc;
    size_t nc = m->c->n ? m->c->n : 1, ne = m->e->n ? m->e->n : 1;
    size_t *rw = ckpt_malloc((nc + ne) * sizeof *rw);
    if (!rw) return ckpt_err_nomem();
    rc = apply(m, best, c2e, e2c, rw, rw + nc);
    ckpt_free(rw);
    return rc;
}

int ckpt_match(ckpt_match_result **out, const ckpt_manifest *c, const ckpt_manifest *e,
               const ckpt_match_options *opts) {
    static const ckpt_match_options defaults = CKPT_MATCH_OPTIONS_INIT;
    CKPT_CHECK_OPTIONS(opts, CKPT_MATCH_OPTIONS_VERSION);
    if (!out || !c || !e)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "ckpt_match needs two manifests");
    *out = NULL;
    ckpt_match_result *r = ckpt_malloc(sizeof *r);
    if (!r) return ckpt_err_nomem();
    memset(r, 0, sizeof *r);
    matcher m = {r, c, e, opts ? opts : &defaults, NULL, NULL, NULL};
    size_t nc = c->n ? c->n : 1, ne = e->n ? e->n : 1;
    size_t *buf = ckpt_malloc((nc + ne) * sizeof *buf);
    ckpt_rule rules[MAX_CANDIDATES];
    if (!buf) {
        ckpt_free(r);
        return ckpt_err_nomem();
    }
    size_t *c2e = buf, *e2c = buf + nc;
    size_t unmatched_c = c->n - ckpt_manifest_lookup_all(e, c, c2e), unmatched_e;
    invert(&m, c2e, e2c);
    unmatched_e = e->n - (c->n - unmatched_c);
    int rc = unmatched_c && unmatched_e ? infer(&m, c2e, e2c, rules) : 0;
    m.c2e = c2e;
    m.e2c = e2c;
    if (!rc) rc = finish(&m);
    ckpt_free(buf);
    if (rc) {
        ckpt_match_result_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void ckpt_match_result_free(ckpt_match_result *r) {
    if (!r) return;
    ckpt_arena_free(&r->arena);
    ckpt_free(r);
}

/* ------------------------------------------------------------ accessors */

int ckpt_match_complete(const ckpt_match_result *r) { return r->complete; }
uint64_t ckpt_match_matched(const ckpt_match_result *r) { return r->matched; }

size_t ckpt_match_count(const ckpt_match_result *r, ckpt_match_list list) {
    return (unsigned)list < NLISTS ? r->counts[list] : 0;
}

const ckpt_match_item *ckpt_match_item_at(const ckpt_match_result *r, ckpt_match_list list,
                                          size_t i) {
    if ((unsigned)list >= NLISTS || i >= r->counts[list]) return NULL;
    return &r->lists[list][i];
}

const ckpt_rewrite *ckpt_match_rewrite(const ckpt_match_result *r) {
    return r->has_rewrite ? &r->rewrite : NULL;
}

size_t ckpt_match_candidate_count(const ckpt_match_result *r) { return r->ncandidates; }

const ckpt_rewrite *ckpt_match_candidate(const ckpt_match_result *r, size_t i) {
    return i < r->ncandidates ? &r->candidates[i] : NULL;
}

const char *ckpt_match_warning(const ckpt_match_result *r) { return r->warning; }

const char *ckpt_match_tie_note(const ckpt_match_result *r) { return r->tie_note; }

const char *ckpt_match_rewrite_note(const ckpt_match_result *r) { return r->rw_note; }

size_t ckpt_match_ignored_count(const ckpt_match_result *r) { return r->nignored; }

const char *ckpt_match_ignored(const ckpt_match_result *r, size_t i) {
    return i < r->nignored ? r->ignored[i] : NULL;
}

const char *ckpt_match_rewritten(const ckpt_match_result *r, size_t i) {
    return r->rewritten ? r->rewritten[i] : NULL;
}
