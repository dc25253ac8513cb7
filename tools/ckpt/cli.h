/* cli.h - declarations shared by the `ckpt` command-line tool.
 *
 * main.c holds the command table and the plumbing every command uses
 * (error reporting, exit codes, terminal-safe text, colour); json.c the JSON
 * writer; cmd_<name>.c one subcommand each. The tool uses only ckpt.h. */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "opt.h"

/* Exit codes, the contract other tools rely on. */
enum {
    CLI_OK = 0,       /* everything fine */
    CLI_FINDINGS = 1, /* corrupt, unsafe or mismatching input */
    CLI_USAGE = 2,    /* bad command line, or the input could not be read */
    CLI_CONTINUE = -1 /* not an exit code: cli_opt_parse says "go on" */
};

/* ------------------------------------------------------------ commands */

/* One subcommand, defined in its cmd_<name>.c; `ckpt help NAME` is
 * generated from it: the synopsis and the option list from opts (opt.h),
 * around them the description and the epilogue. */
typedef struct cli_command cli_command;
struct cli_command {
    const char *name;        /* "inspect"; a subcommand's "store commit" */
    const char *summary;     /* one line for `ckpt --help` */
    const cli_opt *opts;     /* options and operands, ended by { 0 } */
    const char *description; /* what it does, after the synopsis, or NULL */
    const char *epilogue;    /* after the options (exit status), or NULL */
    /* argv[0] is the command name; argv[1..argc-1] its arguments. Returns
     * an exit code (CLI_*). */
    int (*run)(const cli_command *cmd, int argc, char **argv);
    const cli_command *const *subs; /* subcommands, NULL-terminated, whose
                                       synopses and options the help lists
                                       instead of opts; or NULL */
};

extern const cli_command cli_cmd_inspect, cli_cmd_verify, cli_cmd_doctor, cli_cmd_scan,
    cli_cmd_store, cli_cmd_match, cli_cmd_diff, cli_cmd_rename, cli_cmd_convert;

/* `ckpt help --man`: the man page (roff) of every command, from the same
 * option tables as `ckpt help COMMAND`. */
void cli_doc_man(FILE *out, const cli_command *const *cmds, size_t n);
/* `ckpt help --completion SHELL`: a bash or zsh completion script from the
 * option tables; -1 for another shell. */
int cli_doc_completion(FILE *out, const char *shell, const cli_command *const *cmds, size_t n);

/* Prints `ckpt NAME: <message>` and the command's synopsis and options to
 * stderr; returns CLI_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ------------------------------------------------------------ errors */

/* A copy of ckpt_error_last(): the library's record only lives until the
 * next failing call, commands often need it longer. */
typedef struct cli_error {
    int code;
    char message[512];
    char file[1024]; /* the file the library blamed (a shard, say) */
    char member[1024];
    uint64_t offset; /* UINT64_MAX when unknown */
} cli_error;

/* Fills *e from ckpt_error_last(), with `code` (the value the failing call
 * returned) taking precedence over the record's code. */
void cli_error_capture(cli_error *e, int code);
/* Fills *e from a record the library kept (src may be NULL: no error). */
void cli_error_copy(cli_error *e, const ckpt_error *src);
/* Exit code for a library failure: CLI_USAGE for I/O, caller errors,
 * out-of-memory and limits, CLI_FINDINGS for everything that is the
 * input's fault. */
int cli_exit_code(int code);
/* Writes ` (member M, offset N)`, `(M, offset N)` with bare=1, or nothing
 * when neither is known. */
void cli_put_location(FILE *out, const cli_error *e, int bare);
/* Writes `FILE: `, and `BLAMED: ` too when the library blamed another file
 * than the one named on the command line (a shard of an index). */
void cli_put_files(FILE *out, const char *file, const cli_error *e);
/* e's message; for CKPT_E_LIMIT "limit exceeded: MESSAGE; ..." naming the
 * ckpt_limits field that raises it. */
void cli_put_message(FILE *out, const cli_error *e);
/* `; weights of variant "V" only: from_pretrained(DIR, variant="V") reads
 * them` when f is a model folder's weights under a variant's names
 * (ckpt_file_variant), else nothing. */
void cli_put_variant(FILE *out, const ckpt_file *f);
/* `; snapshot REV of the Hugging Face cache repository, which refs/main
 * names` when f was read through one (ckpt_file_snapshot), else nothing. */
void cli_put_snapshot(FILE *out, const ckpt_file *f);
/* `ckpt: FILE: MESSAGE (member M, offset N)` on stderr; returns
 * cli_exit_code(e->code). */
int cli_report(const char *file, const cli_error *e);

/* ------------------------------------------------------------ targets */

/* One checkpoint an argument stands for: path; component, the name of the
 * pipeline component it is (NULL: the argument itself), pipeline and
 * index the pipeline and its place there (ckpt_doctor_pipeline);
 * unloadable, for a component whose folder holds weights but no
 * config.json, the finding (ckpt_pipeline_check), else NULL. */
typedef struct cli_target {
    const char *path, *component;
    const cli_error *unloadable;
    const ckpt_pipeline *pipeline;
    size_t index;
} cli_target;
/* What verify, inspect and doctor check for one argument: each model
 * component of a diffusers pipeline directory (ckpt_pipeline_open: unet,
 * text_encoder, vae, in name order; an unloadable one reported on stderr
 * first, a finding), else the argument itself. fn returns a CLI_* code;
 * cli_each_target returns the worst (CLI_USAGE over CLI_FINDINGS),
 * CLI_USAGE after saying why when the pipeline's model_index.json cannot be
 * read or names no model component. */
typedef int (*cli_target_fn)(const cli_target *t, void *ctx);
int cli_each_target(const char *arg, cli_target_fn fn, void *ctx);
/* Whether some argument stands for several checkpoints (several
 * arguments, or a pipeline): --json writes an array then. */
int cli_several_targets(const char *const *args, size_t n);

/* ------------------------------------------------------------ text */

/* Length (1-4) of the well-formed UTF-8 sequence at p (n bytes left), or
 * 0 if the bytes there are not one (overlong, surrogate, > U+10FFFF, cut). */
size_t cli_utf8_len(const unsigned char *p, size_t n);
/* Untrusted text for a terminal: valid printable UTF-8 passes, control
 * characters and invalid bytes become \xNN. Returns the columns written,
 * counting one per code point. */
size_t cli_put_text(FILE *out, const char *s, size_t len);
/* s as one POSIX shell word (ckpt_shell_quote: quoted when it holds
 * anything outside [A-Za-z0-9_./-]) through cli_put_text: a path in a
 * printed command that pastes as it reads. */
void cli_put_shell(FILE *out, const char *s);
/* What cli_put_text writes of s, into dst (cap >= 4 bytes): as much of it
 * as fits whole, *used the bytes of s taken (all but when dst is full),
 * *cols the columns they take. Returns the bytes written. */
size_t cli_text_escape(char *dst, size_t cap, const char *s, size_t len, size_t *used,
                       size_t *cols);
/* Columns cli_put_text would use for s. */
size_t cli_text_width(const char *s, size_t len);
/* A flattened tensor or value name for people: "" (a bare top-level
 * object) reads "(root)". */
const char *cli_name(const char *name);
/* The order of names in every human listing: natural, digit runs
 * compared as numbers ("layers.2" before "layers.10"), else bytes. JSON
 * keeps the order its format specifies. The n items' indices in that
 * order of name(ctx, i): a malloc'd array to free, or NULL (n == 0 or out
 * of memory: list in file order). */
size_t *cli_natural_order(const char *(*name)(const void *ctx, size_t i), const void *ctx,
                          size_t n);
/* "" for 1, "s" otherwise. */
const char *cli_plural(uint64_t n);
/* "1.5 KiB"-style rendering of a byte count into buf. */
const char *cli_human_bytes(char buf[32], uint64_t bytes);
/* x in decimal, written at the end of buf; returns where it starts. */
#define CLI_U64_CAP 21
const char *cli_u64(char buf[CLI_U64_CAP], uint64_t x);
/* "[32, 11616]" into buf (cap bytes, truncated with "..."). */
const char *cli_shape(char *buf, size_t cap, const ckpt_tensor *t);
/* The same for ndim dimensions given as an array. */
const char *cli_dims(char *buf, size_t cap, unsigned ndim, const uint64_t *shape);
/* strlen of what cli_dims writes, without writing it. */
size_t cli_dims_len(size_t cap, unsigned ndim, const uint64_t *shape);
/* cli_name(name) through cli_put_text. */
void cli_put_name(FILE *out, const char *name);
/* A leaf value for people: 42, 0.123, "text", true, none, bytes 0a1b...
 * (N bytes), <object mod.qualname>; long strings and bytes are cut. */
void cli_put_value(FILE *out, const ckpt_value *v);
/* sgr (one of the CLI_* sequences below) when stdout is a terminal and
 * NO_COLOR is unset, else "". Never used for JSON. */
const char *cli_color(const char *sgr);
/* Progress for long work on stderr, only when stderr is a terminal (never
 * in a pipe or a file) and there is more than one item: "[done+1/total]
 * WHAT" on one line that the next call overwrites; what == NULL clears it
 * when the work is over. */
void cli_progress(const char *what, size_t done, size_t total);
/* The library's long work (ckpt_progress_fn) on the same line, under the
 * same rule: ctx is a cli_task; tensors show "[3/27] WHAT", bytes
 * "[37%] WHAT". cli_progress(NULL, 0, 0) clears it. */
typedef struct cli_task {
    const char *what;
    int bytes; /* units are bytes, not tensors */
} cli_task;
void cli_progress_fn(void *ctx, uint64_t done, uint64_t total);
#define CLI_BOLD "\033[1m"
#define CLI_RED "\033[31m"
#define CLI_GREEN "\033[32m"
#define CLI_YELLOW "\033[33m"
#define CLI_RESET "\033[0m"

/* ------------------------------------------------------------ JSON */

/* A streaming JSON writer that places commas and colons itself. Output is
 * compact (no spaces). Nesting is bounded by CLI_JSON_MAX_DEPTH, far above what
 * the commands write. What is written inside a value of a top-level value
 * (depth 2 and deeper: a tensor's entry in inspect's list) is gathered in
 * buf and reaches out in one fwrite when buf fills or the writer is back
 * at depth 1 or 0, where every call ends with out holding all it wrote: a
 * command writes to out itself, or returns, only there. */
#define CLI_JSON_MAX_DEPTH 32
typedef struct cli_json_writer {
    FILE *out;
    int depth;
    unsigned char need_comma[CLI_JSON_MAX_DEPTH + 1];
    int after_key; /* the next value follows a key: no comma */
    size_t n;      /* bytes in buf */
    char buf[1 << 14];
} cli_json_writer;

void cli_json_init(cli_json_writer *j, FILE *out);
void cli_json_object_begin(cli_json_writer *j);
void cli_json_object_end(cli_json_writer *j);
void cli_json_array_begin(cli_json_writer *j);
void cli_json_array_end(cli_json_writer *j);
/* A key inside an object; the next call writes its value. */
void cli_json_key(cli_json_writer *j, const char *key);
void cli_json_string(cli_json_writer *j, const char *s);
void cli_json_string_len(cli_json_writer *j, const char *s, size_t len);
void cli_json_uint(cli_json_writer *j, uint64_t v);
/* An integer given as decimal text (any size) as a JSON number; text that
 * is not a plain decimal integer is written as a string instead. */
void cli_json_int_text(cli_json_writer *j, const char *decimal);
/* Shortest round-trip form; integral values keep a ".0"; NaN and the
 * infinities as the strings "nan", "inf", "-inf". */
void cli_json_double(cli_json_writer *j, double v);
void cli_json_bool(cli_json_writer *j, int v);
void cli_json_null(cli_json_writer *j);
/* [d0, d1, ...]: a shape as a JSON array. */
void cli_json_dims(cli_json_writer *j, unsigned ndim, const uint64_t *dims);
/* Lowercase hex of len bytes, as a string. */
void cli_json_hex(cli_json_writer *j, const unsigned char *p, size_t len);
/* {"code", "message", "file", "member", "offset"}: e as verify and scan
 * write it; file is the one e blames (a shard, a member's archive), else
 * path; member and offset are null when unknown. */
void cli_json_error(cli_json_writer *j, const cli_error *e, const char *path);
/* --json of a pipeline's component: the key "pipeline" and {"component",
 * "error": null | the cli_json_error object of the finding}; nothing for
 * an argument that is not a component. */
void cli_json_pipeline(cli_json_writer *j, const cli_target *t);

/* Shortest text for a finite double that strtod reads back to the same
 * bits, with ".0" added when it would read as an integer. */
const char *cli_fmt_double(char buf[40], double v);

/* The JSON value of a leaf of the object tree: ints exact (any size),
 * floats as cli_json_double, str, bool, null for none, bytes as lowercase hex,
 * an opaque object as its "module.qualname"; null for anything else. Its
 * type is ckpt_kind_name(ckpt_value_kind(v)). */
void cli_json_leaf(cli_json_writer *j, const ckpt_value *v);

#endif
