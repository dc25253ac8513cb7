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
    char **olds; /* the OLD of each --replace OLD=NEW (owned) */
    size_t nolds;
} rename_args;

static struct {
    const char *in, *out;
    cli_list rules; /* every rule option, in the order given */
    int dry_run;
} args;

static const cli_opt opts[] = {
    {CLI_OPT_ARG, "IN", 0, &args.in, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_ARG, "OUT", 0, &args.out, NULL, 0, NULL},
    {CLI_OPT_VALUES, "strip-prefix", 0, &args.rules, "P", 0,
     "keys starting with P lose it (P is whole segments: "
     "'module' means 'module.')"},
    {CLI_OPT_VALUES, "add-prefix", 0, &args.rules, "P", 0, "every key gains P"},
    {CLI_OPT_VALUES, "replace", 0, &args.rules, "OLD=NEW", 0,
     "each occurrence of OLD made of whole segments "
     "becomes NEW ('_orig_mod.=' drops that wrapper)"},
    {CLI_OPT_VALUES, "auto", 0, &args.rules, "SPEC", 0,
     "the rewrite `ckpt match --normalize` finds against "
     "SPEC (a checkpoint or a JSON manifest); it must "
     "give a complete match"},
    {CLI_OPT_BOOL, "dry-run", 0, &args.dry_run, NULL, 0,
     "print the mapping OLD -> NEW, write nothing (OUT "
     "may be left out)"},
    {0}};

static int load_spec(rename_args *a, const char *path, ckpt_rename_rule *r) {
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

/* The rules from the parsed options, in the order given. Returns
 * CLI_CONTINUE, or an exit code after printing why not. */
static int parse(const cli_command *cmd, rename_args *a) {
    static const struct {
        const char *name;
        ckpt_rename_op op;
    } ops[] = {{"strip-prefix", CKPT_RENAME_STRIP_PREFIX},
               {"add-prefix", CKPT_RENAME_ADD_PREFIX},
               {"replace", CKPT_RENAME_REPLACE},
               {"auto", CKPT_RENAME_AUTO}};
    size_t i, k;

    if (!args.out && !args.dry_run) return cli_usage_error(cmd, "needs IN and OUT");
    if (args.rules.n == 0) return cli_usage_error(cmd, "needs at least one rule");
    for (i = 0; i < args.rules.n; i++) {
        const char *v = args.rules.items[i];
        ckpt_rename_rule *r = &a->rules[a->nrules++];

        for (k = 0; strcmp(ops[k].name, args.rules.opts[i]->name) != 0; k++)
            ;
        memset(r, 0, sizeof *r);
        r->op = ops[k].op;
        r->arg = v;
        if (r->op == CKPT_RENAME_REPLACE) {
            /* OLD=NEW: the first '=' splits (keys rarely hold one) */
            const char *eq = strchr(v, '=');

            if (!eq || eq == v)
                return cli_usage_error(cmd, "--replace takes OLD=NEW "
                                            "with OLD not empty");
            if ((a->olds[a->nolds] = strndup(v, (size_t)(eq - v))) == NULL)
                return cli_usage_error(cmd, "out of memory");
            r->arg = a->olds[a->nolds++];
            r->arg2 = eq + 1;
        } else if (r->op == CKPT_RENAME_AUTO) {
            int rc = load_spec(a, v, r);

            if (rc != CLI_OK) return rc;
        } else if (v[0] == '\0') {
            return cli_usage_error(cmd, "--%s needs a prefix", ops[k].name);
        }
    }
    return CLI_CONTINUE;
}

static const char *plan_from(const void *ctx, size_t i) { return ckpt_rename_plan_from(ctx, i); }

/* The renamed keys in natural order of their old names. */
static void print_plan(const ckpt_rename_plan *p) {
    size_t i, n = ckpt_rename_plan_count(p);
    size_t *order = cli_natural_order(plan_from, p, n);

    for (i = 0; i < n; i++) {
        const char *from = ckpt_rename_plan_from(p, order ? order[i] : i);
        const char *to = ckpt_rename_plan_to(p, order ? order[i] : i);

        if (strcmp(from, to) == 0) continue;
        cli_put_text(stdout, cli_name(from), strlen(cli_name(from)));
        fputs(" -> ", stdout);
        cli_put_text(stdout, cli_name(to), strlen(cli_name(to)));
        fputc('\n', stdout);
    }
    free(order);
}

static int run(const cli_command *cmd, int argc, char **argv) {
    rename_args a;
    ckpt_rename_plan *plan = NULL;
    cli_error e;
    size_t k, n;
    int rc = cli_opt_parse(cmd, argc, argv);

    if (rc != CLI_CONTINUE) return rc;
    memset(&a, 0, sizeof a);
    a.in = args.in;
    a.out = args.out;
    n = args.rules.n ? args.rules.n : 1;
    a.rules = malloc(n * sizeof *a.rules);
    a.specs = malloc(n * sizeof *a.specs);
    a.olds = malloc(n * sizeof *a.olds);
    if (!a.rules || !a.specs || !a.olds)
        rc = cli_usage_error(cmd, "out of memory");
    else
        rc = parse(cmd, &a);
    if (rc == CLI_CONTINUE) {
        int lrc = ckpt_rename(&plan, a.in, args.dry_run ? NULL : a.out, a.rules, a.nrules, NULL);

        rc = CLI_OK;
        if (lrc != 0) {
            cli_error_capture(&e, lrc);
            rc = cli_report(a.in, &e);
            /* a rule that matches nothing is a bad command line */
            if (lrc == CKPT_E_NOTFOUND) rc = CLI_USAGE;
        } else if (args.dry_run) {
            print_plan(plan);
            printf("%zu of %zu keys renamed (dry run: nothing written)\n",
                   ckpt_rename_plan_changed(plan), ckpt_rename_plan_count(plan));
        } else {
            printf("renamed %zu of %zu keys: ", ckpt_rename_plan_changed(plan),
                   ckpt_rename_plan_count(plan));
            cli_put_text(stdout, a.out, strlen(a.out));
            fputc('\n', stdout);
        }
    }
    ckpt_rename_plan_free(plan);
    for (k = 0; k < a.nspecs; k++) ckpt_manifest_free(a.specs[k]);
    for (k = 0; k < a.nolds; k++) free(a.olds[k]);
    free(a.rules);
    free(a.specs);
    free(a.olds);
    return rc;
}

const cli_command cli_cmd_rename = {
    "rename",
    "rewrite tensor keys (prefixes, wrappers) into a new file",
    opts,
    "Renames the tensor keys of IN by the rules (--strip-prefix,\n"
    "--add-prefix, --replace, --auto), in the order given, and writes OUT\n"
    "atomically in IN's format (safetensors, or a torch zip; an OUT named\n"
    "for the other format is refused: rename, then `ckpt convert`; an OUT\n"
    "that is a symbolic link is replaced by a regular file, the file it\n"
    "points to left as it was). Nested\n"
    "dicts keep their shape where the new names allow it.\n",
    "A rule that matches no key is refused, and so are two keys that would\n"
    "get one name (both are named).\n"
    "Exit status: 0 written, 1 refused (collision, no complete --auto\n"
    "rewrite) or unreadable input, 2 usage or I/O error, or a rule that\n"
    "matches no key.\n",
    run,
    NULL};
