/* walk.c - the one bounded traversal of a value tree (see walk.h). */
#include "model/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

uint64_t ckpt_walk_budget(const ckpt_limits *lim) {
    return lim->max_tensors < (UINT64_MAX - 1024) / 4 ? lim->max_tensors * 4 + 1024 : UINT64_MAX;
}

int ckpt_walk_name_fits(uint64_t max, size_t head, size_t tail) {
    return tail < max && head < max - tail;
}

int ckpt_walk_name_check(uint64_t max, size_t head, size_t tail, const char *file,
                         const char *member, uint64_t offset) {
    if (ckpt_walk_name_fits(max, head, tail)) return 0;
    size_t len = head > SIZE_MAX - tail ? SIZE_MAX : head + tail;
    return ckpt_err(CKPT_E_LIMIT, file, member, offset,
                    "flattened name of %zu bytes: expected at most %llu (max_name_bytes %llu "
                    "counts the NUL)",
                    len, (unsigned long long)(max ? max - 1 : 0), (unsigned long long)max);
}

void ckpt_walk_init(ckpt_walk *w, const ckpt_limits *lim, const char *file, const char *member) {
    ckpt_limits defaults = CKPT_LIMITS_INIT;
    if (!lim) lim = &defaults;
    *w = (ckpt_walk){0};
    w->max_depth = lim->max_depth;
    w->max_visits = ckpt_walk_budget(lim);
    w->max_name = lim->max_name_bytes;
    w->file = file ? file : "";
    w->member = member;
    w->name = "";
}

ckpt_walk_frame *ckpt_walk_up(const ckpt_walk *w, uint32_t up) {
    return up <= w->depth ? &w->stack_[w->depth - up] : NULL;
}

/* The dict an object's attributes live in: its BUILD state, or the dict
 * of a (dict, slots) state; NULL when it has none. */
static const ckpt_value *object_attrs(const ckpt_value *v) {
    const ckpt_value *d = v->u.obj.state;
    if (d && d->kind == CKPT_KIND_TUPLE && d->u.seq.n == 2) d = d->u.seq.items[0];
    return d && d->kind == CKPT_KIND_DICT ? d : NULL;
}

/* The next child of frame p (advancing it): 1 and *c filled, or 0. */
static int next_child(const ckpt_walk *w, ckpt_walk_frame *p, ckpt_walk_frame *c) {
    const ckpt_value *v = p->value;
    size_t i = p->next_;
    *c = (ckpt_walk_frame){0};
    switch (v->kind) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        if (i >= v->u.seq.n) return 0;
        p->next_++;
        *c = (ckpt_walk_frame){.value = v->u.seq.items[i], .index = i, .role = CKPT_WALK_ITEM};
        return 1;
    case CKPT_KIND_DICT:
    case CKPT_KIND_OBJECT: {
        if (v->kind == CKPT_KIND_OBJECT && (w->follow & CKPT_WALK_OBJECT_PARTS)) {
            const ckpt_value *part[2] = {v->u.obj.args, v->u.obj.state};
            while (i < 2 && !part[i]) i++;
            if (i >= 2) return 0;
            p->next_ = i + 1;
            *c = (ckpt_walk_frame){.value = part[i], .index = i, .role = CKPT_WALK_PART};
            return 1;
        }
        const ckpt_value *d = v;
        if (v->kind == CKPT_KIND_OBJECT &&
            (!(w->follow & CKPT_WALK_OBJECT_ATTRS) || !(d = object_attrs(v))))
            return 0;
        int keys = (w->follow & CKPT_WALK_KEYS) != 0;
        size_t per = keys ? 2 : 1, entry = i / per;
        p->next_++;
        if (entry < d->u.dict.n) {
            if (keys && i % 2 == 0)
                *c = (ckpt_walk_frame){
                    .value = d->u.dict.keys[entry], .index = entry, .role = CKPT_WALK_KEY};
            else
                *c = (ckpt_walk_frame){.value = d->u.dict.vals[entry],
                                       .key = d->u.dict.keys[entry],
                                       .index = entry,
                                       .role = CKPT_WALK_VALUE};
            return 1;
        }
        if (v->kind == CKPT_KIND_DICT && i == d->u.dict.n * per &&
            (w->follow & CKPT_WALK_DICT_STATE) && v->u.dict.state) {
            *c = (ckpt_walk_frame){.value = v->u.dict.state, .role = CKPT_WALK_STATE};
            return 1;
        }
        return 0;
    }
    default: return 0;
    }
}

/* Appends the child's segment to the name; c->name_len and seg_len set. */
static int push_name(ckpt_walk *w, const ckpt_walk_frame *p, ckpt_walk_frame *c) {
    char tmp[32];
    const char *seg = NULL;
    size_t n = 0;
    c->name_len = p->name_len;
    if (!w->names) return 0;
    if (c->role == CKPT_WALK_ITEM) {
        int k = snprintf(tmp, sizeof tmp, "%zu", c->index);
        n = k < 0 ? 0 : (size_t)k;
        seg = tmp;
    } else if (c->role == CKPT_WALK_VALUE && c->key->kind == CKPT_KIND_STR) {
        seg = c->key->u.s.p; /* ckpt_value_key_text's, without the call */
        n = c->key->u.s.len;
    } else if (c->role == CKPT_WALK_VALUE) {
        seg = ckpt_value_key_text(c->key, tmp, sizeof tmp, &n);
    } else {
        return 0;
    }
    size_t len = p->name_len, sep = len ? 1 : 0;
    int rc = ckpt_walk_name_check(w->max_name, len + sep, n, w->file, w->member, CKPT_NO_OFFSET);
    if (rc) return rc;
    size_t need = len + sep + n + 1;
    if (need > w->bufcap_) {
        size_t cap = need < SIZE_MAX / 2 ? need * 2 : need;
        char *nb = ckpt_realloc(w->buf_, cap);
        if (!nb) return ckpt_err(CKPT_E_NOMEM, w->file, w->member, CKPT_NO_OFFSET, "out of memory");
        w->buf_ = nb;
        w->bufcap_ = cap;
        w->name = nb;
    }
    if (sep) w->buf_[len] = '.';
    memcpy(w->buf_ + len + sep, seg, n);
    w->buf_[len + sep + n] = '\0';
    c->name_len = len + sep + n;
    c->seg_len = n;
    return 0;
}

static void truncate_name(ckpt_walk *w, size_t len) {
    if (w->buf_) w->buf_[len] = '\0';
}

static int is_container(const ckpt_value *v) {
    return v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_SET ||
           v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_OBJECT;
}

typedef struct on_path {
    const ckpt_value *v;
    uint32_t depth;
} on_path;

static int by_value_depth(const void *a, const void *b) {
    const on_path *x = a, *y = b;
    if (x->v != y->v) return (uintptr_t)x->v < (uintptr_t)y->v ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* The depth at which a container on the path stack[0..d] first appears a
 * second time, or 0 when none does (or the search cannot allocate). The
 * path is sorted once: O(d log d), whatever max_depth allows. */
static uint32_t first_repeat(const ckpt_walk *w, uint32_t d) {
    on_path *p = ckpt_malloc(((size_t)d + 1) * sizeof *p);
    uint32_t n = 0, best = 0;
    if (!p) return 0;
    for (uint32_t j = 0; j <= d; j++)
        if (is_container(w->stack_[j].value)) p[n++] = (on_path){w->stack_[j].value, j};
    qsort(p, n, sizeof *p, by_value_depth);
    for (uint32_t i = 1; i < n; i++)
        if (p[i].v == p[i - 1].v && (i < 2 || p[i - 2].v != p[i].v) && (!best || p[i].depth < best))
            best = p[i].depth;
    ckpt_free(p);
    return best;
}

/* A bound was hit at depth d: a cycle on the path, reported as the first
 * container that reappears, else the bound itself (why; NULL: the error
 * recorded already, code rc). */
static int bound_hit(ckpt_walk *w, uint32_t d, const char *why, int rc) {
    uint32_t j = first_repeat(w, d);
    if (j && w->names) {
        truncate_name(w, w->stack_[j].name_len);
        return ckpt_err(CKPT_E_UNSUPPORTED, w->file, w->member, CKPT_NO_OFFSET,
                        "cyclic reference: \"%s\" contains itself",
                        w->stack_[j].name_len ? w->name : "(root)");
    }
    if (j)
        return ckpt_err(CKPT_E_UNSUPPORTED, w->file, w->member, CKPT_NO_OFFSET,
                        "cyclic reference: a container contains itself, %u levels down", j);
    if (!why) return rc;
    if (w->names)
        return ckpt_err(CKPT_E_LIMIT, w->file, w->member, CKPT_NO_OFFSET, "%s at \"%s\"", why,
                        w->stack_[d].name_len ? w->name : "(root)");
    return ckpt_err(CKPT_E_LIMIT, w->file, w->member, CKPT_NO_OFFSET, "%s", why);
}

/* Puts frame c at depth d (the stack holds d frames) and enters it. */
static int enter(ckpt_walk *w, uint32_t d, const ckpt_walk_frame *c) {
    if (d >= w->cap_) {
        size_t cap = w->cap_ * 2;
        int first = w->stack_ == w->first_;
        ckpt_walk_frame *ns = cap >= SIZE_MAX / sizeof *ns ? NULL
                              : first                      ? ckpt_malloc(cap * sizeof *ns)
                                      : ckpt_realloc(w->stack_, cap * sizeof *ns);
        if (!ns) return ckpt_err(CKPT_E_NOMEM, w->file, w->member, CKPT_NO_OFFSET, "out of memory");
        if (first) memcpy(ns, w->stack_, w->cap_ * sizeof *ns);
        w->stack_ = ns;
        w->cap_ = cap;
    }
    w->stack_[d] = *c;
    w->depth = d;
    char why[96];
    if (++w->visits > w->max_visits)
        return bound_hit(w, d, "object graph too large (shared substructures repeated)", 0);
    if (d > w->max_depth) {
        snprintf(why, sizeof why, "containers nested deeper than %u", w->max_depth);
        return bound_hit(w, d, why, 0);
    }
    return w->enter(w, &w->stack_[d]);
}

int ckpt_walk_run(ckpt_walk *w, const ckpt_value *root) {
    size_t plen = w->prefix && w->names ? strlen(w->prefix) : 0;
    w->visits = 0;
    w->depth = 0;
    w->name = "";
    int rc = 0;
    if (plen) {
        if ((rc = ckpt_walk_name_check(w->max_name, plen, 0, w->file, w->member, CKPT_NO_OFFSET)))
            return rc;
        if (!(w->buf_ = ckpt_malloc(plen + 1)))
            return ckpt_err(CKPT_E_NOMEM, w->file, w->member, CKPT_NO_OFFSET, "out of memory");
        memcpy(w->buf_, w->prefix, plen + 1);
        w->bufcap_ = plen + 1;
        w->name = w->buf_;
    }
    /* the frames of a shallow walk need no allocation (a walk per entry
     * of a 100k-key state dict: doctor's counts, training's) */
    ckpt_walk_frame first[8];
    w->stack_ = w->first_ = first;
    w->cap_ = sizeof first / sizeof first[0];
    ckpt_walk_frame top = {.value = root, .role = CKPT_WALK_ROOT, .name_len = plen};
    uint32_t d = 0; /* frames on the stack */
    rc = enter(w, 0, &top);
    if (rc == CKPT_WALK_DESCEND) d = 1;
    if (rc == CKPT_WALK_PRUNE) rc = w->leave ? w->leave(w, &w->stack_[0]) : 0;
    while (d > 0 && rc >= 0 && rc != CKPT_WALK_STOP) {
        ckpt_walk_frame *p = &w->stack_[d - 1], c;
        if (next_child(w, p, &c)) {
            if ((rc = push_name(w, p, &c))) {
                /* a name grows without end around a cycle too */
                if (rc == CKPT_E_LIMIT) rc = bound_hit(w, d - 1, NULL, rc);
                break;
            }
            rc = enter(w, d, &c);
            if (rc == CKPT_WALK_DESCEND) {
                d++;
                continue;
            }
            if (rc == CKPT_WALK_PRUNE) rc = w->leave ? w->leave(w, &w->stack_[d]) : 0;
            w->depth = d - 1;
            truncate_name(w, w->stack_[d - 1].name_len);
            continue;
        }
        w->depth = d - 1;
        rc = w->leave ? w->leave(w, p) : 0;
        d--;
        if (d > 0) truncate_name(w, w->stack_[d - 1].name_len);
    }
    if (w->stack_ != first) ckpt_free(w->stack_);
    ckpt_free(w->buf_);
    w->stack_ = w->first_ = NULL;
    w->buf_ = NULL;
    w->cap_ = w->bufcap_ = 0;
    w->name = "";
    return rc < 0 ? rc : 0;
}
