/* convert.c - ckpt_convert: open any checkpoint, recover its full tree
 * (for safetensors written by ckpt, from "ckpt.structure":
 * ckpt_structure_decode), keep what --select asks for less what --exclude
 * names, merge the metadata and write the other format: a file, a sharded
 * set, or a DCP directory (format/dcp_write.h; written in a temporary
 * directory beside it, verified, then renamed into place). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/ptrmap.h"
#include "container/atomic.h"
#include "model/file.h"
#include "model/walk.h"
#include "format/dcp_write.h"
#include "format/structure.h"
#include "format/write.h"
#include "open/dcp.h"
#include "open/model_dir.h"
#include "open/sharded.h"
#include "jobs/folder_files.h"
#include "jobs/verify.h"

/* ------------------------------------------------------------ select, exclude */

typedef struct selector {
    const ckpt_convert_options *o;
    ckpt_arena *a;
    const ckpt_value *result; /* the root's copy */
    const ckpt_value *own;    /* the one selected container (see own_names) */
    int any;                  /* something was selected */
    unsigned char *hit;       /* per exclude glob: it left something out */
    const char *near;         /* a name a glob matches the end of, segment-wise */
} selector;

static int is_container(const ckpt_value *v) {
    return v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE ||
           v->kind == CKPT_KIND_SET;
}

/* One prefix naming a container exactly (--select model: a training
 * checkpoint's state dict) selects that container itself: the output is
 * what sd["model"] is, its items under their own names, as
 * load_state_dict and from_pretrained expect them. Several prefixes, a
 * prefix ending in '.', or one naming a tensor or value keep the names
 * whole (they could not be told apart otherwise). */
static int own_names(const ckpt_convert_options *o, const char *name, size_t len,
                     const ckpt_value *v) {
    return o->nselect == 1 && is_container(v) && strlen(o->select[0]) == len &&
           memcmp(o->select[0], name, len) == 0;
}

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
    if (own_names(s->o, w->name, node->name_len, kept)) s->own = kept;
    ckpt_value *copy = (ckpt_value *)up->user;
    if (copy->kind == CKPT_KIND_DICT
            ? ckpt_value_dict_set(s->a, copy, (ckpt_value *)node->key, (ckpt_value *)kept)
            : ckpt_value_append(s->a, copy, (ckpt_value *)kept))
        return ckpt_err_nomem();
    return 0;
}

/* The node's flattened name (w->name, NUL-terminated) matches a glob of
 * opts->exclude (marked hit); the root, which has no name, never does.
 * A name whose last segments a glob matches is kept as s->near, for the
 * error of a glob that matches nothing. */
static int excluded(selector *s, const char *name, size_t len) {
    const ckpt_convert_options *o = s->o;
    for (size_t i = 0; len && i < o->nexclude; i++) {
        if (fnmatch(o->exclude[i], name, 0) == 0) return s->hit[i] = 1;
        for (const char *dot = strchr(name, '.'); !s->near && dot; dot = strchr(dot + 1, '.'))
            if (fnmatch(o->exclude[i], dot + 1, 0) == 0) s->near = ckpt_arena_strdup(s->a, name);
    }
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
    if (excluded(s, w->name, len)) return CKPT_WALK_SKIP;
    int whole = !s->o->nselect && len > 0, on_way = !s->o->nselect;
    for (size_t i = 0; i < s->o->nselect; i++) {
        whole |= len > 0 && covers(s->o->select[i], w->name, len);
        on_way |= leads_to(s->o->select[i], w->name, len);
    }
    int container = is_container(v);
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
    int container = is_container(*root);
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
    if (o->nexclude && !(s.hit = ckpt_arena_alloc(a, o->nexclude))) return ckpt_err_nomem();
    if (o->nexclude) memset(s.hit, 0, o->nexclude);
    ckpt_walk w;
    ckpt_walk_init(&w, lim, "", "");
    w.names = 1;
    w.enter = sel_enter;
    w.leave = sel_leave;
    w.ctx = &s;
    int rc = ckpt_walk_run(&w, *root);
    if (rc) return rc;
    /* an exclusion that leaves nothing out was meant for other names */
    for (size_t i = 0; i < o->nexclude; i++)
        if (!s.hit[i])
            return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                            "the exclusion \"%s\" matches nothing %s: globs match the input's "
                            "names as inspect lists them%s%s%s",
                            o->exclude[i], o->nselect ? "--select keeps" : "in the input",
                            s.near ? " (such as \"" : "", s.near ? s.near : "",
                            s.near ? "\")" : "");
    if (!s.any && o->nselect)
        return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                        "no tensor or value matches the selection \"%s\"%s%s", o->select[0],
                        o->nselect > 1 ? " (or the others)" : "",
                        o->nexclude ? " once the exclusions are left out" : "");
    if (!s.any)
        return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                        "the exclusions (\"%s\"%s) leave nothing to write", o->exclude[0],
                        o->nexclude > 1 ? " and the others" : "");
    *root = s.own ? s.own : s.result;
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

/* The metadata OUT carries: IN's (less ckpt's own keys, and a sharded
 * IN's index "total_size", the input set's tensor bytes: a set written
 * from it gets its own, one file none), then the config, then the
 * caller's; a later source wins. */
static int merge_metadata(meta_list *m, const ckpt_file *f, const ckpt_convert_options *o,
                          ckpt_arena *a) {
    int rc = 0;
    int sharded =
        f->format == CKPT_FORMAT_SAFETENSORS_SHARDED || f->format == CKPT_FORMAT_TORCH_SHARDED;
    for (size_t i = 0; !rc && i < f->nmeta; i++)
        if (!ckpt_wr_meta_reserved(f->meta_keys[i]) &&
            !(sharded && strcmp(f->meta_keys[i], "total_size") == 0))
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

/* What ckpt's DCP reader gives back holds every tensor item of the plan
 * under its name, with its dtype and shape. */
static int same_as_plan(const ckpt_file *f, const ckpt_dcp_plan *p) {
    for (size_t i = 0; i < p->n; i++) {
        const ckpt_dcp_witem *it = &p->items[i];
        if (!it->is_tensor) continue;
        const ckpt_tensor *want = it->value->u.tensor, *got = ckpt_file_find_tensor(f, it->fqn);
        int same = got && got->dtype == want->dtype && got->ndim == want->ndim;
        for (uint32_t d = 0; same && d < want->ndim; d++) same = got->shape[d] == want->shape[d];
        if (!same)
            return ckpt_err(CKPT_E_MISMATCH, f->path, it->fqn, CKPT_NO_OFFSET,
                            "tensor \"%s\" reads back %s", it->fqn,
                            got ? "with another dtype or shape" : "missing");
    }
    return 0;
}

/* Opens the written temporary file (or DCP directory) `tmp` as `ckpt
 * verify` would (with the limits the input was read with): convert never
 * leaves behind a file its own reader rejects. A file's bytes are not
 * read a second time: the atomic write read every byte back and found
 * what the writer produced (container/atomic.h), and the writer computed
 * the file's CRC-32s and XXH3-64 digests from those same bytes. A DCP
 * directory is also verified (chunks tile each tensor, every file named
 * is there) and compared with its plan. */
static int verify_output(const char *tmp, const char *out, const ckpt_open_options *open,
                         const ckpt_dcp_plan *plan) {
    ckpt_file *f;
    int rc = ckpt_open(&f, tmp, open);
    if (rc == 0 && plan) rc = ckpt_verify(NULL, f);
    if (rc == 0 && plan) rc = same_as_plan(f, plan);
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

/* ckpt_write_value into a's temporary file beside `out`, verified and
 * finished (ckpt_atomic_finish), not renamed yet; on failure nothing is
 * left (a aborted). */
static int write_finished(ckpt_atomic *a, const ckpt_value *root, const char *out, ckpt_format fmt,
                          const ckpt_write_options *w, const ckpt_open_options *open,
                          ckpt_write_stats *stats) {
    int rc = ckpt_atomic_begin(a, out);
    if (rc) return rc;
    rc = ckpt_write_value_to(a, root, fmt, w, stats);
    if (rc == 0) rc = verify_output(a->tmp, out, open, NULL);
    if (rc == 0) rc = ckpt_atomic_finish(a);
    if (rc) ckpt_atomic_abort(a);
    return rc;
}

/* ckpt_write_value, with the output verified before it replaces `out`. */
static int write_verified(const ckpt_value *root, const char *out, ckpt_format fmt,
                          const ckpt_write_options *w, const ckpt_open_options *open,
                          ckpt_write_stats *stats) {
    ckpt_atomic a;
    int rc = write_finished(&a, root, out, fmt, w, open, stats);
    return rc ? rc : ckpt_atomic_commit(&a, w->backup);
}

/* The tree as a DCP directory at `out`, made in a temporary directory
 * beside it, verified, then renamed into place. */
static int write_dcp_verified(const ckpt_value *root, const char *out, const ckpt_write_options *w,
                              const ckpt_open_options *open, ckpt_write_stats *stats) {
    ckpt_dcp_plan p;
    ckpt_atomic_dir d = {0};
    int rc = ckpt_dcp_plan_make(&p, root);
    if (rc == 0) rc = ckpt_atomic_dir_begin(&d, out);
    if (rc == 0) rc = ckpt_write_dcp(d.tmp, d.target, &p, w, stats);
    if (rc == 0) rc = verify_output(d.tmp, d.target, open, &p);
    if (rc == 0)
        rc = ckpt_atomic_dir_commit(&d);
    else
        ckpt_atomic_dir_abort(&d);
    ckpt_dcp_plan_free(&p);
    return rc;
}

/* ------------------------------------------------------------ sharded output */

/* Where a sharded set goes: dir, the names' stem and extension ("model",
 * ".safetensors"; "pytorch_model", ".bin"). */
typedef struct set_names {
    const char *dir, *stem, *ext;
    const char *single; /* the file a set of one shard is */
    int made_dir;       /* dir did not exist: made here, removed again if the set fails */
} set_names;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

/* 1 when OUT names a directory: one that exists, or a name ending in '/' */
static int names_dir(const char *out) {
    struct stat st;
    size_t len = strlen(out);
    return (len && out[len - 1] == '/') || (stat(out, &st) == 0 && S_ISDIR(st.st_mode));
}

/* 0 when OUT/ names something on disk that is not a directory (a file
 * single.safetensors given as single.safetensors/); 1 else. */
static int dir_or_absent(const char *out) {
    struct stat st;
    return stat(out, &st) != 0 ? errno != ENOTDIR : S_ISDIR(st.st_mode);
}

static int name_set(set_names *s, const char *out, ckpt_format fmt, ckpt_arena *a) {
    struct stat st;
    s->ext = fmt == CKPT_FORMAT_SAFETENSORS ? ".safetensors" : ".bin";
    s->made_dir = 0;
    if (names_dir(out)) { /* transformers' default names */
        size_t len = strlen(out);
        while (len > 1 && out[len - 1] == '/') len--;
        if (!(s->dir = ckpt_arena_strndup(a, out, len))) return ckpt_err_nomem();
        /* as save_pretrained makes its folder; the parent must exist */
        if (stat(s->dir, &st) != 0) {
            if (ckpt_atomic_mkdir(s->dir) != 0)
                return ckpt_err(CKPT_E_IO, s->dir, "", CKPT_NO_OFFSET,
                                "cannot create the directory for the sharded set: %s",
                                strerror(errno));
            s->made_dir = 1;
        }
        out = s->dir;
        s->stem = fmt == CKPT_FORMAT_SAFETENSORS ? "model" : "pytorch_model";
        s->single = ckpt_arena_printf(a, "%s/%s%s", out, s->stem, s->ext);
        return s->single ? 0 : ckpt_err_nomem();
    }
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    const char *dot = strrchr(base, '.');
    s->single = out;
    s->dir = slash ? ckpt_arena_strndup(a, out, (size_t)(slash - out) + (slash == out)) : ".";
    s->stem = ckpt_arena_strndup(a, base, dot && dot != base ? (size_t)(dot - base) : strlen(base));
    if (!s->dir || !s->stem) return ckpt_err_nomem();
    if (!s->stem[0])
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "a sharded set needs a file name to name its shards after");
    return 0;
}

/* dir/name; name checked by the one shard-name rule the reader applies,
 * so that the index names a shard every loader opens. */
static const char *set_path(const set_names *s, const char *name, ckpt_arena *a) {
    return ckpt_arena_printf(a, "%s/%s", s->dir, name);
}

/* A sharded set holds tensors only (its index maps tensor names to
 * files): every leaf of the tree must be one. */
static int tensors_only_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    switch (node->value->kind) {
    case CKPT_KIND_DICT:
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE: return CKPT_WALK_DESCEND;
    case CKPT_KIND_TENSOR: return CKPT_WALK_SKIP;
    default:
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "a sharded set holds tensors only, and \"%.*s\" is a %s (select the "
                        "state dict with --select)",
                        (int)node->name_len, w->name[0] ? w->name : "(root)",
                        ckpt_value_kind_name(node->value->kind));
    }
}

static int tensors_only(const ckpt_value *root) {
    ckpt_walk w;
    ckpt_walk_init(&w, NULL, "", "");
    w.names = 1;
    w.enter = tensors_only_enter;
    return ckpt_walk_run(&w, root);
}

/* Assigns each tensor (in order) a shard, as huggingface_hub's
 * split_state_dict_into_shards_factory does: sizes are storage bytes,
 * each storage counted once and its tensors kept with its first one; a
 * storage larger than max gets a shard of its own, numbered when it is
 * made, while the shard being filled is numbered when it closes.
 * shard_of[i] receives tensor i's shard (0-based), *nshards their count,
 * *total the bytes counted. */
static int split(const wr_named *t, size_t n, uint64_t max, size_t *shard_of, size_t *nshards,
                 uint64_t *total, ckpt_arena *a) {
    ckpt_ptrmap first = {0}; /* root storage -> provisional shard + 1 */
    size_t *number = ckpt_arena_array(a, n + 1, sizeof *number); /* provisional -> final */
    size_t made = 0, closed = 0, cur = 0;
    uint64_t cur_size = 0;
    int rc = number ? 0 : ckpt_err_nomem(), open = 0;
    *total = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        uint64_t off, seen;
        const ckpt_storage *st = ckpt_wr_root_storage(t[i].value->u.tensor, &off);
        if (ckpt_ptrmap_get(&first, st, &seen)) { /* tied: with its storage */
            shard_of[i] = (size_t)seen - 1;
            continue;
        }
        uint64_t size = st->nbytes;
        *total += size;
        if (size > max) {
            shard_of[i] = made;
            number[made++] = closed++;
        } else {
            if (open && cur_size + size > max) {
                number[cur] = closed++;
                open = 0;
            }
            if (!open) {
                cur = made++;
                cur_size = 0;
                open = 1;
            }
            shard_of[i] = cur;
            cur_size += size;
        }
        rc = ckpt_ptrmap_put(&first, st, shard_of[i] + 1);
    }
    if (open) number[cur] = closed++;
    for (size_t i = 0; !rc && i < n; i++) shard_of[i] = number[shard_of[i]];
    ckpt_ptrmap_free(&first);
    *nshards = closed;
    return rc;
}

static int by_seq(const void *x, const void *y) {
    uint64_t a = ((const wr_named *)x)->seq, b = ((const wr_named *)y)->seq;
    return (a > b) - (a < b);
}

/* The index, as huggingface_hub writes it (indent 2): {"metadata":
 * {"total_size": N, and the set's metadata}, "weight_map": {name: shard}}.
 * total_size is this set's tensor bytes, an integer: a "total_size" among
 * the metadata (one file's, written from an older set) does not replace it.
 * weight_map lists the names a shard holds as tensors: a safetensors
 * shard's aliases (tied names, in its "ckpt.aliases") are left out, as
 * save_torch_state_dict leaves out the shared names it removes, since
 * safetensors and transformers take every listed name as loaded from its
 * shard and would never fill one the shard does not hold (ckpt's reader
 * restores them from the shard). written: NULL (torch shards hold every
 * name), or 1 for each name written under itself. held: NULL to commit
 * the index, or where it is left finished, not renamed (commit_held). */
static int write_index(ckpt_atomic *held, const char *path, uint64_t total,
                       const ckpt_write_options *w, const wr_named *t, size_t n,
                       const char *const *shard_names, const size_t *shard_of,
                       const unsigned char *written) {
    json_t *doc = json_object(), *meta = json_object(), *map = json_object();
    int bad = !doc || !meta || !map || json_object_set_new(doc, "metadata", meta) ||
              json_object_set_new(doc, "weight_map", map) ||
              json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    for (size_t i = 0; !bad && i < w->nmeta; i++)
        if (strcmp(w->meta_keys[i], "total_size") != 0)
            bad = json_object_set_new(meta, w->meta_keys[i], json_string(w->meta_values[i]));
    for (size_t i = 0; !bad && i < n; i++)
        if (!written || written[i])
            bad = json_object_set_new(map, t[i].name, json_string(shard_names[shard_of[i]]));
    char *text = bad ? NULL : json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (!text) return ckpt_err_nomem();
    ckpt_atomic one, *a = held ? held : &one;
    int rc = ckpt_atomic_begin(a, path);
    if (!rc) rc = ckpt_atomic_write(a, text, strlen(text));
    if (!rc) rc = ckpt_atomic_write(a, "\n", 1);
    free(text);
    if (!rc) return held ? ckpt_atomic_finish(a) : ckpt_atomic_commit(a, 0);
    ckpt_atomic_abort(a);
    return rc;
}

/* A file of the set's previous layout, once the new set is committed:
 * removed, or with backup renamed to NAME.bak (replacing an older one), as
 * OUT replaced by the set, counted in *retired. what: why it must go, for
 * the error. */
static int retire(const char *path, int backup, const char *what, uint64_t *retired) {
    struct stat st;
    if (lstat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) return 0;
    char *bak = backup ? ckpt_malloc(strlen(path) + sizeof CKPT_ATOMIC_BACKUP) : NULL;
    if (backup && !bak) return ckpt_err_nomem();
    if (bak) sprintf(bak, "%s" CKPT_ATOMIC_BACKUP, path);
    int fail = bak ? ckpt_atomic_rename(path, bak) : ckpt_atomic_remove_at(AT_FDCWD, path);
    int err = errno;
    ckpt_free(bak);
    if (fail)
        return ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET,
                        "the sharded set is written, but this file, %s, could not be %s: %s", what,
                        backup ? "renamed to .bak" : "removed", strerror(err));
    (*retired)++;
    return 0;
}

/* The shard files the set's index lists before the new set replaces it
 * (canonical names, by the reader's rule: ckpt_shard_name), so that the
 * files of a layout with more shards do not stay beside the new one (a
 * loader globbing "*.safetensors" and a later reshard would take them for
 * part of it). An index that is missing, over limits.max_index_bytes or
 * malformed names none: its files are left as they are. *names is a
 * JSON object whose keys are the names (NULL for none). */
static int old_shards(json_t **names, const char *index, const set_names *s,
                      const ckpt_open_options *open) {
    *names = NULL;
    struct stat st;
    if (stat(index, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > open->limits.max_index_bytes)
        return 0;
    json_error_t err;
    json_t *doc = json_load_file(index, JSON_REJECT_DUPLICATES, &err);
    const json_t *wm = json_object_get(doc, "weight_map");
    json_t *out = json_is_object(wm) ? json_object() : NULL;
    const char *key;
    const json_t *v;
    int rc = json_is_object(wm) && !out ? ckpt_err_nomem() : 0;
    if (out) json_object_foreach((json_t *)wm, key, v) {
            if (!json_is_string(v)) continue;
            size_t len = json_string_length(v);
            char *canon = ckpt_malloc(len + 1);
            if (!canon) {
                rc = ckpt_err_nomem();
                break;
            }
            if (!ckpt_shard_name(canon, json_string_value(v), len, s->ext) &&
                json_object_set_new(out, canon, json_true()))
                rc = ckpt_err_nomem();
            ckpt_free(canon);
            if (rc) break;
        }
    json_decref(doc);
    if (rc)
        json_decref(out);
    else
        *names = out;
    return rc;
}

/* Once the new set is committed: each file of the old index that the new
 * set does not name goes (retire), then the directory is synced. keep: the
 * new set's shard names (nkeep), single: the one-file name, also kept
 * when the set is that one file; old_index: the old index itself, retired
 * too when the new set has none (a set of one shard). Each file retired
 * counts in *retired. */
static int retire_old_set(const set_names *s, const json_t *old, const char *const *keep,
                          size_t nkeep, const char *old_index, int backup, ckpt_arena *a,
                          uint64_t *retired) {
    const char *name;
    const json_t *v;
    struct stat one, st;
    int rc = 0, has_one = lstat(s->single, &one) == 0;
    json_object_foreach((json_t *)old, name, v) {
        size_t k = 0;
        while (k < nkeep && strcmp(keep[k], name)) k++;
        if (k < nkeep) continue; /* a shard of the new set */
        const char *path = set_path(s, name, a);
        if (!path) return ckpt_err_nomem();
        if (has_one && lstat(path, &st) == 0 && st.st_dev == one.st_dev && st.st_ino == one.st_ino)
            continue; /* the one file the new set is ("./x" and "x" alike) */
        if ((rc = retire(path, backup, "a shard of the set's previous layout", retired))) return rc;
    }
    if (old_index &&
        (rc = retire(old_index, backup, "the index of the set's previous layout", retired)))
        return rc;
    return ckpt_atomic_sync_dir(s->dir);
}

/* The index of shards named after stem and ext, by the rule readers find
 * it with (ckpt_model_dir_shard_index): "NAME.EXT.index.json", and for a
 * variant's ("model.fp16.safetensors") the variant's index name,
 * "model.safetensors.index.fp16.json", as save_pretrained(variant=) writes
 * it and from_pretrained(variant=) reads it. */
static const char *index_path(const set_names *s, ckpt_arena *a) {
    char index[1024];
    const char *shard = ckpt_arena_printf(a, "%s-00001-of-00001%s", s->stem, s->ext);
    const char *name = !shard ? NULL
                       : ckpt_model_dir_shard_index(index, sizeof index, shard)
                           ? ckpt_arena_strdup(a, index)
                           : ckpt_arena_printf(a, "%s%s.index.json", s->stem, s->ext);
    return name ? set_path(s, name, a) : NULL;
}

/* After the set's one file (s->single) is written: an index of the same
 * name an earlier save left, and the shards it names, go as in
 * retire_old_set (transformers opens the one file first, but a loader of
 * the index or of "*.safetensors" would find the old layout). */
static int retire_indexed_set(const set_names *s, int backup, const ckpt_open_options *open,
                              ckpt_arena *a, uint64_t *retired) {
    const char *index = index_path(s, a);
    json_t *old = NULL;
    int rc = index ? old_shards(&old, index, s, open) : ckpt_err_nomem();
    if (!rc && old) rc = retire_old_set(s, old, NULL, 0, index, backup, a, retired);
    json_decref(old);
    return rc;
}

/* The held shards, then the held index (held[n]), renamed into place in
 * a row. The old index goes first (removed, or renamed to .bak),
 * durably: a crash among the renames leaves shards of both sets and no
 * index naming them, which loaders refuse, never an index that names a
 * mix. The old files keep a second name (a temporary one) until the row
 * is done: a rename over a file's last name frees its blocks there and
 * then (about 10 ms for 32 MiB here), which stretched the row with the
 * set's size; with backup, the .bak links do that. The directory is
 * fsync'd once, after the row. */
static int commit_held(ckpt_atomic *held, size_t n, const char *index, int backup,
                       const char *dir) {
    char **kept = backup ? NULL : ckpt_malloc((n + 1) * sizeof *kept);
    if (!backup && !kept) return ckpt_err_nomem();
    for (size_t k = 0; kept && k <= n; k++) {
        kept[k] = ckpt_atomic_temp_name(held[k].target);
        if (kept[k] && link(held[k].target, kept[k]) != 0) {
            ckpt_free(kept[k]); /* none yet, or no hard links here: freed in the row */
            kept[k] = NULL;
        }
    }
    int rc = 0;
    struct stat st;
    if (lstat(index, &st) == 0) {
        char *bak = backup ? ckpt_malloc(strlen(index) + sizeof CKPT_ATOMIC_BACKUP) : NULL;
        int fail = backup && !bak, err = ENOMEM;
        if (bak) sprintf(bak, "%s" CKPT_ATOMIC_BACKUP, index);
        if (!fail) {
            fail = bak ? ckpt_atomic_rename(index, bak) : ckpt_atomic_remove_at(AT_FDCWD, index);
            err = errno;
        }
        ckpt_free(bak);
        if (fail)
            rc = ckpt_err(CKPT_E_IO, index, "", CKPT_NO_OFFSET,
                          "the new shards are written, but the index they replace could not "
                          "be %s: %s; nothing replaced",
                          backup ? "renamed to .bak" : "removed", strerror(err));
        if (rc == 0) rc = ckpt_atomic_sync_dir(dir);
    }
    for (size_t k = 0; rc == 0 && k <= n; k++) {
        held[k].in_a_row = 1;
        rc = ckpt_atomic_commit(&held[k], k < n && backup);
    }
    if (rc == 0) rc = ckpt_atomic_sync_dir(dir);
    for (size_t k = 0; kept && k <= n; k++) {
        if (kept[k]) (void)ckpt_atomic_remove_at(AT_FDCWD, kept[k]);
        ckpt_free(kept[k]);
    }
    ckpt_free(kept);
    return rc;
}

static int write_sharded(const ckpt_value *root, const char *out, ckpt_format fmt, uint64_t max,
                         const ckpt_write_options *w, const ckpt_open_options *open, ckpt_arena *a,
                         ckpt_convert_report *r) {
    set_names s = {0};
    wr_named *t = NULL;
    size_t n = 0, nshards = 0, *shard_of = NULL;
    uint64_t total = 0;
    int rc = tensors_only(root);
    if (!rc) rc = name_set(&s, out, fmt, a);
    if (!rc) rc = ckpt_wr_collect(&t, &n, root);
    if (!rc) {
        /* one entry per name, as the index maps them, in the tree's order */
        n = ckpt_wr_named_unique(t, n);
        qsort(t, n, sizeof *t, by_seq);
        shard_of = ckpt_arena_array(a, n ? n : 1, sizeof *shard_of);
        if (!shard_of) rc = ckpt_err_nomem();
    }
    if (!rc) rc = split(t, n, max, shard_of, &nshards, &total, a);
    const char **names = NULL;
    if (!rc && nshards > 1) {
        names = ckpt_arena_array(a, nshards, sizeof *names);
        if (!names) rc = ckpt_err_nomem();
    }
    for (size_t k = 0; !rc && names && k < nshards; k++) {
        names[k] = ckpt_arena_printf(a, "%s-%05zu-of-%05zu%s", s.stem, k + 1, nshards, s.ext);
        char *canon = names[k] ? ckpt_arena_alloc(a, strlen(names[k]) + 1) : NULL;
        if (!canon) rc = ckpt_err_nomem();
        const char *why = canon ? ckpt_shard_name(canon, names[k], strlen(names[k]), s.ext) : NULL;
        if (!rc && (why || strcmp(canon, names[k])))
            rc = ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET, "shard name \"%s\" is %s",
                          names[k], why ? why : "not canonical");
    }
    const char *index = rc ? NULL : index_path(&s, a);
    json_t *old = NULL; /* read before the new index replaces it */
    if (!rc && names) rc = index ? old_shards(&old, index, &s, open) : ckpt_err_nomem();
    if (!rc && nshards <= 1) { /* one file, no index, as transformers saves it */
        ckpt_write_stats stats;
        rc = write_verified(root, s.single, fmt, w, open, &stats);
        if (!rc) *r = (ckpt_convert_report){fmt, stats.tensors, stats.bytes, stats.keys, 0, 0};
        if (!rc) rc = retire_indexed_set(&s, w->backup, open, a, &r->retired);
    }
    /* New shards whose names are taken (a set of as many shards, saved
     * again) are held under their temporary names until every shard is
     * written and verified: a failure on the way replaces none of the old
     * set's files (before, the shards written so far replaced theirs and
     * the old index named a mix of both sets) */
    ckpt_atomic *held = NULL;
    for (size_t k = 0; !rc && names && !held && k < nshards; k++) {
        struct stat st;
        const char *path = set_path(&s, names[k], a);
        if (!path) rc = ckpt_err_nomem();
        if (!rc && lstat(path, &st) == 0 &&
            !(held = ckpt_arena_array(a, nshards + 1, sizeof *held))) /* and the index */
            rc = ckpt_err_nomem();
    }
    for (size_t k = 0; !rc && names && k < nshards; k++) {
        ckpt_value *shard = ckpt_value_new(a, CKPT_KIND_DICT);
        if (!shard) rc = ckpt_err_nomem();
        for (size_t i = 0; !rc && i < n; i++) {
            if (shard_of[i] != k) continue;
            ckpt_value *key = ckpt_value_new_str(a, CKPT_KIND_STR, t[i].name, strlen(t[i].name));
            if (!key || ckpt_value_dict_set(a, shard, key, (ckpt_value *)t[i].value))
                rc = ckpt_err_nomem();
        }
        ckpt_write_stats stats;
        const char *path = rc ? NULL : set_path(&s, names[k], a);
        if (!rc && !path) rc = ckpt_err_nomem();
        if (!rc)
            rc = held ? write_finished(&held[k], shard, path, fmt, w, open, &stats)
                      : write_verified(shard, path, fmt, w, open, &stats);
        if (!rc) {
            r->tensors += stats.tensors;
            r->bytes += stats.bytes;
            r->keys += stats.keys;
        }
    }
    if (!rc && names) {
        unsigned char *written = NULL;
        if (fmt == CKPT_FORMAT_SAFETENSORS) {
            written = ckpt_arena_alloc(a, n ? n : 1);
            rc = written ? ckpt_wr_safetensors_written(t, n, written) : ckpt_err_nomem();
        }
        if (!rc)
            rc = write_index(held ? &held[nshards] : NULL, index, total, w, t, n, names, shard_of,
                             written);
        if (!rc && held) rc = commit_held(held, nshards, index, w->backup, s.dir);
        for (size_t k = 0; !rc && held && k < nshards; k++)
            ckpt_atomic_reap_temps(set_path(&s, names[k], a));
        if (!rc && held) ckpt_atomic_reap_temps(index);
        /* a file under the one-file name (an earlier save) would shadow
         * the index: transformers and ckpt open that name first */
        if (!rc)
            rc = retire(s.single, w->backup, "which loaders open before its index", &r->retired);
        if (!rc)
            rc = old ? retire_old_set(&s, old, names, nshards, NULL, w->backup, a, &r->retired)
                     : ckpt_atomic_sync_dir(s.dir);
        r->format = fmt;
        r->shards = nshards;
    }
    for (size_t k = 0; held && k <= nshards; k++) ckpt_atomic_abort(&held[k]);
    json_decref(old);
    if (rc && s.made_dir) rmdir(s.dir); /* only while still empty */
    ckpt_wr_named_free(t, n);
    return rc;
}

/* Whether `name` in a model folder is a file of the set just written
 * there (stem, ext; nshards 0 or 1: the one file, else its index and
 * shards "STEM-k-of-NSHARDS.EXT"). */
static int of_new_set(const char *name, const char *stem, const char *ext, uint64_t nshards) {
    size_t ls = strlen(stem), le = strlen(ext);
    if (strncmp(name, stem, ls)) return 0;
    const char *rest = name + ls; /* "EXT", "EXT.index.json" or "-0000k-of-0000n.EXT" */
    if (nshards <= 1) return !strcmp(rest, ext);
    if (!strncmp(rest, ext, le) && !strcmp(rest + le, ".index.json")) return 1;
    char total[32];
    uint64_t k = 0;
    snprintf(total, sizeof total, "%05llu", (unsigned long long)nshards);
    size_t lt = strlen(total);
    if (rest[0] != '-') return 0;
    for (size_t i = 1; i <= 5; i++) {
        if (rest[i] < '0' || rest[i] > '9') return 0;
        k = k * 10 + (uint64_t)(rest[i] - '0');
    }
    return k >= 1 && k <= nshards && !strncmp(rest + 6, "-of-", 4) &&
           !strncmp(rest + 10, total, lt) && !strcmp(rest + 10 + lt, ext);
}

/* Once the weights are in model folder `dir`: every other file there that
 * a loader could take for them goes (retire), so that the folder holds
 * one set of weights: the files and indexes from_pretrained and diffusers
 * open by name (ckpt_model_dir_weights_name: an old model.safetensors
 * would be loaded before a new pytorch_model.bin) and the shards of such
 * an index, by their names (ckpt_model_dir_shard_index), listed or not. */
static int retire_other_weights(const char *dir, const char *stem, const char *ext,
                                uint64_t nshards, int backup, ckpt_arena *a, uint64_t *retired) {
    DIR *d = opendir(dir);
    if (!d)
        return ckpt_err(CKPT_E_IO, dir, "", CKPT_NO_OFFSET, "cannot list %s: %s", dir,
                        strerror(errno));
    const char **stale = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        char ix[512];
        const char *name = e->d_name;
        if (of_new_set(name, stem, ext, nshards) ||
            !(ckpt_model_dir_weights_name(name) ||
              (ckpt_model_dir_shard_index(ix, sizeof ix, name) && ckpt_model_dir_weights_name(ix))))
            continue;
        if (ckpt_arena_grow(a, (void **)&stale, &cap, n + 1, sizeof *stale) ||
            !(stale[n++] = ckpt_arena_printf(a, "%s/%s", dir, name)))
            rc = ckpt_err_nomem();
    }
    closedir(d);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = retire(stale[i], backup, "weights of another layout, which loaders could open instead",
                    retired);
    return rc == 0 && n ? ckpt_atomic_sync_dir(dir) : rc;
}

/* Whether model folder `dir` is where `in` is (the folder itself, or the
 * folder of a file): converting there keeps the input beside the output. */
static int holds_input(const char *dir, const char *in, ckpt_arena *a) {
    struct stat si, sd;
    if (stat(in, &si) != 0 || stat(dir, &sd) != 0) return 0;
    if (!S_ISDIR(si.st_mode)) {
        const char *slash = strrchr(in, '/');
        const char *parent =
            slash ? ckpt_arena_strndup(a, in, (size_t)(slash - in) + (slash == in)) : ".";
        if (!parent || stat(parent, &si) != 0) return 1; /* unknown: leave it alone */
    }
    return si.st_dev == sd.st_dev && si.st_ino == sd.st_ino;
}

/* *dir: the output folder when a model folder `in` is written into a
 * folder `out` (another one: converting a folder into itself copies
 * nothing), whose other files go with the weights; else NULL. */
static int folder_pair(const char **dir, const char *in, const char *out, ckpt_format fmt,
                       ckpt_arena *a) {
    struct stat si, so;
    *dir = NULL;
    if (fmt == CKPT_FORMAT_DCP || !names_dir(out) || stat(in, &si) != 0 || !S_ISDIR(si.st_mode) ||
        ckpt_dcp_is_dir(in))
        return 0;
    if (stat(out, &so) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) return 0;
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    return (*dir = ckpt_arena_strndup(a, out, len)) ? 0 : ckpt_err_nomem();
}

int ckpt_convert(ckpt_convert_report *report, const char *in, const char *out,
                 const ckpt_convert_options *opts) {
    ckpt_convert_options defaults = CKPT_CONVERT_OPTIONS_INIT;
    const ckpt_convert_options *o = opts ? opts : &defaults;
    CKPT_CHECK_OPTIONS(opts, CKPT_CONVERT_OPTIONS_VERSION);
    if (report) *report = (ckpt_convert_report){0};
    if (!in || !out) return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "path is NULL");
    ckpt_format fmt = o->format ? o->format : ckpt_wr_format_for_path(out);
    if (!fmt && names_dir(out))
        fmt = CKPT_FORMAT_SAFETENSORS; /* a model directory: transformers' default */
    if (fmt != CKPT_FORMAT_SAFETENSORS && fmt != CKPT_FORMAT_TORCH_ZIP && fmt != CKPT_FORMAT_DCP)
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "no output format: name the output *.safetensors, *.pt "
                        "(.pth, .bin, .ckpt), *.dcp (a DCP directory) or a model folder "
                        "(OUT/, with the trailing '/'), or give the format");
    if (names_dir(out) && !dir_or_absent(out))
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "OUT ends in '/' and names a directory, but a file that is not a "
                        "directory stands in that path (name a file without the '/', or "
                        "another folder)");
    if (fmt != CKPT_FORMAT_DCP && names_dir(out) && ckpt_dcp_is_dir(out))
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "is a torch.distributed.checkpoint directory: a %s file is not "
                        "written into it (name another folder or file)",
                        ckpt_format_name(fmt));
    if (fmt == CKPT_FORMAT_DCP && (o->max_shard_size || o->write.nmeta || o->config_json))
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET, "a DCP directory has %s",
                        o->max_shard_size ? "one data file here: --max-shard-size does not apply"
                                          : "no place for metadata or a config");
    const char *want =
        fmt == CKPT_FORMAT_DCP || names_dir(out) ? NULL : ckpt_model_dir_name_misfit(out, fmt);
    if (want)
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "a %s file is not written under this name: from_pretrained and "
                        "torch.load read that name as %s, so none would read the file (drop "
                        "--format, or name the output for the format)",
                        ckpt_format_name(fmt), want);
    if ((o->nselect && !o->select) || (o->nexclude && !o->exclude))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "select or exclude is NULL");
    ckpt_file *f;
    int rc = ckpt_open(&f, in, &o->open);
    if (rc) return rc;
    ckpt_arena a = {0};
    const ckpt_value *root;
    meta_list m = {0};
    ckpt_write_stats stats;
    /* the input is verified as the writers read it: zip members against
     * their CRC-32 (recorded by the reader), tensors against their digests */
    rc = ckpt_verify_expect_digests(f);
    if (!rc) rc = ckpt_structure_decode(&root, f, &a);
    if (!rc && !root)
        rc = ckpt_err(CKPT_E_FORMAT, in, "", CKPT_NO_OFFSET, "the file holds no object");
    if (!rc) rc = select_tree(&root, o, &a, &f->opts.limits);
    if (!rc) rc = merge_metadata(&m, f, o, &a);
    /* a model folder's other files, listed (a link out of it refused)
     * before anything is written, copied once the weights are */
    ckpt_folder_files others = {0};
    const char *out_dir = NULL;
    if (!rc) rc = folder_pair(&out_dir, in, out, fmt, &a);
    if (!rc && out_dir) rc = ckpt_folder_files_list(&others, &a, in);
    if (!rc) {
        ckpt_write_options w = CKPT_WRITE_OPTIONS_INIT;
        w.meta_keys = m.keys;
        w.meta_values = m.vals;
        w.nmeta = m.n;
        w.backup = o->write.backup;
        w.progress = o->write.progress;
        w.progress_ctx = o->write.progress_ctx;
        uint64_t nshards = 0;
        if (fmt == CKPT_FORMAT_DCP) {
            rc = write_dcp_verified(root, out, &w, &o->open, &stats);
            if (!rc && report)
                *report = (ckpt_convert_report){fmt, stats.tensors, stats.bytes, stats.keys, 0, 0};
        } else if (o->max_shard_size) {
            ckpt_convert_report r = {fmt, 0, 0, 0, 0, 0};
            rc = write_sharded(root, out, fmt, o->max_shard_size, &w, &o->open, &a, &r);
            nshards = r.shards;
            if (!rc && report) *report = r;
        } else {
            /* a model directory: its one-file name, as save_pretrained */
            set_names s = {0};
            const char *path = out;
            uint64_t retired = 0;
            if (names_dir(out) && !(rc = name_set(&s, out, fmt, &a))) path = s.single;
            if (!rc) rc = write_verified(root, path, fmt, &w, &o->open, &stats);
            if (rc && s.made_dir) rmdir(s.dir);
            /* the one file of a set (NAME.safetensors, NAME.bin): the
             * set's earlier index and shards go */
            if (!rc && !s.dir &&
                ends_with(out, fmt == CKPT_FORMAT_SAFETENSORS ? ".safetensors" : ".bin"))
                rc = name_set(&s, out, fmt, &a);
            if (!rc && s.dir) rc = retire_indexed_set(&s, w.backup, &o->open, &a, &retired);
            if (!rc && report)
                *report =
                    (ckpt_convert_report){fmt, stats.tensors, stats.bytes, stats.keys, 0, retired};
        }
        /* a model folder OUT holds one set of weights: the new one */
        if (!rc && fmt != CKPT_FORMAT_DCP && names_dir(out) && !holds_input(out, in, &a)) {
            set_names s = {0};
            uint64_t retired = 0;
            if (!(rc = name_set(&s, out, fmt, &a)))
                rc = retire_other_weights(s.dir, s.stem, s.ext, nshards, w.backup, &a, &retired);
            if (report) report->retired += retired;
        }
        if (!rc && out_dir) rc = ckpt_folder_files_copy(&others, out_dir, w.backup, &a);
    }
    ckpt_arena_free(&a);
    ckpt_close(f);
    return rc;
}
