/* test_doctor.c - ckpt_doctor, the library's health report: a healthy
 * file, a truncated one, a Trainer directory, bad arguments, and every
 * allocation failing in turn. `ckpt doctor` and ckpt.doctor (Python) print
 * the same report; tests/cli and tests/python check their renderings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "fail_alloc.h"
#include "harness.h"

static char src_dir[4096];

static const char *path_of(const char *rel) {
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s/%s", src_dir, rel);
    return buf;
}

TEST(healthy_file) {
    ckpt_doctor_report *r = NULL;
    char *json = NULL;
    size_t len = 0;
    double seconds = -1;
    CHECK_EQ_INT(ckpt_doctor(&r, path_of("../examples/train.pt"), NULL), 0);
    if (!r) return;
    CHECK_EQ_INT(ckpt_doctor_healthy(r), 1);
    CHECK(strncmp(ckpt_doctor_summary(r), "HEALTHY: torch-zip, 16 keys, ", 29) == 0);
    CHECK(ckpt_doctor_file(r) != NULL);
    CHECK(ckpt_doctor_error(r) == NULL);
    CHECK(ckpt_doctor_directory(r) == NULL);
    CHECK_EQ_INT(ckpt_doctor_scan_count(r), 1);
    CHECK_EQ_INT(ckpt_doctor_scan_verdict(r), CKPT_VERDICT_SAFE);
    CHECK(ckpt_doctor_keys(r) != NULL && ckpt_doctor_training(r) != NULL);
    CHECK_EQ_INT(ckpt_doctor_verify_report(r)->bytes, 9815); /* every storage byte */
    CHECK_EQ_INT(ckpt_doctor_verify_report(r)->members, 18);
    CHECK_EQ_INT(ckpt_doctor_elements(r), 2032);
    CHECK_EQ_INT(ckpt_doctor_tensor_bytes(r), 8128);
    CHECK_EQ_INT(ckpt_doctor_entry_count(r), 5); /* model, optimizer, scheduler, epoch, step */
    CHECK(ckpt_doctor_entry_count(r) > 0 && ckpt_doctor_entry_at(r, 0)->value != NULL);
    CHECK(ckpt_doctor_entry_at(r, ckpt_doctor_entry_count(r)) == NULL);
    size_t f32 = 0;
    CHECK_EQ_INT(ckpt_doctor_dtype_bytes(r, CKPT_DT_F32, &f32), 8128);
    CHECK_EQ_INT(f32, 16);
    CHECK_EQ_INT(ckpt_doctor_dtype_bytes(r, CKPT_DT_I64, &f32), 0);
    CHECK_EQ_INT(f32, 0);
    CHECK_EQ_STR(ckpt_doctor_timing(r, 0, &seconds), "open");
    CHECK(seconds >= 0);
    CHECK_EQ_INT(ckpt_doctor_json(&json, &len, r), 0);
    CHECK(json && len == strlen(json));
    CHECK(json && strncmp(json, "{\"file\":\"", 9) == 0);
    CHECK(json && strstr(json, ",\"verdict\":\"healthy\",") != NULL);
    CHECK(json && json[len - 1] == '}');
    ckpt_string_free(json);
    ckpt_doctor_report_free(r);
}

TEST(truncated_file) {
    FILE *in = fopen(path_of("../examples/train.pt"), "rb");
    static unsigned char buf[1 << 16];
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    const char *path = "test_doctor_truncated.pt";
    FILE *out = fopen(path, "wb");
    ckpt_doctor_report *r = NULL;
    if (in) fclose(in);
    CHECK(n > 4000 && out);
    if (!out) return;
    fwrite(buf, 1, 4000, out);
    fclose(out);
    CHECK_EQ_INT(ckpt_doctor(&r, path, NULL), 0);
    if (r) {
        CHECK_EQ_INT(ckpt_doctor_healthy(r), 0);
        CHECK(ckpt_doctor_file(r) == NULL);
        CHECK_EQ_INT(ckpt_doctor_detected(r), CKPT_FORMAT_TORCH_ZIP);
        CHECK(ckpt_doctor_error(r) && ckpt_doctor_error(r)->code == CKPT_E_TRUNCATED);
        CHECK_EQ_INT(ckpt_doctor_size(r), 4000);
        CHECK(strncmp(ckpt_doctor_summary(r), "ATTENTION: cannot be opened: ", 29) == 0);
        /* messages longer than any fixed buffer reach the verdict whole */
        CHECK(strlen(ckpt_doctor_summary(r)) > 160);
        CHECK(ckpt_doctor_keys(r) == NULL && ckpt_doctor_training(r) == NULL);
        CHECK_EQ_INT(ckpt_doctor_note_count(r), 1);
    }
    ckpt_doctor_report_free(r);
    remove(path);
}

TEST(trainer_directory) {
    ckpt_doctor_report *r = NULL;
    CHECK_EQ_INT(ckpt_doctor(&r, path_of("training/data/hf_trainer"), NULL), 0);
    if (!r) return;
    CHECK(ckpt_doctor_directory(r) != NULL);
    CHECK(strstr(ckpt_doctor_path(r), "hf_trainer/") != NULL);
    CHECK(ckpt_doctor_check_count(r) >= 1);
    CHECK_EQ_INT(ckpt_doctor_sharded(r), 0);
    CHECK_EQ_INT(ckpt_doctor_scan_count(r), ckpt_doctor_check_count(r) + 1);
    ckpt_doctor_report_free(r);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ_INT(fwrite(p, 1, n, f), n);
        fclose(f);
    }
}

/* A hostile pickle (os.system) the subdirectory tests hide below a
 * model folder. */
static const char evil[] = "\x80\x02"
                           "cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";

/* A fresh folder d holding examples/train.pt as model.pt; 0 on failure. */
static int example_folder(char *d) {
    char p[512];
    FILE *in = fopen(path_of("../examples/train.pt"), "rb");
    int made = in && mkdtemp(d) != NULL;
    CHECK(made);
    if (!made) {
        if (in) fclose(in);
        return 0;
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    snprintf(p, sizeof p, "%s/model.pt", d);
    write_file(p, buf, n);
    return 1;
}

/* A model folder whose weights lie in a subdirectory (a diffusers
 * pipeline's unet/): its files are scanned. A hostile
 * unet/diffusion_pytorch_model.bin was "safe" (the folder's top level
 * only; unet/ listed as no checkpoint). */
TEST(subdirectory_files) {
    char d[] = "/tmp/ckpt-test-doctor-XXXXXX", p[512];
    if (!example_folder(d)) return;
    snprintf(p, sizeof p, "%s/unet", d);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/unet/notes.txt", d);
    write_file(p, "weights\n", 8);
    snprintf(p, sizeof p, "%s/unet/diffusion_pytorch_model.bin", d);
    write_file(p, evil, sizeof evil - 1);
    ckpt_doctor_report *r = NULL;
    CHECK_EQ_INT(ckpt_doctor(&r, d, NULL), 0);
    if (r) {
        CHECK_EQ_INT(ckpt_doctor_scan_verdict(r), CKPT_VERDICT_UNSAFE);
        CHECK_EQ_INT(ckpt_doctor_scan_count(r), 2); /* notes.txt is no checkpoint */
        const ckpt_doctor_scan *s = ckpt_doctor_scan_at(r, 1);
        CHECK(s && strcmp(s->name, "unet/diffusion_pytorch_model.bin") == 0);
        CHECK(strstr(ckpt_doctor_summary(r), "unet/diffusion_pytorch_model.bin") != NULL);
        ckpt_doctor_report_free(r);
    }
    unlink(p);
    snprintf(p, sizeof p, "%s/unet/notes.txt", d);
    unlink(p);
    snprintf(p, sizeof p, "%s/unet", d);
    rmdir(p);
    snprintf(p, sizeof p, "%s/model.pt", d);
    unlink(p);
    rmdir(d);
}

/* A hostile file past 16 levels of subdirectories is not read: the
 * folder left unscanned is an unscannable entry naming it, never 'safe'
 * with the file unread (it was HEALTHY, safe). */
TEST(subdirectory_too_deep) {
    char d[] = "/tmp/ckpt-test-doctor-XXXXXX", p[512];
    if (!example_folder(d)) return;
    snprintf(p, sizeof p, "%s", d);
    for (int i = 0; i < 17; i++) {
        size_t len = strlen(p);
        snprintf(p + len, sizeof p - len, "/s");
        CHECK_EQ_INT(mkdir(p, 0755), 0);
    }
    size_t len = strlen(p);
    snprintf(p + len, sizeof p - len, "/model.bin");
    write_file(p, evil, sizeof evil - 1);
    ckpt_doctor_report *r = NULL;
    CHECK_EQ_INT(ckpt_doctor(&r, d, NULL), 0);
    if (r) {
        CHECK_EQ_INT(ckpt_doctor_scan_verdict(r), CKPT_VERDICT_UNSCANNABLE);
        CHECK_EQ_INT(ckpt_doctor_scan_count(r), 2); /* model.pt, then s/... */
        const ckpt_doctor_scan *s = ckpt_doctor_scan_at(r, 1);
        CHECK(s && s->report == NULL && s->error.code == CKPT_E_LIMIT);
        CHECK(s && strcmp(s->name, "s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s/s") == 0);
        CHECK(s && strstr(s->error.message, "deeper than 16 levels") != NULL);
        ckpt_doctor_report_free(r);
    }
    unlink(p);
    for (int i = 0; i < 17; i++) {
        *strrchr(p, '/') = 0;
        rmdir(p);
    }
    snprintf(p, sizeof p, "%s/model.pt", d);
    unlink(p);
    rmdir(d);
}

TEST(bad_arguments) {
    ckpt_doctor_report *r = (ckpt_doctor_report *)&r;
    ckpt_doctor_options o = CKPT_DOCTOR_OPTIONS_INIT;
    CHECK_EQ_INT(ckpt_doctor(&r, "/nonexistent/x.pt", NULL), CKPT_E_IO);
    CHECK(r == NULL);
    CHECK_EQ_INT(ckpt_doctor(NULL, "x", NULL), CKPT_E_INVALID_ARG);
    o.version = 99;
    CHECK_EQ_INT(ckpt_doctor(&r, path_of("../examples/train.pt"), &o), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_doctor_options_init(&o, CKPT_DOCTOR_OPTIONS_VERSION), 0);
    CHECK_EQ_INT(o.version, CKPT_DOCTOR_OPTIONS_VERSION);
    CHECK_EQ_INT(ckpt_doctor_options_init(&o, 2), CKPT_E_INVALID_ARG);
    ckpt_doctor_report_free(NULL);
    ckpt_string_free(NULL);
}

/* Failing allocation k, for every k: CKPT_E_NOMEM, *out NULL, no leak (the
 * ASan build checks leaks); past the last allocation, success. */
static void fail_each(const char *path) {
    int fail_at;
    ckpt_doctor_report *r = NULL;
    char *json = NULL;
    int rc = CKPT_E_NOMEM;
    for (fail_at = 1; rc == CKPT_E_NOMEM && fail_at < 100000; fail_at++) {
        fail_alloc_arm(fail_at);
        rc = ckpt_doctor(&r, path, NULL);
        if (rc == 0) rc = ckpt_doctor_json(&json, NULL, r);
        ckpt_set_allocator(NULL);
        CHECK(rc == 0 || rc == CKPT_E_NOMEM);
        ckpt_string_free(json);
        json = NULL;
        ckpt_doctor_report_free(r);
        r = NULL;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(fail_at > 10);
}

/* One tensor of a hand-written safetensors file: name, dtype, shape
 * (JSON text), its bytes. */
typedef struct st_tensor {
    const char *name, *dtype, *shape;
    const char *bytes;
    size_t n;
} st_tensor;

/* Writes the tensors as a safetensors file at path, data in order. */
static int write_safetensors(const char *path, const st_tensor *t, size_t n) {
    static char header[4096];
    size_t len = 0, off = 0;
    len += (size_t)snprintf(header + len, sizeof header - len, "{");
    for (size_t i = 0; i < n; i++, off += t[i - 1].n)
        len +=
            (size_t)snprintf(header + len, sizeof header - len,
                             "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                             i ? "," : "", t[i].name, t[i].dtype, t[i].shape, off, off + t[i].n);
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    FILE *out = fopen(path, "wb");
    if (!out || len >= sizeof header) return -1;
    unsigned char size[8];
    for (int b = 0; b < 8; b++) size[b] = (unsigned char)((uint64_t)len >> (8 * b));
    fwrite(size, 1, 8, out);
    fwrite(header, 1, len, out);
    for (size_t i = 0; i < n; i++) fwrite(t[i].bytes, 1, t[i].n, out);
    return fclose(out);
}

/* bitsandbytes' save_pretrained layouts (report/quant.h): a 4-bit weight
 * packs its parameters two to a byte, its absmax, quant_map and
 * quant_state are quantization state, as is an int8 weight's SCB; the
 * doctor says how many parameters there are (before: nothing, its element
 * count taking packed bytes and state for parameters). An SCB
 * beside a weight that is not int8 is an ordinary tensor. */
TEST(bitsandbytes_parameters) {
    static const char qs[] = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"shape\": [2, 4]}";
    char qs_shape[32];
    snprintf(qs_shape, sizeof qs_shape, "[%zu]", sizeof qs - 1);
    const st_tensor t[] = {
        {"l.weight", "U8", "[4,1]", "\x12\x34\x56\x78", 4},
        {"l.weight.absmax", "F32", "[1]", "\0\0\x80\x3f", 4},
        {"l.weight.quant_map", "F32", "[2]", "\0\0\x80\xbf\0\0\x80\x3f", 8},
        {"l.weight.quant_state.bitsandbytes__nf4", "U8", qs_shape, qs, sizeof qs - 1},
        {"m.weight", "I8", "[2,3]", "\1\2\3\4\5\6", 6},
        {"m.SCB", "F32", "[2]", "\0\0\x80\x3f\0\0\x80\x3f", 8},
        {"n.weight", "BF16", "[3]", "\x80\x3f\x80\x3f\x80\x3f", 6},
        {"n.SCB", "F32", "[1]", "\0\0\x80\x3f", 4},
    };
    const char *path = "test_doctor_bnb.safetensors";
    ckpt_doctor_report *r = NULL;
    CHECK_EQ_INT(write_safetensors(path, t, sizeof t / sizeof t[0]), 0);
    CHECK_EQ_INT(ckpt_doctor(&r, path, NULL), 0);
    if (!r) return;
    const char *said = NULL;
    for (size_t i = 0; i < ckpt_doctor_note_count(r); i++)
        if (strstr(ckpt_doctor_note(r, i), "bitsandbytes")) said = ckpt_doctor_note(r, i);
    /* 4 + 1 + 2 + 56 + 6 + 2 + 3 + 1 elements; 8 + 6 + 3 + 1 parameters */
    CHECK_EQ_INT(ckpt_doctor_elements(r), 19 + sizeof qs - 1);
    CHECK(said && strstr(said, "1 4-bit weight packs 8 parameters two to a byte in 4 U8 elements"));
    CHECK(said && strstr(said, "1 int8 weight, a parameter per element"));
    CHECK(said && strstr(said, "4 tensors of quantization state"));
    CHECK(said && strstr(said, ": 18 parameters in all"));
    /* the note ckpt inspect prints: the same sentence */
    ckpt_file *f = NULL;
    char *note = NULL;
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    CHECK_EQ_INT(ckpt_file_quant_note(&note, f), 0);
    CHECK(said && note && strcmp(note, said) == 0);
    ckpt_string_free(note);
    CHECK_EQ_INT(ckpt_file_quant_note(NULL, f), CKPT_E_INVALID_ARG);
    ckpt_close(f);
    ckpt_doctor_report_free(r);
    /* the same names without a quant_state: no packed weight, no note */
    CHECK_EQ_INT(write_safetensors(path, t, 3), 0);
    CHECK_EQ_INT(ckpt_doctor(&r, path, NULL), 0);
    for (size_t i = 0; r && i < ckpt_doctor_note_count(r); i++)
        CHECK(!strstr(ckpt_doctor_note(r, i), "bitsandbytes"));
    ckpt_doctor_report_free(r);
    note = (char *)"unset";
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    CHECK_EQ_INT(ckpt_file_quant_note(&note, f), 0);
    CHECK(note == NULL);
    ckpt_close(f);
    unlink(path);
}

TEST(allocation_failures) {
    fail_each(path_of("../examples/train.pt"));
    fail_each(path_of("training/data/hf_trainer"));
}

int main(void) {
    const char *slash = strrchr(__FILE__, '/');
    snprintf(src_dir, sizeof src_dir, "%.*s", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".");
    RUN(healthy_file);
    RUN(truncated_file);
    RUN(trainer_directory);
    RUN(subdirectory_files);
    RUN(subdirectory_too_deep);
    RUN(bad_arguments);
    RUN(bitsandbytes_parameters);
    RUN(allocation_failures);
    return harness_end();
}
