/* dcp_meta.c - DCP `.metadata` through the restricted pickle machine
 * (dcp_meta.h). The machine leaves every DCP class an opaque OBJECT whose
 * BUILD state is its __dict__ (or TensorProperties' tuple); this file
 * reads those trees and refuses everything else. */
#include "format/dcp_meta.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strmap.h"
#include "format/pickle.h"
#include "model/dtype.h"
#include "model/value.h"

#define DCP_META "torch.distributed.checkpoint.metadata"
#define DCP_FS "torch.distributed.checkpoint.filesystem"

int ckpt_dcp_meta_allowed(const char *module, const char *name) {
    static const char *const meta[] = {
        "Metadata",         "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
        "TensorProperties", "_MEM_FORMAT_ENCODING",  "MetadataIndex",        "StorageMeta"};
    static const char *const paths[] = {"PosixPath", "WindowsPath", "PurePosixPath",
                                        "PureWindowsPath"};
    if (!strcmp(module, DCP_META)) {
        for (size_t i = 0; i < sizeof meta / sizeof *meta; i++)
            if (!strcmp(name, meta[i])) return 1;
        return 0;
    }
    if (!strcmp(module, DCP_FS)) return !strcmp(name, "_StorageInfo");
    if (!strcmp(module, "pathlib") || !strcmp(module, "pathlib._local")) {
        for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
            if (!strcmp(name, paths[i])) return 1;
        return 0;
    }
    if (!strcmp(module, "torch.serialization")) return !strcmp(name, "_get_layout");
    /* pickle protocols 0 and 1 save a dataclass instance as
     * copyreg._reconstructor(cls, object, None) (class_of) */
    if (!strcmp(module, "copyreg")) return !strcmp(name, "_reconstructor");
    if (!strcmp(module, "builtins")) return !strcmp(name, "object");
    if (!strcmp(module, "torch"))
        return !strcmp(name, "Size") || ckpt_dtype_from_torch_name(name) != CKPT_DT_UNKNOWN;
    return 0;
}

/* ------------------------------------------------------------ events */

typedef struct guard {
    char bad[256]; /* first global off the list, or "" */
    uint64_t bad_offset;
} guard;

static void on_event(void *ctx, const pk_event *ev) {
    guard *g = ctx;
    if (g->bad[0]) return;
    int off_list = (ev->kind == PK_EV_GLOBAL &&
                    (ev->symbolic || !ckpt_dcp_meta_allowed(ev->module, ev->name))) ||
                   (ev->kind == PK_EV_BUILD && ev->on_reference);
    if (!off_list) return;
    snprintf(g->bad, sizeof g->bad, "%s.%s", ev->module, ev->name);
    g->bad_offset = ev->offset;
}

/* ------------------------------------------------------------ the tree */

typedef struct reader {
    ckpt_arena *a;
    const char *file;
    const ckpt_limits *lim;
} reader;

/* Errors name the byte offset of the value at fault: the opcode that
 * built it (value.h ckpt_value_at; the pickle starts the file). A field
 * that is missing, or a value with no offset of its own (shared), is
 * blamed on what holds it: at(v, parent). */
static const ckpt_value *at(const ckpt_value *v, const ckpt_value *parent) {
    return ckpt_value_at(v, 0) != CKPT_NO_OFFSET ? v : parent;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
fail(const reader *r, int code, const ckpt_value *v, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckpt_err(code, r->file, "", ckpt_value_at(v, 0), "%s", msg);
}

/* The class of an object the machine left opaque: its name, or cls for
 * copyreg._reconstructor(cls, object, state), which is object.__new__(cls)
 * (state unused): how pickle.dump with protocol 0 or 1 saves an instance
 * that BUILD then fills, as protocol 2 and later do with NEWOBJ. */
static const char *class_of(const ckpt_value *v) {
    const char *name = v->u.obj.name;
    const ckpt_value *a = v->u.obj.args;
    if (strcmp(name, "copyreg._reconstructor") || !a || a->kind != CKPT_KIND_TUPLE ||
        a->u.seq.n != 3)
        return name;
    const ckpt_value *cls = a->u.seq.items[0], *base = a->u.seq.items[1];
    if (cls->kind != CKPT_KIND_GLOBAL_ || base->kind != CKPT_KIND_GLOBAL_ ||
        strcmp(base->u.global.qualname, "builtins.object"))
        return name;
    return cls->u.global.qualname;
}

/* What a value is, for "got ...": an object or global by its class name,
 * anything else by its kind; "nothing" for a missing field. */
static const char *got(const ckpt_value *v) {
    if (!v) return "nothing";
    if (v->kind == CKPT_KIND_NONE) return "None";
    if (v->kind == CKPT_KIND_OBJECT) return class_of(v);
    if (v->kind == CKPT_KIND_GLOBAL_) return v->u.global.qualname;
    return ckpt_value_kind_name(v->kind);
}

/* "expected `what`, got v" (at v, or at parent when v is missing), and
 * why torch cannot read it ("" or " (...)"). */
static int bad(const reader *r, const ckpt_value *v, const ckpt_value *parent, const char *what,
               const char *why) {
    return fail(r, CKPT_E_FORMAT, at(v, parent), "not a DCP Metadata pickle: expected %s, got %s%s",
                what, got(v), why);
}

/* The BUILD state of an OBJECT of class DCP_META/DCP_FS `cls`, or NULL. */
static const ckpt_value *state_of(const ckpt_value *v, const char *module, const char *cls) {
    if (!v || v->kind != CKPT_KIND_OBJECT) return NULL;
    size_t m = strlen(module);
    const char *name = class_of(v);
    if (strncmp(name, module, m) || name[m] != '.' || strcmp(name + m + 1, cls)) return NULL;
    return v->u.obj.state;
}

static int is_class(const ckpt_value *v, const char *module, const char *cls) {
    if (!v || v->kind != CKPT_KIND_OBJECT) return 0;
    size_t m = strlen(module);
    const char *name = class_of(v);
    return !strncmp(name, module, m) && name[m] == '.' && !strcmp(name + m + 1, cls);
}

/* d[key] for a str key (the last one, as a dict keeps), or NULL. */
static const ckpt_value *get(const ckpt_value *d, const char *key) {
    const ckpt_value *found = NULL;
    if (!d || d->kind != CKPT_KIND_DICT) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const ckpt_value *k = d->u.dict.keys[i];
        if (k->kind == CKPT_KIND_STR && !strcmp(k->u.s.p, key)) found = d->u.dict.vals[i];
    }
    return found;
}

static int get_u64(const ckpt_value *v, uint64_t *out) {
    if (!v || v->kind != CKPT_KIND_INT || v->u.i.decimal || v->u.i.v < 0) return -1;
    *out = (uint64_t)v->u.i.v;
    return 0;
}

/* A torch.Size (a TUPLE of ints once built) of at most max_ndim dims. */
static int get_shape(const reader *r, const ckpt_value *v, const ckpt_value *parent, uint32_t *ndim,
                     uint64_t **dims, const char *what, const char *fqn) {
    if (!v || (v->kind != CKPT_KIND_TUPLE && v->kind != CKPT_KIND_LIST))
        return fail(r, CKPT_E_FORMAT, at(v, parent), "\"%s\": expected a torch.Size as %s, got %s",
                    fqn, what, got(v));
    size_t n = v->u.seq.n;
    if (n > r->lim->max_ndim)
        return fail(r, CKPT_E_LIMIT, v, "\"%s\": %s has %zu dimensions, the limit is %u", fqn, what,
                    n, r->lim->max_ndim);
    *dims = ckpt_arena_array(r->a, n ? n : 1, sizeof **dims);
    CKPT_CHECK_ALLOC(*dims);
    for (size_t i = 0; i < n; i++)
        if (get_u64(v->u.seq.items[i], &(*dims)[i]))
            return fail(r, CKPT_E_FORMAT, at(v->u.seq.items[i], v),
                        "\"%s\": expected a non-negative int as %s[%zu], got %s", fqn, what, i,
                        v->u.seq.items[i]->kind == CKPT_KIND_INT ? "a negative or big int"
                                                                 : got(v->u.seq.items[i]));
    *ndim = (uint32_t)n;
    return 0;
}

/* MetadataIndex.offset as a sort key: None (a bytes item's), a tuple of
 * non-negative ints (a chunk's), or anything else, which no chunk finds. */
enum { OFS_NONE, OFS_DIMS, OFS_OTHER };

/* One storage_data entry: MetadataIndex(fqn, offset) -> _StorageInfo. */
typedef struct sentry {
    const char *fqn;
    int okind;      /* OFS_* */
    uint32_t ndim;  /* OFS_DIMS: dims[0..ndim) */
    uint64_t *dims; /* NULL unless OFS_DIMS */
    const char *path;
    size_t path_len; /* a NUL byte inside is not the end */
    uint64_t off, len;
    uint64_t at; /* of the _StorageInfo */
    size_t seq;
} sentry;

/* Orders by fqn, then offset (kind, dimension count, dims): entries with
 * one MetadataIndex are adjacent. */
static int key_cmp(const sentry *a, const char *fqn, int okind, uint32_t ndim,
                   const uint64_t *dims) {
    int c = strcmp(a->fqn, fqn);
    if (c) return c;
    if (a->okind != okind) return a->okind < okind ? -1 : 1;
    if (okind != OFS_DIMS) return 0;
    if (a->ndim != ndim) return a->ndim < ndim ? -1 : 1;
    for (uint32_t i = 0; i < ndim; i++)
        if (a->dims[i] != dims[i]) return a->dims[i] < dims[i] ? -1 : 1;
    return 0;
}

static int by_key(const void *x, const void *y) {
    const sentry *a = x, *b = y;
    int c = key_cmp(a, b->fqn, b->okind, b->ndim, b->dims);
    return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

/* Whether a _StorageInfo's transform_descriptors make FileSystemReader
 * transform the slice: it applies `descriptors or ()`, so None and every
 * empty or false value mean none. */
static int transforms(const ckpt_value *td) {
    if (!td) return 0;
    switch (td->kind) {
    case CKPT_KIND_NONE: return 0;
    case CKPT_KIND_BOOL: return td->u.b != 0;
    case CKPT_KIND_INT: return td->u.i.decimal || td->u.i.v != 0;
    case CKPT_KIND_FLOAT: return td->u.f != 0;
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: return td->u.s.len != 0;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_DICT:
    case CKPT_KIND_SET: return ckpt_value_len(td) != 0;
    default: return 1;
    }
}

static int storage_entry(const reader *r, const ckpt_value *k, const ckpt_value *v, sentry *e) {
    const ckpt_value *ks = state_of(k, DCP_META, "MetadataIndex");
    const ckpt_value *vs = state_of(v, DCP_FS, "_StorageInfo");
    const ckpt_value *fqn = get(ks, "fqn"), *path = get(vs, "relative_path");
    const ckpt_value *td = get(vs, "transform_descriptors");
    const ckpt_value *off = get(vs, "offset"), *len = get(vs, "length");
    if (!ks) return bad(r, k, NULL, "a MetadataIndex as a storage_data key", "");
    if (!fqn || fqn->kind != CKPT_KIND_STR)
        return bad(r, fqn, k, "a str as a storage_data key's fqn", "");
    if (!vs)
        return fail(r, CKPT_E_FORMAT, at(v, k),
                    "storage_data[\"%s\"]: expected a _StorageInfo (relative_path, offset, "
                    "length), got %s",
                    fqn->u.s.p, got(v));
    if (!path || path->kind != CKPT_KIND_STR)
        return fail(r, CKPT_E_FORMAT, at(path, v),
                    "storage_data[\"%s\"]: expected a str relative_path, got %s", fqn->u.s.p,
                    got(path));
    if (get_u64(off, &e->off) || get_u64(len, &e->len)) {
        const ckpt_value *b = get_u64(off, &e->off) ? off : len;
        return fail(r, CKPT_E_FORMAT, at(b, v),
                    "storage_data[\"%s\"]: expected a non-negative int %s, got %s", fqn->u.s.p,
                    b == off ? "offset" : "length",
                    b && b->kind == CKPT_KIND_INT ? "a negative or big int" : got(b));
    }
    if (transforms(td)) {
        /* the first descriptor (_extension.py "name[/version]"), when a str */
        const ckpt_value *d0 = (td->kind == CKPT_KIND_LIST || td->kind == CKPT_KIND_TUPLE) &&
                                       td->u.seq.items[0]->kind == CKPT_KIND_STR
                                   ? td->u.seq.items[0]
                                   : NULL;
        return fail(r, CKPT_E_UNSUPPORTED, at(td, v),
                    "storage_data[\"%s\"] has transform_descriptors (%.100s%s: DCP stream "
                    "extensions such as ZStandard compression), which ckpt does not undo: "
                    "its bytes are not what a loader gets",
                    fqn->u.s.p, d0 ? d0->u.s.p : "not a list of str",
                    ckpt_value_len(td) > 1 ? ", ..." : "");
    }
    e->fqn = fqn->u.s.p;
    e->path = path->u.s.p;
    e->path_len = path->u.s.len;
    e->at = ckpt_value_at(v, 0);
    /* MetadataIndex equality on the offset: both None, or equal ints */
    const ckpt_value *o = get(ks, "offset");
    char why[160];
    if (o && ckpt_value_hashable(o, "offset", why, sizeof why)) /* the dict's hash raises */
        return fail(r, CKPT_E_FORMAT, at(o, k),
                    "storage_data key MetadataIndex(\"%s\") has an unhashable offset "
                    "(pickle.load fails building the dict): %s",
                    fqn->u.s.p, why);
    e->okind = !o || o->kind == CKPT_KIND_NONE ? OFS_NONE : OFS_OTHER;
    e->ndim = 0;
    e->dims = NULL;
    if (o && o->kind == CKPT_KIND_TUPLE && o->u.seq.n <= r->lim->max_ndim) {
        e->dims = ckpt_arena_array(r->a, o->u.seq.n ? o->u.seq.n : 1, sizeof *e->dims);
        CKPT_CHECK_ALLOC(e->dims);
        e->okind = OFS_DIMS;
        e->ndim = (uint32_t)o->u.seq.n;
        for (size_t i = 0; e->okind == OFS_DIMS && i < o->u.seq.n; i++)
            if (get_u64(o->u.seq.items[i], &e->dims[i])) e->okind = OFS_OTHER;
    }
    return 0;
}

/* The storage_data entry of a chunk (a bytes item: offset None): the
 * last equal key wins, as in the dict. s is sorted by by_key: a binary
 * search for the end of the key's run, O(log n) per chunk. */
static const sentry *lookup(const sentry *s, size_t n, const char *fqn, const uint64_t *offsets,
                            uint32_t ndim, int is_bytes) {
    int okind = is_bytes ? OFS_NONE : OFS_DIMS;
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first entry past the key */
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(&s[mid], fqn, okind, ndim, offsets) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && key_cmp(&s[lo - 1], fqn, okind, ndim, offsets) == 0 ? &s[lo - 1] : NULL;
}

/* The one-argument call `module.name(arg)` the machine left opaque, or
 * NULL: its argument. */
static const ckpt_value *call_arg(const ckpt_value *v, const char *module, const char *name) {
    if (!is_class(v, module, name) || !v->u.obj.args || v->u.obj.args->kind != CKPT_KIND_TUPLE ||
        v->u.obj.args->u.seq.n != 1)
        return NULL;
    return v->u.obj.args->u.seq.items[0];
}

/* TensorProperties.__setstate__ unpacks (dtype, layout, requires_grad,
 * memory-format encoding, pin_memory) and raises unless the encoding is
 * one of _MEM_FORMAT_ENCODING's three members; the layout, pickled as
 * torch.serialization._get_layout(NAME), raises KeyError for a NAME that
 * is not one of torch's layouts. Either way torch cannot read the file. */
static int tensor_properties(const reader *r, const char *fqn, const ckpt_value *ps) {
    static const char *const layouts[] = {
        "torch.strided",    "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc",
        "torch.sparse_bsr", "torch.sparse_bsc", "torch._mkldnn",    "torch.jagged"};
    if (ps->u.seq.n != 5)
        return fail(r, CKPT_E_FORMAT, ps,
                    "\"%s\": expected TensorProperties' state to hold the 5 values "
                    "__setstate__ unpacks, got %zu",
                    fqn, ps->u.seq.n);
    const ckpt_value *lay = ps->u.seq.items[1];
    const ckpt_value *name = call_arg(lay, "torch.serialization", "_get_layout");
    if (is_class(lay, "torch.serialization", "_get_layout")) {
        int known = 0, is_str = name && name->kind == CKPT_KIND_STR;
        for (size_t i = 0; is_str && i < sizeof layouts / sizeof *layouts; i++)
            known |= !strcmp(name->u.s.p, layouts[i]);
        if (!known)
            return fail(r, CKPT_E_FORMAT, at(name, lay),
                        "\"%s\": expected one of torch's layouts (torch.strided...) as "
                        "the layout, got %.100s (torch.serialization._get_layout raises)",
                        fqn, is_str ? name->u.s.p : got(name));
    }
    const ckpt_value *enc = call_arg(ps->u.seq.items[3], DCP_META, "_MEM_FORMAT_ENCODING");
    uint64_t code;
    if (!enc || get_u64(enc, &code) || code > 2) {
        const ckpt_value *m = ps->u.seq.items[3];
        char v[32];
        if (enc && enc->kind == CKPT_KIND_INT && !enc->u.i.decimal)
            snprintf(v, sizeof v, "%lld", (long long)enc->u.i.v);
        return fail(r, CKPT_E_FORMAT, at(enc, at(m, ps)),
                    "\"%s\": expected a _MEM_FORMAT_ENCODING member (0, 1 or 2) as "
                    "TensorProperties' memory format, got %s%s (__setstate__ raises)",
                    fqn, enc ? "_MEM_FORMAT_ENCODING of " : "",
                    enc && enc->kind == CKPT_KIND_INT && !enc->u.i.decimal ? v
                    : enc                                                  ? got(enc)
                                                                           : got(m));
    }
    return 0;
}

static int tensor_item(const reader *r, ckpt_dcp_item *it, const ckpt_value *tsm) {
    const ckpt_value *st = tsm->u.obj.state;
    const ckpt_value *props = get(st, "properties");
    const ckpt_value *ps =
        is_class(props, DCP_META, "TensorProperties") ? props->u.obj.state : NULL;
    /* __getstate__ gives a tuple whose first item is the dtype; older
     * versions pickled the dataclass __dict__ */
    const ckpt_value *dt =
        ps && ps->kind == CKPT_KIND_TUPLE && ps->u.seq.n ? ps->u.seq.items[0] : get(ps, "dtype");
    if (ps && ps->kind == CKPT_KIND_TUPLE) {
        int rc = tensor_properties(r, it->fqn, ps);
        if (rc) return rc;
    }
    if (!dt || dt->kind != CKPT_KIND_GLOBAL_ || strcmp(dt->u.global.module, "torch"))
        return fail(r, CKPT_E_FORMAT, at(dt, at(ps, at(props, tsm))),
                    "\"%s\": expected a torch dtype in its properties, got %s", it->fqn,
                    got(dt   ? dt
                        : ps ? NULL
                             : props));
    it->dtype = ckpt_dtype_from_torch_name(dt->u.global.name);
    if (it->dtype == CKPT_DT_UNKNOWN)
        return fail(r, CKPT_E_UNSUPPORTED, dt, "\"%s\": dtype torch.%s has no ckpt dtype", it->fqn,
                    dt->u.global.name);
    const ckpt_value *size = get(st, "size");
    int rc = get_shape(r, size, tsm, &it->ndim, &it->size, "size", it->fqn);
    if (rc) return rc;
    /* every load planner checks md.size != tensor.size(): a list is never
     * equal to the torch.Size (a tuple) of the tensor it loads into */
    if (size->kind == CKPT_KIND_LIST)
        return fail(r, CKPT_E_FORMAT, size,
                    "\"%s\": expected a torch.Size as size, got list (the load planner's size "
                    "check fails: Size mismatch between saved and current)",
                    it->fqn);
    const ckpt_value *chunks = get(st, "chunks");
    if (!chunks || chunks->kind != CKPT_KIND_LIST)
        return fail(r, CKPT_E_FORMAT, at(chunks, tsm), "\"%s\": expected a list as chunks, got %s",
                    it->fqn, got(chunks));
    it->nchunks = chunks->u.seq.n;
    it->chunks = ckpt_arena_array(r->a, it->nchunks ? it->nchunks : 1, sizeof *it->chunks);
    CKPT_CHECK_ALLOC(it->chunks);
    for (size_t c = 0; c < it->nchunks; c++) {
        const ckpt_value *cv = chunks->u.seq.items[c];
        const ckpt_value *cs = state_of(cv, DCP_META, "ChunkStorageMetadata");
        ckpt_dcp_chunk *ch = &it->chunks[c];
        uint32_t no, ns;
        if (!cs)
            return fail(r, CKPT_E_FORMAT, at(cv, chunks),
                        "\"%s\": expected a ChunkStorageMetadata as chunk %zu, got %s", it->fqn, c,
                        got(cv));
        const ckpt_value *ov = get(cs, "offsets"), *sv = get(cs, "sizes");
        if ((rc = get_shape(r, ov, cv, &no, &ch->offsets, "chunk offsets", it->fqn)) ||
            (rc = get_shape(r, sv, cv, &ns, &ch->sizes, "chunk sizes", it->fqn)))
            return rc;
        if (no != it->ndim || ns != it->ndim)
            return fail(r, CKPT_E_FORMAT, no != it->ndim ? ov : sv,
                        "\"%s\": expected %u offsets and sizes in chunk %zu (the tensor's "
                        "dimensions), got %u offsets and %u sizes",
                        it->fqn, it->ndim, c, no, ns);
        for (uint32_t d = 0; d < it->ndim; d++)
            if (ch->offsets[d] > it->size[d] || ch->sizes[d] > it->size[d] - ch->offsets[d])
                return fail(r, CKPT_E_FORMAT,
                            ch->offsets[d] > it->size[d] ? at(ov->u.seq.items[d], ov)
                                                         : at(sv->u.seq.items[d], sv),
                            "\"%s\": expected chunk %zu inside [0, %llu) along dimension %u, "
                            "got offset %llu and size %llu",
                            it->fqn, c, (unsigned long long)it->size[d], d,
                            (unsigned long long)ch->offsets[d], (unsigned long long)ch->sizes[d]);
    }
    return 0;
}

/* DCP names an item ".".join(map(str, path)) (flatten_state_dict): the
 * state dict dcp_to_torch_save rebuilds along planner_data is loaded by
 * those names, which must be fqns ("Missing key in checkpoint
 * state_dict" otherwise), and dcp.load knows an item by its fqn alone. */
static int path_names_fqn(const char *fqn, const ckpt_value *p) {
    for (size_t i = 0; i < p->u.seq.n; i++) {
        const ckpt_value *k = p->u.seq.items[i];
        char num[24];
        const char *s = num;
        size_t len;
        if (k->kind == CKPT_KIND_STR)
            s = k->u.s.p, len = k->u.s.len;
        else
            len = (size_t)snprintf(num, sizeof num, "%" PRId64, k->u.i.v);
        if (i && *fqn++ != '.') return 0;
        if (strnlen(fqn, len) != len || memcmp(fqn, s, len) != 0) return 0;
        fqn += len;
    }
    return *fqn == '\0';
}

/* planner_data[fqn] as an object path: a tuple of str and int keys. A
 * missing entry leaves the item at the top level under its fqn. */
static int item_path(const reader *r, ckpt_dcp_item *it, const ckpt_strmap *index,
                     const ckpt_value *pd) {
    size_t len = strlen(it->fqn);
    const ckpt_strmap_slot *slot =
        ckpt_strmap_find(index, it->fqn, len, ckpt_strmap_hash(it->fqn, len));
    if (!slot) return 0;
    const ckpt_value *p = pd->u.dict.vals[slot->val];
    int ok = p->kind == CKPT_KIND_TUPLE && p->u.seq.n > 0;
    for (size_t i = 0; ok && i < p->u.seq.n; i++) {
        const ckpt_value *k = p->u.seq.items[i];
        ok = k->kind == CKPT_KIND_STR || (k->kind == CKPT_KIND_INT && !k->u.i.decimal);
    }
    if (!ok)
        return fail(r, CKPT_E_FORMAT, at(p, pd),
                    "planner_data[\"%s\"]: expected a non-empty tuple of str and int keys, "
                    "got %s",
                    it->fqn,
                    p->kind != CKPT_KIND_TUPLE ? got(p)
                    : p->u.seq.n               ? "a tuple holding another kind of key"
                                               : "an empty tuple");
    if (!path_names_fqn(it->fqn, p))
        return fail(r, CKPT_E_FORMAT, at(p, pd),
                    "planner_data[\"%s\"]: the path's keys joined by '.' are not the fqn "
                    "(dcp_to_torch_save fails: Missing key in checkpoint state_dict)",
                    it->fqn);
    it->path = (const ckpt_value *const *)p->u.seq.items;
    it->npath = p->u.seq.n;
    return 0;
}

static int read_paths(const reader *r, ckpt_dcp_meta *out, const ckpt_value *pd) {
    if (!pd || pd->kind != CKPT_KIND_DICT) return 0; /* not flattened: items stay flat */
    ckpt_strmap index = {0};
    int rc = ckpt_strmap_reserve(&index, pd->u.dict.n);
    for (size_t i = 0; rc == 0 && i < pd->u.dict.n; i++) {
        const ckpt_value *k = pd->u.dict.keys[i];
        ckpt_strmap_slot *slot;
        if (k->kind != CKPT_KIND_STR) continue;
        if (ckpt_strmap_put(&index, k->u.s.p, k->u.s.len, i, &slot) < 0)
            rc = ckpt_err_nomem();
        else
            slot->val = i; /* a repeated key: the last value, as the dict keeps */
    }
    for (size_t i = 0; rc == 0 && i < out->nitems; i++)
        rc = item_path(r, &out->items[i], &index, pd);
    ckpt_strmap_free(&index);
    return rc;
}

static int read_items(const reader *r, ckpt_dcp_meta *out, const ckpt_value *sdm,
                      const ckpt_value *sd) {
    size_t ns = sd->u.dict.n;
    sentry *s = ckpt_arena_array(r->a, ns ? ns : 1, sizeof *s);
    CKPT_CHECK_ALLOC(s);
    for (size_t i = 0; i < ns; i++) {
        int rc = storage_entry(r, sd->u.dict.keys[i], sd->u.dict.vals[i], &s[i]);
        if (rc) return rc;
        s[i].seq = i;
    }
    if (ns > 1) qsort(s, ns, sizeof *s, by_key);
    out->nitems = sdm->u.dict.n;
    out->items = ckpt_arena_array(r->a, out->nitems ? out->nitems : 1, sizeof *out->items);
    CKPT_CHECK_ALLOC(out->items);
    for (size_t i = 0; i < out->nitems; i++) {
        const ckpt_value *k = sdm->u.dict.keys[i], *v = sdm->u.dict.vals[i];
        ckpt_dcp_item *it = &out->items[i];
        if (k->kind != CKPT_KIND_STR)
            return bad(r, k, sdm, "a str as a state_dict_metadata key", "");
        it->fqn = k->u.s.p;
        int rc = 0;
        if (is_class(v, DCP_META, "BytesStorageMetadata")) {
            it->is_bytes = 1;
            it->nchunks = 1;
            it->chunks = ckpt_arena_alloc(r->a, sizeof *it->chunks);
            CKPT_CHECK_ALLOC(it->chunks);
        } else if (is_class(v, DCP_META, "TensorStorageMetadata")) {
            rc = tensor_item(r, it, v);
        } else {
            return fail(r, CKPT_E_FORMAT, at(v, k),
                        "state_dict_metadata[\"%s\"]: expected a TensorStorageMetadata or a "
                        "BytesStorageMetadata, got %s",
                        it->fqn, got(v));
        }
        for (size_t c = 0; rc == 0 && c < it->nchunks; c++) {
            ckpt_dcp_chunk *ch = &it->chunks[c];
            const sentry *e = lookup(s, ns, it->fqn, ch->offsets, it->ndim, it->is_bytes);
            if (!e)
                return fail(r, CKPT_E_FORMAT,
                            it->is_bytes ? v : get(v->u.obj.state, "chunks")->u.seq.items[c],
                            "\"%s\": expected a storage_data entry for %s %zu (the file that "
                            "holds its bytes), got none",
                            it->fqn, it->is_bytes ? "bytes item" : "chunk", c);
            ch->path = e->path;
            ch->path_len = e->path_len;
            ch->offset = e->off;
            ch->length = e->len;
            ch->meta_file = r->file;
            ch->meta_at = e->at;
        }
        if (rc) return rc;
    }
    return 0;
}

int ckpt_dcp_meta_parse(ckpt_dcp_meta *out, ckpt_arena *a, const uint8_t *p, size_t n,
                        const char *file, const ckpt_limits *limits) {
    memset(out, 0, sizeof *out);
    ckpt_limits defaults = CKPT_LIMITS_INIT;
    reader r = {a, file, limits ? limits : &defaults};
    guard g = {{0}, 0};
    pk_options o = {
        .file = file, .member = "", .limits = r.lim, .arena = a, .on_event = on_event, .ctx = &g};
    ckpt_value *root = NULL;
    size_t used = 0;
    int rc = ckpt_pickle_run(&root, &used, p, n, &o);
    /* the verdict on globals first: a hostile pickle may also be malformed */
    if (g.bad[0])
        return ckpt_err(CKPT_E_UNSAFE, file, "", g.bad_offset,
                        "names %s, which is no DCP metadata class: pickle.load (what "
                        "FileSystemReader runs) would call it",
                        g.bad);
    if (rc) return rc; /* a persistent id too: pickle.load has no persistent_load */
    const ckpt_value *st = state_of(root, DCP_META, "Metadata");
    const ckpt_value *sdm = get(st, "state_dict_metadata"), *sd = get(st, "storage_data");
    if (!st)
        return bad(&r, root, NULL, "a torch.distributed.checkpoint Metadata as the pickled object",
                   "");
    if (!sdm || sdm->kind != CKPT_KIND_DICT)
        return bad(&r, sdm, root, "a dict as state_dict_metadata", "");
    const ckpt_value *sm = get(st, "storage_meta");
    if (sm && sm->kind != CKPT_KIND_NONE && !is_class(sm, DCP_META, "StorageMeta"))
        return bad(&r, sm, st, "None or a StorageMeta as storage_meta",
                   " (FileSystemReader's read_metadata sets its load_id and raises)");
    if (!sd || sd->kind != CKPT_KIND_DICT)
        return bad(&r, sd, root, "a dict as storage_data",
                   " (a storage writer other than FileSystemWriter wrote it)");
    rc = read_items(&r, out, sdm, sd);
    return rc ? rc : read_paths(&r, out, get(st, "planner_data"));
}
