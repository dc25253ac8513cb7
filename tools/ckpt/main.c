/* main.c - `ckpt`: the command table, dispatch, and the plumbing every
 * command shares (error reporting, exit codes, terminal-safe text). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const cli_command commands[] = {
    { "inspect", "list tensors, values and metadata of a checkpoint",
      "usage: ckpt inspect FILE [--json] [--hash sha256]\n"
      "\n"
      "Lists every tensor (name, dtype, shape, bytes), the non-tensor values\n"
      "and the metadata of FILE, without executing anything in it.\n"
      "\n"
      "  --json          one JSON object on stdout instead of a table\n"
      "  --hash sha256   add the SHA-256 of each tensor's contents\n",
      cli_cmd_inspect },
    { "verify", "read every byte and check checksums and structure",
      "usage: ckpt verify FILE...\n"
      "\n"
      "Opens each FILE and reads every tensor byte, checking zip CRC-32s,\n"
      "storage sizes and structure. Prints one line per file:\n"
      "  OK FILE (FORMAT, N tensors, B bytes checked)\n"
      "  CORRUPT FILE: MESSAGE (MEMBER, offset N)\n"
      "  ERROR FILE: MESSAGE          (the file could not be read)\n"
      "Exit status: 0 all OK, 1 some file corrupt, 2 some file unreadable.\n",
      cli_cmd_verify },
    { "doctor", "a readable health report with a verdict",
      "usage: ckpt doctor FILE [--json]\n"
      "\n"
      "Reports format, integrity, contents and what ckpt cannot vouch for,\n"
      "under a first line HEALTHY: ... or ATTENTION: ....\n"
      "Exit status:\n"
      "  0 healthy, 1 needs attention (corrupt, unsafe, partial resume...), 2 usage or I/O error.\n"
      "\n"
      "  --json   one JSON object on stdout instead of the report\n",
      cli_cmd_doctor },
    { "scan", "would loading it run code? decided without running it",
      "usage: ckpt scan [--json] [--allow MODULE.QUALNAME]... [--policy FILE] FILE...\n"
      "\n"
      "Decides, without executing anything, whether loading each FILE with\n"
      "torch.load or pickle could run code. Every pickle in it is examined:\n"
      "zip members that look like pickles, legacy stacked pickles, streams\n"
      "after STOP, pickles nested in string literals. Verdicts:\n"
      "  safe              only allowlisted data and tensor builders\n"
      "  unsafe            a global off the allowlist is imported, called or\n"
      "                    built (dangerous: a known dangerous family - code\n"
      "                    execution, process control, network or file access)\n"
      "  unscannable       some content could not be examined (encrypted,\n"
      "                    7z/tar/gzip, zip bomb, a pickle that does not parse)\n"
      "  not-a-checkpoint  no pickle, zip or safetensors content\n"
      "A sharded index (*.index.json) is scanned through every shard it lists.\n"
      "Tensor bytes are not checked (that is `ckpt verify`): a file whose\n"
      "pickles all parse and are clean is safe even if its storages are not.\n"
      "\n"
      "  --json            one JSON object per file (an array for several)\n"
      "  --allow NAME      also allow the global NAME (exact module.qualname;\n"
      "                    not for known dangerous families: such an --allow\n"
      "                    is ignored, and the output says so); repeatable\n"
      "  --policy FILE     allow every module.qualname listed in FILE, one per\n"
      "                    line, '#' starts a comment\n"
      "Exit status: 0 every file safe, 1 some file not safe, 2 usage or I/O\n"
      "error.\n",
      cli_cmd_scan },
    { "store", "numbered generations with a verified LATEST pointer",
      "usage: ckpt store commit DIR --name NAME --step N [--keep N] [--replace] SRC\n"
      "       ckpt store latest DIR\n"
      "       ckpt store list DIR [--json]\n"
      "       ckpt store prune DIR [--keep N]\n"
      "       ckpt store gc DIR [--older-than MINUTES]\n"
      "\n"
      "DIR holds generations NAME-STEP.safetensors or NAME-STEP.pt (steps sort\n"
      "numerically) and LATEST, the file name of the newest committed one\n"
      "(for readers without ckpt). NAME is a label, not a namespace: the\n"
      "generations of every NAME in DIR are one sequence by step, and share\n"
      "LATEST and pruning; use one DIR per run.\n"
      "Every file is written atomically (temporary file, fsync, rename, fsync\n"
      "of DIR), so a crash leaves each name absent or complete. Writers take\n"
      "turns through a lock (flock on DIR/.ckpt-store.lock, released if one\n"
      "dies): LATEST only moves forward; list says when DIR's filesystem\n"
      "(NFS, Lustre...) may not honour the lock across hosts.\n"
      "\n"
      "  commit   verify SRC (a corrupt SRC is refused: nothing is written),\n"
      "           copy it (any format ckpt reads; its format is kept) into\n"
      "           DIR as generation N (DIR and its parents are created if\n"
      "           missing, mode 0755), re-read and verify it fully, move\n"
      "           LATEST, then prune; prints the new file's path. A step\n"
      "           already committed is refused unless --replace is given\n"
      "  latest   print the newest generation that verifies (corrupt ones are\n"
      "           skipped, LATEST is not trusted); exit 1 if none does\n"
      "  list     every generation with step, size and status ok/corrupt\n"
      "           (verified), and the state of LATEST; exit 1 if any is bad\n"
      "  prune    keep the N newest generations that verify (at least one)\n"
      "           and LATEST's; remove the older ones. Corrupt generations\n"
      "           never count toward N and never push a good one out: newer\n"
      "           ones are reported and left in place (exit 1) until N newer\n"
      "           generations verify\n"
      "  gc       remove temporary files left by killed writers: never one\n"
      "           whose writer still holds its lock; an unlocked one once its\n"
      "           process is gone or it is unmodified for MINUTES\n"
      "\n"
      "  --keep N              verified generations kept by commit and prune (3)\n"
      "  --older-than MINUTES  gc: stale age for a live writer's file (60)\n"
      "  --json                list: one JSON object\n"
      "Exit status: 0 ok, 1 corrupt data (source, new generation, listing,\n"
      "prune), 2 usage or I/O error.\n",
      cli_cmd_store },
    { "match", "would this checkpoint load into that model? key by key",
      "usage: ckpt match CKPT --expect SPEC [--normalize]\n"
      "                  [--allow-missing GLOB]... [--allow-unexpected GLOB]...\n"
      "                  [--json]\n"
      "\n"
      "Compares the tensor keys of CKPT with those SPEC expects, as a strict\n"
      "load_state_dict would: matched keys, missing keys, unexpected keys, shape\n"
      "and dtype mismatches, tied weights. SPEC is a checkpoint of any format,\n"
      "or a JSON manifest with the tensors list of `ckpt inspect --json`.\n"
      "Names are compared exactly. When keys differ by wrapper prefixes\n"
      "(module., _orig_mod., state_dict., _fsdp_wrapped_module., ...) the\n"
      "rewrite that fixes them is named with the number of keys it matches.\n"
      "\n"
      "  --normalize             apply that rewrite if it gives a complete match\n"
      "  --allow-missing GLOB    a missing key matching GLOB is allowed ('*'\n"
      "                          crosses '.'); allowed keys are still listed\n"
      "  --allow-unexpected GLOB likewise for unexpected keys\n"
      "  --json                  one JSON object (fields: see ckpt_match in ckpt.h)\n"
      "Exit status: 0 complete match, 1 anything else, 2 usage or I/O error.\n"
      "A match of no key, or of less than half the expected keys, is called\n"
      "out even when allowed.\n",
      cli_cmd_match },
    { "diff", "compare two checkpoints key by key and value by value",
      "usage: ckpt diff A B [--rtol R] [--atol A] [--keys-only] [--normalize] [--json]\n"
      "\n"
      "Lists keys only in A or only in B, shape and dtype differences and, for\n"
      "each common tensor, whether its bytes are equal, or how its values\n"
      "differ: elements outside tolerance, max abs and rel difference, NaN and\n"
      "Inf disagreements. Floats of every width are compared as values (F16,\n"
      "BF16 and F8 widened); an element differs unless |a-b| <= atol +\n"
      "rtol*|b| (NaN equals NaN). Non-tensor values (epoch, learning rates,\n"
      "step counters) are compared too: ints and strings exactly, floats with\n"
      "the same tolerances.\n"
      "\n"
      "  --rtol R      relative tolerance (default 0)\n"
      "  --atol A      absolute tolerance (default 0)\n"
      "  --keys-only   names, dtypes and shapes only; A and B may be JSON\n"
      "                manifests (`ckpt inspect --json` output)\n"
      "  --normalize   rename B's keys by the rewrite diff names (module.,\n"
      "                _orig_mod., a training checkpoint's model.) first\n"
      "  --json        one JSON object on stdout\n"
      "Exit status: 0 identical (values within the tolerances), 1 different,\n"
      "2 usage or I/O error.\n",
      cli_cmd_diff },
    { "rename", "rewrite tensor keys (prefixes, wrappers) into a new file",
      "usage: ckpt rename IN OUT RULE... [--dry-run]\n"
      "\n"
      "Renames the tensor keys of IN by the rules, in the order given, and\n"
      "writes OUT atomically in IN's format (safetensors, or a torch zip).\n"
      "Nested dicts keep their shape where the new names allow it.\n"
      "\n"
      "  --strip-prefix P   keys starting with P lose it (P is whole segments:\n"
      "                     'module' means 'module.')\n"
      "  --add-prefix P     every key gains P\n"
      "  --replace OLD=NEW  each occurrence of OLD made of whole segments\n"
      "                     becomes NEW ('_orig_mod.=' drops that wrapper)\n"
      "  --auto SPEC        the rewrite `ckpt match --normalize` finds against\n"
      "                     SPEC (a checkpoint or a JSON manifest); it must\n"
      "                     give a complete match\n"
      "  --dry-run          print the mapping OLD -> NEW, write nothing (OUT\n"
      "                     may be left out)\n"
      "A rule that matches no key is refused, and so are two keys that would\n"
      "get one name (both are named).\n"
      "Exit status: 0 written, 1 refused (collision, no complete --auto\n"
      "rewrite) or unreadable input, 2 usage or I/O error, or a rule that\n"
      "matches no key.\n",
      cli_cmd_rename },
    { "convert", "write a checkpoint as safetensors or torch .pt, losslessly",
      "usage: ckpt convert IN OUT [--select PREFIX]... [--format safetensors|torch]\n"
      "                    [--meta KEY=VALUE]... [--config FILE.json] [--backup]\n"
      "\n"
      "Reads IN (any format ckpt reads) and writes OUT atomically, as\n"
      "safetensors or as a torch.save zip (from OUT's extension: .safetensors;\n"
      ".pt .pth .bin .ckpt). Nothing is dropped: safetensors output keeps the\n"
      "non-tensor values, nesting, tied weights and shared storages in its\n"
      "__metadata__ (ckpt.structure, ckpt.aliases), so converting it back to\n"
      ".pt rebuilds the original; both formats carry an XXH3-64 digest per\n"
      "tensor that `ckpt verify` checks. Objects that are not data (opaque\n"
      "classes) cannot be converted: they are named, leave them out with\n"
      "--select.\n"
      "\n"
      "  --select PREFIX   keep only what is named PREFIX or PREFIX.*, e.g.\n"
      "                    --select model; repeatable\n"
      "  --format FMT      safetensors or torch, whatever OUT is called\n"
      "  --meta KEY=VALUE  record KEY in the metadata (inspect shows it);\n"
      "                    repeatable; keys ckpt.* are reserved\n"
      "  --config FILE     record the JSON object in FILE as metadata \"config\"\n"
      "  --backup          keep the OUT being replaced as OUT.bak (atomically)\n"
      "Exit status: 0 written, 1 IN unreadable or not convertible (opaque\n"
      "objects, a tensor named __metadata__), 2 usage or I/O error.\n",
      cli_cmd_convert },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    size_t i;

    fputs("usage: ckpt COMMAND [ARGS...]\n"
          "       ckpt help COMMAND | --help | --version\n"
          "\n"
          "Opens ML checkpoints (safetensors, PyTorch zip and legacy files,\n"
          "pickles) safely: nothing in them is ever executed.\n"
          "\n"
          "commands:\n",
          out);
    for (i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\nexit status: 0 ok, 1 findings (corrupt, unsafe, mismatch),\n"
          "2 usage or I/O error.\n",
          out);
}

static const cli_command *find_command(const char *name)
{
    size_t i;

    for (i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* `ckpt help [COMMAND]`. */
static int help(int argc, char **argv)
{
    const cli_command *cmd;

    if (argc < 2) {
        usage(stdout);
        return CLI_OK;
    }
    cmd = find_command(argv[1]);
    if (cmd == NULL || argc > 2) {
        fputs(cmd ? "ckpt: help takes one command\n"
                  : "ckpt: help: unknown command\n",
              stderr);
        usage(stderr);
        return CLI_USAGE;
    }
    return cli_help(cmd);
}

static int dispatch(int argc, char **argv)
{
    const cli_command *cmd;

    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0)
        return help(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0) {
        printf("ckpt %s\n", CKPT_VERSION_STRING);
        return CLI_OK;
    }
    cmd = find_command(argv[1]);
    if (cmd == NULL) {
        fputs("ckpt: unknown command '", stderr);
        cli_put_text(stderr, argv[1], strlen(argv[1]));
        fputs("'\n", stderr);
        usage(stderr);
        return CLI_USAGE;
    }
    return cmd->run(cmd, argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("ckpt: error writing to standard output\n", stderr);
        return CLI_USAGE;
    }
    return rc;
}

/* ------------------------------------------------------------ commands */

int cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int cli_help(const cli_command *cmd)
{
    fputs(cmd->usage, stdout);
    return CLI_OK;
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "ckpt %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fputs(cmd->usage, stderr);
    return CLI_USAGE;
}

/* ------------------------------------------------------------ errors */

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

void cli_error_capture(cli_error *e, int code)
{
    const ckpt_error *last = ckpt_error_last();

    e->code = code;
    copy_str(e->message, sizeof e->message, last ? last->message : NULL);
    copy_str(e->member, sizeof e->member, last ? last->member : NULL);
    copy_str(e->file, sizeof e->file, last ? last->file : NULL);
    e->offset = last ? last->offset : UINT64_MAX;
    if (e->message[0] == '\0')
        copy_str(e->message, sizeof e->message, ckpt_error_name(code));
}

int cli_exit_code(int code)
{
    switch (code) {
    case CKPT_OK:
        return CLI_OK;
    case CKPT_E_IO:
    case CKPT_E_NOMEM:
    case CKPT_E_INVALID_ARG:
        return CLI_USAGE;
    default:
        return CLI_FINDINGS;
    }
}

void cli_put_location(FILE *out, const cli_error *e, int bare)
{
    int has_member = e->member[0] != '\0';
    int has_offset = e->offset != UINT64_MAX;

    if (!has_member && !has_offset)
        return;
    fputs(" (", out);
    if (has_member) {
        if (!bare)
            fputs("member ", out);
        cli_put_text(out, e->member, strlen(e->member));
    }
    if (has_offset)
        fprintf(out, "%soffset %" PRIu64, has_member ? ", " : "", e->offset);
    fputc(')', out);
}

void cli_put_files(FILE *out, const char *file, const cli_error *e)
{
    cli_put_text(out, file, strlen(file));
    fputs(": ", out);
    if (e->file[0] && strcmp(e->file, file) != 0) {
        cli_put_text(out, e->file, strlen(e->file));
        fputs(": ", out);
    }
}

int cli_report(const char *file, const cli_error *e)
{
    fputs("ckpt: ", stderr);
    cli_put_files(stderr, file, e);
    cli_put_text(stderr, e->message, strlen(e->message));
    cli_put_location(stderr, e, 0);
    fputc('\n', stderr);
    return cli_exit_code(e->code);
}

/* ------------------------------------------------------------ text */

size_t cli_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len, i;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07u;
    } else {
        return 0; /* continuation byte, overlong 2-byte lead, or > 0xf4 */
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
}

/* Bytes to escape on a terminal: C0 controls, DEL and the C1 controls
 * U+0080..U+009F (which some terminals obey, as ESC sequences). */
static int is_control(const unsigned char *p, size_t n)
{
    return p[0] < 0x20 || p[0] == 0x7f ||
           (n == 2 && p[0] == 0xc2 && p[1] < 0xa0);
}

static size_t put_or_measure(FILE *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, cols = 0;

    while (i < len) {
        size_t n = cli_utf8_len(p + i, len - i);

        if (n == 0 || is_control(p + i, n)) {
            /* \xNN for the lead byte only: the rest are shown next. */
            if (out)
                fprintf(out, "\\x%02x", (unsigned)p[i]);
            cols += 4;
            i++;
        } else {
            if (out)
                fwrite(p + i, 1, n, out);
            cols++;
            i += n;
        }
    }
    return cols;
}

size_t cli_put_text(FILE *out, const char *s, size_t len)
{
    return put_or_measure(out, s, len);
}

size_t cli_text_width(const char *s, size_t len)
{
    return put_or_measure(NULL, s, len);
}

const char *cli_name(const char *name)
{
    return name[0] ? name : "(root)";
}

const char *cli_plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

const char *cli_human_bytes(char buf[32], uint64_t bytes)
{
    static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
                                         "EiB" };
    double v = (double)bytes;
    size_t u = 0;

    if (bytes < 1024) {
        snprintf(buf, 32, "%" PRIu64 " B", bytes);
        return buf;
    }
    v /= 1024.0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

const char *cli_shape(char *buf, size_t cap, const ckpt_tensor *t)
{
    return cli_dims(buf, cap, ckpt_tensor_ndim(t), ckpt_tensor_shape(t));
}

const char *cli_dims(char *buf, size_t cap, unsigned ndim, const uint64_t *shape)
{
    unsigned i;
    size_t used = 0;

    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRIu64,
                                 i ? ", " : "", shape[i]);
    if (used < cap)
        used += (size_t)snprintf(buf + used, cap - used, "]");
    if (used >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    return buf;
}

void cli_put_name(FILE *out, const char *name)
{
    name = cli_name(name);
    cli_put_text(out, name, strlen(name));
}

/* Longest string or byte run cli_put_value shows in full. */
#define SHOW_MAX 160

void cli_put_value(FILE *out, const ckpt_value *v)
{
    char buf[40];
    const char *s;
    size_t len = 0, i, cut;
    double d;

    switch (ckpt_value_kind(v)) {
    case CKPT_KIND_INT:
        s = ckpt_value_int_decimal(v);
        fputs(s ? s : "?", out);
        break;
    case CKPT_KIND_FLOAT:
        d = ckpt_value_float(v);
        fputs(isnan(d) ? "nan" : isinf(d) ? (d > 0 ? "inf" : "-inf")
                                           : cli_fmt_double(buf, d),
              out);
        break;
    case CKPT_KIND_STR:
        s = ckpt_value_str(v, &len);
        cut = len < SHOW_MAX ? len : SHOW_MAX;
        while (cut < len && cut > 0 && (s[cut] & 0xc0) == 0x80)
            cut--; /* not inside a UTF-8 sequence */
        fputc('"', out);
        cli_put_text(out, s, cut);
        fputc('"', out);
        if (len > SHOW_MAX)
            fprintf(out, "... (%zu bytes)", len);
        break;
    case CKPT_KIND_BYTES:
        s = ckpt_value_str(v, &len);
        fputs("bytes ", out);
        for (i = 0; i < len && i < SHOW_MAX / 2; i++)
            fprintf(out, "%02x", (unsigned)(unsigned char)s[i]);
        fprintf(out, "%s (%zu bytes)", len > SHOW_MAX / 2 ? "..." : "", len);
        break;
    case CKPT_KIND_BOOL:
        fputs(ckpt_value_bool(v) ? "true" : "false", out);
        break;
    case CKPT_KIND_NONE:
        fputs("none", out);
        break;
    case CKPT_KIND_OBJECT:
        s = ckpt_value_object_name(v);
        fputs("<object ", out);
        cli_put_text(out, s ? s : "?", s ? strlen(s) : 1);
        fputc('>', out);
        break;
    default:
        fprintf(out, "<%s>", ckpt_kind_name(ckpt_value_kind(v)));
        break;
    }
}

const char *cli_color(const char *sgr)
{
    static int enabled = -1;

    if (enabled < 0)
        enabled = isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
    return enabled ? sgr : "";
}
