/* summary.c - text and JSON renderings of a training analysis (see
 * summary.h): what the components weigh, whether training can resume, and
 * what metadata a resume or deployment would need. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "summary.h"

/* Nesting of a value rendered in full; deeper parts read "...". */
#define VALUE_DEPTH_MAX 6
/* Items of a container shown as text before "...". */
#define TEXT_ITEMS_MAX 12
/* Metadata text values longer than this are cut in text output. */
#define TEXT_CUT 160

static void put_str(const char *s) { cli_put_text(stdout, s, strlen(s)); }

static const char *where(const ckpt_component *c, int dir_mode) {
    static char buf[1024];

    if (dir_mode && c->name[0])
        snprintf(buf, sizeof buf, "%s:%s", c->file, c->name);
    else if (dir_mode)
        snprintf(buf, sizeof buf, "%s", c->file);
    else
        snprintf(buf, sizeof buf, "%s", cli_name(c->name));
    return buf;
}

/* A directory analysis names components by file. */
static int dir_mode(const ckpt_training *t) {
    size_t n = ckpt_training_file_count(t);

    return n > 1 || (n == 1 && strcmp(ckpt_training_file_name(t, 0),
                                      ckpt_file_path(ckpt_training_file(t, 0))) != 0);
}

/* ------------------------------------------------------------ values */

static void text_value(const ckpt_value *v, unsigned depth) {
    size_t i, n = ckpt_value_len(v);
    ckpt_kind kind = ckpt_value_kind(v);
    const ckpt_tensor *x;
    char shape[128];

    switch (kind) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        if (depth >= VALUE_DEPTH_MAX) {
            fputs("...", stdout);
            return;
        }
        fputs(kind == CKPT_KIND_DICT ? "{" : kind == CKPT_KIND_TUPLE ? "(" : "[", stdout);
        for (i = 0; i < n && i < TEXT_ITEMS_MAX; i++) {
            if (i) fputs(", ", stdout);
            if (kind == CKPT_KIND_DICT) {
                text_value(ckpt_value_key(v, i), depth + 1);
                fputs(": ", stdout);
            }
            text_value(ckpt_value_item(v, i), depth + 1);
        }
        if (n > TEXT_ITEMS_MAX) printf(", ... %zu more", n - TEXT_ITEMS_MAX);
        fputs(kind == CKPT_KIND_DICT ? "}" : kind == CKPT_KIND_TUPLE ? ")" : "]", stdout);
        return;
    case CKPT_KIND_TENSOR:
        x = ckpt_value_tensor(v);
        printf("tensor %s %s", ckpt_dtype_name(ckpt_tensor_dtype(x)),
               cli_shape(shape, sizeof shape, x));
        return;
    case CKPT_KIND_OBJECT:
        cli_put_value(stdout, v);
        if (ckpt_value_object_state(v) && depth < VALUE_DEPTH_MAX) {
            fputc(' ', stdout);
            text_value(ckpt_value_object_state(v), depth + 1);
        }
        return;
    default: cli_put_value(stdout, v); return;
    }
}

static int int_dtype(ckpt_dtype dt) {
    return dt == CKPT_DT_I64 || dt == CKPT_DT_I32 || dt == CKPT_DT_I16 || dt == CKPT_DT_I8 ||
           dt == CKPT_DT_U8 || dt == CKPT_DT_U16 || dt == CKPT_DT_U32 || dt == CKPT_DT_U64 ||
           dt == CKPT_DT_BOOL;
}

static void text_counter(const ckpt_component *c) {
    char buf[40];

    if (ckpt_value_kind(c->value) != CKPT_KIND_TENSOR)
        cli_put_value(stdout, c->value);
    else if (isnan(c->number))
        fputs("?", stdout);
    else if (int_dtype(ckpt_tensor_dtype(ckpt_value_tensor(c->value))))
        printf("%.0f", c->number);
    else
        fputs(cli_fmt_double(buf, c->number), stdout);
}

/* ------------------------------------------------------------ memory */

/* The text of a string dict key, or "" for other keys. */
static const char *str_key(const ckpt_value *k) {
    size_t len;

    return ckpt_value_kind(k) == CKPT_KIND_STR ? ckpt_value_str(k, &len) : "";
}

/* "params" and "param_names" list parameters; every other key of a param
 * group is a hyperparameter. */
static int is_hyper(const char *key) {
    return strcmp(key, "params") != 0 && strcmp(key, "param_names") != 0;
}

static size_t group_params(const ckpt_value *g) {
    size_t n = ckpt_value_kind(g) == CKPT_KIND_DICT ? ckpt_value_len(g) : 0, i, count = 0;

    for (i = 0; i < n; i++)
        if (strcmp(str_key(ckpt_value_key(g, i)), "params") == 0)
            count = ckpt_value_len(ckpt_value_item(g, i));
    return count;
}

static void text_groups(const ckpt_value *groups) {
    size_t n = ckpt_value_len(groups), i, k, shown;

    for (i = 0; i < n; i++) {
        const ckpt_value *g = ckpt_value_item(groups, i);
        size_t m = ckpt_value_kind(g) == CKPT_KIND_DICT ? ckpt_value_len(g) : 0,
               np = group_params(g);

        printf("      group %zu (%zu parameter%s):", i, np, cli_plural(np));
        for (k = shown = 0; k < m; k++) {
            const char *key = str_key(ckpt_value_key(g, k));

            if (key[0] == '\0' || !is_hyper(key)) continue;
            printf("%s ", shown++ ? "," : "");
            put_str(key);
            fputc('=', stdout);
            text_value(ckpt_value_item(g, k), 0);
        }
        fputc('\n', stdout);
    }
}

/* Per-kind totals. */
typedef struct totals {
    uint64_t components[CKPT_COMPONENT_OTHER + 1];
    uint64_t tensors[CKPT_COMPONENT_OTHER + 1];
    uint64_t elements[CKPT_COMPONENT_OTHER + 1];
    uint64_t bytes[CKPT_COMPONENT_OTHER + 1];
    uint64_t param_bytes, state_bytes;
} totals;

/* 1 for model weights in a directory's file other than its weights file:
 * a copy of one save (pytorch_model.bin beside model.safetensors), which
 * is listed but not added to the totals (a directory's model weights in
 * unrelated files are refused, never combined). */
static int weights_copy(const ckpt_training *t, const ckpt_component *c) {
    const char *w = ckpt_training_weights_path(t), *slash;

    if (c->kind != CKPT_COMPONENT_MODEL || !dir_mode(t) || w == NULL || c->file == NULL) return 0;
    slash = strrchr(w, '/');
    return strcmp(slash ? slash + 1 : w, c->file) != 0;
}

static totals sum(const ckpt_training *t) {
    size_t n = ckpt_training_component_count(t), i;
    totals s;

    memset(&s, 0, sizeof s);
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);
        unsigned k = (unsigned)c->kind;

        if (k > CKPT_COMPONENT_OTHER || weights_copy(t, c)) continue;
        s.components[k]++;
        s.tensors[k] += c->tensors;
        s.elements[k] += c->elements;
        s.bytes[k] += c->bytes;
        s.param_bytes += c->kind == CKPT_COMPONENT_MODEL ? c->param_bytes : 0;
        s.state_bytes += c->state_bytes;
    }
    return s;
}

static void pad(size_t used, size_t width) {
    for (; used < width; used++) fputc(' ', stdout);
}

static void text_memory(const ckpt_training *t) {
    size_t n = ckpt_training_component_count(t), i, w = 5, len, k;
    int dm = dir_mode(t);
    totals s = sum(t);
    double ratio = ckpt_training_optimizer_ratio(t);
    char h[32], label[1200];

    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        len = cli_text_width(where(c, dm), strlen(where(c, dm)));
        if (c->kind != CKPT_COMPONENT_COUNTER && len > w) w = len < 48 ? len : 48;
    }
    printf("  %s%-9s  %-*s  %-22s  %7s  %10s  %12s%s\n", cli_color(CLI_BOLD), "KIND", (int)w,
           "WHERE", "TYPE", "TENSORS", "ELEMENTS", "BYTES", cli_color(CLI_RESET));
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind == CKPT_COMPONENT_COUNTER) continue; /* under resume */
        printf("  %-9s  ", ckpt_component_kind_name(c->kind));
        snprintf(label, sizeof label, "%s", where(c, dm));
        pad(cli_put_text(stdout, label, strlen(label)), w);
        printf("  %-22s  %7" PRIu64 "  %10" PRIu64 "  %12" PRIu64 "\n", c->type, c->tensors,
               c->elements, c->bytes);
    }
    fputs("  total:", stdout);
    for (k = i = 0; i <= CKPT_COMPONENT_OTHER; i++)
        if (s.components[i] && i != CKPT_COMPONENT_COUNTER)
            printf("%s %s %s", k++ ? "," : "", ckpt_component_kind_name((ckpt_component_kind)i),
                   cli_human_bytes(h, s.bytes[i]));
    fputc('\n', stdout);
    if (!isnan(ratio))
        printf("  optimizer-to-model ratio: %.2f (optimizer state tensors of "
               "at least one dimension, %" PRIu64 " bytes, per byte of the model "
               "parameters the optimizer updates, %" PRIu64 " bytes)\n",
               ratio, s.state_bytes, ckpt_training_optimized_bytes(t));
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind != CKPT_COMPONENT_OPTIMIZER) continue;
        printf("  optimizer %s at ", c->type);
        put_str(where(c, dm));
        printf(": %" PRIu64 " parameter%s, %" PRIu64 " with state\n", c->params,
               cli_plural(c->params), c->params_with_state);
        if (c->param_groups) text_groups(c->param_groups);
    }
    if (dm) {
        fputs("  files:", stdout);
        for (i = 0; i < ckpt_training_file_count(t); i++) {
            const ckpt_file *f = ckpt_training_file(t, i);

            printf("%s ", i ? "," : "");
            put_str(ckpt_training_file_name(t, i));
            printf(" (%s, %s)", ckpt_format_name(ckpt_file_format(f)),
                   cli_human_bytes(h, ckpt_file_size(f)));
        }
        fputc('\n', stdout);
    }
    if (ckpt_training_ignored_count(t)) {
        fputs("  not analysed (no checkpoint, a subfolder, or a .bak backup):", stdout);
        for (i = 0; i < ckpt_training_ignored_count(t); i++) {
            printf("%s ", i ? "," : "");
            put_str(ckpt_training_ignored(t, i));
        }
        fputc('\n', stdout);
    }
}

/* A part as text, or why there is none. */
static void show(const ckpt_training *t, void (*as_text)(const ckpt_training *)) {
    if (t == NULL)
        puts("  not available: the file could not be opened");
    else
        as_text(t);
}

void cli_summary_memory(const ckpt_training *t) { show(t, text_memory); }

/* ------------------------------------------------------------ resume */

static void text_resume(const ckpt_training *t) {
    ckpt_resume r = ckpt_training_resume(t);
    size_t i, n = ckpt_training_component_count(t), k = 0;
    int dm = dir_mode(t);

    printf("  %s%s%s\n",
           cli_color(r == CKPT_RESUME_FULL           ? CLI_GREEN
                     : r == CKPT_RESUME_WEIGHTS_ONLY ? CLI_BOLD
                                                     : CLI_YELLOW),
           ckpt_resume_name(r), cli_color(CLI_RESET));
    for (i = 0; i < ckpt_training_reason_count(t); i++) {
        fputs("    ", stdout);
        put_str(ckpt_training_reason(t, i));
        fputc('\n', stdout);
    }
    for (i = 0; i < ckpt_training_warning_count(t); i++) {
        printf("  %swarning%s: ", cli_color(CLI_YELLOW), cli_color(CLI_RESET));
        put_str(ckpt_training_warning(t, i));
        fputc('\n', stdout);
    }
    for (i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(t, i);

        if (c->kind != CKPT_COMPONENT_COUNTER) continue;
        fputs(k++ ? ", " : "  counters: ", stdout);
        put_str(where(c, dm));
        fputs(" = ", stdout);
        text_counter(c);
        printf(" (%s)", c->type);
    }
    if (k) fputc('\n', stdout);
}

void cli_summary_resume(const ckpt_training *t) { show(t, text_resume); }

/* ------------------------------------------------------------ metadata */

static const char *const topic_titles[CKPT_META_TOPIC_COUNT] = {
    "architecture config", "dtype intent", "parallel layout", "library versions", "other"};

/* The topics a resume or deployment needs (not "other"). */
#define NEEDED_TOPICS CKPT_META_OTHER

static int topic_present(const ckpt_training *t, unsigned topic) {
    size_t i;

    for (i = 0; i < ckpt_training_meta_count(t); i++)
        if ((unsigned)ckpt_training_meta(t, i)->topic == topic) return 1;
    return 0;
}

static void text_metadata(const ckpt_training *t) {
    size_t n = ckpt_training_meta_count(t), i, k = 0, len;
    int dm = dir_mode(t);
    unsigned topic;

    for (topic = 0; topic < CKPT_META_TOPIC_COUNT; topic++) {
        if (!topic_present(t, topic)) continue;
        printf("  %s:\n", topic_titles[topic]);
        for (i = 0; i < n; i++) {
            const ckpt_meta_entry *e = ckpt_training_meta(t, i);

            if ((unsigned)e->topic != topic) continue;
            fputs("    ", stdout);
            put_str(e->key);
            fputs(" = ", stdout);
            if (e->text) {
                len = strlen(e->text);
                cli_put_text(stdout, e->text, len < TEXT_CUT ? len : TEXT_CUT);
                if (len > TEXT_CUT) printf("... (%zu bytes)", len);
            } else {
                text_value(e->value, 0);
            }
            if (dm) {
                fputs(" (", stdout);
                put_str(e->file);
                fputc(')', stdout);
            }
            fputc('\n', stdout);
        }
    }
    for (topic = 0; topic < NEEDED_TOPICS; topic++) {
        if (topic_present(t, topic)) continue;
        printf("%s%s", k++ ? ", " : "  not carried: ", topic_titles[topic]);
    }
    if (k) puts(" (a resume or a deployment needs them from elsewhere)");
}

void cli_summary_metadata(const ckpt_training *t) { show(t, text_metadata); }

/* ------------------------------------------------------------ inspect */

int cli_summary_inspect(const char *path, int json) {
    struct stat st;
    ckpt_file *f = NULL;
    ckpt_training *t = NULL;
    /* a ckpt store stands for the generation LATEST names (ckpt_open) */
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !ckpt_is_store_dir(path), rc;
    cli_error e;
    char *text = NULL;
    size_t len = 0;

    if (is_dir) {
        rc = ckpt_training_analyze_dir(&t, path, NULL);
    } else {
        rc = ckpt_open(&f, path, NULL);
        if (rc == 0) rc = ckpt_training_analyze(&t, f);
    }
    if (rc != 0) {
        cli_error_capture(&e, rc);
        ckpt_close(f);
        return cli_report(path, &e);
    }
    if (json) {
        rc = ckpt_training_json(&text, &len, t, path,
                                is_dir ? "directory" : ckpt_format_name(ckpt_file_format(f)));
        if (rc == 0) {
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
        } else {
            fputs("ckpt: out of memory\n", stderr);
            rc = CLI_USAGE;
        }
        ckpt_string_free(text);
    } else {
        fputs(cli_color(CLI_BOLD), stdout);
        put_str(path);
        printf("%s: %s\n\n%scomponents%s\n", cli_color(CLI_RESET),
               is_dir ? "directory" : ckpt_format_name(ckpt_file_format(f)), cli_color(CLI_BOLD),
               cli_color(CLI_RESET));
        cli_summary_memory(t);
        printf("\n%sresume%s\n", cli_color(CLI_BOLD), cli_color(CLI_RESET));
        cli_summary_resume(t);
        printf("\n%smetadata%s\n", cli_color(CLI_BOLD), cli_color(CLI_RESET));
        cli_summary_metadata(t);
    }
    ckpt_training_free(t);
    ckpt_close(f);
    return rc;
}
