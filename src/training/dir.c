/* training_dir.c - ckpt_training_analyze_dir: a directory of checkpoint
 * files (the Hugging Face Trainer layout: model weights, optimizer.pt,
 * scheduler.pt, rng_state*.pth, trainer_state.json...) analysed as one
 * training checkpoint. Files are recognised by content: every regular file
 * is offered to ckpt_open, JSON files to the metadata reader. A ckpt store
 * (open/store_dir.h) and a folder with model weights in several files are
 * several checkpoints: refused, never combined. A backup ckpt kept
 * (NAME.bak: container/atomic.h) is no file a loader opens: never the
 * weights, an index or a stray shard (scan still scans it). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/source.h"
#include "container/atomic.h"
#include "open/model_dir.h"
#include "open/store_dir.h"
#include "training/training.h"

/* What a file's first bytes say it is. */
typedef enum sniff {
    SNIFF_OTHER = 0,
    SNIFF_JSON,      /* text starting with '{' */
    SNIFF_CHECKPOINT /* zip, pickle protocol 2+, or a safetensors header */
} sniff;

typedef struct entry {
    const char *name; /* inside the directory */
    const char *path; /* dir/name */
    int regular;      /* a regular file (else a directory or special) */
    int backup;       /* NAME.bak: ckpt's backup, not analysed */
    sniff kind;
    int index;           /* a JSON file with a "weight_map" */
    int shard;           /* listed by an index: analysed through it */
    const char **shards; /* index: the shard files it lists, in order */
    size_t nshards;
} entry;

typedef struct scan {
    ckpt_training *t;
    const char *dir;
    const ckpt_open_options *opts;
    entry *es;
    size_t n, cap;
} scan;

static int nomem(const char *dir) {
    return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* Reads up to cap bytes of the start of path; returns how many, or -1. */
static ssize_t read_head(const char *path, unsigned char *buf, size_t cap) {
    const char *why;
    int fd = ckpt_open_regular(path, NULL, &why);
    ssize_t n;

    if (fd < 0) return -1;
    n = read(fd, buf, cap);
    close(fd);
    return n;
}

static sniff sniff_file(const char *path) {
    unsigned char b[16];
    ssize_t n = read_head(path, b, sizeof b), i;

    if (n >= 4 && memcmp(b, "PK\3\4", 4) == 0) return SNIFF_CHECKPOINT;
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return SNIFF_CHECKPOINT;
    /* safetensors: a little-endian u64 header length, then '{' */
    if (n >= 9 && b[8] == '{' && b[7] == 0 && b[6] == 0) return SNIFF_CHECKPOINT;
    for (i = 0; i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t'); i++)
        ;
    return i < n && b[i] == '{' ? SNIFF_JSON : SNIFF_OTHER;
}

/* ------------------------------------------------------------ listing */

static int list_dir(scan *s) {
    ckpt_training *t = s->t;
    DIR *d = opendir(s->dir);
    struct dirent *de;
    struct stat st;
    int rc = 0;

    if (d == NULL)
        return ckpt_err(CKPT_E_IO, s->dir, NULL, CKPT_NO_OFFSET, "cannot open directory: %s",
                        strerror(errno));
    while (rc == 0 && (de = readdir(d)) != NULL) {
        entry *e;

        if (de->d_name[0] == '.') continue; /* ".", "..", hidden files and atomic-write temps */
        if (s->opts->limits.max_zip_entries && s->n >= s->opts->limits.max_zip_entries) {
            rc = ckpt_err(CKPT_E_LIMIT, s->dir, NULL, CKPT_NO_OFFSET,
                          "more than %llu directory entries, limit "
                          "max_zip_entries",
                          (unsigned long long)s->opts->limits.max_zip_entries);
            break;
        }
        if (ckpt_arena_grow(&t->arena, (void **)&s->es, &s->cap, s->n + 1, sizeof *s->es)) {
            rc = nomem(s->dir);
            break;
        }
        e = &s->es[s->n];
        memset(e, 0, sizeof *e);
        e->name = ckpt_arena_strdup(&t->arena, de->d_name);
        e->path = ckpt_arena_printf(&t->arena, "%s/%s", s->dir, de->d_name);
        if (e->name == NULL || e->path == NULL) {
            rc = nomem(s->dir);
            break;
        }
        e->regular = stat(e->path, &st) == 0 && S_ISREG(st.st_mode);
        e->backup = e->regular && ckpt_atomic_is_backup(e->name);
        if (e->regular && !e->backup) e->kind = sniff_file(e->path);
        s->n++;
    }
    closedir(d);
    if (rc == 0 && s->n) qsort(s->es, s->n, sizeof *s->es, cmp_entry);
    return rc;
}

static entry *find(scan *s, const char *name) {
    entry key;

    key.name = name;
    return s->n ? bsearch(&key, s->es, s->n, sizeof *s->es, cmp_entry) : NULL;
}

/* A tokenizer's or processor's JSON file (tokenizers' "version" is its
 * file format, not a library version): no metadata of the checkpoint,
 * and not read (a tokenizer.json runs to megabytes). */
static int tokenizer_json(const char *name) {
    static const char *const names[] = {"tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json",
                                        "vocab.json",
                                        "preprocessor_config.json",
                                        "processor_config.json",
                                        "chat_template.json"};
    size_t i;

    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(name, names[i]) == 0) return 1;
    return 0;
}

/* A JSON file with a "weight_map": remembers its shards (each once, in
 * order) and marks them so that they are not analysed twice. */
static int read_index(scan *s, entry *e) {
    ckpt_training *t = s->t;
    char *bytes;
    size_t len, cap = 0;
    json_t *doc, *map, *v;
    const char *k;
    int rc = ckpt_read_whole(e->path, s->opts->limits.max_index_bytes, &bytes, &len);

    if (rc) /* read again, and reported, by analyse_json */
        return rc == CKPT_E_NOMEM ? rc : 0;
    doc = json_loadb(bytes, len, 0, NULL);
    ckpt_free(bytes);
    map = json_object_get(doc, "weight_map");
    if (!json_is_object(map)) {
        json_decref(doc);
        return 0;
    }
    e->index = 1;
    json_object_foreach(map, k, v) {
        entry *shard = json_is_string(v) ? find(s, json_string_value(v)) : NULL;

        if (shard == NULL || shard->shard || shard == e) continue;
        shard->shard = 1;
        if (ckpt_arena_grow(&t->arena, (void **)&e->shards, &cap, e->nshards + 1,
                            sizeof *e->shards)) {
            json_decref(doc);
            return nomem(s->dir);
        }
        e->shards[e->nshards++] = shard->name;
    }
    json_decref(doc);
    return 0;
}

/* ------------------------------------------------------------ analysis */

static int own(ckpt_training *t, ckpt_file *f) {
    if (ckpt_arena_grow(&t->arena, (void **)&t->owned, &t->cowned, t->nowned + 1,
                        sizeof *t->owned)) {
        ckpt_close(f);
        return nomem("");
    }
    t->owned[t->nowned++] = f;
    return 0;
}

static int ignore(ckpt_training *t, const char *name) {
    return ckpt_tr_push_str(t, &t->ignored, &t->nignored, &t->cignored, name);
}

/* Opens and analyses one checkpoint file. A failure to open is a warning
 * for a file that looks like a checkpoint and "not a checkpoint" else. */
static int open_file(scan *s, const char *name, const char *path, sniff kind) {
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, s->opts);
    const ckpt_error *e;

    if (rc == CKPT_E_NOMEM) return rc;
    if (rc) {
        e = ckpt_error_last();
        if (kind != SNIFF_CHECKPOINT) return ignore(s->t, name);
        return ckpt_tr_warn(s->t, "%s could not be read: %s", name,
                            e && e->message ? e->message : ckpt_error_name(rc));
    }
    if ((rc = own(s->t, f))) return rc;
    return ckpt_tr_add_file(s->t, f, name);
}

/* A sharded set opens as one checkpoint (safetensors or .bin shards); a
 * set that does not (a missing, truncated or unreadable shard) fails the
 * analysis with the shard named: never a surviving shard analysed alone. */
static int analyse_index(scan *s, entry *e) {
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, e->path, s->opts);

    if (rc) return rc;
    if ((rc = own(s->t, f))) return rc;
    return ckpt_tr_add_file(s->t, f, e->name);
}

/* "NAME-00003-of-00005.EXT": the shard name Hugging Face writes. */
static int shard_like(const char *name) {
    char index[300];
    return ckpt_model_dir_shard_index(index, sizeof index, name);
}

/* A file named like a shard next to an index that does not list it: the
 * set on disk is not the one the index describes. Shard files without
 * any index (and no model weights file the directory stands for) are one
 * set whose index is missing (ckpt_open of the directory says so too),
 * not several checkpoints. */
static int check_unlisted(scan *s) {
    size_t i;
    int indexed = 0, weights = 0;

    for (i = 0; i < s->n; i++) {
        indexed |= s->es[i].index;
        weights |= s->es[i].regular && ckpt_model_dir_weights_name(s->es[i].name);
    }
    if (!indexed && !weights) {
        for (i = 0; i < s->n; i++)
            if (s->es[i].regular && s->es[i].kind == SNIFF_CHECKPOINT && shard_like(s->es[i].name))
                return ckpt_model_dir_orphan_shards(s->dir);
    }
    for (i = 0; indexed && i < s->n; i++) {
        const entry *e = &s->es[i];

        if (e->regular && !e->shard && !e->index && e->kind == SNIFF_CHECKPOINT &&
            shard_like(e->name))
            return ckpt_err(CKPT_E_MISMATCH, e->path, NULL, CKPT_NO_OFFSET,
                            "shard file \"%s\" is not listed by the index of "
                            "its directory",
                            e->name);
    }
    return 0;
}

static int analyse_json(scan *s, entry *e) {
    char *bytes;
    size_t len;
    int parsed, rc;

    if (tokenizer_json(e->name)) return ignore(s->t, e->name);
    rc = ckpt_read_whole(e->path, s->opts->limits.max_index_bytes, &bytes, &len);
    if (rc == CKPT_E_NOMEM) return rc;
    if (rc)
        return ckpt_tr_warn(s->t, "%s could not be read: %s", e->name, ckpt_error_last()->message);
    rc = ckpt_tr_meta_json(s->t, e->name, bytes, len, &parsed);
    ckpt_free(bytes);
    if (rc == 0 && !parsed) rc = ignore(s->t, e->name);
    return rc;
}

/* Several files with RNG states: one per process of a distributed run. */
static int note_processes(ckpt_training *t) {
    const char *last = NULL, *first = NULL;
    size_t i, files = 0;
    char text[96];

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;

        if (c->kind != CKPT_COMPONENT_RNG || (last && strcmp(last, c->file) == 0)) continue;
        if (first == NULL) first = c->file;
        last = c->file;
        files++;
    }
    if (files < 2) return 0;
    snprintf(text, sizeof text, "RNG states of %zu processes", files);
    return ckpt_tr_meta_add(t, CKPT_META_PARALLEL, first, "tree", "rng_state files", text, NULL);
}

/* Model weights in two files: a folder of several checkpoints (steps of
 * one run, or unrelated runs), not one checkpoint's parts. Combining
 * them would pair one step's optimizer with another's weights. The
 * weights files of a model directory (model.safetensors beside
 * pytorch_model.bin or model.fp16.safetensors, a variant: open/model_dir.h)
 * are copies of one save. */
static int check_one_model(scan *s) {
    const char *first = NULL;
    int first_hf = 0;
    size_t i;

    for (i = 0; i < s->t->ncomps; i++) {
        const ckpt_component *c = &s->t->comps[i].pub;
        int hf = c->kind == CKPT_COMPONENT_MODEL && ckpt_model_dir_rank(c->file);

        if (c->kind != CKPT_COMPONENT_MODEL) continue;
        if (first == NULL) {
            first = c->file;
            first_hf = hf;
        }
        if (strcmp(first, c->file) != 0 && !(hf && first_hf))
            return ckpt_err(CKPT_E_MISMATCH, s->dir, NULL, CKPT_NO_OFFSET,
                            "model weights in both \"%s\" and \"%s\": the directory holds "
                            "several checkpoints, not one, and they are not combined; "
                            "examine each file",
                            first, c->file);
    }
    return 0;
}

static int analyse(scan *s) {
    size_t i;
    int rc = list_dir(s);

    for (i = 0; rc == 0 && i < s->n; i++)
        if (s->es[i].regular && s->es[i].kind == SNIFF_JSON && !tokenizer_json(s->es[i].name))
            rc = read_index(s, &s->es[i]);
    if (rc == 0) rc = check_unlisted(s);
    for (i = 0; rc == 0 && i < s->n; i++) {
        entry *e = &s->es[i];
        const char *dirname;

        if (e->backup) {
            rc = ignore(s->t, e->name);
        } else if (!e->regular) {
            dirname = ckpt_arena_printf(&s->t->arena, "%s/", e->name);
            rc = dirname ? ignore(s->t, dirname) : nomem(s->dir);
        } else if (e->shard) {
            continue;
        } else if (e->index) {
            rc = analyse_index(s, e);
        } else if (e->kind == SNIFF_JSON) {
            rc = analyse_json(s, e);
        } else {
            rc = open_file(s, e->name, e->path, e->kind);
        }
    }
    if (rc == 0) rc = check_one_model(s);
    if (rc == 0) rc = note_processes(s->t);
    if (rc == 0) rc = ckpt_tr_finish(s->t, s->dir);
    return rc;
}

int ckpt_training_analyze_dir(ckpt_training **out, const char *dir, const ckpt_open_options *opts) {
    static const ckpt_open_options defaults = CKPT_OPEN_OPTIONS_INIT;
    scan s;
    int rc;

    if (out) *out = NULL;
    if (out == NULL || dir == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET,
                        "out or dir is NULL");
    CKPT_CHECK_OPTIONS(opts, CKPT_OPEN_OPTIONS_VERSION);
    if (ckpt_is_store_dir(dir))
        return ckpt_err(CKPT_E_MISMATCH, dir, NULL, CKPT_NO_OFFSET,
                        "a ckpt store (it holds LATEST): its generations are separate "
                        "checkpoints and are not combined; analyse the generation LATEST "
                        "names");
    memset(&s, 0, sizeof s);
    s.dir = dir;
    s.opts = opts ? opts : &defaults;
    if ((rc = ckpt_tr_new(&s.t))) return rc;
    rc = analyse(&s);
    if (rc) {
        ckpt_training_free(s.t);
        return rc;
    }
    *out = s.t;
    return 0;
}
