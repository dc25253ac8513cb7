/* pipeline.c - the model components of a diffusers pipeline directory
 * (include/ckpt/file.h): what DiffusionPipeline.from_pretrained loads is
 * what model_index.json names, each from the folder of its name. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/source.h"
#include "open/model_dir.h"
#include "ckpt.h"

/* A component: its name, and the weights file its folder holds without
 * config.json (NULL for a model's folder or a missing one). */
typedef struct component {
    const char *name, *unloadable;
} component;

struct ckpt_pipeline {
    ckpt_arena arena;
    component *c;
    const char **paths;
    size_t n, cap;
};

static int by_name(const void *a, const void *b) {
    return strcmp(((const component *)a)->name, ((const component *)b)->name);
}

/* A component as diffusers saves it: [library, class], both strings. */
static int is_component(const char *name, const json_t *v) {
    return name[0] != '_' && json_is_array(v) && json_array_size(v) == 2 &&
           json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1));
}

/* Whether component folder `path` is a model's (config.json: what
 * ModelMixin and PreTrainedModel.save_pretrained write beside the
 * weights), is missing, or holds weights without config.json (*unloadable:
 * the weights file, by ckpt_open's rule); a tokenizer's or scheduler's is
 * none of them. */
static int is_model_folder(ckpt_arena *a, const char *path, const char **unloadable, int *rc) {
    struct stat st;
    const char *config = ckpt_arena_printf(a, "%s/config.json", path);
    *unloadable = NULL;
    if (config == NULL) {
        *rc = ckpt_err_nomem();
        return 0;
    }
    if (stat(path, &st) != 0) return 1;
    if (!S_ISDIR(st.st_mode)) return 0;
    if (stat(config, &st) == 0) return 1;
    const char *weights = NULL;
    int found = ckpt_model_dir_weights(a, path, &weights);
    if (found == CKPT_E_NOMEM) *rc = found;
    if (found != 0) return 0;
    const char *base = strrchr(weights, '/');
    *unloadable = base ? base + 1 : weights;
    return 1;
}

static int read_components(ckpt_pipeline *p, const char *dir, const char *index, json_t *doc) {
    const char *name;
    json_t *v;
    int rc = 0;
    if (!json_is_object(doc))
        return ckpt_err(CKPT_E_FORMAT, index, NULL, CKPT_NO_OFFSET,
                        "model_index.json is not a JSON object");
    json_object_foreach(doc, name, v) {
        if (!is_component(name, v)) continue;
        if (!name[0] || name[0] == '.' || strchr(name, '/') || strchr(name, '\\'))
            return ckpt_err(CKPT_E_FORMAT, index, NULL, CKPT_NO_OFFSET,
                            "model_index.json names the component \"%s\": not a folder of "
                            "the pipeline's directory",
                            name);
        const char *path = ckpt_arena_printf(&p->arena, "%s/%s", dir, name);
        if (path == NULL) return ckpt_err_nomem();
        const char *unloadable;
        if (!is_model_folder(&p->arena, path, &unloadable, &rc)) {
            if (rc) return rc;
            continue;
        }
        if (ckpt_arena_grow(&p->arena, (void **)&p->c, &p->cap, p->n + 1, sizeof *p->c))
            return ckpt_err_nomem();
        p->c[p->n].unloadable = unloadable;
        if ((p->c[p->n++].name = ckpt_arena_strdup(&p->arena, name)) == NULL)
            return ckpt_err_nomem();
    }
    if (p->n) qsort(p->c, p->n, sizeof *p->c, by_name);
    if ((p->paths = ckpt_arena_array(&p->arena, p->n + 1, sizeof *p->paths)) == NULL)
        return ckpt_err_nomem();
    for (size_t i = 0; i < p->n; i++)
        if ((p->paths[i] = ckpt_arena_printf(&p->arena, "%s/%s", dir, p->c[i].name)) == NULL)
            return ckpt_err_nomem();
    return 0;
}

int ckpt_pipeline_open(ckpt_pipeline **out, const char *dir) {
    if (out) *out = NULL;
    if (out == NULL || dir == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, dir, NULL, CKPT_NO_OFFSET, "NULL argument");
    ckpt_pipeline *p = ckpt_malloc(sizeof *p);
    if (p == NULL) return ckpt_err_nomem();
    memset(p, 0, sizeof *p);
    const char *index = ckpt_arena_printf(&p->arena, "%s/model_index.json", dir);
    struct stat st;
    ckpt_limits limits = CKPT_LIMITS_INIT;
    char *bytes = NULL;
    size_t len = 0;
    int rc;
    if (index == NULL)
        rc = ckpt_err_nomem();
    else if (stat(index, &st) != 0)
        rc = ckpt_err(CKPT_E_NOTFOUND, dir, NULL, CKPT_NO_OFFSET,
                      "not a diffusers pipeline: no model_index.json");
    else
        rc = ckpt_read_whole(index, limits.max_index_bytes, &bytes, &len);
    if (rc == 0) {
        json_error_t jerr;
        json_t *doc = json_loadb(bytes, len, JSON_REJECT_DUPLICATES, &jerr);
        rc = doc ? read_components(p, dir, index, doc)
                 : ckpt_err(CKPT_E_FORMAT, index, NULL, (uint64_t)jerr.position,
                            "model_index.json is not valid JSON: %s", jerr.text);
        json_decref(doc);
    }
    ckpt_free(bytes);
    if (rc) {
        ckpt_pipeline_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

size_t ckpt_pipeline_count(const ckpt_pipeline *p) { return p ? p->n : 0; }

const char *ckpt_pipeline_component(const ckpt_pipeline *p, size_t i) {
    return p && i < p->n ? p->c[i].name : NULL;
}

const char *ckpt_pipeline_path(const ckpt_pipeline *p, size_t i) {
    return p && i < p->n ? p->paths[i] : NULL;
}

int ckpt_pipeline_check(const ckpt_pipeline *p, size_t i) {
    if (p == NULL || i >= p->n)
        return ckpt_err(CKPT_E_INVALID_ARG, NULL, NULL, CKPT_NO_OFFSET, "no pipeline component %zu",
                        i);
    if (p->c[i].unloadable == NULL) return 0;
    return ckpt_err(CKPT_E_MISMATCH, p->paths[i], NULL, CKPT_NO_OFFSET,
                    "component \"%s\" holds %s but no config.json: "
                    "DiffusionPipeline.from_pretrained cannot load it (from_pretrained reads "
                    "the component's config.json first)",
                    p->c[i].name, p->c[i].unloadable);
}

void ckpt_pipeline_free(ckpt_pipeline *p) {
    if (p == NULL) return;
    ckpt_arena_free(&p->arena);
    ckpt_free(p);
}
