/* training_meta.c - "everything except named tensors": what a checkpoint
 * says about the architecture, dtype intent, parallel layout and library
 * versions a resume or deployment needs, from safetensors __metadata__,
 * configuration values in the object tree and a directory's JSON files. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "training/training.h"
#include "model/value.h"
#include "model/walk.h"
#include "format/write.h"

static int is(const char *k, size_t len, const char *name) {
    return strlen(name) == len && strncasecmp(k, name, len) == 0;
}

static int has(const char *k, size_t len, const char *part) {
    size_t n = strlen(part), i;

    for (i = 0; i + n <= len; i++)
        if (strncasecmp(k + i, part, n) == 0) return 1;
    return 0;
}

static int in(const char *k, size_t len, const char *const *names) {
    for (; *names; names++)
        if (is(k, len, *names)) return 1;
    return 0;
}

int ckpt_tr_topic(const char *key, size_t len, int top) {
    static const char *const dtype[] = {
        "dtype",        "torch_dtype", "precision",     "mixed_precision",
        "amp",          "amp_backend", "amp_level",     "fp16",
        "bf16",         "half",        "compute_dtype", "param_dtype",
        "dtype_intent", NULL};
    static const char *const parallel[] = {"world_size",    "tp_size",       "pp_size",
                                           "dp_size",       "ep_size",       "mp_size",
                                           "mp_world_size", "dp_world_size", "ds_config",
                                           "deepspeed",     "zero_stage",    "zero_optimization",
                                           "fsdp",          "fsdp_config",   "sharding_strategy",
                                           "device_mesh",   "num_processes", NULL};
    static const char *const arch[] = {"architectures", "model_type", "peft_type",
                                       "base_model_name_or_path", NULL};
    /* Generic names that mean a model or training config only at the top
     * of a file. */
    static const char *const arch_top[] = {
        "config", "model_config", "hyper_parameters", "hparams",       "args", "model_args",
        "cfg",    "arch",         "architecture",     "training_args", NULL};

    if (key == NULL) return -1;
    if (has(key, len, "version")) return CKPT_META_VERSIONS;
    if (has(key, len, "parallel") || in(key, len, parallel)) return CKPT_META_PARALLEL;
    if (in(key, len, dtype)) return CKPT_META_DTYPE;
    if (in(key, len, arch) || (top && (in(key, len, arch_top) || has(key, len, "config"))))
        return CKPT_META_ARCHITECTURE;
    return -1;
}

int ckpt_tr_meta_add(ckpt_training *t, ckpt_meta_topic topic, const char *file, const char *source,
                     const char *key, const char *text, const ckpt_value *value) {
    ckpt_meta_entry *e;

    if (ckpt_arena_grow(&t->arena, (void **)&t->meta, &t->cmeta, t->nmeta + 1, sizeof *t->meta))
        return ckpt_err_nomem();
    e = &t->meta[t->nmeta];
    e->topic = topic;
    e->file = ckpt_arena_strdup(&t->arena, file);
    e->source = source;
    e->key = ckpt_arena_strdup(&t->arena, key);
    e->text = text ? ckpt_arena_strdup(&t->arena, text) : NULL;
    e->value = value;
    if (e->file == NULL || e->key == NULL || (text && e->text == NULL)) return ckpt_err_nomem();
    t->nmeta++;
    return 0;
}

typedef struct scanner {
    ckpt_training *t;
    const char *file;
    unsigned depth;
} scanner;

/* Each key below the scanned value: recorded when it names a topic;
 * dicts and objects (their attributes) are looked into, s->depth levels
 * down at most. */
static int scan_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    scanner *s = w->ctx;
    const ckpt_value *v = node->value;
    int topic, rc;

    if (w->depth > 0) {
        const char *cpath;

        if (!ckpt_tr_visit(s->t)) return CKPT_WALK_SKIP;
        cpath = ckpt_arena_strndup(&s->t->arena, w->name, node->name_len);
        if (cpath == NULL) return ckpt_err_nomem();
        topic = ckpt_tr_topic(ckpt_walk_segment(w, node), node->seg_len, 0);
        if (topic >= 0 &&
            (rc = ckpt_tr_meta_add(s->t, (ckpt_meta_topic)topic, s->file, "tree", cpath, NULL, v)))
            return rc;
    }
    if (w->depth >= s->depth || (v->kind != CKPT_KIND_DICT && v->kind != CKPT_KIND_OBJECT))
        return CKPT_WALK_SKIP;
    return CKPT_WALK_DESCEND;
}

int ckpt_tr_meta_scan(ckpt_training *t, const char *file, const char *path, const ckpt_value *v,
                      unsigned depth) {
    scanner s = {t, file, depth};
    ckpt_walk w;

    /* an opaque object's BUILD state is its attributes: a dict, or
     * (dict, slots) */
    ckpt_walk_init(&w, NULL, file, NULL);
    w.names = 1;
    w.prefix = path;
    w.follow = CKPT_WALK_OBJECT_ATTRS;
    w.enter = scan_enter;
    w.ctx = &s;
    return ckpt_walk_run(&w, v);
}

/* ------------------------------------------------------------ JSON */

/* A JSON value as text: strings as they are, the rest compact JSON. */
static int json_text(ckpt_training *t, const json_t *v, const char **out) {
    char *dump;

    if (json_is_string(v)) {
        *out = ckpt_arena_strndup(&t->arena, json_string_value(v), json_string_length(v));
        return *out ? 0 : ckpt_err_nomem();
    }
    dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    *out = dump ? ckpt_arena_strdup(&t->arena, dump) : NULL;
    free(dump);
    return *out ? 0 : ckpt_err_nomem();
}

/* Keys naming a topic in a JSON object, `depth` levels down at most. */
static int json_scan(ckpt_training *t, const char *file, const char *source, const char *path,
                     const json_t *obj, int top, unsigned depth) {
    const char *k;
    json_t *v;
    int rc;

    if (!json_is_object(obj) || depth == 0) return 0;
    json_object_foreach((json_t *)obj, k, v) {
        size_t len = strlen(k);
        int topic = ckpt_tr_topic(k, len, top);
        const char *text, *cpath;

        if (!ckpt_tr_visit(t)) return 0;
        cpath = path[0] ? ckpt_arena_printf(&t->arena, "%s.%s", path, k)
                        : ckpt_arena_strdup(&t->arena, k);
        if (cpath == NULL) return ckpt_err_nomem();
        if (topic >= 0) {
            if ((rc = json_text(t, v, &text)) ||
                (rc = ckpt_tr_meta_add(t, (ckpt_meta_topic)topic, file, source, cpath, text, NULL)))
                return rc;
        }
        if ((rc = json_scan(t, file, source, cpath, v, 0, depth - 1))) return rc;
    }
    return 0;
}

int ckpt_tr_meta_file(ckpt_training *t, const ckpt_file *f, const char *file) {
    size_t n = ckpt_file_metadata_count(f), i;
    int rc;

    for (i = 0; i < n; i++) {
        const char *k = ckpt_file_metadata_key(f, i);
        const char *v = ckpt_file_metadata_value(f, i);
        int topic = ckpt_tr_topic(k, strlen(k), 1);
        json_t *doc;

        /* ckpt's own records (structure, aliases, digests) are no metadata
         * a resume or deployment reads; what ckpt.save recorded about the
         * saving environment is */
        if (strncmp(k, CKPT_META_PREFIX, strlen(CKPT_META_PREFIX)) == 0) {
            int saved = ckpt_wr_meta_saved_topic(k);
            if (saved >= 0 && (rc = ckpt_tr_meta_add(t, (ckpt_meta_topic)saved, file,
                                                     "__metadata__", k, v, NULL)))
                return rc;
            continue;
        }
        rc = ckpt_tr_meta_add(t, topic >= 0 ? (ckpt_meta_topic)topic : CKPT_META_OTHER, file,
                              "__metadata__", k, v, NULL);
        if (rc) return rc;
        /* A config stored as JSON text (convert --config) says more. */
        if (v[0] != '{') continue;
        doc = json_loads(v, 0, NULL);
        rc = json_scan(t, file, "__metadata__", k, doc, 0, 3);
        json_decref(doc);
        if (rc) return rc;
    }
    return 0;
}

/* trainer_state.json: the step and epoch training stopped at. */
static int trainer_state(ckpt_training *t, const char *file, const json_t *doc) {
    static const char *const keys[] = {"global_step", "epoch"};
    size_t i;
    int rc;

    if (!json_is_integer(json_object_get(doc, "global_step")) ||
        !json_object_get(doc, "log_history"))
        return 0;
    for (i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(doc, keys[i]);

        if (json_is_integer(v))
            rc = ckpt_tr_add_json_counter(t, file, keys[i], 1, (int64_t)json_integer_value(v), 0);
        else if (json_is_real(v))
            rc = ckpt_tr_add_json_counter(t, file, keys[i], 0, 0, json_real_value(v));
        else
            rc = 0;
        if (rc) return rc;
    }
    return 0;
}

int ckpt_tr_meta_json(ckpt_training *t, const char *file, const char *bytes, size_t len,
                      int *parsed) {
    json_t *doc = json_loadb(bytes, len, 0, NULL);
    int rc;

    *parsed = json_is_object(doc);
    if (!*parsed) {
        json_decref(doc);
        return 0;
    }
    rc = trainer_state(t, file, doc);
    if (rc == 0) rc = json_scan(t, file, "json", "", doc, 1, 3);
    json_decref(doc);
    return rc;
}

const char *ckpt_meta_topic_name(ckpt_meta_topic t) {
    static const char *const names[CKPT_META_TOPIC_COUNT] = {
        "architecture_config", "dtype_intent", "parallel_layout", "library_versions", "other"};

    return (unsigned)t < CKPT_META_TOPIC_COUNT ? names[t] : "unknown";
}
