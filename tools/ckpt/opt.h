/* opt.h - declarative command-line options (after libgit2's src/cli/opt.h).
 *
 * A command lists its options and operands in one table,
 *
 *     static struct { int json; const char *path; } args;
 *     static const cli_opt opts[] = {
 *         { CLI_OPT_ARG, "FILE", 0, &args.path, NULL, CLI_OPT_REQUIRED, NULL },
 *         { CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
 *           "one JSON object on stdout" },
 *         { 0 } };
 *
 * and the parser, `ckpt help CMD` and every usage error are generated from
 * it, so help cannot drift from what is parsed. The grammar is GNU's:
 * options and operands mix in any order; "--name V" and "--name=V" give a
 * value; "-x" is an option's one-letter alias ("-xV" or "-x V" with a
 * value); "--" ends the options; "-" alone is an operand; -h and --help
 * print the help. An unknown option, a missing or surplus operand, a value
 * option given twice or without its value is a usage error (exit 2) that
 * names it. */
#ifndef CKPT_CLI_OPT_H
#define CKPT_CLI_OPT_H

#include <stddef.h>
#include <stdio.h>

typedef enum cli_opt_type {
    CLI_OPT_END = 0, /* ends a table */
    CLI_OPT_BOOL,    /* --name: *(int *)value = 1 */
    CLI_OPT_VALUE,   /* --name V: *(const char **)value = V */
    CLI_OPT_VALUES,  /* --name V, repeatable: appended to *(cli_list *)value */
    CLI_OPT_ARG,     /* the next operand: *(const char **)value */
    CLI_OPT_ARGS     /* every operand after the ARGs: *(cli_list *)value */
} cli_opt_type;

enum {
    /* ARG, ARGS: a usage error when absent ("missing FILE"); VALUE: the
     * option must be given. Shown without brackets in the synopsis. */
    CLI_OPT_REQUIRED = 1
};

typedef struct cli_opt {
    cli_opt_type type;
    const char *name;       /* "json" for --json; ARG, ARGS: "FILE" */
    char alias;             /* 'j' for -j, or 0 */
    void *value;            /* where the parser stores what it finds */
    const char *value_name; /* VALUE, VALUES: "SPEC" in --expect SPEC */
    unsigned flags;         /* CLI_OPT_* */
    const char *help;       /* one sentence for the option list (wrapped
                               there), or NULL to show only in the synopsis */
} cli_opt;

/* What VALUES and ARGS collect, in command-line order. Several VALUES
 * options may share one list (rules applied in the order given): opts[i]
 * tells which one gave items[i]. Freed by cli_opt_free. */
typedef struct cli_list {
    const char **items;
    const struct cli_opt **opts;
    size_t n;
} cli_list;

struct cli_command;

/* Parses argv[1..argc) (argv[0] is the command's name) into the values of
 * cmd->opts. Returns CLI_CONTINUE when the command should run; otherwise
 * the exit code to return: CLI_OK after printing the help (-h, --help),
 * CLI_USAGE after a usage error (cli_usage_error). Values point into argv. */
int cli_opt_parse(const struct cli_command *cmd, int argc, char **argv);
/* Frees the lists cmd->opts (and its subcommands') filled; NULL-safe.
 * main() calls it when the command returns. */
void cli_opt_free(const struct cli_command *cmd);
/* "usage: ckpt NAME SYNOPSIS" (one line per subcommand), then the option
 * list; with full also the description and the epilogue. */
void cli_opt_usage(FILE *out, const struct cli_command *cmd, int full);

#endif
