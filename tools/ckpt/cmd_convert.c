/* cmd_convert.c - `ckpt convert IN OUT [--select PREFIX]... [--exclude
 * GLOB]... [--format safetensors|torch|dcp] [--meta KEY=VALUE]... [--config
 * FILE.json] [--max-shard-size SIZE]`: ckpt_convert with options from the
 * command line. On success one line on stdout: `wrote OUT (FORMAT, K keys, N tensors|storages,
 * B bytes)` (DCP: `..., N tensors, V values, B bytes)`); the help says what each number counts.
 * On a terminal, the tensors written as progress on stderr. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"

/* A --config file is a model config, not a checkpoint: keep it small. */
#define CONFIG_MAX ((size_t)16 << 20)

typedef struct convert_args {
    const char *in, *out;
    const char **select;
    size_t nselect;
    const char **exclude;
    size_t nexclude;
    const char **keys, **values;
    size_t nmeta;
    const char *config_path;
    ckpt_format format;
    int backup;
    uint64_t max_shard_size; /* 0: one file */
} convert_args;

/* A size as huggingface_hub's parse_size_to_int reads one: a number of
 * bytes, or a number and a decimal unit (KB, MB, GB, TB: 10^3...), as
 * its max_shard_size="5GB"; binary units (KiB, MiB, GiB, TiB) as well.
 * 0 when the text is no size (or 0, or past 2^64). */
static uint64_t parse_size(const char *s) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12},
                 {"KiB", 1024.0},
                 {"MiB", 1048576.0},
                 {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0}};
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return 0;
    while (*end == ' ') end++;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double bytes = v * units[i].mult;
            return bytes >= 1 && bytes < 18446744073709551616.0 ? (uint64_t)bytes : 0;
        }
    return 0;
}

/* Reads a whole text file into a malloc'd NUL-terminated buffer; NULL
 * after printing why. */
static char *read_text(const char *path) {
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, got;

    if (fp == NULL) {
        fputs("ckpt convert: cannot read config ", stderr);
        cli_put_text(stderr, path, strlen(path));
        fputc('\n', stderr);
        return NULL;
    }
    buf = malloc(CONFIG_MAX + 1);
    if (buf != NULL) {
        while ((got = fread(buf + len, 1, CONFIG_MAX + 1 - len, fp)) > 0) len += got;
        if (ferror(fp) || len > CONFIG_MAX) {
            fputs(len > CONFIG_MAX ? "ckpt convert: config file larger than 16 MiB\n"
                                   : "ckpt convert: error reading config file\n",
                  stderr);
            free(buf);
            buf = NULL;
        } else {
            buf[len] = '\0';
        }
    }
    fclose(fp);
    return buf;
}

static struct {
    const char *in, *out, *format, *config, *max_shard_size;
    cli_list select, exclude, meta;
    int backup, quiet;
} args;

static const cli_opt opts[] = {
    {CLI_OPT_ARG, "IN", 0, &args.in, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_ARG, "OUT", 0, &args.out, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_VALUES, "select", 0, &args.select, "PREFIX", 0,
     "keep only what is named PREFIX or PREFIX.*, e.g. "
     "--select model; one PREFIX naming a dict or list writes it with its "
     "own keys (fc1.weight, as sd['model'] has them); repeatable"},
    {CLI_OPT_VALUES, "exclude", 0, &args.exclude, "GLOB", 0,
     "leave out what is named GLOB ('*' crosses '.'), e.g. "
     "--exclude 'optimizer*'; repeatable"},
    {CLI_OPT_VALUE, "format", 0, &args.format, "safetensors|torch|dcp", 0,
     "the format to write, whatever OUT is called (dcp: OUT is a new "
     "directory)"},
    {CLI_OPT_VALUES, "meta", 0, &args.meta, "KEY=VALUE", 0,
     "record KEY in the metadata (inspect shows it); "
     "repeatable; keys ckpt.* are reserved"},
    {CLI_OPT_VALUE, "config", 0, &args.config, "FILE.json", 0,
     "record the JSON object in FILE.json as metadata \"config\""},
    {CLI_OPT_VALUE, "max-shard-size", 0, &args.max_shard_size, "SIZE", 0,
     "write a sharded set: shards of at most SIZE (bytes, or 500MB, 5GB: "
     "decimal units as huggingface_hub; KiB, GiB binary) named after OUT "
     "(model-00001-of-0000N.safetensors, or .bin), and its index "
     "(model.safetensors.index.json, pytorch_model.bin.index.json; OUT "
     "model.fp16.safetensors: model.safetensors.index.fp16.json, as "
     "save_pretrained(variant=\"fp16\") names it); OUT may "
     "be a directory (one named DIR/ is made if missing, as save_pretrained "
     "makes its folder; without --max-shard-size it holds one file, "
     "model.safetensors or pytorch_model.bin)"},
    {CLI_OPT_BOOL, "backup", 0, &args.backup, NULL, 0,
     "when OUT is an existing file, keep it as OUT.bak (each shard of a "
     "sharded set likewise, and each file of the layout it replaces); a DCP "
     "directory is never replaced"},
    {CLI_OPT_BOOL, "quiet", 'q', &args.quiet, NULL, 0, "print nothing on success"},
    {0}};

/* Fills *a from the parsed options; CLI_CONTINUE or a usage error. */
static int parse(const cli_command *cmd, convert_args *a) {
    size_t i;

    a->in = args.in;
    a->out = args.out;
    a->select = args.select.items;
    a->nselect = args.select.n;
    a->exclude = args.exclude.items;
    a->nexclude = args.exclude.n;
    a->config_path = args.config;
    a->backup = args.backup;
    if (args.max_shard_size && (a->max_shard_size = parse_size(args.max_shard_size)) == 0)
        return cli_usage_error(cmd, "--max-shard-size takes a size: bytes, or 500MB, 5GB, 2GiB");
    for (i = 0; i < a->nselect; i++)
        if (a->select[i][0] == '\0')
            return cli_usage_error(cmd, "--select needs a non-empty prefix");
    for (i = 0; i < a->nexclude; i++)
        if (a->exclude[i][0] == '\0') return cli_usage_error(cmd, "--exclude needs a glob");
    if (args.format && strcmp(args.format, "safetensors") == 0)
        a->format = CKPT_FORMAT_SAFETENSORS;
    else if (args.format && strcmp(args.format, "torch") == 0)
        a->format = CKPT_FORMAT_TORCH_ZIP;
    else if (args.format && strcmp(args.format, "dcp") == 0)
        a->format = CKPT_FORMAT_DCP;
    else if (args.format)
        return cli_usage_error(cmd, "--format is safetensors, torch or dcp");
    for (i = 0; i < args.meta.n; i++) {
        const char *val = args.meta.items[i], *eq = strchr(val, '=');
        char *key;

        if (eq == NULL || eq == val) return cli_usage_error(cmd, "--meta needs KEY=VALUE");
        if ((key = strndup(val, (size_t)(eq - val))) == NULL)
            return cli_usage_error(cmd, "out of memory");
        a->keys[a->nmeta] = key;
        a->values[a->nmeta++] = eq + 1;
    }
    return CLI_CONTINUE;
}

/* " (FORMAT, K keys, N tensors, B bytes)\n", the counts as the help
 * defines them. The library counts a DCP directory's items as keys, its
 * tensor items as tensors: one key each, the rest are values. */
static void print_counts(const ckpt_convert_report *r) {
    uint64_t keys = r->keys, values = 0;

    if (r->format == CKPT_FORMAT_DCP && r->keys >= r->tensors) {
        keys = r->tensors;
        values = r->keys - r->tensors;
    }
    printf(" (%s, %" PRIu64 " key%s, %" PRIu64 " %s%s", ckpt_format_name(r->format), keys,
           cli_plural(keys), r->tensors, r->format == CKPT_FORMAT_TORCH_ZIP ? "storage" : "tensor",
           cli_plural(r->tensors));
    if (r->format == CKPT_FORMAT_DCP) printf(", %" PRIu64 " value%s", values, cli_plural(values));
    printf(", %" PRIu64 " bytes)\n", r->bytes);
}

/* 1 when writing OUT replaces IN itself: the entry OUT names (the atomic
 * rename replaces it, not what a symlink there points to) is the file IN
 * leads to. */
static int same_file(const char *in, const char *out) {
    struct stat si, so;

    return stat(in, &si) == 0 && lstat(out, &so) == 0 && S_ISREG(so.st_mode) &&
           si.st_dev == so.st_dev && si.st_ino == so.st_ino;
}

static int run(const convert_args *a) {
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    cli_task task = {a->out, 0};
    ckpt_convert_report r;
    char *config = NULL;
    int rc;

    if (a->config_path != NULL && (config = read_text(a->config_path)) == NULL) return CLI_USAGE;
    o.format = a->format;
    o.select = a->select;
    o.nselect = a->nselect;
    o.exclude = a->exclude;
    o.nexclude = a->nexclude;
    if (!args.quiet) {
        o.write.progress = cli_progress_fn;
        o.write.progress_ctx = &task;
    }
    o.config_json = config;
    o.write.meta_keys = a->keys;
    o.write.meta_values = a->values;
    o.write.nmeta = a->nmeta;
    o.write.backup = a->backup;
    o.max_shard_size = a->max_shard_size;
    /* safe (the new file replaces the old atomically), but say so */
    if (!a->backup && same_file(a->in, a->out)) {
        fputs("replacing ", stderr);
        cli_put_text(stderr, a->in, strlen(a->in));
        fputs(" in place (use --backup to keep the old file)\n", stderr);
    }
    rc = ckpt_convert(&r, a->in, a->out, &o);
    cli_progress(NULL, 0, 0);
    free(config);
    if (rc != 0) {
        cli_error e;
        const char *file = ckpt_error_last()->file;

        cli_error_capture(&e, rc);
        /* the record names the file at fault (the output for I/O errors) */
        cli_report(file[0] ? file : a->in, &e);
        /* a bad option or a selection matching nothing is a usage error */
        return rc == CKPT_E_NOTFOUND ? CLI_USAGE : cli_exit_code(rc);
    }
    /* files of OUT's old layout no new file replaces by name (a sharded
     * folder converted into itself: its index and shards) go: say so, as
     * for a file replaced in place */
    if (r.retired) {
        fprintf(stderr, "%s %" PRIu64 " file%s of the previous layout of ",
                a->backup ? "kept" : "removed", r.retired, cli_plural(r.retired));
        cli_put_text(stderr, a->out, strlen(a->out));
        fputs(a->backup ? " as NAME.bak\n" : " (use --backup to keep them as NAME.bak)\n", stderr);
    }
    if (args.quiet) return CLI_OK;
    if (r.shards) {
        printf("wrote %" PRIu64 " shards and their index for ", r.shards);
        cli_put_text(stdout, a->out, strlen(a->out));
        print_counts(&r);
        return CLI_OK;
    }
    fputs("wrote ", stdout);
    cli_put_text(stdout, a->out, strlen(a->out));
    print_counts(&r);
    return CLI_OK;
}

static int run_command(const cli_command *cmd, int argc, char **argv) {
    convert_args a = {0};
    size_t n, i;
    int rc = cli_opt_parse(cmd, argc, argv);

    if (rc != CLI_CONTINUE) return rc;
    n = args.meta.n ? args.meta.n : 1;
    a.keys = malloc(n * sizeof *a.keys);
    a.values = malloc(n * sizeof *a.values);
    if (a.keys == NULL || a.values == NULL)
        rc = cli_usage_error(cmd, "out of memory");
    else if ((rc = parse(cmd, &a)) == CLI_CONTINUE)
        rc = run(&a);
    for (i = 0; i < a.nmeta; i++) free((void *)a.keys[i]);
    free(a.keys);
    free(a.values);
    return rc;
}

const cli_command cli_cmd_convert = {
    "convert",
    "write a checkpoint as safetensors, torch .pt or a DCP directory",
    opts,
    "Reads IN (any format ckpt reads) and writes OUT atomically, as\n"
    "safetensors or as a torch.save zip (from OUT's extension: .safetensors;\n"
    ".pt .pth .bin .ckpt). Nothing is dropped: safetensors output keeps the\n"
    "non-tensor values, nesting, tied weights and shared storages in its\n"
    "__metadata__ (ckpt.structure, ckpt.aliases), so converting it back to\n"
    ".pt rebuilds the original; both formats carry an XXH3-64 digest per\n"
    "tensor that `ckpt verify` checks. Objects that are not data (opaque\n"
    "classes) cannot be converted: they are named, leave them out with\n"
    "--select.\n"
    "With --max-shard-size, OUT is written as a sharded set the way Hugging\n"
    "Face writes one: each shard atomically and verified, the index last;\n"
    "torch shards are .bin. It holds tensors only: --select the state dict\n"
    "of a training checkpoint. A set saved over one of as many shards (the\n"
    "same names) keeps every new shard under its temporary name until all\n"
    "and the index are written and verified; the old index goes, then the\n"
    "new files are renamed in a row: a failure before replaces nothing, and\n"
    "a crash among the renames leaves no index naming a mix of both sets.\n"
    "OUT named *.dcp, or --format dcp, writes a torch.distributed.checkpoint\n"
    "directory as dcp.save does on one rank (FileSystemWriter: .metadata and\n"
    "__0_0.distcp), which dcp.load and dcp_to_torch_save read. The root must\n"
    "be a dict; it is flattened as DCP does (nested dicts and lists holding\n"
    "tensors; other values are torch.save'd items, dict keys become str);\n"
    "file metadata has no place there and is not written.\n"
    "IN a model folder (config.json beside its weights) and OUT a folder\n"
    "(OUT/, or an existing one other than IN): the folder's other files go\n"
    "with the weights, so that from_pretrained(OUT) loads as from IN:\n"
    "config.json, generation_config.json, the tokenizer's files..., each\n"
    "written atomically and read back like the weights (--backup applies).\n"
    "Not copied: the weights and their index, hidden files, subfolders,\n"
    "files whose first bytes are a checkpoint's (optimizer.pt,\n"
    "training_args.bin: training state), and trainer_state.json (the\n"
    "Trainer's step and log history: training state that stays with the\n"
    "run). A symbolic link in IN is copied as\n"
    "the file it leads to when that is inside IN, or when IN is a Hugging\n"
    "Face cache snapshot (REPO/snapshots/REV) and it leads to REPO/blobs/;\n"
    "any other link out of IN is refused (exit 2, nothing written). OUT\n"
    "naming a file\n"
    "(OUT/model.safetensors) writes the weights alone.\n"
    "An existing OUT: a file OUT (each shard and the index of a sharded\n"
    "set) is replaced atomically: the new one is written under a temporary\n"
    "name beside it, verified, then renamed over it, so OUT is always the\n"
    "old file or the whole new one (--backup keeps the old one as OUT.bak;\n"
    "stderr says when OUT is IN itself). An OUT that is a symbolic link is\n"
    "replaced by a regular file; the file it points to is left as it was\n"
    "(a Hugging Face cache snapshot links into blobs/ that other revisions\n"
    "share: never written through). A set of several shards also\n"
    "replaces a file under the one-file name (model.safetensors,\n"
    "pytorch_model.bin), which loaders open before an index: it is removed\n"
    "once the index is written (--backup: renamed to .bak). Likewise the\n"
    "layout a set replaces: the shards its previous index named that the\n"
    "new set does not (resharding into fewer), and that index when the new\n"
    "set is one file; files no index named stay. A folder OUT (OUT/, or an\n"
    "existing folder other than the one IN is in) holds one set of weights\n"
    "after convert: the weights files of any other layout already there go\n"
    "too (model.safetensors, pytorch_model.bin, diffusion_pytorch_model.*,\n"
    "their .index.json and its shards NAME-0000k-of-0000n.EXT), removed or\n"
    "with --backup renamed to .bak, and stderr says how many: a loader\n"
    "would take an old one for the weights (from_pretrained opens\n"
    "model.safetensors before pytorch_model.bin). A DCP\n"
    "directory OUT is never replaced: it must not exist or must be empty\n"
    "(else exit 2, nothing written); it is made in a temporary directory\n"
    "beside it, verified, then renamed into place.\n"
    "On success: `wrote OUT (FORMAT, K keys, N tensors, B bytes)`. K keys:\n"
    "the tensor names written, as inspect and verify count them (a tied\n"
    "weight is two keys); N tensors: the tensors stored (`storages` in a\n"
    "torch zip; a tied weight is one); B bytes: the size of what was\n"
    "written (all shards, or both DCP files). A DCP directory also counts\n"
    "V values: its non-tensor items.\n",
    "Exit status: 0 written, 1 IN unreadable, corrupt (a torch archive's\n"
    "member that does not match its CRC-32) or not convertible (opaque\n"
    "objects, a tensor named __metadata__), 2 usage or I/O error.\n",
    run_command,
    NULL};
