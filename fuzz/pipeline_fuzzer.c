/* pipeline_fuzzer.c - a diffusers pipeline's model_index.json
 * (ckpt_pipeline_open) on arbitrary bytes, written into a directory made
 * once: unet/ (config.json and one F32 tensor: a healthy model), vae/
 * (weights, no config.json: unloadable), tokenizer/ (neither: not a
 * model), a file named scheduler, no text_encoder/ (missing: a
 * component). Traps when a component is not a folder of the directory
 * (empty, ".", "..", a '/' or '\\'), is tokenizer or scheduler, its path
 * is not DIR/NAME, the list is not in strict name order, or
 * ckpt_pipeline_check blames another than vae; and when
 * ckpt_doctor_pipeline (what `ckpt doctor DIR` runs per component) gives
 * a report and an error code together, or neither, no report for unet or
 * vae, a unet that is not HEALTHY, a vae whose verdict does not lead with
 * its finding, or a JSON report whose "pipeline" is not that component
 * with its finding (unet: error null; vae: CKPT_E_MISMATCH). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static const char *const made[] = {"unet/config.json", "vae/diffusion_pytorch_model.safetensors",
                                   "scheduler", "unet/diffusion_pytorch_model.safetensors",
                                   "model_index.json"};
/* unet's weights: {"w": F32 [1]}, 1.0 */
static const char unet_weights[] = "\x3d\0\0\0\0\0\0\0"
                                   "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], "
                                   "\"data_offsets\": [0, 4]}}\0\0\x80\x3f";
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
    for (size_t i = 0; i + 2 < sizeof made / sizeof made[0]; i++)
        if (put(made[i], "{}", 2) != 0) abort();
    if (put(made[3], unet_weights, sizeof unet_weights - 1) != 0) abort();
}

/* ckpt_doctor_pipeline of component i, name: see the top. */
static void doctor(const ckpt_pipeline *p, size_t i, const char *name) {
    ckpt_doctor_report *r = NULL;
    int rc = ckpt_doctor_pipeline(&r, p, i, NULL);
    int unet = !strcmp(name, "unet"), vae = !strcmp(name, "vae");
    if ((rc == 0) != (r != NULL)) __builtin_trap();
    if (rc == CKPT_E_NOMEM) return;
    if (rc != 0) {
        if (unet || vae) __builtin_trap();
        return;
    }
    static const char healthy[] = "HEALTHY: ", finding[] = "ATTENTION: component \"vae\"";
    const char *summary = ckpt_doctor_summary(r);
    if (!summary) __builtin_trap();
    if (unet && (!ckpt_doctor_healthy(r) || strncmp(summary, healthy, sizeof healthy - 1)))
        __builtin_trap();
    if (vae && (ckpt_doctor_healthy(r) || strncmp(summary, finding, sizeof finding - 1)))
        __builtin_trap();
    char *json = NULL;
    if (ckpt_doctor_json(&json, NULL, r) == 0) {
        if (!strstr(json, "\"pipeline\":{\"component\":\"")) __builtin_trap();
        if (unet && !strstr(json, "\"pipeline\":{\"component\":\"unet\",\"error\":null}"))
            __builtin_trap();
        if (vae && !strstr(json, "\"pipeline\":{\"component\":\"vae\",\"error\":{\"code\":"
                                 "\"CKPT_E_MISMATCH\""))
            __builtin_trap();
    }
    ckpt_string_free(json);
    ckpt_doctor_report_free(r);
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
        doctor(p, i, name);
    }
    if (ckpt_pipeline_component(p, n) || ckpt_pipeline_path(p, n)) __builtin_trap();
    ckpt_pipeline_free(p);
    return 0;
}
