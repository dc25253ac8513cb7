/* defaults.c - what torch's BatchNorm fills itself on load: the module
 * versions a checkpoint's state dicts record in their _metadata, the
 * num_batches_tracked keys a model's BatchNorms would fill, and the rule
 * joining them (torch/nn/modules/batchnorm.py, _NormBase.
 * _load_from_state_dict: version None or below 2 fills the key before the
 * strict check). See ckpt_manifest_set_version in ckpt.h. */
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "keys/keys.h"
#include "model/walk.h"

static int nomem(const ckpt_manifest *m) {
    return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
}

static int set_version(ckpt_manifest *m, const char *name, size_t len, int64_t version) {
    ckpt_strmap_slot *sl = ckpt_strmap_find(&m->ver_index, name, len, ckpt_strmap_hash(name, len));
    if (sl) {
        m->versions[sl->val].version = version;
        return 0;
    }
    char *copy = ckpt_arena_strndup(&m->arena, name, len);
    if (!copy ||
        ckpt_arena_grow(&m->arena, (void **)&m->versions, &m->cver, m->nver + 1,
                        sizeof *m->versions) ||
        ckpt_strmap_put(&m->ver_index, copy, len, m->nver, &sl) < 0)
        return nomem(m);
    m->versions[m->nver++] = (ckpt_module_version){copy, version};
    return 0;
}

int ckpt_manifest_set_version(ckpt_manifest *m, const char *module, int64_t version) {
    if (!m || !module)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "ckpt_manifest_set_version needs a manifest and a module name");
    return set_version(m, module, strlen(module), version);
}

size_t ckpt_manifest_version_count(const ckpt_manifest *m) { return m->nver; }

const char *ckpt_manifest_version_at(const ckpt_manifest *m, size_t i, int64_t *version) {
    if (i >= m->nver) return NULL;
    if (version) *version = m->versions[i].version;
    return m->versions[i].name;
}

static int add_counter(ckpt_manifest *m, size_t i) {
    if (ckpt_arena_grow(&m->arena, (void **)&m->counters, &m->ccounters, m->ncounters + 1,
                        sizeof *m->counters))
        return nomem(m);
    m->counters[m->ncounters++] = i;
    return 0;
}

int ckpt_manifest_add_batchnorm_counter(ckpt_manifest *m, const char *name) {
    size_t i = m && name ? ckpt_manifest_lookup(m, name, strlen(name)) : CKPT_KEYS_NONE;
    if (i == CKPT_KEYS_NONE)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "BatchNorm counter '%s' is not a key of the manifest", name ? name : "");
    return add_counter(m, i);
}

size_t ckpt_manifest_batchnorm_counter_count(const ckpt_manifest *m) { return m->ncounters; }

const char *ckpt_manifest_batchnorm_counter(const ckpt_manifest *m, size_t i) {
    return i < m->ncounters ? m->entries[m->counters[i]].name : NULL;
}

int ckpt_manifest_module_fills(const ckpt_manifest *c, const char *module, size_t len) {
    ckpt_strmap_slot *sl =
        ckpt_strmap_find(&c->ver_index, module, len, ckpt_strmap_hash(module, len));
    return !sl || c->versions[sl->val].version < 2;
}

/* ------------------------------------------------------------ a file's tree */

/* The value of key `key` of DICT d (the last one: Python keeps the last
 * value of a repeated key), or NULL. */
static const ckpt_value *dict_get(const ckpt_value *d, const char *key) {
    const ckpt_value *found = NULL;
    if (!d || d->kind != CKPT_KIND_DICT) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const ckpt_value *k = d->u.dict.keys[i];
        if (k->kind == CKPT_KIND_STR && strcmp(k->u.s.p, key) == 0) found = d->u.dict.vals[i];
    }
    return found;
}

/* What torch compares with 2: an int or bool as it is; None (or no
 * "version") as absent (0 returned, nothing recorded); any other value
 * as 2, so that its key stays missing (ckpt does not guess). */
static int version_of(const ckpt_value *v, int64_t *out) {
    if (!v || v->kind == CKPT_KIND_NONE) return 0;
    if (v->kind == CKPT_KIND_BOOL)
        *out = v->u.b;
    else if (v->kind == CKPT_KIND_INT && v->u.i.decimal)
        *out = v->u.i.decimal[0] == '-' ? INT64_MIN : INT64_MAX;
    else if (v->kind == CKPT_KIND_INT)
        *out = v->u.i.v;
    else
        *out = 2;
    return 1;
}

/* A walk over a file's tree; `work` counts the dict entries read beside
 * the walk (BUILD states and _metadata, which a hostile pickle may share
 * among many dicts, each naming every module anew), bounded in proportion
 * to what the file holds: a module has one _metadata entry per state dict
 * holding it, and torch.save writes a state dict's _metadata once. */
typedef struct versions_walk {
    ckpt_manifest *m;
    const ckpt_file *f;
    uint64_t work, budget;
} versions_walk;

static int spend(versions_walk *vw, const ckpt_value *d) {
    vw->work += d && d->kind == CKPT_KIND_DICT ? d->u.dict.n + 1 : 1;
    if (vw->work <= vw->budget) return 0;
    return ckpt_err(CKPT_E_LIMIT, ckpt_file_path(vw->f), "", CKPT_NO_OFFSET,
                    "state dict _metadata: more than %" PRIu64
                    " entries read in all, the file's module-version budget (16 per "
                    "tensor and value, here %zu and %zu, plus 65536; fixed: no "
                    "ckpt_limits field raises it, ckpt_manifest_set_version gives "
                    "versions by hand): one _metadata shared among dicts?",
                    vw->budget, vw->f->ntensors, vw->f->nvalues);
}

/* The _metadata of the OrderedDict named prefix[0..plen): its modules'
 * versions under "prefix.module". */
static int record(versions_walk *vw, const char *prefix, size_t plen, const ckpt_value *state) {
    ckpt_manifest *m = vw->m;
    int rc = spend(vw, state);
    const ckpt_value *md = rc ? NULL : dict_get(state, "_metadata");
    if (rc || !md || md->kind != CKPT_KIND_DICT || (rc = spend(vw, md))) return rc;
    for (size_t i = 0; i < md->u.dict.n; i++) {
        const ckpt_value *k = md->u.dict.keys[i];
        int64_t version;
        if ((rc = spend(vw, md->u.dict.vals[i]))) return rc;
        if (k->kind != CKPT_KIND_STR ||
            !version_of(dict_get(md->u.dict.vals[i], "version"), &version))
            continue;
        size_t klen = k->u.s.len, len = plen + (plen && klen) + klen;
        char *name = ckpt_malloc(len + 1);
        if (!name) return nomem(m);
        memcpy(name, prefix, plen);
        if (plen && klen) name[plen] = '.';
        memcpy(name + len - klen, k->u.s.p, klen);
        name[len] = '\0';
        rc = set_version(m, name, len, version);
        ckpt_free(name);
        if (rc) return rc;
    }
    return 0;
}

static int enter(ckpt_walk *w, ckpt_walk_frame *node) {
    const ckpt_value *v = node->value;
    if (v->kind == CKPT_KIND_DICT && v->u.dict.state) {
        int rc = record(w->ctx, w->name, node->name_len, v->u.dict.state);
        if (rc) return rc;
    }
    return v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE
               ? CKPT_WALK_DESCEND
               : CKPT_WALK_SKIP;
}

int ckpt_manifest_add_versions(ckpt_manifest *m, const ckpt_file *f) {
    if (!m || !f)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "ckpt_manifest_add_versions needs a manifest and a file");
    const ckpt_value *root = f->root; /* a lazy safetensors tree has no _metadata */
    if (!root) return 0;
    ckpt_walk w;
    ckpt_walk_init(&w, &f->opts.limits, ckpt_file_path(f), NULL);
    versions_walk vw = {m, f, 0, 16 * ((uint64_t)f->ntensors + f->nvalues) + 65536};
    w.enter = enter;
    w.ctx = &vw;
    w.names = 1;
    return ckpt_walk_run(&w, root);
}

/* ------------------------------------------------------------ JSON */

int ckpt_manifest_parse_defaults(ckpt_manifest *m, const json_t *versions, const json_t *counters) {
    if (versions && !json_is_null(versions)) {
        if (!json_is_object(versions))
            return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                            "manifest \"module_versions\": expected an object of integers or null");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)versions, k, v) {
            if (!json_is_integer(v))
                return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                                "manifest module_versions[\"%s\"]: expected an integer", k);
            int rc = set_version(m, k, strlen(k), json_integer_value(v));
            if (rc) return rc;
        }
    }
    if (!counters || json_is_null(counters)) return 0;
    if (!json_is_array(counters))
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "manifest \"batchnorm_counters\": expected a list of names or null");
    for (size_t g = 0; g < json_array_size(counters); g++) {
        const json_t *v = json_array_get(counters, g);
        size_t i = json_is_string(v)
                       ? ckpt_manifest_lookup(m, json_string_value(v), json_string_length(v))
                       : CKPT_KEYS_NONE;
        if (i == CKPT_KEYS_NONE)
            return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                            "manifest batchnorm_counters[%zu]: expected the name of a listed "
                            "tensor",
                            g);
        int rc = add_counter(m, i);
        if (rc) return rc;
    }
    return 0;
}
