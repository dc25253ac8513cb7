/* main.c - `ckpt`: the command table, dispatch, and the plumbing every
 * command shares (error reporting, exit codes, terminal-safe text). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const cli_command *const commands[] = {
    &cli_cmd_inspect, &cli_cmd_verify, &cli_cmd_doctor, &cli_cmd_scan,    &cli_cmd_store,
    &cli_cmd_match,   &cli_cmd_diff,   &cli_cmd_rename, &cli_cmd_convert,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    size_t i;

    fputs("usage: ckpt COMMAND [ARGS...]\n"
          "       ckpt help COMMAND | --help | --version\n"
          "       ckpt help --man | --completion bash|zsh\n"
          "\n"
          "Opens ML checkpoints (safetensors, PyTorch zip and legacy files,\n"
          "pickles, sharded sets, model folders, torch.distributed.checkpoint\n"
          "directories) safely: nothing in them is ever executed.\n"
          "\n"
          "commands:\n",
          out);
    for (i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fputs("\nexit status: 0 ok, 1 findings (corrupt, unsafe, mismatch),\n"
          "2 usage or I/O error.\n",
          out);
}

static const cli_command *find_command(const char *name) {
    size_t i;

    for (i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0) return commands[i];
    return NULL;
}

/* `ckpt help [COMMAND]`. */
static int help(int argc, char **argv) {
    const cli_command *cmd;

    if (argc < 2) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--man") == 0 && argc == 2) {
        cli_doc_man(stdout, commands, N_COMMANDS);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--completion") == 0 && argc == 3 &&
        cli_doc_completion(stdout, argv[2], commands, N_COMMANDS) == 0)
        return CLI_OK;
    if (strcmp(argv[1], "--completion") == 0) {
        fputs("ckpt: help --completion takes bash or zsh\n", stderr);
        return CLI_USAGE;
    }
    cmd = find_command(argv[1]);
    if (cmd == NULL || argc > 2) {
        if (cmd) {
            fputs("ckpt: help takes one command\n", stderr);
        } else {
            fputs("ckpt help: unknown command '", stderr);
            cli_put_text(stderr, argv[1], strlen(argv[1]));
            fputs("'\n", stderr);
        }
        usage(stderr);
        return CLI_USAGE;
    }
    cli_opt_usage(stdout, cmd, 1);
    return CLI_OK;
}

/* 1 for "-h" and "--help". */
static int is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

static int dispatch(int argc, char **argv) {
    const cli_command *cmd;
    int rc;

    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (is_help(argv[1]) || strcmp(argv[1], "help") == 0) return help(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0) {
        /* the library loaded at run time may be another than the one
         * the tool was built with */
        printf("ckpt %s (libckpt %s)\n", CKPT_VERSION_STRING, ckpt_version_string());
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
    rc = cmd->run(cmd, argc - 1, argv + 1);
    cli_opt_free(cmd);
    return rc;
}

int main(int argc, char **argv) {
    int rc = dispatch(argc, argv);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("ckpt: error writing to standard output\n", stderr);
        return CLI_USAGE;
    }
    return rc;
}

/* ------------------------------------------------------------ commands */

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
    va_list ap;

    fprintf(stderr, "ckpt %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cli_opt_usage(stderr, cmd, 0);
    return CLI_USAGE;
}

/* ------------------------------------------------------------ errors */

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

void cli_error_copy(cli_error *e, const ckpt_error *src) {
    e->code = src ? src->code : CKPT_OK;
    copy_str(e->message, sizeof e->message, src ? src->message : NULL);
    copy_str(e->member, sizeof e->member, src ? src->member : NULL);
    copy_str(e->file, sizeof e->file, src ? src->file : NULL);
    e->offset = src ? src->offset : UINT64_MAX;
    if (e->message[0] == '\0') copy_str(e->message, sizeof e->message, ckpt_error_name(e->code));
}

void cli_error_capture(cli_error *e, int code) {
    const ckpt_error *last = ckpt_error_last();

    cli_error_copy(e, last);
    e->code = code;
    if (last == NULL || last->message == NULL || last->message[0] == '\0')
        copy_str(e->message, sizeof e->message, ckpt_error_name(code));
}

int cli_exit_code(int code) {
    switch (code) {
    case CKPT_OK: return CLI_OK;
    case CKPT_E_IO:
    case CKPT_E_NOMEM:
    case CKPT_E_INVALID_ARG:
    case CKPT_E_LIMIT: /* not the input's fault: a bound ckpt chose */ return CLI_USAGE;
    default: return CLI_FINDINGS;
    }
}

void cli_put_location(FILE *out, const cli_error *e, int bare) {
    int has_member = e->member[0] != '\0';
    int has_offset = e->offset != UINT64_MAX;

    if (!has_member && !has_offset) return;
    fputs(" (", out);
    if (has_member) {
        if (!bare) fputs("member ", out);
        cli_put_text(out, e->member, strlen(e->member));
    }
    if (has_offset) fprintf(out, "%soffset %" PRIu64, has_member ? ", " : "", e->offset);
    fputc(')', out);
}

void cli_put_files(FILE *out, const char *file, const cli_error *e) {
    cli_put_text(out, file, strlen(file));
    fputs(": ", out);
    if (e->file[0] && strcmp(e->file, file) != 0) {
        cli_put_text(out, e->file, strlen(e->file));
        fputs(": ", out);
    }
}

void cli_put_message(FILE *out, const cli_error *e) {
    const char *name = strstr(e->message, "max_");
    size_t len = name ? strspn(name, "abcdefghijklmnopqrstuvwxyz_") : 0;

    if (e->code == CKPT_E_LIMIT) fputs("limit exceeded: ", out);
    cli_put_text(out, e->message, strlen(e->message));
    if (e->code != CKPT_E_LIMIT) return;
    fputs("; the limit guards against hostile input", out);
    /* a message naming no field says what bound it is (a fixed one) */
    if (len)
        fprintf(out, ", raise it with ckpt_limits.%.*s (C API, ckpt_open_options.limits)", (int)len,
                name);
}

void cli_put_variant(FILE *out, const ckpt_file *f) {
    const char *v = f ? ckpt_file_variant(f) : NULL;
    if (!v) return;
    fputs("; weights of variant \"", out);
    cli_put_text(out, v, strlen(v));
    fputs("\" only: from_pretrained(DIR, variant=\"", out);
    cli_put_text(out, v, strlen(v));
    fputs("\") reads them", out);
}

void cli_put_snapshot(FILE *out, const ckpt_file *f) {
    const char *rev = f ? ckpt_file_snapshot(f) : NULL;
    if (!rev) return;
    fputs("; snapshot ", out);
    cli_put_text(out, rev, strlen(rev));
    fputs(" of the Hugging Face cache repository, which refs/main names", out);
}

int cli_report(const char *file, const cli_error *e) {
    fputs("ckpt: ", stderr);
    cli_put_files(stderr, file, e);
    cli_put_message(stderr, e);
    cli_put_location(stderr, e, 0);
    fputc('\n', stderr);
    return cli_exit_code(e->code);
}

/* ------------------------------------------------------------ text */

size_t cli_utf8_len(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    size_t len, i;
    uint32_t cp;

    if (c < 0x80) return 1;
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
    if (n < len) return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) ||
        cp > 0x10ffff)
        return 0;
    return len;
}

/* Bytes to escape on a terminal: C0 controls, DEL and the C1 controls
 * U+0080..U+009F (which some terminals obey, as ESC sequences). */
static int is_control(const unsigned char *p, size_t n) {
    return p[0] < 0x20 || p[0] == 0x7f || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0);
}

/* 1 if the 8 bytes at p are all printable ASCII (0x20..0x7e), 8 at a
 * time: a byte below 0x20 borrows into its top bit, one of 0x7f or more
 * has it set or sets it adding 1 (a carry out of 0xff only follows a byte
 * that has it set already). */
static int printable8(const unsigned char *p) {
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t x;

    memcpy(&x, p, 8);
    return (((x - 0x20 * ones) & ~x) | x | (x + ones)) & high ? 0 : 1;
}

size_t cli_text_escape(char *dst, size_t cap, const char *s, size_t len, size_t *used,
                       size_t *cols) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k = 0, run = 0; /* p[run..i) is shown as it is, not copied yet */

    *cols = 0;
    while (i < len) {
        size_t room = cap - k - (i - run), n;

        if (p[i] >= 0x20 && p[i] < 0x7f) { /* printable ASCII: one column each */
            size_t j = i, end = len - i < room ? len : i + room;

            while (end - j >= 8 && printable8(p + j)) j += 8;
            while (j < end && p[j] >= 0x20 && p[j] < 0x7f) j++;
            if (j == i) break; /* no room */
            *cols += j - i;
            i = j;
            continue;
        }
        n = cli_utf8_len(p + i, len - i);
        if (n == 0 || is_control(p + i, n)) {
            /* \xNN for the lead byte only: the rest are shown next. */
            if (room < 4) break;
            if (dst) {
                memcpy(dst + k, p + run, i - run);
                dst[k + i - run] = '\\', dst[k + i - run + 1] = 'x';
                dst[k + i - run + 2] = hex[p[i] >> 4], dst[k + i - run + 3] = hex[p[i] & 15];
            }
            k += i - run + 4;
            *cols += 4;
            run = ++i;
        } else {
            if (room < n) break;
            (*cols)++;
            i += n;
        }
    }
    if (dst) memcpy(dst + k, p + run, i - run);
    *used = i;
    return k + (i - run);
}

size_t cli_put_text(FILE *out, const char *s, size_t len) {
    char buf[1024];
    size_t cols = 0;

    while (len) {
        size_t used, c, k = cli_text_escape(buf, sizeof buf, s, len, &used, &c);

        fwrite(buf, 1, k, out);
        cols += c;
        s += used, len -= used;
    }
    return cols;
}

void cli_put_shell(FILE *out, const char *s) {
    size_t n = ckpt_shell_quote(NULL, 0, s);
    char *w = malloc(n + 1);

    if (w == NULL) { /* still one word, if not a pastable one */
        cli_put_text(out, s, strlen(s));
        return;
    }
    ckpt_shell_quote(w, n + 1, s);
    cli_put_text(out, w, n);
    free(w);
}

size_t cli_text_width(const char *s, size_t len) {
    size_t used, cols;

    cli_text_escape(NULL, SIZE_MAX, s, len, &used, &cols);
    return cols;
}

const char *cli_name(const char *name) { return name[0] ? name : "(root)"; }

const char *cli_plural(uint64_t n) { return n == 1 ? "" : "s"; }

const char *cli_human_bytes(char buf[32], uint64_t bytes) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
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

size_t cli_dims_len(size_t cap, unsigned ndim, const uint64_t *shape) {
    size_t len = ndim ? 2 * ndim : 2; /* "[" "]" and ", " between */

    for (unsigned i = 0; i < ndim; i++)
        for (uint64_t x = shape[i]; x >= 10; x /= 10) len++;
    len += ndim; /* each dimension's first digit */
    return cap && len >= cap ? cap - 1 : len;
}

const char *cli_shape(char *buf, size_t cap, const ckpt_tensor *t) {
    return cli_dims(buf, cap, ckpt_tensor_ndim(t), ckpt_tensor_shape(t));
}

/* Appends the n bytes at s to buf (cap bytes, *used of them taken, always
 * NUL-terminated), as snprintf would: what does not fit is cut, but *used
 * counts it. */
static void put_part(char *buf, size_t cap, size_t *used, const char *s, size_t n) {
    if (*used < cap) {
        size_t room = cap - *used - 1, k = n < room ? n : room;
        memcpy(buf + *used, s, k);
        buf[*used + k] = '\0';
    }
    *used += n;
}

const char *cli_u64(char buf[CLI_U64_CAP], uint64_t x) {
    char *p = buf + CLI_U64_CAP - 1;

    *p = '\0';
    do {
        *--p = (char)('0' + x % 10);
    } while (x /= 10);
    return p;
}

/* One line per tensor of a listing: digits by hand, not printf (a million
 * tensors). */
const char *cli_dims(char *buf, size_t cap, unsigned ndim, const uint64_t *shape) {
    size_t used = 0;

    if (ndim < cap / (CLI_U64_CAP + 2)) { /* fits whole: written in place */
        char *p = buf;

        *p++ = '[';
        for (unsigned i = 0; i < ndim; i++) {
            char d[CLI_U64_CAP];
            const char *digits = cli_u64(d, shape[i]);
            size_t n = (size_t)(d + CLI_U64_CAP - 1 - digits);

            if (i) *p++ = ',', *p++ = ' ';
            memcpy(p, digits, n);
            p += n;
        }
        *p++ = ']';
        *p = '\0';
        return buf;
    }
    buf[0] = '\0';
    put_part(buf, cap, &used, "[", 1);
    for (unsigned i = 0; i < ndim && used < cap; i++) {
        char d[CLI_U64_CAP];
        const char *digits = cli_u64(d, shape[i]);

        if (i) put_part(buf, cap, &used, ", ", 2);
        put_part(buf, cap, &used, digits, strlen(digits));
    }
    if (used < cap) put_part(buf, cap, &used, "]", 1);
    if (used >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
    return buf;
}

void cli_put_name(FILE *out, const char *name) {
    name = cli_name(name);
    cli_put_text(out, name, strlen(name));
}

/* Longest string or byte run cli_put_value shows in full. */
#define SHOW_MAX 160

void cli_put_value(FILE *out, const ckpt_value *v) {
    char buf[40];
    const char *s;
    size_t len = 0, i, cut;
    double d = 0;
    int b = 0;

    switch (ckpt_value_kind(v)) {
    case CKPT_KIND_INT:
        s = ckpt_value_int_decimal(v);
        fputs(s ? s : "?", out);
        break;
    case CKPT_KIND_FLOAT:
        ckpt_value_float(v, &d);
        fputs(isnan(d) ? "nan" : isinf(d) ? (d > 0 ? "inf" : "-inf") : cli_fmt_double(buf, d), out);
        break;
    case CKPT_KIND_STR:
        s = ckpt_value_str(v, &len);
        cut = len < SHOW_MAX ? len : SHOW_MAX;
        while (cut < len && cut > 0 && (s[cut] & 0xc0) == 0x80)
            cut--; /* not inside a UTF-8 sequence */
        fputc('"', out);
        cli_put_text(out, s, cut);
        fputc('"', out);
        if (len > SHOW_MAX) fprintf(out, "... (%zu bytes)", len);
        break;
    case CKPT_KIND_BYTES:
        s = ckpt_value_str(v, &len);
        fputs("bytes ", out);
        for (i = 0; i < len && i < SHOW_MAX / 2; i++)
            fprintf(out, "%02x", (unsigned)(unsigned char)s[i]);
        fprintf(out, "%s (%zu bytes)", len > SHOW_MAX / 2 ? "..." : "", len);
        break;
    case CKPT_KIND_BOOL:
        ckpt_value_bool(v, &b);
        fputs(b ? "true" : "false", out);
        break;
    case CKPT_KIND_NONE: fputs("none", out); break;
    case CKPT_KIND_OBJECT:
        s = ckpt_value_object_name(v);
        fputs("<object ", out);
        cli_put_text(out, s ? s : "?", s ? strlen(s) : 1);
        fputc('>', out);
        break;
    default: fprintf(out, "<%s>", ckpt_kind_name(ckpt_value_kind(v))); break;
    }
}

const char *cli_color(const char *sgr) {
    static int enabled = -1;

    if (enabled < 0) enabled = isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
    return enabled ? sgr : "";
}

/* ------------------------------------------------------------ progress */

static int progress_shown; /* a line is on screen and must be cleared */

static int progress_enabled(void) {
    static int enabled = -1;

    if (enabled < 0) enabled = isatty(STDERR_FILENO);
    return enabled;
}

/* Replaces the progress line by "COUNTER WHAT". */
static void progress_line(const char *counter, const char *what) {
    fprintf(stderr, "\r\033[K%s ", counter);
    cli_text_width(what, strlen(what)) > 60 ? (void)fputs("...", stderr)
                                            : (void)cli_put_text(stderr, what, strlen(what));
    fflush(stderr);
    progress_shown = 1;
}

void cli_progress(const char *what, size_t done, size_t total) {
    char counter[64];

    if (!progress_enabled()) return;
    if (what == NULL) {
        if (progress_shown) fputs("\r\033[K", stderr);
        progress_shown = 0;
        return;
    }
    if (total < 2) return;
    snprintf(counter, sizeof counter, "[%zu/%zu]", done + 1, total);
    progress_line(counter, what);
}

void cli_progress_fn(void *ctx, uint64_t done, uint64_t total) {
    const cli_task *t = ctx;
    char counter[64];

    /* the work in progress is item done + 1; the last call ends it */
    if (!progress_enabled() || done >= total || total < 2) return;
    if (t->bytes)
        snprintf(counter, sizeof counter, "[%" PRIu64 "%%]",
                 total > UINT64_MAX / 100 ? done / (total / 100) : done * 100 / total);
    else
        snprintf(counter, sizeof counter, "[%" PRIu64 "/%" PRIu64 "]", done + 1, total);
    progress_line(counter, t->what);
}

/* ------------------------------------------------------------ key order */

size_t *cli_natural_order(const char *(*name)(const void *ctx, size_t i), const void *ctx,
                          size_t n) {
    size_t *order = n && n <= SIZE_MAX / sizeof *order ? malloc(n * sizeof *order) : NULL;
    const char **names = order ? malloc(n * sizeof *names) : NULL;
    size_t i;

    for (i = 0; names && i < n; i++) names[i] = name(ctx, i);
    if (names == NULL || ckpt_natural_order(order, names, n) != 0) {
        free(order);
        order = NULL;
    }
    free(names);
    return order;
}
