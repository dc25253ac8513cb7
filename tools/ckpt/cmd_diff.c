/* cmd_diff.c - `ckpt diff A B [--rtol R] [--atol A] [--keys-only]
 * [--normalize] [--json]`: keys only in one file, shape and dtype
 * differences, per common tensor bitwise equality or value differences,
 * non-tensor values (epoch, learning rates...) only in one file or
 * differing, and the key rewrite relating the two key sets (rules at
 * ckpt_diff in ckpt.h). Exit 0 only when identical (within the
 * tolerances). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define SHOW_MAX 50
#define SHAPE_CAP 256

typedef struct diff_args {
    const char *path[2];
    ckpt_diff_options opts;
    int json;
} diff_args;

/* ------------------------------------------------------------ JSON */

static void json_list(cli_json_writer *j, const ckpt_diff_result *r, ckpt_diff_list l) {
    size_t i, n = ckpt_diff_count(r, l);
    const ckpt_manifest_entry *a, *b;

    cli_json_array_begin(j);
    for (i = 0; i < n; i++) {
        if (l == CKPT_DIFF_ONLY_IN_A || l == CKPT_DIFF_ONLY_IN_B) {
            cli_json_string(j, ckpt_diff_name(r, l, i));
            continue;
        }
        ckpt_diff_pair(r, l, i, &a, &b);
        cli_json_object_begin(j);
        cli_json_key(j, "name");
        cli_json_string(j, ckpt_diff_name(r, l, i));
        cli_json_key(j, "a");
        if (l == CKPT_DIFF_SHAPE_MISMATCH)
            cli_json_dims(j, a->ndim, a->shape);
        else
            cli_json_string(j, a->dtype);
        cli_json_key(j, "b");
        if (l == CKPT_DIFF_SHAPE_MISMATCH)
            cli_json_dims(j, b->ndim, b->shape);
        else
            cli_json_string(j, b->dtype);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
}

static void json_pair(cli_json_writer *j, const char *key, uint64_t a, uint64_t b) {
    cli_json_key(j, key);
    cli_json_object_begin(j);
    cli_json_key(j, "a");
    cli_json_uint(j, a);
    cli_json_key(j, "b");
    cli_json_uint(j, b);
    cli_json_object_end(j);
}

static void json_tensor(cli_json_writer *j, const ckpt_tensor_diff *d) {
    size_t k;

    cli_json_object_begin(j);
    cli_json_key(j, "name");
    cli_json_string(j, d->name);
    cli_json_key(j, "bitwise_equal");
    cli_json_bool(j, d->bitwise_equal);
    cli_json_key(j, "compared");
    cli_json_bool(j, d->compared);
    cli_json_key(j, "numel");
    cli_json_uint(j, d->numel);
    cli_json_key(j, "differing");
    cli_json_uint(j, d->differing);
    cli_json_key(j, "max_abs_diff");
    cli_json_double(j, d->max_abs_diff);
    cli_json_key(j, "max_rel_diff");
    cli_json_double(j, d->max_rel_diff);
    json_pair(j, "nan", d->nan_a, d->nan_b);
    json_pair(j, "inf", d->inf_a, d->inf_b);
    cli_json_key(j, "nonfinite_mismatch");
    cli_json_uint(j, d->nonfinite_mismatch);
    cli_json_key(j, "positions");
    cli_json_array_begin(j);
    for (k = 0; k < d->npositions; k++) cli_json_uint(j, d->positions[k]);
    cli_json_array_end(j);
    cli_json_object_end(j);
}

/* A leaf as {"type", "value"}. */
static void json_typed(cli_json_writer *j, const ckpt_value *v) {
    cli_json_object_begin(j);
    cli_json_key(j, "type");
    cli_json_string(j, ckpt_kind_name(ckpt_value_kind(v)));
    cli_json_key(j, "value");
    cli_json_leaf(j, v);
    cli_json_object_end(j);
}

static void json_value_names(cli_json_writer *j, const ckpt_diff_result *r,
                             ckpt_diff_value_list l) {
    size_t i, n = ckpt_diff_value_count(r, l);

    cli_json_array_begin(j);
    for (i = 0; i < n; i++) cli_json_string(j, ckpt_diff_value(r, l, i)->name);
    cli_json_array_end(j);
}

static void json_values(cli_json_writer *j, const ckpt_diff_result *r) {
    size_t i, n = ckpt_diff_value_count(r, CKPT_DIFF_VALUES_DIFFERING);

    cli_json_object_begin(j);
    cli_json_key(j, "only_in_a");
    json_value_names(j, r, CKPT_DIFF_VALUES_ONLY_IN_A);
    cli_json_key(j, "only_in_b");
    json_value_names(j, r, CKPT_DIFF_VALUES_ONLY_IN_B);
    cli_json_key(j, "differing");
    cli_json_array_begin(j);
    for (i = 0; i < n; i++) {
        const ckpt_value_diff *v = ckpt_diff_value(r, CKPT_DIFF_VALUES_DIFFERING, i);

        cli_json_object_begin(j);
        cli_json_key(j, "name");
        cli_json_string(j, v->name);
        cli_json_key(j, "a");
        json_typed(j, v->a);
        cli_json_key(j, "b");
        json_typed(j, v->b);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
    cli_json_key(j, "equal");
    cli_json_uint(j, ckpt_diff_values_equal(r));
    cli_json_object_end(j);
}

static void json_rewrite(cli_json_writer *j, const ckpt_diff_result *r) {
    const ckpt_rewrite *rw = ckpt_diff_rewrite(r);

    if (!rw) {
        cli_json_null(j);
        return;
    }
    cli_json_object_begin(j);
    cli_json_key(j, "description");
    cli_json_string(j, rw->description);
    cli_json_key(j, "matches");
    cli_json_uint(j, rw->matches);
    cli_json_key(j, "applied");
    cli_json_bool(j, rw->applied);
    cli_json_key(j, "note");
    cli_json_string(j, ckpt_diff_rewrite_note(r));
    cli_json_object_end(j);
}

/* The one-sided keys tied to a key both have: [{"name", "tied_to"}...]. */
static void json_tied(cli_json_writer *j, const ckpt_diff_result *r) {
    static const ckpt_diff_list sides[2] = {CKPT_DIFF_ONLY_IN_A, CKPT_DIFF_ONLY_IN_B};
    size_t s, i;

    cli_json_array_begin(j);
    for (s = 0; s < 2; s++)
        for (i = 0; i < ckpt_diff_count(r, sides[s]); i++) {
            const char *to = ckpt_diff_tied_to(r, sides[s], i);

            if (!to) continue;
            cli_json_object_begin(j);
            cli_json_key(j, "name");
            cli_json_string(j, ckpt_diff_name(r, sides[s], i));
            cli_json_key(j, "tied_to");
            cli_json_string(j, to);
            cli_json_object_end(j);
        }
    cli_json_array_end(j);
}

static void print_json(const diff_args *a, const ckpt_diff_result *r) {
    size_t i, n;
    cli_json_writer j;

    cli_json_init(&j, stdout);
    cli_json_object_begin(&j);
    cli_json_key(&j, "a");
    cli_json_string(&j, a->path[0]);
    cli_json_key(&j, "b");
    cli_json_string(&j, a->path[1]);
    cli_json_key(&j, "identical");
    cli_json_bool(&j, ckpt_diff_identical(r));
    cli_json_key(&j, "keys_only");
    cli_json_bool(&j, a->opts.keys_only);
    cli_json_key(&j, "only_in_a");
    json_list(&j, r, CKPT_DIFF_ONLY_IN_A);
    cli_json_key(&j, "only_in_b");
    json_list(&j, r, CKPT_DIFF_ONLY_IN_B);
    cli_json_key(&j, "tied");
    json_tied(&j, r);
    cli_json_key(&j, "shape_mismatch");
    json_list(&j, r, CKPT_DIFF_SHAPE_MISMATCH);
    cli_json_key(&j, "dtype_mismatch");
    json_list(&j, r, CKPT_DIFF_DTYPE_MISMATCH);
    cli_json_key(&j, "equal");
    if (a->opts.keys_only)
        cli_json_null(&j);
    else
        cli_json_uint(&j, ckpt_diff_equal_count(r));
    cli_json_key(&j, "tensors");
    if (a->opts.keys_only) {
        cli_json_null(&j);
    } else {
        cli_json_array_begin(&j);
        n = ckpt_diff_tensor_count(r);
        for (i = 0; i < n; i++) json_tensor(&j, ckpt_diff_tensor(r, i));
        cli_json_array_end(&j);
    }
    cli_json_key(&j, "values");
    if (a->opts.keys_only)
        cli_json_null(&j);
    else
        json_values(&j, r);
    cli_json_key(&j, "rewrite");
    json_rewrite(&j, r);
    cli_json_object_end(&j);
    fputc('\n', stdout);
}

/* ------------------------------------------------------------ text */

/* The lists of a result, for cli_natural_order. */
typedef struct list_ref {
    const ckpt_diff_result *r;
    int l;
} list_ref;

static const char *key_name(const void *ctx, size_t i) {
    const list_ref *ref = ctx;

    return ckpt_diff_name(ref->r, (ckpt_diff_list)ref->l, i);
}

static const char *tensor_name(const void *ctx, size_t i) {
    return ckpt_diff_tensor(((const list_ref *)ctx)->r, i)->name;
}

static const char *value_name(const void *ctx, size_t i) {
    const list_ref *ref = ctx;

    return ckpt_diff_value(ref->r, (ckpt_diff_value_list)ref->l, i)->name;
}

static void print_list(const ckpt_diff_result *r, ckpt_diff_list l, const char *title) {
    size_t i, n = ckpt_diff_count(r, l);
    char sa[SHAPE_CAP], sb[SHAPE_CAP];
    const ckpt_manifest_entry *a, *b;
    list_ref ref = {r, (int)l};
    size_t *order;

    if (n == 0) return;
    order = cli_natural_order(key_name, &ref, n);
    printf("%s%s (%zu):%s\n", cli_color(CLI_BOLD), title, n, cli_color(CLI_RESET));
    for (i = 0; i < n && i < SHOW_MAX; i++) {
        size_t k = order ? order[i] : i;

        fputs("  ", stdout);
        cli_put_name(stdout, ckpt_diff_name(r, l, k));
        ckpt_diff_pair(r, l, k, &a, &b);
        if (l == CKPT_DIFF_SHAPE_MISMATCH)
            printf(": A %s, B %s", cli_dims(sa, sizeof sa, a->ndim, a->shape),
                   cli_dims(sb, sizeof sb, b->ndim, b->shape));
        else if (l == CKPT_DIFF_DTYPE_MISMATCH)
            printf(": A %s, B %s", a->dtype, b->dtype);
        else if (ckpt_diff_tied_to(r, l, k)) {
            fputs(" (tied to ", stdout);
            cli_put_name(stdout, ckpt_diff_tied_to(r, l, k));
            printf(", which both have: %s saved the tied weight once)",
                   l == CKPT_DIFF_ONLY_IN_A ? "B" : "A");
        }
        fputc('\n', stdout);
    }
    if (n > SHOW_MAX) printf("  ... and %zu more (--json lists all)\n", n - SHOW_MAX);
    free(order);
}

static const char *num(char buf[40], double v) {
    if (isinf(v)) return "inf";
    snprintf(buf, 40, "%.6g", v);
    return buf;
}

static void print_tensor(const ckpt_tensor_diff *d) {
    char b1[40], b2[40];
    size_t k;

    fputs("  ", stdout);
    cli_put_name(stdout, d->name);
    if (!d->compared) {
        fputs(": bytes differ (values not comparable for these dtypes)\n", stdout);
        return;
    }
    if (d->differing == 0) {
        printf(": bytes differ, values %s (max abs diff %s)\n",
               d->max_abs_diff == 0 ? "equal" : "within tolerance", num(b1, d->max_abs_diff));
        return;
    }
    printf(": %" PRIu64 " of %" PRIu64 " element%s differ%s, max abs diff %s, "
           "max rel diff %s",
           d->differing, d->numel, cli_plural(d->numel), d->differing == 1 ? "s" : "",
           num(b1, d->max_abs_diff), num(b2, d->max_rel_diff));
    if (d->nan_a || d->nan_b || d->inf_a || d->inf_b)
        printf("; NaN A %" PRIu64 " B %" PRIu64 ", Inf A %" PRIu64 " B %" PRIu64, d->nan_a,
               d->nan_b, d->inf_a, d->inf_b);
    if (d->nonfinite_mismatch) {
        printf("; NaN/Inf disagree at %" PRIu64 " position%s [", d->nonfinite_mismatch,
               cli_plural(d->nonfinite_mismatch));
        for (k = 0; k < d->npositions; k++) printf("%s%" PRIu64, k ? ", " : "", d->positions[k]);
        fputs(d->nonfinite_mismatch > d->npositions ? ", ...]" : "]", stdout);
    }
    fputc('\n', stdout);
}

/* "A 2, B 7", with the kinds when they differ ("A 0 (int), B 0.0
 * (float)"). */
static void put_value_pair(const ckpt_value *va, const ckpt_value *vb) {
    int kinds = ckpt_value_kind(va) != ckpt_value_kind(vb);

    fputs("A ", stdout);
    cli_put_value(stdout, va);
    if (kinds) printf(" (%s)", ckpt_kind_name(ckpt_value_kind(va)));
    fputs(", B ", stdout);
    cli_put_value(stdout, vb);
    if (kinds) printf(" (%s)", ckpt_kind_name(ckpt_value_kind(vb)));
}

static void print_values(const ckpt_diff_result *r, ckpt_diff_value_list l, const char *title) {
    size_t i, n = ckpt_diff_value_count(r, l);
    list_ref ref = {r, (int)l};
    size_t *order;

    if (n == 0) return;
    order = cli_natural_order(value_name, &ref, n);
    printf("%s%s (%zu):%s\n", cli_color(CLI_BOLD), title, n, cli_color(CLI_RESET));
    for (i = 0; i < n && i < SHOW_MAX; i++) {
        const ckpt_value_diff *v = ckpt_diff_value(r, l, order ? order[i] : i);

        fputs("  ", stdout);
        cli_put_name(stdout, v->name);
        if (l == CKPT_DIFF_VALUES_DIFFERING) {
            fputs(": ", stdout);
            put_value_pair(v->a, v->b);
        } else {
            fputs(" = ", stdout);
            cli_put_value(stdout, v->a ? v->a : v->b);
        }
        fputc('\n', stdout);
    }
    if (n > SHOW_MAX) printf("  ... and %zu more (--json lists all)\n", n - SHOW_MAX);
    free(order);
}

/* The rewrite relating the key sets: a hint, or what --normalize did. */
static void print_rewrite(const ckpt_diff_result *r) {
    const ckpt_rewrite *rw = ckpt_diff_rewrite(r);
    const char *note = ckpt_diff_rewrite_note(r);

    if (!rw) return;
    if (rw->applied) {
        fputs("keys: B's keys renamed before comparing (", stdout);
        cli_put_text(stdout, rw->description, strlen(rw->description));
        printf(", %" PRIu64 " key%s): ", rw->matches, cli_plural(rw->matches));
        cli_put_text(stdout, note, strlen(note));
        fputc('\n', stdout);
        return;
    }
    fputs("keys: ", stdout);
    cli_put_text(stdout, note, strlen(note));
    fputs("; compare with --normalize\n", stdout);
}

static void print_text(const diff_args *a, const ckpt_diff_result *r) {
    size_t i, n = ckpt_diff_tensor_count(r), differ = 0, within = 0;
    size_t vd = ckpt_diff_value_count(r, CKPT_DIFF_VALUES_DIFFERING);
    uint64_t nv = ckpt_diff_values_equal(r) + vd +
                  ckpt_diff_value_count(r, CKPT_DIFF_VALUES_ONLY_IN_A) +
                  ckpt_diff_value_count(r, CKPT_DIFF_VALUES_ONLY_IN_B);

    for (i = 0; i < n; i++) {
        const ckpt_tensor_diff *d = ckpt_diff_tensor(r, i);

        differ += !d->compared || d->differing;
        within += d->compared && !d->differing;
    }
    if (ckpt_diff_identical(r))
        printf("%sIDENTICAL%s", cli_color(CLI_GREEN), cli_color(CLI_RESET));
    else
        printf("%sDIFFERENT%s", cli_color(CLI_RED), cli_color(CLI_RESET));
    printf(": %zu only in A, %zu only in B, %zu shape, %zu dtype "
           "difference%s",
           ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_A), ckpt_diff_count(r, CKPT_DIFF_ONLY_IN_B),
           ckpt_diff_count(r, CKPT_DIFF_SHAPE_MISMATCH),
           ckpt_diff_count(r, CKPT_DIFF_DTYPE_MISMATCH),
           ckpt_diff_count(r, CKPT_DIFF_DTYPE_MISMATCH) == 1 ? "" : "s");
    if (a->opts.keys_only) {
        fputs(" (keys only)", stdout);
    } else {
        printf("; %" PRIu64 " key%s bitwise equal, ", ckpt_diff_equal_count(r),
               cli_plural(ckpt_diff_equal_count(r)));
        /* keys whose bytes differ but whose values are within --atol/--rtol:
         * counted, so that the counts add up to the common keys */
        if (within) printf("%zu within tolerance, ", within);
        printf("%zu with different values", differ);
        if (nv)
            printf("; values: %zu only in A, %zu only in B, %zu differ%s, "
                   "%" PRIu64 " equal",
                   ckpt_diff_value_count(r, CKPT_DIFF_VALUES_ONLY_IN_A),
                   ckpt_diff_value_count(r, CKPT_DIFF_VALUES_ONLY_IN_B), vd, vd == 1 ? "s" : "",
                   ckpt_diff_values_equal(r));
    }
    fputs("\n  A: ", stdout);
    cli_put_text(stdout, a->path[0], strlen(a->path[0]));
    fputs("\n  B: ", stdout);
    cli_put_text(stdout, a->path[1], strlen(a->path[1]));
    fputc('\n', stdout);
    print_rewrite(r);
    print_list(r, CKPT_DIFF_ONLY_IN_A, "only in A");
    print_list(r, CKPT_DIFF_ONLY_IN_B, "only in B");
    print_list(r, CKPT_DIFF_SHAPE_MISMATCH, "shape mismatch");
    print_list(r, CKPT_DIFF_DTYPE_MISMATCH, "dtype mismatch");
    if (n) {
        list_ref ref = {r, 0};
        size_t *order = cli_natural_order(tensor_name, &ref, n);

        printf("%stensors whose bytes differ (%zu):%s\n", cli_color(CLI_BOLD), n,
               cli_color(CLI_RESET));
        for (i = 0; i < n && i < SHOW_MAX; i++)
            print_tensor(ckpt_diff_tensor(r, order ? order[i] : i));
        if (n > SHOW_MAX) printf("  ... and %zu more (--json lists all)\n", n - SHOW_MAX);
        free(order);
    }
    print_values(r, CKPT_DIFF_VALUES_DIFFERING, "values that differ");
    print_values(r, CKPT_DIFF_VALUES_ONLY_IN_A, "values only in A");
    print_values(r, CKPT_DIFF_VALUES_ONLY_IN_B, "values only in B");
}

/* ------------------------------------------------------------ command */

/* A tolerance: a finite number >= 0. */
static int parse_tol(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !(v >= 0) || isinf(v)) return -1;
    *out = v;
    return 0;
}

static struct {
    const char *a, *b, *rtol, *atol;
    cli_list exclude;
    int keys_only, normalize, json;
} args;

static const cli_opt opts[] = {
    {CLI_OPT_ARG, "A", 0, &args.a, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_ARG, "B", 0, &args.b, NULL, CLI_OPT_REQUIRED, NULL},
    {CLI_OPT_VALUE, "rtol", 0, &args.rtol, "R", 0, "relative tolerance (default 0)"},
    {CLI_OPT_VALUE, "atol", 0, &args.atol, "A", 0, "absolute tolerance (default 0)"},
    {CLI_OPT_BOOL, "keys-only", 0, &args.keys_only, NULL, 0,
     "names, dtypes and shapes only; A and B may be JSON "
     "manifests (`ckpt inspect --json` output)"},
    {CLI_OPT_BOOL, "normalize", 0, &args.normalize, NULL, 0,
     "rename B's keys by the rewrite diff names (module., "
     "_orig_mod., a training checkpoint's model.) first"},
    {CLI_OPT_VALUES, "exclude", 0, &args.exclude, "GLOB", 0,
     "leave out tensors and values named GLOB ('*' crosses '.'), e.g. "
     "--exclude 'optimizer.*'; repeatable"},
    {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0, "one JSON object on stdout"},
    {0}};

/* Fills *a from the parsed options; CLI_CONTINUE or a usage error. */
static int parse(const cli_command *cmd, diff_args *a) {
    a->path[0] = args.a;
    a->path[1] = args.b;
    a->json = args.json;
    a->opts.keys_only = args.keys_only;
    a->opts.normalize = args.normalize;
    a->opts.exclude = args.exclude.items;
    a->opts.nexclude = args.exclude.n;
    for (size_t i = 0; i < args.exclude.n; i++)
        if (args.exclude.items[i][0] == '\0') return cli_usage_error(cmd, "--exclude needs a glob");
    if (args.rtol && parse_tol(args.rtol, &a->opts.rtol) != 0)
        return cli_usage_error(cmd, "--rtol needs a number >= 0");
    if (args.atol && parse_tol(args.atol, &a->opts.atol) != 0)
        return cli_usage_error(cmd, "--atol needs a number >= 0");
    return CLI_CONTINUE;
}

static int run(const cli_command *cmd, int argc, char **argv) {
    diff_args a;
    ckpt_diff_options init = CKPT_DIFF_OPTIONS_INIT;
    ckpt_manifest *m[2] = {NULL, NULL};
    ckpt_diff_result *r = NULL;
    cli_error e;
    int rc, k;

    memset(&a, 0, sizeof a);
    a.opts = init;
    rc = cli_opt_parse(cmd, argc, argv);
    if (rc == CLI_CONTINUE) rc = parse(cmd, &a);
    if (rc != CLI_CONTINUE) return rc;
    rc = CLI_OK;
    for (k = 0; k < 2 && rc == CLI_OK; k++) {
        int lrc = ckpt_manifest_load(&m[k], a.path[k], NULL);

        if (lrc != 0) {
            cli_error_capture(&e, lrc);
            rc = cli_report(a.path[k], &e);
        } else if (!a.opts.keys_only && !ckpt_manifest_file(m[k])) {
            rc = cli_usage_error(cmd,
                                 "%s is a manifest: values need "
                                 "checkpoints (use --keys-only)",
                                 a.path[k]);
        }
    }
    if (rc == CLI_OK) {
        int lrc = ckpt_diff(&r, m[0], m[1], &a.opts);

        if (lrc != 0) {
            cli_error_capture(&e, lrc);
            rc = cli_report(a.path[0], &e);
        } else {
            if (a.json)
                print_json(&a, r);
            else
                print_text(&a, r);
            rc = ckpt_diff_identical(r) ? CLI_OK : CLI_FINDINGS;
        }
    }
    ckpt_diff_result_free(r);
    ckpt_manifest_free(m[0]);
    ckpt_manifest_free(m[1]);
    return rc;
}

const cli_command cli_cmd_diff = {
    "diff",
    "compare two checkpoints key by key and value by value",
    opts,
    "Lists keys only in A or only in B, shape and dtype differences and, for\n"
    "each common tensor, whether its bytes are equal, or how its values\n"
    "differ: elements outside tolerance, max abs and rel difference, NaN and\n"
    "Inf disagreements. Floats of every width are compared as values (F16,\n"
    "BF16 and F8 widened); an element differs unless |a-b| <= atol +\n"
    "rtol*|b| (NaN equals NaN). Non-tensor values (epoch, learning rates,\n"
    "step counters) are compared too: ints and strings exactly, floats with\n"
    "the same tolerances.\n"
    "A key only in one file that is tied to a key both have (one tensor\n"
    "under both names in its own file, or named by the other file's\n"
    "metadata as the copy it kept, as ckpt match finds ties) is listed with\n"
    "`(tied to KEY, which both have: B saved the tied weight once)`\n"
    "(safetensors and Hugging Face drop a tied lm_head.weight); --json lists\n"
    "them in tied.\n",
    "Exit status: 0 identical (values within the tolerances), 1 different,\n"
    "2 usage or I/O error.\n",
    run,
    NULL};
