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

/* A one-tensor safetensors file (w: F32 [1]). */
static void put_weights(const char *name) {
    static const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    unsigned char len[8] = {sizeof header - 1};
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(len, 1, sizeof len, f);
        fwrite(header, 1, sizeof header - 1, f);
        fwrite("\0\0\x80\x3f", 1, 4, f);
        fclose(f);
    }
}

/* ckpt_doctor_pipeline: vae/ (weights, no config.json) needs attention,
 * its verdict line and JSON saying why; unet/ is healthy (doctor said
 * HEALTHY of both, the finding on the CLI's stderr only). */
TEST(doctor) {
    ckpt_pipeline *p = NULL;
    ckpt_doctor_report *r = NULL;
    char *json = NULL;
    static const char want[] = "ATTENTION: component \"vae\" holds ";
    put_weights("unet/diffusion_pytorch_model.safetensors");
    put_weights("vae/diffusion_pytorch_model.safetensors");
    put("model_index.json", "{\"unet\": [\"diffusers\", \"UNet2DConditionModel\"], "
                            "\"vae\": [\"diffusers\", \"AutoencoderKL\"]}");
    CHECK_EQ_INT(ckpt_pipeline_open(&p, dir), 0);
    CHECK_EQ_INT((int)ckpt_pipeline_count(p), 2);
    CHECK_EQ_INT(ckpt_doctor_pipeline(&r, p, 0, NULL), 0);
    CHECK(r && ckpt_doctor_healthy(r) && ckpt_doctor_json(&json, NULL, r) == 0);
    CHECK(json && strstr(json, "\"pipeline\":{\"component\":\"unet\",\"error\":null}"));
    ckpt_string_free(json);
    ckpt_doctor_report_free(r);
    CHECK_EQ_INT(ckpt_doctor_pipeline(&r, p, 1, NULL), 0);
    CHECK(r && !ckpt_doctor_healthy(r) && ckpt_doctor_json(&json, NULL, r) == 0);
    CHECK(r && strncmp(ckpt_doctor_summary(r), want, sizeof want - 1) == 0);
    CHECK(json && strstr(json, "\"verdict\":\"attention\""));
    CHECK(json && strstr(json, "\"component\":\"vae\",\"error\":{\"code\":\"CKPT_E_MISMATCH\""));
    ckpt_string_free(json);
    ckpt_doctor_report_free(r);
    r = (ckpt_doctor_report *)1;
    CHECK_EQ_INT(ckpt_doctor_pipeline(&r, p, 2, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_doctor_pipeline(NULL, p, 0, NULL), CKPT_E_INVALID_ARG);
    ckpt_pipeline_free(p);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(components);
    RUN(doctor);
    const char *files[] = {"vae/config.json",
                           "unet/config.json",
                           "tokenizer/tokenizer_config.json",
                           "scheduler/scheduler_config.json",
                           "model_index.json",
                           "unet/diffusion_pytorch_model.safetensors",
                           "vae/diffusion_pytorch_model.safetensors"};
    const char *dirs[] = {"vae", "unet", "tokenizer", "scheduler", ""};
    char p[256];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, dirs[i]);
        rmdir(p);
    }
    return harness_end();
}
