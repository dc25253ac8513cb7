/* cmd_verify.c - `ckpt verify FILE...`: open and fully verify each file,
 * one line per file:
 *   OK FILE (FORMAT, K keys, B bytes checked)
 *   OK FILE (FORMAT, K keys, B bytes checked); structure only: this file carries no checksums
 *   OK SET (FORMAT, K keys, B bytes checked); N shards, each checked whole, and the index...
 *   CORRUPT FILE: MESSAGE (MEMBER, offset N)
 *   UNSUPPORTED FILE: MESSAGE (MEMBER, offset N)
 *   ERROR FILE: MESSAGE
 *   NOT-LOADABLE DIR/COMPONENT: MESSAGE; its bytes (FORMAT, ...)
 * or with --json one object per file (an array for several). Exit 0 when
 * all are OK, 1 when one is corrupt or holds what ckpt cannot represent
 * (UNSUPPORTED, CKPT_E_UNSUPPORTED: a tensor with torch's conj bit is no
 * damage, but its bytes were not checked either), 2 when one could not be
 * read at all (which wins over 1). */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

static struct {
    cli_list files;
    int json, quiet, verbose;
} args;

/* What one file's check found. f is NULL when it could not be opened. */
typedef struct outcome {
    const char *path;
    const ckpt_file *f;
    const ckpt_verify_report *report;
    const cli_error *e; /* NULL when OK */
    int rc;             /* CLI_* */
} outcome;

static void print_json(cli_json_writer *j, const outcome *o, const cli_target *t) {
    cli_json_object_begin(j);
    cli_json_key(j, "file");
    cli_json_string(j, o->path);
    cli_json_pipeline(j, t);
    cli_json_key(j, "format");
    if (o->f)
        cli_json_string(j, ckpt_format_name(ckpt_file_format(o->f)));
    else
        cli_json_null(j);
    cli_json_key(j, "ok"); /* a pipeline's component: also loadable */
    cli_json_bool(j, o->e == NULL && t->unloadable == NULL);
    /* what was checked: only of a file whose bytes passed (a check that
     * stops at the first damage has not checked the rest) */
    if (!o->e) {
        cli_json_key(j, "tensors");
        cli_json_uint(j, o->report->tensors);
        cli_json_key(j, "bytes");
        cli_json_uint(j, o->report->bytes);
        cli_json_key(j, "members");
        cli_json_uint(j, o->report->members);
        cli_json_key(j, "shards");
        cli_json_uint(j, o->report->shards);
    }
    cli_json_key(j, "checksums");
    cli_json_string(j, ckpt_checksums_name(o->f ? ckpt_file_checksums(o->f) : CKPT_CHECKSUMS_NONE));
    cli_json_key(j, "snapshot");
    if (o->f && ckpt_file_snapshot(o->f))
        cli_json_string(j, ckpt_file_snapshot(o->f));
    else
        cli_json_null(j);
    cli_json_key(j, "variant");
    if (o->f && ckpt_file_variant(o->f))
        cli_json_string(j, ckpt_file_variant(o->f));
    else
        cli_json_null(j);
    if (o->e || t->unloadable) {
        cli_json_key(j, "error"); /* its file: the one blamed (a shard, a DCP slice) */
        cli_json_error(j, o->e ? o->e : t->unloadable, o->path);
    }
    cli_json_object_end(j);
}

/* Names, comma-separated, for ckpt_verify_damaged. */
static void put_name(const char *name, void *ctx) {
    size_t *n = ctx;
    fputs((*n)++ ? ", " : " ", stdout);
    cli_put_text(stdout, name, strlen(name));
}

static void print_failure(const outcome *o) {
    printf("%s%s%s ", cli_color(CLI_RED),
           o->rc == CLI_USAGE                 ? "ERROR"
           : o->e->code == CKPT_E_UNSUPPORTED ? "UNSUPPORTED"
                                              : "CORRUPT",
           cli_color(CLI_RESET));
    cli_put_files(stdout, o->path, o->e);
    cli_put_message(stdout, o->e);
    if (o->rc != CLI_USAGE) cli_put_location(stdout, o->e, 1);
    fputc('\n', stdout);
    if (!args.verbose || !o->f) return;
    /* which tensors the damage is in, all of them */
    ckpt_error at = {o->e->code,   o->e->message, o->e->file[0] ? o->e->file : o->path,
                     o->e->member, o->e->offset,  0};
    size_t n = 0, total = ckpt_verify_damaged(o->f, &at, NULL, NULL);
    if (total == 0) {
        fputs("  the damaged bytes are no tensor's\n", stdout);
        return;
    }
    printf("  damaged tensor%s (%zu):", cli_plural(total), total);
    ckpt_verify_damaged(o->f, &at, put_name, &n);
    fputc('\n', stdout);
}

/* A pipeline's component whose bytes check out but which diffusers
 * cannot load: NOT-LOADABLE, the finding, then what the OK line says. */
static void print_ok(const outcome *o, const cli_target *t) {
    char human[32];

    if (t->unloadable) {
        printf("%sNOT-LOADABLE%s ", cli_color(CLI_RED), cli_color(CLI_RESET));
        cli_put_text(stdout, o->path, strlen(o->path));
        fputs(": ", stdout);
        cli_put_message(stdout, t->unloadable);
        fputs("; its bytes", stdout);
    } else {
        printf("%sOK%s ", cli_color(CLI_GREEN), cli_color(CLI_RESET));
        cli_put_text(stdout, o->path, strlen(o->path));
    }
    printf(" (%s, %zu key%s, %" PRIu64 " bytes checked)", ckpt_format_name(ckpt_file_format(o->f)),
           ckpt_file_tensor_count(o->f), cli_plural(ckpt_file_tensor_count(o->f)),
           o->report->bytes);
    /* what was vouched for: a set's shards and its index's coverage;
     * without a checksum, only that structure and sizes are consistent,
     * not that the bytes are the ones written */
    if (o->report->shards)
        printf("; %" PRIu64 " shard%s, each checked whole, and the index, whose weight_map "
               "names every tensor of every shard with its shard",
               o->report->shards, cli_plural(o->report->shards));
    if (ckpt_file_checksums(o->f) == CKPT_CHECKSUMS_NONE)
        fputs(o->report->shards ? "; structure only: not every shard carries checksums"
              : ckpt_file_format(o->f) == CKPT_FORMAT_DCP
                  ? "; structure only: not every data file carries checksums"
              : ckpt_file_format(o->f) == CKPT_FORMAT_TORCH_ZIP
                  ? "; structure only: zip members with no CRC-32 recorded (torch.save with "
                    "compute_crc32=False or skip_data)"
                  : "; structure only: this file carries no checksums",
              stdout);
    cli_put_variant(stdout, o->f);
    cli_put_snapshot(stdout, o->f);
    fputc('\n', stdout);
    if (!args.verbose) return;
    printf("  checksums: %s; %s read", ckpt_checksums_name(ckpt_file_checksums(o->f)),
           cli_human_bytes(human, o->report->bytes));
    if (o->report->members)
        printf("; %" PRIu64 " zip member CRC-32%s checked", o->report->members,
               cli_plural(o->report->members));
    fputc('\n', stdout);
}

/* Verifies one file and prints what was found; returns its exit code. */
static int verify_one(const cli_target *t, void *ctx) {
    const char *path = t->path;
    cli_json_writer *j = ctx;
    ckpt_file *f = NULL;
    ckpt_verify_report report;
    cli_error e;
    outcome o;
    int rc = ckpt_open(&f, path, NULL);

    memset(&report, 0, sizeof report);
    if (rc == 0) rc = ckpt_verify(&report, f);
    o.path = path;
    o.f = f;
    o.report = &report;
    o.e = NULL;
    o.rc = CLI_OK;
    if (rc != 0) {
        cli_error_capture(&e, rc);
        o.e = &e;
        o.rc = cli_exit_code(e.code);
    }
    if (args.json)
        print_json(j, &o, t);
    else if (o.e)
        print_failure(&o);
    else if (!args.quiet || t->unloadable)
        print_ok(&o, t);
    ckpt_close(f);
    return o.rc;
}

static const cli_opt opts[] = {
    {CLI_OPT_ARGS, "FILE", 0, &args.files, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
     "one JSON object per file on stdout (an array for several files)"},
    {CLI_OPT_BOOL, "quiet", 'q', &args.quiet, NULL, 0, "print only the files that are not OK"},
    {CLI_OPT_BOOL, "verbose", 'v', &args.verbose, NULL, 0,
     "also say which checksums were checked and how much was read; on a "
     "failure, every tensor whose bytes are damaged"},
    {0}};

static int run(const cli_command *cmd, int argc, char **argv) {
    cli_json_writer j;
    size_t i;
    /* the whole command line is checked before any file is touched */
    int worst = cli_opt_parse(cmd, argc, argv), several;

    if (worst != CLI_CONTINUE) return worst;
    if (args.quiet && args.verbose)
        return cli_usage_error(cmd, "--quiet and --verbose exclude each other");
    worst = CLI_OK;
    several = cli_several_targets((const char *const *)args.files.items, args.files.n);
    cli_json_init(&j, stdout);
    if (args.json && several) cli_json_array_begin(&j);
    for (i = 0; i < args.files.n; i++) {
        int rc;

        cli_progress(args.files.items[i], i, args.files.n);
        rc = cli_each_target(args.files.items[i], verify_one, &j);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    cli_progress(NULL, args.files.n, args.files.n);
    if (args.json && several) cli_json_array_end(&j);
    if (args.json) fputc('\n', stdout);
    return worst;
}

const cli_command cli_cmd_verify = {
    "verify",
    "read every byte and check checksums and structure",
    opts,
    "Opens each FILE and reads every tensor byte, checking zip CRC-32s,\n"
    "storage sizes and structure. Prints one line per file:\n"
    "  OK FILE (FORMAT, K keys, B bytes checked)\n"
    "  CORRUPT FILE: MESSAGE (MEMBER, offset N)\n"
    "  UNSUPPORTED FILE: MESSAGE (MEMBER, offset N)  (content ckpt cannot\n"
    "                               represent, such as a tensor with torch's\n"
    "                               conj bit: not damage, bytes not checked)\n"
    "  ERROR FILE: MESSAGE          (the file could not be read)\n"
    "A diffusers pipeline directory (model_index.json) is checked component\n"
    "by component (unet, text_encoder, vae...: each model folder it names,\n"
    "one line each); a tokenizer's or scheduler's folder holds no weights.\n"
    "A model folder with weights but no config.json is a finding (diffusers\n"
    "cannot load it), on stderr and in its line, whose bytes may check out:\n"
    "  NOT-LOADABLE DIR/COMPONENT: MESSAGE; its bytes (FORMAT, K keys, ...)\n"
    "With --json each component's object has pipeline {component, error:\n"
    "null or {code, message, file, member, offset}}; ok is false and error\n"
    "that finding (beside tensors, bytes... when its bytes check out).\n"
    "A sharded set (its folder or index) is checked shard by shard, each as\n"
    "the file it is, after open matched the index's weight_map with the\n"
    "shards' tensors one for one; its OK line says so: `; N shards, each\n"
    "checked whole, and the index, whose weight_map names every tensor of\n"
    "every shard with its shard`.\n"
    "A model folder whose weights are all under a variant's names\n"
    "(model.fp16.safetensors, model.safetensors.index.fp16.json and its\n"
    "shards, pytorch_model.fp16.bin, diffusion_pytorch_model.fp16.*) is\n"
    "checked through them; its line says `; weights of variant \"fp16\" only:\n"
    "from_pretrained(DIR, variant=\"fp16\") reads them` (--json: variant, else\n"
    "null). Weights of several variants and no plain name: name the file.\n"
    "A Hugging Face cache repository (models--ORG--NAME: blobs/,\n"
    "snapshots/REVISION/, refs/main) is checked through the snapshot refs/main\n"
    "names, its line ending `; snapshot REVISION, which refs/main names`\n"
    "(--json: snapshot, else null); without one, the error lists the\n"
    "snapshots there.\n"
    "An OK line ends in `; structure only: this file carries no checksums`\n"
    "(a set: `not every shard carries checksums`; a DCP directory: `not\n"
    "every data file carries checksums`; a torch zip saved with\n"
    "compute_crc32=False or under skip_data(), whose CRC-32 fields are 0:\n"
    "`zip members with no CRC-32 recorded ...`) when sizes and structure\n"
    "were all there was to check.\n"
    "K keys: the tensor names, as inspect and convert count them (a tied\n"
    "weight is two keys). B bytes checked: the bytes read and checked, each\n"
    "stored tensor's once, plus the other members of a zip or DCP directory\n"
    "whose CRC-32 was checked (the pickle, .metadata...): not inspect's\n"
    "tensor bytes, which count each key's tensor.\n"
    "With --json, one object per file: file, format, ok, tensors (the keys\n"
    "read, K), bytes (B), members (zip members whose CRC-32 was checked),\n"
    "shards (a sharded set's shard files, else 0), checksums (none, crc32,\n"
    "digests), snapshot (a cache repository's revision read, else null),\n"
    "variant (the one a model folder's weights need, else null)\n"
    "and, when not ok, error {code, message, file, member, offset}\n"
    "instead of tensors, bytes, members and shards (a component diffusers\n"
    "cannot load: beside them)\n"
    "(a check stops at the first damage; format is null when the file could\n"
    "not be opened). With -v, a failure also lists every tensor whose bytes\n"
    "are damaged.\n",
    "Exit status: 0 all OK, 1 some file corrupt, 2 some file unreadable.\n",
    run,
    NULL};
