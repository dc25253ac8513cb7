/* hygiene.c - ckpt_keys_hygiene: wrapper prefixes left in a checkpoint's
 * keys (DataParallel/DDP "module.", torch.compile "_orig_mod.", FSDP and
 * activation-checkpointing wrappers; FORMATS.md §4.6) and the
 * `ckpt rename` rules that would remove them, checked for collisions. */
#include <string.h>

#include "base/error.h"
#include "keys/keys.h"

#define MAX_FIX (CKPT_NWRAPPERS + 8) /* wrapper rules + "module." strips */

struct ckpt_keys_report {
    ckpt_arena arena;
    ckpt_key_wrapper wrappers[CKPT_NWRAPPERS + 1];
    size_t nwrappers;
    ckpt_rename_rule fix[MAX_FIX];
    size_t nfix;
    const char *fix_args;
    const char *collision;
};

/* Leading "module." segments of s once wrappers are dropped. */
static unsigned module_depth(const char *s, size_t len, char *tmp) {
    size_t n = ckpt_key_drop_wrappers(s, len, tmp);
    unsigned d = 0;
    for (size_t pos = 0; n - pos > 7 && memcmp(tmp + pos, "module.", 7) == 0; pos += 7) d++;
    return d;
}

static int scan(ckpt_keys_report *r, const ckpt_manifest *m, unsigned *max_depth) {
    uint64_t has[CKPT_NWRAPPERS] = {0}, lead[CKPT_NWRAPPERS] = {0}, module = 0;
    size_t longest = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->lens[i] > longest) longest = m->lens[i];
    char *tmp = ckpt_malloc(longest + 1);
    if (!tmp) return ckpt_err_nomem();
    *max_depth = 0;
    for (size_t i = 0; i < m->n; i++) {
        const char *s = m->entries[i].name;
        unsigned mask = ckpt_key_wrappers(s, m->lens[i]);
        for (int w = 0; w < CKPT_NWRAPPERS; w++) {
            if (!(mask & (1u << w))) continue;
            has[w]++;
            lead[w] += strncmp(s, ckpt_wrappers[w], strlen(ckpt_wrappers[w])) == 0;
        }
        unsigned d = module_depth(s, m->lens[i], tmp);
        module += d > 0;
        if (d > *max_depth) *max_depth = d;
    }
    ckpt_free(tmp);
    if (module) r->wrappers[r->nwrappers++] = (ckpt_key_wrapper){"module.", 1, module};
    for (int w = 0; w < CKPT_NWRAPPERS; w++)
        if (has[w])
            r->wrappers[r->nwrappers++] =
                (ckpt_key_wrapper){ckpt_wrappers[w], lead[w] == has[w], has[w]};
    return 0;
}

/* The rules: wrappers first (a leading-only one as a strip, else replaced
 * by nothing wherever it stands), then "module." as often as it repeats. */
static int build_fix(ckpt_keys_report *r, unsigned depth) {
    for (size_t k = 0; k < r->nwrappers; k++) {
        const ckpt_key_wrapper *w = &r->wrappers[k];
        if (strcmp(w->segment, "module.") == 0) continue;
        r->fix[r->nfix++] = w->leading
                                ? (ckpt_rename_rule){CKPT_RENAME_STRIP_PREFIX, w->segment, NULL, NULL}
                                : (ckpt_rename_rule){CKPT_RENAME_REPLACE, w->segment, "", NULL};
    }
    for (unsigned d = 0; d < depth && r->nfix < MAX_FIX; d++)
        r->fix[r->nfix++] = (ckpt_rename_rule){CKPT_RENAME_STRIP_PREFIX, "module.", NULL, NULL};
    char *args = ckpt_arena_strdup(&r->arena, "");
    for (size_t k = 0; args && k < r->nfix; k++) {
        const ckpt_rename_rule *f = &r->fix[k];
        args = f->op == CKPT_RENAME_REPLACE
                   ? ckpt_arena_printf(&r->arena, "%s%s--replace '%s='", args, k ? " " : "", f->arg)
                   : ckpt_arena_printf(&r->arena, "%s%s--strip-prefix '%s'", args, k ? " " : "",
                                       f->arg);
    }
    if (!args) return ckpt_err_nomem();
    r->fix_args = r->nfix ? args : NULL;
    return 0;
}

int ckpt_keys_hygiene(ckpt_keys_report **out, const ckpt_file *f) {
    if (!out || !f) return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "NULL argument");
    *out = NULL;
    ckpt_keys_report *r = ckpt_malloc(sizeof *r);
    if (!r) return ckpt_err_nomem();
    memset(r, 0, sizeof *r);
    ckpt_manifest *m = NULL;
    ckpt_rename_plan *p = NULL;
    unsigned depth = 0;
    int rc = ckpt_manifest_from_file(&m, f);
    if (!rc) rc = scan(r, m, &depth);
    if (!rc) rc = build_fix(r, depth);
    if (!rc && r->nfix) {
        /* the fix must not merge keys ("module.x" next to "x") */
        int prc = ckpt_rename_plan_new(&p, m, r->fix, r->nfix);
        if (prc == CKPT_E_MISMATCH) {
            r->collision = ckpt_arena_strdup(&r->arena, ckpt_error_last()->message);
            if (!r->collision) rc = ckpt_err_nomem();
            r->nfix = 0;
            r->fix_args = NULL;
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

const char *ckpt_keys_collision(const ckpt_keys_report *r) { return r->collision; }
