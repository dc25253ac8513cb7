/* hygiene.c - ckpt_keys_hygiene: wrapper prefixes left in a checkpoint's
 * keys (DataParallel/DDP "module.", torch.compile "_orig_mod.", FSDP and
 * activation-checkpointing wrappers; FORMATS.md §4.6) and the
 * `ckpt rename` rules that would remove them, checked for collisions. */
#include <string.h>

#include "base/error.h"
#include "base/shell.h"
#include "keys/keys.h"

#define MAX_FIX (CKPT_NWRAPPERS + 8) /* wrapper rules + "module." strips */

struct ckpt_keys_report {
    ckpt_arena arena;
    ckpt_key_wrapper wrappers[CKPT_NWRAPPERS + 1];
    size_t nwrappers;
    ckpt_rename_rule fix[MAX_FIX];
    size_t nfix;
    const char *root; /* the model subtree's key prefix ("" or "model.") */
    const char *fix_args;
    const char *fix_python;
    const char *collision;
};

/* Leading "module." segments of s once wrappers are dropped (a key
 * without any, `mask` 0, as it is). */
static unsigned module_depth(const char *s, size_t len, unsigned mask, char *tmp) {
    size_t n = mask ? ckpt_key_drop_wrappers(s, len, tmp) : len;
    unsigned d = 0;
    if (mask) s = tmp;
    for (size_t pos = 0; n - pos > 7 && memcmp(s + pos, "module.", 7) == 0; pos += 7) d++;
    return d;
}

/* Offset of the first segment `seg` in s (len bytes), or len. */
static size_t segment_at(const char *s, size_t len, const char *seg) {
    size_t sl = strlen(seg);
    for (size_t pos = 0; pos + sl <= len; pos++)
        if ((pos == 0 || s[pos - 1] == '.') && memcmp(s + pos, seg, sl) == 0) return pos;
    return len;
}

/* The wrappers found, outermost first: by the smallest offset each stands
 * at in a key (at[k]), ties in the order found. */
static void order_wrappers(ckpt_keys_report *r, size_t *at) {
    for (size_t i = 1; i < r->nwrappers; i++)
        for (size_t k = i; k > 0 && at[k] < at[k - 1]; k--) {
            ckpt_key_wrapper w = r->wrappers[k];
            size_t o = at[k];
            r->wrappers[k] = r->wrappers[k - 1];
            at[k] = at[k - 1];
            r->wrappers[k - 1] = w;
            at[k - 1] = o;
        }
}

/* The keys counted for "module.": those of the model subtree, from where
 * its keys start (after r->root). Over the file's own tensor names: no
 * manifest (its index costs more than the names) unless a fix is found. */
static int scan(ckpt_keys_report *r, const ckpt_file *f, unsigned *max_depth) {
    size_t rlen = strlen(r->root), n = ckpt_file_tensor_count(f);
    uint64_t has[CKPT_NWRAPPERS] = {0}, lead[CKPT_NWRAPPERS] = {0}, module = 0, module_lead = 0;
    size_t first[CKPT_NWRAPPERS + 1], at[CKPT_NWRAPPERS + 1];
    for (int w = 0; w <= CKPT_NWRAPPERS; w++) first[w] = SIZE_MAX;
    size_t longest = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(ckpt_tensor_name(ckpt_file_tensor(f, i)));
        if (len > longest) longest = len;
    }
    char *tmp = ckpt_malloc(longest + 1);
    if (!tmp) return ckpt_err_nomem();
    *max_depth = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = ckpt_tensor_name(ckpt_file_tensor(f, i));
        size_t len = strlen(s);
        unsigned mask = ckpt_key_wrappers(s, len);
        for (int w = 0; w < CKPT_NWRAPPERS; w++) {
            if (!(mask & (1u << w))) continue;
            has[w]++;
            lead[w] += strncmp(s, ckpt_wrappers[w], strlen(ckpt_wrappers[w])) == 0;
            size_t o = segment_at(s, len, ckpt_wrappers[w]);
            if (o < first[w]) first[w] = o;
        }
        if (strncmp(s, r->root, rlen) != 0) continue;
        unsigned d = module_depth(s + rlen, len - rlen, mask, tmp);
        module += d > 0;
        if (d > *max_depth) *max_depth = d;
        if (!d) continue;
        module_lead += strncmp(s + rlen, "module.", 7) == 0;
        size_t o = rlen + segment_at(s + rlen, len - rlen, "module.");
        if (o < first[CKPT_NWRAPPERS]) first[CKPT_NWRAPPERS] = o;
    }
    ckpt_free(tmp);
    /* "module." always leads the model's keys once wrappers are dropped;
     * leading here: before them too */
    if (module) {
        at[r->nwrappers] = first[CKPT_NWRAPPERS];
        r->wrappers[r->nwrappers++] = (ckpt_key_wrapper){"module.", module_lead == module, module};
    }
    for (int w = 0; w < CKPT_NWRAPPERS; w++)
        if (has[w]) {
            at[r->nwrappers] = first[w];
            r->wrappers[r->nwrappers++] =
                (ckpt_key_wrapper){ckpt_wrappers[w], lead[w] == has[w], has[w]};
        }
    order_wrappers(r, at);
    return 0;
}

/* `tree['a']['b']` for the model subtree at root "a.b." ("tree" at the top). */
static char *subtree_expr(ckpt_arena *a, const char *root) {
    char *e = ckpt_arena_strdup(a, "sd");
    for (const char *p = root; e && *p;) {
        const char *dot = strchr(p, '.');
        int n = (int)(dot - p);
        e = ckpt_arena_printf(a, "%s['%.*s']", e, n, p);
        p = dot + 1;
    }
    return e;
}

/* The rules: wrappers first (a leading-only one as a strip, else replaced
 * by nothing wherever it stands), then "module." as often as it repeats
 * where the model's keys start: stripped at the top, else
 * ROOT+"module."*depth replaced by ROOT (the keys stay in their dict).
 * The same as Python: each key of the subtree rewritten in order. */
static int build_fix(ckpt_keys_report *r, unsigned depth) {
    if (depth > MAX_FIX - CKPT_NWRAPPERS) depth = MAX_FIX - CKPT_NWRAPPERS;
    ckpt_arena *a = &r->arena;
    char *key = ckpt_arena_strdup(a, "k");
    for (size_t k = 0; key && k < r->nwrappers; k++) {
        const ckpt_key_wrapper *w = &r->wrappers[k];
        if (strcmp(w->segment, "module.") == 0) continue;
        r->fix[r->nfix++] =
            w->leading ? (ckpt_rename_rule){CKPT_RENAME_STRIP_PREFIX, w->segment, NULL, NULL}
                       : (ckpt_rename_rule){CKPT_RENAME_REPLACE, w->segment, "", NULL};
        key = ckpt_arena_printf(a, w->leading ? "%s.removeprefix('%s')" : "%s.replace('%s', '')",
                                key, w->segment);
    }
    if (depth && *r->root) {
        char *old = ckpt_arena_strdup(a, r->root);
        for (unsigned d = 0; old && d < depth; d++) old = ckpt_arena_printf(a, "%smodule.", old);
        if (!old) return ckpt_err_nomem();
        r->fix[r->nfix++] = (ckpt_rename_rule){CKPT_RENAME_REPLACE, old, r->root, NULL};
    } else {
        for (unsigned d = 0; d < depth; d++)
            r->fix[r->nfix++] = (ckpt_rename_rule){CKPT_RENAME_STRIP_PREFIX, "module.", NULL, NULL};
    }
    for (unsigned d = 0; key && d < depth; d++)
        key = ckpt_arena_printf(a, "%s.removeprefix('module.')", key);
    char *args = ckpt_arena_strdup(a, "");
    for (size_t k = 0; args && k < r->nfix; k++) {
        const ckpt_rename_rule *f = &r->fix[k];
        const char *word =
            f->op == CKPT_RENAME_REPLACE ? ckpt_arena_printf(a, "%s=%s", f->arg, f->arg2) : f->arg;
        word = word ? ckpt_shell_word(a, word) : NULL;
        args = word ? ckpt_arena_printf(
                          a, "%s%s%s %s", args, k ? " " : "",
                          f->op == CKPT_RENAME_REPLACE ? "--replace" : "--strip-prefix", word)
                    : NULL;
    }
    char *tree = subtree_expr(a, r->root);
    char *py = key && tree
                   ? ckpt_arena_printf(a, "%s = {%s: v for k, v in %s.items()}", tree, key, tree)
                   : NULL;
    if (!args || !py) return ckpt_err_nomem();
    r->fix_args = r->nfix ? args : NULL;
    r->fix_python = r->nfix ? py : NULL;
    return 0;
}

int ckpt_keys_hygiene(ckpt_keys_report **out, const ckpt_file *f) {
    return ckpt_keys_hygiene_at(out, f, NULL);
}

int ckpt_keys_hygiene_at(ckpt_keys_report **out, const ckpt_file *f, const char *root) {
    if (!out || !f) return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "NULL argument");
    *out = NULL;
    ckpt_keys_report *r = ckpt_malloc(sizeof *r);
    if (!r) return ckpt_err_nomem();
    memset(r, 0, sizeof *r);
    r->root = root && *root ? ckpt_arena_printf(&r->arena, "%s.", root)
                            : ckpt_arena_strdup(&r->arena, "");
    if (!r->root) {
        ckpt_keys_report_free(r);
        return ckpt_err_nomem();
    }
    ckpt_manifest *m = NULL;
    ckpt_rename_plan *p = NULL;
    unsigned depth = 0;
    int rc = scan(r, f, &depth);
    if (!rc) rc = build_fix(r, depth);
    if (!rc && r->nfix) rc = ckpt_manifest_from_file(&m, f);
    if (!rc && r->nfix) {
        /* the fix must not merge keys ("module.x" next to "x") */
        int prc = ckpt_rename_plan_new(&p, m, r->fix, r->nfix);
        if (prc == CKPT_E_MISMATCH) {
            r->collision = ckpt_arena_strdup(&r->arena, ckpt_error_last()->message);
            if (!r->collision) rc = ckpt_err_nomem();
            r->nfix = 0;
            r->fix_args = NULL;
            r->fix_python = NULL;
        } else {
            rc = prc;
        }
    }
    ckpt_rename_plan_free(p);
    ckpt_manifest_free(m);
    if (rc) {
        ckpt_keys_report_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void ckpt_keys_report_free(ckpt_keys_report *r) {
    if (!r) return;
    ckpt_arena_free(&r->arena);
    ckpt_free(r);
}

size_t ckpt_keys_wrapper_count(const ckpt_keys_report *r) { return r->nwrappers; }

const ckpt_key_wrapper *ckpt_keys_wrapper(const ckpt_keys_report *r, size_t i) {
    return i < r->nwrappers ? &r->wrappers[i] : NULL;
}

size_t ckpt_keys_fix_count(const ckpt_keys_report *r) { return r->nfix; }

const ckpt_rename_rule *ckpt_keys_fix(const ckpt_keys_report *r, size_t i) {
    return i < r->nfix ? &r->fix[i] : NULL;
}

const char *ckpt_keys_fix_args(const ckpt_keys_report *r) { return r->fix_args; }

const char *ckpt_keys_fix_python(const ckpt_keys_report *r) { return r->fix_python; }

const char *ckpt_keys_root(const ckpt_keys_report *r) { return r->root; }

const char *ckpt_keys_collision(const ckpt_keys_report *r) { return r->collision; }
