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
#include "keys/keys.h"

#define NLISTS 7
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

/* Whether a pairing would give a complete match, without building lists. */
static int would_complete(const matcher *m, const size_t *c2e, const size_t *e2c) {
    uint64_t matched = 0;
    for (size_t i = 0; i < m->c->n; i++) {
        if (left_out(m, c2e, i)) continue;
        if (c2e[i] == CKPT_KEYS_NONE) {
            if (!allowed_unexpected(m, i)) return 0;
            continue;
        }
        const ckpt_manifest_entry *a = &m->c->entries[i], *b = &m->e->entries[c2e[i]];
        if (strcmp(a->dtype, b->dtype) != 0 || !same_shape(a, b)) return 0;
        matched++;
    }
    for (size_t j = 0; j < m->e->n; j++)
        if (e2c[j] == CKPT_KEYS_NONE && !allowed_missing(m, j)) return 0;
    return matched > 0 || m->e->n == 0;
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
    for (size_t j = 0; j < m->e->n; j++) {
        if (m->e2c[j] != CKPT_KEYS_NONE) continue;
        ckpt_match_list l = allowed_missing(m, j) ? CKPT_MATCH_ALLOWED_MISSING : CKPT_MATCH_MISSING;
        if (!push(m, l, m->e->entries[j].name, CKPT_KEYS_NONE, j)) return ckpt_err_nomem();
    }
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

/* ------------------------------------------------------------ tied weights */

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

/* Only manifests of files know storages; others leave the index empty. */
static int index_storages(storage_index *si, const ckpt_manifest *m) {
    si->m = m;
    si->n = 0;
    si->ids = NULL;
    if (!m->file || !m->n) return 0;
    si->ids = ckpt_malloc(m->n * sizeof *si->ids);
    size_t *tmp = ckpt_malloc(m->n * sizeof *tmp);
    if (!si->ids || !tmp) {
        ckpt_free(si->ids);
        ckpt_free(tmp);
        si->ids = NULL;
        return ckpt_err_nomem();
    }
    for (size_t i = 0; i < m->n; i++) si->ids[si->n++] = i;
    merge_sort(m, si->ids, tmp, si->n);
    ckpt_free(tmp);
    return 0;
}

/* The smallest-named other entry holding the same tensor as entry x (same
 * storage, storage offset, dtype and shape) that is paired (paired[y] set),
 * or CKPT_KEYS_NONE. */
static size_t storage_partner(const storage_index *si, size_t x, const size_t *paired) {
    if (!si->ids) return CKPT_KEYS_NONE;
    const ckpt_manifest *m = si->m;
    size_t lo = 0, hi = si->n; /* first position not before x's group */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ckpt_tensor *a = m->entries[si->ids[mid]].tensor, *b = m->entries[x].tensor;
        if (ckpt_tensor_storage_id(a) < ckpt_tensor_storage_id(b) ||
            (ckpt_tensor_storage_id(a) == ckpt_tensor_storage_id(b) &&
             ckpt_tensor_storage_offset(a) < ckpt_tensor_storage_offset(b)))
            lo = mid + 1;
        else
            hi = mid;
    }
    const ckpt_manifest_entry *ex = &m->entries[x];
    size_t best = CKPT_KEYS_NONE;
    for (size_t k = lo; k < si->n; k++) {
        size_t y = si->ids[k];
        const ckpt_manifest_entry *ey = &m->entries[y];
        if (ckpt_tensor_storage_id(ey->tensor) != ckpt_tensor_storage_id(ex->tensor) ||
            ckpt_tensor_storage_offset(ey->tensor) != ckpt_tensor_storage_offset(ex->tensor))
            break;
        if (y == x || paired[y] == CKPT_KEYS_NONE || strcmp(ex->dtype, ey->dtype) != 0 ||
            !same_shape(ex, ey))
            continue;
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

static int find_tied(matcher *m) {
    ckpt_match_result *r = m->r;
    size_t nmiss = r->counts[CKPT_MATCH_MISSING] + r->counts[CKPT_MATCH_ALLOWED_MISSING];
    size_t nunex = r->counts[CKPT_MATCH_UNEXPECTED] + r->counts[CKPT_MATCH_ALLOWED_UNEXPECTED];
    if (!nmiss && !nunex) return 0;
    storage_index se = {0}, sc = {0};
    ckpt_strmap ac = {0}, ae = {0};
    int rc = 0;
    if (nmiss) {
        rc = index_storages(&se, m->e);
        if (!rc) rc = index_aliases(&ac, &r->arena, m->c, m->c2e, m->rule);
    }
    if (!rc && nunex) {
        rc = index_storages(&sc, m->c);
        if (!rc) rc = index_aliases(&ae, &r->arena, m->e, m->e2c, NULL);
    }
    static const ckpt_match_list miss[2] = {CKPT_MATCH_MISSING, CKPT_MATCH_ALLOWED_MISSING};
    static const ckpt_match_list unex[2] = {CKPT_MATCH_UNEXPECTED, CKPT_MATCH_ALLOWED_UNEXPECTED};
    for (int l = 0; !rc && l < 2; l++) {
        for (size_t k = 0; !rc && k < r->counts[miss[l]]; k++) {
            const ckpt_match_item *it = &r->lists[miss[l]][k];
            size_t j = (size_t)(it->expected - m->e->entries);
            size_t p = storage_partner(&se, j, m->e2c);
            const char *to = p != CKPT_KEYS_NONE ? m->e->entries[p].name : NULL;
            if (!to && (p = alias_partner(&ac, it->name)) != CKPT_KEYS_NONE)
                to = m->e->entries[m->c2e[p]].name;
            ckpt_match_item *t;
            if (to && !(t = push(m, CKPT_MATCH_TIED, it->name, CKPT_KEYS_NONE, j)))
                rc = ckpt_err_nomem();
            else if (to)
                t->tied_to = to;
        }
        for (size_t k = 0; !rc && k < r->counts[unex[l]]; k++) {
            const ckpt_match_item *it = &r->lists[unex[l]][k];
            size_t i = (size_t)(it->checkpoint - m->c->entries);
            size_t p = storage_partner(&sc, i, m->c2e);
            const char *to = p != CKPT_KEYS_NONE ? m->c->entries[p].name : NULL;
            const char *as = m->rule ? r->rewritten[i] : it->name;
            if (!to && (p = alias_partner(&ae, as)) != CKPT_KEYS_NONE)
                to = m->c->entries[m->e2c[p]].name;
            ckpt_match_item *t;
            if (to && !(t = push(m, CKPT_MATCH_TIED, it->name, i, CKPT_KEYS_NONE)))
                rc = ckpt_err_nomem();
            else if (to)
                t->tied_to = to;
        }
    }
    ckpt_free(se.ids);
    ckpt_free(sc.ids);
    ckpt_strmap_free(&ac);
    ckpt_strmap_free(&ae);
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
    w->c2e[i] = covered ? j : CKPT_KEYS_NONE;
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
    if (!rc) rc = find_tied(m);
    if (rc) return rc;
    for (int l = 0; l < NLISTS; l++) sort_items(r->lists[l], r->counts[l]);
    size_t n = m->e->n;
    r->complete = !r->counts[CKPT_MATCH_MISSING] && !r->counts[CKPT_MATCH_UNEXPECTED] &&
                  !r->counts[CKPT_MATCH_SHAPE_MISMATCH] && !r->counts[CKPT_MATCH_DTYPE_MISMATCH] &&
                  (r->matched > 0 || n == 0);
    /* called out even when every exception is allowed */
    if (r->matched < n - r->matched) { /* fewer than half match */
        r->warning = r->matched == 0
                         ? ckpt_arena_printf(&r->arena,
                                             "nothing would load: 0 of %zu expected keys match", n)
                         : ckpt_arena_printf(&r->arena,
                                             "almost nothing would load: %" PRIu64
                                             " of %zu expected keys match",
                                             r->matched, n);
        if (!r->warning) return ckpt_err_nomem();
    }
    return 0;
}

/* Infers the rewrite; applies it (pairing in c2e/e2c) when asked and
 * complete. */
static int infer(matcher *m, size_t *c2e, size_t *e2c, size_t *c2e_rw, size_t *e2c_rw,
                 ckpt_rule *rules) {
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
    size_t clash[2] = {CKPT_KEYS_NONE, CKPT_KEYS_NONE};
    r->has_rewrite = 1;
    r->rewrite = r->candidates[0];
    if (best->select && (rc = ckpt_rule_others(&r->ignored, &r->nignored, &r->arena, best, m->c)))
        return rc;
    if ((rc = rewrite_all(m, best, c2e_rw, clash))) return rc;
    if (clash[0] != CKPT_KEYS_NONE) {
        r->rewrite.description = ckpt_arena_printf(
            &r->arena, "%s (not applicable: '%s' and '%s' both become '%s')", best->description,
            m->c->entries[clash[0]].name, m->c->entries[clash[1]].name, r->rewritten[clash[1]]);
        return r->rewrite.description ? 0 : ckpt_err_nomem();
    }
    if (!m->opts->normalize) return 0;
    invert(m, c2e_rw, e2c_rw);
    m->rule = best;
    if (!would_complete(m, c2e_rw, e2c_rw)) {
        m->rule = NULL;
        return 0;
    }
    memcpy(c2e, c2e_rw, m->c->n * sizeof *c2e);
    memcpy(e2c, e2c_rw, m->e->n * sizeof *e2c);
    r->rewrite.applied = 1;
    return 0;
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
    size_t *buf = ckpt_malloc((2 * nc + 2 * ne) * sizeof *buf);
    ckpt_rule rules[MAX_CANDIDATES];
    if (!buf) {
        ckpt_free(r);
        return ckpt_err_nomem();
    }
    size_t *c2e = buf, *e2c = buf + nc, *c2e_rw = e2c + ne, *e2c_rw = c2e_rw + nc;
    size_t unmatched_c = c->n - ckpt_manifest_lookup_all(e, c, c2e), unmatched_e;
    invert(&m, c2e, e2c);
    unmatched_e = e->n - (c->n - unmatched_c);
    int rc = unmatched_c && unmatched_e ? infer(&m, c2e, e2c, c2e_rw, e2c_rw, rules) : 0;
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

size_t ckpt_match_ignored_count(const ckpt_match_result *r) { return r->nignored; }

const char *ckpt_match_ignored(const ckpt_match_result *r, size_t i) {
    return i < r->nignored ? r->ignored[i] : NULL;
}

const char *ckpt_match_rewritten(const ckpt_match_result *r, size_t i) {
    return r->rewritten ? r->rewritten[i] : NULL;
}
