/* doctor.c - ckpt_doctor: a health report of a checkpoint (ckpt.h,
 * "doctor"). The one module that composes the jobs (verify, scan), the
 * keys (hygiene) and the training analysis.
 *
 * The file is examined once (open, verify, totals, top-level summary,
 * shards, a directory's other files, scans, key hygiene, training
 * analysis); then each section of the `sections` table says whether it
 * needs attention (its concern, a phrase of the verdict line) and renders
 * itself as JSON. The CLI renders the same report as text. A new section
 * is one concern/JSON pair and one table row here, and its text in the
 * CLI. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "open/dcp.h"
#include "open/hf_cache.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sort.h"
#include "base/source.h"
#include "jobs/scan.h"
#include "jobs/verify.h"
#include "keys/keys.h"
#include "model/file.h"
#include "model/walk.h"
#include "open/model_dir.h"
#include "open/sharded.h"
#include "open/store_dir.h"
#include "report/json.h"
#include "report/quant.h"
#include "report/text.h"
#include "report/training_json.h"

/* Bounds on walking the object tree, which hostile pickles can make deep
 * or (through shared references) exponentially wide. */
#define WALK_NODES_MAX ((uint64_t)1 << 24)
/* Names listed per "not vouched for" line before "and N more". */
#define LIST_MAX 8
/* Steps timed. */
#define TIMINGS_MAX 16
/* Bytes of an unopenable file's head that detection looks at. */
#define HEAD_BYTES 4096

struct ckpt_doctor_report {
    ckpt_arena arena; /* every string and array below */
    ckpt_doctor_options opts;
    const char *path;          /* the weights file examined */
    const char *dir;           /* the directory given, or NULL */
    ckpt_store_listing *store; /* a ckpt store given: its generations */
    const char *withheld;      /* why resume readiness is not claimed, or NULL */
    ckpt_file *f;              /* NULL when the file could not be opened */
    ckpt_format detected;
    uint64_t size;
    int intact;     /* opened and verified */
    ckpt_error err; /* why not, when !intact */
    /* the file (r->f or a shard) whose entries flatten to one name when
     * that is err, its bytes verified; NULL otherwise */
    const ckpt_file *collide;
    ckpt_verify_report verify;
    uint64_t elements, tensor_bytes;
    uint64_t dtype_bytes[CKPT_DT_COUNT]; /* by dtype (unknown ones as UNKNOWN) */
    size_t dtype_tensors[CKPT_DT_COUNT];
    size_t objects; /* opaque objects among the values */
    ckpt_doctor_entry *top;
    size_t n_top;
    int top_cut;
    ckpt_training *training;
    ckpt_doctor_check *checks; /* a set's shards, or a directory's files */
    size_t n_checks;
    int sharded;
    ckpt_doctor_scan *scans;
    size_t n_scans;
    ckpt_scan_dir *walk; /* a directory's: the reports of scans[walk_first..] */
    size_t walk_first;
    ckpt_keys_report *keys;
    int from_pretrained;  /* weights transformers reads with its metadata check */
    const char *snapshot; /* a Hugging Face cache repository's revision read */
    ckpt_doctor_refusal *refusals;
    size_t n_refusals;
    const char **notes;
    size_t n_notes, notes_cap;
    int notes_nomem;       /* a note could not be built: the report fails */
    const char *component; /* a pipeline's component (ckpt_doctor_pipeline), or NULL */
    /* its ckpt_pipeline_check finding (code 0: none), strings in the arena */
    ckpt_error unloadable;
    int healthy;
    char *summary;
    const char *timing_name[TIMINGS_MAX];
    double timing_seconds[TIMINGS_MAX];
    size_t n_timings;
};

/* ------------------------------------------------------------ helpers */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void timed(ckpt_doctor_report *r, const char *name, double since) {
    if (r->n_timings < TIMINGS_MAX) {
        r->timing_name[r->n_timings] = name;
        r->timing_seconds[r->n_timings++] = now() - since;
    }
}

/* A copy of ckpt_error_last() in the report's arena, `code` (what the
 * failing call returned) taking precedence; the message defaults to the
 * code's name. -1 when out of memory. */
static int capture(ckpt_doctor_report *r, ckpt_error *e, int code) {
    const ckpt_error *last = ckpt_error_last();
    const char *msg =
        last && last->message && last->message[0] ? last->message : ckpt_error_name(code);
    e->code = code;
    e->message = ckpt_arena_strdup(&r->arena, msg);
    e->file = ckpt_arena_strdup(&r->arena, last && last->file ? last->file : "");
    e->member = ckpt_arena_strdup(&r->arena, last && last->member ? last->member : "");
    e->offset = last ? last->offset : CKPT_NO_OFFSET;
    return e->message && e->file && e->member ? 0 : -1;
}

/* The codes that mean the input could not be read at all (not its fault). */
static int is_io(int code) {
    return code == CKPT_E_IO || code == CKPT_E_NOMEM || code == CKPT_E_INVALID_ARG;
}

static int is_container(ckpt_kind kind) {
    return kind == CKPT_KIND_LIST || kind == CKPT_KIND_TUPLE || kind == CKPT_KIND_SET ||
           kind == CKPT_KIND_DICT;
}

static int is_safetensors(const ckpt_doctor_report *r) {
    ckpt_format fmt = ckpt_file_format(r->f);
    return fmt == CKPT_FORMAT_SAFETENSORS || fmt == CKPT_FORMAT_SAFETENSORS_SHARDED;
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

/* Opens and verifies path; the check records the outcome. */
/* Keys only on one side of d (list), less those tied to a key both have
 * (the other file saved the tied weight once); *first: the first. */
static size_t untied(const ckpt_diff_result *d, ckpt_diff_list list, const char **first) {
    size_t n = 0;
    for (size_t i = 0; i < ckpt_diff_count(d, list); i++)
        if (!ckpt_diff_tied_to(d, list, i) && !n++ && !*first) *first = ckpt_diff_name(d, list, i);
    return n;
}

/* Another weights file of a model directory, `path` (pytorch_model.bin
 * beside model.safetensors: open/model_dir.h), is a copy of the save the
 * examined file, r->path, holds: loaders choose between them by their own
 * order (from_pretrained the safetensors; use_safetensors=False and
 * .bin-only tools the .bin), so each must load the same model. 0 when
 * ckpt_diff finds them the same (values equal; a key tied to a key both
 * have aside); else CKPT_E_MISMATCH saying how they differ, or the
 * diff's error. */
static int same_weights(const ckpt_doctor_report *r, const char *path, const char *name) {
    ckpt_manifest *a = NULL, *b = NULL;
    ckpt_diff_result *d = NULL;
    int rc = ckpt_manifest_load(&a, r->path, &r->opts.open);
    if (rc == 0) rc = ckpt_manifest_load(&b, path, &r->opts.open);
    if (rc == 0) rc = ckpt_diff(&d, a, b, NULL);
    if (rc == 0) {
        const char *first = NULL, *main_name = strrchr(r->path, '/');
        main_name = main_name ? main_name + 1 : r->path;
        size_t in_b = untied(d, CKPT_DIFF_ONLY_IN_B, &first);
        size_t in_a = untied(d, CKPT_DIFF_ONLY_IN_A, &first);
        size_t shape = ckpt_diff_count(d, CKPT_DIFF_SHAPE_MISMATCH);
        size_t dtype = ckpt_diff_count(d, CKPT_DIFF_DTYPE_MISMATCH), values = 0;
        if (!first && shape) first = ckpt_diff_name(d, CKPT_DIFF_SHAPE_MISMATCH, 0);
        if (!first && dtype) first = ckpt_diff_name(d, CKPT_DIFF_DTYPE_MISMATCH, 0);
        for (size_t i = 0; i < ckpt_diff_tensor_count(d); i++) {
            const ckpt_tensor_diff *t = ckpt_diff_tensor(d, i);
            if (t->differing || (!t->compared && !t->bitwise_equal)) {
                if (!values++ && !first) first = t->name;
            }
        }
        if (in_a + in_b + shape + dtype + values) {
            /* the differences there are, as diff lists them */
            const struct {
                size_t n;
                const char *noun, *tail, *where;
            } part[] = {{in_b, "key", " only in ", name},
                        {in_a, "key", " only in ", main_name},
                        {shape, "shape difference", "", ""},
                        {dtype, "dtype difference", "", ""},
                        {values, "tensor", " with other values", ""}};
            ckpt_buf m = {0};
            for (size_t i = 0, k = 0; i < sizeof part / sizeof *part; i++)
                if (part[i].n)
                    ckpt_buf_printf(&m, "%s%zu %s%s%s%s", k++ ? ", " : "", part[i].n, part[i].noun,
                                    plural(part[i].n), part[i].tail, part[i].where);
            ckpt_buf_byte(&m, 0);
            rc = m.failed ? CKPT_E_NOMEM
                          : ckpt_err(CKPT_E_MISMATCH, path, NULL, CKPT_NO_OFFSET,
                                     "holds other weights than %s, which loaders read first: %s "
                                     "(first: %s)",
                                     main_name, (const char *)m.p, first);
            ckpt_buf_free(&m);
        }
    }
    ckpt_diff_result_free(d);
    ckpt_manifest_free(b);
    ckpt_manifest_free(a);
    return rc;
}

static int check_file(ckpt_doctor_report *r, ckpt_doctor_check *c, const char *path) {
    ckpt_verify_report report = {0, 0, 0, 0, 0};
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, &r->opts.open);
    if (rc == 0) rc = ckpt_verify(&report, f);
    c->ok = rc == 0;
    c->bytes = report.bytes;
    ckpt_close(f);
    /* a copy of the examined weights (a directory's other weights file) */
    const char *base = strrchr(r->path, '/');
    if (rc == 0 && r->dir && ckpt_model_dir_weights_name(c->name) &&
        ckpt_model_dir_weights_name(base ? base + 1 : r->path)) {
        rc = same_weights(r, path, c->name);
        c->differs = rc == CKPT_E_MISMATCH;
        c->ok = rc == 0;
    }
    if (rc == CKPT_E_NOMEM) return -1;
    return rc != 0 && capture(r, &c->error, rc) ? -1 : 0;
}

/* ------------------------------------------------------------ contents */

static int count_tensor(ckpt_walk *w, ckpt_walk_frame *node) {
    ckpt_doctor_entry *e = w->ctx;
    if (ckpt_value_kind(node->value) == CKPT_KIND_TENSOR) {
        const ckpt_tensor *t = ckpt_value_tensor(node->value);
        e->tensors++;
        e->elements += t ? ckpt_tensor_numel(t) : 0;
    }
    return CKPT_WALK_DESCEND; /* leaves have no children; opaque objects
                                 are not looked into */
}

/* Tensors and elements under e->value, within *budget visits (shared by
 * all entries); a walk cut short by a bound or a cycle marks the summary
 * cut. Returns 0 or -1 (out of memory). */
static int count_entry(ckpt_doctor_report *r, ckpt_doctor_entry *e, uint64_t *budget) {
    ckpt_walk w;
    ckpt_walk_init(&w, &r->f->opts.limits, r->f->path, NULL);
    w.enter = count_tensor;
    w.ctx = e;
    w.max_visits = *budget;
    int rc = ckpt_walk_run(&w, e->value);
    *budget -= w.visits < *budget ? w.visits : *budget;
    if (rc == CKPT_E_NOMEM) return -1;
    if (rc) r->top_cut = 1;
    return 0;
}

/* Text of a dict key: strings as written, ints in decimal, else the kind. */
static const char *key_name(const ckpt_value *k, size_t *len) {
    const char *s = NULL;
    if (ckpt_value_kind(k) == CKPT_KIND_STR)
        s = ckpt_value_str(k, len);
    else if (ckpt_value_kind(k) == CKPT_KIND_INT)
        s = ckpt_value_int_decimal(k);
    if (s == NULL) s = ckpt_kind_name(ckpt_value_kind(k));
    if (ckpt_value_kind(k) != CKPT_KIND_STR) *len = strlen(s);
    return s;
}

static int summarise_tree(ckpt_doctor_report *r) {
    const ckpt_value *root = ckpt_file_root(r->f);
    int is_dict = root && ckpt_value_kind(root) == CKPT_KIND_DICT;
    size_t n = is_dict ? ckpt_value_len(root) : (root ? 1 : 0);
    uint64_t budget = WALK_NODES_MAX;
    r->top = ckpt_arena_array(&r->arena, n ? n : 1, sizeof *r->top);
    if (r->top == NULL) return -1;
    memset(r->top, 0, (n ? n : 1) * sizeof *r->top);
    for (size_t i = 0; i < n; i++) {
        ckpt_doctor_entry *e = &r->top[i];
        if (is_dict) {
            e->name = key_name(ckpt_value_key(root, i), &e->name_len);
            e->value = ckpt_value_item(root, i);
        } else {
            e->name = "";
            e->value = root;
        }
        if (!r->top_cut && count_entry(r, e, &budget)) return -1;
    }
    r->n_top = n;
    return 0;
}

/* Length of a tensor name's first "."-separated segment. */
static size_t segment_len(const char *name) {
    const char *dot = strchr(name, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

static int cmp_entry_name(const void *a, const void *b) {
    const ckpt_doctor_entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* safetensors roots are flat: group the tensors by first name segment.
 * In name order a segment's tensors mostly come in one run ("a", "a-b",
 * "a.c" is the exception), so the array holds runs, not tensors: they are
 * sorted and merged at the end. */
static int summarise_groups(ckpt_doctor_report *r) {
    size_t n = ckpt_file_tensor_count(r->f), g = 0, cap = 0;
    r->top = NULL;
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(r->f, i);
        ckpt_doctor_entry e = {0};
        e.name = ckpt_tensor_name(t);
        e.name_len = segment_len(e.name);
        e.tensors = 1;
        e.elements = ckpt_tensor_numel(t);
        if (g > 0 && cmp_entry_name(&r->top[g - 1], &e) == 0) {
            r->top[g - 1].tensors++;
            r->top[g - 1].elements += e.elements;
            continue;
        }
        if (ckpt_arena_grow(&r->arena, (void **)&r->top, &cap, g + 1, sizeof *r->top)) return -1;
        r->top[g++] = e;
    }
    if (g > 1) qsort(r->top, g, sizeof *r->top, cmp_entry_name);
    size_t k = 0;
    for (size_t i = 0; i < g; i++) {
        if (k > 0 && cmp_entry_name(&r->top[k - 1], &r->top[i]) == 0) {
            r->top[k - 1].tensors += r->top[i].tensors;
            r->top[k - 1].elements += r->top[i].elements;
        } else {
            r->top[k++] = r->top[i];
        }
    }
    r->n_top = k;
    return 0;
}

/* ------------------------------------------------------------ shards */

/* A storage of a sharded set, for the per-shard tallies. */
typedef struct shard_storage {
    const char *shard;
    uint64_t id, nbytes;
} shard_storage;

static int cmp_shard_storage(const void *a, const void *b) {
    const shard_storage *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* Verifies one shard on its own, to say which shard of a set that failed
 * verification is corrupt. */
static int verify_shard(ckpt_doctor_report *r, ckpt_doctor_check *c) {
    const char *slash = strrchr(r->path, '/');
    int dir_len = slash ? (int)(slash - r->path) + 1 : 0;
    const char *path = ckpt_arena_printf(&r->arena, "%.*s%s", dir_len, r->path, c->name);
    return path ? check_file(r, c, path) : -1;
}

/* A sharded set: one check per shard file (the tensors' member, as the
 * index names it) with the bytes of its storages. When the set verified,
 * so did every shard; otherwise each is verified alone to find the bad
 * ones. -1 when out of memory. */
static int check_shards(ckpt_doctor_report *r) {
    size_t n = ckpt_file_tensor_count(r->f);
    shard_storage *ss = ckpt_arena_array(&r->arena, n ? n : 1, sizeof *ss);
    r->checks = ckpt_arena_array(&r->arena, n ? n : 1, sizeof *r->checks);
    if (ss == NULL || r->checks == NULL) return -1;
    memset(r->checks, 0, (n ? n : 1) * sizeof *r->checks);
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(r->f, i);
        ss[i].shard = ckpt_tensor_member(t);
        ss[i].id = ckpt_tensor_storage_id(t);
        ss[i].nbytes = ckpt_tensor_storage_nbytes(t);
    }
    qsort(ss, n, sizeof *ss, cmp_shard_storage);
    for (size_t i = 0; i < n; i++) {
        int first = i == 0 || strcmp(ss[i].shard, ss[i - 1].shard) != 0;
        if (first) {
            r->checks[r->n_checks].name = ss[i].shard;
            r->checks[r->n_checks++].ok = 1;
        }
        if (first || ss[i].id != ss[i - 1].id) /* tied tensors: once */
            r->checks[r->n_checks - 1].bytes += ss[i].nbytes;
    }
    r->sharded = 1;
    for (size_t i = 0; !r->intact && i < r->n_checks; i++)
        if (verify_shard(r, &r->checks[i]) != 0) return -1;
    return 0;
}

/* ------------------------------------------------------------ examination */

/* transformers' __metadata__ check (open/model_dir.h) of weights that
 * from_pretrained reads by their name: the file, or each shard of the
 * set, named as the index names it. -1 when out of memory. */
static int check_from_pretrained(ckpt_doctor_report *r) {
    ckpt_format fmt = r->f ? ckpt_file_format(r->f) : CKPT_FORMAT_UNKNOWN;
    const char *path = r->f ? ckpt_file_path(r->f) : "", *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    int sharded = fmt == CKPT_FORMAT_SAFETENSORS_SHARDED;
    if (!ckpt_model_dir_metadata_checked(path) || (fmt != CKPT_FORMAT_SAFETENSORS && !sharded))
        return 0;
    size_t n = sharded ? r->f->nshards : 1;
    const ckpt_file *one = r->f;
    const ckpt_file *const *files = sharded ? (const ckpt_file *const *)r->f->shards : &one;
    r->from_pretrained = 1;
    r->refusals = ckpt_arena_array(&r->arena, n ? n : 1, sizeof *r->refusals);
    if (r->refusals == NULL) return -1;
    for (size_t i = 0; i < n; i++) {
        const char *found, *file = ckpt_file_path(files[i]);
        int rc = ckpt_model_dir_metadata_refused(files[i], &found);
        if (rc == 0) continue;
        if (rc == CKPT_E_NOMEM) return -1;
        ckpt_doctor_refusal *x = &r->refusals[r->n_refusals++];
        x->name = strncmp(file, path, dir_len) == 0 ? file + dir_len : file;
        x->format = found;
        if (capture(r, &x->error, rc)) return -1;
    }
    return 0;
}

/* The format an unopenable file's first bytes show. */
static ckpt_format detect(const char *path) {
    unsigned char head[HEAD_BYTES];
    size_t n = 0;
    const char *why;
    int fd = ckpt_open_regular(path, NULL, &why);
    if (fd >= 0) {
        ssize_t got = pread(fd, head, sizeof head, 0);
        n = got > 0 ? (size_t)got : 0;
        close(fd);
    }
    ckpt_format f = ckpt_detect_format(head, n);
    /* an index's text does not say which shards it lists; its name does */
    return f == CKPT_FORMAT_SAFETENSORS_SHARDED ? ckpt_sharded_format(path) : f;
}

/* Opens and verifies the file and computes the totals and summaries.
 * Returns 0, or the error code when the file cannot be read at all. */
static int examine(ckpt_doctor_report *r) {
    struct stat st;
    double t0 = now();
    int rc = ckpt_open(&r->f, r->path, &r->opts.open);
    timed(r, "open", t0);
    if (rc == 0) {
        t0 = now();
        rc = ckpt_verify(&r->verify, r->f);
        timed(r, "verify", t0);
    }
    if (rc != 0 && is_io(rc)) return rc; /* the error record is the caller's */
    if (rc != 0 && capture(r, &r->err, rc)) return ckpt_err_nomem();
    r->intact = rc == 0;
    r->collide = rc != 0 ? ckpt_verify_name_collision(r->f, &r->err) : NULL;
    if (r->f == NULL) {
        r->size = stat(r->path, &st) == 0 ? (uint64_t)st.st_size : 0;
        r->detected = detect(r->path);
        return 0;
    }
    r->size = ckpt_file_size(r->f); /* a sharded set: index and shards */
    size_t n = ckpt_file_tensor_count(r->f);
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(r->f, i);
        unsigned d = (unsigned)ckpt_tensor_dtype(t);
        if (d >= CKPT_DT_COUNT) d = CKPT_DT_UNKNOWN;
        r->elements += ckpt_tensor_numel(t);
        r->tensor_bytes += ckpt_tensor_nbytes(t);
        r->dtype_bytes[d] += ckpt_tensor_nbytes(t);
        r->dtype_tensors[d]++;
    }
    n = ckpt_file_value_count(r->f);
    for (size_t i = 0; i < n; i++)
        r->objects += ckpt_value_kind(ckpt_file_value(r->f, i)) == CKPT_KIND_OBJECT;
    t0 = now();
    rc = is_safetensors(r) ? summarise_groups(r) : summarise_tree(r);
    timed(r, "summary", t0);
    if (rc == 0 && r->dir == NULL &&
        (ckpt_file_format(r->f) == CKPT_FORMAT_SAFETENSORS_SHARDED ||
         ckpt_file_format(r->f) == CKPT_FORMAT_TORCH_SHARDED)) {
        t0 = now();
        rc = check_shards(r);
        timed(r, "shards", t0);
    }
    if (rc == 0 && r->training == NULL) {
        t0 = now();
        rc = ckpt_training_analyze(&r->training, r->f);
        timed(r, "training", t0);
    }
    if (rc == 0) rc = check_from_pretrained(r);
    return rc ? ckpt_err_nomem() : 0;
}

/* Opens and verifies every checkpoint file of the directory but the main
 * weights file, which the integrity section covers. */
static int verify_others(ckpt_doctor_report *r) {
    size_t n = ckpt_training_file_count(r->training);
    r->checks = ckpt_arena_array(&r->arena, n ? n : 1, sizeof *r->checks);
    if (r->checks == NULL) return -1;
    memset(r->checks, 0, (n ? n : 1) * sizeof *r->checks);
    for (size_t i = 0; i < n; i++) {
        const char *name = ckpt_training_file_name(r->training, i);
        const char *path = ckpt_arena_printf(&r->arena, "%s/%s", r->dir, name);
        if (path == NULL) return -1;
        if (strcmp(path, r->path) == 0) continue;
        r->checks[r->n_checks].name = name;
        if (check_file(r, &r->checks[r->n_checks++], path)) return -1;
    }
    return 0;
}

/* A ckpt store: the generation LATEST names is the checkpoint examined
 * (alone: generations are never combined), and every generation is
 * listed and verified. */
static int examine_store(ckpt_doctor_report *r) {
    const char *dir = r->path, *gen = NULL;
    double t0 = now();
    int rc = ckpt_store_list(&r->store, dir, NULL);
    timed(r, "store", t0);
    if (rc == 0) rc = ckpt_store_dir_latest(&r->arena, dir, &gen);
    if (rc == 0) r->path = gen;
    return rc;
}

/* A directory: analysed as one training checkpoint, whose main weights
 * file the other sections examine. Returns 0 (also for a file), or the
 * error code. */
static int examine_dir(ckpt_doctor_report *r) {
    struct stat st;
    double t0 = now();
    if (stat(r->path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (ckpt_dcp_is_dir(r->path)) return 0; /* one checkpoint, opened as a whole */
    if (ckpt_is_store_dir(r->path)) return examine_store(r);
    /* a Hugging Face cache repository: the snapshot refs/main names */
    if (ckpt_hf_cache_is_repo(r->path)) {
        const char *snap = NULL;
        int rc = ckpt_hf_cache_snapshot(&r->arena, r->path, &snap, &r->snapshot);
        if (rc) return rc;
        r->path = snap;
    }
    int rc = ckpt_training_analyze_dir(&r->training, r->path, &r->opts.open);
    timed(r, "training", t0);
    /* weights that do not open (a sharded set missing a shard...): the
     * report is the one of the file the directory stands for (its index),
     * which cannot be opened, rather than no report at all. Any other
     * refusal (weights in several files: several checkpoints) stands. */
    if (rc && !is_io(rc) && rc != CKPT_E_LIMIT) {
        ckpt_error e;
        ckpt_file *f = NULL;
        const char *weights = NULL;
        if (capture(r, &e, rc)) return ckpt_err_nomem();
        int opened = ckpt_model_dir_weights(&r->arena, r->path, &weights) != 0 ||
                     ckpt_open(&f, weights, &r->opts.open) == 0;
        ckpt_close(f);
        if (opened) return ckpt_err(rc, e.file, e.member, e.offset, "%s", e.message);
        r->path = weights;
        return 0;
    }
    if (rc) return rc;
    r->dir = r->path;
    r->path = ckpt_training_weights_path(r->training);
    /* a weights file none of whose readings opened (corrupt, or not the
     * format its name says): the report is of the file ckpt_open of the
     * directory reads, which names why, not of no file at all */
    const char *weights = NULL;
    if (r->path == NULL && ckpt_model_dir_weights(&r->arena, r->dir, &weights) == 0)
        r->path = weights;
    if (r->path == NULL) {
        const char *latest = ckpt_model_dir_trainer_latest(&r->arena, r->dir);
        if (latest)
            return ckpt_err(CKPT_E_NOTFOUND, r->dir, NULL, CKPT_NO_OFFSET,
                            "no checkpoint file in the directory: " CKPT_TRAINER_DIR, latest);
        return ckpt_err(CKPT_E_NOTFOUND, r->dir, NULL, CKPT_NO_OFFSET,
                        "no checkpoint file in the directory");
    }
    t0 = now();
    rc = verify_others(r);
    timed(r, "verify others", t0);
    return rc ? ckpt_err_nomem() : 0;
}

/* A Trainer's training_args.bin (transformers' TRAINING_ARGS_NAME, written
 * with torch.save(self.args)): unsafe by its pickled TrainingArguments and
 * the enums it holds, and by nothing else (no dangerous finding, every
 * global transformers' or accelerate's). The Trainer never loads it: a
 * resume reads trainer_state.json and the weights, optimizer, scheduler
 * and rng files. */
static const char *trainer_args_about(const ckpt_doctor_report *r, const ckpt_doctor_scan *s) {
    if (!r->dir || !s->report || strcmp(s->name, "training_args.bin") != 0 ||
        ckpt_scan_verdict(s->report) != CKPT_VERDICT_UNSAFE)
        return NULL;
    for (size_t i = 0; i < ckpt_scan_finding_count(s->report); i++) {
        const ckpt_finding *f = ckpt_scan_finding(s->report, i);
        if (f->severity == CKPT_SEVERITY_INFO) continue;
        if (f->severity == CKPT_SEVERITY_DANGEROUS || !f->global ||
            (strncmp(f->global, "transformers.", 13) != 0 &&
             strncmp(f->global, "accelerate.", 11) != 0))
            return NULL;
    }
    return "the Trainer's TrainingArguments, pickled: torch.load(weights_only=False) of it "
           "imports transformers and runs what the pickle names, but the Trainer never loads "
           "it (a resume reads trainer_state.json and the weights, optimizer, scheduler and "
           "rng files); leave it out of what you share or load, or load it only from a source "
           "you trust";
}

/* The scan of path into s: of the open main file when it is a
 * safetensors file or torch zip (its header or directory is not parsed
 * again). */
static int scan_into(ckpt_doctor_report *r, ckpt_doctor_scan *s, const char *path,
                     const char *name) {
    ckpt_scan_report *report = NULL;
    ckpt_scan_options so = CKPT_SCAN_OPTIONS_INIT;
    so.limits = r->opts.open.limits;
    int rc = ckpt_scan_path_or_opened(&report, path, r->f, &so);
    memset(s, 0, sizeof *s);
    s->name = name;
    s->report = report;
    s->about = trainer_args_about(r, s);
    if (rc == CKPT_E_NOMEM || (rc != 0 && capture(r, &s->error, rc))) return ckpt_err_nomem();
    return 0;
}

/* Adds got (a scan made, or of an entry left unread, error: why) to the
 * report. */
static int add_scan(ckpt_doctor_report *r, size_t *cap, const ckpt_doctor_scan *got,
                    const ckpt_error *error) {
    if (ckpt_arena_grow(&r->arena, (void **)&r->scans, cap, r->n_scans + 1, sizeof *r->scans))
        return ckpt_err_nomem();
    ckpt_doctor_scan *s = &r->scans[r->n_scans++];
    *s = *got;
    if (!error) return 0;
    s->error = *error;
    s->error.message = ckpt_arena_strdup(&r->arena, error->message ? error->message : "");
    s->error.file = ckpt_arena_strdup(&r->arena, error->file ? error->file : "");
    s->error.member = ckpt_arena_strdup(&r->arena, error->member ? error->member : "");
    return s->error.message && s->error.file && s->error.member ? 0 : ckpt_err_nomem();
}

/* Every file of the directory `ckpt scan DIR` lists (ckpt_scan_dir_list:
 * its subdirectories too, where a diffusers pipeline's unet/ or a
 * DeepSpeed global_stepN/ holds what its loader unpickles), scanned as it
 * scans them (ckpt_scan_dir_scan: a shard an index reached is reported
 * through the index), in its order: training analysis reads only what it
 * knows (a hostile unet/ bin, or a zip holding a pickle beside the
 * weights, was "safe"). A file of no checkpoint is left out, an entry
 * left unread or whose scan failed is unscannable. */
static int scan_dir_files(ckpt_doctor_report *r) {
    ckpt_scan_options so = CKPT_SCAN_OPTIONS_INIT;
    size_t cap = 0, n;
    int rc = ckpt_scan_dir_list(&r->walk, r->dir, NULL), main_listed = 0;

    so.limits = r->opts.open.limits;
    if (rc == 0) rc = ckpt_scan_dir_scan_opened(r->walk, &so, r->f);
    n = ckpt_scan_dir_count(r->walk);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const ckpt_dir_entry *e = ckpt_scan_dir_entry(r->walk, k);
        main_listed |= e->error.code == 0 && strcmp(e->path, r->path) == 0;
    }
    if (rc == 0 && !main_listed) { /* the weights the analysis chose, first */
        ckpt_doctor_scan s;
        const char *name = r->path;
        size_t dlen = strlen(r->dir);
        if (strncmp(r->path, r->dir, dlen) == 0 && r->path[dlen] == '/') name = r->path + dlen + 1;
        rc = scan_into(r, &s, r->path, name);
        if (rc == 0) rc = add_scan(r, &cap, &s, NULL);
    }
    r->walk_first = r->n_scans;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const ckpt_dir_entry *e = ckpt_scan_dir_entry(r->walk, k);
        const ckpt_error *why = NULL;
        const ckpt_scan_report *rep = ckpt_scan_dir_report(r->walk, k, &why);
        ckpt_doctor_scan s;
        if ((!rep && !why) || /* a shard, reported through its index */
            (rep && strcmp(e->path, r->path) != 0 &&
             ckpt_scan_verdict(rep) == CKPT_VERDICT_NOT_A_CHECKPOINT))
            continue;
        memset(&s, 0, sizeof s);
        if ((s.name = ckpt_arena_strdup(&r->arena, e->name)) == NULL) return ckpt_err_nomem();
        s.report = rep;
        s.about = trainer_args_about(r, &s);
        rc = add_scan(r, &cap, &s, why);
    }
    return rc;
}

/* Scans the main file and, for a directory, every other checkpoint file
 * below it. */
static int examine_safety(ckpt_doctor_report *r) {
    double t0 = now();
    int rc;
    if (r->dir) {
        rc = scan_dir_files(r);
    } else {
        size_t cap = 0;
        ckpt_doctor_scan s;
        rc = scan_into(r, &s, r->path, r->path);
        if (rc == 0) rc = add_scan(r, &cap, &s, NULL);
    }
    timed(r, "safety", t0);
    return rc;
}

/* ------------------------------------------------------------ notes */

/* Adds a note; s NULL (out of memory building it) fails the report. */
static void note(ckpt_doctor_report *r, const char *s) {
    if (s == NULL || ckpt_arena_grow(&r->arena, (void **)&r->notes, &r->notes_cap, r->n_notes + 1,
                                     sizeof *r->notes))
        r->notes_nomem = 1;
    else
        r->notes[r->n_notes++] = s;
}

/* Appends "name" (nth of total in a list) to a growing sentence. */
static const char *list_name(ckpt_doctor_report *r, const char *s, size_t nth, size_t total,
                             const char *name) {
    if (s == NULL || (nth >= LIST_MAX && nth + 1 < total)) return s;
    if (nth >= LIST_MAX)
        return ckpt_arena_printf(&r->arena, "%s and %zu more", s, total - LIST_MAX);
    return ckpt_arena_printf(&r->arena, "%s%s%s", s, nth ? ", " : "", name[0] ? name : "(root)");
}

static void note_opaque(ckpt_doctor_report *r) {
    size_t n = ckpt_file_value_count(r->f), k = 0;
    const char *s = "opaque objects, never called, contents unchecked: ";
    if (r->objects == 0) return;
    for (size_t i = 0; s && i < n; i++) {
        const ckpt_value *v = ckpt_file_value(r->f, i);
        if (ckpt_value_kind(v) != CKPT_KIND_OBJECT) continue;
        const char *name = ckpt_value_object_name(v), *at = ckpt_file_value_name(r->f, i);
        const char *item =
            ckpt_arena_printf(&r->arena, "%s at %s", name ? name : "?", at[0] ? at : "(root)");
        s = item ? list_name(r, s, k++, r->objects, item) : NULL;
    }
    note(r, s);
}

/* Storages saved on a device other than the CPU: torch.load restores them
 * there, so a machine without it needs map_location (ckpt reads them on
 * any machine). */
static void note_devices(ckpt_doctor_report *r) {
    size_t n = ckpt_file_tensor_count(r->f), k = 0;
    const char *first = NULL;
    int mixed = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dev = ckpt_tensor_device(ckpt_file_tensor(r->f, i));
        if (strcmp(dev, "cpu") == 0) continue;
        if (first == NULL) first = dev;
        mixed |= strcmp(dev, first) != 0;
        k++;
    }
    if (first)
        note(r, ckpt_arena_printf(&r->arena,
                                  "%zu tensor%s saved on %s%s: torch.load restores them "
                                  "there, so on a machine without that device it needs "
                                  "map_location=\"cpu\"",
                                  k, k == 1 ? "" : "s", first, mixed ? " and other devices" : ""));
}

static void note_checksum(ckpt_doctor_report *r) {
    switch (ckpt_file_checksums(r->f)) {
    case CKPT_CHECKSUMS_DIGESTS:
        note(r, "per-tensor XXH3-64 digests checked (metadata ckpt.xxh3, written by "
                "ckpt): the tensor bytes are the ones written; the header and metadata "
                "have no digest");
        break;
    case CKPT_CHECKSUMS_NONE:
        /* a torch zip whose records have none: a compute_crc32=False or
         * skip_data() save (container/zip.h) */
        if (ckpt_file_format(r->f) == CKPT_FORMAT_TORCH_ZIP)
            note(r, "this torch zip records no CRC-32 for some of its members (torch.save "
                    "with compute_crc32=False, or under skip_data()): integrity means "
                    "structure and sizes are consistent, not that the tensor bytes are the "
                    "ones written");
        else
            note(r, ckpt_arena_printf(&r->arena,
                                      "%s files carry no checksum: integrity means structure "
                                      "and sizes are consistent, not that the tensor bytes are "
                                      "the ones written",
                                      ckpt_format_name(ckpt_file_format(r->f))));
        break;
    default: break;
    }
}

typedef struct shared {
    uint64_t id;
    size_t index;
} shared;

static int cmp_shared(const void *a, const void *b) {
    const shared *x = a, *y = b;
    if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
    return (x->index > y->index) - (x->index < y->index);
}

/* One line per storage that several tensor names share (tied weights,
 * views). Tensors whose storage ids rise strictly share none (a
 * safetensors file: storage i is tensor i's), the common case, with no
 * copy and no sort. */
static void note_shared(ckpt_doctor_report *r) {
    size_t n = ckpt_file_tensor_count(r->f), j;
    uint64_t top = 0;
    int rising = 1;
    for (size_t i = 0; rising && i < n; i++) {
        uint64_t id = ckpt_tensor_storage_id(ckpt_file_tensor(r->f, i));
        rising = i == 0 || id > top;
        top = id;
    }
    if (rising) return;
    shared *sh = ckpt_malloc(n * sizeof *sh);
    if (sh == NULL) {
        r->notes_nomem = 1;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sh[i].id = ckpt_tensor_storage_id(ckpt_file_tensor(r->f, i));
        sh[i].index = i;
    }
    /* ids come mostly in order (numbered by first use in name order) */
    if (ckpt_sort(sh, n, sizeof *sh, cmp_shared)) {
        ckpt_free(sh);
        r->notes_nomem = 1;
        return;
    }
    for (size_t i = 0; i < n; i = j) {
        for (j = i + 1; j < n && sh[j].id == sh[i].id; j++)
            ;
        if (j - i < 2) continue;
        const char *s = "tensors sharing one storage (tied or views): ";
        for (size_t k = i; s && k < j; k++)
            s = list_name(r, s, k - i, j - i,
                          ckpt_tensor_name(ckpt_file_tensor(r->f, sh[k].index)));
        note(r, s);
    }
    ckpt_free(sh);
}

static void note_strided(ckpt_doctor_report *r) {
    size_t n = ckpt_file_tensor_count(r->f), total = 0, k = 0;
    for (size_t i = 0; i < n; i++) total += !ckpt_tensor_is_contiguous(ckpt_file_tensor(r->f, i));
    if (total == 0) return;
    const char *s = "non-contiguous views (read through strides): ";
    for (size_t i = 0; s && i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(r->f, i);
        if (!ckpt_tensor_is_contiguous(t)) s = list_name(r, s, k++, total, ckpt_tensor_name(t));
    }
    note(r, s);
}

/* A bitsandbytes-quantized state_dict: its parameters counted
 * (report/quant.h, the note `ckpt inspect` prints too). */
static void note_quantized(ckpt_doctor_report *r) {
    const char *s;
    if (ckpt_quant_note(&r->arena, r->f, &s) != 0)
        r->notes_nomem = 1;
    else if (s)
        note(r, s);
}

static void unvouched(ckpt_doctor_report *r) {
    if (r->f == NULL) {
        note(r, "the file could not be opened: nothing in it is vouched for");
        return;
    }
    if (!r->intact && !r->collide)
        note(r, "verification stops at the first problem: bytes after it were not checked");
    note_opaque(r);
    note_checksum(r);
    note_devices(r);
    note_quantized(r);
    note_shared(r);
    note_strided(r);
    if (r->top_cut)
        note(r, "the top-level summary is partial: the object tree is too deep or too "
                "large to walk");
}

/* ------------------------------------------------------------ sections */

/* " (file F, member M, offset N)", any of them, or nothing. The file is
 * named only when it is not the one examined (a shard of a set, own). */
static void put_location(ckpt_buf *b, const ckpt_error *e, const char *own) {
    int has_file = own && e->file[0] && strcmp(e->file, own) != 0;
    int has_member = e->member[0] != '\0', has_offset = e->offset != CKPT_NO_OFFSET;
    if (!has_file && !has_member && !has_offset) return;
    ckpt_buf_str(b, " (");
    if (has_file) {
        ckpt_buf_str(b, "file ");
        ckpt_buf_str(b, e->file);
        if (has_member || has_offset) ckpt_buf_str(b, ", ");
    }
    if (has_member) {
        ckpt_buf_str(b, "member ");
        ckpt_buf_str(b, e->member);
    }
    if (has_offset)
        ckpt_buf_printf(b, "%soffset %llu", has_member ? ", " : "", (unsigned long long)e->offset);
    ckpt_buf_byte(b, ')');
}

static int concern_integrity(const ckpt_doctor_report *r, ckpt_buf *b) {
    if (r->intact || b == NULL) return !r->intact;
    ckpt_buf_str(b, r->err.code == CKPT_E_LIMIT ? "limit exceeded: "
                    : r->collide                ? "bytes verified, names do not: "
                    : r->f                      ? "corrupt: "
                                                : "cannot be opened: ");
    ckpt_buf_str(b, r->err.message);
    /* a set that cannot be opened fails in one of its files: named */
    put_location(b, &r->err, r->f ? ckpt_file_path(r->f) : r->path);
    return 1;
}

/* How bad a verdict is: unsafe, then unscannable (something was not
 * examined), then review (data-only classes to accept), then
 * not-a-checkpoint (nothing to examine), then safe. */
static int rank(ckpt_verdict v) {
    switch (v) {
    case CKPT_VERDICT_UNSAFE: return 4;
    case CKPT_VERDICT_UNSCANNABLE: return 3;
    case CKPT_VERDICT_REVIEW: return 2;
    case CKPT_VERDICT_NOT_A_CHECKPOINT: return 1;
    default: return 0;
    }
}

ckpt_verdict ckpt_doctor_scan_verdict(const ckpt_doctor_report *r) {
    ckpt_verdict w = CKPT_VERDICT_SAFE;
    for (size_t i = 0; i < r->n_scans; i++) {
        const ckpt_scan_report *s = r->scans[i].report;
        ckpt_verdict v = s ? ckpt_scan_verdict(s) : CKPT_VERDICT_UNSCANNABLE;
        if (rank(v) > rank(w)) w = v;
    }
    return w;
}

/* The first global of a finding with the given severity, or NULL. */
static const char *first_global(const ckpt_scan_report *s, ckpt_severity sev) {
    size_t n = ckpt_scan_finding_count(s);
    for (size_t i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(s, i);
        if (f->severity == sev && f->global) return f->global;
    }
    return NULL;
}

/* "unsafe (G)"; of several files, the first one of the worst verdict is
 * named ("unsafe: NAME (G)"); when that verdict is only a Trainer's
 * training_args.bin (its `about`), what it is and that the other files,
 * the weights and optimizer among them, are safe. */
static int concern_safety(const ckpt_doctor_report *r, ckpt_buf *b) {
    ckpt_verdict w = ckpt_doctor_scan_verdict(r);
    const char *g = NULL;
    const ckpt_doctor_scan *worst = NULL;
    size_t known = 0, others_safe = 1;
    if (w == CKPT_VERDICT_SAFE || b == NULL) return w != CKPT_VERDICT_SAFE;
    for (size_t i = 0; i < r->n_scans; i++) {
        const ckpt_doctor_scan *s = &r->scans[i];
        ckpt_verdict v = s->report ? ckpt_scan_verdict(s->report) : CKPT_VERDICT_UNSCANNABLE;
        if (s->about)
            known++;
        else
            others_safe &= v == CKPT_VERDICT_SAFE;
        if (v != w || worst) continue;
        worst = s;
        g = first_global(s->report, CKPT_SEVERITY_DANGEROUS);
        if (!g) g = first_global(s->report, CKPT_SEVERITY_SUSPICIOUS);
    }
    ckpt_buf_str(b, ckpt_verdict_name(w));
    if (r->n_scans > 1 && worst) {
        ckpt_buf_str(b, ": ");
        ckpt_buf_str(b, worst->name);
    }
    if (known && others_safe) {
        size_t n = r->n_scans - known;
        ckpt_buf_printf(b,
                        " (the Trainer's pickled TrainingArguments, which no resume loads; the "
                        "other %zu file%s, the weights among them, %s safe)",
                        n, plural(n), n == 1 ? "is" : "are");
    } else if (g && w == CKPT_VERDICT_UNSAFE) {
        ckpt_buf_str(b, " (");
        ckpt_buf_str(b, g);
        ckpt_buf_byte(b, ')');
    }
    return 1;
}

/* "2 opaque objects (os.system, builtins.eval)": the first few names. */
static int concern_unvouched(const ckpt_doctor_report *r, ckpt_buf *b) {
    size_t n, k = 0;
    if (r->objects == 0 || b == NULL) return r->objects != 0;
    ckpt_buf_printf(b, "%zu opaque object%s (", r->objects, plural(r->objects));
    n = ckpt_file_value_count(r->f);
    for (size_t i = 0; i < n && k < 3; i++) {
        const ckpt_value *v = ckpt_file_value(r->f, i);
        const char *name = ckpt_value_object_name(v);
        if (ckpt_value_kind(v) != CKPT_KIND_OBJECT) continue;
        ckpt_buf_str(b, k++ ? ", " : "");
        ckpt_buf_str(b, name ? name : "?");
    }
    ckpt_buf_str(b, r->objects > k ? ", ...)" : ")");
    return 1;
}

static int concern_resume(const ckpt_doctor_report *r, ckpt_buf *b) {
    if (r->withheld) return 0; /* the integrity concern says it */
    ckpt_resume res = r->training ? ckpt_training_resume(r->training) : CKPT_RESUME_WEIGHTS_ONLY;
    int concern = res == CKPT_RESUME_PARTIAL || res == CKPT_RESUME_WARM_START;
    if (concern && b)
        ckpt_buf_printf(b, "resume: %s",
                        res == CKPT_RESUME_PARTIAL ? "partial optimizer state"
                                                   : "warm-start-only, no optimizer state");
    return concern;
}

static int concern_keys(const ckpt_doctor_report *r, ckpt_buf *b) {
    size_t n = r->keys ? ckpt_keys_wrapper_count(r->keys) : 0;
    if (n == 0) return 0;
    if (!b) return 1;
    /* the wrappers as they stand in the keys, outermost first, then the
     * strips (the fix's own order) that leave the bare keys */
    uint64_t most = 0;
    ckpt_buf_str(b, "keys: ");
    for (size_t i = 0; i < n; i++) {
        const ckpt_key_wrapper *w = ckpt_keys_wrapper(r->keys, i);
        ckpt_buf_printf(b, "%s'%s'", i ? " then " : "", w->segment);
        if (w->keys > most) most = w->keys;
    }
    ckpt_buf_printf(b, " on %llu key%s", (unsigned long long)most, plural(most));
    size_t nfix = ckpt_keys_fix_count(r->keys);
    if (n < 2 || !nfix) return 1;
    ckpt_buf_str(b, " (outermost first); bare keys: ");
    for (size_t i = 0; i < nfix; i++) {
        const ckpt_rename_rule *f = ckpt_keys_fix(r->keys, i);
        if (f->op == CKPT_RENAME_STRIP_PREFIX || !*f->arg2)
            ckpt_buf_printf(b, "%s%s '%s'", i ? ", then " : "",
                            f->op == CKPT_RENAME_STRIP_PREFIX ? "strip" : "drop", f->arg);
        else
            ckpt_buf_printf(b, "%sreplace '%s' by '%s'", i ? ", then " : "", f->arg, f->arg2);
    }
    return 1;
}

/* "optimizer.pt corrupt: MESSAGE (member M, offset N)" for the first. */
static int concern_others(const ckpt_doctor_report *r, ckpt_buf *b) {
    /* a corrupt shard is the set's integrity concern already */
    for (size_t i = 0; !r->sharded && i < r->n_checks; i++) {
        if (r->checks[i].ok) continue;
        if (b) {
            ckpt_buf_str(b, r->checks[i].name);
            ckpt_buf_str(b, r->checks[i].differs ? ": " : " corrupt: ");
            ckpt_buf_str(b, r->checks[i].error.message);
            put_location(b, &r->checks[i].error, NULL);
        }
        return 1;
    }
    return 0;
}

/* "from_pretrained refuses model-00002-of-00002.safetensors (__metadata__
 * without "format"; and N more)". */
static int concern_from_pretrained(const ckpt_doctor_report *r, ckpt_buf *b) {
    if (r->n_refusals == 0 || b == NULL) return r->n_refusals != 0;
    const ckpt_doctor_refusal *x = &r->refusals[0];
    ckpt_buf_printf(b, "from_pretrained refuses %s (__metadata__ ", x->name);
    if (x->format)
        ckpt_buf_printf(b, "\"format\" \"%s\"", x->format);
    else
        ckpt_buf_str(b, "without \"format\"");
    if (r->n_refusals > 1) ckpt_buf_printf(b, "; and %zu more", r->n_refusals - 1);
    ckpt_buf_byte(b, ')');
    return 1;
}

static void json_from_pretrained(const ckpt_doctor_report *r, ckpt_jw *j) {
    if (!r->from_pretrained) {
        ckpt_jw_null(j);
        return;
    }
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "ok");
    ckpt_jw_bool(j, r->n_refusals == 0);
    ckpt_jw_key(j, "refused");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < r->n_refusals; i++) {
        const ckpt_doctor_refusal *x = &r->refusals[i];
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "file");
        ckpt_jw_string(j, x->name);
        ckpt_jw_key(j, "format");
        ckpt_jw_string(j, x->format);
        ckpt_jw_key(j, "error");
        ckpt_jw_string(j, x->error.message);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

static void json_format(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "name");
    ckpt_jw_string(j, r->f ? ckpt_format_name(ckpt_file_format(r->f)) : NULL);
    if (r->f == NULL) {
        ckpt_jw_key(j, "detected");
        ckpt_jw_string(j, r->detected ? ckpt_format_name(r->detected) : NULL);
    }
    ckpt_jw_key(j, "size");
    ckpt_jw_uint(j, r->size);
    ckpt_jw_key(j, "snapshot"); /* a Hugging Face cache repository's */
    ckpt_jw_string(j, r->snapshot);
    ckpt_jw_key(j, "variant"); /* from_pretrained(DIR, variant=...) */
    ckpt_jw_string(j, r->f ? ckpt_file_variant(r->f) : NULL);
    if (r->sharded) {
        ckpt_jw_key(j, "shards");
        ckpt_jw_uint(j, r->n_checks);
    }
    ckpt_jw_object_end(j);
}

static void json_integrity(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "ok");
    ckpt_jw_bool(j, r->intact);
    ckpt_jw_key(j, "bytes_checked");
    ckpt_jw_uint(j, r->verify.bytes); /* up to the first problem */
    if (!r->intact) {
        ckpt_jw_key(j, "error");
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "message");
        ckpt_jw_string(j, r->err.message);
        ckpt_jw_key(j, "file"); /* a set's shard, or the file examined */
        ckpt_jw_string(j, r->err.file[0] ? r->err.file : NULL);
        ckpt_jw_key(j, "member");
        ckpt_jw_string(j, r->err.member[0] ? r->err.member : NULL);
        ckpt_jw_key(j, "offset");
        if (r->err.offset != CKPT_NO_OFFSET)
            ckpt_jw_uint(j, r->err.offset);
        else
            ckpt_jw_null(j);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_object_end(j);
}

static void json_scan(ckpt_jw *j, const ckpt_doctor_scan *s) {
    const ckpt_scan_report *sr = s->report;
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "file");
    ckpt_jw_string(j, s->name);
    ckpt_jw_key(j, "verdict");
    ckpt_jw_string(j, sr ? ckpt_verdict_name(ckpt_scan_verdict(sr)) : "unscannable");
    if (!sr) {
        ckpt_jw_key(j, "error");
        ckpt_jw_string(j, s->error.message);
    }
    if (s->about) {
        ckpt_jw_key(j, "about");
        ckpt_jw_string(j, s->about);
    }
    ckpt_jw_key(j, "findings");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; sr && i < ckpt_scan_finding_count(sr); i++) {
        const ckpt_finding *f = ckpt_scan_finding(sr, i);
        if (f->severity == CKPT_SEVERITY_INFO) continue;
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "severity");
        ckpt_jw_string(j, ckpt_severity_name(f->severity));
        ckpt_jw_key(j, "kind");
        ckpt_jw_string(j, f->kind);
        if (f->global) {
            ckpt_jw_key(j, "global");
            ckpt_jw_string(j, f->global);
        }
        if (f->member && f->member[0]) {
            ckpt_jw_key(j, "member");
            ckpt_jw_string(j, f->member);
        }
        ckpt_jw_key(j, "offset");
        ckpt_jw_uint(j, f->offset);
        ckpt_jw_key(j, "message");
        ckpt_jw_string(j, f->message);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_weights_only wo;
    ckpt_jw_key(j, "weights_only");
    if (sr && ckpt_scan_weights_only(sr, &wo))
        ckpt_jw_string(j, wo.message);
    else
        ckpt_jw_null(j);
    ckpt_jw_object_end(j);
}

static void json_safety(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "verdict");
    ckpt_jw_string(j, ckpt_verdict_name(ckpt_doctor_scan_verdict(r)));
    ckpt_jw_key(j, "files");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < r->n_scans; i++) json_scan(j, &r->scans[i]);
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

static void json_entry(ckpt_jw *j, const ckpt_doctor_entry *e) {
    ckpt_kind kind = e->value ? ckpt_value_kind(e->value) : CKPT_KIND_DICT;
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "name");
    ckpt_jw_string_len(j, e->name, e->name_len);
    ckpt_jw_key(j, "kind");
    ckpt_jw_string(j, e->value ? ckpt_kind_name(kind) : "group");
    ckpt_jw_key(j, "tensors");
    ckpt_jw_uint(j, e->tensors);
    ckpt_jw_key(j, "elements");
    ckpt_jw_uint(j, e->elements);
    if (e->value && kind != CKPT_KIND_TENSOR && !is_container(kind)) {
        ckpt_jw_key(j, "value");
        ckpt_jw_leaf(j, e->value);
    }
    ckpt_jw_object_end(j);
}

static void json_contents(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "tensors");
    ckpt_jw_uint(j, r->f ? ckpt_file_tensor_count(r->f) : 0);
    ckpt_jw_key(j, "elements");
    ckpt_jw_uint(j, r->elements);
    ckpt_jw_key(j, "tensor_bytes");
    ckpt_jw_uint(j, r->tensor_bytes);
    ckpt_jw_key(j, "by_dtype");
    ckpt_jw_object_begin(j);
    for (unsigned dt = 0; dt < CKPT_DT_COUNT; dt++) {
        size_t count;
        uint64_t bytes = ckpt_doctor_dtype_bytes(r, (ckpt_dtype)dt, &count);
        if (count == 0) continue;
        ckpt_jw_key(j, ckpt_dtype_name((ckpt_dtype)dt));
        ckpt_jw_uint(j, bytes);
    }
    ckpt_jw_object_end(j);
    ckpt_jw_key(j, "top_level");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < r->n_top; i++) json_entry(j, &r->top[i]);
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

static void json_unvouched(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < r->n_notes; i++) ckpt_jw_string(j, r->notes[i]);
    ckpt_jw_array_end(j);
}

static void json_resume(const ckpt_doctor_report *r, ckpt_jw *j) {
    if (r->withheld) {
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "verdict");
        ckpt_jw_null(j);
        ckpt_jw_key(j, "withheld");
        ckpt_jw_string(j, r->withheld);
        ckpt_jw_object_end(j);
        return;
    }
    ckpt_report_resume(j, r->training);
}

/* A file whose bytes fail verification is no resume point, whatever its
 * structure says: torch.load does not check the CRC-32 of tensor data
 * (torch 2.13 and 1.13 load a flipped byte as a wrong value). */
static int withhold_resume(ckpt_doctor_report *r) {
    if (r->intact || r->f == NULL || r->err.code == CKPT_E_LIMIT) return 0;
    if (r->collide) {
        r->withheld = ckpt_arena_printf(
            &r->arena,
            "not assessed: the bytes verified, but two entries flatten to one name: \"%s\" is "
            "both %s and %s; a flat state_dict keeps only one of them: rename a key and save "
            "again",
            r->collide->collision_name, r->collide->collision_paths[0],
            r->collide->collision_paths[1]);
        return r->withheld ? 0 : -1;
    }
    const char *member = r->err.member ? r->err.member : "";
    int data = strstr(member, "/data/") != NULL;
    r->withheld = ckpt_arena_printf(
        &r->arena, "not assessed: the file's bytes fail verification (%s%s); %s",
        member[0] ? "member " : "", member[0] ? member : "at the offset above",
        data ? "the damage is inside tensor data, which torch.load would load as wrong values "
               "without an error: restore the file or resume from another checkpoint"
             : "resume from another checkpoint or restore this one");
    return r->withheld ? 0 : -1;
}

static void json_memory(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_report_memory(j, r->training);
}

static void json_metadata(const ckpt_doctor_report *r, ckpt_jw *j) {
    ckpt_report_metadata(j, r->training);
}

static void json_keys(const ckpt_doctor_report *r, ckpt_jw *j) {
    size_t n = r->keys ? ckpt_keys_wrapper_count(r->keys) : 0;
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "wrappers");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        const ckpt_key_wrapper *w = ckpt_keys_wrapper(r->keys, i);
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "segment");
        ckpt_jw_string(j, w->segment);
        ckpt_jw_key(j, "keys");
        ckpt_jw_uint(j, w->keys);
        ckpt_jw_key(j, "leading");
        ckpt_jw_bool(j, w->leading);
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_jw_key(j, "fix");
    ckpt_jw_string(j, r->keys ? ckpt_keys_fix_args(r->keys) : NULL);
    ckpt_jw_key(j, "fix_python");
    ckpt_jw_string(j, r->keys ? ckpt_keys_fix_python(r->keys) : NULL);
    ckpt_jw_key(j, "root");
    ckpt_jw_string(j, r->keys ? ckpt_keys_root(r->keys) : NULL);
    ckpt_jw_key(j, "collision");
    ckpt_jw_string(j, r->keys ? ckpt_keys_collision(r->keys) : NULL);
    ckpt_jw_object_end(j);
}

static void json_others(const ckpt_doctor_report *r, ckpt_jw *j) {
    if (r->dir == NULL && !r->sharded) {
        ckpt_jw_null(j);
        return;
    }
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < r->n_checks; i++) {
        const ckpt_doctor_check *c = &r->checks[i];
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "name");
        ckpt_jw_string(j, c->name);
        ckpt_jw_key(j, "ok");
        ckpt_jw_bool(j, c->ok);
        ckpt_jw_key(j, "bytes_checked");
        ckpt_jw_uint(j, c->bytes);
        ckpt_jw_key(j, "differs");
        ckpt_jw_bool(j, c->differs);
        if (!c->ok) {
            ckpt_jw_key(j, "error");
            ckpt_jw_string(j, c->error.message);
        }
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
}

/* "store: ckpt-5.pt does not verify (and N more)". */
static int concern_store(const ckpt_doctor_report *r, ckpt_buf *b) {
    size_t n = ckpt_store_list_count(r->store), bad = 0;
    const ckpt_store_generation *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(r->store, i);
        if (g->ok) continue;
        if (!first) first = g;
        bad++;
    }
    if (bad && b) {
        ckpt_buf_str(b, "store: ");
        ckpt_buf_str(b, first->file);
        ckpt_buf_str(b, " does not verify");
        if (bad > 1) ckpt_buf_printf(b, " (and %zu more)", bad - 1);
    }
    return bad != 0;
}

static void json_store(const ckpt_doctor_report *r, ckpt_jw *j) {
    const char *file = "";
    size_t n = ckpt_store_list_count(r->store);
    if (r->store == NULL) {
        ckpt_jw_null(j);
        return;
    }
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "pointer");
    ckpt_jw_string(j, ckpt_store_pointer_name(ckpt_store_list_pointer(r->store, &file)));
    ckpt_jw_key(j, "latest");
    ckpt_jw_string(j, file);
    ckpt_jw_key(j, "generations");
    ckpt_jw_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(r->store, i);
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "file");
        ckpt_jw_string(j, g->file);
        ckpt_jw_key(j, "step");
        ckpt_jw_uint(j, g->step);
        ckpt_jw_key(j, "ok");
        ckpt_jw_bool(j, g->ok);
        ckpt_jw_key(j, "latest");
        ckpt_jw_bool(j, g->latest);
        if (!g->ok) {
            ckpt_jw_key(j, "error");
            ckpt_jw_string(j, g->reason);
        }
        ckpt_jw_object_end(j);
    }
    ckpt_jw_array_end(j);
    ckpt_jw_object_end(j);
}

typedef struct section {
    const char *key; /* under "sections" */
    /* 1 when this section needs attention, and then (b not NULL) a short
     * phrase for the verdict line appended to b. NULL: never. */
    int (*concern)(const ckpt_doctor_report *r, ckpt_buf *b);
    void (*json)(const ckpt_doctor_report *r, ckpt_jw *j);
} section;

static const section sections[] = {
    {"format", NULL, json_format},
    {"integrity", concern_integrity, json_integrity},
    {"safety", concern_safety, json_safety},
    {"contents", NULL, json_contents},
    {"not_vouched_for", concern_unvouched, json_unvouched},
    {"resume", concern_resume, json_resume},
    {"keys", concern_keys, json_keys},
    {"memory", NULL, json_memory},
    {"metadata", NULL, json_metadata},
    {"other_files", concern_others, json_others},
    {"from_pretrained", concern_from_pretrained, json_from_pretrained},
    {"store", concern_store, json_store},
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

/* ------------------------------------------------------------ verdict */

/* The healthy verdict's last phrase: the resume verdict; a weights-only
 * file that is a PEFT LoRA adapter is called one (it was "a deployment
 * file", which an adapter alone is not). */
static void healthy_phrase(ckpt_buf *b, const ckpt_doctor_report *r) {
    size_t modules, factors;
    switch (ckpt_training_resume(r->training)) {
    case CKPT_RESUME_FULL: ckpt_buf_str(b, "resume: full-resume"); break;
    case CKPT_RESUME_WEIGHTS_ONLY:
        if ((factors = ckpt_adapter_factors(r->f, &modules)) != 0)
            ckpt_buf_printf(b,
                            "a PEFT LoRA adapter (%zu lora_A/lora_B keys for %zu target "
                            "module%s): apply it to its base model; not a resume checkpoint",
                            factors, modules, plural(modules));
        else
            ckpt_buf_str(b, "weights only: a deployment file, not a resume checkpoint");
        break;
    default: break;
    }
}

/* "HEALTHY: ..." or "ATTENTION: a; b" into r->summary. */
static int verdict(ckpt_doctor_report *r) {
    ckpt_buf b = {0};
    size_t k = 0;
    r->healthy = r->unloadable.code == 0;
    for (size_t i = 0; i < N_SECTIONS; i++)
        if (sections[i].concern && sections[i].concern(r, NULL)) r->healthy = 0;
    if (r->healthy) {
        size_t n = ckpt_file_tensor_count(r->f);
        ckpt_buf_str(&b, "HEALTHY: ");
        ckpt_buf_str(&b, ckpt_format_name(ckpt_file_format(r->f)));
        ckpt_buf_printf(&b, ", %zu key%s, %llu element%s, integrity OK", n, plural(n),
                        (unsigned long long)r->elements, plural(r->elements));
        if (r->training) {
            ckpt_buf_str(&b, "; ");
            healthy_phrase(&b, r);
        }
    } else {
        ckpt_buf_str(&b, "ATTENTION: ");
        if (r->unloadable.code) {
            ckpt_buf_str(&b, r->unloadable.message);
            k++;
        }
        for (size_t i = 0; i < N_SECTIONS; i++) {
            if (sections[i].concern == NULL || !sections[i].concern(r, NULL)) continue;
            if (k++) ckpt_buf_str(&b, "; ");
            sections[i].concern(r, &b);
        }
    }
    return ckpt_report_string(&r->summary, NULL, &b);
}

/* ------------------------------------------------------------ API */

int ckpt_doctor_options_init(ckpt_doctor_options *opts, unsigned version) {
    ckpt_doctor_options defaults = CKPT_DOCTOR_OPTIONS_INIT;
    if (!opts || version != CKPT_DOCTOR_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_DOCTOR_OPTIONS_VERSION);
    *opts = defaults;
    return 0;
}

/* Where the model's state dict sits in the weights file ("model",
 * "state_dict", ...; NULL at the top): the training analysis's model
 * component holding the most tensors. A directory's weights file is a
 * plain state dict. */
static const char *model_root(const ckpt_doctor_report *r) {
    const ckpt_component *best = NULL;
    size_t n = r->dir || !r->training ? 0 : ckpt_training_component_count(r->training);
    for (size_t i = 0; i < n; i++) {
        const ckpt_component *c = ckpt_training_component(r->training, i);
        if (c->kind == CKPT_COMPONENT_MODEL && (!best || c->tensors > best->tensors)) best = c;
    }
    return best ? best->name : NULL;
}

int ckpt_doctor(ckpt_doctor_report **out, const char *path, const ckpt_doctor_options *opts) {
    ckpt_doctor_options defaults = CKPT_DOCTOR_OPTIONS_INIT;
    ckpt_doctor_report *r;
    int rc;
    if (out == NULL || path == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET,
                        "ckpt_doctor: NULL argument");
    *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_DOCTOR_OPTIONS_VERSION);
    r = ckpt_malloc(sizeof *r);
    CKPT_CHECK_ALLOC(r);
    memset(r, 0, sizeof *r);
    r->opts = opts ? *opts : defaults;
    r->path = ckpt_arena_strdup(&r->arena, path);
    rc = r->path ? examine_dir(r) : ckpt_err_nomem();
    if (rc == 0) rc = examine(r);
    if (rc == 0 && withhold_resume(r)) rc = ckpt_err_nomem();
    if (rc == 0) rc = examine_safety(r);
    if (rc == 0 && r->f && ckpt_keys_hygiene_at(&r->keys, r->f, model_root(r)))
        rc = ckpt_err_nomem();
    if (rc == 0) {
        unvouched(r);
        rc = r->notes_nomem ? ckpt_err_nomem() : verdict(r);
    }
    if (rc) {
        ckpt_doctor_report_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int ckpt_doctor_pipeline(ckpt_doctor_report **out, const ckpt_pipeline *p, size_t i,
                         const ckpt_doctor_options *opts) {
    ckpt_doctor_report *r;
    const ckpt_error *e;
    int rc;
    if (out == NULL || ckpt_pipeline_path(p, i) == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, NULL, NULL, CKPT_NO_OFFSET,
                        "ckpt_doctor_pipeline: no pipeline component %zu", i);
    rc = ckpt_doctor(out, ckpt_pipeline_path(p, i), opts);
    if (rc) return rc;
    r = *out;
    r->component = ckpt_arena_strdup(&r->arena, ckpt_pipeline_component(p, i));
    rc = r->component ? ckpt_pipeline_check(p, i) : ckpt_err_nomem();
    if (rc && rc != CKPT_E_NOMEM) {
        e = ckpt_error_last();
        r->unloadable = *e;
        r->unloadable.message = ckpt_arena_strdup(&r->arena, e->message);
        r->unloadable.file = ckpt_arena_strdup(&r->arena, e->file ? e->file : r->path);
        r->unloadable.member = e->member ? ckpt_arena_strdup(&r->arena, e->member) : NULL;
        ckpt_free(r->summary);
        r->summary = NULL;
        rc = r->unloadable.message && r->unloadable.file ? verdict(r) : ckpt_err_nomem();
    }
    if (rc) {
        ckpt_doctor_report_free(r);
        *out = NULL;
    }
    return rc;
}

void ckpt_doctor_report_free(ckpt_doctor_report *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n_scans && (!r->walk || i < r->walk_first); i++)
        ckpt_scan_report_free((ckpt_scan_report *)r->scans[i].report);
    ckpt_scan_dir_free(r->walk); /* the reports of the rest */
    ckpt_keys_report_free(r->keys);
    ckpt_training_free(r->training);
    ckpt_store_listing_free(r->store);
    ckpt_close(r->f);
    ckpt_free(r->summary);
    ckpt_arena_free(&r->arena);
    ckpt_free(r);
}

/* "pipeline": {"component", "error": null or {"code", "message", "file",
 * "member", "offset"}}, as verify --json writes it. */
static void json_pipeline(const ckpt_doctor_report *r, ckpt_jw *j) {
    const ckpt_error *e = &r->unloadable;
    ckpt_jw_key(j, "pipeline");
    ckpt_jw_object_begin(j);
    ckpt_jw_key(j, "component");
    ckpt_jw_string(j, r->component);
    ckpt_jw_key(j, "error");
    if (e->code) {
        ckpt_jw_object_begin(j);
        ckpt_jw_key(j, "code");
        ckpt_jw_string(j, ckpt_error_name(e->code));
        ckpt_jw_key(j, "message");
        ckpt_jw_string(j, e->message);
        ckpt_jw_key(j, "file");
        ckpt_jw_string(j, e->file);
        ckpt_jw_key(j, "member");
        ckpt_jw_string(j, e->member && e->member[0] ? e->member : NULL);
        ckpt_jw_key(j, "offset");
        if (e->offset != CKPT_NO_OFFSET)
            ckpt_jw_uint(j, e->offset);
        else
            ckpt_jw_null(j);
        ckpt_jw_object_end(j);
    } else {
        ckpt_jw_null(j);
    }
    ckpt_jw_object_end(j);
}

int ckpt_doctor_json(char **out, size_t *len, const ckpt_doctor_report *r) {
    ckpt_buf b = {0};
    ckpt_jw j;
    *out = NULL;
    ckpt_jw_init(&j, &b);
    ckpt_jw_object_begin(&j);
    ckpt_jw_key(&j, "file");
    ckpt_jw_string(&j, r->path);
    if (r->component) json_pipeline(r, &j);
    if (r->dir) {
        ckpt_jw_key(&j, "directory");
        ckpt_jw_string(&j, r->dir);
    }
    ckpt_jw_key(&j, "format");
    ckpt_jw_string(&j, r->f ? ckpt_format_name(ckpt_file_format(r->f)) : NULL);
    ckpt_jw_key(&j, "verdict");
    ckpt_jw_string(&j, r->healthy ? "healthy" : "attention");
    ckpt_jw_key(&j, "summary");
    ckpt_jw_string(&j, r->summary);
    ckpt_jw_key(&j, "resume"); /* the contract: also at the top level */
    ckpt_report_resume(&j, r->training);
    ckpt_jw_key(&j, "sections");
    ckpt_jw_object_begin(&j);
    for (size_t i = 0; i < N_SECTIONS; i++) {
        ckpt_jw_key(&j, sections[i].key);
        sections[i].json(r, &j);
    }
    ckpt_jw_object_end(&j);
    ckpt_jw_object_end(&j);
    return ckpt_report_string(out, len, &b);
}

int ckpt_doctor_healthy(const ckpt_doctor_report *r) { return r->healthy; }
const char *ckpt_doctor_summary(const ckpt_doctor_report *r) { return r->summary; }
const char *ckpt_doctor_path(const ckpt_doctor_report *r) { return r->path; }
const char *ckpt_doctor_directory(const ckpt_doctor_report *r) { return r->dir; }
const char *ckpt_doctor_snapshot(const ckpt_doctor_report *r) { return r->snapshot; }
const ckpt_store_listing *ckpt_doctor_store(const ckpt_doctor_report *r) { return r->store; }
const char *ckpt_doctor_resume_withheld(const ckpt_doctor_report *r) { return r->withheld; }
const ckpt_file *ckpt_doctor_file(const ckpt_doctor_report *r) { return r->f; }
ckpt_format ckpt_doctor_detected(const ckpt_doctor_report *r) { return r->detected; }
uint64_t ckpt_doctor_size(const ckpt_doctor_report *r) { return r->size; }
const ckpt_error *ckpt_doctor_error(const ckpt_doctor_report *r) {
    return r->intact ? NULL : &r->err;
}
const ckpt_verify_report *ckpt_doctor_verify_report(const ckpt_doctor_report *r) {
    return &r->verify;
}
int ckpt_doctor_has_digests(const ckpt_doctor_report *r) {
    return r->f && ckpt_file_checksums(r->f) == CKPT_CHECKSUMS_DIGESTS;
}
uint64_t ckpt_doctor_elements(const ckpt_doctor_report *r) { return r->elements; }
uint64_t ckpt_doctor_tensor_bytes(const ckpt_doctor_report *r) { return r->tensor_bytes; }

uint64_t ckpt_doctor_dtype_bytes(const ckpt_doctor_report *r, ckpt_dtype dt, size_t *tensors) {
    int known = (unsigned)dt < CKPT_DT_COUNT;
    if (tensors) *tensors = known ? r->dtype_tensors[dt] : 0;
    return known ? r->dtype_bytes[dt] : 0;
}

size_t ckpt_doctor_entry_count(const ckpt_doctor_report *r) { return r->n_top; }
const ckpt_doctor_entry *ckpt_doctor_entry_at(const ckpt_doctor_report *r, size_t i) {
    return i < r->n_top ? &r->top[i] : NULL;
}
int ckpt_doctor_entries_cut(const ckpt_doctor_report *r) { return r->top_cut; }
size_t ckpt_doctor_check_count(const ckpt_doctor_report *r) { return r->n_checks; }
const ckpt_doctor_check *ckpt_doctor_check_at(const ckpt_doctor_report *r, size_t i) {
    return i < r->n_checks ? &r->checks[i] : NULL;
}
int ckpt_doctor_sharded(const ckpt_doctor_report *r) { return r->sharded; }
int ckpt_doctor_from_pretrained(const ckpt_doctor_report *r) { return r->from_pretrained; }
size_t ckpt_doctor_refusal_count(const ckpt_doctor_report *r) { return r->n_refusals; }
const ckpt_doctor_refusal *ckpt_doctor_refusal_at(const ckpt_doctor_report *r, size_t i) {
    return i < r->n_refusals ? &r->refusals[i] : NULL;
}
size_t ckpt_doctor_scan_count(const ckpt_doctor_report *r) { return r->n_scans; }
const ckpt_doctor_scan *ckpt_doctor_scan_at(const ckpt_doctor_report *r, size_t i) {
    return i < r->n_scans ? &r->scans[i] : NULL;
}
const ckpt_keys_report *ckpt_doctor_keys(const ckpt_doctor_report *r) { return r->keys; }
const ckpt_training *ckpt_doctor_training(const ckpt_doctor_report *r) { return r->training; }
size_t ckpt_doctor_note_count(const ckpt_doctor_report *r) { return r->n_notes; }
const char *ckpt_doctor_note(const ckpt_doctor_report *r, size_t i) {
    return i < r->n_notes ? r->notes[i] : NULL;
}
const char *ckpt_doctor_timing(const ckpt_doctor_report *r, size_t i, double *seconds) {
    if (i >= r->n_timings) return NULL;
    *seconds = r->timing_seconds[i];
    return r->timing_name[i];
}
