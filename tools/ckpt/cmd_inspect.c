/* cmd_inspect.c - `ckpt inspect FILE [--json] [--hash sha256] [--chunks]
 * [--summary]`: tensors, non-tensor values and metadata, as a table or as
 * one JSON object; `--chunks` adds where each chunk of a DCP tensor lies;
 * `--summary` shows the training components instead (summary.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "summary.h"

/* Name column width cap; longer names overflow their row. */
#define NAME_COLS_MAX 60
#define SHAPE_CAP 256

typedef struct inspect {
    const char *path; /* as given on the command line */
    ckpt_file *f;
    int hash;    /* --hash sha256 */
    int chunks;  /* --chunks */
    int rc;      /* exit code so far */
    char *quant; /* ckpt_file_quant_note: doctor's note, or NULL */
} inspect;

/* Lowercase hex SHA-256 of t into hex, or "" after reporting why not. */
static const char *tensor_sha256(inspect *in, const ckpt_tensor *t, char hex[65]) {
    unsigned char md[32];
    cli_error e;
    int rc = ckpt_tensor_sha256(t, md);
    size_t i;

    hex[0] = '\0';
    if (rc != 0) {
        cli_error_capture(&e, rc);
        if (in->rc == CLI_OK) in->rc = cli_report(in->path, &e);
        return hex;
    }
    for (i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned)md[i]);
    return hex;
}

/* ------------------------------------------------------------ JSON */

static void json_tensor(inspect *in, cli_json_writer *j, const ckpt_tensor *t) {
    const uint64_t *shape = ckpt_tensor_shape(t);
    unsigned ndim = ckpt_tensor_ndim(t);
    char hex[65];

    cli_json_object_begin(j);
    cli_json_key(j, "name");
    cli_json_string(j, ckpt_tensor_name(t));
    cli_json_key(j, "dtype");
    cli_json_string(j, ckpt_dtype_name(ckpt_tensor_dtype(t)));
    cli_json_key(j, "shape");
    cli_json_dims(j, ndim, shape);
    cli_json_key(j, "nbytes");
    cli_json_uint(j, ckpt_tensor_nbytes(t));
    cli_json_key(j, "device");
    cli_json_string(j, ckpt_tensor_device(t));
    if (in->hash) {
        cli_json_key(j, "sha256");
        if (tensor_sha256(in, t, hex)[0])
            cli_json_string(j, hex);
        else
            cli_json_null(j);
    }
    if (in->chunks && ckpt_tensor_chunk_count(t) > 0) {
        size_t i, n = ckpt_tensor_chunk_count(t);
        ckpt_chunk_info c;

        cli_json_key(j, "chunks");
        cli_json_array_begin(j);
        for (i = 0; i < n && ckpt_tensor_chunk(&c, t, i) == 0; i++) {
            cli_json_object_begin(j);
            cli_json_key(j, "file");
            cli_json_string(j, c.file);
            cli_json_key(j, "offset");
            cli_json_uint(j, c.offset);
            cli_json_key(j, "length");
            cli_json_uint(j, c.length);
            cli_json_key(j, "rank");
            if (c.rank >= 0)
                cli_json_uint(j, (uint64_t)c.rank);
            else
                cli_json_null(j);
            cli_json_key(j, "offsets");
            cli_json_dims(j, ndim, c.offsets);
            cli_json_key(j, "sizes");
            cli_json_dims(j, ndim, c.sizes);
            cli_json_object_end(j);
        }
        cli_json_array_end(j);
    }
    cli_json_object_end(j);
}

/* "module_versions": the versions torch.save recorded in the _metadata
 * of f's state dicts (ckpt_manifest_add_versions), when there are any:
 * `ckpt match` reads them back from this manifest to tell a BatchNorm
 * counter torch fills from one that is missing. */
static void json_versions(inspect *in, cli_json_writer *j, const ckpt_file *f) {
    ckpt_manifest *m = NULL;
    char text[32];
    int64_t v;
    cli_error e;
    int rc = ckpt_manifest_new(&m, ckpt_file_path(f));

    if (rc == 0) rc = ckpt_manifest_add_versions(m, f);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        if (in->rc == CLI_OK) in->rc = cli_report(in->path, &e);
        ckpt_manifest_free(m);
        return;
    }
    if (ckpt_manifest_version_count(m)) {
        cli_json_key(j, "module_versions");
        cli_json_object_begin(j);
        for (size_t i = 0; i < ckpt_manifest_version_count(m); i++) {
            cli_json_key(j, ckpt_manifest_version_at(m, i, &v));
            snprintf(text, sizeof text, "%" PRId64, v);
            cli_json_int_text(j, text);
        }
        cli_json_object_end(j);
    }
    ckpt_manifest_free(m);
}

static void print_json(inspect *in, cli_json_writer *j, const cli_target *t) {
    ckpt_file *f = in->f;
    size_t n, i;

    cli_json_object_begin(j);
    cli_json_key(j, "file");
    cli_json_string(j, in->path);
    cli_json_pipeline(j, t);
    cli_json_key(j, "format");
    cli_json_string(j, ckpt_format_name(ckpt_file_format(f)));

    cli_json_key(j, "tensors");
    cli_json_array_begin(j);
    n = ckpt_file_tensor_count(f);
    for (i = 0; i < n; i++) json_tensor(in, j, ckpt_file_tensor(f, i));
    cli_json_array_end(j);

    cli_json_key(j, "values");
    cli_json_array_begin(j);
    n = ckpt_file_value_count(f);
    for (i = 0; i < n; i++) {
        const ckpt_value *v = ckpt_file_value(f, i);

        cli_json_object_begin(j);
        cli_json_key(j, "name");
        cli_json_string(j, ckpt_file_value_name(f, i));
        cli_json_key(j, "type");
        cli_json_string(j, ckpt_kind_name(ckpt_value_kind(v)));
        cli_json_key(j, "value");
        cli_json_leaf(j, v);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);

    cli_json_key(j, "metadata");
    if (!ckpt_file_has_metadata(f)) {
        cli_json_null(j);
    } else {
        cli_json_object_begin(j);
        n = ckpt_file_metadata_count(f);
        for (i = 0; i < n; i++) {
            cli_json_key(j, ckpt_file_metadata_key(f, i));
            cli_json_string(j, ckpt_file_metadata_value(f, i));
        }
        cli_json_object_end(j);
    }
    json_versions(in, j, f);
    /* what verify and doctor say of the folder opened */
    cli_json_key(j, "snapshot");
    if (ckpt_file_snapshot(f))
        cli_json_string(j, ckpt_file_snapshot(f));
    else
        cli_json_null(j);
    cli_json_key(j, "variant");
    if (ckpt_file_variant(f))
        cli_json_string(j, ckpt_file_variant(f));
    else
        cli_json_null(j);
    cli_json_key(j, "quantization");
    if (in->quant)
        cli_json_string(j, in->quant);
    else
        cli_json_null(j);
    cli_json_object_end(j);
}

/* ------------------------------------------------------------ text */

/* Table rows, gathered here and written with one fwrite per 64 KiB (a
 * million tensors: not a stdio call per cell and space). */
typedef struct row {
    char buf[1 << 16];
    size_t n;
} row;

static void row_flush(row *r) {
    fwrite(r->buf, 1, r->n, stdout);
    r->n = 0;
}

static void row_put(row *r, const char *s, size_t len) {
    while (len) {
        size_t k;

        if (r->n == sizeof r->buf) row_flush(r);
        k = sizeof r->buf - r->n < len ? sizeof r->buf - r->n : len;
        memcpy(r->buf + r->n, s, k);
        r->n += k, s += k, len -= k;
    }
}

static void row_pad(row *r, size_t used, size_t width) {
    static const char spaces[] = "                                ";

    while (used < width) {
        size_t k = width - used < sizeof spaces - 1 ? width - used : sizeof spaces - 1;

        row_put(r, spaces, k);
        used += k;
    }
}

/* "  " then s in a column of `width`, left- or right-aligned. */
static void put_cell(row *r, const char *s, size_t width, int right) {
    size_t len = strlen(s), fill = len < width ? width - len : 0;

    if (2 + fill + len > sizeof r->buf - r->n) { /* a long cell: piece by piece */
        row_put(r, "  ", 2);
        if (right) row_pad(r, len, width);
        row_put(r, s, len);
        if (!right) row_pad(r, len, width);
        return;
    }
    char *p = r->buf + r->n;
    *p++ = ' ', *p++ = ' ';
    if (right) memset(p, ' ', fill), p += fill;
    memcpy(p, s, len), p += len;
    if (!right) memset(p, ' ', fill), p += fill;
    r->n = (size_t)(p - r->buf);
}

/* Column widths of the tensor table. */
typedef struct widths {
    size_t name, dtype, shape, bytes;
    size_t device; /* 0: every storage was saved on the CPU, no column */
} widths;

static widths measure(ckpt_file *f) {
    widths w = {4, 5, 5, 5, 0}; /* the headings NAME DTYPE SHAPE BYTES */
    size_t n = ckpt_file_tensor_count(f), i, len;
    char num[CLI_U64_CAP];

    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        const char *name = cli_name(ckpt_tensor_name(t));

        len = cli_text_width(name, strlen(name));
        if (len > w.name) w.name = len < NAME_COLS_MAX ? len : NAME_COLS_MAX;
        len = strlen(ckpt_dtype_name(ckpt_tensor_dtype(t)));
        if (len > w.dtype) w.dtype = len;
        len = cli_dims_len(SHAPE_CAP, ckpt_tensor_ndim(t), ckpt_tensor_shape(t));
        if (len > w.shape) w.shape = len;
        len = strlen(cli_u64(num, ckpt_tensor_nbytes(t)));
        if (len > w.bytes) w.bytes = len;
        const char *dev = ckpt_tensor_device(t);
        if (strcmp(dev, "cpu") != 0 && w.device < 6) w.device = 6; /* DEVICE */
        if (w.device && strlen(dev) > w.device) w.device = strlen(dev);
    }
    return w;
}

static const char *tensor_name(const void *f, size_t i) {
    return ckpt_tensor_name(ckpt_file_tensor(f, i));
}

static const char *value_name(const void *f, size_t i) { return ckpt_file_value_name(f, i); }

static void print_dims(unsigned ndim, const uint64_t *d) {
    unsigned k;

    fputc('[', stdout);
    for (k = 0; k < ndim; k++) printf("%s%" PRIu64, k ? ", " : "", d[k]);
    fputc(']', stdout);
}

/* One line per chunk of a DCP tensor: where its bytes are and which box
 * of the global tensor it covers. */
static void print_chunks(const ckpt_tensor *t) {
    size_t i, n = ckpt_tensor_chunk_count(t);
    unsigned ndim = ckpt_tensor_ndim(t);
    ckpt_chunk_info c;

    for (i = 0; i < n && ckpt_tensor_chunk(&c, t, i) == 0; i++) {
        fputs("    chunk ", stdout);
        cli_put_text(stdout, c.file, strlen(c.file));
        printf(" offset %" PRIu64 " length %" PRIu64, c.offset, c.length);
        if (c.rank >= 0) printf(" rank %d", c.rank);
        fputs(" offsets ", stdout);
        print_dims(ndim, c.offsets);
        fputs(" sizes ", stdout);
        print_dims(ndim, c.sizes);
        fputc('\n', stdout);
    }
}

static void print_table(inspect *in) {
    size_t n = ckpt_file_tensor_count(in->f), i;
    size_t *order = cli_natural_order(tensor_name, in->f, n);
    widths w = measure(in->f);
    char shape[SHAPE_CAP], hex[65], num[CLI_U64_CAP];

    printf("%s%-*s  %-*s  %-*s  %*s", cli_color(CLI_BOLD), (int)w.name, "NAME", (int)w.dtype,
           "DTYPE", (int)w.shape, "SHAPE", (int)w.bytes, "BYTES");
    if (w.device) printf("  %-*s", (int)w.device, "DEVICE");
    printf("%s%s\n", in->hash ? "  SHA256" : "", cli_color(CLI_RESET));
    static row r;

    r.n = 0;
    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(in->f, order ? order[i] : i);
        const char *name = cli_name(ckpt_tensor_name(t));
        size_t len = strlen(name), cols = 0;

        while (len) {
            size_t used, c;

            if (sizeof r.buf - r.n < 4) row_flush(&r);
            r.n += cli_text_escape(r.buf + r.n, sizeof r.buf - r.n, name, len, &used, &c);
            cols += c;
            name += used, len -= used;
        }
        row_pad(&r, cols, w.name);
        put_cell(&r, ckpt_dtype_name(ckpt_tensor_dtype(t)), w.dtype, 0);
        put_cell(&r, cli_shape(shape, sizeof shape, t), w.shape, 0);
        put_cell(&r, cli_u64(num, ckpt_tensor_nbytes(t)), w.bytes, 1);
        if (w.device) put_cell(&r, ckpt_tensor_device(t), w.device, 0);
        if (in->hash) {
            const char *h = tensor_sha256(in, t, hex);

            row_put(&r, "  ", 2);
            row_put(&r, h, strlen(h));
        }
        row_put(&r, "\n", 1);
        /* what goes to stderr (a digest that fails) or through stdio
         * follows its row */
        if (in->hash || in->chunks) row_flush(&r);
        if (in->chunks) print_chunks(t);
    }
    row_flush(&r);
    free(order);
}

/* "N tensors, E elements, B bytes (human)" and, when tensors share
 * storage, how many distinct storages hold them and their bytes
 * (storage ids are 0 .. ckpt_file_storage_count - 1: one bit each marks
 * the storages counted). */
static void print_totals(ckpt_file *f) {
    size_t n = ckpt_file_tensor_count(f), i, storages = 0, nst = ckpt_file_storage_count(f);
    uint64_t elements = 0, bytes = 0, storage_bytes = 0; /* numel, summed */
    unsigned char *seen = n ? calloc(nst / 8 + 1, 1) : NULL;
    char h[32];

    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        uint64_t id = ckpt_tensor_storage_id(t);

        elements += ckpt_tensor_numel(t);
        bytes += ckpt_tensor_nbytes(t);
        if (seen && id < nst && (seen[id / 8] >> (id % 8) & 1)) continue;
        if (seen && id < nst) seen[id / 8] |= (unsigned char)(1u << (id % 8));
        storages++;
        storage_bytes += ckpt_tensor_storage_nbytes(t);
    }
    /* keys: names; a tied tensor is two keys and one storage */
    printf("%zu key%s, %" PRIu64 " element%s, %" PRIu64 " bytes (%s)", n, cli_plural(n), elements,
           cli_plural(elements), bytes, cli_human_bytes(h, bytes));
    if (seen && storages < n)
        printf("; shared: %zu storage%s, %" PRIu64 " bytes (%s)", storages, cli_plural(storages),
               storage_bytes, cli_human_bytes(h, storage_bytes));
    fputc('\n', stdout);
    free(seen);
}

static void print_values(ckpt_file *f) {
    size_t n = ckpt_file_value_count(f), i;
    size_t *order;

    if (n == 0) return;
    order = cli_natural_order(value_name, f, n);
    printf("\n%svalues:%s\n", cli_color(CLI_BOLD), cli_color(CLI_RESET));
    for (i = 0; i < n; i++) {
        size_t k = order ? order[i] : i;
        const char *name = cli_name(ckpt_file_value_name(f, k));

        fputs("  ", stdout);
        cli_put_text(stdout, name, strlen(name));
        fputs(" = ", stdout);
        cli_put_value(stdout, ckpt_file_value(f, k));
        fputc('\n', stdout);
    }
    free(order);
}

/* Longest ckpt.* metadata value the table shows in full. */
#define BOOKKEEPING_SHOWN 80

static void print_metadata(ckpt_file *f) {
    size_t n = ckpt_file_metadata_count(f), i;

    if (!ckpt_file_has_metadata(f)) return;
    printf("\n%smetadata:%s%s\n", cli_color(CLI_BOLD), cli_color(CLI_RESET), n ? "" : " (empty)");
    for (i = 0; i < n; i++) {
        const char *k = ckpt_file_metadata_key(f, i);
        const char *v = ckpt_file_metadata_value(f, i);

        fputs("  ", stdout);
        cli_put_text(stdout, k, strlen(k));
        fputs(" = ", stdout);
        /* ckpt's own bookkeeping (structure, digests, aliases) is long
         * JSON for machines: the table names it, --json has it whole */
        if (strncmp(k, "ckpt.", 5) == 0 && strlen(v) > BOOKKEEPING_SHOWN)
            printf("(%zu bytes of JSON; --json shows it)", strlen(v));
        else
            cli_put_text(stdout, v, strlen(v));
        fputc('\n', stdout);
    }
}

static void print_text(inspect *in) {
    uint64_t size = ckpt_file_size(in->f);
    char h[32];

    fputs(cli_color(CLI_BOLD), stdout);
    cli_put_text(stdout, in->path, strlen(in->path));
    printf("%s: %s, %" PRIu64 " bytes (%s)", cli_color(CLI_RESET),
           ckpt_format_name(ckpt_file_format(in->f)), size, cli_human_bytes(h, size));
    cli_put_variant(stdout, in->f);
    cli_put_snapshot(stdout, in->f);
    fputs("\n\n", stdout);
    if (ckpt_file_tensor_count(in->f) > 0) {
        print_table(in);
        fputc('\n', stdout);
    }
    print_totals(in->f);
    if (in->quant) {
        fputs("note: ", stdout);
        cli_put_text(stdout, in->quant, strlen(in->quant));
        fputc('\n', stdout);
    }
    print_values(in->f);
    print_metadata(in->f);
}

/* ------------------------------------------------------------ command */

static struct {
    cli_list files;
    const char *hash;
    int json, summary, chunks;
} args;

static const cli_opt opts[] = {
    {CLI_OPT_ARGS, "FILE", 0, &args.files, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
     "one JSON object per file on stdout instead of a table (an array "
     "for several files)"},
    {CLI_OPT_VALUE, "hash", 0, &args.hash, "sha256", 0,
     "add the SHA-256 of each tensor's contents"},
    {CLI_OPT_BOOL, "chunks", 0, &args.chunks, NULL, 0,
     "for a DCP directory, list each tensor's chunks: data file, offset and "
     "length of its slice, rank, and the offsets and sizes it covers"},
    {CLI_OPT_BOOL, "summary", 0, &args.summary, NULL, 0,
     "training components instead: what each weighs (bytes, elements), "
     "the optimizer-to-model ratio, resume readiness, metadata; FILE may "
     "be a directory (Hugging Face Trainer layout)"},
    {0}};

/* Lists one file; returns its exit code. */
/* Inspecting never runs code, but the listing alone would look like all
 * is fine: the scan's verdict (the one rule, ckpt_scan_file) decides
 * whether torch.load would run code, and an unsafe file is a finding,
 * named on stderr. Returns CLI_OK, CLI_FINDINGS or ckpt_scan's error. */
static int warn_unsafe(const char *path, const ckpt_file *f) {
    ckpt_scan_report *r = NULL;
    const char *global = NULL;
    cli_error e;
    size_t i;
    int rc = ckpt_scan_file(&r, f, NULL);

    if (rc != 0) {
        cli_error_capture(&e, rc);
        return cli_report(path, &e);
    }
    rc = ckpt_scan_verdict(r) == CKPT_VERDICT_UNSAFE ? CLI_FINDINGS : CLI_OK;
    for (i = 0; rc != CLI_OK && global == NULL && i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *fd = ckpt_scan_finding(r, i);

        if (fd->severity == CKPT_SEVERITY_DANGEROUS) global = fd->global;
    }
    if (rc != CLI_OK) {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, path, strlen(path));
        fputs(": unsafe: torch.load would ", stderr);
        if (global) {
            fputs("call ", stderr);
            cli_put_text(stderr, global, strlen(global));
        } else {
            fputs("run code", stderr);
        }
        fputs("; run `ckpt scan` for the findings\n", stderr);
    }
    ckpt_scan_report_free(r);
    return rc;
}

static int inspect_one(const cli_target *t, int hash, cli_json_writer *j) {
    const char *path = t->path;
    inspect in = {NULL, NULL, 0, 0, CLI_OK, NULL};
    cli_error e;
    int rc;

    in.path = path;
    in.hash = hash;
    in.chunks = args.chunks;
    rc = ckpt_open(&in.f, in.path, NULL);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        /* among several files or a pipeline's components, its place in
         * the array (as verify --json writes a file it cannot open);
         * alone, stdout stays empty */
        if (j && (args.files.n > 1 || t->component)) {
            cli_json_object_begin(j);
            cli_json_key(j, "file");
            cli_json_string(j, path);
            cli_json_pipeline(j, t);
            cli_json_key(j, "format");
            cli_json_null(j);
            cli_json_key(j, "error");
            cli_json_error(j, &e, path);
            cli_json_object_end(j);
        }
        return cli_report(in.path, &e);
    }
    rc = ckpt_file_quant_note(&in.quant, in.f);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        ckpt_close(in.f);
        return cli_report(in.path, &e);
    }
    if (j)
        print_json(&in, j, t);
    else
        print_text(&in);
    ckpt_string_free(in.quant);
    rc = warn_unsafe(in.path, in.f);
    /* a compressed storage record: torch.load and torch.load(mmap=True)
     * load different tensors, a finding as verify reports it */
    int mrc = ckpt_file_check_mmap(in.f);
    if (mrc != 0) {
        cli_error_capture(&e, mrc);
        mrc = cli_report(in.path, &e);
        if (rc == CLI_OK) rc = mrc;
    }
    ckpt_close(in.f);
    return rc == CLI_USAGE || in.rc == CLI_OK ? rc : in.rc;
}

/* One checkpoint of the command line (a pipeline's component), after a
 * blank line when another came before. */
static int inspect_target(const cli_target *t, void *ctx) {
    static int first = 1;

    if (!args.json && !first) fputc('\n', stdout);
    first = 0;
    return inspect_one(t, args.hash != NULL, args.json ? ctx : NULL);
}

static int run(const cli_command *cmd, int argc, char **argv) {
    cli_json_writer j;
    size_t i;
    int several, worst = CLI_OK;
    int rc = cli_opt_parse(cmd, argc, argv);

    if (rc != CLI_CONTINUE) return rc;
    if (args.hash && strcmp(args.hash, "sha256") != 0)
        return cli_usage_error(cmd, "--hash takes 'sha256'");
    several = cli_several_targets((const char *const *)args.files.items, args.files.n);
    /* Training components instead of the tensor list; FILE may be a
     * directory (Hugging Face Trainer layout). */
    if (args.summary) {
        if (args.hash || several)
            return cli_usage_error(cmd, "--summary takes one FILE and no --hash");
        return cli_summary_inspect(args.files.items[0], args.json);
    }
    cli_json_init(&j, stdout);
    if (args.json && several) cli_json_array_begin(&j);
    for (i = 0; i < args.files.n; i++) {
        rc = cli_each_target(args.files.items[i], inspect_target, &j);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    if (args.json && several) cli_json_array_end(&j);
    if (args.json && (several || worst == CLI_OK)) fputc('\n', stdout);
    return worst;
}

const cli_command cli_cmd_inspect = {
    "inspect",
    "list tensors, values and metadata of a checkpoint",
    opts,
    "Lists every tensor (name, dtype, shape, bytes), the non-tensor values\n"
    "and the metadata of each FILE, without executing anything in it. A\n"
    "file that cannot be read is reported on stderr and the others listed.\n"
    "FILE may be a torch.distributed.checkpoint directory: its global\n"
    "tensors are shown, assembled from their chunks; a diffusers pipeline\n"
    "directory (model_index.json), each model component (--json: an array,\n"
    "each object with pipeline {component, error} as verify --json writes).\n"
    "The header line gives the file's size (a directory's: all its files).\n"
    "The totals line `K keys, E elements, B bytes` counts the tensor names\n"
    "(as verify and convert count them: a tied weight is two keys), their\n"
    "elements and their tensor bytes (each key's, so a tied weight twice);\n"
    "`shared: S storages, B bytes` follows when keys share storage: the\n"
    "distinct storages and the bytes they hold. verify's `bytes checked`\n"
    "counts what it read instead.\n",
    "Nothing in FILE runs, but a FILE that torch.load would run code for\n"
    "(the `ckpt scan` verdict unsafe) is named on stderr after its listing.\n"
    "Exit status: 0 ok, 1 FILE unreadable, corrupt or unsafe (ckpt scan's\n"
    "verdict), 2 usage or I/O error.\n",
    run,
    NULL};
