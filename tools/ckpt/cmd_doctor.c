/* cmd_doctor.c - `ckpt doctor FILE|DIR [--json]`: a health report.
 *
 * The report is a list of sections (the `sections` table). First the file
 * is examined once (struct doctor: open, verify, totals, top-level
 * summary, training analysis); then the verdict line is built from each
 * section's concern, if any, and each section renders itself as text or as
 * JSON. A new section is one function pair and one table row. A directory
 * (Hugging Face Trainer layout) is analysed as one training checkpoint; the
 * other sections examine its main weights file. CKPT_DOCTOR_TIMINGS=1 in
 * the environment prints the seconds each step took on stderr (bench/). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "doctor.h"
#include "summary.h"

/* Bounds on walking the object tree, which hostile pickles can make deep
 * or (through shared references) exponentially wide. */
#define WALK_DEPTH_MAX 1000u
#define WALK_NODES_MAX ((uint64_t)1 << 24)
/* Names listed per "not vouched for" line before "and N more". */
#define LIST_MAX 8
/* Top-level entries shown as text (JSON has them all). */
#define TOP_MAX 50

/* One top-level entry: a key of the root dict, the root itself when it is
 * not a dict, or a group of safetensors tensors sharing a first name
 * segment (v == NULL). */
typedef struct entry {
    const char *name; /* borrowed, name_len bytes */
    size_t name_len;
    const ckpt_value *v;
    uint64_t tensors, elements; /* elements: numel, summed */
} entry;

typedef struct doctor {
    const char *path;
    ckpt_file *f;   /* NULL when the file could not be opened */
    uint64_t size;  /* bytes */
    int intact;     /* opened and verified */
    cli_error err;  /* why not, when !intact */
    ckpt_verify_report report;
    uint64_t elements, tensor_bytes; /* numel and nbytes, summed */
    size_t objects; /* opaque objects among the values */
    entry *top;
    size_t n_top;
    int top_cut;    /* the walk hit its bounds; tallies are partial */
    const char *dir;        /* DIR as given, or NULL for a FILE */
    ckpt_training *training; /* NULL when the file could not be opened */
    struct file_check *checks; /* DIR: its other files, verified; a
                                  sharded set: its shards */
    size_t n_checks;
    int sharded;            /* checks are the shards of the set */
    const char *detected;   /* a file that could not be opened: the format
                               its first bytes show, or NULL */
    cli_doctor_safety safety;   /* scan of the file, or of every file of DIR */
    cli_doctor_keys keys;       /* wrapper prefixes on tensor keys */
} doctor;

/* A checkpoint file of a directory besides the main weights file. */
typedef struct file_check {
    const char *name; /* inside the directory; borrowed from training */
    int ok;
    uint64_t bytes;   /* checked, up to the first problem */
    cli_error err;    /* why not, when !ok */
} file_check;

/* ------------------------------------------------------------ timings */

/* Seconds per step, printed on stderr when CKPT_DOCTOR_TIMINGS is set. */
#define TIMINGS_MAX 32
static struct {
    const char *name[TIMINGS_MAX];
    double seconds[TIMINGS_MAX];
    size_t n;
} timings;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void timed(const char *name, double since)
{
    if (timings.n < TIMINGS_MAX) {
        timings.name[timings.n] = name;
        timings.seconds[timings.n++] = now() - since;
    }
}

static void print_timings(void)
{
    size_t i;

    if (getenv("CKPT_DOCTOR_TIMINGS") == NULL)
        return;
    for (i = 0; i < timings.n; i++)
        fprintf(stderr, "ckpt doctor: %-16s %.6f s\n", timings.name[i],
                timings.seconds[i]);
}

/* ------------------------------------------------------------ helpers */

static void line_start(void) { fputs("  ", stdout); }

static void put_str(const char *s) { cli_put_text(stdout, s, strlen(s)); }

static int is_container(ckpt_kind kind)
{
    return kind == CKPT_KIND_LIST || kind == CKPT_KIND_TUPLE ||
           kind == CKPT_KIND_SET || kind == CKPT_KIND_DICT;
}

static int is_safetensors(const doctor *d)
{
    ckpt_format fmt = ckpt_file_format(d->f);

    return fmt == CKPT_FORMAT_SAFETENSORS ||
           fmt == CKPT_FORMAT_SAFETENSORS_SHARDED;
}

/* ------------------------------------------------------------ examination */

static void walk(const ckpt_value *v, unsigned depth, entry *e,
                 uint64_t *budget, int *cut)
{
    size_t i, n;
    const ckpt_tensor *t;

    if (*budget == 0 || depth > WALK_DEPTH_MAX) {
        *cut = 1;
        return;
    }
    (*budget)--;
    if (ckpt_value_kind(v) == CKPT_KIND_TENSOR) {
        t = ckpt_value_tensor(v);
        e->tensors++;
        e->elements += t ? ckpt_tensor_numel(t) : 0;
    } else if (is_container(ckpt_value_kind(v))) {
        n = ckpt_value_len(v);
        for (i = 0; i < n && !*cut; i++)
            walk(ckpt_value_item(v, i), depth + 1, e, budget, cut);
    } /* else a leaf; opaque objects are not looked into */
}

/* Text of a dict key: strings as written, ints in decimal, else the kind. */
static const char *key_name(const ckpt_value *k, size_t *len)
{
    const char *s = NULL;

    if (ckpt_value_kind(k) == CKPT_KIND_STR)
        s = ckpt_value_str(k, len);
    else if (ckpt_value_kind(k) == CKPT_KIND_INT)
        s = ckpt_value_int_decimal(k);
    if (s == NULL)
        s = ckpt_kind_name(ckpt_value_kind(k));
    if (ckpt_value_kind(k) != CKPT_KIND_STR)
        *len = strlen(s);
    return s;
}

static int summarise_tree(doctor *d)
{
    const ckpt_value *root = ckpt_file_root(d->f);
    int is_dict = root && ckpt_value_kind(root) == CKPT_KIND_DICT;
    size_t n = is_dict ? ckpt_value_len(root) : (root ? 1 : 0), i;
    uint64_t budget = WALK_NODES_MAX;

    d->top = calloc(n ? n : 1, sizeof *d->top);
    if (d->top == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        entry *e = &d->top[i];

        if (is_dict) {
            e->name = key_name(ckpt_value_key(root, i), &e->name_len);
            e->v = ckpt_value_item(root, i);
        } else {
            e->name = "";
            e->v = root;
        }
        walk(e->v, 1, e, &budget, &d->top_cut);
    }
    d->n_top = n;
    return 0;
}

/* Length of a tensor name's first "."-separated segment. */
static size_t segment_len(const char *name)
{
    const char *dot = strchr(name, '.');

    return dot ? (size_t)(dot - name) : strlen(name);
}

static int cmp_entry_name(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);

    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* safetensors roots are flat: group the tensors by first name segment. */
static int summarise_groups(doctor *d)
{
    size_t n = ckpt_file_tensor_count(d->f), i, g = 0;

    d->top = calloc(n ? n : 1, sizeof *d->top);
    if (d->top == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(d->f, i);

        d->top[i].name = ckpt_tensor_name(t);
        d->top[i].name_len = segment_len(d->top[i].name);
        d->top[i].tensors = 1;
        d->top[i].elements = ckpt_tensor_numel(t);
    }
    qsort(d->top, n, sizeof *d->top, cmp_entry_name);
    for (i = 0; i < n; i++) {
        if (g > 0 && cmp_entry_name(&d->top[g - 1], &d->top[i]) == 0) {
            d->top[g - 1].tensors++;
            d->top[g - 1].elements += d->top[i].elements;
        } else {
            d->top[g++] = d->top[i];
        }
    }
    d->n_top = g;
    return 0;
}

/* The format a file's first bytes show (ckpt_detect_format), for a file
 * that could not be opened; NULL when they show none. */
static const char *detect_format(const char *path)
{
    unsigned char head[4096];
    size_t n = 0;
    ckpt_format fmt;
    FILE *fp = fopen(path, "rb");

    if (fp) {
        n = fread(head, 1, sizeof head, fp);
        fclose(fp);
    }
    fmt = ckpt_detect_format(head, n);
    return fmt == CKPT_FORMAT_UNKNOWN ? NULL : ckpt_format_name(fmt);
}

/* A storage of a sharded set, for the per-shard tallies. */
typedef struct shard_storage {
    const char *shard;
    uint64_t id, nbytes;
} shard_storage;

static int cmp_shard_storage(const void *a, const void *b)
{
    const shard_storage *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);

    return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* Verifies one shard on its own, to say which shard of a set that failed
 * verification is corrupt. -1 when out of memory. */
static int verify_shard(const doctor *d, file_check *c)
{
    const char *slash = strrchr(d->path, '/');
    int dir_len = slash ? (int)(slash - d->path) + 1 : 0;
    ckpt_verify_report report = { 0, 0, 0, 0 };
    ckpt_file *f = NULL;
    char *path = NULL;
    int rc;

    if (asprintf(&path, "%.*s%s", dir_len, d->path, c->name) < 0)
        return -1;
    rc = ckpt_open(&f, path, NULL);
    if (rc == 0)
        rc = ckpt_verify(f, &report);
    c->ok = rc == 0;
    c->bytes = report.bytes;
    if (rc != 0)
        cli_error_capture(&c->err, rc);
    ckpt_close(f);
    free(path);
    return 0;
}

/* A sharded set: one check per shard file (the tensors' member, as the
 * index names it) with the bytes of its storages. When the set verified,
 * so did every shard; otherwise each is verified alone to find the bad
 * ones. -1 when out of memory. */
static int check_shards(doctor *d)
{
    size_t n = ckpt_file_tensor_count(d->f), i;
    shard_storage *ss = calloc(n ? n : 1, sizeof *ss);

    d->checks = calloc(n ? n : 1, sizeof *d->checks);
    if (ss == NULL || d->checks == NULL) {
        free(ss);
        return -1;
    }
    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(d->f, i);

        ss[i].shard = ckpt_tensor_member(t);
        ss[i].id = ckpt_tensor_storage_id(t);
        ss[i].nbytes = ckpt_tensor_storage_nbytes(t);
    }
    qsort(ss, n, sizeof *ss, cmp_shard_storage);
    for (i = 0; i < n; i++) {
        int first = i == 0 || strcmp(ss[i].shard, ss[i - 1].shard) != 0;

        if (first) {
            d->checks[d->n_checks].name = ss[i].shard;
            d->checks[d->n_checks++].ok = 1;
        }
        if (first || ss[i].id != ss[i - 1].id) /* tied tensors: once */
            d->checks[d->n_checks - 1].bytes += ss[i].nbytes;
    }
    free(ss);
    d->sharded = 1;
    for (i = 0; !d->intact && i < d->n_checks; i++)
        if (verify_shard(d, &d->checks[i]) != 0)
            return -1;
    return 0;
}

/* Opens and verifies the file and computes what the sections show.
 * Returns 0, or an exit code when the file cannot be examined at all. */
static int examine(doctor *d)
{
    struct stat st;
    size_t n, i;
    double t0 = now();
    int rc = ckpt_open(&d->f, d->path, NULL);

    timed("open", t0);
    if (rc == 0) {
        t0 = now();
        rc = ckpt_verify(d->f, &d->report);
        timed("verify", t0);
    }
    if (rc != 0) {
        cli_error_capture(&d->err, rc);
        if (cli_exit_code(rc) == CLI_USAGE)
            return cli_report(d->path, &d->err);
    }
    d->intact = rc == 0;
    if (d->f == NULL) {
        d->size = stat(d->path, &st) == 0 ? (uint64_t)st.st_size : 0;
        d->detected = detect_format(d->path);
        return 0;
    }
    d->size = ckpt_file_size(d->f); /* a sharded set: index and shards */
    n = ckpt_file_tensor_count(d->f);
    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(d->f, i);

        d->elements += ckpt_tensor_numel(t);
        d->tensor_bytes += ckpt_tensor_nbytes(t);
    }
    n = ckpt_file_value_count(d->f);
    for (i = 0; i < n; i++)
        d->objects += ckpt_value_kind(ckpt_file_value(d->f, i)) ==
                      CKPT_KIND_OBJECT;
    t0 = now();
    rc = is_safetensors(d) ? summarise_groups(d) : summarise_tree(d);
    timed("summary", t0);
    if (rc == 0 && d->dir == NULL &&
        ckpt_file_format(d->f) == CKPT_FORMAT_SAFETENSORS_SHARDED) {
        t0 = now();
        rc = check_shards(d);
        timed("shards", t0);
    }
    if (rc == 0 && d->training == NULL) {
        t0 = now();
        rc = ckpt_training_analyze(&d->training, d->f);
        timed("training", t0);
    }
    if (rc != 0) {
        fputs("ckpt: out of memory\n", stderr);
        return CLI_USAGE;
    }
    return 0;
}

/* Opens and verifies every checkpoint file of the directory but the main
 * weights file, which the integrity section covers. -1 when out of
 * memory. */
static int verify_others(doctor *d)
{
    size_t n = ckpt_training_file_count(d->training), i;

    d->checks = calloc(n ? n : 1, sizeof *d->checks);
    if (d->checks == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        const char *name = ckpt_training_file_name(d->training, i);
        ckpt_verify_report report = { 0, 0, 0, 0 };
        file_check *c = &d->checks[d->n_checks];
        ckpt_file *f = NULL;
        char *path = NULL;
        int rc;

        if (asprintf(&path, "%s/%s", d->dir, name) < 0)
            return -1;
        if (strcmp(path, d->path) == 0) {
            free(path);
            continue;
        }
        rc = ckpt_open(&f, path, NULL);
        if (rc == 0)
            rc = ckpt_verify(f, &report);
        c->name = name;
        c->ok = rc == 0;
        c->bytes = report.bytes;
        if (rc != 0)
            cli_error_capture(&c->err, rc);
        d->n_checks++;
        ckpt_close(f);
        free(path);
    }
    return 0;
}

/* A directory: analysed as one training checkpoint, whose main weights
 * file the other sections examine. Returns 0 (also for a FILE), or an exit
 * code. */
static int examine_dir(doctor *d)
{
    struct stat st;
    cli_error e;
    double t0 = now();
    int rc;

    if (stat(d->path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    d->dir = d->path;
    rc = ckpt_training_analyze_dir(&d->training, d->dir, NULL);
    timed("training", t0);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        return cli_report(d->dir, &e);
    }
    d->path = ckpt_training_weights_path(d->training);
    if (d->path == NULL) {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, d->dir, strlen(d->dir));
        fputs(": no checkpoint file in the directory\n", stderr);
        return CLI_USAGE;
    }
    t0 = now();
    rc = verify_others(d);
    timed("verify others", t0);
    if (rc != 0) {
        fputs("ckpt: out of memory\n", stderr);
        return CLI_USAGE;
    }
    return 0;
}

/* ------------------------------------------------------------ notes */

/* A list of sentences, for the "not vouched for" section. */
typedef struct notes {
    char **items;
    size_t n, cap;
} notes;

static void note(notes *ns, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(notes *ns, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;

    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? 2 * ns->cap : 8;
        char **items = realloc(ns->items, cap * sizeof *items);

        if (items == NULL)
            return;
        ns->items = items;
        ns->cap = cap;
    }
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) >= 0)
        ns->items[ns->n++] = s;
    va_end(ap);
}

static void notes_free(notes *ns)
{
    size_t i;

    for (i = 0; i < ns->n; i++)
        free(ns->items[i]);
    free(ns->items);
}

/* Appends "name" (n-th of total in a list) to a growing sentence. */
static void list_name(char **s, size_t nth, size_t total, const char *name)
{
    char *grown = NULL;
    int rc;

    if (nth >= LIST_MAX && nth + 1 < total)
        return;
    if (nth >= LIST_MAX)
        rc = asprintf(&grown, "%s and %zu more", *s, total - LIST_MAX);
    else
        rc = asprintf(&grown, "%s%s%s", *s, nth ? ", " : "",
                      cli_name(name));
    if (rc < 0)
        return;
    free(*s);
    *s = grown;
}

static void note_opaque(const doctor *d, notes *ns)
{
    size_t n = ckpt_file_value_count(d->f), i, k = 0;
    char *s;

    if (d->objects == 0)
        return;
    s = strdup("opaque objects, never called, contents unchecked: ");
    for (i = 0; s && i < n; i++) {
        const ckpt_value *v = ckpt_file_value(d->f, i);
        const char *name;
        char *item = NULL;

        if (ckpt_value_kind(v) != CKPT_KIND_OBJECT)
            continue;
        name = ckpt_value_object_name(v);
        if (asprintf(&item, "%s at %s", name ? name : "?",
                     cli_name(ckpt_file_value_name(d->f, i))) < 0)
            break;
        list_name(&s, k++, d->objects, item);
        free(item);
    }
    if (s)
        note(ns, "%s", s);
    free(s);
}

static void note_checksum(const doctor *d, notes *ns)
{
    switch (cli_checksums(d->f)) {
    case CLI_CHECKSUMS_DIGESTS:
        note(ns, "per-tensor XXH3-64 digests checked (metadata ckpt.xxh3, "
                 "written by ckpt): the tensor bytes are the ones "
                 "written; the header and metadata have no digest");
        break;
    case CLI_CHECKSUMS_NONE:
        note(ns, "%s files carry no checksum: integrity means structure and "
                 "sizes are consistent, not that the tensor bytes are the "
                 "ones written",
             ckpt_format_name(ckpt_file_format(d->f)));
        break;
    default:
        break;
    }
}

typedef struct shared {
    uint64_t id;
    size_t index;
} shared;

static int cmp_shared(const void *a, const void *b)
{
    const shared *x = a, *y = b;

    if (x->id != y->id)
        return (x->id > y->id) - (x->id < y->id);
    return (x->index > y->index) - (x->index < y->index);
}

/* One line per storage that several tensor names share (tied weights,
 * views). */
static void note_shared(const doctor *d, notes *ns)
{
    size_t n = ckpt_file_tensor_count(d->f), i, j, k;
    shared *sh = n ? malloc(n * sizeof *sh) : NULL;

    if (sh == NULL)
        return;
    for (i = 0; i < n; i++) {
        sh[i].id = ckpt_tensor_storage_id(ckpt_file_tensor(d->f, i));
        sh[i].index = i;
    }
    qsort(sh, n, sizeof *sh, cmp_shared);
    for (i = 0; i < n; i = j) {
        char *s;

        for (j = i + 1; j < n && sh[j].id == sh[i].id; j++)
            ;
        if (j - i < 2)
            continue;
        s = strdup("tensors sharing one storage (tied or views): ");
        for (k = i; s && k < j; k++)
            list_name(&s, k - i, j - i,
                      ckpt_tensor_name(ckpt_file_tensor(d->f, sh[k].index)));
        if (s)
            note(ns, "%s", s);
        free(s);
    }
    free(sh);
}

static void note_strided(const doctor *d, notes *ns)
{
    size_t n = ckpt_file_tensor_count(d->f), i, total = 0, k = 0;
    char *s;

    for (i = 0; i < n; i++)
        total += !ckpt_tensor_is_contiguous(ckpt_file_tensor(d->f, i));
    if (total == 0)
        return;
    s = strdup("non-contiguous views (read through strides): ");
    for (i = 0; s && i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(d->f, i);

        if (!ckpt_tensor_is_contiguous(t))
            list_name(&s, k++, total, ckpt_tensor_name(t));
    }
    if (s)
        note(ns, "%s", s);
    free(s);
}

static notes unvouched(const doctor *d)
{
    notes ns = { NULL, 0, 0 };

    if (d->f == NULL) {
        note(&ns, "the file could not be opened: nothing in it is vouched "
                  "for");
        return ns;
    }
    if (!d->intact)
        note(&ns, "verification stops at the first problem: bytes after it "
                  "were not checked");
    note_opaque(d, &ns);
    note_checksum(d, &ns);
    note_shared(d, &ns);
    note_strided(d, &ns);
    if (d->top_cut)
        note(&ns, "the top-level summary is partial: the object tree is too "
                  "deep or too large to walk");
    return ns;
}

/* ------------------------------------------------------------ sections */

static void show_format(const doctor *d, cli_json_writer *j)
{
    const char *name = d->f ? ckpt_format_name(ckpt_file_format(d->f)) : NULL;
    char h[32];

    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "name");
        cli_json_string(j, name);
        if (d->f == NULL) {
            cli_json_key(j, "detected");
            cli_json_string(j, d->detected);
        }
        cli_json_key(j, "size");
        cli_json_uint(j, d->size);
        if (d->sharded) {
            cli_json_key(j, "shards");
            cli_json_uint(j, d->n_checks);
        }
        cli_json_object_end(j);
        return;
    }
    line_start();
    if (name)
        fputs(name, stdout);
    else if (d->detected)
        printf("%s (%s)", d->detected,
               d->err.code == CKPT_E_TRUNCATED ? "truncated" : "could not be opened");
    else
        fputs("unknown (the file could not be opened)", stdout);
    printf(", %" PRIu64 " bytes (%s)", d->size, cli_human_bytes(h, d->size));
    if (d->sharded)
        printf(" in %zu files: the index and %zu shard%s", d->n_checks + 1,
               d->n_checks, cli_plural(d->n_checks));
    fputc('\n', stdout);
}

static int concern_integrity(const doctor *d, FILE *out)
{
    if (d->intact || out == NULL)
        return !d->intact;
    fprintf(out, "%s: %s", d->f ? "corrupt" : "cannot be opened",
            d->err.message);
    cli_put_location(out, &d->err, 0);
    return 1;
}

static void show_integrity(const doctor *d, cli_json_writer *j)
{
    uint64_t checked = d->report.bytes; /* up to the first problem */

    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "ok");
        cli_json_bool(j, d->intact);
        cli_json_key(j, "bytes_checked");
        cli_json_uint(j, checked);
        if (!d->intact) {
            cli_json_key(j, "error");
            cli_json_object_begin(j);
            cli_json_key(j, "message");
            cli_json_string(j, d->err.message);
            cli_json_key(j, "member");
            if (d->err.member[0])
                cli_json_string(j, d->err.member);
            else
                cli_json_null(j);
            cli_json_key(j, "offset");
            if (d->err.offset != UINT64_MAX)
                cli_json_uint(j, d->err.offset);
            else
                cli_json_null(j);
            cli_json_object_end(j);
        }
        cli_json_object_end(j);
        return;
    }
    line_start();
    if (d->intact) {
        printf("%sOK%s: %" PRIu64 " bytes checked", cli_color(CLI_GREEN),
               cli_color(CLI_RESET), checked);
        if (d->report.members)
            printf(", %" PRIu64 " zip member CRC-32s match",
                   d->report.members);
        if (cli_checksums(d->f) == CLI_CHECKSUMS_DIGESTS)
            fputs(", per-tensor XXH3-64 digests checked", stdout);
    } else {
        printf("%sFAILED%s: ", cli_color(CLI_RED), cli_color(CLI_RESET));
        put_str(d->err.message);
        cli_put_location(stdout, &d->err, 0);
    }
    fputc('\n', stdout);
}

static void json_entry(cli_json_writer *j, const entry *e)
{
    ckpt_kind kind = e->v ? ckpt_value_kind(e->v) : CKPT_KIND_DICT;

    cli_json_object_begin(j);
    cli_json_key(j, "name");
    cli_json_string_len(j, e->name, e->name_len);
    cli_json_key(j, "kind");
    cli_json_string(j, e->v ? ckpt_kind_name(kind) : "group");
    cli_json_key(j, "tensors");
    cli_json_uint(j, e->tensors);
    cli_json_key(j, "elements");
    cli_json_uint(j, e->elements);
    if (e->v && kind != CKPT_KIND_TENSOR && !is_container(kind)) {
        cli_json_key(j, "value");
        cli_json_leaf(j, e->v);
    }
    cli_json_object_end(j);
}

/* "name: dict, 4 tensors, 60 elements" / "epoch: int 42" / ... */
static void text_entry(const entry *e)
{
    ckpt_kind kind = e->v ? ckpt_value_kind(e->v) : CKPT_KIND_DICT;
    const char *obj;
    char shape[256];

    fputs("    ", stdout);
    if (e->name_len)
        cli_put_text(stdout, e->name, e->name_len);
    else
        fputs(cli_name(""), stdout);
    fputs(": ", stdout);
    if (e->v == NULL) {
        printf("%" PRIu64 " tensor%s, %" PRIu64 " element%s\n", e->tensors,
               cli_plural(e->tensors), e->elements, cli_plural(e->elements));
        return;
    }
    fputs(ckpt_kind_name(kind), stdout);
    switch (kind) {
    case CKPT_KIND_TENSOR:
        if (ckpt_value_tensor(e->v))
            printf(" %s %s",
                   ckpt_dtype_name(ckpt_tensor_dtype(ckpt_value_tensor(e->v))),
                   cli_shape(shape, sizeof shape, ckpt_value_tensor(e->v)));
        break;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        if (e->tensors)
            printf(", %" PRIu64 " tensor%s, %" PRIu64 " element%s", e->tensors,
                   cli_plural(e->tensors), e->elements, cli_plural(e->elements));
        else
            printf(", %zu item%s", ckpt_value_len(e->v),
                   cli_plural(ckpt_value_len(e->v)));
        break;
    case CKPT_KIND_OBJECT:
        obj = ckpt_value_object_name(e->v);
        fputc(' ', stdout);
        put_str(obj ? obj : "?");
        break;
    default:
        fputc(' ', stdout);
        cli_put_value(stdout, e->v);
        break;
    }
    fputc('\n', stdout);
}

static void show_contents(const doctor *d, cli_json_writer *j)
{
    uint64_t by_dtype[CKPT_DT_COUNT] = { 0 };
    size_t count[CKPT_DT_COUNT] = { 0 };
    size_t n = d->f ? ckpt_file_tensor_count(d->f) : 0, i, shown = 0;
    char h[32];

    for (i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(d->f, i);
        unsigned dt = (unsigned)ckpt_tensor_dtype(t);

        dt = dt < CKPT_DT_COUNT ? dt : CKPT_DT_UNKNOWN;
        by_dtype[dt] += ckpt_tensor_nbytes(t);
        count[dt]++;
    }
    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "tensors");
        cli_json_uint(j, n);
        cli_json_key(j, "elements");
        cli_json_uint(j, d->elements);
        cli_json_key(j, "tensor_bytes");
        cli_json_uint(j, d->tensor_bytes);
        cli_json_key(j, "by_dtype");
        cli_json_object_begin(j);
        for (i = 0; i < CKPT_DT_COUNT; i++) {
            if (count[i] == 0)
                continue;
            cli_json_key(j, ckpt_dtype_name((ckpt_dtype)i));
            cli_json_uint(j, by_dtype[i]);
        }
        cli_json_object_end(j);
        cli_json_key(j, "top_level");
        cli_json_array_begin(j);
        for (i = 0; i < d->n_top; i++)
            json_entry(j, &d->top[i]);
        cli_json_array_end(j);
        cli_json_object_end(j);
        return;
    }
    line_start();
    if (d->f == NULL) {
        puts("not available: the file could not be opened");
        return;
    }
    printf("%zu tensor%s, %" PRIu64 " element%s, %" PRIu64 " bytes (%s)\n",
           n, cli_plural(n), d->elements, cli_plural(d->elements), d->tensor_bytes,
           cli_human_bytes(h, d->tensor_bytes));
    if (n) {
        line_start();
        fputs("by dtype:", stdout);
        for (i = 0; i < CKPT_DT_COUNT; i++) {
            if (count[i] == 0)
                continue;
            printf("%s %s %s", shown++ ? "," : "",
                   ckpt_dtype_name((ckpt_dtype)i),
                   cli_human_bytes(h, by_dtype[i]));
        }
        fputc('\n', stdout);
    }
    if (d->n_top) {
        line_start();
        puts(is_safetensors(d) ? "tensor groups:" : "top level:");
        for (i = 0; i < d->n_top && i < TOP_MAX; i++)
            text_entry(&d->top[i]);
        if (d->n_top > TOP_MAX)
            printf("    ... and %zu more\n", d->n_top - TOP_MAX);
    }
}

/* "2 opaque objects (os.system, builtins.eval)": the first few names. */
static int concern_unvouched(const doctor *d, FILE *out)
{
    size_t n, i, k = 0;

    if (d->objects == 0 || out == NULL)
        return d->objects != 0;
    fprintf(out, "%zu opaque object%s (", d->objects,
            cli_plural(d->objects));
    n = ckpt_file_value_count(d->f);
    for (i = 0; i < n && k < 3; i++) {
        const ckpt_value *v = ckpt_file_value(d->f, i);
        const char *name = ckpt_value_object_name(v);

        if (ckpt_value_kind(v) != CKPT_KIND_OBJECT)
            continue;
        fprintf(out, "%s%s", k++ ? ", " : "", name ? name : "?");
    }
    fputs(d->objects > k ? ", ...)" : ")", out);
    return 1;
}

static void show_unvouched(const doctor *d, cli_json_writer *j)
{
    notes ns = unvouched(d);
    size_t i;

    if (j)
        cli_json_array_begin(j);
    for (i = 0; i < ns.n; i++) {
        if (j) {
            cli_json_string(j, ns.items[i]);
        } else {
            line_start();
            put_str(ns.items[i]);
            fputc('\n', stdout);
        }
    }
    if (j)
        cli_json_array_end(j);
    else if (ns.n == 0)
        puts("  nothing: every byte was read and checked");
    notes_free(&ns);
}

/* ---- resume readiness, memory breakdown, metadata (summary.c) */

static int concern_resume(const doctor *d, FILE *out)
{
    return cli_summary_concern(d->training, out);
}

static void show_resume(const doctor *d, cli_json_writer *j)
{
    cli_summary_resume(d->training, j);
}

static void show_memory(const doctor *d, cli_json_writer *j)
{
    cli_summary_memory(d->training, j);
}

static void show_metadata(const doctor *d, cli_json_writer *j)
{
    cli_summary_metadata(d->training, j);
}

/* "optimizer.pt corrupt: MESSAGE (member M, offset N)" for the first. */
static int concern_others(const doctor *d, FILE *out)
{
    size_t i;

    /* a corrupt shard is the set's integrity concern already */
    for (i = 0; !d->sharded && i < d->n_checks; i++) {
        if (d->checks[i].ok)
            continue;
        if (out) {
            cli_put_text(out, d->checks[i].name, strlen(d->checks[i].name));
            fprintf(out, " corrupt: %s", d->checks[i].err.message);
            cli_put_location(out, &d->checks[i].err, 0);
        }
        return 1;
    }
    return 0;
}

static void show_others(const doctor *d, cli_json_writer *j)
{
    size_t i;

    if (j && d->dir == NULL && !d->sharded) {
        cli_json_null(j);
        return;
    }
    if (j)
        cli_json_array_begin(j);
    else if (d->sharded)
        printf("  the %zu shard file%s of the set (integrity covers them "
               "together):\n", d->n_checks, cli_plural(d->n_checks));
    else if (d->dir == NULL)
        puts("  one file: see integrity");
    else if (d->n_checks == 0)
        puts("  none besides the weights file");
    for (i = 0; i < d->n_checks; i++) {
        const file_check *c = &d->checks[i];

        if (j) {
            cli_json_object_begin(j);
            cli_json_key(j, "name");
            cli_json_string(j, c->name);
            cli_json_key(j, "ok");
            cli_json_bool(j, c->ok);
            cli_json_key(j, "bytes_checked");
            cli_json_uint(j, c->bytes);
            if (!c->ok) {
                cli_json_key(j, "error");
                cli_json_string(j, c->err.message);
            }
            cli_json_object_end(j);
            continue;
        }
        line_start();
        if (d->sharded)
            line_start();
        put_str(c->name);
        if (c->ok) {
            printf(": %sOK%s: %" PRIu64 " bytes checked\n",
                   cli_color(CLI_GREEN), cli_color(CLI_RESET), c->bytes);
        } else {
            printf(": %sFAILED%s: ", cli_color(CLI_RED), cli_color(CLI_RESET));
            put_str(c->err.message);
            cli_put_location(stdout, &c->err, 0);
            fputc('\n', stdout);
        }
    }
    if (j)
        cli_json_array_end(j);
}

static int concern_keys(const doctor *d, FILE *out)
{
    return cli_doctor_keys_concern(&d->keys, out);
}

static void show_keys(const doctor *d, cli_json_writer *j)
{
    cli_doctor_keys_show(&d->keys, j);
}

static int concern_safety(const doctor *d, FILE *out)
{
    return cli_doctor_safety_concern(&d->safety, out);
}

static void show_safety(const doctor *d, cli_json_writer *j)
{
    cli_doctor_safety_show(&d->safety, j);
}

/* Scans the main file and, for a directory, every other checkpoint file.
 * -1 when out of memory. */
static int examine_safety(doctor *d)
{
    size_t n = d->dir ? ckpt_training_file_count(d->training) : 0, k = 0;
    const char **paths = calloc(n + 1, sizeof *paths);
    const char **names = calloc(n + 1, sizeof *names);
    char **owned = calloc(n + 1, sizeof *owned);
    double t0 = now();
    int rc = -1;

    if (!paths || !names || !owned)
        goto done;
    paths[k] = d->path;
    names[k++] = d->dir && strncmp(d->path, d->dir, strlen(d->dir)) == 0 &&
                         d->path[strlen(d->dir)] == '/'
                     ? d->path + strlen(d->dir) + 1
                     : d->path;
    for (size_t i = 0; i < n; i++) {
        const char *name = ckpt_training_file_name(d->training, i);

        if (asprintf(&owned[i], "%s/%s", d->dir, name) < 0) {
            owned[i] = NULL;
            goto done;
        }
        if (strcmp(owned[i], d->path) == 0)
            continue;
        paths[k] = owned[i];
        names[k++] = name;
    }
    rc = cli_doctor_safety_run(&d->safety, paths, names, k);
    timed("safety", t0);
done:
    for (size_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(paths);
    free(names);
    return rc;
}

typedef struct section {
    const char *key;   /* JSON key under "sections" */
    const char *title; /* text heading */
    /* 1 when this section needs attention, and then (if out is not NULL)
     * a short phrase for the verdict line written to out. NULL when the
     * section never needs attention. */
    int (*concern)(const doctor *d, FILE *out);
    /* The section's body: text on stdout when j is NULL, else one JSON
     * value. */
    void (*show)(const doctor *d, cli_json_writer *j);
} section;

static const section sections[] = {
    { "format", "format", NULL, show_format },
    { "integrity", "integrity", concern_integrity, show_integrity },
    { "safety", "safety (would loading it run code?)", concern_safety,
      show_safety },
    { "contents", "contents", NULL, show_contents },
    { "not_vouched_for", "not vouched for", concern_unvouched,
      show_unvouched },
    { "resume", "resume readiness", concern_resume, show_resume },
    { "keys", "key hygiene", concern_keys, show_keys },
    { "memory", "memory", NULL, show_memory },
    { "metadata", "metadata", NULL, show_metadata },
    { "other_files", "integrity of the other files", concern_others,
      show_others },
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

/* ------------------------------------------------------------ report */

/* "HEALTHY: ..." or "ATTENTION: a; b" as a malloc'd string (NULL when
 * out of memory); *healthy tells which. */
static char *verdict(const doctor *d, int *healthy)
{
    char *text = NULL;
    size_t len = 0, i, k = 0;
    FILE *out;

    *healthy = 1;
    for (i = 0; i < N_SECTIONS; i++)
        if (sections[i].concern && sections[i].concern(d, NULL))
            *healthy = 0;
    out = open_memstream(&text, &len);
    if (out == NULL)
        return NULL;
    if (*healthy)
        fprintf(out, "HEALTHY: %s, %zu tensor%s, %" PRIu64
                     " element%s, integrity OK",
                ckpt_format_name(ckpt_file_format(d->f)),
                ckpt_file_tensor_count(d->f),
                cli_plural(ckpt_file_tensor_count(d->f)), d->elements,
                cli_plural(d->elements));
    if (*healthy && d->training)
        fprintf(out, "; %s", cli_summary_phrase(d->training));
    if (!*healthy)
        fputs("ATTENTION: ", out);
    for (i = 0; i < N_SECTIONS && !*healthy; i++) {
        if (sections[i].concern == NULL || !sections[i].concern(d, NULL))
            continue;
        if (k++)
            fputs("; ", out);
        sections[i].concern(d, out);
    }
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static void print_json(const doctor *d, const char *summary, int healthy)
{
    cli_json_writer j;
    size_t i;

    cli_json_init(&j, stdout);
    cli_json_object_begin(&j);
    cli_json_key(&j, "file");
    cli_json_string(&j, d->path);
    if (d->dir) {
        cli_json_key(&j, "directory");
        cli_json_string(&j, d->dir);
    }
    cli_json_key(&j, "format");
    cli_json_string(&j, d->f ? ckpt_format_name(ckpt_file_format(d->f)) : NULL);
    cli_json_key(&j, "verdict");
    cli_json_string(&j, healthy ? "healthy" : "attention");
    cli_json_key(&j, "summary");
    cli_json_string(&j, summary);
    cli_json_key(&j, "resume"); /* the contract: also at the top level */
    cli_summary_resume(d->training, &j);
    cli_json_key(&j, "sections");
    cli_json_object_begin(&j);
    for (i = 0; i < N_SECTIONS; i++) {
        double t0 = now();

        cli_json_key(&j, sections[i].key);
        sections[i].show(d, &j);
        timed(sections[i].key, t0);
    }
    cli_json_object_end(&j);
    cli_json_object_end(&j);
    fputc('\n', stdout);
}

static void print_text(const doctor *d, const char *summary, int healthy)
{
    size_t i;

    fputs(cli_color(healthy ? CLI_GREEN : CLI_YELLOW), stdout);
    put_str(summary);
    printf("%s\n", cli_color(CLI_RESET));
    for (i = 0; i < N_SECTIONS; i++) {
        double t0 = now();

        printf("\n%s%s%s\n", cli_color(CLI_BOLD), sections[i].title,
               cli_color(CLI_RESET));
        sections[i].show(d, NULL);
        timed(sections[i].key, t0);
    }
}

int cli_cmd_doctor(const cli_command *cmd, int argc, char **argv)
{
    doctor d;
    int json = 0, i, rc, healthy = 0, options = 1;
    char *summary;

    memset(&d, 0, sizeof d);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (options && strcmp(a, "--") == 0)
            options = 0;
        else if (options && cli_is_help(a))
            return cli_help(cmd);
        else if (options && strcmp(a, "--json") == 0)
            json = 1;
        else if (options && a[0] == '-' && a[1] != '\0')
            return cli_usage_error(cmd, "unknown option '%s'", a);
        else if (d.path == NULL)
            d.path = a;
        else
            return cli_usage_error(cmd, "one FILE at a time");
    }
    if (d.path == NULL)
        return cli_usage_error(cmd, "missing FILE");

    rc = examine_dir(&d);
    if (rc == 0)
        rc = examine(&d);
    if (rc == 0 && (examine_safety(&d) != 0 ||
                    cli_doctor_keys_run(&d.keys, d.f, d.path) != 0)) {
        fputs("ckpt: out of memory\n", stderr);
        rc = CLI_USAGE;
    }
    if (rc == 0) {
        summary = verdict(&d, &healthy);
        if (summary == NULL) {
            fputs("ckpt: out of memory\n", stderr);
            rc = CLI_USAGE;
        } else {
            if (json)
                print_json(&d, summary, healthy);
            else
                print_text(&d, summary, healthy);
            free(summary);
            rc = healthy ? CLI_OK : CLI_FINDINGS;
        }
    }
    free(d.top);
    ckpt_close(d.f);
    ckpt_training_free(d.training);
    free(d.checks);
    cli_doctor_safety_free(&d.safety);
    cli_doctor_keys_free(&d.keys);
    print_timings();
    return rc;
}
