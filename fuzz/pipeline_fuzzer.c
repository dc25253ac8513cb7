/* pipeline_fuzzer.c - a diffusers pipeline's model_index.json
 * (ckpt_pipeline_open) on arbitrary bytes, written into a directory made
 * once: unet/ (config.json and weights: a model), vae/ (weights, no
 * config.json: unloadable), tokenizer/ (neither: not a model), a file
 * named scheduler, no text_encoder/ (missing: a component). Traps when a
 * component is not a folder of the directory (empty, ".", "..", a '/' or
 * '\\'), is tokenizer or scheduler, its path is not DIR/NAME, the list is
 * not in strict name order, or ckpt_pipeline_check blames another than
 * vae. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static const char *const made[] = {"unet/config.json", "unet/diffusion_pytorch_model.safetensors",
                                   "vae/diffusion_pytorch_model.safetensors", "scheduler",
                                   "model_index.json"};
static const char *const folders[] = {"unet", "vae", "tokenizer"};

static int put(const char *name, const void *bytes, size_t len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) return -1;
    size_t n = fwrite(bytes, 1, len, fp);
    return fclose(fp) == 0 && n == len ? 0 : -1;
}

static void remove_dir(void) {
    char path[128];
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, made[i]);
        unlink(path);
    }
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, folders[i]);
        rmdir(path);
    }
    rmdir(dir);
}

static void make_dir(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ckpt-pipeline-XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) abort();
    atexit(remove_dir);
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, folders[i]);
        if (mkdir(path, 0700) != 0) abort();
    }
    for (size_t i = 0; i + 1 < sizeof made / sizeof made[0]; i++)
        if (put(made[i], "{}", 2) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dir[0] == '\0') make_dir();
    if (put("model_index.json", data, size) != 0) abort();
    ckpt_pipeline *p = NULL;
    if (ckpt_pipeline_open(&p, dir) != 0) {
        if (p != NULL) __builtin_trap();
        return 0;
    }
    size_t n = ckpt_pipeline_count(p), dlen = strlen(dir);
    for (size_t i = 0; i < n; i++) {
        const char *name = ckpt_pipeline_component(p, i), *path = ckpt_pipeline_path(p, i);
        if (!name || !path || !name[0] || name[0] == '.' || strchr(name, '/') ||
            strchr(name, '\\') || !strcmp(name, "tokenizer") || !strcmp(name, "scheduler"))
            __builtin_trap();
        if (strncmp(path, dir, dlen) != 0 || path[dlen] != '/' || strcmp(path + dlen + 1, name))
            __builtin_trap();
        if (i && strcmp(ckpt_pipeline_component(p, i - 1), name) >= 0) __builtin_trap();
        int rc = ckpt_pipeline_check(p, i);
        if (rc != (strcmp(name, "vae") ? 0 : CKPT_E_MISMATCH)) __builtin_trap();
    }
    if (ckpt_pipeline_component(p, n) || ckpt_pipeline_path(p, n)) __builtin_trap();
    ckpt_pipeline_free(p);
    return 0;
}
