/* training_json.c - the JSON of a training analysis (training_json.h);
 * the CLI renders the same analysis as text. */
#include "report/training_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "report/text.h"

/* Nesting of a value rendered in full, and nodes rendered per value (a
 * small DAG of shared lists can name 1000^6 nodes); parts past either
 * bound read "...". */
#define VALUE_DEPTH_MAX 6
#define VALUE_NODES_MAX 4096u
/* The metadata topics a resume or deployment needs (not "other"). */
#define NEEDED_TOPICS CKPT_META_OTHER

static void json_value_at(ckpt_jw *j, const ckpt_value *v, unsigned depth, unsigned *budget) {
    size_t i, n = ckpt_value_len(v), len;
    const ckpt_tensor *x;
    char shape[128], buf[160];

    if (*budget == 0) {
        ckpt_jw_string(j, "...");
        return;
    }
    (*budget)--;
    switch (ckpt_value_kind(v)) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        if (depth >= VALUE_DEPTH_MAX) {
            ckpt_jw_string(j, "...");
            return;
        }
        ckpt_jw_array_begin(j);
        for (i = 0; i < n; i++) json_value_at(j, ckpt_value_item(v, i), depth + 1, budget);
        ckpt_jw_array_end(j);
        return;
    case CKPT_KIND_DICT:
        if (depth >= VALUE_DEPTH_MAX) {
            ckpt_jw_string(j, "...");
            return;
        }
        ckpt_jw_object_begin(j);
        for (i = 0; i < n; i++) {
            const ckpt_value *k = ckpt_value_key(v, i);
            const char *s = ckpt_value_kind(k) == CKPT_KIND_STR ? ckpt_value_str(k, &len)
                                                                : ckpt_value_int_decimal(k);

            ckpt_jw_key(j, s ? s : ckpt_kind_name(ckpt_value_kind(k)));
            json_value_at(j, ckpt_value_item(v, i), depth + 1, budget);
        }
        ckpt_jw_object_end(j);
        return;
    case CKPT_KIND_TENSOR:
        x = ckpt_value_tensor(v);
        snprintf(buf, sizeof buf, "tensor %s %s", ckpt_dtype_name(ckpt_tensor_dtype(x)),
                 ckpt_report_dims(shape, sizeof shape, ckpt_tensor_ndim(x), ckpt_tensor_shape(x)));
        ckpt_jw_string(j, buf);
        return;
    default: ckpt_jw_leaf(j, v); return;
    }
}

static void json_value(ckpt_jw *j, const ckpt_value *v, unsigned depth) {
    unsigned budget = VALUE_NODES_MAX;

    json_value_at(j, v, depth, &budget);
}

static int int_dtype(ckpt_dtype dt) {
    return dt == CKPT_DT_I64 || dt == CKPT_DT_I32 || dt == CKPT_DT_I16 || dt == CKPT_DT_I8 ||
           dt == CKPT_DT_U8 || dt == CKPT_DT_U16 || dt == CKPT_DT_U32 || dt == CKPT_DT_U64 ||
           dt == CKPT_DT_BOOL;
}

static void json_counter(ckpt_jw *j, const ckpt_component *c) {
    char buf[32];
    ckpt_dtype dt;

    if (ckpt_value_kind(c->value) != CKPT_KIND_TENSOR) {
        ckpt_jw_leaf(j, c->value);
        return;
    }
    dt = ckpt_tensor_dtype(ckpt_value_tensor(c->value));
    if (isnan(c->number)) {
        ckpt_jw_null(j);
    } else if (int_dtype(dt)) {
        snprintf(buf, sizeof buf, "%.0f", c->number);
        ckpt_jw_int_text(j, buf);
    } else {
        ckpt_jw_double(j, c->number);
    }
}

static const char *str_key(const ckpt_value *k) {
    size_t len;

    return ckpt_value_kind(k) == CKPT_KIND_STR ? ckpt_value_str(k, &len) : "";
}

static int is_hyper(const char *key) {
    return strcmp(key, "params") != 0 && strcmp(key, "param_names") != 0;
}

static size_t group_params(const ckpt_value *g) {
    size_t n = ckpt_value_kind(g) == CKPT_KIND_DICT ? ckpt_value_len(g) : 0, i, count = 0;

    for (i = 0; i < n; i++)
        if (strcmp(str_key(ckpt_value_key(g, i)), "params") == 0)
            count = ckpt_value_len(ckpt_value_item(g, i));
    return count;
}

static void json_groups(ckpt_jw *j, const ckpt_value *groups) {
    size_t n = ckpt_value_len(groups), i, k;

    ckpt_jw_array_begin(j);
    for (i = 0; i < n; i++) {
        const ckpt_value *g = ckpt_value_item(groups, i);
        size_t m = ckpt_value_kind(g) == CKPT_KIND_DICT ? ckpt_value_len(g) : 0;

        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "parameters");
        ckpt_jw_uint(j, group_params(g));
        ckpt_jw_key(j, "hyperparameters");
        ckpt_jw_object_begin(j);
        for (k = 0; k < m; k++) {
            const char *key = str_key(ckpt_value_key(g, k));

            if (key[0] == '\0' || !is_hyper(key)) continue;
            ckpt_jw_key(j, key);
            json_value(j, ckpt_value_item(g, k), 0);
        }
        ckpt_jw_object_end(j);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
}

static void json_component(ckpt_jw *j, const ckpt_component *c) {
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "kind");
    ckpt_jw_string(j, ckpt_component_kind_name(c->kind));
    ckpt_jw_key(j, "file");
    ckpt_jw_string(j, c->file);
    ckpt_jw_key(j, "name");
    ckpt_jw_string(j, c->name);
    ckpt_jw_key(j, "type");
    ckpt_jw_string(j, c->type);
    ckpt_jw_key(j, "tensors");
    ckpt_jw_uint(j, c->tensors);
    ckpt_jw_key(j, "elements");
    ckpt_jw_uint(j, c->elements);
    ckpt_jw_key(j, "bytes");
    ckpt_jw_uint(j, c->bytes);
    if (c->kind == CKPT_COMPONENT_MODEL) {
        ckpt_jw_key(j, "parameter_bytes");
        ckpt_jw_uint(j, c->param_bytes);
    } else if (c->kind == CKPT_COMPONENT_OPTIMIZER) {
        ckpt_jw_key(j, "state_bytes");
        ckpt_jw_uint(j, c->state_bytes);
        ckpt_jw_key(j, "parameters");
        ckpt_jw_uint(j, c->params);
        ckpt_jw_key(j, "parameters_with_state");
        ckpt_jw_uint(j, c->params_with_state);
        ckpt_jw_key(j, "param_groups");
        if (c->param_groups)
            json_groups(j, c->param_groups);
        else
            ckpt_jw_null(j);
    } else if (c->kind == CKPT_COMPONENT_COUNTER) {
        ckpt_jw_key(j, "value");
        json_counter(j, c);
    }
    ckpt_jw_object_end(j);
}

typedef struct totals {
    uint64_t components[CKPT_COMPONENT_OTHER + 1];
    uint64_t tensors[CKPT_COMPONENT_OTHER + 1];
    uint64_t elements[CKPT_COMPONENT_OTHER + 1];
    uint64_t bytes[CKPT_COMPONENT_OTHER + 1];
    uint64_t param_bytes, state_bytes;
} totals;

static totals sum(const ckpt_training *t) {
    size_t n = ckpt_training_component_count(t), i;
    totals s;

    memset(&s, 0, sizeof s);
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);
        unsigned k = (unsigned)c->kind;

        if (k > CKPT_COMPONENT_OTHER) continue;
        s.components[k]++;
        s.tensors[k] += c->tensors;
        s.elements[k] += c->elements;
        s.bytes[k] += c->bytes;
        s.param_bytes += c->kind == CKPT_COMPONENT_MODEL ? c->param_bytes : 0;
        s.state_bytes += c->state_bytes;
    }
    return s;
}

static void json_memory(const ckpt_training *t, ckpt_jw *j) {
    size_t n = ckpt_training_component_count(t), i;
    totals s = sum(t);
    double ratio = ckpt_training_optimizer_ratio(t);

    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "components");
    ckpt_jw_array_begin(j);
    for (i = 0; i < n; i++) json_component(j, ckpt_training_component(t, i));
    ckpt_jw_array_end(j);
    ckpt_jw_key(j, "by_kind");
    ckpt_jw_object_begin(j);
    for (i = 0; i <= CKPT_COMPONENT_OTHER; i++) {
        if (s.components[i] == 0) continue;
        ckpt_jw_key(j, ckpt_component_kind_name((ckpt_component_kind)i));
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "components");
        ckpt_jw_uint(j, s.components[i]);
        ckpt_jw_key(j, "tensors");
        ckpt_jw_uint(j, s.tensors[i]);
        ckpt_jw_key(j, "elements");
        ckpt_jw_uint(j, s.elements[i]);
        ckpt_jw_key(j, "bytes");
        ckpt_jw_uint(j, s.bytes[i]);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_object_end(j);
    ckpt_jw_key(j, "model_parameter_bytes");
    ckpt_jw_uint(j, s.param_bytes);
    ckpt_jw_key(j, "optimizer_state_bytes");
    ckpt_jw_uint(j, s.state_bytes);
    ckpt_jw_key(j, "optimized_parameter_bytes");
    ckpt_jw_uint(j, ckpt_training_optimized_bytes(t));
    ckpt_jw_key(j, "optimizer_to_model_ratio");
    if (isnan(ratio))
        ckpt_jw_null(j);
    else
        ckpt_jw_double(j, ratio);
    ckpt_jw_key(j, "files");
    ckpt_jw_array_begin(j);
    for (i = 0; i < ckpt_training_file_count(t); i++) {
        const ckpt_file *f = ckpt_training_file(t, i);

        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "name");
        ckpt_jw_string(j, ckpt_training_file_name(t, i));
        ckpt_jw_key(j, "format");
        ckpt_jw_string(j, ckpt_format_name(ckpt_file_format(f)));
        ckpt_jw_key(j, "bytes");
        ckpt_jw_uint(j, ckpt_file_size(f));
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_jw_key(j, "ignored");
    ckpt_jw_array_begin(j);
    for (i = 0; i < ckpt_training_ignored_count(t); i++)
        ckpt_jw_string(j, ckpt_training_ignored(t, i));
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

static void json_resume(const ckpt_training *t, ckpt_jw *j) {
    size_t i, n;

    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "verdict");
    ckpt_jw_string(j, ckpt_resume_name(ckpt_training_resume(t)));
    ckpt_jw_key(j, "reasons");
    ckpt_jw_array_begin(j);
    for (i = 0; i < ckpt_training_reason_count(t); i++)
        ckpt_jw_string(j, ckpt_training_reason(t, i));
    ckpt_jw_array_end(j);
    ckpt_jw_key(j, "warnings");
    ckpt_jw_array_begin(j);
    for (i = 0; i < ckpt_training_warning_count(t); i++)
        ckpt_jw_string(j, ckpt_training_warning(t, i));
    ckpt_jw_array_end(j);
    ckpt_jw_key(j, "counters");
    ckpt_jw_array_begin(j);
    n = ckpt_training_component_count(t);
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind != CKPT_COMPONENT_COUNTER) continue;
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "file");
        ckpt_jw_string(j, c->file);
        ckpt_jw_key(j, "name");
        ckpt_jw_string(j, c->name);
        ckpt_jw_key(j, "type");
        ckpt_jw_string(j, c->type);
        ckpt_jw_key(j, "value");
        json_counter(j, c);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

static int topic_present(const ckpt_training *t, unsigned topic) {
    size_t i;

    for (i = 0; i < ckpt_training_meta_count(t); i++)
        if ((unsigned)ckpt_training_meta(t, i)->topic == topic) return 1;
    return 0;
}

static void json_metadata(const ckpt_training *t, ckpt_jw *j) {
    size_t n = ckpt_training_meta_count(t), i;
    unsigned topic;

    ckpt_jw_object_begin(j);
    for (topic = 0; topic < CKPT_META_TOPIC_COUNT; topic++) {
        ckpt_jw_key(j, ckpt_meta_topic_name((ckpt_meta_topic)topic));
        ckpt_jw_array_begin(j);
        for (i = 0; i < n; i++) {
            const ckpt_meta_entry *e = ckpt_training_meta(t, i);

            if ((unsigned)e->topic != topic) continue;
            ckpt_jw_object_begin(j);
            ckpt_jw_key(j, "file");
            ckpt_jw_string(j, e->file);
            ckpt_jw_key(j, "source");
            ckpt_jw_string(j, e->source);
            ckpt_jw_key(j, "key");
            ckpt_jw_string(j, e->key);
            ckpt_jw_key(j, "value");
            if (e->text)
                ckpt_jw_string(j, e->text);
            else
                json_value(j, e->value, 0);
            ckpt_jw_object_end(j);
        }
        ckpt_jw_array_end(j);
    }
    ckpt_jw_key(j, "not_carried");
    ckpt_jw_array_begin(j);
    for (topic = 0; topic < NEEDED_TOPICS; topic++)
        if (!topic_present(t, topic))
            ckpt_jw_string(j, ckpt_meta_topic_name((ckpt_meta_topic)topic));
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

/* A part as JSON, null when the file could not be opened. */
static void part(ckpt_jw *j, const ckpt_training *t,
                 void (*as_json)(const ckpt_training *, ckpt_jw *)) {
    if (t == NULL)
        ckpt_jw_null(j);
    else
        as_json(t, j);
}

void ckpt_report_memory(ckpt_jw *j, const ckpt_training *t) { part(j, t, json_memory); }
void ckpt_report_resume(ckpt_jw *j, const ckpt_training *t) { part(j, t, json_resume); }
void ckpt_report_metadata(ckpt_jw *j, const ckpt_training *t) { part(j, t, json_metadata); }

int ckpt_training_json(char **out, size_t *len, const ckpt_training *t, const char *file,
                       const char *format) {
    ckpt_buf b = {0};
    ckpt_jw j;

    *out = NULL;
    if (len) *len = 0;
    if (t == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, file, NULL, CKPT_NO_OFFSET, "no training analysis");
    ckpt_jw_init(&j, &b);
    ckpt_jw_object_begin(&j);
    ckpt_jw_key(&j, "file");
    ckpt_jw_string(&j, file);
    ckpt_jw_key(&j, "format");
    ckpt_jw_string(&j, format);
    ckpt_jw_key(&j, "resume");
    ckpt_report_resume(&j, t);
    ckpt_jw_key(&j, "memory");
    ckpt_report_memory(&j, t);
    ckpt_jw_key(&j, "metadata");
    ckpt_report_metadata(&j, t);
    ckpt_jw_object_end(&j);
    return ckpt_report_string(out, len, &b);
}
