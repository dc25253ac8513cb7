/* cmd_store.c - `ckpt store SUBCOMMAND DIR ...`: numbered generations of a
 * checkpoint in one directory with a LATEST pointer (ckpt_store_*).
 *
 *   commit DIR --name NAME --step N [--keep N] [--replace] SRC   prints the path
 *   latest DIR                                       prints the path
 *   list DIR [--json]                                table or JSON
 *   prune DIR [--keep N]
 *   gc DIR [--older-than MINUTES]
 *
 * Exit 0 ok; 1 findings (the written generation or the source is corrupt,
 * no generation verifies, list or prune found a corrupt generation, list
 * a bad LATEST); 2 usage or I/O error. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Longest path the commands print. */
#define PATH_CAP 8192

/* Strict decimal: digits only, no sign, within max. */
static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The parsed command line of one subcommand. */
typedef struct store_args {
    const char *dir;
    const char *src;
    const char *name;
    uint64_t step;
    int has_step;
    int json;
    ckpt_store_options opts;
} store_args;

/* What a subcommand accepts besides DIR. */
enum {
    ARG_NAME = 1,  /* --name NAME */
    ARG_STEP = 2,  /* --step N */
    ARG_KEEP = 4,  /* --keep N */
    ARG_OLDER = 8, /* --older-than MINUTES */
    ARG_JSON = 16, /* --json */
    ARG_SRC = 32,  /* a second operand */
    ARG_REPLACE = 64 /* --replace */
};

static int option_bit(const char *arg)
{
    static const struct {
        const char *flag;
        int bit;
    } table[] = { { "--name", ARG_NAME }, { "--step", ARG_STEP }, { "--keep", ARG_KEEP },
                  { "--older-than", ARG_OLDER }, { "--json", ARG_JSON },
                  { "--replace", ARG_REPLACE } };
    size_t i;

    for (i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(arg, table[i].flag) == 0)
            return table[i].bit;
    return 0;
}

/* argv[0] is "store", argv[1] the subcommand. Returns CLI_OK, or the exit
 * code after printing a usage error. */
static int parse_args(const cli_command *cmd, int allowed, int argc, char **argv,
                      store_args *a)
{
    const char *sub = argv[1];
    int i, options = 1;
    uint64_t v;

    *a = (store_args){ 0 };
    a->opts = (ckpt_store_options)CKPT_STORE_OPTIONS_INIT;
    for (i = 2; i < argc; i++) {
        const char *arg = argv[i];
        int bit;

        if (options && strcmp(arg, "--") == 0) {
            options = 0;
            continue;
        }
        if (!options || arg[0] != '-' || arg[1] == '\0') {
            if (!a->dir)
                a->dir = arg;
            else if (!a->src && (allowed & ARG_SRC))
                a->src = arg;
            else
                return cli_usage_error(cmd, "%s: unexpected argument '%s'", sub, arg);
            continue;
        }
        bit = option_bit(arg);
        if (!(bit & allowed))
            return cli_usage_error(cmd, "%s: unknown option '%s'", sub, arg);
        if (bit == ARG_JSON) {
            a->json = 1;
            continue;
        }
        if (bit == ARG_REPLACE) {
            a->opts.replace = 1;
            continue;
        }
        if (++i == argc)
            return cli_usage_error(cmd, "%s: %s needs a value", sub, arg);
        if (bit == ARG_NAME) {
            a->name = argv[i];
            continue;
        }
        if (parse_uint(argv[i], bit == ARG_STEP ? UINT64_MAX : UINT32_MAX, &v))
            return cli_usage_error(cmd, "%s: %s takes a non-negative integer%s, not '%s'",
                                   sub, arg, bit == ARG_STEP ? "" : " below 2^32", argv[i]);
        if (bit == ARG_STEP) {
            a->step = v;
            a->has_step = 1;
        } else if (bit == ARG_KEEP) {
            a->opts.keep = (uint32_t)v;
        } else {
            a->opts.stale_minutes = (uint32_t)v;
        }
    }
    if (!a->dir)
        return cli_usage_error(cmd, "%s: missing DIR", sub);
    return CLI_OK;
}

/* Reports a library failure under the file it concerns (the source, the
 * generation, LATEST or DIR), `dir` when the record names none. */
static int fail(const char *dir, int code)
{
    cli_error e;
    char file[1024];
    const char *last = ckpt_error_last()->file;

    snprintf(file, sizeof file, "%s", last && last[0] ? last : dir);
    cli_error_capture(&e, code);
    /* "SRC is corrupt: ...": the message names the file already */
    if (strncmp(e.message, file, strlen(file)) == 0 && e.message[strlen(file)] == ' ') {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, e.message, strlen(e.message));
        cli_put_location(stderr, &e, 0);
        fputc('\n', stderr);
        return cli_exit_code(code);
    }
    return cli_report(file, &e);
}

/* ------------------------------------------------------------ commit */

static int store_commit(const cli_command *cmd, int argc, char **argv)
{
    store_args a;
    char path[PATH_CAP];
    int rc = parse_args(cmd, ARG_NAME | ARG_STEP | ARG_KEEP | ARG_REPLACE | ARG_SRC, argc, argv, &a);

    if (rc != CLI_OK)
        return rc;
    if (!a.name || !a.has_step || !a.src)
        return cli_usage_error(cmd, "commit needs --name NAME, --step N and SRC");
    rc = ckpt_store_commit(path, sizeof path, a.dir, a.name, a.step, a.src, &a.opts);
    if (path[0]) {
        cli_put_text(stdout, path, strlen(path));
        fputc('\n', stdout);
    }
    return rc ? fail(a.dir, rc) : CLI_OK;
}

/* ------------------------------------------------------------ latest */

static int store_latest(const cli_command *cmd, int argc, char **argv)
{
    store_args a;
    char path[PATH_CAP];
    int rc = parse_args(cmd, 0, argc, argv, &a);

    if (rc != CLI_OK)
        return rc;
    rc = ckpt_store_latest(path, sizeof path, a.dir, &a.opts);
    if (rc == CKPT_E_NOTFOUND) {
        fail(a.dir, rc);
        return CLI_FINDINGS;
    }
    if (rc)
        return fail(a.dir, rc);
    cli_put_text(stdout, path, strlen(path));
    fputc('\n', stdout);
    return CLI_OK;
}

/* ------------------------------------------------------------ list */

static void list_json(const ckpt_store_listing *l, const char *dir)
{
    cli_json_writer j;
    const char *pfile;
    ckpt_store_pointer p = ckpt_store_list_pointer(l, &pfile);
    size_t i, n = ckpt_store_list_count(l);

    cli_json_init(&j, stdout);
    cli_json_object_begin(&j);
    cli_json_key(&j, "dir");
    cli_json_string(&j, dir);
    cli_json_key(&j, "latest");
    cli_json_object_begin(&j);
    cli_json_key(&j, "status");
    cli_json_string(&j, ckpt_store_pointer_name(p));
    cli_json_key(&j, "file");
    if (pfile[0])
        cli_json_string(&j, pfile);
    else
        cli_json_null(&j);
    cli_json_object_end(&j);
    cli_json_key(&j, "generations");
    cli_json_array_begin(&j);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);

        cli_json_object_begin(&j);
        cli_json_key(&j, "name");
        cli_json_string(&j, g->name);
        cli_json_key(&j, "step");
        cli_json_uint(&j, g->step);
        cli_json_key(&j, "file");
        cli_json_string(&j, g->file);
        cli_json_key(&j, "path");
        cli_json_string(&j, g->path);
        cli_json_key(&j, "bytes");
        cli_json_uint(&j, g->bytes);
        cli_json_key(&j, "status");
        cli_json_string(&j, g->ok ? "ok" : "corrupt");
        if (!g->ok) {
            cli_json_key(&j, "reason");
            cli_json_string(&j, g->reason);
            cli_json_key(&j, "member");
            cli_json_string(&j, g->member);
            cli_json_key(&j, "offset");
            if (g->offset == UINT64_MAX)
                cli_json_null(&j);
            else
                cli_json_uint(&j, g->offset);
        }
        cli_json_key(&j, "latest");
        cli_json_bool(&j, g->latest);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    fputc('\n', stdout);
}

static void list_human(const ckpt_store_listing *l)
{
    const char *pfile;
    ckpt_store_pointer p = ckpt_store_list_pointer(l, &pfile);
    size_t i, n = ckpt_store_list_count(l);
    char human[32], digits[24];
    int width = 1;

    /* steps ascend: the last one is the widest */
    if (n)
        width = snprintf(digits, sizeof digits, "%" PRIu64,
                         ckpt_store_list_generation(l, n - 1)->step);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);

        printf("%*" PRIu64 "  %10s  %s%-7s%s  ", width, g->step, cli_human_bytes(human, g->bytes),
               cli_color(g->ok ? CLI_GREEN : CLI_RED), g->ok ? "ok" : "corrupt",
               cli_color(CLI_RESET));
        cli_put_text(stdout, g->file, strlen(g->file));
        if (g->latest)
            fputs("  <- LATEST", stdout);
        if (!g->ok) {
            cli_error e = { 0 };

            fputs(": ", stdout);
            cli_put_text(stdout, g->reason, strlen(g->reason));
            snprintf(e.member, sizeof e.member, "%s", g->member);
            e.offset = g->offset;
            cli_put_location(stdout, &e, 1);
        }
        fputc('\n', stdout);
    }
    printf("%zu generation%s; LATEST: %s", n, cli_plural(n), ckpt_store_pointer_name(p));
    if (pfile[0]) {
        fputs(" (", stdout);
        cli_put_text(stdout, pfile, strlen(pfile));
        fputc(')', stdout);
    }
    fputc('\n', stdout);
}

static int store_list(const cli_command *cmd, int argc, char **argv)
{
    store_args a;
    ckpt_store_listing *l = NULL;
    int rc = parse_args(cmd, ARG_JSON, argc, argv, &a);
    size_t i, n;
    ckpt_store_pointer p;

    if (rc != CLI_OK)
        return rc;
    rc = ckpt_store_list(&l, a.dir, &a.opts);
    if (rc)
        return fail(a.dir, rc);
    if (a.json) {
        list_json(l, a.dir);
    } else {
        const char *caveat = ckpt_store_lock_caveat(a.dir);
        list_human(l);
        if (caveat)
            printf("note: %s\n", caveat);
    }
    p = ckpt_store_list_pointer(l, NULL);
    rc = p == CKPT_STORE_POINTER_OK || p == CKPT_STORE_POINTER_ABSENT ? CLI_OK : CLI_FINDINGS;
    n = ckpt_store_list_count(l);
    for (i = 0; i < n; i++)
        if (!ckpt_store_list_generation(l, i)->ok)
            rc = CLI_FINDINGS;
    ckpt_store_list_free(l);
    return rc;
}

/* ------------------------------------------------------------ prune, gc */

/* Prunes, then names the corrupt generations left in place (exit 1 when
 * there are any, as for list). */
static int store_prune(const cli_command *cmd, int argc, char **argv)
{
    store_args a;
    ckpt_store_listing *l = NULL;
    size_t removed = 0, i, n;
    int rc = parse_args(cmd, ARG_KEEP, argc, argv, &a);

    if (rc != CLI_OK)
        return rc;
    rc = ckpt_store_prune_list(&l, &removed, a.dir, &a.opts);
    printf("removed %zu generation%s\n", removed, cli_plural(removed));
    if (rc)
        return fail(a.dir, rc);
    n = ckpt_store_list_count(l);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        cli_error e = { 0 };

        if (g->ok)
            continue;
        printf("%scorrupt%s, left in place: ", cli_color(CLI_RED), cli_color(CLI_RESET));
        cli_put_text(stdout, g->file, strlen(g->file));
        fputs(": ", stdout);
        cli_put_text(stdout, g->reason, strlen(g->reason));
        snprintf(e.member, sizeof e.member, "%s", g->member);
        e.offset = g->offset;
        cli_put_location(stdout, &e, 1);
        fputc('\n', stdout);
        rc = CLI_FINDINGS;
    }
    ckpt_store_list_free(l);
    return rc;
}

static int store_gc(const cli_command *cmd, int argc, char **argv)
{
    store_args a;
    size_t removed = 0;
    int rc = parse_args(cmd, ARG_OLDER, argc, argv, &a);

    if (rc != CLI_OK)
        return rc;
    rc = ckpt_store_gc(&removed, a.dir, &a.opts);
    printf("removed %zu stale temporary file%s\n", removed, cli_plural(removed));
    return rc ? fail(a.dir, rc) : CLI_OK;
}

int cli_cmd_store(const cli_command *cmd, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(const cli_command *, int, char **);
    } subs[] = {
        { "commit", store_commit }, { "latest", store_latest }, { "list", store_list },
        { "prune", store_prune },   { "gc", store_gc },
    };
    size_t i;

    for (i = 1; i < (size_t)argc && strcmp(argv[i], "--") != 0; i++)
        if (cli_is_help(argv[i]))
            return cli_help(cmd);
    if (argc < 2)
        return cli_usage_error(cmd, "missing subcommand");
    for (i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].run(cmd, argc, argv);
    return cli_usage_error(cmd, "unknown subcommand '%s'", argv[1]);
}
