/* opt.c - the option parser and the usage text, both read off a command's
 * cli_opt table (see opt.h). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Columns the synopsis is wrapped at. */
#define WRAP 80

static int is_option(const cli_opt *o) {
    return o->type == CLI_OPT_BOOL || o->type == CLI_OPT_VALUE || o->type == CLI_OPT_VALUES;
}

static const cli_opt *find_long(const cli_opt *opts, const char *name, size_t len) {
    for (; opts->type != CLI_OPT_END; opts++)
        if (is_option(opts) && strlen(opts->name) == len && memcmp(opts->name, name, len) == 0)
            return opts;
    return NULL;
}

static const cli_opt *find_alias(const cli_opt *opts, char alias) {
    for (; opts->type != CLI_OPT_END; opts++)
        if (is_option(opts) && opts->alias && opts->alias == alias) return opts;
    return NULL;
}

/* Appends to a list that has room for every argument (cap entries). */
static int list_add(cli_list *l, size_t cap, const cli_opt *o, const char *v) {
    if (l->items == NULL) l->items = malloc(cap * sizeof *l->items);
    if (l->opts == NULL) l->opts = malloc(cap * sizeof *l->opts);
    if (l->items == NULL || l->opts == NULL) return -1;
    l->items[l->n] = v;
    l->opts[l->n++] = o;
    return 0;
}

/* Stores one option's value; CLI_CONTINUE or a usage error. */
static int take(const cli_command *cmd, const cli_opt *o, const char *v, size_t cap) {
    const char **slot = o->value;

    switch (o->type) {
    case CLI_OPT_BOOL: *(int *)o->value = 1; return CLI_CONTINUE;
    case CLI_OPT_VALUE:
        if (*slot != NULL) return cli_usage_error(cmd, "--%s given twice", o->name);
        *slot = v;
        return CLI_CONTINUE;
    default:
        if (list_add(o->value, cap, o, v) != 0) return cli_usage_error(cmd, "out of memory");
        return CLI_CONTINUE;
    }
}

/* "--name", "--name=V", or "--name V" (consuming argv[*i + 1]). */
static int long_option(const cli_command *cmd, int argc, char **argv, int *i) {
    const char *arg = argv[*i], *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const cli_opt *o = find_long(cmd->opts, name, len);

    if (o == NULL) return cli_usage_error(cmd, "unknown option '%s'", arg);
    if (o->type == CLI_OPT_BOOL) {
        if (eq) return cli_usage_error(cmd, "--%s takes no value", o->name);
        return take(cmd, o, NULL, (size_t)argc);
    }
    if (eq) return take(cmd, o, eq + 1, (size_t)argc);
    if (*i + 1 >= argc) return cli_usage_error(cmd, "--%s needs a value", o->name);
    return take(cmd, o, argv[++*i], (size_t)argc);
}

/* "-x", "-xV" or "-x V". */
static int short_option(const cli_command *cmd, int argc, char **argv, int *i) {
    const char *arg = argv[*i];
    const cli_opt *o = find_alias(cmd->opts, arg[1]);

    if (o == NULL || (o->type == CLI_OPT_BOOL && arg[2] != '\0'))
        return cli_usage_error(cmd, "unknown option '%s'", arg);
    if (o->type == CLI_OPT_BOOL) return take(cmd, o, NULL, (size_t)argc);
    if (arg[2] != '\0') return take(cmd, o, arg + 2, (size_t)argc);
    if (*i + 1 >= argc) return cli_usage_error(cmd, "-%c needs a value", arg[1]);
    return take(cmd, o, argv[++*i], (size_t)argc);
}

/* An operand goes to the first ARG not yet filled, else to the ARGS. */
static int operand(const cli_command *cmd, const char *arg, size_t cap) {
    const cli_opt *o;

    for (o = cmd->opts; o->type != CLI_OPT_END; o++) {
        if (o->type == CLI_OPT_ARG && *(const char **)o->value == NULL) {
            *(const char **)o->value = arg;
            return CLI_CONTINUE;
        }
        if (o->type == CLI_OPT_ARGS) return take(cmd, o, arg, cap);
    }
    return cli_usage_error(cmd, "unexpected argument '%s'", arg);
}

static int check_required(const cli_command *cmd) {
    const cli_opt *o;

    for (o = cmd->opts; o->type != CLI_OPT_END; o++) {
        if (!(o->flags & CLI_OPT_REQUIRED)) continue;
        if ((o->type == CLI_OPT_ARG && *(const char **)o->value == NULL) ||
            (o->type == CLI_OPT_ARGS && ((cli_list *)o->value)->n == 0))
            return cli_usage_error(cmd, "missing %s", o->name);
        if (o->type == CLI_OPT_VALUE && *(const char **)o->value == NULL)
            return cli_usage_error(cmd, "missing --%s %s", o->name, o->value_name);
    }
    return CLI_CONTINUE;
}

int cli_opt_parse(const cli_command *cmd, int argc, char **argv) {
    int i, options = 1, rc = CLI_CONTINUE;

    for (i = 1; i < argc && rc == CLI_CONTINUE; i++) {
        const char *arg = argv[i];

        if (!options || arg[0] != '-' || arg[1] == '\0') {
            rc = operand(cmd, arg, (size_t)argc);
        } else if (strcmp(arg, "--") == 0) {
            options = 0;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            cli_opt_usage(stdout, cmd, 1);
            return CLI_OK;
        } else if (arg[1] == '-') {
            rc = long_option(cmd, argc, argv, &i);
        } else {
            rc = short_option(cmd, argc, argv, &i);
        }
    }
    return rc == CLI_CONTINUE ? check_required(cmd) : rc;
}

void cli_opt_free(const cli_command *cmd) {
    const cli_opt *o;
    size_t s;

    if (cmd == NULL) return;
    for (s = 0; cmd->subs && cmd->subs[s]; s++) cli_opt_free(cmd->subs[s]);
    for (o = cmd->opts; o && o->type != CLI_OPT_END; o++) {
        cli_list *l = o->value;

        if (o->type != CLI_OPT_VALUES && o->type != CLI_OPT_ARGS) continue;
        free(l->items);
        free(l->opts);
        memset(l, 0, sizeof *l);
    }
}

/* ------------------------------------------------------------ usage */

/* One synopsis element: "FILE", "[OUT]", "[--json]", "--expect SPEC",
 * "[--allow GLOB]...", "FILE...". */
static void element(char *buf, size_t cap, const cli_opt *o) {
    int req = (o->flags & CLI_OPT_REQUIRED) != 0;
    char flag[64];

    if (o->alias)
        snprintf(flag, sizeof flag, "-%c|--%s", o->alias, o->name);
    else
        snprintf(flag, sizeof flag, "--%s", o->name);
    switch (o->type) {
    case CLI_OPT_BOOL: snprintf(buf, cap, "[%s]", flag); break;
    case CLI_OPT_VALUE: snprintf(buf, cap, req ? "%s %s" : "[%s %s]", flag, o->value_name); break;
    case CLI_OPT_VALUES: snprintf(buf, cap, "[%s %s]...", flag, o->value_name); break;
    case CLI_OPT_ARG: snprintf(buf, cap, req ? "%s" : "[%s]", o->name); break;
    default: snprintf(buf, cap, req ? "%s..." : "[%s...]", o->name); break;
    }
}

/* "usage: ckpt NAME ELEMENTS", wrapped under the first element. */
static void synopsis(FILE *out, const cli_command *cmd, const char *lead) {
    const cli_opt *o;
    size_t indent = strlen(lead) + strlen("ckpt ") + strlen(cmd->name);
    size_t col = indent;
    char buf[128];

    fprintf(out, "%sckpt %s", lead, cmd->name);
    for (o = cmd->opts; o->type != CLI_OPT_END; o++) {
        size_t len;

        element(buf, sizeof buf, o);
        len = strlen(buf);
        if (col > indent && col + 1 + len > WRAP) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = indent;
        }
        fprintf(out, " %s", buf);
        col += 1 + len;
    }
    fputc('\n', out);
}

/* "--name VALUE" as listed, into buf. */
static size_t label(char *buf, size_t cap, const cli_opt *o) {
    int n;

    if (!is_option(o))
        n = snprintf(buf, cap, "%s", o->name);
    else if (o->alias)
        n = snprintf(buf, cap, "-%c, --%s%s%s", o->alias, o->name, o->value_name ? " " : "",
                     o->value_name ? o->value_name : "");
    else
        n = snprintf(buf, cap, "--%s%s%s", o->name, o->value_name ? " " : "",
                     o->value_name ? o->value_name : "");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* The options listed under the synopsis: those with help, in table order,
 * each name once (subcommands share --keep and the like). */
#define ROWS_MAX 32

static size_t rows(const cli_command *cmd, const cli_opt **row) {
    size_t s, n = 0, k;
    const cli_opt *o;

    for (s = 0; s == 0 || (cmd->subs && cmd->subs[s]); s++) {
        o = cmd->subs ? cmd->subs[s]->opts : cmd->opts;
        for (; o->type != CLI_OPT_END && n < ROWS_MAX; o++) {
            for (k = 0; k < n && strcmp(row[k]->name, o->name) != 0; k++)
                ;
            if (o->help && k == n) row[n++] = o;
        }
    }
    return n;
}

/* "  --name VALUE   help", the help wrapped at WRAP columns under
 * itself. */
static void print_row(FILE *out, const cli_opt *o, size_t width) {
    size_t room = WRAP - 2 - width, used = 0;
    const char *h = o->help;
    char buf[128];

    label(buf, sizeof buf, o);
    fprintf(out, "  %-*s", (int)width, buf);
    while (*h) {
        size_t len = strcspn(h, " ");

        if (used > 0 && used + 1 + len > room) {
            fprintf(out, "\n  %*s", (int)width, "");
            used = 0;
        } else if (used > 0) {
            fputc(' ', out);
            used++;
        }
        fprintf(out, "%.*s", (int)len, h);
        used += len;
        h += len;
        while (*h == ' ') h++;
    }
    fputc('\n', out);
}

void cli_opt_usage(FILE *out, const cli_command *cmd, int full) {
    const cli_opt *row[ROWS_MAX];
    size_t s, n = rows(cmd, row), width = 0;
    char buf[128];

    if (cmd->subs) {
        for (s = 0; cmd->subs[s]; s++) synopsis(out, cmd->subs[s], s ? "       " : "usage: ");
    } else {
        synopsis(out, cmd, "usage: ");
    }
    if (full && cmd->description) fprintf(out, "\n%s", cmd->description);
    for (s = 0; s < n; s++)
        if (label(buf, sizeof buf, row[s]) > width) width = label(buf, sizeof buf, row[s]);
    if (n) fputc('\n', out);
    for (s = 0; s < n; s++) print_row(out, row[s], width + 2);
    if (full && cmd->epilogue) fprintf(out, "\n%s", cmd->epilogue);
}
