/* cmd_doctor.c - `ckpt doctor FILE|DIR [--json]`: a health report.
 *
 * The library examines the file (ckpt_doctor: verification, scans, key
 * hygiene, training analysis, the verdict) and writes the JSON
 * (ckpt_doctor_json); this file prints the report as text, one function
 * per section of the `sections` table. CKPT_DOCTOR_TIMINGS=1 in the
 * environment prints the seconds each step took on stderr (bench/).
 * With --json, a path nothing could be examined in gives {"file",
 * "verdict": null, "error": {...}} (cli_json_error) and exit status 2. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "doctor.h"
#include "summary.h"

/* Top-level entries shown as text (JSON has them all). */
#define TOP_MAX 50

/* ------------------------------------------------------------ helpers */

static double now(void) {
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int timings_on(void) { return getenv("CKPT_DOCTOR_TIMINGS") != NULL; }

static void print_timing(const char *name, double seconds) {
    fprintf(stderr, "ckpt doctor: %-16s %.6f s\n", name, seconds);
}

static void line_start(void) { fputs("  ", stdout); }

static void put_str(const char *s) { cli_put_text(stdout, s, strlen(s)); }

static int is_safetensors(const ckpt_file *f) {
    ckpt_format fmt = ckpt_file_format(f);

    return fmt == CKPT_FORMAT_SAFETENSORS || fmt == CKPT_FORMAT_SAFETENSORS_SHARDED;
}

/* ------------------------------------------------------------ sections */

static void show_format(const ckpt_doctor_report *r) {
    const ckpt_file *f = ckpt_doctor_file(r);
    const ckpt_error *e = ckpt_doctor_error(r);
    ckpt_format detected = ckpt_doctor_detected(r);
    uint64_t size = ckpt_doctor_size(r);
    size_t shards = ckpt_doctor_check_count(r);
    char h[32];

    line_start();
    if (f)
        fputs(ckpt_format_name(ckpt_file_format(f)), stdout);
    else if (detected != CKPT_FORMAT_UNKNOWN)
        printf("%s (%s)", ckpt_format_name(detected),
               e && e->code == CKPT_E_TRUNCATED ? "truncated" : "could not be opened");
    else
        fputs("unknown (the file could not be opened)", stdout);
    printf(", %" PRIu64 " bytes (%s)", size, cli_human_bytes(h, size));
    if (ckpt_doctor_sharded(r))
        printf(" in %zu files: the index and %zu shard%s", shards + 1, shards, cli_plural(shards));
    fputc('\n', stdout);
    if (ckpt_doctor_snapshot(r)) {
        line_start();
        fputs("snapshot ", stdout);
        put_str(ckpt_doctor_snapshot(r));
        fputs(" of the Hugging Face cache repository, which refs/main names\n", stdout);
    }
    if (f && ckpt_file_variant(f)) {
        const char *v = ckpt_file_variant(f);
        line_start();
        fputs("variant \"", stdout);
        put_str(v);
        fputs("\": the folder holds weights under its names only (none under the plain "
              "names): from_pretrained(DIR, variant=\"",
              stdout);
        put_str(v);
        fputs("\") reads them\n", stdout);
    }
}

static void show_integrity(const ckpt_doctor_report *r) {
    const ckpt_verify_report *v = ckpt_doctor_verify_report(r);
    const ckpt_error *e = ckpt_doctor_error(r);
    cli_error err;

    line_start();
    if (e == NULL) {
        printf("%sOK%s: %" PRIu64 " bytes checked", cli_color(CLI_GREEN), cli_color(CLI_RESET),
               v->bytes);
        if (v->members) printf(", %" PRIu64 " zip member CRC-32s match", v->members);
        if (ckpt_doctor_has_digests(r)) fputs(", per-tensor XXH3-64 digests checked", stdout);
    } else {
        cli_error_copy(&err, e);
        printf("%s%s%s: ", cli_color(CLI_RED), err.code == CKPT_E_LIMIT ? "NOT CHECKED" : "FAILED",
               cli_color(CLI_RESET));
        /* a set's problem is in one of its files: name it */
        const ckpt_file *f = ckpt_doctor_file(r);
        const char *own = f ? ckpt_file_path(f) : ckpt_doctor_path(r);
        if (err.file[0] && strcmp(err.file, own) != 0) {
            cli_put_text(stdout, err.file, strlen(err.file));
            fputs(": ", stdout);
        }
        cli_put_message(stdout, &err);
        cli_put_location(stdout, &err, 0);
    }
    fputc('\n', stdout);
}

static void show_safety(const ckpt_doctor_report *r) { cli_doctor_safety_show(r); }

/* "name: dict, 4 keys, 60 elements" / "epoch: int 42" / ... */
static void text_entry(const ckpt_doctor_entry *e) {
    ckpt_kind kind = e->value ? ckpt_value_kind(e->value) : CKPT_KIND_DICT;
    const char *obj;
    char shape[256];

    fputs("    ", stdout);
    if (e->name_len)
        cli_put_text(stdout, e->name, e->name_len);
    else
        fputs(cli_name(""), stdout);
    fputs(": ", stdout);
    if (e->value == NULL) {
        printf("%" PRIu64 " key%s, %" PRIu64 " element%s\n", e->tensors, cli_plural(e->tensors),
               e->elements, cli_plural(e->elements));
        return;
    }
    fputs(ckpt_kind_name(kind), stdout);
    switch (kind) {
    case CKPT_KIND_TENSOR:
        if (ckpt_value_tensor(e->value))
            printf(" %s %s", ckpt_dtype_name(ckpt_tensor_dtype(ckpt_value_tensor(e->value))),
                   cli_shape(shape, sizeof shape, ckpt_value_tensor(e->value)));
        break;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        if (e->tensors)
            printf(", %" PRIu64 " key%s, %" PRIu64 " element%s", e->tensors, cli_plural(e->tensors),
                   e->elements, cli_plural(e->elements));
        else
            printf(", %zu item%s", ckpt_value_len(e->value), cli_plural(ckpt_value_len(e->value)));
        break;
    case CKPT_KIND_OBJECT:
        obj = ckpt_value_object_name(e->value);
        fputc(' ', stdout);
        put_str(obj ? obj : "?");
        break;
    default:
        fputc(' ', stdout);
        cli_put_value(stdout, e->value);
        break;
    }
    fputc('\n', stdout);
}

static const char *string_at(const void *ctx, size_t i) { return ((char *const *)ctx)[i]; }

/* safetensors groups (first name segments, sorted by bytes) in natural
 * order, as every human listing; a pickle's top level in its own order.
 * A malloc'd index array, or NULL for the report's order. */
static size_t *group_order(const ckpt_doctor_report *r, size_t n) {
    char **names = calloc(n ? n : 1, sizeof *names);
    size_t *order = NULL, i;

    for (i = 0; names && i < n; i++) {
        const ckpt_doctor_entry *e = ckpt_doctor_entry_at(r, i);

        if ((names[i] = strndup(e->name, e->name_len)) == NULL) break;
    }
    if (names && i == n) order = cli_natural_order(string_at, names, n);
    for (i = 0; names && i < n; i++) free(names[i]);
    free(names);
    return order;
}

static void show_contents(const ckpt_doctor_report *r) {
    const ckpt_file *f = ckpt_doctor_file(r);
    size_t n = f ? ckpt_file_tensor_count(f) : 0, i, shown = 0, count;
    size_t n_top = ckpt_doctor_entry_count(r);
    uint64_t elements = ckpt_doctor_elements(r), bytes = ckpt_doctor_tensor_bytes(r);
    char h[32];

    line_start();
    if (f == NULL) {
        puts("not available: the file could not be opened");
        return;
    }
    printf("%zu key%s, %" PRIu64 " element%s, %" PRIu64 " bytes (%s)\n", n, cli_plural(n), elements,
           cli_plural(elements), bytes, cli_human_bytes(h, bytes));
    if (n) {
        line_start();
        fputs("by dtype:", stdout);
        for (i = 0; i < CKPT_DT_COUNT; i++) {
            uint64_t b = ckpt_doctor_dtype_bytes(r, (ckpt_dtype)i, &count);

            if (count == 0) continue;
            printf("%s %s %s", shown++ ? "," : "", ckpt_dtype_name((ckpt_dtype)i),
                   cli_human_bytes(h, b));
        }
        fputc('\n', stdout);
    }
    if (n_top) {
        line_start();
        size_t *order = is_safetensors(f) ? group_order(r, n_top) : NULL;

        puts(is_safetensors(f) ? "tensor groups:" : "top level:");
        for (i = 0; i < n_top && i < TOP_MAX; i++)
            text_entry(ckpt_doctor_entry_at(r, order ? order[i] : i));
        if (n_top > TOP_MAX) printf("    ... and %zu more\n", n_top - TOP_MAX);
        free(order);
    }
}

static void show_unvouched(const ckpt_doctor_report *r) {
    size_t i, n = ckpt_doctor_note_count(r);

    for (i = 0; i < n; i++) {
        line_start();
        put_str(ckpt_doctor_note(r, i));
        fputc('\n', stdout);
    }
    if (n == 0) puts("  nothing: every byte was read and checked");
}

/* ---- resume readiness, memory breakdown, metadata (summary.c) */

static void show_resume(const ckpt_doctor_report *r) {
    const char *withheld = ckpt_doctor_resume_withheld(r);

    if (withheld) {
        line_start();
        put_str(withheld);
        fputc('\n', stdout);
        return;
    }
    cli_summary_resume(ckpt_doctor_training(r));
}

static void show_memory(const ckpt_doctor_report *r) {
    cli_summary_memory(ckpt_doctor_training(r));
}

static void show_metadata(const ckpt_doctor_report *r) {
    cli_summary_metadata(ckpt_doctor_training(r));
}

static void show_keys(const ckpt_doctor_report *r) { cli_doctor_keys_show(r); }

static void show_others(const ckpt_doctor_report *r) {
    size_t i, n = ckpt_doctor_check_count(r);
    int sharded = ckpt_doctor_sharded(r);

    if (sharded)
        printf("  the %zu shard file%s of the set (integrity covers them "
               "together):\n",
               n, cli_plural(n));
    else if (ckpt_doctor_directory(r) == NULL)
        puts("  one file: see integrity");
    else if (n == 0)
        puts("  none besides the weights file");
    for (i = 0; i < n; i++) {
        const ckpt_doctor_check *c = ckpt_doctor_check_at(r, i);
        cli_error err;

        line_start();
        if (sharded) line_start();
        put_str(c->name);
        if (c->ok) {
            printf(": %sOK%s: %" PRIu64 " bytes checked\n", cli_color(CLI_GREEN),
                   cli_color(CLI_RESET), c->bytes);
        } else {
            cli_error_copy(&err, &c->error);
            printf(": %s%s%s: ", cli_color(CLI_RED), c->differs ? "DIFFERS" : "FAILED",
                   cli_color(CLI_RESET));
            put_str(err.message);
            cli_put_location(stdout, &err, 0);
            fputc('\n', stdout);
        }
    }
}

/* transformers' metadata check of weights from_pretrained reads by their
 * name (model.safetensors, a model.safetensors.index.json set): OK, or
 * each file it refuses and why. Shown for those only. */
static void show_from_pretrained(const ckpt_doctor_report *r) {
    size_t i, n = ckpt_doctor_refusal_count(r);

    if (n == 0)
        printf("  %sOK%s: the __metadata__ passes its check (no __metadata__, or \"format\" "
               "pt, tf, flax or mlx)\n",
               cli_color(CLI_GREEN), cli_color(CLI_RESET));
    for (i = 0; i < n; i++) {
        const ckpt_doctor_refusal *x = ckpt_doctor_refusal_at(r, i);
        cli_error err;

        cli_error_copy(&err, &x->error);
        line_start();
        put_str(x->name);
        printf(": %sREFUSED%s: ", cli_color(CLI_RED), cli_color(CLI_RESET));
        put_str(err.message);
        fputc('\n', stdout);
    }
}

/* A ckpt store: each generation, whether it verifies, which LATEST names
 * (the one examined above; generations are never combined). Shown for a
 * store only (is_store). */
static void show_store(const ckpt_doctor_report *r) {
    const ckpt_store_listing *l = ckpt_doctor_store(r);
    const char *pfile = "";
    size_t i, n = ckpt_store_list_count(l);
    ckpt_store_pointer p = ckpt_store_list_pointer(l, &pfile);

    printf("  %zu generation%s; LATEST: %s", n, cli_plural(n), ckpt_store_pointer_name(p));
    if (pfile[0]) {
        fputs(" (", stdout);
        put_str(pfile);
        fputs("; the generation examined above, alone)", stdout);
    }
    fputc('\n', stdout);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);

        fputs("    ", stdout);
        put_str(g->file);
        printf(": %s%s%s", cli_color(g->ok ? CLI_GREEN : CLI_RED), g->ok ? "OK" : "CORRUPT",
               cli_color(CLI_RESET));
        if (!g->ok) {
            fputs(": ", stdout);
            put_str(g->reason);
        }
        if (g->latest) fputs("  <- LATEST", stdout);
        fputc('\n', stdout);
    }
}

typedef struct section {
    const char *key;   /* the JSON key of the same section (timings) */
    const char *title; /* text heading */
    void (*show)(const ckpt_doctor_report *r);
    int (*present)(const ckpt_doctor_report *r); /* NULL: always shown */
} section;

static int is_store(const ckpt_doctor_report *r) { return ckpt_doctor_store(r) != NULL; }

static const section sections[] = {
    {"format", "format", show_format, NULL},
    {"integrity", "integrity", show_integrity, NULL},
    {"safety", "safety (would loading it run code?)", show_safety, NULL},
    {"contents", "contents", show_contents, NULL},
    {"not_vouched_for", "not vouched for", show_unvouched, NULL},
    {"resume", "resume readiness", show_resume, NULL},
    {"keys", "key hygiene", show_keys, NULL},
    {"memory", "memory", show_memory, NULL},
    {"metadata", "metadata", show_metadata, NULL},
    {"other_files", "integrity of the other files", show_others, NULL},
    {"from_pretrained", "from_pretrained (transformers)", show_from_pretrained,
     ckpt_doctor_from_pretrained},
    {"store", "store generations", show_store, is_store},
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

/* ------------------------------------------------------------ report */

/* The library's report (a pipeline's component: with its "pipeline"
 * key, ckpt_doctor_pipeline). */
static int print_json(const ckpt_doctor_report *r) {
    char *json = NULL;
    size_t len = 0;
    double t0 = now();
    int rc = ckpt_doctor_json(&json, &len, r);

    if (rc != 0) {
        fputs("ckpt: out of memory\n", stderr);
        return CLI_USAGE;
    }
    fwrite(json, 1, len, stdout);
    fputc('\n', stdout);
    ckpt_string_free(json);
    if (timings_on()) print_timing("json", now() - t0);
    return CLI_OK;
}

static void print_text(const ckpt_doctor_report *r) {
    int healthy = ckpt_doctor_healthy(r);
    size_t i;

    fputs(cli_color(healthy ? CLI_GREEN : CLI_YELLOW), stdout);
    put_str(ckpt_doctor_summary(r));
    printf("%s\n", cli_color(CLI_RESET));
    for (i = 0; i < N_SECTIONS; i++) {
        double t0 = now();

        if (sections[i].present && !sections[i].present(r)) continue;
        printf("\n%s%s%s\n", cli_color(CLI_BOLD), sections[i].title, cli_color(CLI_RESET));
        sections[i].show(r);
        if (timings_on()) print_timing(sections[i].key, now() - t0);
    }
}

static struct {
    const char *path;
    int json;
} args;

static const cli_opt opts[] = {
    {CLI_OPT_ARG, "FILE|DIR", 0, &args.path, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
     "one JSON object on stdout instead of the report"},
    {0}};

/* The report of one checkpoint (a pipeline's component: after a
 * header line naming it); returns its exit code. */
static int doctor_one(const cli_target *t, void *ctx) {
    const char *path = t->path;
    ckpt_doctor_report *r = NULL;
    const char *name;
    double seconds;
    cli_error e;
    size_t i;
    int rc, *several = ctx;
    static int first = 1;

    if (*several && !first) fputs(args.json ? "," : "\n", stdout);
    first = 0;
    if (*several && !args.json) {
        printf("%s== ", cli_color(CLI_BOLD));
        cli_put_text(stdout, path, strlen(path));
        printf("%s\n", cli_color(CLI_RESET));
    }
    rc = t->pipeline ? ckpt_doctor_pipeline(&r, t->pipeline, t->index, NULL)
                     : ckpt_doctor(&r, path, NULL);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        if (args.json) { /* as scan --json gives a file it cannot read */
            cli_json_writer j;

            cli_json_init(&j, stdout);
            cli_json_object_begin(&j);
            cli_json_key(&j, "file");
            cli_json_string(&j, path);
            cli_json_pipeline(&j, t);
            cli_json_key(&j, "verdict");
            cli_json_null(&j);
            cli_json_key(&j, "error");
            cli_json_error(&j, &e, path);
            cli_json_object_end(&j);
            fputc('\n', stdout);
        }
        /* nothing could be examined: a usage or I/O error */
        return rc == CKPT_E_NOTFOUND ? (cli_report(path, &e), CLI_USAGE) : cli_report(path, &e);
    }
    for (i = 0; timings_on() && (name = ckpt_doctor_timing(r, i, &seconds)); i++)
        print_timing(name, seconds);
    if (args.json)
        rc = print_json(r);
    else
        print_text(r);
    if (rc == CLI_OK) rc = ckpt_doctor_healthy(r) ? CLI_OK : CLI_FINDINGS;
    /* a limit stopped the examination: not a finding about the file */
    if (rc == CLI_FINDINGS && ckpt_doctor_error(r) && ckpt_doctor_error(r)->code == CKPT_E_LIMIT)
        rc = CLI_USAGE;
    ckpt_doctor_report_free(r);
    return rc;
}

static int run(const cli_command *cmd, int argc, char **argv) {
    int rc = cli_opt_parse(cmd, argc, argv), several;

    if (rc != CLI_CONTINUE) return rc;
    several = cli_several_targets(&args.path, 1);
    if (args.json && several) fputc('[', stdout);
    rc = cli_each_target(args.path, doctor_one, &several);
    if (args.json && several) fputs("]\n", stdout);
    return rc;
}

const cli_command cli_cmd_doctor = {
    "doctor",
    "a readable health report with a verdict",
    opts,
    "Reports format, integrity, safety, contents and what ckpt cannot vouch\n"
    "for, under a first line HEALTHY: ... or ATTENTION: .... A directory\n"
    "(Hugging Face Trainer layout) is examined as one training checkpoint;\n"
    "a diffusers pipeline directory (model_index.json) model component by\n"
    "model component (unet, text_encoder, vae...), each report under a line\n"
    "`== DIR/COMPONENT` (--json: an array of the reports, each with\n"
    "pipeline {component, error}: error the finding of a component with\n"
    "weights but no config.json, as verify --json writes it, else null;\n"
    "such a component needs ATTENTION, its verdict line saying why first);\n"
    "a ckpt store (a directory holding LATEST) as the generation LATEST\n"
    "names, alone, with every generation listed and verified; a sharded\n"
    "set (its folder or index) as one checkpoint, shard by shard. A folder\n"
    "with model weights in several files and no index holds several\n"
    "checkpoints: they are not combined (doctor each file).\n"
    "Weights transformers' from_pretrained reads by their name\n"
    "(model.safetensors, each shard of model.safetensors.index.json; not\n"
    "diffusion_pytorch_model.* nor adapter_model.*, whose loaders do not\n"
    "check) are a finding when it refuses them for their __metadata__:\n"
    "present (safetensors.torch.save_file(sd, f, metadata={...})) without\n"
    "\"format\" pt, tf, flax or mlx; each file is named with the fix,\n"
    "`ckpt convert F F --meta format=pt` (--json: from_pretrained {ok,\n"
    "refused: [{file, format, error}]}, null for other names).\n"
    "The safety section notes when torch.load's default since torch 2.6\n"
    "(weights_only=True) refuses a file, naming the global or opcode and its\n"
    "byte (--json: safety.files[].weights_only, else null); it is no\n"
    "finding. The keys section names wrapper prefixes (module., _orig_mod.,\n"
    "FSDP) as they stand in the keys, outermost first, and the `ckpt rename`\n"
    "that strips them.\n"
    "Elements are what the tensors hold, not parameters: a state_dict\n"
    "saved with bitsandbytes quantization (4-bit: a U8 weight W packing two\n"
    "parameters a byte, with W.absmax, W.quant_map, W.nested_*, and\n"
    "W.quant_state.bitsandbytes__nf4 or __fp4 holding its shape; 8-bit: an\n"
    "I8 weight with P.SCB, P.weight_format) gets a note under `not vouched\n"
    "for` (--json: not_vouched_for) that counts its parameters: a 4-bit\n"
    "weight's from the shape its quant_state records, an int8 weight's one\n"
    "per element, the quantization state's none.\n",
    "Exit status:\n"
    "  0 healthy, 1 needs attention (corrupt, unsafe, partial resume...), 2 usage or I/O error.\n",
    run,
    NULL};
