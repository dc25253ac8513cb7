/* rename.c - ckpt_rename: rules that rewrite tensor keys (strip or add a
 * prefix, replace segments, or the rewrite ckpt_match infers against a
 * spec), the plan old name -> new name, and the checkpoint rewritten to
 * follow it and written atomically through the writer (write.h).
 *
 * The tree keeps its shape where it can: a tensor whose new name still
 * starts with the flattened path of one of its dicts stays in the deepest
 * such dict under the rest of the name (a flat state dict is renamed in
 * place, keys keep their order); otherwise it moves to the root dict.
 * Dicts emptied by moves disappear; nothing moves out of a list or tuple
 * (its indices would shift). Non-tensor values stay where they are. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/file.h"
#include "keys/keys.h"
#include "format/structure.h"
#include "format/write.h"
#include "model/walk.h"

struct ckpt_rename_plan {
    ckpt_arena arena;
    const ckpt_manifest *m;
    ckpt_manifest *owned; /* the manifest ckpt_rename built */
    const char **to;      /* new name per entry */
    size_t changed;
};

/* ------------------------------------------------------------ rules */

/* p as whole segments: "module" and "module." both mean "module.". */
static const char *segments(ckpt_arena *a, const char *p) {
    size_t n = strlen(p);
    return n && p[n - 1] == '.' ? p : ckpt_arena_printf(a, "%s.", p);
}

static int strip_prefix(ckpt_rename_plan *p, const char **cur, const char *arg, size_t *hits) {
    const char *pre = segments(&p->arena, arg);
    if (!pre) return ckpt_err_nomem();
    size_t n = strlen(pre);
    for (size_t i = 0; i < p->m->n; i++)
        if (strncmp(cur[i], pre, n) == 0) {
            cur[i] += n;
            (*hits)++;
        }
    return 0;
}

static int add_prefix(ckpt_rename_plan *p, const char **cur, const char *arg, size_t *hits) {
    const char *pre = segments(&p->arena, arg);
    if (!pre) return ckpt_err_nomem();
    for (size_t i = 0; i < p->m->n; i++) {
        /* a bare top-level tensor ("") becomes the prefix's last segment */
        cur[i] = cur[i][0] ? ckpt_arena_printf(&p->arena, "%s%s", pre, cur[i])
                           : ckpt_arena_strndup(&p->arena, pre, strlen(pre) - 1);
        if (!cur[i]) return ckpt_err_nomem();
        (*hits)++;
    }
    return 0;
}

/* Every occurrence of `old` made of whole segments, left to right. */
static int replace(ckpt_rename_plan *p, const char **cur, const char *old, const char *new_,
                   size_t *hits) {
    size_t on = strlen(old), nn = strlen(new_);
    for (size_t i = 0; i < p->m->n; i++) {
        const char *s = cur[i];
        size_t len = strlen(s), count = 0;
        for (size_t pos = 0; pos + on <= len;) {
            if (memcmp(s + pos, old, on) == 0 && ckpt_key_aligned(s, len, pos, on)) {
                count++;
                pos += on;
            } else {
                pos++;
            }
        }
        if (!count) continue;
        size_t out_len = len - count * on + count * nn;
        char *d = ckpt_arena_alloc(&p->arena, out_len + 1);
        if (!d) return ckpt_err_nomem();
        size_t w = 0;
        for (size_t pos = 0; pos < len;) {
            if (pos + on <= len && memcmp(s + pos, old, on) == 0 &&
                ckpt_key_aligned(s, len, pos, on)) {
                memcpy(d + w, new_, nn);
                w += nn;
                pos += on;
            } else {
                d[w++] = s[pos++];
            }
        }
        d[w] = '\0';
        cur[i] = d;
        (*hits)++;
    }
    return 0;
}

/* "[3, 8]" of e, in the arena. */
static const char *shape_text(ckpt_arena *a, const ckpt_manifest_entry *e) {
    const char *s = "[";
    for (unsigned d = 0; s && d < e->ndim; d++)
        s = ckpt_arena_printf(a, "%s%s%llu", s, d ? ", " : "", (unsigned long long)e->shape[d]);
    return s ? ckpt_arena_printf(a, "%s]", s) : NULL;
}

#define WHY_NAMED 3 /* mismatches a refusal names, per kind */

/* Why the best rewrite gives no complete match: the keys renamed as it
 * renames them, matched again, their shape and dtype mismatches (the
 * first few named) and the keys left missing or unexpected. "" when the
 * match says nothing more (the rewrite gives two keys one name); NULL on
 * NOMEM. */
static const char *auto_why(ckpt_rename_plan *p, const ckpt_match_result *best,
                            const ckpt_manifest *spec) {
    ckpt_manifest *under = NULL;
    ckpt_match_result *r = NULL;
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    const char *s = "";
    int rc = ckpt_manifest_new(&under, p->m->name);
    for (size_t i = 0; !rc && i < p->m->n; i++) {
        const ckpt_manifest_entry *e = &p->m->entries[i];
        rc = ckpt_manifest_add(under, ckpt_match_rewritten(best, i), e->dtype, e->ndim, e->shape);
    }
    if (!rc) rc = ckpt_match(&r, under, spec, &o);
    for (int k = 0; !rc && s && k < 2; k++) {
        ckpt_match_list list = k ? CKPT_MATCH_DTYPE_MISMATCH : CKPT_MATCH_SHAPE_MISMATCH;
        size_t n = ckpt_match_count(r, list);
        if (n == 0) continue;
        s = ckpt_arena_printf(&p->arena, "%s; %zu differ%s in %s: ", s, n, n == 1 ? "s" : "",
                              k ? "dtype" : "shape");
        for (size_t i = 0; s && i < n && i < WHY_NAMED; i++) {
            const ckpt_match_item *it = ckpt_match_item_at(r, list, i);
            const char *c = k ? it->checkpoint->dtype : shape_text(&p->arena, it->checkpoint);
            const char *x = k ? it->expected->dtype : shape_text(&p->arena, it->expected);
            s = c && x ? ckpt_arena_printf(&p->arena, "%s%s%s (checkpoint %s, expected %s)", s,
                                           i ? ", " : "", it->name, c, x)
                       : NULL;
        }
        if (s && n > WHY_NAMED) s = ckpt_arena_printf(&p->arena, "%s, ...", s);
    }
    if (!rc && s && ckpt_match_count(r, CKPT_MATCH_MISSING))
        s = ckpt_arena_printf(&p->arena, "%s; %zu left missing", s,
                              ckpt_match_count(r, CKPT_MATCH_MISSING));
    if (!rc && s && ckpt_match_count(r, CKPT_MATCH_UNEXPECTED))
        s = ckpt_arena_printf(&p->arena, "%s; %zu left unexpected", s,
                              ckpt_match_count(r, CKPT_MATCH_UNEXPECTED));
    ckpt_match_result_free(r);
    ckpt_manifest_free(under);
    return rc == CKPT_E_NOMEM ? NULL : rc ? "" : s;
}

/* The rewrite ckpt_match infers (and would apply with normalize) between
 * the current names and the spec; it must give a complete match. */
static int auto_rule(ckpt_rename_plan *p, const char **cur, const ckpt_manifest *spec,
                     size_t *hits) {
    ckpt_manifest *now = NULL;
    ckpt_match_result *r = NULL;
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    int rc = ckpt_manifest_new(&now, p->m->name);
    for (size_t i = 0; !rc && i < p->m->n; i++) {
        const ckpt_manifest_entry *e = &p->m->entries[i];
        rc = ckpt_manifest_add(now, cur[i], e->dtype, e->ndim, e->shape);
        if (rc == CKPT_E_INVALID_ARG) /* two keys already share a name */
            rc = ckpt_err(CKPT_E_MISMATCH, p->m->name, "", CKPT_NO_OFFSET,
                          "two keys are named '%s' before --auto", cur[i]);
    }
    if (!rc) rc = ckpt_match(&r, now, spec, &o);
    if (!rc) {
        const ckpt_rewrite *rw = ckpt_match_rewrite(r);
        if (rw && rw->applied && ckpt_match_ignored_count(r)) {
            /* the spec is one entry of a training checkpoint: renaming
             * would keep the others beside it, and the file still would
             * not load */
            rc = ckpt_err(CKPT_E_MISMATCH, p->m->name, "", CKPT_NO_OFFSET,
                          "--auto: the keys of %s are one entry of the checkpoint (%s): "
                          "ckpt convert --select ENTRY writes that entry alone, with its "
                          "own keys",
                          spec->name, rw->description);
        } else if (rw && rw->applied) {
            for (size_t i = 0; !rc && i < p->m->n; i++) {
                const char *to = ckpt_match_rewritten(r, i);
                if (strcmp(to, cur[i]) == 0) continue;
                if (!(cur[i] = ckpt_arena_strdup(&p->arena, to))) rc = ckpt_err_nomem();
                (*hits)++;
            }
        } else if (ckpt_match_complete(r)) {
            /* already matching: the rule matches no key */
        } else if (rw) {
            const char *why = auto_why(p, r, spec);
            rc = why ? ckpt_err(CKPT_E_MISMATCH, p->m->name, "", CKPT_NO_OFFSET,
                                "--auto: the best rewrite, %s, matches %llu of %zu keys of %s%s: "
                                "no complete match (see ckpt match --normalize)",
                                rw->description, (unsigned long long)rw->matches, spec->n,
                                spec->name, why)
                     : ckpt_err_nomem();
        } else {
            rc = ckpt_err(CKPT_E_MISMATCH, p->m->name, "", CKPT_NO_OFFSET,
                          "--auto: no unique rewrite makes the keys match %s (%zu candidate%s; "
                          "see ckpt match)",
                          spec->name, ckpt_match_candidate_count(r),
                          ckpt_match_candidate_count(r) == 1 ? "" : "s");
        }
    }
    ckpt_match_result_free(r);
    ckpt_manifest_free(now);
    return rc;
}

static const char *rule_text(ckpt_arena *a, const ckpt_rename_rule *r) {
    switch (r->op) {
    case CKPT_RENAME_STRIP_PREFIX: return ckpt_arena_printf(a, "--strip-prefix '%s'", r->arg);
    case CKPT_RENAME_ADD_PREFIX: return ckpt_arena_printf(a, "--add-prefix '%s'", r->arg);
    case CKPT_RENAME_REPLACE: return ckpt_arena_printf(a, "--replace '%s=%s'", r->arg, r->arg2);
    default: return ckpt_arena_printf(a, "--auto '%s'", r->spec->name);
    }
}

static int check_rule(const ckpt_rename_rule *r) {
    int ok;
    switch (r->op) {
    case CKPT_RENAME_STRIP_PREFIX:
    case CKPT_RENAME_ADD_PREFIX: ok = r->arg && r->arg[0] && strcmp(r->arg, ".") != 0; break;
    case CKPT_RENAME_REPLACE: ok = r->arg && r->arg[0] && r->arg2; break;
    case CKPT_RENAME_AUTO: ok = r->spec != NULL; break;
    default: ok = 0;
    }
    return ok ? 0
              : ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                         "rename rule: expected a non-empty prefix, OLD (and NEW), or a spec");
}

static int apply_rules(ckpt_rename_plan *p, const ckpt_rename_rule *rules, size_t nrules) {
    const char **cur = p->to;
    for (size_t k = 0; k < nrules; k++) {
        const ckpt_rename_rule *r = &rules[k];
        size_t hits = 0;
        int rc = check_rule(r);
        if (rc) return rc;
        switch (r->op) {
        case CKPT_RENAME_STRIP_PREFIX: rc = strip_prefix(p, cur, r->arg, &hits); break;
        case CKPT_RENAME_ADD_PREFIX: rc = add_prefix(p, cur, r->arg, &hits); break;
        case CKPT_RENAME_REPLACE: rc = replace(p, cur, r->arg, r->arg2, &hits); break;
        default: rc = auto_rule(p, cur, r->spec, &hits); break;
        }
        if (rc) return rc;
        if (!hits) {
            const char *t = rule_text(&p->arena, r);
            return ckpt_err(CKPT_E_NOTFOUND, p->m->name, "", CKPT_NO_OFFSET, "%s matches no key%s",
                            t ? t : "a rule",
                            r->op == CKPT_RENAME_AUTO ? " (the keys already match)" : "");
        }
    }
    return 0;
}

/* Two keys may not end up with one name. */
static int check_collisions(ckpt_rename_plan *p) {
    ckpt_strmap seen = {0};
    int rc = ckpt_strmap_reserve(&seen, p->m->n);
    for (size_t i = 0; !rc && i < p->m->n; i++) {
        ckpt_strmap_slot *sl;
        int put = ckpt_strmap_put(&seen, p->to[i], strlen(p->to[i]), i, &sl);
        if (put < 0)
            rc = put;
        else if (put == 0)
            rc = ckpt_err(CKPT_E_MISMATCH, p->m->name, "", CKPT_NO_OFFSET,
                          "'%s' and '%s' would both be named '%s'", p->m->entries[sl->val].name,
                          p->m->entries[i].name, p->to[i]);
    }
    ckpt_strmap_free(&seen);
    return rc;
}

int ckpt_rename_plan_new(ckpt_rename_plan **out, const ckpt_manifest *m,
                         const ckpt_rename_rule *rules, size_t nrules) {
    if (!out || !m || (nrules && !rules))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "rename: NULL argument");
    *out = NULL;
    ckpt_rename_plan *p = ckpt_malloc(sizeof *p);
    if (!p) return ckpt_err_nomem();
    memset(p, 0, sizeof *p);
    p->m = m;
    p->to = ckpt_arena_array(&p->arena, m->n ? m->n : 1, sizeof *p->to);
    int rc = p->to ? 0 : ckpt_err_nomem();
    for (size_t i = 0; !rc && i < m->n; i++) p->to[i] = m->entries[i].name;
    if (!rc) rc = apply_rules(p, rules, nrules);
    if (!rc) rc = check_collisions(p);
    for (size_t i = 0; !rc && i < m->n; i++)
        p->changed += strcmp(p->to[i], m->entries[i].name) != 0;
    if (rc) {
        ckpt_rename_plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void ckpt_rename_plan_free(ckpt_rename_plan *p) {
    if (!p) return;
    ckpt_manifest_free(p->owned);
    ckpt_arena_free(&p->arena);
    ckpt_free(p);
}

size_t ckpt_rename_plan_count(const ckpt_rename_plan *p) { return p->m->n; }
size_t ckpt_rename_plan_changed(const ckpt_rename_plan *p) { return p->changed; }

const char *ckpt_rename_plan_from(const ckpt_rename_plan *p, size_t i) {
    return i < p->m->n ? p->m->entries[i].name : NULL;
}

const char *ckpt_rename_plan_to(const ckpt_rename_plan *p, size_t i) {
    return i < p->m->n ? p->to[i] : NULL;
}

/* ------------------------------------------------------------ the tree */

/* A container on a path from the root (a DAG's shared container gets one
 * node per path, like flattening walks it). */
typedef struct node {
    const ckpt_value *v;
    size_t parent;      /* node id, CKPT_KEYS_NONE for the root */
    const char *prefix; /* flattened name of the container ("" for root) */
    size_t first, last; /* moves into this dict: a list in leaf order */
    /* rebuild: the copy, the next move to insert, and whether a key changed */
    ckpt_value *copy;
    size_t mv;
    int changed;
} node;

typedef struct leaf {
    size_t parent;       /* node id */
    const ckpt_value *v; /* the TENSOR */
    const char *key;     /* new key in the parent, or NULL: unchanged */
    int moved;           /* placed in another dict */
    size_t via;          /* moved: the target's child it was reached through */
    size_t next;         /* next move into the same dict */
} leaf;

typedef struct tree {
    const ckpt_file *f;
    ckpt_arena *a;
    node *nodes;
    size_t nnodes, ncap;
    leaf *leaves;
    size_t nleaves, lcap;
    ckpt_manifest *m;            /* walk 1: the tensors' names */
    size_t next_node, next_leaf; /* rebuild: ids in walk order */
    ckpt_value *new_root;
    const ckpt_rename_plan *plan;
    ckpt_strmap mods; /* module path -> index into mod_to (built on demand) */
    const char **mod_to;
    size_t nmods, modcap;
    int mods_built;
} tree;

static int is_container(const ckpt_value *v) {
    return v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE ||
           v->kind == CKPT_KIND_SET;
}

static size_t child_count(const ckpt_value *v) {
    return v->kind == CKPT_KIND_DICT ? v->u.dict.n : v->u.seq.n;
}

/* Walk 1: nodes and tensor leaves in walk order; names into t->m. */
static int index_enter(ckpt_walk *w, ckpt_walk_frame *n) {
    tree *t = w->ctx;
    const ckpt_value *c = n->value;
    if (w->depth == 0) return CKPT_WALK_DESCEND; /* node 0, the root */
    if (!is_container(c) && c->kind != CKPT_KIND_TENSOR) return CKPT_WALK_SKIP;
    size_t id = ckpt_walk_up(w, 1)->user;
    if (c->kind == CKPT_KIND_TENSOR) {
        const ckpt_tensor *ten = c->u.tensor;
        if (ckpt_arena_grow(t->a, (void **)&t->leaves, &t->lcap, t->nleaves + 1, sizeof(leaf)))
            return ckpt_err_nomem();
        t->leaves[t->nleaves++] = (leaf){id, c, NULL, 0, CKPT_KEYS_NONE, CKPT_KEYS_NONE};
        int rc =
            ckpt_manifest_add(t->m, w->name, ckpt_dtype_name(ten->dtype), ten->ndim, ten->shape);
        if (rc == CKPT_E_INVALID_ARG)
            return ckpt_err(CKPT_E_UNSUPPORTED, t->f->path, "", CKPT_NO_OFFSET,
                            "two tensors are named '%s': rename cannot tell them apart", w->name);
        return rc ? rc : CKPT_WALK_SKIP;
    }
    if (ckpt_arena_grow(t->a, (void **)&t->nodes, &t->ncap, t->nnodes + 1, sizeof(node)))
        return ckpt_err_nomem();
    const char *prefix = ckpt_arena_strdup(t->a, w->name);
    if (!prefix) return ckpt_err_nomem();
    size_t cid = t->nnodes++;
    t->nodes[cid] = (node){c, id, prefix, CKPT_KEYS_NONE, CKPT_KEYS_NONE, NULL, 0, 0};
    n->user = cid;
    return CKPT_WALK_DESCEND;
}

/* Decides where leaf l goes under its new name. */
static int place(tree *t, size_t l, const char *old, const char *name) {
    leaf *lf = &t->leaves[l];
    size_t len = strlen(name), via = CKPT_KEYS_NONE;
    for (size_t q = lf->parent; q != CKPT_KEYS_NONE; via = q, q = t->nodes[q].parent) {
        const node *nd = &t->nodes[q];
        size_t pl = strlen(nd->prefix);
        if (nd->v->kind != CKPT_KIND_DICT) continue;
        if (pl && !(len > pl + 1 && memcmp(name, nd->prefix, pl) == 0 && name[pl] == '.')) continue;
        lf->key = name + (pl ? pl + 1 : 0);
        if (q == lf->parent) return 0;
        if (t->nodes[lf->parent].v->kind != CKPT_KIND_DICT)
            return ckpt_err(CKPT_E_UNSUPPORTED, t->f->path, "", CKPT_NO_OFFSET,
                            "'%s' -> '%s' would move a tensor out of a %s (its indices would "
                            "shift)",
                            old, name, ckpt_value_kind_name(t->nodes[lf->parent].v->kind));
        lf->moved = 1;
        lf->via = via;
        node *target = &t->nodes[q];
        if (target->last == CKPT_KEYS_NONE)
            target->first = l;
        else
            t->leaves[target->last].next = l;
        target->last = l;
        return 0;
    }
    return ckpt_err(CKPT_E_UNSUPPORTED, t->f->path, "", CKPT_NO_OFFSET,
                    "'%s' -> '%s': the checkpoint's root is not a dict to hold it", old, name);
}

static ckpt_value *str_key(tree *t, const char *s) {
    return ckpt_value_new_str(t->a, CKPT_KIND_STR, s, strlen(s));
}

/* Keys of a dict that gained or changed keys must still be distinct. */
static int check_keys(tree *t, const ckpt_value *d, const char *prefix) {
    ckpt_strmap seen = {0};
    int rc = ckpt_strmap_reserve(&seen, d->u.dict.n);
    for (size_t i = 0; !rc && i < d->u.dict.n; i++) {
        const ckpt_value *k = d->u.dict.keys[i];
        ckpt_strmap_slot *sl;
        if (k->kind != CKPT_KIND_STR) continue;
        int put = ckpt_strmap_put(&seen, k->u.s.p, k->u.s.len, i, &sl);
        if (put < 0)
            rc = put;
        else if (put == 0)
            rc = ckpt_err(CKPT_E_UNSUPPORTED, t->f->path, "", CKPT_NO_OFFSET,
                          "two entries would be named '%s%s%s' in one dict", prefix,
                          prefix[0] ? "." : "", k->u.s.p);
    }
    ckpt_strmap_free(&seen);
    return rc;
}

static int insert_move(tree *t, ckpt_value *dict, size_t l) {
    ckpt_value *key = str_key(t, t->leaves[l].key);
    if (!key || ckpt_value_dict_set(t->a, dict, key, (ckpt_value *)t->leaves[l].v))
        return ckpt_err_nomem();
    return 0;
}

/* ------------------------------------------------------------ _metadata */

/* A torch state dict's _metadata ({module path: {"version": N}}, the
 * BUILD state of the OrderedDict) follows the tensors, as torch's
 * consume_prefix_in_state_dict_if_present does for a prefix: module A of
 * tensor A.REST renamed N becomes N without its REST when N still ends
 * with REST (whole segments); the first tensor showing it decides. This
 * serves every rule, --auto included, with the plan alone. */
static int module_map(tree *t) {
    if (t->mods_built) return 0;
    t->mods_built = 1;
    const ckpt_manifest *m = t->plan->m;
    int rc = ckpt_strmap_reserve(&t->mods, m->n);
    for (size_t l = 0; !rc && l < m->n; l++) {
        const char *o = m->entries[l].name, *n = t->plan->to[l];
        size_t ol = strlen(o), nl = strlen(n);
        for (size_t a = 0; !rc && a < ol; a++) { /* module "" then each o[0..a) */
            if (a && o[a] != '.') continue;
            const char *rest = a ? o + a + 1 : o;
            size_t rl = ol - (size_t)(rest - o);
            if (nl < rl || memcmp(n + nl - rl, rest, rl) != 0 || (nl > rl && n[nl - rl - 1] != '.'))
                continue;
            ckpt_strmap_slot *sl;
            int put = ckpt_strmap_put(&t->mods, o, a, t->nmods, &sl);
            if (put < 0) rc = put;
            if (put != 1) continue;
            if (ckpt_arena_grow(t->a, (void **)&t->mod_to, &t->modcap, t->nmods + 1,
                                sizeof *t->mod_to) ||
                !(t->mod_to[t->nmods++] = ckpt_arena_strndup(t->a, n, nl > rl ? nl - rl - 1 : 0)))
                rc = ckpt_err_nomem();
        }
    }
    return rc;
}

/* The new path of module `full`: its own mapping, else its nearest mapped
 * ancestor's with the rest appended (modules without tensors), else
 * unchanged. NULL when out of memory. */
static const char *module_to(tree *t, const char *full) {
    size_t len = strlen(full);
    for (size_t a = len;; a--) { /* full[0..a) is an ancestor (or full) */
        if (a == len || a == 0 || full[a] == '.') {
            ckpt_strmap_slot *sl = ckpt_strmap_find(&t->mods, full, a, ckpt_strmap_hash(full, a));
            if (sl) {
                const char *to = t->mod_to[sl->val], *rest = full + a + (a > 0 && a < len);
                if (a == len) return to;
                return to[0] ? ckpt_arena_printf(t->a, "%s.%s", to, rest)
                             : ckpt_arena_strdup(t->a, rest);
            }
        }
        if (a == 0) return full;
    }
}

/* Copy of dict `copy`'s state with its "_metadata" keys renamed (keys are
 * module paths relative to the dict, at `prefix`); a key whose module left
 * the dict stays as it is. Two keys becoming one: the later value, at the
 * first's place, as torch's rename does. */
static int rename_metadata(tree *t, ckpt_value *copy, const char *prefix) {
    const ckpt_value *state = copy->u.dict.state, *md = NULL;
    size_t at = 0;
    for (size_t i = 0; i < state->u.dict.n; i++) {
        const ckpt_value *k = state->u.dict.keys[i];
        if (k->kind == CKPT_KIND_STR && strcmp(k->u.s.p, "_metadata") == 0 &&
            state->u.dict.vals[i]->kind == CKPT_KIND_DICT) {
            md = state->u.dict.vals[i];
            at = i;
        }
    }
    if (!md) return 0;
    int rc = module_map(t);
    if (rc) return rc;
    size_t pl = strlen(prefix);
    ckpt_value *nmd = ckpt_value_new_like(t->a, md), *nstate = ckpt_value_new_like(t->a, state);
    ckpt_strmap seen = {0};
    if (!nmd || !nstate) return ckpt_err_nomem();
    for (size_t i = 0; !rc && i < md->u.dict.n; i++) {
        ckpt_value *k = md->u.dict.keys[i], *v = md->u.dict.vals[i];
        if (k->kind == CKPT_KIND_STR) {
            const char *full = !pl           ? k->u.s.p
                               : k->u.s.p[0] ? ckpt_arena_printf(t->a, "%s.%s", prefix, k->u.s.p)
                                             : prefix;
            const char *to = full ? module_to(t, full) : NULL;
            if (!to) {
                rc = ckpt_err_nomem();
                break;
            }
            const char *rel = !pl                                             ? to
                              : strcmp(to, prefix) == 0                       ? ""
                              : strncmp(to, prefix, pl) == 0 && to[pl] == '.' ? to + pl + 1
                                                                              : NULL;
            if (rel && strcmp(rel, k->u.s.p) != 0 && !(k = str_key(t, rel))) {
                rc = ckpt_err_nomem();
                break;
            }
            ckpt_strmap_slot *sl;
            int put = ckpt_strmap_put(&seen, k->u.s.p, k->u.s.len, nmd->u.dict.n, &sl);
            if (put < 0) rc = put;
            if (put == 0) {
                nmd->u.dict.vals[sl->val] = v;
                continue;
            }
        }
        if (!rc && ckpt_value_dict_set(t->a, nmd, k, v)) rc = ckpt_err_nomem();
    }
    ckpt_strmap_free(&seen);
    for (size_t i = 0; !rc && i < state->u.dict.n; i++)
        if (ckpt_value_dict_set(t->a, nstate, state->u.dict.keys[i],
                                i == at ? nmd : state->u.dict.vals[i]))
            rc = ckpt_err_nomem();
    if (!rc) copy->u.dict.state = nstate;
    return rc;
}

/* Walk 2, in walk 1's order: a copy of each node with the plan applied,
 * put into its parent's copy when its children are done (a dict that
 * moves emptied is left out). Tensors moved into a dict take the place of
 * the branch they came from ({"state_dict": {...}, "epoch": 3} stripped
 * of "state_dict." keeps the tensors first). */
static int put(tree *t, node *parent, ckpt_value *key, ckpt_value *c) {
    if (parent->v->kind == CKPT_KIND_DICT ? ckpt_value_dict_set(t->a, parent->copy, key, c)
                                          : ckpt_value_append(t->a, parent->copy, c))
        return ckpt_err_nomem();
    return 0;
}

static int open_copy(tree *t, size_t id) {
    node *nd = &t->nodes[id];
    nd->copy = ckpt_value_new_like(t->a, nd->v); /* an OrderedDict stays one */
    if (!nd->copy) return ckpt_err_nomem();
    nd->mv = nd->first;
    nd->changed = nd->first != CKPT_KEYS_NONE;
    return 0;
}

static int rebuild_enter(ckpt_walk *w, ckpt_walk_frame *n) {
    tree *t = w->ctx;
    ckpt_value *c = (ckpt_value *)n->value, *key = (ckpt_value *)n->key;
    int rc;
    if (w->depth == 0) return open_copy(t, 0); /* n->user is 0 */
    node *pn = &t->nodes[ckpt_walk_up(w, 1)->user];
    if (c->kind == CKPT_KIND_TENSOR) {
        const leaf *lf = &t->leaves[t->next_leaf++];
        if (lf->moved) {
            pn->changed = 1;
            return CKPT_WALK_SKIP;
        }
        if (lf->key) {
            pn->changed = 1;
            if (!(key = str_key(t, lf->key))) return ckpt_err_nomem();
        }
    } else if (is_container(c)) {
        size_t cid = t->next_node++;
        for (; pn->mv != CKPT_KEYS_NONE && t->leaves[pn->mv].via == cid;
             pn->mv = t->leaves[pn->mv].next)
            if ((rc = insert_move(t, pn->copy, pn->mv))) return rc;
        n->user = cid;
        return open_copy(t, cid);
    }
    rc = put(t, pn, key, c);
    return rc ? rc : CKPT_WALK_SKIP;
}

static int rebuild_leave(ckpt_walk *w, ckpt_walk_frame *n) {
    tree *t = w->ctx;
    node *nd = &t->nodes[n->user];
    ckpt_value *copy = nd->copy;
    int rc;
    if (nd->changed && copy->kind == CKPT_KIND_DICT && (rc = check_keys(t, copy, nd->prefix)))
        return rc;
    if (copy->kind == CKPT_KIND_DICT && copy->u.dict.state &&
        (rc = rename_metadata(t, copy, nd->prefix)))
        return rc;
    if (w->depth == 0) {
        t->new_root = copy;
        return 0;
    }
    int emptied = copy->kind == CKPT_KIND_DICT && copy->u.dict.n == 0 && child_count(nd->v) > 0;
    return emptied ? 0 : put(t, &t->nodes[nd->parent], (ckpt_value *)n->key, copy);
}

/* ------------------------------------------------------------ ckpt_rename */

static ckpt_format output_format(const ckpt_file *f) {
    ckpt_format in = ckpt_file_format(f);
    return in == CKPT_FORMAT_SAFETENSORS || in == CKPT_FORMAT_SAFETENSORS_SHARDED
               ? CKPT_FORMAT_SAFETENSORS
               : CKPT_FORMAT_TORCH_ZIP;
}

/* The input's metadata without ckpt's own keys (the writer adds fresh
 * ones). */
static int metadata(const ckpt_file *f, ckpt_arena *a, ckpt_write_options *w) {
    const char **k = ckpt_arena_array(a, f->nmeta ? f->nmeta : 1, sizeof *k);
    const char **v = ckpt_arena_array(a, f->nmeta ? f->nmeta : 1, sizeof *v);
    if (!k || !v) return ckpt_err_nomem();
    size_t n = 0;
    for (size_t i = 0; i < f->nmeta; i++)
        if (!ckpt_wr_meta_reserved(f->meta_keys[i])) {
            k[n] = f->meta_keys[i];
            v[n++] = f->meta_vals[i];
        }
    *w = (ckpt_write_options){
        .version = CKPT_WRITE_OPTIONS_VERSION, .meta_keys = k, .meta_values = v, .nmeta = n};
    return 0;
}

static int rename_file(ckpt_rename_plan **plan, const ckpt_file *f, const char *out,
                       const ckpt_rename_rule *rules, size_t nrules, ckpt_arena *a) {
    const ckpt_value *root;
    int rc = ckpt_structure_decode(&root, f, a);
    if (rc) return rc;
    if (!root || root->kind == CKPT_KIND_TENSOR || !is_container(root))
        return ckpt_err(CKPT_E_UNSUPPORTED, f->path, "", CKPT_NO_OFFSET,
                        "rename needs a dict, list or tuple of tensors at the top");
    tree t = {0};
    t.f = f;
    t.a = a;
    ckpt_manifest *m = NULL;
    ckpt_rename_plan *p = NULL;
    if (ckpt_arena_grow(a, (void **)&t.nodes, &t.ncap, 1, sizeof(node))) return ckpt_err_nomem();
    t.nodes[t.nnodes++] =
        (node){root, CKPT_KEYS_NONE, "", CKPT_KEYS_NONE, CKPT_KEYS_NONE, NULL, 0, 0};
    ckpt_walk w;
    ckpt_walk_init(&w, &f->opts.limits, f->path, "");
    w.names = 1;
    w.enter = index_enter;
    w.ctx = &t;
    rc = ckpt_manifest_new(&m, f->path);
    t.m = m;
    if (!rc) rc = ckpt_walk_run(&w, root);
    if (!rc) rc = ckpt_rename_plan_new(&p, m, rules, nrules);
    if (rc) {
        ckpt_manifest_free(m);
        return rc;
    }
    p->owned = m;
    *plan = p;
    for (size_t l = 0; !rc && l < t.nleaves; l++)
        if (strcmp(p->to[l], m->entries[l].name) != 0)
            rc = place(&t, l, m->entries[l].name, p->to[l]);
    if (rc || !out) return rc;
    ckpt_write_options wo;
    t.next_node = 1;
    t.plan = p;
    w.enter = rebuild_enter;
    w.leave = rebuild_leave;
    rc = ckpt_walk_run(&w, root);
    ckpt_strmap_free(&t.mods);
    if (!rc) rc = metadata(f, a, &wo);
    if (!rc) rc = ckpt_write_value(t.new_root, out, output_format(f), &wo, NULL);
    return rc;
}

int ckpt_rename(ckpt_rename_plan **plan, const char *in, const char *out,
                const ckpt_rename_rule *rules, size_t nrules, const ckpt_open_options *opts) {
    ckpt_rename_plan *p = NULL;
    if (plan) *plan = NULL;
    if (!in || (nrules && !rules))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "rename: NULL argument");
    if (nrules == 0)
        return ckpt_err(CKPT_E_INVALID_ARG, in, "", CKPT_NO_OFFSET, "rename: no rule given");
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, in, opts);
    if (rc) return rc;
    /* OUT named for the other format would hold bytes its loader rejects */
    ckpt_format named = out ? ckpt_wr_format_for_path(out) : (ckpt_format)0;
    if ((named == CKPT_FORMAT_SAFETENSORS || named == CKPT_FORMAT_TORCH_ZIP ||
         named == CKPT_FORMAT_DCP) &&
        named != output_format(f)) {
        ckpt_format kept = output_format(f);
        ckpt_close(f);
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "rename writes IN's format, %s, and OUT's name says %s: name OUT "
                        "*%s, then `ckpt convert` it if another format is wanted",
                        ckpt_format_name(kept), ckpt_format_name(named),
                        kept == CKPT_FORMAT_SAFETENSORS ? ".safetensors" : ".pt");
    }
    ckpt_arena a = {0};
    rc = rename_file(&p, f, out, rules, nrules, &a);
    ckpt_arena_free(&a);
    ckpt_close(f);
    if (rc || !plan) {
        ckpt_rename_plan_free(p);
        return rc;
    }
    *plan = p;
    return 0;
}
