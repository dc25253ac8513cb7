/* cmd_scan.c - `ckpt scan [--json] [--allow NAME]... [--policy FILE]
 * FILE...`: would loading each FILE run code? Nothing in it is executed.
 *
 * Human form, per file: one line per finding (severity, kind, global,
 * member and byte offset, message), then the verdict line
 *   SAFE|UNSAFE|UNSCANNABLE|NOT-A-CHECKPOINT FILE (N dangerous, ...)
 * JSON: one object per file {"file", "verdict", "findings", "globals"};
 * an array of them for several files. A file that cannot be read at all
 * gives {"file", "error"} and exit status 2.
 * An --allow naming a known dangerous family is ignored by the scan, which
 * says so in an info finding; stderr says it once too.
 * Exit 0 when every file is safe, 1 when one is not, 2 for usage or I/O
 * errors (which win over 1). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The caller's allowlist: --allow values (borrowed from argv) and names
 * read from --policy files (owned). */
typedef struct allowlist {
    const char **names;
    size_t n, cap;
    char **owned;
    size_t nowned, ownedcap;
} allowlist;

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    void *p;
    size_t ncap;

    if (need <= *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    if (ncap < need || ncap > SIZE_MAX / elem)
        return -1;
    p = realloc(*arr, ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static int allow_add(allowlist *a, const char *name)
{
    if (grow((void **)&a->names, &a->cap, a->n + 1, sizeof *a->names))
        return -1;
    a->names[a->n++] = name;
    return 0;
}

static void allow_free(allowlist *a)
{
    size_t i;

    for (i = 0; i < a->nowned; i++)
        free(a->owned[i]);
    free(a->owned);
    free(a->names);
}

/* "module.qualname": no spaces or control bytes, a '.' with text on both
 * sides. */
static int valid_qualname(const char *s)
{
    size_t i, n = strlen(s);

    if (n < 3 || s[0] == '.' || s[n - 1] == '.' || !strchr(s, '.'))
        return 0;
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
            return 0;
    return 1;
}

static void bad_policy_line(const cli_command *cmd, const char *path, size_t lineno)
{
    fprintf(stderr, "ckpt %s: ", cmd->name);
    cli_put_text(stderr, path, strlen(path));
    fprintf(stderr, ":%zu: expected one module.qualname per line\n", lineno);
}

/* Reads a policy file: one module.qualname per line, '#' starts a
 * comment, blank lines are skipped. Returns CLI_OK or CLI_USAGE (with the
 * message printed). */
static int read_policy(const cli_command *cmd, allowlist *a, const char *path)
{
    FILE *fp = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = CLI_OK;

    if (!fp) {
        fprintf(stderr, "ckpt %s: cannot open policy file ", cmd->name);
        cli_put_text(stderr, path, strlen(path));
        fprintf(stderr, ": %s\n", strerror(errno));
        return CLI_USAGE;
    }
    while ((len = getline(&line, &cap, fp)) >= 0) {
        char *s = line, *end, *hash, *copy;

        lineno++;
        if (memchr(line, '\0', (size_t)len)) {
            bad_policy_line(cmd, path, lineno);
            rc = CLI_USAGE;
            break;
        }
        if ((hash = strchr(line, '#')) != NULL)
            *hash = '\0';
        while (*s && isspace((unsigned char)*s))
            s++;
        end = s + strlen(s);
        while (end > s && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (*s == '\0')
            continue;
        if (!valid_qualname(s)) {
            bad_policy_line(cmd, path, lineno);
            rc = CLI_USAGE;
            break;
        }
        copy = strdup(s);
        if (!copy ||
            grow((void **)&a->owned, &a->ownedcap, a->nowned + 1, sizeof *a->owned) ||
            allow_add(a, copy)) {
            free(copy);
            fprintf(stderr, "ckpt %s: out of memory\n", cmd->name);
            rc = CLI_USAGE;
            break;
        }
        a->owned[a->nowned++] = copy;
    }
    if (rc == CLI_OK && ferror(fp)) {
        fprintf(stderr, "ckpt %s: cannot read policy file ", cmd->name);
        cli_put_text(stderr, path, strlen(path));
        fputc('\n', stderr);
        rc = CLI_USAGE;
    }
    free(line);
    fclose(fp);
    return rc;
}

/* ------------------------------------------------------------ output */

static const char *verdict_color(ckpt_verdict v)
{
    return cli_color(v == CKPT_VERDICT_SAFE ? CLI_GREEN : CLI_RED);
}

static const char *severity_color(ckpt_severity s)
{
    if (s == CKPT_SEVERITY_DANGEROUS)
        return cli_color(CLI_RED);
    return s == CKPT_SEVERITY_SUSPICIOUS ? cli_color(CLI_YELLOW) : "";
}

static void print_human(const char *path, const ckpt_scan_report *r)
{
    size_t i, n = ckpt_scan_finding_count(r), count[3] = {0, 0, 0};
    ckpt_verdict v = ckpt_scan_verdict(r);
    const char *name;

    for (i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);
        const char *color = severity_color(f->severity);

        count[f->severity]++;
        printf("  %s%-10s%s %s", color, ckpt_severity_name(f->severity),
               color[0] ? cli_color(CLI_RESET) : "", f->kind);
        if (f->global) {
            fputc(' ', stdout);
            cli_put_text(stdout, f->global, strlen(f->global));
        }
        fputs(" (", stdout);
        if (f->member[0]) {
            fputs("member ", stdout);
            cli_put_text(stdout, f->member, strlen(f->member));
            fputs(", ", stdout);
        }
        if (f->offset == UINT64_MAX)
            fputs("offset unknown", stdout);
        else
            printf("offset %" PRIu64, f->offset);
        fputs("): ", stdout);
        cli_put_text(stdout, f->message, strlen(f->message));
        fputc('\n', stdout);
    }
    name = ckpt_verdict_name(v);
    fputs(verdict_color(v), stdout);
    for (i = 0; name[i]; i++)
        fputc(toupper((unsigned char)name[i]), stdout);
    printf("%s ", cli_color(CLI_RESET));
    cli_put_text(stdout, path, strlen(path));
    printf(" (%zu dangerous, %zu suspicious, %zu info)\n",
           count[CKPT_SEVERITY_DANGEROUS], count[CKPT_SEVERITY_SUSPICIOUS],
           count[CKPT_SEVERITY_INFO]);
}

static void print_json(cli_json_writer *j, const char *path, const ckpt_scan_report *r)
{
    size_t i, n = ckpt_scan_finding_count(r);

    cli_json_object_begin(j);
    cli_json_key(j, "file");
    cli_json_string(j, path);
    cli_json_key(j, "verdict");
    cli_json_string(j, ckpt_verdict_name(ckpt_scan_verdict(r)));
    cli_json_key(j, "findings");
    cli_json_array_begin(j);
    for (i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        cli_json_object_begin(j);
        cli_json_key(j, "severity");
        cli_json_string(j, ckpt_severity_name(f->severity));
        cli_json_key(j, "kind");
        cli_json_string(j, f->kind);
        if (f->global) {
            cli_json_key(j, "global");
            cli_json_string(j, f->global);
        }
        if (f->member[0]) {
            cli_json_key(j, "member");
            cli_json_string(j, f->member);
        }
        cli_json_key(j, "offset");
        if (f->offset == UINT64_MAX)
            cli_json_null(j);
        else
            cli_json_uint(j, f->offset);
        cli_json_key(j, "message");
        cli_json_string(j, f->message);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
    cli_json_key(j, "globals");
    cli_json_array_begin(j);
    for (i = 0; i < ckpt_scan_global_count(r); i++)
        cli_json_string(j, ckpt_scan_global(r, i));
    cli_json_array_end(j);
    cli_json_object_end(j);
}

/* An --allow of a dangerous family is ignored by every scan, which says
 * so in a finding; stderr says it once per run, so that it is not missed
 * behind a SAFE or UNSAFE line. */
static void warn_refused_allows(const ckpt_scan_report *r, int *warned)
{
    size_t i, n = ckpt_scan_finding_count(r);

    for (i = 0; i < n && !*warned; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (strcmp(f->kind, "allow-ignored") != 0)
            continue;
        fputs("ckpt scan: ", stderr);
        cli_put_text(stderr, f->message, strlen(f->message));
        fputc('\n', stderr);
    }
    *warned = 1;
}

/* Scans one file and prints its result; returns its exit code. */
static int scan_one(const char *path, const ckpt_scan_options *opts, cli_json_writer *j,
                    int *warned)
{
    ckpt_scan_report *r = NULL;
    int rc = ckpt_scan(&r, path, opts);
    cli_error e;

    if (rc != 0) {
        cli_error_capture(&e, rc);
        if (j) {
            cli_json_object_begin(j);
            cli_json_key(j, "file");
            cli_json_string(j, path);
            cli_json_key(j, "error");
            cli_json_string(j, e.message);
            cli_json_object_end(j);
        }
        cli_report(path, &e);
        return CLI_USAGE;
    }
    warn_refused_allows(r, warned);
    if (j)
        print_json(j, path, r);
    else
        print_human(path, r);
    rc = ckpt_scan_verdict(r) == CKPT_VERDICT_SAFE ? CLI_OK : CLI_FINDINGS;
    ckpt_scan_report_free(r);
    return rc;
}

/* Parses the command line into opts/list; argv entries that are files are
 * left for the caller. Returns -1 to go on, else an exit code. */
static int parse_args(const cli_command *cmd, int argc, char **argv, int *json,
                      allowlist *list, int *files)
{
    int i, options = 1, rc;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (options && strcmp(a, "--") == 0) {
            options = 0;
        } else if (!options || a[0] != '-' || a[1] == '\0') {
            (*files)++;
        } else if (cli_is_help(a)) {
            return cli_help(cmd);
        } else if (strcmp(a, "--json") == 0) {
            *json = 1;
        } else if (strcmp(a, "--allow") == 0 || strcmp(a, "--policy") == 0) {
            if (i + 1 >= argc)
                return cli_usage_error(cmd, "%s needs a value", a);
            i++;
            if (a[2] == 'p') {
                if ((rc = read_policy(cmd, list, argv[i])) != CLI_OK)
                    return rc;
            } else if (!valid_qualname(argv[i])) {
                return cli_usage_error(cmd, "--allow takes module.qualname, not '%s'",
                                       argv[i]);
            } else if (allow_add(list, argv[i])) {
                return cli_usage_error(cmd, "out of memory");
            }
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    if (*files == 0)
        return cli_usage_error(cmd, "missing FILE");
    return -1;
}

int cli_cmd_scan(const cli_command *cmd, int argc, char **argv)
{
    allowlist list = {0};
    ckpt_scan_options opts = CKPT_SCAN_OPTIONS_INIT;
    cli_json_writer jw;
    int i, json = 0, files = 0, options = 1, worst = CLI_OK, warned = 0;
    int rc = parse_args(cmd, argc, argv, &json, &list, &files);

    if (rc >= 0) {
        allow_free(&list);
        return rc;
    }
    opts.allow = list.names;
    opts.nallow = list.n;
    if (json) {
        cli_json_init(&jw, stdout);
        if (files > 1)
            cli_json_array_begin(&jw);
    }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (options && strcmp(a, "--") == 0) {
            options = 0;
            continue;
        }
        if (options && a[0] == '-' && a[1] != '\0') {
            if (strcmp(a, "--allow") == 0 || strcmp(a, "--policy") == 0)
                i++;
            continue;
        }
        rc = scan_one(a, &opts, json ? &jw : NULL, &warned);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK))
            worst = rc;
    }
    if (json) {
        if (files > 1)
            cli_json_array_end(&jw);
        fputc('\n', stdout);
    }
    allow_free(&list);
    return worst;
}
