/* rules.c - key segments, wrapper segments, and prefix
 * inference: which rewrite of checkpoint keys matches the expected keys
 * (FORMATS.md §4.6).
 *
 * Inference without quadratic scans: a rewrite that maps checkpoint key c
 * onto expected key e leaves a common run of whole trailing segments r, so
 * c = S + r and e = P + r. A few unmatched checkpoint keys (anchors) put
 * their segment suffixes in a small table; one pass over the unmatched
 * expected keys looks up each of their suffixes there and proposes (S, P).
 * The proposals most anchors agree on are then evaluated over all keys. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "format/structure.h"
#include "keys/keys.h"

/* ------------------------------------------------------------ segments */

const char *const ckpt_wrappers[CKPT_NWRAPPERS] = {"_orig_mod.", "_fsdp_wrapped_module.",
                                                   "_checkpoint_wrapped_module."};

int ckpt_key_aligned(const char *s, size_t len, size_t pos, size_t n) {
    if (pos > len || n > len - pos) return 0;
    if (pos > 0 && s[pos - 1] != '.') return 0;
    size_t end = pos + n;
    return end == len || s[end] == '.' || (n > 0 && s[end - 1] == '.');
}

/* The wrapper starting at s[pos] (a segment start), or -1. Wrappers end
 * with '.', so a match is never the last segment. */
static int wrapper_at(const char *s, size_t len, size_t pos) {
    if (s[pos] != '_') return -1;
    for (int w = 0; w < CKPT_NWRAPPERS; w++) {
        size_t n = strlen(ckpt_wrappers[w]);
        if (n <= len - pos && memcmp(s + pos, ckpt_wrappers[w], n) == 0) return w;
    }
    return -1;
}

unsigned ckpt_key_wrappers(const char *s, size_t len) {
    unsigned mask = 0;
    /* every wrapper starts a segment with '_': most keys have none */
    if (len == 0 || (s[0] != '_' && !memmem(s, len, "._", 2))) return 0;
    for (size_t pos = 0; pos < len;) {
        int w = wrapper_at(s, len, pos);
        if (w >= 0) {
            mask |= 1u << w;
            pos += strlen(ckpt_wrappers[w]);
            continue;
        }
        const char *dot = memchr(s + pos, '.', len - pos);
        if (!dot) break;
        pos = (size_t)(dot - s) + 1;
    }
    return mask;
}

size_t ckpt_key_drop_wrappers(const char *s, size_t len, char *dst) {
    size_t out = 0;
    for (size_t pos = 0; pos < len;) {
        int w = wrapper_at(s, len, pos);
        if (w >= 0) {
            pos += strlen(ckpt_wrappers[w]);
            continue;
        }
        const char *dot = memchr(s + pos, '.', len - pos);
        size_t end = dot ? (size_t)(dot - s) + 1 : len;
        memmove(dst + out, s + pos, end - pos);
        out += end - pos;
        pos = end;
    }
    dst[out] = '\0';
    return out;
}

/* Start offsets of the first segments of s: starts[k] is where segment k
 * begins (starts[0] = 0). Returns how many (at most max), counting only
 * segments that begin before the end of s. */
static size_t segment_starts(const char *s, size_t len, size_t *starts, size_t max) {
    size_t n = 0;
    for (size_t pos = 0; n < max && pos < len;) {
        starts[n++] = pos;
        const char *dot = memchr(s + pos, '.', len - pos);
        if (!dot) break;
        pos = (size_t)(dot - s) + 1;
    }
    return n;
}

/* ------------------------------------------------------------ rewrites */

size_t ckpt_rule_apply(const ckpt_rule *r, const char *s, size_t len, char *dst, int *covered) {
    char *x = dst + r->add_len; /* the key as it enters the prefix step */
    size_t n = r->canon ? ckpt_key_drop_wrappers(s, len, x) : (memmove(x, s, len), len);
    *covered = n >= r->strip_len && memcmp(x, r->strip, r->strip_len) == 0;
    if (!*covered) {
        memmove(dst, x, n);
        dst[n] = '\0';
        return n;
    }
    memcpy(dst, r->add, r->add_len);
    memmove(dst + r->add_len, x + r->strip_len, n - r->strip_len);
    n = r->add_len + n - r->strip_len;
    dst[n] = '\0';
    return n;
}

/* Leading segments a rewrite may strip or add, anchors sampled among the
 * unmatched checkpoint keys, distinct targets an anchor suffix may have
 * before it says nothing (a suffix like "weight" fits everything), and
 * candidates evaluated over all keys. */
#define MAX_SEGS 8
#define NANCHORS 32
#define MAX_TARGETS 4
#define MAX_EVAL 12

typedef struct slot {
    const char *x; /* anchor key, as is or without its wrappers */
    size_t cut;    /* strip = x[0..cut) */
    size_t next;   /* next slot with the same suffix */
    size_t ntargets;
    int ambiguous;
    const char *p[MAX_TARGETS]; /* add = p[t][0..plen[t]) */
    size_t plen[MAX_TARGETS];
} slot;

/* A proposed (S, P); whether wrappers are dropped first is decided when
 * it is evaluated (both ways when the checkpoint has wrappers). */
typedef struct cand {
    const char *strip, *add; /* NUL-terminated, in the map key "S\0P" */
    size_t strip_len, add_len;
    uint64_t votes; /* anchor slots proposing it */
} cand;

typedef struct infer {
    ckpt_arena *a;
    const ckpt_manifest *c, *e;
    const size_t *c2e;
    slot *slots;
    size_t nslots, cap;
    ckpt_strmap suffixes; /* suffix -> first slot */
    cand *cands;
    size_t ncands, ccap;
    ckpt_strmap cand_index; /* key -> cand */
    unsigned wrappers;      /* wrappers present in checkpoint keys */
} infer;

/* Registers the suffixes of anchor x (the first MAX_SEGS + 1 of them). */
static int add_anchor(infer *in, const char *x, size_t len) {
    size_t starts[MAX_SEGS + 1];
    size_t n = segment_starts(x, len, starts, MAX_SEGS + 1);
    for (size_t k = 0; k < n; k++) {
        if (ckpt_arena_grow(in->a, (void **)&in->slots, &in->cap, in->nslots + 1, sizeof(slot)))
            return ckpt_err_nomem();
        size_t id = in->nslots++;
        slot *sl = &in->slots[id];
        memset(sl, 0, sizeof *sl);
        sl->x = x;
        sl->cut = starts[k];
        sl->next = CKPT_KEYS_NONE;
        ckpt_strmap_slot *ms;
        int rc = ckpt_strmap_put(&in->suffixes, x + starts[k], len - starts[k], id, &ms);
        if (rc < 0) return rc;
        if (rc == 0) { /* same suffix as an earlier slot: chain */
            sl->next = ms->val;
            ms->val = id;
        }
    }
    return 0;
}

static int pick_anchors(infer *in) {
    size_t nc = in->c->n, unmatched = 0;
    for (size_t i = 0; i < nc; i++) {
        const char *s = in->c->entries[i].name;
        size_t len = strlen(in->c->entries[i].name);
        in->wrappers |= ckpt_key_wrappers(s, len);
        if (in->c2e[i] == CKPT_KEYS_NONE) unmatched++;
    }
    size_t want = unmatched < NANCHORS ? unmatched : NANCHORS, seen = 0, taken = 0;
    for (size_t i = 0; i < nc && taken < want; i++) {
        if (in->c2e[i] != CKPT_KEYS_NONE) continue;
        /* evenly spread over the unmatched keys: anchor t is the
         * (t * unmatched / want)-th of them */
        if (seen++ != taken * unmatched / want) continue;
        taken++;
        const char *s = in->c->entries[i].name;
        size_t len = strlen(in->c->entries[i].name);
        int rc = add_anchor(in, s, len);
        if (rc) return rc;
        if (ckpt_key_wrappers(s, len)) {
            char *x = ckpt_arena_alloc(in->a, len + 1);
            if (!x) return ckpt_err_nomem();
            size_t n = ckpt_key_drop_wrappers(s, len, x);
            if ((rc = add_anchor(in, x, n))) return rc;
        }
    }
    return 0;
}

/* One pass over the unmatched expected keys: every suffix found in the
 * anchor table gives that anchor slot a target prefix. */
static int collect_targets(infer *in) {
    const ckpt_manifest *e = in->e;
    unsigned char *hit = ckpt_malloc(e->n ? e->n : 1);
    if (!hit) return ckpt_err_nomem();
    memset(hit, 0, e->n);
    for (size_t i = 0; i < in->c->n; i++)
        if (in->c2e[i] != CKPT_KEYS_NONE) hit[in->c2e[i]] = 1;
    for (size_t j = 0; j < e->n; j++) {
        if (hit[j]) continue;
        const char *s = e->entries[j].name;
        size_t len = strlen(e->entries[j].name), starts[MAX_SEGS + 1];
        size_t n = segment_starts(s, len, starts, MAX_SEGS + 1);
        for (size_t k = 0; k < n; k++) {
            const char *suf = s + starts[k];
            size_t slen = len - starts[k];
            ckpt_strmap_slot *ms =
                ckpt_strmap_find(&in->suffixes, suf, slen, ckpt_strmap_hash(suf, slen));
            for (size_t id = ms ? ms->val : CKPT_KEYS_NONE; id != CKPT_KEYS_NONE;
                 id = in->slots[id].next) {
                slot *sl = &in->slots[id];
                size_t t;
                if (sl->ambiguous) continue;
                for (t = 0; t < sl->ntargets; t++)
                    if (sl->plen[t] == starts[k] && memcmp(sl->p[t], s, starts[k]) == 0) break;
                if (t < sl->ntargets) continue;
                if (sl->ntargets == MAX_TARGETS) {
                    sl->ambiguous = 1;
                    continue;
                }
                sl->p[sl->ntargets] = s;
                sl->plen[sl->ntargets++] = starts[k];
            }
        }
    }
    ckpt_free(hit);
    return 0;
}

/* Start of the last segment of p[0..n) (n > 0, p[n-1] == '.'). */
static size_t last_segment(const char *p, size_t n) {
    size_t i = n - 1;
    while (i > 0 && p[i - 1] != '.') i--;
    return i;
}

static int add_candidate(infer *in, const char *s, size_t slen, const char *p, size_t plen) {
    /* "strip a.b., add b." is "strip a." on these keys: keep the shortest
     * form so that equivalent proposals meet */
    while (slen && plen) {
        size_t ss = last_segment(s, slen), ps = last_segment(p, plen);
        if (slen - ss != plen - ps || memcmp(s + ss, p + ps, slen - ss) != 0) break;
        slen = ss;
        plen = ps;
    }
    /* S == P (both empty after reduction) is the identity, or dropping the
     * wrappers alone: kept, rank() tells which. "replace encoder.module. with encoder." strips a segment in the middle
     * of keys: never a wrapper (ordinary keys like encoder.module.x exist) */
    if (slen && plen) {
        const char *ds = memchr(s, '.', slen), *dp = memchr(p, '.', plen);
        if (ds - s == dp - p && memcmp(s, p, (size_t)(ds - s)) == 0) return 0;
    }
    size_t klen = slen + 1 + plen;
    char *key = ckpt_arena_alloc(in->a, klen + 1); /* zeroed: P ends in NUL */
    if (!key) return ckpt_err_nomem();
    memcpy(key, s, slen);
    memcpy(key + slen + 1, p, plen);
    ckpt_strmap_slot *ms;
    int rc = ckpt_strmap_put(&in->cand_index, key, klen, in->ncands, &ms);
    if (rc < 0) return rc;
    if (rc == 0) {
        in->cands[ms->val].votes++;
        return 0;
    }
    if (ckpt_arena_grow(in->a, (void **)&in->cands, &in->ccap, in->ncands + 1, sizeof(cand)))
        return ckpt_err_nomem();
    in->cands[in->ncands++] = (cand){key, key + slen + 1, slen, plen, 1};
    return 0;
}

static int cmp_votes(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->votes != b->votes) return a->votes > b->votes ? -1 : 1;
    int c = strcmp(a->strip, b->strip);
    if (c) return c;
    return strcmp(a->add, b->add);
}

/* Length of the first segment of s[0..len) (up to its '.', or all). */
static size_t first_segment(const char *s, size_t len) {
    const char *dot = memchr(s, '.', len);
    return dot ? (size_t)(dot - s) : len;
}

/* 1 if strip's first segment (top bytes) is one a wrapper module puts on
 * every key (DataParallel/DDP's "module", the ckpt_wrappers). */
static int wrapper_top(const char *strip, size_t top) {
    if (top == 6 && memcmp(strip, "module", 6) == 0) return 1;
    for (int i = 0; i < CKPT_NWRAPPERS; i++)
        if (strlen(ckpt_wrappers[i]) == top + 1 && memcmp(strip, ckpt_wrappers[i], top) == 0)
            return 1;
    return 0;
}

/* What evaluate() counts while rule r rewrites every checkpoint key. */
typedef struct eval {
    const ckpt_rule *r;
    const size_t *c2e;
    unsigned char *hit;
    size_t top;  /* length of r->strip's first segment */
    int wrapped; /* that segment is a wrapper's ("module": DeepSpeed's
                    training checkpoint, or DataParallel's whole state dict) */
    uint64_t matches, covered, kept, fp;
    int outside_ok; /* uncovered keys lie in other top-level entries, none
                       a tensor at the root named as an expected key, nor
                       any tensor at the root beside a wrapper's subtree
                       ({"module.a", "extra"}: 'extra' stays unexpected) */
} eval;

static int eval_key(void *ctx, size_t i, const char *name, size_t len, int covered, size_t j) {
    eval *v = ctx;
    if (!covered) {
        int root = first_segment(name, len) == len;
        if ((root && (v->wrapped || v->c2e[i] != CKPT_KEYS_NONE)) ||
            (first_segment(name, len) == v->top && memcmp(name, v->r->strip, v->top) == 0))
            v->outside_ok = 0;
    } else {
        v->covered++;
    }
    /* a key the rule does not cover keeps its name (torch's
     * consume_prefix_in_state_dict_if_present, a dict comprehension's
     * replace): it still pairs when that name is expected */
    if (j != CKPT_KEYS_NONE && !v->hit[j]) {
        uint64_t pairing[2] = {i, j};
        v->hit[j] = 1;
        if (covered)
            v->matches++;
        else
            v->kept++;
        v->fp += XXH3_64bits(pairing, sizeof pairing);
    }
    return 0;
}

/* Whether the top-level entries a subtree rule r selects and leaves out
 * are entries of the checkpoint's root dict, as the real loader sees them
 * (torch.load(f)["model"]), the ones left out holding no weight of their
 * own (an "rng" byte tensor may stand at the root): {"model.a": t,
 * "lm_head.weight": t} is one flat state dict, whose
 * "lm_head.weight" a strict load of it rejects, never a "model" entry
 * beside an ignored one. A flat safetensors file has no such entries (its
 * root holds tensors alone); one ckpt wrote keeps its tree in
 * "ckpt.structure", and a manifest of no file that records no root entry
 * (ckpt_manifest_add_root_entry) has no tree: their entries are taken as
 * named. *ok receives the answer; returns 0 or CKPT_E_NOMEM. */
/* A tensor that may be a weight: a tensor, but not the uint8 or bool one
 * torch.get_rng_state() and its CUDA kin return (an "rng" entry). */
static int weight(const ckpt_value *v) {
    const ckpt_tensor *t = ckpt_value_tensor(v);
    return t && ckpt_tensor_dtype(t) != CKPT_DT_U8 && ckpt_tensor_dtype(t) != CKPT_DT_BOOL;
}

static int root_entries(infer *in, const ckpt_rule *r, size_t top, int *ok) {
    const ckpt_manifest *c = in->c;
    const ckpt_file *f = c->file;
    const ckpt_value *root = NULL;
    *ok = 1;
    if (f ? ckpt_structure_present(f) : !c->roots.n) return 0;
    *ok = 0;
    if (f) {
        if (f->format == CKPT_FORMAT_SAFETENSORS || f->format == CKPT_FORMAT_SAFETENSORS_SHARDED)
            return 0;
        root = ckpt_file_root(f);
        if (!root || ckpt_value_kind(root) != CKPT_KIND_DICT) return 0;
    }
    const char **others;
    size_t n;
    if (ckpt_rule_others(&others, &n, in->a, r, c)) return ckpt_err_nomem();
    ckpt_strmap want = {0}; /* entry -> 0 unseen, 1 seen */
    ckpt_strmap_slot *sl;
    int rc = ckpt_strmap_put(&want, r->strip, top, 0, &sl) < 0 ? ckpt_err_nomem() : 0;
    for (size_t k = 0; !rc && k < n; k++)
        if (ckpt_strmap_put(&want, others[k], strlen(others[k]), 0, &sl) < 0) rc = ckpt_err_nomem();
    size_t seen = 0, bad = 0, len = 0;
    if (!f) { /* the entries the manifest records */
        for (size_t k = 0; !rc && k < want.cap; k++) {
            const ckpt_strmap_slot *w = &want.slots[k];
            if (!w->s) continue;
            sl = ckpt_strmap_find(&c->roots, w->s, w->len, ckpt_strmap_hash(w->s, w->len));
            seen += sl != NULL;
            bad += sl && sl->val;
        }
    }
    for (size_t i = 0; !rc && root && i < ckpt_value_len(root); i++) {
        const ckpt_value *key = ckpt_value_key(root, i);
        const char *name = ckpt_value_kind(key) == CKPT_KIND_STR ? ckpt_value_str(key, &len)
                                                                 : ckpt_value_int_decimal(key);
        if (!name) continue;
        if (ckpt_value_kind(key) != CKPT_KIND_STR) len = strlen(name);
        if (!(sl = ckpt_strmap_find(&want, name, len, ckpt_strmap_hash(name, len))) || sl->val)
            continue;
        sl->val = 1;
        seen++;
        bad += (size_t)weight(ckpt_value_item(root, i));
    }
    *ok = !rc && seen == want.n && !bad;
    ckpt_strmap_free(&want);
    return rc;
}

/* r->matches receives the distinct expected names the checkpoint's keys
 * hit once r rewrites them (a key r does not cover keeps its name), or 0
 * when r is neither a wrapper rewrite nor a renamed part of the model: a
 * wrapper prefix is on every key (or nearly), so r covers more than half
 * of the checkpoint keys; a renamed part (layers. -> blocks.) may cover
 * fewer, but every key it covers pairs and most keys pair once renamed;
 * a rewrite of a few keys that pairs some of them only by coincidence is
 * neither. A training checkpoint ({"model": state dict,
 * "optimizer": ..., "epoch": ...}) is recognised by what its subtree is,
 * whatever its share of the keys (SGD momentum keeps one buffer per
 * parameter, a model may hold many buffers): r strips a subtree whose
 * keys pair one to one with every expected key (BatchNorm counters aside:
 * their module may fill them), some key lies outside it, and every such
 * key lies in another top-level entry (a tensor at the root named as an
 * expected key, {"_orig_mod.a", "a"}, makes the root a state dict: two
 * keys becoming one, no optimizer beside a model); r->select is then set. *fingerprint
 * receives a hash of the pairs (checkpoint entry, expected entry) formed:
 * two rules with the same pairs are one rewrite described twice. hit:
 * e->n scratch bytes. Returns 0 or CKPT_E_NOMEM. */
static int evaluate(infer *in, ckpt_rule *r, unsigned char *hit, uint64_t *fingerprint) {
    size_t top = first_segment(r->strip, r->strip_len);
    eval v = {r, in->c2e, hit, top, wrapper_top(r->strip, top), 0, 0, 0, 0, 1};
    memset(hit, 0, in->e->n);
    int rc = ckpt_rule_lookup_all(r, in->c, in->e, eval_key, &v);
    *fingerprint = v.fp;
    r->select = 0;
    r->matches = 0;
    if (rc) return rc;
    /* a BatchNorm counter the subtree lacks may be filled by its module:
     * whether it is, ckpt_match decides once the rewrite is applied */
    uint64_t counters = 0;
    for (size_t k = 0; k < in->e->ncounters; k++)
        if (!hit[in->e->counters[k]]) {
            hit[in->e->counters[k]] = 1;
            counters++;
        }
    int entries = 0;
    if (r->strip_len && v.outside_ok && v.covered < in->c->n && v.matches == v.covered &&
        v.matches + counters == in->e->n && (rc = root_entries(in, r, top, &entries)))
        return rc;
    if (entries) {
        r->select = 1;
        r->matches = v.matches;
    } else if (v.covered * 2 > in->c->n ||
               (v.covered && v.matches == v.covered && (v.matches + v.kept) * 2 > in->c->n)) {
        /* a wrapper's prefix (most keys), or a renamed part of the model:
         * every key it covers pairs, and most keys pair once renamed */
        r->matches = v.matches + v.kept;
    }
    return 0;
}

/* Whole segments in p[0..n) (n == 0 or p[n-1] == '.'). */
static unsigned count_segments(const char *p, size_t n) {
    unsigned k = 0;
    for (size_t i = 0; i < n; i++) k += p[i] == '.';
    return k;
}

static char *describe(ckpt_arena *a, const ckpt_rule *r, unsigned wrappers) {
    char *d = ckpt_arena_strdup(a, "");
    if (d && r->canon) {
        const char *sep = "drop ";
        for (int w = 0; w < CKPT_NWRAPPERS && d; w++) {
            if (!(wrappers & (1u << w))) continue;
            d = ckpt_arena_printf(a, "%s%s'%s'", d, sep, ckpt_wrappers[w]);
            sep = ", ";
        }
        if (d) d = ckpt_arena_printf(a, "%s segments", d);
    }
    if (!d || (!r->strip_len && !r->add_len)) return d;
    const char *sep = r->canon ? ", " : "";
    if (r->strip_len && r->add_len)
        return ckpt_arena_printf(a, "%s%sreplace '%.*s' with '%.*s'", d, sep, (int)r->strip_len,
                                 r->strip, (int)r->add_len, r->add);
    if (r->strip_len)
        return ckpt_arena_printf(a, "%s%sstrip '%.*s'", d, sep, (int)r->strip_len, r->strip);
    return ckpt_arena_printf(a, "%s%sadd '%.*s'", d, sep, (int)r->add_len, r->add);
}

/* Entries named in the description of a rule selecting a subtree; the
 * report lists them all. */
#define SHOW_OTHERS 4

/* describe(), and for a rule selecting a subtree the entries it leaves. */
static char *describe_rule(infer *in, const ckpt_rule *r) {
    char *d = describe(in->a, r, in->wrappers);
    if (!d || !r->select) return d;
    const char **others;
    size_t n;
    if (ckpt_rule_others(&others, &n, in->a, r, in->c)) return NULL;
    d = ckpt_arena_printf(in->a, "%s (other top-level entries ignored: ", d);
    for (size_t k = 0; d && k < n && k < SHOW_OTHERS; k++)
        d = ckpt_arena_printf(in->a, "%s%s%s", d, k ? ", " : "", others[k]);
    return d ? ckpt_arena_printf(in->a, "%s%s)", d, n > SHOW_OTHERS ? ", ..." : "") : NULL;
}

/* Best first: more matches, then the simpler rule, then by description. */
static int cmp_rules(const void *x, const void *y) {
    const ckpt_rule *a = x, *b = y;
    if (a->matches != b->matches) return a->matches > b->matches ? -1 : 1;
    if (a->complexity != b->complexity) return a->complexity < b->complexity ? -1 : 1;
    return strcmp(a->description, b->description);
}

typedef struct found {
    ckpt_rule rule;
    uint64_t fingerprint;
} found;

static int cmp_found(const void *x, const void *y) {
    return cmp_rules(&((const found *)x)->rule, &((const found *)y)->rule);
}

/* Evaluates the best-voted candidates, each with and without dropping
 * wrapper segments (when the checkpoint has any); among rules forming the
 * same pairs only the simplest stays. */
static int rank(infer *in, ckpt_rule *out, size_t max, size_t *nout) {
    uint64_t base = 0, fp;
    for (size_t i = 0; i < in->c->n; i++) base += in->c2e[i] != CKPT_KEYS_NONE;
    qsort(in->cands, in->ncands, sizeof(cand), cmp_votes);

    unsigned char *hit = ckpt_malloc(in->e->n ? in->e->n : 1);
    found *f = ckpt_malloc(2 * MAX_EVAL * sizeof *f);
    int rc = hit && f ? 0 : ckpt_err_nomem();
    size_t nf = 0;
    for (size_t i = 0; !rc && i < in->ncands && i < MAX_EVAL; i++) {
        const cand *c = &in->cands[i];
        for (int canon = 0; canon <= (in->wrappers ? 1 : 0); canon++) {
            ckpt_rule r = {.canon = canon,
                           .strip = c->strip,
                           .strip_len = c->strip_len,
                           .add = c->add,
                           .add_len = c->add_len};
            if (!canon && !c->strip_len && !c->add_len) continue; /* the identity */
            if ((rc = evaluate(in, &r, hit, &fp))) break;
            if (r.matches <= base) continue;
            /* dropping wrappers anywhere weighs more than a leading segment:
             * "strip '_orig_mod.module.'" beats the equivalent "drop
             * '_orig_mod.' segments, strip 'module.'" */
            r.complexity = count_segments(r.strip, r.strip_len) + count_segments(r.add, r.add_len) +
                           2u * (unsigned)canon;
            r.description = describe_rule(in, &r);
            if (!r.description) {
                rc = ckpt_err_nomem();
                break;
            }
            f[nf++] = (found){r, fp};
        }
    }
    if (!rc) {
        qsort(f, nf, sizeof *f, cmp_found);
        size_t n = 0;
        for (size_t i = 0; i < nf && n < max; i++) {
            size_t k;
            for (k = 0; k < i; k++)
                if (f[k].rule.matches == f[i].rule.matches && f[k].fingerprint == f[i].fingerprint)
                    break;
            if (k == i) out[n++] = f[i].rule;
        }
        *nout = n;
    }
    ckpt_free(hit);
    ckpt_free(f);
    return rc;
}

int ckpt_rules_infer(ckpt_rule *out, size_t max, size_t *nout, ckpt_arena *a,
                     const ckpt_manifest *c, const ckpt_manifest *e, const size_t *c2e) {
    infer in = {0};
    in.a = a;
    in.c = c;
    in.e = e;
    in.c2e = c2e;
    *nout = 0;
    int rc = pick_anchors(&in);
    if (rc == 0 && in.nslots) rc = collect_targets(&in);
    for (size_t id = 0; rc == 0 && id < in.nslots; id++) {
        const slot *sl = &in.slots[id];
        for (size_t t = 0; rc == 0 && !sl->ambiguous && t < sl->ntargets; t++)
            rc = add_candidate(&in, sl->x, sl->cut, sl->p[t], sl->plen[t]);
    }
    if (rc == 0 && in.ncands) rc = rank(&in, out, max, nout);
    ckpt_strmap_free(&in.suffixes);
    ckpt_strmap_free(&in.cand_index);
    return rc;
}

const ckpt_rule *ckpt_rules_best(const ckpt_rule *rules, size_t n) {
    if (!n || (n > 1 && rules[0].matches == rules[1].matches &&
               rules[0].complexity == rules[1].complexity))
        return NULL;
    return &rules[0];
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Adds the first segment of name to the set, unless it lies under r. */
static int add_other(ckpt_strmap *set, ckpt_arena *a, const ckpt_rule *r, const char *name,
                     size_t len, char *buf) {
    int covered;
    size_t n = ckpt_rule_apply(r, name, len, buf, &covered);
    if (covered) return 0;
    n = first_segment(buf, n);
    ckpt_strmap_slot *sl;
    if (ckpt_strmap_find(set, buf, n, ckpt_strmap_hash(buf, n))) return 0;
    char *seg = ckpt_arena_strndup(a, buf, n);
    if (!seg) return ckpt_err_nomem();
    int rc = ckpt_strmap_put(set, seg, n, 0, &sl);
    return rc < 0 ? rc : 0;
}

int ckpt_rule_others(const char ***out, size_t *n, ckpt_arena *a, const ckpt_rule *r,
                     const ckpt_manifest *c) {
    ckpt_strmap set = {0};
    size_t maxlen = 0;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < c->n; i++) {
        size_t len = strlen(c->entries[i].name);
        if (len > maxlen) maxlen = len;
    }
    for (size_t i = 0; i < c->nvalues; i++) {
        size_t len = strlen(c->values[i].name);
        if (len > maxlen) maxlen = len;
    }
    for (size_t i = 0; i < c->nleaves; i++) {
        size_t len = strlen(c->leaves[i]);
        if (len > maxlen) maxlen = len;
    }
    char *buf = ckpt_malloc(maxlen + r->add_len + 1);
    int rc = buf ? 0 : ckpt_err_nomem();
    for (size_t i = 0; !rc && i < c->n; i++)
        rc = add_other(&set, a, r, c->entries[i].name, strlen(c->entries[i].name), buf);
    for (size_t i = 0; !rc && i < c->nvalues; i++)
        rc = add_other(&set, a, r, c->values[i].name, strlen(c->values[i].name), buf);
    for (size_t i = 0; !rc && i < c->nleaves; i++)
        rc = add_other(&set, a, r, c->leaves[i], strlen(c->leaves[i]), buf);
    const char **names = NULL;
    if (!rc && !(names = ckpt_arena_array(a, set.n ? set.n : 1, sizeof *names)))
        rc = ckpt_err_nomem();
    for (size_t k = 0; !rc && k < set.cap; k++)
        if (set.slots[k].s) names[(*n)++] = set.slots[k].s;
    if (!rc) {
        qsort(names, *n, sizeof *names, cmp_str);
        *out = names;
    } else {
        *n = 0;
    }
    ckpt_free(buf);
    ckpt_strmap_free(&set);
    return rc;
}

typedef struct rule_stream {
    const ckpt_rule *r;
    const ckpt_manifest *c;
    ckpt_rule_visit visit;
    void *ctx;
} rule_stream;

static const char *rule_name(void *ctx, size_t i, char *buf, size_t *len, int *covered) {
    const rule_stream *s = ctx;
    *len =
        ckpt_rule_apply(s->r, s->c->entries[i].name, strlen(s->c->entries[i].name), buf, covered);
    return buf;
}

static int rule_visit(void *ctx, size_t i, const char *name, size_t len, int covered, size_t j) {
    const rule_stream *s = ctx;
    return s->visit(s->ctx, i, name, len, covered, j);
}

int ckpt_rule_lookup_all(const ckpt_rule *r, const ckpt_manifest *c, const ckpt_manifest *e,
                         ckpt_rule_visit visit, void *ctx) {
    size_t maxlen = 0;
    for (size_t i = 0; i < c->n; i++) {
        size_t len = strlen(c->entries[i].name);
        if (len > maxlen) maxlen = len;
    }
    rule_stream s = {r, c, visit, ctx};
    return ckpt_manifest_lookup_stream(e, c->n, maxlen + r->add_len + 1, rule_name, rule_visit, &s);
}
