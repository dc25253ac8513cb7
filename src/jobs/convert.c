/* convert.c - ckpt_convert: open any checkpoint, recover its full tree
 * (for safetensors written by ckpt, from "ckpt.structure":
 * ckpt_structure_decode), keep what --select asks for less what --exclude
 * names, merge the metadata
 * and write the other format. */
#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "model/file.h"
#include "model/walk.h"
#include "format/structure.h"
#include "format/write.h"

/* ------------------------------------------------------------ select, exclude */

typedef struct selector {
    const ckpt_convert_options *o;
    ckpt_arena *a;
    const ckpt_value *result; /* the root's copy */
    int any;                  /* something was selected */
} selector;

/* `name` (len bytes) is selected whole by prefix p. */
static int covers(const char *p, const char *name, size_t len) {
    size_t n = strlen(p);
    if (n && p[n - 1] == '.') return len >= n && memcmp(name, p, n) == 0;
    return len >= n && memcmp(name, p, n) == 0 && (len == n || name[n] == '.');
}

/* `name` lies on the way to prefix p. */
static int leads_to(const char *p, const char *name, size_t len) {
    return len == 0 || (strlen(p) > len && memcmp(p, name, len) == 0 && p[len] == '.');
}

/* Puts `kept` (a node selected whole, or a copy holding the selected
 * parts) into the copy of its parent, or makes it the result. */
static int keep(selector *s, const ckpt_walk *w, const ckpt_walk_frame *node,
                const ckpt_value *kept) {
    const ckpt_walk_frame *up = ckpt_walk_up(w, 1);
    if (!up) {
        s->result = kept;
        return 0;
    }
    ckpt_value *copy = (ckpt_value *)up->user;
    if (copy->kind == CKPT_KIND_DICT
            ? ckpt_value_dict_set(s->a, copy, (ckpt_value *)node->key, (ckpt_value *)kept)
            : ckpt_value_append(s->a, copy, (ckpt_value *)kept))
        return ckpt_err_nomem();
    return 0;
}

/* The node's flattened name (w->name, NUL-terminated) matches a glob of
 * opts->exclude; the root, which has no name, never does. */
static int excluded(const ckpt_convert_options *o, const char *name, size_t len) {
    for (size_t i = 0; len && i < o->nexclude; i++)
        if (fnmatch(o->exclude[i], name, 0) == 0) return 1;
    return 0;
}

static int sel_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    selector *s = w->ctx;
    const ckpt_value *v = node->value;
    size_t len = node->name_len;
    /* selection is by flattened name: only str and int keys */
    if (node->role == CKPT_WALK_VALUE && node->key->kind != CKPT_KIND_STR &&
        node->key->kind != CKPT_KIND_INT)
        return CKPT_WALK_SKIP;
    if (excluded(s->o, w->name, len)) return CKPT_WALK_SKIP;
    int whole = !s->o->nselect && len > 0, on_way = !s->o->nselect;
    for (size_t i = 0; i < s->o->nselect; i++) {
        whole |= len > 0 && covers(s->o->select[i], w->name, len);
        on_way |= leads_to(s->o->select[i], w->name, len);
    }
    int container = v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_LIST ||
                    v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_SET;
    /* with exclusions, a selected container is copied: its parts are
     * checked in turn */
    if (whole && (!s->o->nexclude || !container)) {
        s->any = 1;
        int rc = keep(s, w, node, v);
        return rc ? rc : CKPT_WALK_SKIP;
    }
    if (!(whole || on_way) || !container) return CKPT_WALK_SKIP;
    /* a state dict stays an OrderedDict with its _metadata */
    ckpt_value *copy = ckpt_value_new_like(s->a, v);
    if (!copy) return ckpt_err_nomem();
    node->user = (uintptr_t)copy;
    return CKPT_WALK_DESCEND;
}

/* A copy is kept when it holds something (the root's always). */
static int sel_leave(ckpt_walk *w, ckpt_walk_frame *node) {
    const ckpt_value *copy = (const ckpt_value *)node->user;
    if (ckpt_value_len(copy) || w->depth == 0) return keep(w->ctx, w, node, copy);
    return 0;
}

static int select_tree(const ckpt_value **root, const ckpt_convert_options *o, ckpt_arena *a,
                       const ckpt_limits *lim) {
    const ckpt_value *r = *root;
    int container = r->kind == CKPT_KIND_DICT || r->kind == CKPT_KIND_LIST ||
                    r->kind == CKPT_KIND_TUPLE || r->kind == CKPT_KIND_SET;
    /* a bare tensor or value has no name to exclude */
    if (!o->nselect && (!o->nexclude || !container)) return 0;
    selector s = {.o = o, .a = a};
    for (size_t i = 0; i < o->nselect; i++)
        if (!o->select[i] || !o->select[i][0])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "select prefixes must be non-empty strings");
    for (size_t i = 0; i < o->nexclude; i++)
        if (!o->exclude[i] || !o->exclude[i][0])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "exclude globs must be non-empty strings");
    ckpt_walk w;
    ckpt_walk_init(&w, lim, "", "");
    w.names = 1;
    w.enter = sel_enter;
    w.leave = sel_leave;
    w.ctx = &s;
    int rc = ckpt_walk_run(&w, *root);
    if (rc) return rc;
    if (!s.any && o->nselect)
        return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                        "no tensor or value matches the selection \"%s\"%s%s", o->select[0],
                        o->nselect > 1 ? " (or the others)" : "",
                        o->nexclude ? " once the exclusions are left out" : "");
    if (!s.any)
        return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                        "the exclusions (\"%s\"%s) leave nothing to write", o->exclude[0],
                        o->nexclude > 1 ? " and the others" : "");
    *root = s.result;
    return 0;
}

/* ------------------------------------------------------------ metadata */

typedef struct meta_list {
    const char **keys, **vals;
    size_t n, kcap, vcap;
} meta_list;

/* Sets k to v, replacing an earlier value of k (later sources win). */
static int meta_set(meta_list *m, ckpt_arena *a, const char *k, const char *v) {
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], k) == 0) {
            m->vals[i] = v;
            return 0;
        }
    if (ckpt_arena_grow(a, (void **)&m->keys, &m->kcap, m->n + 1, sizeof *m->keys) ||
        ckpt_arena_grow(a, (void **)&m->vals, &m->vcap, m->n + 1, sizeof *m->vals))
        return ckpt_err_nomem();
    m->keys[m->n] = k;
    m->vals[m->n++] = v;
    return 0;
}

static int merge_metadata(meta_list *m, const ckpt_file *f, const ckpt_convert_options *o,
                          ckpt_arena *a) {
    int rc = 0;
    for (size_t i = 0; !rc && i < f->nmeta; i++)
        if (!ckpt_wr_meta_reserved(f->meta_keys[i]))
            rc = meta_set(m, a, f->meta_keys[i], f->meta_vals[i]);
    if (!rc && o->config_json) {
        json_error_t err;
        json_t *cfg = json_loads(o->config_json, JSON_REJECT_DUPLICATES, &err);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "config is not a JSON object%s%s", cfg ? "" : ": ",
                            cfg ? "" : err.text);
        }
        char *text = json_dumps(cfg, JSON_COMPACT);
        json_decref(cfg);
        const char *copy = text ? ckpt_arena_strdup(a, text) : NULL;
        free(text);
        rc = copy ? meta_set(m, a, "config", copy) : ckpt_err_nomem();
    }
    for (size_t i = 0; !rc && i < o->write.nmeta; i++) {
        if (!o->write.meta_keys || !o->write.meta_values || !o->write.meta_keys[i] ||
            !o->write.meta_values[i])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata entry %zu is NULL", i);
        rc = meta_set(m, a, o->write.meta_keys[i], o->write.meta_values[i]);
    }
    return rc;
}

/* ------------------------------------------------------------ convert */

static ckpt_format format_for(const char *path) {
    static const struct {
        const char *ext;
        ckpt_format format;
    } exts[] = {{".safetensors", CKPT_FORMAT_SAFETENSORS},
                {".pt", CKPT_FORMAT_TORCH_ZIP},
                {".pth", CKPT_FORMAT_TORCH_ZIP},
                {".bin", CKPT_FORMAT_TORCH_ZIP},
                {".ckpt", CKPT_FORMAT_TORCH_ZIP}};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t e = strlen(exts[i].ext);
        if (n > e && strcasecmp(path + n - e, exts[i].ext) == 0) return exts[i].format;
    }
    return (ckpt_format)0;
}

/* Opens and verifies the written temporary file `tmp` like `ckpt verify`
 * would (with the limits the input was read with): convert never leaves
 * behind a file its own reader rejects. */
static int verify_output(const char *tmp, const char *out, const ckpt_open_options *open) {
    ckpt_file *f;
    int rc = ckpt_open(&f, tmp, open);
    if (rc == 0) rc = ckpt_verify(NULL, f);
    ckpt_close(f);
    if (rc == 0) return 0;
    /* copies: ckpt_err rewrites the record they point into */
    const ckpt_error *e = ckpt_error_last();
    char member[256], msg[512];
    snprintf(member, sizeof member, "%s", e->member);
    snprintf(msg, sizeof msg, "%s", e->message);
    return ckpt_err(rc, out, member, e->offset,
                    "the converted file does not read back, so it was not written: %s", msg);
}

/* ckpt_write_value, with the output verified before it replaces `out`. */
static int write_verified(const ckpt_value *root, const char *out, ckpt_format fmt,
                          const ckpt_write_options *w, const ckpt_open_options *open,
                          ckpt_write_stats *stats) {
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, out);
    if (rc) return rc;
    rc = ckpt_write_value_to(&a, root, fmt, w, stats);
    if (rc == 0) rc = verify_output(a.tmp, out, open);
    if (rc == 0) return ckpt_atomic_commit(&a, w->backup);
    ckpt_atomic_abort(&a);
    return rc;
}

int ckpt_convert(ckpt_convert_report *report, const char *in, const char *out,
                 const ckpt_convert_options *opts) {
    ckpt_convert_options defaults = CKPT_CONVERT_OPTIONS_INIT;
    const ckpt_convert_options *o = opts ? opts : &defaults;
    CKPT_CHECK_OPTIONS(opts, CKPT_CONVERT_OPTIONS_VERSION);
    if (report) *report = (ckpt_convert_report){0};
    if (!in || !out) return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "path is NULL");
    ckpt_format fmt = o->format ? o->format : format_for(out);
    if (fmt != CKPT_FORMAT_SAFETENSORS && fmt != CKPT_FORMAT_TORCH_ZIP)
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "no output format: name the output *.safetensors or *.pt "
                        "(.pth, .bin, .ckpt), or give the format");
    if ((o->nselect && !o->select) || (o->nexclude && !o->exclude))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "select or exclude is NULL");
    ckpt_file *f;
    int rc = ckpt_open(&f, in, &o->open);
    if (rc) return rc;
    ckpt_arena a = {0};
    const ckpt_value *root;
    meta_list m = {0};
    ckpt_write_stats stats;
    rc = ckpt_structure_decode(&root, f, &a);
    if (!rc && !root)
        rc = ckpt_err(CKPT_E_FORMAT, in, "", CKPT_NO_OFFSET, "the file holds no object");
    if (!rc) rc = select_tree(&root, o, &a, &f->opts.limits);
    if (!rc) rc = merge_metadata(&m, f, o, &a);
    if (!rc) {
        ckpt_write_options w = CKPT_WRITE_OPTIONS_INIT;
        w.meta_keys = m.keys;
        w.meta_values = m.vals;
        w.nmeta = m.n;
        w.backup = o->write.backup;
        w.progress = o->write.progress;
        w.progress_ctx = o->write.progress_ctx;
        rc = write_verified(root, out, fmt, &w, &o->open, &stats);
    }
    if (!rc && report) *report = (ckpt_convert_report){fmt, stats.tensors, stats.bytes, stats.keys};
    ckpt_arena_free(&a);
    ckpt_close(f);
    return rc;
}
