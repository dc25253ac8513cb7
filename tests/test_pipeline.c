/* test_pipeline.c - the model components of a diffusers pipeline
 * directory (ckpt_pipeline_open): what model_index.json names as
 * [library, class] whose folder holds config.json or is missing, in name
 * order, or holds weights without config.json (ckpt_pipeline_check fails);
 * [null, null], "_" keys, a tokenizer's or scheduler's folder left out; a
 * name outside the directory, text that is no JSON object and a
 * directory without model_index.json refused. */
#include <ckpt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static char dir[] = "/tmp/ckpt-test-pipeline-XXXXXX";

static void put(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void sub(const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
}

TEST(components) {
    ckpt_pipeline *p = NULL;
    char want[256];
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), CKPT_E_NOTFOUND);
    CHECK(p == NULL);
    sub("vae");
    sub("unet");
    sub("tokenizer");
    sub("scheduler");
    put("vae/config.json", "{}");
    put("unet/config.json", "{}");
    put("tokenizer/tokenizer_config.json", "{}");
    put("scheduler/scheduler_config.json", "{}");
    put("model_index.json",
        "{\"_class_name\": \"StableDiffusionPipeline\", \"vae\": [\"diffusers\", "
        "\"AutoencoderKL\"],"
        " \"unet\": [\"diffusers\", \"UNet2DConditionModel\"],"
        " \"text_encoder\": [\"transformers\", \"CLIPTextModel\"],"
        " \"tokenizer\": [\"transformers\", \"CLIPTokenizer\"],"
        " \"scheduler\": [\"diffusers\", \"PNDMScheduler\"],"
        " \"safety_checker\": [null, null], \"requires_safety_checker\": false}");
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), 0);
    /* text_encoder/ is missing: listed, so that opening it says so */
    const char *names[] = {"text_encoder", "unet", "vae"};
    CHECK_EQ_INT((int)ckpt_pipeline_count(p), 3);
    for (size_t i = 0; i < 3 && i < ckpt_pipeline_count(p); i++) {
        CHECK_EQ_STR(ckpt_pipeline_component(p, i), names[i]);
        snprintf(want, sizeof want, "%s/%s", dir, names[i]);
        CHECK_EQ_STR(ckpt_pipeline_path(p, i), want);
    }
    CHECK(ckpt_pipeline_component(p, 3) == NULL && ckpt_pipeline_path(p, 3) == NULL);
    for (size_t i = 0; i < 3; i++) CHECK_EQ_INT(ckpt_pipeline_check(p, i), 0);
    CHECK_EQ_INT(ckpt_pipeline_check(p, 3), CKPT_E_INVALID_ARG);
    ckpt_pipeline_free(p);
    /* vae/ holds weights but no config.json: listed, and its check says
     * diffusers cannot load it (it was left out: verify said OK) */
    put("vae/diffusion_pytorch_model.safetensors", "weights");
    snprintf(want, sizeof want, "%s/vae/config.json", dir);
    CHECK_EQ_INT(unlink(want), 0);
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), 0);
    CHECK_EQ_INT((int)ckpt_pipeline_count(p), 3);
    CHECK_EQ_STR(ckpt_pipeline_component(p, 2), "vae");
    CHECK_EQ_INT(ckpt_pipeline_check(p, 1), 0);
    CHECK_EQ_INT(ckpt_pipeline_check(p, 2), CKPT_E_MISMATCH);
    snprintf(want, sizeof want, "%s/vae", dir);
    CHECK_EQ_STR(ckpt_error_last()->file, want);
    CHECK(strstr(ckpt_error_last()->message, "component \"vae\" holds "
                                             "diffusion_pytorch_model.safetensors but no "
                                             "config.json") != NULL);
    ckpt_pipeline_free(p);
    /* without weights either, it is a tokenizer's kind of folder */
    snprintf(want, sizeof want, "%s/vae/diffusion_pytorch_model.safetensors", dir);
    CHECK_EQ_INT(unlink(want), 0);
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), 0);
    CHECK_EQ_INT((int)ckpt_pipeline_count(p), 2);
    ckpt_pipeline_free(p);
    put("model_index.json", "{\"unet\": [\"diffusers\", \"UNet2DConditionModel\"], "
                            "\"../x\": [\"diffusers\", \"AutoencoderKL\"]}");
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), CKPT_E_FORMAT);
    CHECK(p == NULL && strstr(ckpt_error_last()->message, "\"../x\""));
    put("model_index.json", "[1, 2]");
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), CKPT_E_FORMAT);
    put("model_index.json", "{\"unet\": ");
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_pipeline_open(NULL, dir), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_pipeline_open(&p, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT((int)ckpt_pipeline_count(NULL), 0);
    ckpt_pipeline_free(NULL);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(components);
    const char *files[] = {"vae/config.json", "unet/config.json", "tokenizer/tokenizer_config.json",
                           "scheduler/scheduler_config.json", "model_index.json"};
    const char *dirs[] = {"vae", "unet", "tokenizer", "scheduler", ""};
    char p[256];
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        rmdir(p);
    }
    return harness_end();
}
