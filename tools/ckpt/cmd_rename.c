/* cmd_rename.c - `ckpt rename IN OUT RULE... [--dry-run]`: rewrite tensor
 * keys by --strip-prefix, --add-prefix, --replace OLD=NEW and --auto SPEC
 * (applied in the order given; rules at ckpt_rename in ckpt.h) and write
 * OUT atomically, or print the mapping. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct rename_args {
    const char *in, *out;
    ckpt_rename_rule *rules;
    size_t nrules;
    ckpt_manifest **specs; /* loaded --auto specs, freed at the end */
    size_t nspecs;
    int dry_run;
} rename_args;

/* The value of "--name V" or "--name=V" at argv[*i], or NULL when argv[*i]
 * is another option; *missing is set when V is absent. */
static const char *option_value(int argc, char **argv, int *i,
                                const char *name, int *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];

    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int load_spec(rename_args *a, const char *path, ckpt_rename_rule *r)
{
    cli_error e;
    ckpt_manifest *m = NULL;
    int rc = ckpt_manifest_load(&m, path, NULL);

    if (rc != 0) {
        cli_error_capture(&e, rc);
        return cli_report(path, &e);
    }
    a->specs[a->nspecs++] = m;
    r->spec = m;
    return CLI_OK;
}

static int parse(const cli_command *cmd, int argc, char **argv, rename_args *a)
{
    static const struct {
        const char *name;
        ckpt_rename_op op;
    } ops[] = { { "--strip-prefix", CKPT_RENAME_STRIP_PREFIX },
                { "--add-prefix", CKPT_RENAME_ADD_PREFIX },
                { "--replace", CKPT_RENAME_REPLACE },
                { "--auto", CKPT_RENAME_AUTO } };
    int i, options = 1, missing = 0, files = 0;
    size_t k;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;

        if (!options || arg[0] != '-' || arg[1] == '\0') {
            if (files == 2)
                return cli_usage_error(cmd, "IN and OUT only");
            if (files++ == 0)
                a->in = arg;
            else
                a->out = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            options = 0;
            continue;
        }
        if (cli_is_help(arg)) {
            cli_help(cmd);
            return -1;
        }
        if (strcmp(arg, "--dry-run") == 0) {
            a->dry_run = 1;
            continue;
        }
        for (k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if ((v = option_value(argc, argv, &i, ops[k].name, &missing)) ||
                missing)
                break;
        if (missing)
            return cli_usage_error(cmd, "%s needs a value", arg);
        if (!v)
            return cli_usage_error(cmd, "unknown option '%s'", arg);
        {
            ckpt_rename_rule *r = &a->rules[a->nrules++];

            memset(r, 0, sizeof *r);
            r->op = ops[k].op;
            r->arg = v;
            if (r->op == CKPT_RENAME_REPLACE) {
                /* OLD=NEW: the first '=' splits (keys rarely hold one) */
                char *eq = strchr(v, '=');

                if (!eq || eq == v)
                    return cli_usage_error(cmd, "--replace takes OLD=NEW "
                                           "with OLD not empty");
                *eq = '\0';
                r->arg2 = eq + 1;
            } else if (r->op == CKPT_RENAME_AUTO) {
                int rc = load_spec(a, v, r);

                if (rc != CLI_OK)
                    return rc;
            } else if (v[0] == '\0') {
                return cli_usage_error(cmd, "%s needs a prefix", ops[k].name);
            }
        }
    }
    if (!a->in || (!a->out && !a->dry_run))
        return cli_usage_error(cmd, "needs IN and OUT");
    if (a->nrules == 0)
        return cli_usage_error(cmd, "needs at least one rule");
    return CLI_OK;
}

static void print_plan(const ckpt_rename_plan *p)
{
    size_t i, n = ckpt_rename_plan_count(p);

    for (i = 0; i < n; i++) {
        const char *from = ckpt_rename_plan_from(p, i);
        const char *to = ckpt_rename_plan_to(p, i);

        if (strcmp(from, to) == 0)
            continue;
        cli_put_text(stdout, cli_name(from), strlen(cli_name(from)));
        fputs(" -> ", stdout);
        cli_put_text(stdout, cli_name(to), strlen(cli_name(to)));
        fputc('\n', stdout);
    }
}

int cli_cmd_rename(const cli_command *cmd, int argc, char **argv)
{
    rename_args a;
    ckpt_rename_plan *plan = NULL;
    cli_error e;
    size_t k;
    int rc;

    memset(&a, 0, sizeof a);
    /* every argument could be a rule or an --auto spec */
    a.rules = malloc((size_t)argc * sizeof *a.rules);
    a.specs = malloc((size_t)argc * sizeof *a.specs);
    if (!a.rules || !a.specs) {
        free(a.rules);
        free(a.specs);
        fputs("ckpt rename: out of memory\n", stderr);
        return CLI_USAGE;
    }
    rc = parse(cmd, argc, argv, &a);
    if (rc == CLI_OK) {
        int lrc = ckpt_rename(&plan, a.in, a.dry_run ? NULL : a.out, a.rules,
                              a.nrules, NULL);

        if (lrc != 0) {
            cli_error_capture(&e, lrc);
            rc = cli_report(a.in, &e);
            /* a rule that matches nothing is a bad command line */
            if (lrc == CKPT_E_NOTFOUND)
                rc = CLI_USAGE;
        } else if (a.dry_run) {
            print_plan(plan);
            printf("%zu of %zu keys renamed (dry run: nothing written)\n",
                   ckpt_rename_plan_changed(plan),
                   ckpt_rename_plan_count(plan));
        } else {
            printf("renamed %zu of %zu keys: ", ckpt_rename_plan_changed(plan),
                   ckpt_rename_plan_count(plan));
            cli_put_text(stdout, a.out, strlen(a.out));
            fputc('\n', stdout);
        }
    }
    ckpt_rename_plan_free(plan);
    for (k = 0; k < a.nspecs; k++)
        ckpt_manifest_free(a.specs[k]);
    free(a.rules);
    free(a.specs);
    return rc < 0 ? CLI_OK : rc;
}
