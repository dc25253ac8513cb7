/* torch.c - PyTorch checkpoints on top of the zip container and the pickle
 * machine: torch.save zip archives (torch >= 1.6), the legacy stacked-pickle
 * format (torch < 1.6) and plain pickle files. FORMATS.md §2 and §3. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model/dtype.h"
#include "base/decimal.h"
#include "base/error.h"
#include "base/json_scan.h"
#include "base/strmap.h"
#include "base/utf8.h"
#include "container/zip.h"
#include "model/file.h"
#include "format/pickle.h"
#include "format/pickle_log.h"

/* 0x1950a86a20f9469cfc6c, torch.serialization.MAGIC_NUMBER */
#define LEGACY_MAGIC "119547037146038801333356"
#define LEGACY_PROTOCOL 1001

typedef struct torch_reader {
    ckpt_file *f;
    /* data.pkl's events for a scan of the opened file (pickle_log.h),
     * while it runs; NULL for every other pickle */
    pk_log *log;
    int legacy;
    const char *member; /* the pickle being run, for errors */
    uint64_t base;      /* its offset in the file (pk_options.base_offset) */
    /* storages by key: a key that is a number below ndense in decimal
     * (torch.save's "0".."N-1", N at most the archive's member count)
     * at that index, any other key in `named` (to its index in order) */
    ckpt_storage **dense;
    size_t ndense;
    ckpt_strmap named;
    ckpt_storage **order; /* storages in first-use order */
    size_t norder, ordercap;
    uint64_t budget; /* the file's inflate budget left (ckpt_zip_budget) */
    /* the last storage class a persistent id named, once checked: torch
     * memoizes it, so every record names the same GLOBAL value (values
     * never change and live as long as the file) */
    const ckpt_value *class_seen;
    ckpt_dtype class_dt;
    int class_untyped;
    unsigned class_size; /* bytes per element numel counts (1: untyped) */
    unsigned key_kinds;  /* 1: a str storage key seen, 2: an int one */
} torch_reader;

/* A storage key and where it is kept: dense (at index) or named. */
typedef struct storage_key {
    const char *s;
    size_t len, index;
    int dense;
} storage_key;

static storage_key key_of(const torch_reader *r, const char *s) {
    storage_key k = {s, strlen(s), 0, 0};
    k.dense = ckpt_decimal_index(s, k.len, r->ndense, &k.index);
    return k;
}

static ckpt_storage *find_storage(const torch_reader *r, const storage_key *k) {
    if (k->dense) return r->dense[k->index];
    const ckpt_strmap_slot *s =
        ckpt_strmap_find(&r->named, k->s, k->len, ckpt_strmap_hash(k->s, k->len));
    return s ? r->order[s->val] : NULL;
}

/* Adds st under key (absent): 0 or -1 out of memory. */
static int add_storage(torch_reader *r, const storage_key *k, ckpt_storage *st) {
    ckpt_strmap_slot *s;
    if (r->norder == r->ordercap) { /* the reader's own, freed when it ends:
                                       not the file's arena, which keeps
                                       every array a doubling leaves */
        /* first as many as the archive has members: torch.save writes
         * one per storage */
        size_t cap = r->ordercap ? 2 * r->ordercap : r->ndense > 64 ? r->ndense : 64;
        ckpt_storage **o =
            cap < SIZE_MAX / sizeof *o ? ckpt_realloc(r->order, cap * sizeof *o) : NULL;
        if (!o) return -1;
        r->order = o;
        r->ordercap = cap;
    }
    if (k->dense)
        r->dense[k->index] = st;
    else if (ckpt_strmap_put(&r->named, k->s, k->len, r->norder, &s) < 0)
        return -1;
    r->order[r->norder++] = st;
    return 0;
}

/* Where value v of the pickle being run was built (ckpt_value_at), else
 * off. */
static uint64_t at(const torch_reader *r, const ckpt_value *v, uint64_t off) {
    uint64_t a = ckpt_value_at(v, r->base);
    return a != CKPT_NO_OFFSET ? a : off;
}

static const ckpt_value *tuple_item(const ckpt_value *t, size_t i) {
    return i < t->u.seq.n ? t->u.seq.items[i] : NULL;
}

static int get_u64(const ckpt_value *v, uint64_t *out) {
    if (!v || v->kind != CKPT_KIND_INT || v->u.i.decimal || v->u.i.v < 0) return -1;
    *out = (uint64_t)v->u.i.v;
    return 0;
}

/* Whether a persistent id's tag is the str `name`: torch compares a Python
 * str ('storage\0' is not 'storage'). */
static int is_tag(const ckpt_value *tag, const char *name) {
    size_t n = strlen(name);
    return tag->kind == CKPT_KIND_STR && tag->u.s.len == n && memcmp(tag->u.s.p, name, n) == 0;
}

/* persistent_load for torch pickles. Zip: ('storage', type, key, location,
 * numel); legacy: ('storage', type, root_key, location, numel,
 * view_metadata). numel counts elements, bytes for UntypedStorage. */
static int load_storage(void *ctx, ckpt_value *pid, uint64_t off, ckpt_value **out) {
    torch_reader *r = ctx;
    ckpt_file *f = r->f;
    const char *mem = r->member;
    /* legacy torch.save of a whole nn.Module names each module class as
     * ('module', class, source_file, source): torch's legacy reader gives
     * the class (any other length is its TypeError); the zip reader has
     * no such id */
    if (r->legacy && pid->kind == CKPT_KIND_TUPLE && pid->u.seq.n == 4 &&
        is_tag(tuple_item(pid, 0), "module")) {
        *out = pid->u.seq.items[1];
        return 0;
    }
    /* torch unpacks exactly 5 items (zip) or 6 (legacy) */
    if (pid->kind != CKPT_KIND_TUPLE || pid->u.seq.n != (r->legacy ? 6u : 5u))
        return ckpt_err(CKPT_E_FORMAT, f->path, mem, off,
                        r->legacy ? "persistent id is not a ('storage', type, key, location, "
                                    "numel, view_metadata) tuple"
                                  : "persistent id is not a ('storage', type, key, location, "
                                    "numel) tuple");
    const ckpt_value *tag = tuple_item(pid, 0), *type = tuple_item(pid, 1),
                     *key = tuple_item(pid, 2), *nv = tuple_item(pid, 4);
    if (!is_tag(tag, "storage"))
        return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, tag, off),
                        "persistent id tag is not 'storage'");
    if (type != r->class_seen) {
        if (type->kind != CKPT_KIND_GLOBAL_ || strncmp(type->u.global.module, "torch", 5) != 0)
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, type, off),
                            "persistent id names no torch storage type");
        r->class_dt = ckpt_dtype_from_storage_class(type->u.global.name);
        r->class_untyped = strcmp(type->u.global.name, "UntypedStorage") == 0;
        /* torch's legacy reader takes storage_type.dtype, which
         * UntypedStorage has not: torch 2.x writes one for a
         * _use_new_zipfile_serialization=False save of a uint16-64 or
         * float8 tensor, and no torch.load reads it back */
        if (r->legacy && r->class_untyped) {
            r->class_seen = NULL;
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, type, off),
                            "legacy persistent id names %s: torch.load's legacy reader needs "
                            "the storage type's dtype, which UntypedStorage has not "
                            "(AttributeError), so no torch loads this file",
                            type->u.global.qualname);
        }
        if (r->class_dt == CKPT_DT_UNKNOWN) {
            r->class_seen = NULL;
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, type, off),
                            "unknown storage type %s", type->u.global.qualname);
        }
        r->class_size = r->class_untyped ? 1u : ckpt_dtype_size(r->class_dt);
        r->class_seen = type;
    }
    ckpt_dtype dt = r->class_dt;
    uint64_t numel, nbytes;
    /* torch.load reads record f"data/{key}": an int key names its decimal
     * text (a zip's only: legacy keys are matched as the strings the file
     * lists) */
    const char *ktext = key->kind == CKPT_KIND_STR ? key->u.s.p : NULL;
    if (key->kind == CKPT_KIND_INT && !r->legacy)
        ktext = key->u.i.decimal ? key->u.i.decimal
                                 : ckpt_arena_printf(&f->arena, "%" PRId64, key->u.i.v);
    if (key->kind == CKPT_KIND_INT && !r->legacy && !ktext)
        return ckpt_err(CKPT_E_NOMEM, f->path, mem, off, "out of memory");
    if (!ktext || get_u64(nv, &numel))
        return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, !ktext ? key : nv, off),
                        r->legacy ? "persistent id needs a str key and a non-negative int size"
                                  : "persistent id needs a str or int key and a non-negative "
                                    "int size");
    /* torch keeps "0" and 0 apart (loaded_storages): two storages of one
     * record, which ckpt's one storage per key cannot be */
    r->key_kinds |= key->kind == CKPT_KIND_STR ? 1u : 2u;
    if (r->key_kinds == 3u)
        return ckpt_err(CKPT_E_UNSUPPORTED, f->path, mem, at(r, key, off),
                        "persistent ids use both str and int storage keys (this one: %s): "
                        "torch loads \"0\" and 0 as two storages of record data/0, "
                        "ckpt's storages are one per key text",
                        ktext);
    if (ckpt_mul_overflow(numel, r->class_size, &nbytes))
        return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, nv, off), "storage size overflows");

    /* a key seen before is the storage loaded then (torch's
     * loaded_storages / deserialized_objects): this id's type and numel
     * are not read again, and its tensors are bounded by that storage */
    storage_key sk = key_of(r, ktext);
    ckpt_storage *st = find_storage(r, &sk);
    if (!st) {
        st = ckpt_arena_alloc(&f->arena, sizeof *st);
        if (!st || add_storage(r, &sk, st))
            return ckpt_err(CKPT_E_NOMEM, f->path, mem, off, "out of memory");
        st->dtype = dt;
        st->nbytes = nbytes;
        st->key = ktext;
        st->member = "";
        st->file_offset = CKPT_NO_OFFSET;
        /* the location torch.load maps (map_location) or restores */
        const ckpt_value *loc = tuple_item(pid, 3);
        st->device = loc->kind == CKPT_KIND_STR ? loc->u.s.p : NULL;
    }
    /* legacy view: (view_key, offset, view_size) in elements of the root */
    const ckpt_value *view = r->legacy ? tuple_item(pid, 5) : NULL;
    if (view && view->kind != CKPT_KIND_NONE) {
        uint64_t voff, vsize, vend, vbytes;
        const ckpt_value *vkey = view->kind == CKPT_KIND_TUPLE ? tuple_item(view, 0) : NULL;
        if (!vkey || vkey->kind != CKPT_KIND_STR || get_u64(tuple_item(view, 1), &voff) ||
            get_u64(tuple_item(view, 2), &vsize))
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, at(r, view, off),
                            "storage view metadata is not (key, offset, size)");
        unsigned esz = ckpt_dtype_size(dt);
        if (ckpt_add_overflow(voff, vsize, &vend) || ckpt_mul_overflow(vend, esz, &vend) ||
            vend > st->nbytes || ckpt_mul_overflow(vsize, esz, &vbytes))
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, off,
                            "storage view %s reaches past its root storage %s", vkey->u.s.p,
                            key->u.s.p);
        storage_key vk = key_of(r, vkey->u.s.p);
        ckpt_storage *vst = find_storage(r, &vk);
        if (!vst) {
            vst = ckpt_arena_alloc(&f->arena, sizeof *vst);
            if (!vst || add_storage(r, &vk, vst))
                return ckpt_err(CKPT_E_NOMEM, f->path, mem, off, "out of memory");
            *vst = (ckpt_storage){.dtype = dt,
                                  .nbytes = vbytes,
                                  .key = vkey->u.s.p,
                                  .member = "",
                                  .file_offset = CKPT_NO_OFFSET,
                                  .base = st,
                                  .base_elem_offset = voff};
        } else if (vst->base != st || vst->base_elem_offset != voff || vst->nbytes != vbytes) {
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, off,
                            "storage view %s declared twice differently", vkey->u.s.p);
        }
        st = vst;
    }
    ckpt_value *v = ckpt_value_new(&f->arena, CKPT_KIND_STORAGE_);
    if (!v) return ckpt_err(CKPT_E_NOMEM, f->path, mem, off, "out of memory");
    v->u.storage = st;
    *out = v;
    return 0;
}

static void log_event(void *ctx, const pk_event *ev) {
    ckpt_pickle_log_event(((torch_reader *)ctx)->log, ev);
}

static int run_pickle(torch_reader *r, ckpt_value **out, size_t *consumed, const uint8_t *buf,
                      size_t len, const char *member, uint64_t base, int with_storages) {
    pk_options o = {0};
    o.file = r->f->path;
    o.member = member;
    o.base_offset = base;
    o.limits = &r->f->opts.limits;
    o.arena = &r->f->arena;
    o.persistent_load = with_storages ? load_storage : NULL;
    o.ctx = r;
    o.budget = &r->budget;
    r->member = member;
    r->base = base;
    pk_log *log = r->log;
    if (log) {
        o.on_event = log_event;
        o.weights_only = &log->wo;
        o.frame_rest = &log->frame_rest;
        o.ops = &log->ops;
    }
    uint64_t before = o.arena->total;
    int rc = ckpt_pickle_run(out, consumed, buf, len, &o);
    if (log) ckpt_pickle_log_end(log, rc, *consumed);
    /* the values outlive the run: the budget pays for them */
    uint64_t kept = o.arena->total - before;
    r->budget = kept < r->budget ? r->budget - kept : 0;
    return rc;
}

/* ------------------------------------------------------------ zip */

/* ------------------------------------------------------------ ckpt metadata */

/* The error json_scan recorded (it names no member), naming the record's
 * member. */
static int meta_error(const ckpt_file *f, const ckpt_zip_entry *e) {
    const ckpt_error *x = ckpt_error_last();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", x->message ? x->message : "");
    return ckpt_err(x->code, f->path, e->name, x->offset, "%s", msg);
}

/* Archives written by ckpt carry "<archive>/extra/ckpt_meta.json" (torch
 * ignores it): a JSON object of strings, the metadata the writer recorded
 * and the per-tensor digests "ckpt.xxh3" (ckpt.h, "write"). It becomes the
 * file's metadata, as __metadata__ does for safetensors. Bounded by
 * limits.max_header_bytes like a safetensors header. */
static int read_ckpt_meta(ckpt_file *f, const ckpt_zip *z, const char *prefix, uint64_t *budget) {
    const char *name = ckpt_arena_printf(&f->arena, "%s/extra/ckpt_meta.json", prefix);
    if (!name) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    const ckpt_zip_entry *e = ckpt_zip_find(z, name);
    if (!e) return 0;
    if (e->usize > f->opts.limits.max_header_bytes)
        return ckpt_err(CKPT_E_LIMIT, f->path, e->name, e->data_offset,
                        "metadata record of %llu bytes exceeds max_header_bytes",
                        (unsigned long long)e->usize);
    const uint8_t *text;
    int rc = ckpt_zip_load(z, e, &f->arena, budget, &text);
    if (rc) return rc;
    /* one pass, no tree: the digests are one string of 40 bytes per
     * tensor (a 100k-tensor file's record is 4.5 MB) */
    ckpt_json_scan j = {.s = text,
                        .n = (size_t)e->usize,
                        .arena = &f->arena,
                        .file = f->path,
                        .base = e->data_offset,
                        .what = "metadata record",
                        .max_depth = 1};
    if (ckpt_json_peek(&j) != '{')
        return ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->data_offset,
                        "metadata record is not a JSON object of strings");
    if (ckpt_json_open(&j)) return meta_error(f, e);
    ckpt_strmap seen = {0};
    size_t cap = 0, len;
    rc = ckpt_json_empty(&j, '}') ? 1 : 0;
    while (rc == 0) {
        const char *key = ckpt_json_string(&j, NULL, 0, 1, &len), *val;
        ckpt_strmap_slot *slot;
        if (!key || ckpt_json_expect(&j, ':', "':'")) {
            rc = -1;
        } else if (ckpt_json_peek(&j) != '"') {
            rc = ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->data_offset + j.i,
                          "metadata record: value of \"%s\" is not a string", key);
        } else if (!(val = ckpt_json_string(&j, NULL, 0, 1, &len))) {
            rc = -1;
        } else if ((rc = ckpt_strmap_put(&seen, key, strlen(key), 0, &slot)) == 0) {
            rc = ckpt_json_syntax(&j, "unique keys"); /* jansson's JSON_REJECT_DUPLICATES */
        } else if (rc == 1) {
            size_t vcap = cap;
            if (ckpt_arena_grow(&f->arena, (void **)&f->meta_keys, &cap, f->nmeta + 1,
                                sizeof(char *)) ||
                ckpt_arena_grow(&f->arena, (void **)&f->meta_vals, &vcap, f->nmeta + 1,
                                sizeof(char *))) {
                rc = ckpt_json_nomem(&j);
            } else {
                f->meta_keys[f->nmeta] = (char *)key;
                f->meta_vals[f->nmeta++] = (char *)val;
                rc = ckpt_json_next(&j, '}');
            }
        }
    }
    ckpt_strmap_free(&seen);
    if (rc == 1 && ckpt_json_peek(&j) != -1) rc = ckpt_json_syntax(&j, "the end after the object");
    if (rc < 0) return meta_error(f, e);
    f->has_metadata = 1;
    return 0;
}

/* A deflated storage, inflated on first read into the file's arena,
 * charged to the inflate budget the open left (f->inflate_left). */
typedef struct lazy_member {
    ckpt_file *f;
    const ckpt_zip_entry *e;
} lazy_member;

static int inflate_storage(ckpt_storage *st) {
    const lazy_member *lm = st->inflate_ctx;
    return ckpt_zip_read(lm->f->zip, lm->e, &lm->f->arena, &lm->f->inflate_left, &st->data);
}

/* torch.load lists every record (getAllRecords, for its TorchScript
 * test) before reading any: each name, as the C string miniz copies out
 * (up to a NUL, at most MINIZ_NAME_MAX bytes), must start with the first
 * record's "archive_name/" and decode as UTF-8 (pybind11, strict), or the
 * load fails. */
#define MINIZ_NAME_MAX 511
static int check_records(ckpt_file *f, const ckpt_zip *z, size_t plen) {
    const char *archive = z->entries[0].name;
    for (size_t i = 0; i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        size_t n = e->name_len < MINIZ_NAME_MAX ? e->name_len : MINIZ_NAME_MAX;
        const char *nul = memchr(e->name, 0, n);
        if (nul) n = (size_t)(nul - e->name);
        if (n <= plen || memcmp(e->name, archive, plen + 1) != 0)
            return ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->local_offset,
                            "record is not under the archive's '%.*s/' (torch.load lists "
                            "every record and refuses the archive)",
                            (int)plen, archive);
        if (!ckpt_utf8_check(e->name, n, 0))
            return ckpt_err(CKPT_E_FORMAT, f->path, NULL, e->local_offset,
                            "record name is not UTF-8 (torch.load lists every record "
                            "and cannot decode it)");
    }
    return 0;
}

/* PyTorchStreamReader::init: ".data/version" or else "version" holds the
 * file format version as std::stoull reads it (leading whitespace, a
 * sign, digits), within torch's supported range. */
#define ZIP_VERSION_MIN 1
#define ZIP_VERSION_MAX 10
static int check_version(ckpt_file *f, const ckpt_zip *z, const char *prefix) {
    const char *name = ckpt_arena_printf(&f->arena, "%s/.data/version", prefix);
    const ckpt_zip_entry *e = name ? ckpt_zip_find(z, name) : NULL;
    if (name && !e) name = ckpt_arena_printf(&f->arena, "%s/version", prefix);
    if (!name) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    if (!e && !(e = ckpt_zip_find(z, name)))
        return ckpt_err(CKPT_E_FORMAT, f->path, name, CKPT_NO_OFFSET,
                        "archive has no version record (.data/version or version)");
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    const uint8_t *v;
    int rc = ckpt_zip_read(z, e, &f->arena, &budget, &v);
    if (rc) return rc;
    size_t i = 0, n = (size_t)e->usize;
    uint64_t version = 0;
    while (i < n && (v[i] == ' ' || (v[i] >= '\t' && v[i] <= '\r'))) i++;
    int neg = i < n && v[i] == '-';
    if (i < n && (v[i] == '+' || v[i] == '-')) i++;
    size_t digits = i;
    while (i < n && v[i] >= '0' && v[i] <= '9' && version <= ZIP_VERSION_MAX)
        version = version * 10 + (uint64_t)(v[i++] - '0');
    if (i == digits || neg || version < ZIP_VERSION_MIN || version > ZIP_VERSION_MAX)
        return ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->data_offset,
                        "version record is not a file format version torch reads (%d to %d)",
                        ZIP_VERSION_MIN, ZIP_VERSION_MAX);
    return 0;
}

/* torch 2.x reads ".storage_alignment" with Python's int(): ASCII
 * whitespace around an optional sign and decimal digits, single
 * underscores between digits; anything else fails the load. */
static int is_python_int(const uint8_t *v, size_t n) {
    size_t i = 0, digits = 0;
    while (n > 0 && (v[n - 1] == ' ' || (v[n - 1] >= '\t' && v[n - 1] <= '\r'))) n--;
    while (i < n && (v[i] == ' ' || (v[i] >= '\t' && v[i] <= '\r'))) i++;
    if (i < n && (v[i] == '+' || v[i] == '-')) i++;
    for (; i < n; i++) {
        if (v[i] >= '0' && v[i] <= '9')
            digits++;
        else if (v[i] != '_' || !digits || i + 1 >= n || v[i + 1] < '0' || v[i + 1] > '9')
            return 0;
    }
    return digits > 0;
}

static int check_alignment(ckpt_file *f, const ckpt_zip *z, const char *prefix) {
    const char *name = ckpt_arena_printf(&f->arena, "%s/.storage_alignment", prefix);
    if (!name) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    const ckpt_zip_entry *e = ckpt_zip_find(z, name);
    if (!e) return 0;
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    const uint8_t *v;
    int rc = ckpt_zip_read(z, e, &f->arena, &budget, &v);
    if (rc) return rc;
    if (!is_python_int(v, (size_t)e->usize))
        return ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->data_offset,
                        ".storage_alignment record is not an integer (torch.load's int() "
                        "refuses it)");
    return 0;
}

/* An archive without data.pkl, which torch.load cannot read: named for
 * what it is when it is torch.export.save's (.pt2: an archive_format
 * record "pt2", the programs in models/, weights under data/weights/), which
 * torch.export.load reads and ckpt does not. */
static int no_data_pkl(ckpt_file *f, const ckpt_zip *z, const char *prefix, const char *name) {
    const char *fmt = ckpt_arena_printf(&f->arena, "%s/archive_format", prefix);
    const ckpt_zip_entry *e = fmt ? ckpt_zip_find(z, fmt) : NULL;
    if (e && e->usize == 3 && e->csize == 3 && e->method == 0) {
        uint8_t v[3];
        int rc = ckpt_source_read(z->src, z->buf + e->data_offset, v, 3, e->name);
        if (rc) return rc;
        if (memcmp(v, "pt2", 3) == 0)
            return ckpt_err(CKPT_E_UNSUPPORTED, f->path, e->name, e->data_offset,
                            "a torch.export archive (.pt2, torch.export.save; archive_format "
                            "'pt2'): it has no data.pkl, so torch.load cannot read it; "
                            "torch.export.load can, and ckpt does not read ExportedPrograms "
                            "(`ckpt scan` examines the pickles inside)");
    }
    return ckpt_err(CKPT_E_FORMAT, f->path, name, CKPT_NO_OFFSET,
                    "archive has no %s/data.pkl record", prefix);
}

/* Whether the file shrank since it was opened (or cannot be checked):
 * then an error a read met is reported at once, as every read's is. */
static int shrank(const ckpt_zip *z) {
    ckpt_err_kept kept;
    ckpt_err_keep(&kept);
    int rc = ckpt_source_check_size(z->src);
    ckpt_err_restore(&kept);
    return rc != 0;
}

/* Runs data.pkl right after z's directory is read, before the local
 * headers of the other members (ckpt_zip_open_members): the members of a
 * cold file then arrive from the disk, read ahead, while the pickle runs,
 * instead of before it starts (a cold 100k-tensor torch.save file of 30
 * MB, whose local headers span it all). Its answer is reported where
 * read_zip reports it in order, after every check that comes first:
 * *ran = 1 when it ran, *pk its answer (its error in *kept), r->budget
 * charged as in order (byteorder first). *ran = 0 when the archive is
 * one that the checks before the pickle refuse, or may refuse otherwise
 * than in order (no records, duplicates, no archive name, no data.pkl, a
 * byteorder record over the budget, data.pkl's local header unreadable):
 * it runs in order. Returns the error of a read of a file that shrank, or
 * CKPT_E_NOMEM (every failed allocation fails the open), else 0. */
/* data.pkl's bytes, copied from the file (a stored member): their CRC-32
 * goes with its entry, so that verify does not read them a second time. */
static void pkl_crc_seen(ckpt_zip *z, const ckpt_zip_entry *e, const uint8_t *bytes) {
    if (e->method == 0) ckpt_zip_crc_seen(&z->entries[e - z->entries], bytes, (size_t)e->usize);
}

/* data.pkl's run, its events logged for a scan (f->pickle_log) when it
 * is a stored member, whose bytes a scan reads where the run did. */
static int run_data_pkl(torch_reader *r, const ckpt_zip_entry *e, const uint8_t *bytes, size_t len,
                        uint64_t at, size_t *consumed) {
    ckpt_file *f = r->f;
    if (e->method == 0 &&
        !(f->pickle_log = ckpt_pickle_log_new(&f->arena, at, len, &f->opts.limits, r->budget)))
        return ckpt_err(CKPT_E_NOMEM, f->path, e->name, at, "out of memory");
    r->log = f->pickle_log;
    int rc = run_pickle(r, &f->root, consumed, bytes, len, e->name, at, 1);
    r->log = NULL;
    return rc;
}

static int run_early(torch_reader *r, ckpt_zip *z, int *ran, int *pk, ckpt_err_kept *kept) {
    ckpt_file *f = r->f;
    *ran = 0;
    if (z->count == 0 || z->has_duplicates) return 0;
    const char *first = z->entries[0].name, *slash = memchr(first, '/', z->entries[0].name_len);
    if (!slash) return 0;
    int plen = (int)(slash - first);
    const char *bo_name = ckpt_arena_printf(&f->arena, "%.*s/byteorder", plen, first);
    const char *pkl_name = ckpt_arena_printf(&f->arena, "%.*s/data.pkl", plen, first);
    if (!bo_name || !pkl_name) return ckpt_err_nomem();
    const ckpt_zip_entry *bo = ckpt_zip_find(z, bo_name), *e = ckpt_zip_find(z, pkl_name);
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    if (!e || (bo && bo->usize > budget)) return 0;
    r->ndense = z->count;
    r->dense = ckpt_arena_array(&f->arena, z->count, sizeof *r->dense);
    if (!r->dense) return ckpt_err_nomem();
    ckpt_zip_entry pkl = *e; /* its local header's fields, ahead of the others' */
    int rc = ckpt_zip_read_local(z, &pkl);
    if (rc) return rc == CKPT_E_NOMEM || shrank(z) ? rc : 0;
    r->budget = budget - (bo ? bo->usize : 0);
    const uint8_t *bytes;
    size_t consumed;
    ckpt_arena text = {0};
    if (!(rc = ckpt_zip_load(z, &pkl, &text, &r->budget, &bytes))) {
        pkl_crc_seen(z, e, bytes);
        rc = run_data_pkl(r, e, bytes, (size_t)pkl.usize, pkl.data_offset, &consumed);
    }
    ckpt_arena_free(&text);
    if ((rc == CKPT_E_IO || rc == CKPT_E_TRUNCATED) && shrank(z)) return rc;
    ckpt_err_keep(kept);
    *pk = rc;
    *ran = 1;
    return 0;
}

static int read_zip(torch_reader *r) {
    ckpt_file *f = r->f;
    f->format = CKPT_FORMAT_TORCH_ZIP;
    ckpt_zip *z = ckpt_arena_alloc(&f->arena, sizeof *z);
    if (!z) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    int rc = ckpt_zip_open_directory(z, &f->arena, f->map, f->map_size, &f->source, f->path,
                                     &f->opts.limits, CKPT_ZIP_TORCH);
    int early = 0, pk = 0;
    ckpt_err_kept kept;
    if (rc || (rc = run_early(r, z, &early, &pk, &kept)) ||
        (rc = ckpt_zip_open_members(z, &f->arena)))
        return rc;
    f->zip = z;
    if (z->count == 0)
        return ckpt_err(CKPT_E_FORMAT, f->path, NULL, 0, "zip archive has no records");
    /* a storage key names a member "data/<key>": torch.save's keys are
     * "0".."N-1", below the member count */
    r->ndense = z->count;
    if (!early) r->dense = ckpt_arena_array(&f->arena, z->count, sizeof *r->dense);
    if (!r->dense) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    if (z->has_duplicates)
        return ckpt_err(CKPT_E_FORMAT, f->path, NULL, CKPT_NO_OFFSET,
                        "zip archive has two records whose names differ at most "
                        "in ASCII case: torch's reader and Python's zipfile "
                        "read different ones");
    /* torch (PyTorchStreamReader::init) takes the archive name from the
     * first central-directory entry */
    const ckpt_zip_entry *first = &z->entries[0];
    const char *slash = memchr(first->name, '/', first->name_len);
    if (!slash)
        return ckpt_err(CKPT_E_FORMAT, f->path, first->name, first->local_offset,
                        "first record has no 'archive_name/' prefix");
    size_t plen = (size_t)(slash - first->name);
    char *prefix = ckpt_arena_strndup(&f->arena, first->name, plen);
    if (!prefix) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    if ((rc = check_records(f, z, plen)) || (rc = check_version(f, z, prefix)) ||
        (rc = check_alignment(f, z, prefix)))
        return rc;

    /* A TorchScript archive (torch.jit.save; it has a constants.pkl) is
     * read like any other: data.pkl holds the module objects, whose
     * BUILD makes their state dicts (builders.h); code/ is never read. */
    char *name;
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    if (!early) r->budget = budget;
    int big = 0;
    name = ckpt_arena_printf(&f->arena, "%s/byteorder", prefix);
    const ckpt_zip_entry *e = name ? ckpt_zip_find(z, name) : NULL;
    if (e) {
        const uint8_t *bo;
        /* the early run charged r->budget for it already */
        if ((rc = ckpt_zip_load(z, e, &f->arena, early ? &budget : &r->budget, &bo))) return rc;
        if (e->usize == 3 && memcmp(bo, "big", 3) == 0)
            big = 1;
        else if (!(e->usize == 6 && memcmp(bo, "little", 6) == 0))
            return ckpt_err(CKPT_E_FORMAT, f->path, e->name, e->data_offset,
                            "byteorder record is neither 'little' nor 'big'");
    }
    name = ckpt_arena_printf(&f->arena, "%s/data.pkl", prefix);
    e = name ? ckpt_zip_find(z, name) : NULL;
    if (!e) return no_data_pkl(f, z, prefix, name);
    /* the pickle's bytes are read once: reader mode copies every str and
     * bytes it keeps, so they go with the run (a 100k-tensor state dict's
     * are 11 MiB; the budget stays charged) */
    if (early) {
        if (pk) return ckpt_err_restore(&kept);
    } else {
        const uint8_t *pkl;
        size_t consumed;
        ckpt_arena text = {0};
        if (!(rc = ckpt_zip_load(z, e, &text, &r->budget, &pkl))) {
            pkl_crc_seen(z, e, pkl);
            rc = run_data_pkl(r, e, pkl, (size_t)e->usize, e->data_offset, &consumed);
        }
        ckpt_arena_free(&text);
        if (rc) return rc;
    }

    /* each storage's member where torch.save puts it, after the one
     * before (ckpt_zip_named_at), else looked up by name */
    char *dir = ckpt_arena_printf(&f->arena, "%s/data/", prefix);
    if (!dir) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
    size_t dlen = strlen(dir), next = 0;
    for (size_t i = 0; i < r->norder; i++) {
        ckpt_storage *st = r->order[i];
        const ckpt_zip_entry *d = ckpt_zip_named_at(z, next, dir, dlen, st->key, strlen(st->key));
        if (!d) {
            name = ckpt_arena_printf(&f->arena, "%s%s", dir, st->key);
            if (!name) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, 0, "out of memory");
            if (!(d = ckpt_zip_find(z, name)))
                return ckpt_err(CKPT_E_FORMAT, f->path, name, CKPT_NO_OFFSET,
                                "storage record named by data.pkl is missing");
        }
        next = (size_t)(d - z->entries) + 1;
        if (d->usize != st->nbytes)
            return ckpt_err(CKPT_E_MISMATCH, f->path, d->name, d->data_offset,
                            "storage record holds %llu bytes, data.pkl declares %llu",
                            (unsigned long long)d->usize, (unsigned long long)st->nbytes);
        /* everything about the member is checked now; a deflated one is
         * inflated when its bytes are first read */
        if ((rc = ckpt_zip_check(z, d, r->budget))) return rc;
        if (d->method == 0) {
            st->data = z->buf + d->data_offset;
        } else {
            lazy_member *lm = ckpt_arena_alloc(&f->arena, sizeof *lm);
            if (!lm)
                return ckpt_err(CKPT_E_NOMEM, f->path, d->name, d->data_offset, "out of memory");
            *lm = (lazy_member){f, d};
            st->inflate = inflate_storage;
            st->inflate_ctx = lm;
        }
        st->member = d->name;
        st->file_offset = d->method == 0 ? d->data_offset : CKPT_NO_OFFSET;
        st->big_endian = big;
        st->crc32 = d->crc32;
        st->has_crc32 = (uint8_t)ckpt_zip_crc_recorded(d);
    }
    rc = read_ckpt_meta(f, z, prefix, &r->budget);
    f->inflate_left = r->budget;
    return rc;
}

int ckpt_torch_read_zip(ckpt_file *f) {
    torch_reader r = {.f = f};
    int rc = read_zip(&r);
    ckpt_strmap_free(&r.named);
    ckpt_free(r.order);
    return rc;
}

/* ------------------------------------------------------------ legacy */

static int read_u64le(const uint8_t *p, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    *out = v;
    return 0;
}

/* run_pickle over one window of a stacked pickle (ckpt_source_window). */
typedef struct stacked {
    torch_reader *r;
    ckpt_value **out;
    size_t *consumed;
    uint64_t pos;
    const char *member;
    int with_storages;
} stacked;

static int run_window(void *ctx, const uint8_t *at, size_t len, int last) {
    stacked *s = ctx;
    (void)last;
    /* every run is charged to the budget, the ones cut short too */
    return run_pickle(s->r, s->out, s->consumed, at, len, s->member, s->pos, s->with_storages);
}

/* run_pickle over the pickle at p[pos..n) of the file, read with pread
 * (never through the mapping: the file may shrink) in a window that
 * grows until the pickle ends inside it (ckpt_source_window). The machine
 * copies what it keeps (reader mode), so the window is scratch and a run
 * cut short leaves nothing behind: the result is the run over the whole
 * rest of the file. */
static int run_stacked(torch_reader *r, ckpt_view *v, ckpt_value **out, size_t *consumed,
                       const uint8_t *p, size_t n, size_t pos, const char *member,
                       int with_storages) {
    stacked s = {r, out, consumed, pos, member, with_storages};
    return ckpt_source_window(&r->f->source, v, p + pos, n - pos, 0, member, run_window, &s);
}

/* Storage counts are 8 bytes before each storage's data: read through a
 * window this large when storages are small (one pread serves many),
 * else one page each. */
#define COUNTS_DENSE ((uint64_t)16 << 10)
#define COUNTS_AHEAD ((size_t)1 << 20)

/* The legacy stacked pickles and the storages after them (FORMATS.md
 * §3); pickles and storage counts are read through `win`. */
static int read_legacy(torch_reader *r, ckpt_view *win) {
    ckpt_file *f = r->f;
    r->legacy = 1;
    r->budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    const uint8_t *p = f->map;
    size_t n = f->map_size, pos = 0, used;
    ckpt_value *v;
    int rc = run_stacked(r, win, &v, &used, p, n, pos, NULL, 0); /* a plain pickle has no member */
    if (rc) {
        f->format = CKPT_FORMAT_PICKLE;
        return rc;
    }
    const char *dec = ckpt_value_int_decimal(v);
    if (!dec || strcmp(dec, LEGACY_MAGIC) != 0) {
        /* not a torch legacy file: a plain pickle */
        f->format = CKPT_FORMAT_PICKLE;
        f->root = v;
        return 0;
    }
    f->format = CKPT_FORMAT_TORCH_LEGACY;
    pos += used;
    if ((rc = run_stacked(r, win, &v, &used, p, n, pos, "protocol", 0))) return rc;
    /* torch tests protocol_version != 1001: the float 1001.0 passes */
    int64_t proto;
    if (ckpt_value_int(v, &proto) == 0 ? proto != LEGACY_PROTOCOL
                                       : v->kind != CKPT_KIND_FLOAT || v->u.f != LEGACY_PROTOCOL)
        return ckpt_err(CKPT_E_FORMAT, f->path, "protocol", at(r, v, pos),
                        "legacy protocol version is not %d", LEGACY_PROTOCOL);
    pos += used;
    if ((rc = run_stacked(r, win, &v, &used, p, n, pos, "sys_info", 0))) return rc;
    pos += used;
    if ((rc = run_stacked(r, win, &f->root, &used, p, n, pos, "main pickle", 1))) return rc;
    pos += used;
    ckpt_value *keys;
    uint64_t keys_at = pos;
    if ((rc = run_stacked(r, win, &keys, &used, p, n, pos, "storage keys", 0))) return rc;
    pos += used;
    if (keys->kind != CKPT_KIND_LIST)
        return ckpt_err(CKPT_E_FORMAT, f->path, "storage keys", at(r, keys, keys_at),
                        "storage key list is not a list");
    f->legacy_blobs_begin = pos;
    size_t ahead = keys->u.seq.n && (n - pos) / keys->u.seq.n < COUNTS_DENSE ? COUNTS_AHEAD : 4096;
    for (size_t i = 0; i < keys->u.seq.n; i++) {
        const ckpt_value *k = keys->u.seq.items[i];
        if (k->kind != CKPT_KIND_STR)
            return ckpt_err(CKPT_E_FORMAT, f->path, "storage keys", at(r, k, keys_at),
                            "storage key %zu is not a str", i);
        const char *mem = ckpt_arena_printf(&f->arena, "storage %s", k->u.s.p);
        storage_key sk = key_of(r, k->u.s.p);
        ckpt_storage *st = find_storage(r, &sk);
        if (!mem) return ckpt_err(CKPT_E_NOMEM, f->path, NULL, pos, "out of memory");
        if (!st || st->base)
            return ckpt_err(CKPT_E_FORMAT, f->path, mem, pos,
                            "storage key is not a storage of the main pickle");
        if (st->data) return ckpt_err(CKPT_E_FORMAT, f->path, mem, pos, "storage listed twice");
        uint64_t count, nbytes, end;
        if (n - pos < 8)
            return ckpt_err(CKPT_E_TRUNCATED, f->path, mem, pos,
                            "file ends before the storage's 8-byte element count");
        const uint8_t *at;
        if ((rc = ckpt_source_view(&f->source, win, p + pos, 8, ahead, mem, &at))) return rc;
        read_u64le(at, &count);
        unsigned esz = ckpt_dtype_size(st->dtype);
        if (ckpt_mul_overflow(count, esz, &nbytes) || nbytes != st->nbytes)
            return ckpt_err(CKPT_E_MISMATCH, f->path, mem, pos,
                            "storage holds %llu elements, the pickle declares %llu",
                            (unsigned long long)count,
                            (unsigned long long)(st->nbytes / (esz ? esz : 1)));
        pos += 8;
        if (ckpt_add_overflow(pos, nbytes, &end) || end > n)
            return ckpt_err(CKPT_E_TRUNCATED, f->path, mem, pos,
                            "file ends inside the storage's %llu bytes",
                            (unsigned long long)nbytes);
        st->data = p + pos;
        st->file_offset = pos;
        st->member = mem;
        pos = (size_t)end;
    }
    f->legacy_blobs_end = pos;
    for (size_t i = 0; i < r->norder; i++) {
        ckpt_storage *st = r->order[i];
        if (st->base) continue;
        if (!st->data)
            return ckpt_err(CKPT_E_TRUNCATED, f->path, NULL, pos,
                            "storage %s of the main pickle has no data in the file", st->key);
    }
    for (size_t i = 0; i < r->norder; i++) {
        ckpt_storage *st = r->order[i];
        if (!st->base) continue;
        uint64_t skip = st->base_elem_offset * ckpt_dtype_size(st->dtype);
        st->data = st->base->data + skip;
        st->file_offset = st->base->file_offset + skip;
        st->member = st->base->member;
    }
    return 0;
}

int ckpt_torch_read_legacy(ckpt_file *f) {
    ckpt_view win = {0};
    torch_reader r = {.f = f}; /* legacy keys are addresses: none dense */
    int rc = read_legacy(&r, &win);
    ckpt_view_free(&win);
    ckpt_strmap_free(&r.named);
    ckpt_free(r.order);
    return rc;
}
