/* cmd_match.c - `ckpt match CKPT --expect SPEC`: would CKPT load into a
 * model expecting the keys of SPEC (a checkpoint, or a JSON manifest such
 * as `ckpt inspect --json` output)? A report as text or JSON (the fields
 * are documented at ckpt_match in ckpt.h); exit 0 only for a complete
 * match. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Text lists longer than this show their first entries and a count; JSON
 * always lists everything. */
#define SHOW_MAX 50
#define SHAPE_CAP 256

typedef struct match_args {
    const char *ckpt, *spec;
    ckpt_match_options opts;
    int json;
    size_t aliases; /* names of ckpt.aliases left out: the stored view */
} match_args;

/* ------------------------------------------------------------ helpers */

/* bsearch of a match list (sorted by name) for a name */
static int cmp_tied(const void *key, const void *item) {
    return strcmp((const char *)key, ((const ckpt_match_item *)item)->name);
}

/* The TIED item of a key, or NULL. */
static const ckpt_match_item *tied_item(const ckpt_match_result *r, const char *name) {
    size_t n = ckpt_match_count(r, CKPT_MATCH_TIED);

    if (n == 0) return NULL;
    return bsearch(name, ckpt_match_item_at(r, CKPT_MATCH_TIED, 0), n, sizeof(ckpt_match_item),
                   cmp_tied);
}

/* ------------------------------------------------------------ JSON */

static void json_names(cli_json_writer *j, const ckpt_match_result *r, ckpt_match_list l) {
    size_t i, n = ckpt_match_count(r, l);

    cli_json_array_begin(j);
    for (i = 0; i < n; i++) cli_json_string(j, ckpt_match_item_at(r, l, i)->name);
    cli_json_array_end(j);
}

static void json_mismatches(cli_json_writer *j, const ckpt_match_result *r, ckpt_match_list l) {
    size_t i, n = ckpt_match_count(r, l);

    cli_json_array_begin(j);
    for (i = 0; i < n; i++) {
        const ckpt_match_item *it = ckpt_match_item_at(r, l, i);

        cli_json_object_begin(j);
        cli_json_key(j, "name");
        cli_json_string(j, it->name);
        cli_json_key(j, "checkpoint");
        if (l == CKPT_MATCH_SHAPE_MISMATCH)
            cli_json_dims(j, it->checkpoint->ndim, it->checkpoint->shape);
        else
            cli_json_string(j, it->checkpoint->dtype);
        cli_json_key(j, "expected");
        if (l == CKPT_MATCH_SHAPE_MISMATCH)
            cli_json_dims(j, it->expected->ndim, it->expected->shape);
        else
            cli_json_string(j, it->expected->dtype);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
}

static void json_rewrite(cli_json_writer *j, const ckpt_rewrite *rw, int applied) {
    cli_json_object_begin(j);
    cli_json_key(j, "description");
    cli_json_string(j, rw->description);
    cli_json_key(j, "matches");
    cli_json_uint(j, rw->matches);
    if (applied) {
        cli_json_key(j, "applied");
        cli_json_bool(j, rw->applied);
    }
    cli_json_object_end(j);
}

static void print_json(const match_args *a, const ckpt_match_result *r) {
    const ckpt_rewrite *rw = ckpt_match_rewrite(r);
    const char *warning = ckpt_match_warning(r);
    size_t i, n;
    cli_json_writer j;

    cli_json_init(&j, stdout);
    cli_json_object_begin(&j);
    cli_json_key(&j, "checkpoint");
    cli_json_string(&j, a->ckpt);
    cli_json_key(&j, "expect");
    cli_json_string(&j, a->spec);
    cli_json_key(&j, "complete");
    cli_json_bool(&j, ckpt_match_complete(r));
    cli_json_key(&j, "matched");
    cli_json_uint(&j, ckpt_match_matched(r));
    cli_json_key(&j, "missing_keys");
    json_names(&j, r, CKPT_MATCH_MISSING);
    cli_json_key(&j, "unexpected_keys");
    json_names(&j, r, CKPT_MATCH_UNEXPECTED);
    cli_json_key(&j, "shape_mismatch");
    json_mismatches(&j, r, CKPT_MATCH_SHAPE_MISMATCH);
    cli_json_key(&j, "dtype_mismatch");
    json_mismatches(&j, r, CKPT_MATCH_DTYPE_MISMATCH);
    cli_json_key(&j, "allowed");
    cli_json_object_begin(&j);
    cli_json_key(&j, "missing");
    json_names(&j, r, CKPT_MATCH_ALLOWED_MISSING);
    cli_json_key(&j, "unexpected");
    json_names(&j, r, CKPT_MATCH_ALLOWED_UNEXPECTED);
    cli_json_object_end(&j);
    cli_json_key(&j, "defaulted");
    json_names(&j, r, CKPT_MATCH_DEFAULTED);
    cli_json_key(&j, "tied");
    cli_json_array_begin(&j);
    n = ckpt_match_count(r, CKPT_MATCH_TIED);
    for (i = 0; i < n; i++) {
        const ckpt_match_item *it = ckpt_match_item_at(r, CKPT_MATCH_TIED, i);

        cli_json_object_begin(&j);
        cli_json_key(&j, "name");
        cli_json_string(&j, it->name);
        cli_json_key(&j, "tied_to");
        cli_json_string(&j, it->tied_to);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_key(&j, "rewrite");
    if (rw)
        json_rewrite(&j, rw, 1);
    else
        cli_json_null(&j);
    cli_json_key(&j, "candidates");
    cli_json_array_begin(&j);
    n = ckpt_match_candidate_count(r);
    for (i = 0; i < n; i++) json_rewrite(&j, ckpt_match_candidate(r, i), 0);
    cli_json_array_end(&j);
    cli_json_key(&j, "ignored_top_level");
    cli_json_array_begin(&j);
    n = ckpt_match_ignored_count(r);
    for (i = 0; i < n; i++) cli_json_string(&j, ckpt_match_ignored(r, i));
    cli_json_array_end(&j);
    cli_json_key(&j, "warning");
    if (warning)
        cli_json_string(&j, warning);
    else
        cli_json_null(&j);
    cli_json_key(&j, "rewrite_note");
    if (ckpt_match_rewrite_note(r))
        cli_json_string(&j, ckpt_match_rewrite_note(r));
    else
        cli_json_null(&j);
    cli_json_key(&j, "tie_note");
    if (ckpt_match_tie_note(r))
        cli_json_string(&j, ckpt_match_tie_note(r));
    else
        cli_json_null(&j);
    cli_json_object_end(&j);
    fputc('\n', stdout);
}

/* ------------------------------------------------------------ text */

typedef struct list_ref {
    const ckpt_match_result *r;
    ckpt_match_list l;
} list_ref;

static const char *item_name(const void *ctx, size_t i) {
    const list_ref *ref = ctx;

    return ckpt_match_item_at(ref->r, ref->l, i)->name;
}

/* A TIED item for a missing key the checkpoint alone declares tied: it is
 * listed (and explained) among the missing keys, once. */
static int declared(const ckpt_match_item *it) { return it->checkpoint && it->expected; }

static void print_list(const ckpt_match_result *r, ckpt_match_list l, const char *title) {
    size_t i, shown = 0, n = ckpt_match_count(r, l), listed = n;
    char sa[SHAPE_CAP], sb[SHAPE_CAP];
    list_ref ref = {r, l};
    size_t *order;

    for (i = 0; l == CKPT_MATCH_TIED && i < n; i++)
        listed -= (size_t)declared(ckpt_match_item_at(r, l, i));
    if (listed == 0) return;
    order = cli_natural_order(item_name, &ref, n);
    printf("%s%s (%zu):%s\n", cli_color(CLI_BOLD), title, listed, cli_color(CLI_RESET));
    for (i = 0; i < n && shown < SHOW_MAX; i++) {
        const ckpt_match_item *it = ckpt_match_item_at(r, l, order ? order[i] : i);
        const ckpt_match_item *tie = l == CKPT_MATCH_TIED ? it : tied_item(r, it->name);

        if (l == CKPT_MATCH_TIED && declared(it)) continue;
        shown++;
        fputs("  ", stdout);
        cli_put_name(stdout, it->name);
        if (l == CKPT_MATCH_SHAPE_MISMATCH)
            printf(": checkpoint %s, expected %s",
                   cli_dims(sa, sizeof sa, it->checkpoint->ndim, it->checkpoint->shape),
                   cli_dims(sb, sizeof sb, it->expected->ndim, it->expected->shape));
        else if (l == CKPT_MATCH_DTYPE_MISMATCH)
            printf(": checkpoint %s, expected %s", it->checkpoint->dtype, it->expected->dtype);
        if (tie && declared(tie)) {
            /* the checkpoint's metadata alone: a tie the model does not make */
            fputs(" (the checkpoint declares it equal to ", stdout);
            cli_put_name(stdout, tie->tied_to);
            fputs("; the model does not tie them: a loader that ignores the declaration "
                  "leaves it at its init)",
                  stdout);
        } else if (tie && l != CKPT_MATCH_SHAPE_MISMATCH && l != CKPT_MATCH_DTYPE_MISMATCH) {
            fputs(" (tied to ", stdout);
            cli_put_name(stdout, tie->tied_to);
            fputc(')', stdout);
        }
        fputc('\n', stdout);
    }
    if (listed > SHOW_MAX) printf("  ... and %zu more (--json lists all)\n", listed - SHOW_MAX);
    free(order);
}

/* The other top-level entries of a training checkpoint, left out. */
static void print_ignored(const ckpt_match_result *r) {
    size_t i, n = ckpt_match_ignored_count(r);

    printf("ignored top-level entries (%zu): ", n);
    for (i = 0; i < n && i < SHOW_MAX; i++) {
        fputs(i ? ", " : "", stdout);
        cli_put_name(stdout, ckpt_match_ignored(r, i));
    }
    fputs(n > SHOW_MAX ? ", ... (--json lists all)\n" : "\n", stdout);
}

static void put_rewrite(const ckpt_rewrite *rw) {
    cli_put_text(stdout, rw->description, strlen(rw->description));
    printf(" (%" PRIu64 " key%s)", rw->matches, cli_plural(rw->matches));
}

/* Missing keys filled through a tie (the TIED items of the expected side). */
/* The missing keys tied to a matched key (cast 0) or to one that differs
 * in dtype alone (cast 1: it loads, cast, but is no matched key). */
static size_t tied_missing(const ckpt_match_result *r, int cast) {
    size_t i, n = 0, ndt = ckpt_match_count(r, CKPT_MATCH_DTYPE_MISMATCH);
    const ckpt_match_item *dt = ndt ? ckpt_match_item_at(r, CKPT_MATCH_DTYPE_MISMATCH, 0) : NULL;

    for (i = 0; i < ckpt_match_count(r, CKPT_MATCH_TIED); i++) {
        const ckpt_match_item *it = ckpt_match_item_at(r, CKPT_MATCH_TIED, i);

        if (it->expected && !it->checkpoint)
            n += (dt && bsearch(it->tied_to, dt, ndt, sizeof *dt, cmp_tied)) == cast;
    }
    return n;
}

/* ", N tied to a matched key", and those tied to a key that loads only
 * cast (the headline must not call it matched: "0 of 3 match, 1 tied to
 * a matched key" read as a contradiction). */
static void print_tied(const ckpt_match_result *r) {
    size_t tied = tied_missing(r, 0), cast = tied_missing(r, 1);

    if (tied) printf(", %zu tied to a matched key", tied);
    if (cast) printf(", %zu tied to a key that loads with a dtype cast", cast);
}

/* whether dtype is one of torch's floating-point dtypes that copy_ casts between */
static int torch_float(const char *dtype) {
    static const char *const names[] = {"F64", "F32", "F16", "BF16"};

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(dtype, names[i]) == 0) return 1;
    return 0;
}

static void cast_note(const ckpt_match_result *r) {
    size_t i, n = ckpt_match_count(r, CKPT_MATCH_DTYPE_MISMATCH);
    const char *to = NULL;
    int one = 1;

    if (n == 0 || ckpt_match_count(r, CKPT_MATCH_SHAPE_MISMATCH)) return;
    for (i = 0; i < n; i++) {
        const ckpt_match_item *it = ckpt_match_item_at(r, CKPT_MATCH_DTYPE_MISMATCH, i);

        if (!torch_float(it->checkpoint->dtype) || !torch_float(it->expected->dtype)) return;
        if (to && strcmp(to, it->expected->dtype) != 0) one = 0;
        to = it->expected->dtype;
    }
    /* dtype="model", not dtype=torch.X: X would cast every tensor, those
     * of a mixed-precision model's other dtype too */
    if (one)
        printf("note: only floating-point dtypes differ: torch's load_state_dict casts them to "
               "the model's %s as it copies; ckpt.load_state_dict does with dtype=\"model\"\n",
               to);
    else
        fputs("note: only floating-point dtypes differ: torch's load_state_dict casts each "
              "into its parameter's dtype as it copies; ckpt.load_state_dict does with "
              "dtype=\"model\"\n",
              stdout);
}

static void print_text(const match_args *a, const ckpt_match_result *r, size_t expected) {
    const ckpt_rewrite *rw = ckpt_match_rewrite(r);
    const char *warning = ckpt_match_warning(r);
    uint64_t matched = ckpt_match_matched(r);
    size_t i, n, defaulted = ckpt_match_count(r, CKPT_MATCH_DEFAULTED);

    if (ckpt_match_complete(r)) {
        printf("%sCOMPLETE%s: %" PRIu64 " of %zu expected key%s match", cli_color(CLI_GREEN),
               cli_color(CLI_RESET), matched, expected, cli_plural(expected));
        print_tied(r);
        if (defaulted) printf(", %zu defaulted by the module", defaulted);
        if (rw && rw->applied) {
            fputs(" after ", stdout);
            cli_put_text(stdout, rw->description, strlen(rw->description));
        }
    } else if (!ckpt_match_count(r, CKPT_MATCH_MISSING) &&
               !ckpt_match_count(r, CKPT_MATCH_UNEXPECTED) &&
               !ckpt_match_count(r, CKPT_MATCH_SHAPE_MISMATCH)) {
        /* dtypes alone differ: "0 of 16 match" read as nothing loads */
        size_t ndt = ckpt_match_count(r, CKPT_MATCH_DTYPE_MISMATCH);

        printf("%sMISMATCH%s: names and shapes match; only dtypes differ: %" PRIu64
               " of %zu expected key%s %s the model's dtype, %zu another (torch's "
               "load_state_dict casts them as it copies)",
               cli_color(CLI_RED), cli_color(CLI_RESET), matched, expected, cli_plural(expected),
               matched == 1 ? "has" : "have", ndt);
        print_tied(r);
        if (defaulted) printf(", %zu defaulted by the module", defaulted);
    } else {
        printf("%sMISMATCH%s: %" PRIu64 " of %zu expected key%s match "
               "(%zu missing, %zu unexpected, %zu shape, %zu dtype "
               "mismatch%s)",
               cli_color(CLI_RED), cli_color(CLI_RESET), matched, expected, cli_plural(expected),
               ckpt_match_count(r, CKPT_MATCH_MISSING), ckpt_match_count(r, CKPT_MATCH_UNEXPECTED),
               ckpt_match_count(r, CKPT_MATCH_SHAPE_MISMATCH),
               ckpt_match_count(r, CKPT_MATCH_DTYPE_MISMATCH),
               ckpt_match_count(r, CKPT_MATCH_DTYPE_MISMATCH) == 1 ? "" : "es");
        print_tied(r);
        if (defaulted) printf(", %zu defaulted by the module", defaulted);
    }
    fputs("\n  checkpoint: ", stdout);
    cli_put_text(stdout, a->ckpt, strlen(a->ckpt));
    fputs("\n  expected:   ", stdout);
    cli_put_text(stdout, a->spec, strlen(a->spec));
    fputc('\n', stdout);

    print_list(r, CKPT_MATCH_MISSING, "missing keys");
    print_list(r, CKPT_MATCH_UNEXPECTED, "unexpected keys");
    print_list(r, CKPT_MATCH_SHAPE_MISMATCH, "shape mismatch");
    print_list(r, CKPT_MATCH_DTYPE_MISMATCH, "dtype mismatch");
    print_list(r, CKPT_MATCH_ALLOWED_MISSING, "allowed missing");
    print_list(r, CKPT_MATCH_ALLOWED_UNEXPECTED, "allowed unexpected");
    print_list(r, CKPT_MATCH_TIED, "tied keys");
    print_list(r, CKPT_MATCH_DEFAULTED, "defaulted by the module");
    cast_note(r);

    if (rw) {
        fputs("rewrite: ", stdout);
        put_rewrite(rw);
        if (rw->applied)
            fputs(", applied\n", stdout);
        else if (!a->opts.normalize)
            /* rename keeps the other entries of a training checkpoint,
             * so a file it writes would not load either */
            fputs(ckpt_match_ignored_count(r) ? ", not applied: use --normalize\n"
                                              : ", not applied: use --normalize, or write a "
                                                "renamed copy: ckpt rename CKPT OUT --auto "
                                                "SPEC\n",
                  stdout);
        else
            fputs(", not applied: it would not give a complete match\n", stdout);
        if (!rw->applied && ckpt_match_rewrite_note(r)) {
            fputs("  under that rewrite ", stdout);
            cli_put_text(stdout, ckpt_match_rewrite_note(r), strlen(ckpt_match_rewrite_note(r)));
            fputc('\n', stdout);
        }
        if (rw->applied && ckpt_match_ignored_count(r)) print_ignored(r);
    }
    n = ckpt_match_candidate_count(r);
    if (n && !(rw && rw->applied)) {
        printf("candidate rewrites%s:\n", rw ? "" : " (none is the best)");
        for (i = 0; i < n; i++) {
            fputs("  ", stdout);
            put_rewrite(ckpt_match_candidate(r, i));
            fputc('\n', stdout);
        }
    }
    if (ckpt_match_tie_note(r)) {
        fputs("note: ", stdout);
        cli_put_text(stdout, ckpt_match_tie_note(r), strlen(ckpt_match_tie_note(r)));
        fputc('\n', stdout);
    }
    if (a->aliases)
        printf("note: the keys as safetensors' load_file and load_model see them: ckpt wrote "
               "%zu tied name%s in ckpt.aliases, which ckpt.load restores and they do not\n",
               a->aliases, cli_plural(a->aliases));
    if (warning) printf("%swarning%s: %s\n", cli_color(CLI_YELLOW), cli_color(CLI_RESET), warning);
}

/* ------------------------------------------------------------ command */

static struct {
    const char *ckpt, *spec;
    cli_list allow_missing, allow_unexpected;
    int normalize, json;
} args;

static const cli_opt opts[] = {{CLI_OPT_ARG, "CKPT", 0, &args.ckpt, NULL, CLI_OPT_REQUIRED, NULL},
                               {CLI_OPT_VALUE, "expect", 0, &args.spec, "SPEC", CLI_OPT_REQUIRED,
                                "what the model expects: a checkpoint of any format, or "
                                "a JSON manifest (`ckpt inspect --json` output)"},
                               {CLI_OPT_BOOL, "normalize", 0, &args.normalize, NULL, 0,
                                "apply that rewrite if it gives a complete match"},
                               {CLI_OPT_VALUES, "allow-missing", 0, &args.allow_missing, "GLOB", 0,
                                "a missing key matching GLOB is allowed ('*' "
                                "crosses '.'); allowed keys are still listed"},
                               {CLI_OPT_VALUES, "allow-unexpected", 0, &args.allow_unexpected,
                                "GLOB", 0, "likewise for unexpected keys"},
                               {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
                                "one JSON object (fields: see ckpt_match in ckpt.h)"},
                               {0}};

static int load(const char *path, ckpt_manifest **m) {
    cli_error e;
    int rc = ckpt_manifest_load(m, path, NULL);

    if (rc == 0) return CLI_OK;
    cli_error_capture(&e, rc);
    return cli_report(path, &e);
}

static int run(const cli_command *cmd, int argc, char **argv) {
    match_args a;
    ckpt_match_options init = CKPT_MATCH_OPTIONS_INIT;
    ckpt_manifest *c = NULL, *e = NULL, *opened = NULL; /* c, or the file c views */
    ckpt_match_result *r = NULL;
    cli_error err;
    int rc = cli_opt_parse(cmd, argc, argv);

    if (rc != CLI_CONTINUE) return rc;
    memset(&a, 0, sizeof a);
    a.ckpt = args.ckpt;
    a.spec = args.spec;
    a.json = args.json;
    a.opts = init;
    a.opts.normalize = args.normalize;
    a.opts.allow_missing = args.allow_missing.items;
    a.opts.nallow_missing = args.allow_missing.n;
    a.opts.allow_unexpected = args.allow_unexpected.items;
    a.opts.nallow_unexpected = args.allow_unexpected.n;
    rc = load(a.ckpt, &c);
    if (rc == CLI_OK) {
        /* a file ckpt wrote: the answer is for the safetensors readers */
        ckpt_manifest *stored = NULL;
        int src = ckpt_manifest_stored(&stored, c);

        if (src != 0) {
            cli_error_capture(&err, src);
            rc = cli_report(a.ckpt, &err);
        } else if (stored) {
            a.aliases = ckpt_manifest_count(c) - ckpt_manifest_count(stored);
            opened = c; /* owns the file the view borrows */
            c = stored;
        }
    }
    if (rc == CLI_OK) rc = load(a.spec, &e);
    if (rc == CLI_OK) {
        int lrc = ckpt_match(&r, c, e, &a.opts);

        if (lrc != 0) {
            cli_error_capture(&err, lrc);
            rc = cli_report(a.ckpt, &err);
        } else {
            if (a.json)
                print_json(&a, r);
            else
                print_text(&a, r, ckpt_manifest_count(e));
            rc = ckpt_match_complete(r) ? CLI_OK : CLI_FINDINGS;
        }
    }
    ckpt_match_result_free(r);
    ckpt_manifest_free(c);
    ckpt_manifest_free(opened);
    ckpt_manifest_free(e);
    return rc;
}

const cli_command cli_cmd_match = {
    "match",
    "would this checkpoint load into that model? key by key",
    opts,
    "Compares the tensor keys of CKPT with those SPEC expects, as a strict\n"
    "load_state_dict would: matched keys, missing keys, unexpected keys, shape\n"
    "and dtype mismatches, tied weights. SPEC is a checkpoint of any format,\n"
    "or a JSON manifest with the tensors list of `ckpt inspect --json`.\n"
    "A key tied to a matched one (one parameter: shared storage in SPEC, or\n"
    "the \"ties\" of a manifest from Python's ckpt.manifest(model)) is filled\n"
    "through it: listed as tied, not missing. A BatchNorm num_batches_tracked\n"
    "that CKPT lacks is defaulted by the module, as torch fills it, where\n"
    "CKPT's _metadata gives that module no version 2 (old torchvision weights,\n"
    "plain dicts, safetensors): SPEC must say which keys are BatchNorm counters\n"
    "(the \"batchnorm_counters\" of a manifest from ckpt.manifest(model)).\n"
    "Names are compared exactly. When keys differ by wrapper prefixes\n"
    "(module., _orig_mod., state_dict., _fsdp_wrapped_module., ...) the\n"
    "rewrite that fixes them is named with the number of keys it matches.\n",
    "Exit status: 0 complete match (defaulted keys included), 1 anything else, 2 usage or I/O "
    "error.\n"
    "A match of no key, or of less than half the expected keys, is called\n"
    "out even when allowed.\n",
    run,
    NULL};
