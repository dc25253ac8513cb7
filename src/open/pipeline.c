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
#include "ckpt.h"

struct ckpt_pipeline {
    ckpt_arena arena;
    const char **names, **paths;
    size_t n, cap;
};

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A component as diffusers saves it: [library, class], both strings. */
static int is_component(const char *name, const json_t *v) {
    return name[0] != '_' && json_is_array(v) && json_array_size(v) == 2 &&
           json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1));
}

/* Whether component folder `path` is a model's (config.json: what
 * ModelMixin and PreTrainedModel.save_pretrained write beside the
 * weights) or is missing; a tokenizer's or scheduler's is neither. */
static int is_model_folder(ckpt_arena *a, const char *path, int *rc) {
    struct stat st;
    const char *config = ckpt_arena_printf(a, "%s/config.json", path);
    if (config == NULL) {
        *rc = ckpt_err_nomem();
        return 0;
    }
    return stat(path, &st) != 0 || (S_ISDIR(st.st_mode) && stat(config, &st) == 0);
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
        if (!is_model_folder(&p->arena, path, &rc)) {
            if (rc) return rc;
            continue;
        }
        if (ckpt_arena_grow(&p->arena, (void **)&p->names, &p->cap, p->n + 1, sizeof *p->names))
            return ckpt_err_nomem();
        if ((p->names[p->n++] = ckpt_arena_strdup(&p->arena, name)) == NULL)
            return ckpt_err_nomem();
    }
    if (p->n) qsort(p->names, p->n, sizeof *p->names, by_name);
    if ((p->paths = ckpt_arena_array(&p->arena, p->n + 1, sizeof *p->paths)) == NULL)
        return ckpt_err_nomem();
    for (size_t i = 0; i < p->n; i++)
        if ((p->paths[i] = ckpt_arena_printf(&p->arena, "%s/%s", dir, p->names[i])) == NULL)
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
    return p && i < p->n ? p->names[i] : NULL;
}

const char *ckpt_pipeline_path(const ckpt_pipeline *p, size_t i) {
    return p && i < p->n ? p->paths[i] : NULL;
}

void ckpt_pipeline_free(ckpt_pipeline *p) {
    if (p == NULL) return;
    ckpt_arena_free(&p->arena);
    ckpt_free(p);
}
