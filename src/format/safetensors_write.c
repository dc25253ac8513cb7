/* write_safetensors.c - a ckpt_value tree as one safetensors file, laid out
 * exactly as the reference writer does (FORMATS.md §1.5): tensors sorted by
 * dtype (descending enum order) then name, offsets contiguous from 0, the
 * compact JSON header padded with spaces to a multiple of 8.
 *
 * What safetensors cannot hold goes into __metadata__ (keys documented in
 * ckpt.h, "write"), so that ckpt_structure_decode rebuilds the tree:
 *   - ckpt.structure: the whole tree as JSON (non-tensor values, nesting,
 *     dict key types, dict classes and attributes (OrderedDict state dicts
 *     and their _metadata), shared nodes, requires_grad, parameters,
 *     complex dtypes safetensors lacks, views of one storage);
 *   - ckpt.aliases: {alias: name} for tensors reachable under several
 *     names with the same view of the same storage (tied weights): their
 *     bytes are written once, under the first name in byte order;
 *   - ckpt.xxh3: {name: 16 hex digits}, XXH3-64 of every written tensor.
 * The structure is left out when the reader's own tree (a dict of the
 * tensors in file order) already is the tree.
 *
 * Tensor bytes stream from their storage (a file mapping) into the atomic
 * file; views are gathered through a bounded buffer. The digests are only
 * known after the data, so the header is written with zero digests of the
 * same length and rewritten in place at the end. */
#include <inttypes.h>
#include <libdeflate.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "base/utf8.h"
#include "base/xxh.h"
#include "format/write.h"
#include "model/walk.h"

/* FORMATS.md §1.1: the reference reader and writer refuse larger headers. */
#define MAX_HEADER 100000000u

/* §1.3 enum order; the writer sorts descending on it. -1: no such dtype. */
static int dtype_rank(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_BOOL: return 0;
    case CKPT_DT_F4: return 1;
    case CKPT_DT_F6_E2M3: return 2;
    case CKPT_DT_F6_E3M2: return 3;
    case CKPT_DT_U8: return 4;
    case CKPT_DT_I8: return 5;
    case CKPT_DT_F8_E5M2: return 6;
    case CKPT_DT_F8_E4M3: return 7;
    case CKPT_DT_F8_E8M0: return 8;
    case CKPT_DT_F8_E4M3FNUZ: return 9;
    case CKPT_DT_F8_E5M2FNUZ: return 10;
    case CKPT_DT_I16: return 11;
    case CKPT_DT_U16: return 12;
    case CKPT_DT_F16: return 13;
    case CKPT_DT_BF16: return 14;
    case CKPT_DT_I32: return 15;
    case CKPT_DT_U32: return 16;
    case CKPT_DT_F32: return 17;
    case CKPT_DT_C64: return 18;
    case CKPT_DT_F64: return 19;
    case CKPT_DT_I64: return 20;
    case CKPT_DT_U64: return 21;
    default: return -1;
    }
}

/* Complex dtypes safetensors lacks are written as their real components
 * (torch.view_as_real's layout: a trailing dimension of 2); F4_X2 as F4
 * with the last dimension doubled, as safetensors' torch writer does. */
static ckpt_dtype stored_dtype(ckpt_dtype dt) {
    if (dt == CKPT_DT_C128) return CKPT_DT_F64;
    if (dt == CKPT_DT_C32) return CKPT_DT_F16;
    if (dt == CKPT_DT_F4_X2) return CKPT_DT_F4;
    return dt;
}

/* One tensor path of the tree. */
typedef struct path_ref {
    const wr_named *named;
    const ckpt_tensor *t;
    const ckpt_storage *root; /* resolved storage and offset (elements) */
    uint64_t off;
    size_t data; /* index into the written tensors */
} path_ref;

/* One written tensor. */
typedef struct data_t {
    const char *name; /* first of its paths' names in byte order */
    const ckpt_tensor *t;
    const ckpt_storage *root;
    uint64_t off;
    ckpt_dtype dtype; /* as written */
    int rank;
    uint64_t begin, end; /* data_offsets */
    int64_t group;       /* storage group (views of one storage) or -1 */
    size_t digest_at;    /* header position of its 16 hex digits */
} data_t;

typedef struct group_t {
    const ckpt_storage *root;
    const char *full; /* a data tensor covering the whole storage */
} group_t;

typedef struct st_writer {
    wr_named *named;
    size_t nnamed;
    path_ref *paths; /* sorted by view, then name */
    data_t *data;    /* in plan order (paths index into it) */
    size_t ndata;
    data_t **order; /* data in file order */
    group_t *groups;
    size_t ngroups;
    ckpt_ptrmap node_data; /* TENSOR node -> data index + 1 */
    ckpt_ptrmap ids;       /* structure: node -> id */
    uint64_t next_id;
    ckpt_buf structure, aliases, header;
    int aliased;
    /* the structure needs version 2: a dict class or state, a numpy value,
     * a frozenset, torch.Size or torch.device; version 3: a bytearray */
    int v2, v3;
} st_writer;

/* ------------------------------------------------------------ grouping */

static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b; }

/* Same bytes seen the same way: one written tensor. */
static int cmp_view(const path_ref *x, const path_ref *y) {
    int c;
    if (x->root != y->root) return (uintptr_t)x->root < (uintptr_t)y->root ? -1 : 1;
    if ((c = cmp_u64(x->off, y->off))) return c;
    if ((c = cmp_u64((uint64_t)x->t->dtype, (uint64_t)y->t->dtype))) return c;
    if ((c = cmp_u64(x->t->ndim, y->t->ndim))) return c;
    for (uint32_t d = 0; d < x->t->ndim; d++) {
        if ((c = cmp_u64(x->t->shape[d], y->t->shape[d]))) return c;
        if ((c = cmp_u64(x->t->stride[d], y->t->stride[d]))) return c;
    }
    return 0;
}

static int by_view_name(const void *a, const void *b) {
    const path_ref *x = a, *y = b;
    int c = cmp_view(x, y);
    return c ? c : strcmp(x->named->name, y->named->name);
}

static int by_file_order(const void *a, const void *b) {
    const data_t *x = a, *y = b;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The one rule of which name a view is written under: paths sorted by
 * view, then name; the first of each view is written, the others are its
 * aliases. */
int ckpt_wr_safetensors_written(const wr_named *t, size_t n, unsigned char *written) {
    path_ref *p = ckpt_malloc((n ? n : 1) * sizeof *p);
    if (!p) return ckpt_err_nomem();
    for (size_t i = 0; i < n; i++) {
        p[i] = (path_ref){.named = &t[i], .t = t[i].value->u.tensor};
        p[i].root = ckpt_wr_root_storage(p[i].t, &p[i].off);
    }
    qsort(p, n, sizeof *p, by_view_name);
    for (size_t i = 0; i < n; i++)
        written[p[i].named - t] = i == 0 || cmp_view(&p[i - 1], &p[i]) != 0;
    ckpt_free(p);
    return 0;
}

typedef struct name_ref {
    const char *name;
    size_t data;
} name_ref;

static int by_name(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : cmp_u64(x->data, y->data);
}

static int by_root(const void *a, const void *b) {
    const data_t *const *x = a, *const *y = b;
    if ((*x)->root != (*y)->root) return (uintptr_t)(*x)->root < (uintptr_t)(*y)->root ? -1 : 1;
    return strcmp((*x)->name, (*y)->name);
}

/* Row-major with no gaps, as ckpt_tensor_is_contiguous decides (size-1
 * dimensions may have any stride), starting at element 0. */
static int covers_storage(const data_t *d) {
    const ckpt_tensor *t = d->t;
    uint64_t expect = 1;
    for (uint32_t i = t->ndim; i-- > 0;) {
        if (t->shape[i] != 1 && t->stride[i] != expect) return 0;
        expect *= t->shape[i];
    }
    return d->off == 0 && t->nbytes == d->root->nbytes;
}

/* Paths -> written tensors, aliases, name collisions, storage groups. */
static int plan(st_writer *w) {
    size_t n = w->nnamed;
    w->paths = ckpt_malloc((n ? n : 1) * sizeof *w->paths);
    w->data = ckpt_malloc((n ? n : 1) * sizeof *w->data);
    if (!w->paths || !w->data) return ckpt_err_nomem();
    for (size_t i = 0; i < n; i++) {
        path_ref *p = &w->paths[i];
        p->named = &w->named[i];
        p->t = w->named[i].value->u.tensor;
        p->root = ckpt_wr_root_storage(p->t, &p->off);
    }
    qsort(w->paths, n, sizeof *w->paths, by_view_name);
    for (size_t i = 0; i < n; i++) {
        path_ref *p = &w->paths[i];
        if (i == 0 || cmp_view(&w->paths[i - 1], p) != 0) {
            ckpt_dtype dt = stored_dtype(p->t->dtype);
            if (dtype_rank(dt) < 0)
                return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                "tensor \"%s\": dtype %s has no safetensors "
                                "equivalent",
                                p->named->name, ckpt_dtype_name(p->t->dtype));
            if (dt == CKPT_DT_F4 && p->t->dtype == CKPT_DT_F4_X2 && p->t->ndim == 0)
                return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                                "tensor \"%s\": a 0-dim F4_X2 (float4_e2m1fn_x2) "
                                "has no F4 shape in safetensors",
                                p->named->name);
            w->data[w->ndata] = (data_t){.name = p->named->name,
                                         .t = p->t,
                                         .root = p->root,
                                         .off = p->off,
                                         .dtype = dt,
                                         .rank = dtype_rank(dt),
                                         .group = -1};
            w->ndata++;
        }
        p->data = w->ndata - 1;
    }

    /* every name must denote one written tensor */
    name_ref *names = ckpt_malloc((n ? n : 1) * sizeof *names);
    if (!names) return ckpt_err_nomem();
    for (size_t i = 0; i < n; i++) names[i] = (name_ref){w->paths[i].named->name, w->paths[i].data};
    qsort(names, n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const char *nm = names[i].name;
        if (i > 0 && strcmp(names[i - 1].name, nm) == 0 && names[i - 1].data != names[i].data)
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "two different tensors flatten to the same name \"%s\" "
                          "(safetensors needs unique names)",
                          nm);
        else if (strcmp(nm, "__metadata__") == 0)
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "a tensor is named \"__metadata__\", which safetensors "
                          "reserves for metadata");
        else if (!ckpt_utf8_check(nm, strlen(nm), 0))
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "tensor name \"%s\" is not valid UTF-8", nm);
    }
    ckpt_free(names);
    if (rc) return rc;

    /* views of one storage: the structure records where each one sits */
    data_t **byroot = ckpt_malloc((w->ndata ? w->ndata : 1) * sizeof *byroot);
    w->groups = ckpt_malloc((w->ndata ? w->ndata : 1) * sizeof *w->groups);
    if (!byroot || !w->groups) {
        ckpt_free(byroot);
        return ckpt_err_nomem();
    }
    for (size_t i = 0; i < w->ndata; i++) byroot[i] = &w->data[i];
    qsort(byroot, w->ndata, sizeof *byroot, by_root);
    for (size_t i = 0; i < w->ndata;) {
        size_t j = i + 1;
        while (j < w->ndata && byroot[j]->root == byroot[i]->root) j++;
        if (j - i > 1) {
            group_t *g = &w->groups[w->ngroups];
            *g = (group_t){byroot[i]->root, NULL};
            for (size_t k = i; k < j; k++) {
                byroot[k]->group = (int64_t)w->ngroups;
                if (!g->full && covers_storage(byroot[k])) g->full = byroot[k]->name;
            }
            w->ngroups++;
        }
        i = j;
    }
    ckpt_free(byroot);
    return 0;
}

/* ------------------------------------------------------------ structure */

/* Shortest "%.*g" text that reads back to the same double, with ".0" when
 * it would read as an integer (Python's repr, and jansson parses it as a
 * real). */
static void put_double(ckpt_buf *b, double v) {
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    ckpt_buf_str(b, tmp);
    if (!strpbrk(tmp, ".eE")) ckpt_buf_str(b, ".0");
}

static void put_tensor(st_writer *w, ckpt_buf *b, const ckpt_value *v) {
    const ckpt_tensor *t = v->u.tensor;
    uint64_t di = 0;
    ckpt_ptrmap_get(&w->node_data, v, &di); /* every tensor node was planned */
    const data_t *d = &w->data[di - 1];
    ckpt_buf_str(b, "{\"tensor\":");
    ckpt_buf_json_str(b, d->name, strlen(d->name));
    if (t->dtype != d->dtype) ckpt_buf_printf(b, ",\"dtype\":\"%s\"", ckpt_dtype_name(t->dtype));
    if (t->requires_grad) ckpt_buf_str(b, ",\"requires_grad\":true");
    if (t->is_parameter) ckpt_buf_str(b, ",\"parameter\":true");
    if (t->is_numpy) {
        ckpt_buf_str(b, ",\"numpy\":true");
        w->v2 = 1;
    }
    if (d->group >= 0) {
        ckpt_buf_printf(b, ",\"storage\":%" PRId64 ",\"offset\":%" PRIu64 ",\"stride\":[", d->group,
                        d->off);
        for (uint32_t i = 0; i < t->ndim; i++)
            ckpt_buf_printf(b, "%s%" PRIu64, i ? "," : "", t->stride[i]);
        ckpt_buf_byte(b, ']');
    }
    ckpt_buf_byte(b, '}');
}

/* The structure, one node at a time (the walker's visit; the tree was
 * checked by ckpt_wr_collect: only writable kinds reach here). Containers and
 * tensors have an identity: a second visit is a {"ref": id}. A dict is
 * {"dict": [[K, V]...]} and, for an OrderedDict or Counter, "class" and
 * its attributes as "state". A numpy scalar is {"numpy": dtype name,
 * "value": V}, a frozenset {"frozenset": [...]}, a torch.Size
 * {"size": [...]}, a torch.device {"device": "cuda:1"} (all from version
 * 2), a bytearray {"bytearray": hex}, numbered like a container (from
 * version 3; version 2 had the tag but no number). */
#define ENC_OPEN 1u        /* user: a container whose closing is due */
#define ENC_DICT_CLOSED 2u /* user: a dict's items and class are written */
#define ENC_NUMPY 4u       /* user: a numpy scalar's object is open */

/* A node that can be reached twice (a container, a bytearray): numbered
 * on its first visit (0), or its reference written and CKPT_WALK_PRUNE on
 * a later one; an error code when numbering fails. */
static int number_or_ref(st_writer *w, ckpt_buf *b, const ckpt_value *v) {
    uint64_t id;
    if (ckpt_ptrmap_get(&w->ids, v, &id)) {
        ckpt_buf_printf(b, "{\"ref\":%" PRIu64 "}", id);
        return CKPT_WALK_PRUNE;
    }
    return ckpt_ptrmap_put(&w->ids, v, w->next_id++);
}

static int enc_enter(ckpt_walk *ww, ckpt_walk_frame *node) {
    st_writer *w = ww->ctx;
    ckpt_buf *b = &w->structure;
    ckpt_walk_frame *up = ckpt_walk_up(ww, 1);
    const ckpt_value *v = node->value;
    switch (node->role) {
    case CKPT_WALK_ITEM:
        if (node->index) ckpt_buf_byte(b, ',');
        break;
    case CKPT_WALK_KEY: ckpt_buf_str(b, node->index ? ",[" : "["); break;
    case CKPT_WALK_VALUE: ckpt_buf_byte(b, ','); break;
    case CKPT_WALK_STATE: {
        const char *cls = ckpt_dict_class_name(up->value->dict_class);
        if (!cls) return CKPT_WALK_SKIP; /* a plain dict's attributes are not kept */
        ckpt_buf_printf(b, "],\"class\":\"%s\",\"state\":", cls);
        w->v2 = 1;
        up->user |= ENC_DICT_CLOSED;
        break;
    }
    default: break;
    }
    if (v->np_dtype &&
        (v->kind == CKPT_KIND_BOOL || v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT)) {
        /* the value itself is encoded next, as a plain one, and closed by
         * enc_leave */
        ckpt_buf_printf(b,
                        "{\"numpy\":\"%s\",\"value\":", ckpt_dtype_name((ckpt_dtype)v->np_dtype));
        node->user = ENC_NUMPY;
        w->v2 = 1;
    }
    switch (v->kind) {
    case CKPT_KIND_NONE: ckpt_buf_str(b, "null"); return CKPT_WALK_PRUNE;
    case CKPT_KIND_BOOL: ckpt_buf_str(b, v->u.b ? "true" : "false"); return CKPT_WALK_PRUNE;
    case CKPT_KIND_INT:
        if (v->u.i.decimal)
            ckpt_buf_printf(b, "{\"int\":\"%.100s\"}", v->u.i.decimal);
        else
            ckpt_buf_printf(b, "%" PRId64, v->u.i.v);
        return b->failed ? ckpt_err_nomem() : CKPT_WALK_PRUNE;
    case CKPT_KIND_FLOAT:
        if (isfinite(v->u.f)) {
            put_double(b, v->u.f);
        } else { /* exact bits: NaN payloads included */
            uint64_t bits;
            char hex[17];
            memcpy(&bits, &v->u.f, sizeof bits);
            ckpt_hex64(hex, bits);
            ckpt_buf_printf(b, "{\"float\":\"%s\"}", hex);
        }
        return CKPT_WALK_PRUNE;
    case CKPT_KIND_STR:
        if (v->alt) ckpt_buf_str(b, "{\"device\":");
        ckpt_buf_json_str(b, v->u.s.p, v->u.s.len);
        if (v->alt) ckpt_buf_byte(b, '}');
        w->v2 |= v->alt;
        return CKPT_WALK_PRUNE;
    case CKPT_KIND_BYTES: {
        if (v->alt) { /* a bytearray is mutable: numbered, a second visit a ref */
            int rc = number_or_ref(w, b, v);
            if (rc) return rc;
            w->v3 = 1;
        }
        ckpt_buf_str(b, v->alt ? "{\"bytearray\":\"" : "{\"bytes\":\"");
        for (size_t i = 0; i < v->u.s.len; i++) {
            uint8_t c = (uint8_t)v->u.s.p[i];
            ckpt_buf_byte(b, (uint8_t)ckpt_hex_digits[c >> 4]);
            ckpt_buf_byte(b, (uint8_t)ckpt_hex_digits[c & 15]);
        }
        ckpt_buf_str(b, "\"}");
        return CKPT_WALK_PRUNE;
    }
    case CKPT_KIND_GLOBAL_:
        ckpt_buf_printf(b, "{\"dtype\":\"%.60s\"}", ckpt_wr_dtype_ref(v));
        return CKPT_WALK_PRUNE;
    default: break;
    }
    int rc = number_or_ref(w, b, v);
    if (rc) return rc;
    switch (v->kind) {
    case CKPT_KIND_TENSOR: put_tensor(w, b, v); return CKPT_WALK_PRUNE;
    case CKPT_KIND_LIST: ckpt_buf_str(b, "{\"list\":["); break;
    case CKPT_KIND_TUPLE:
        ckpt_buf_str(b, v->alt ? "{\"size\":[" : "{\"tuple\":[");
        w->v2 |= v->alt;
        break;
    case CKPT_KIND_SET:
        ckpt_buf_str(b, v->alt ? "{\"frozenset\":[" : "{\"set\":[");
        w->v2 |= v->alt;
        break;
    default: ckpt_buf_str(b, "{\"dict\":["); break; /* DICT */
    }
    node->user = ENC_OPEN;
    return CKPT_WALK_DESCEND;
}

static int enc_leave(ckpt_walk *ww, ckpt_walk_frame *node) {
    st_writer *w = ww->ctx;
    ckpt_buf *b = &w->structure;
    const ckpt_value *v = node->value;
    if (node->user & ENC_NUMPY) ckpt_buf_byte(b, '}');
    if (node->user & ENC_OPEN) {
        if (v->kind != CKPT_KIND_DICT) {
            ckpt_buf_str(b, "]}");
        } else {
            const char *cls = ckpt_dict_class_name(v->dict_class);
            if (!(node->user & ENC_DICT_CLOSED)) {
                ckpt_buf_byte(b, ']');
                if (cls) {
                    ckpt_buf_printf(b, ",\"class\":\"%s\"", cls);
                    w->v2 = 1;
                }
            }
            ckpt_buf_byte(b, '}');
        }
    }
    if (node->role == CKPT_WALK_VALUE) ckpt_buf_byte(b, ']'); /* the [key, value] pair */
    return 0;
}

/* The reader's tree of a safetensors file is a dict of its tensors in file
 * order: when that is the tree, no structure is needed. */
static int plain(const st_writer *w, const ckpt_value *root) {
    if (root->kind != CKPT_KIND_DICT || root->dict_class || root->u.dict.n != w->ndata ||
        w->nnamed != w->ndata || w->ngroups)
        return 0;
    for (size_t i = 0; i < root->u.dict.n; i++) {
        const ckpt_value *k = root->u.dict.keys[i], *v = root->u.dict.vals[i];
        if (k->kind != CKPT_KIND_STR || v->kind != CKPT_KIND_TENSOR) return 0;
        const data_t *d = w->order[i];
        if (d->t != v->u.tensor || strcmp(d->name, k->u.s.p) != 0 || d->dtype != d->t->dtype ||
            d->t->requires_grad || d->t->is_parameter || d->t->is_numpy)
            return 0;
    }
    return 1;
}

static int build_structure(st_writer *w, const ckpt_value *root) {
    for (size_t i = 0; i < w->nnamed; i++) {
        const path_ref *p = &w->paths[i];
        int rc = ckpt_ptrmap_put(&w->node_data, p->named->value, p->data + 1);
        if (rc) return rc;
    }
    if (plain(w, root)) return 0;
    ckpt_buf *b = &w->structure;
    ckpt_buf_str(b, "{\"version\":1,\"root\":");
    ckpt_walk ww;
    ckpt_walk_init(&ww, NULL, "", "");
    ww.follow = CKPT_WALK_KEYS | CKPT_WALK_DICT_STATE;
    ww.enter = enc_enter;
    ww.leave = enc_leave;
    ww.ctx = w;
    int rc = ckpt_walk_run(&ww, root);
    if (rc) return rc;
    /* version 2 only when a dict has "class" or "state" or a value is from
     * numpy, a frozenset, torch.Size or torch.device, which readers of
     * version 1 refuse: other files stay readable by them; version 3 when
     * there is a bytearray (numbered from version 3: refs to it would
     * name other nodes in a reader of version 2) */
    if ((w->v2 || w->v3) && !b->failed) b->p[strlen("{\"version\":")] = w->v3 ? '3' : '2';
    if (w->ngroups) {
        ckpt_buf_str(b, ",\"storages\":[");
        for (size_t g = 0; g < w->ngroups; g++) {
            ckpt_buf_printf(b, "%s{\"nbytes\":%" PRIu64, g ? "," : "", w->groups[g].root->nbytes);
            if (w->groups[g].full) {
                ckpt_buf_str(b, ",\"data\":");
                ckpt_buf_json_str(b, w->groups[g].full, strlen(w->groups[g].full));
            }
            ckpt_buf_byte(b, '}');
        }
        ckpt_buf_byte(b, ']');
    }
    ckpt_buf_byte(b, '}');
    return b->failed ? ckpt_err_nomem() : 0;
}

/* {alias: name} in alias byte order (paths are sorted by view, then name:
 * the first of a view is the written name). */
static int build_aliases(st_writer *w) {
    name_ref *al = ckpt_malloc((w->nnamed ? w->nnamed : 1) * sizeof *al);
    if (!al) return ckpt_err_nomem();
    size_t n = 0;
    for (size_t i = 0; i < w->nnamed; i++) {
        const path_ref *p = &w->paths[i];
        const char *target = w->data[p->data].name;
        if (strcmp(p->named->name, target) != 0 &&
            (n == 0 || strcmp(al[n - 1].name, p->named->name) != 0))
            al[n++] = (name_ref){p->named->name, p->data};
    }
    qsort(al, n, sizeof *al, by_name);
    ckpt_buf *b = &w->aliases;
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(al[i - 1].name, al[i].name) == 0) continue;
        ckpt_buf_byte(b, i ? ',' : '{');
        ckpt_buf_json_str(b, al[i].name, strlen(al[i].name));
        ckpt_buf_byte(b, ':');
        const char *target = w->data[al[i].data].name;
        ckpt_buf_json_str(b, target, strlen(target));
    }
    if (n) ckpt_buf_byte(b, '}');
    w->aliased = n > 0;
    ckpt_free(al);
    return b->failed ? ckpt_err_nomem() : 0;
}

/* ------------------------------------------------------------ header */

static void meta_entry(ckpt_buf *b, int *first, const char *k, const char *v, size_t vlen) {
    if (!*first) ckpt_buf_byte(b, ',');
    *first = 0;
    ckpt_buf_json_str(b, k, strlen(k));
    ckpt_buf_byte(b, ':');
    ckpt_buf_json_str(b, v, vlen);
}

static int has_key(const ckpt_write_options *o, const char *k) {
    for (size_t i = 0; o && i < o->nmeta; i++)
        if (strcmp(o->meta_keys[i], k) == 0) return 1;
    return 0;
}

/* The serde_json output of the reference writer: "__metadata__" first,
 * then the tensors in offset order, fields dtype, shape, data_offsets. */
static int build_header(st_writer *w, const ckpt_write_options *o) {
    ckpt_buf *b = &w->header;
    int first = 1;
    ckpt_buf_str(b, "{\"__metadata__\":{");
    /* huggingface loaders refuse metadata without a "pt" format */
    if (!has_key(o, "format")) meta_entry(b, &first, "format", "pt", 2);
    for (size_t i = 0; o && i < o->nmeta; i++)
        meta_entry(b, &first, o->meta_keys[i], o->meta_values[i], strlen(o->meta_values[i]));
    if (w->structure.len)
        meta_entry(b, &first, CKPT_META_STRUCTURE, (const char *)w->structure.p, w->structure.len);
    if (w->aliased)
        meta_entry(b, &first, CKPT_META_ALIASES, (const char *)w->aliases.p, w->aliases.len);
    /* digests: zeros now, patched in place once the data is written; the
     * JSON text {name: hex} is itself escaped into the metadata string */
    ckpt_buf inner = {0};
    size_t *at = ckpt_malloc((w->ndata ? w->ndata : 1) * sizeof *at);
    if (!at) return ckpt_err_nomem();
    for (size_t i = 0; i < w->ndata; i++) {
        const data_t *d = w->order[i];
        ckpt_buf_byte(&inner, i ? ',' : '{');
        ckpt_buf_json_str(&inner, d->name, strlen(d->name));
        ckpt_buf_str(&inner, ":\"");
        at[i] = inner.len;
        ckpt_buf_str(&inner, "0000000000000000\"");
    }
    ckpt_buf_str(&inner, w->ndata ? "}" : "{}");
    if (!first) ckpt_buf_byte(b, ',');
    ckpt_buf_json_str(b, CKPT_META_XXH3, strlen(CKPT_META_XXH3));
    ckpt_buf_str(b, ":\"");
    size_t prev = 0;
    for (size_t i = 0; i < w->ndata && !inner.failed; i++) {
        ckpt_buf_json_chars(b, (const char *)inner.p + prev, at[i] - prev);
        w->order[i]->digest_at = b->len;
        prev = at[i];
    }
    if (!inner.failed) ckpt_buf_json_chars(b, (const char *)inner.p + prev, inner.len - prev);
    ckpt_buf_str(b, "\"}");
    int failed = inner.failed;
    ckpt_buf_free(&inner);
    ckpt_free(at);
    if (failed) return ckpt_err_nomem();
    for (size_t i = 0; i < w->ndata; i++) {
        const data_t *d = w->order[i];
        const ckpt_tensor *t = d->t;
        ckpt_buf_byte(b, ',');
        ckpt_buf_json_str(b, d->name, strlen(d->name));
        ckpt_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", ckpt_dtype_name(d->dtype));
        int f4 = t->dtype == CKPT_DT_F4_X2; /* two F4 values a byte */
        for (uint32_t k = 0; k < t->ndim; k++)
            ckpt_buf_printf(b, "%s%" PRIu64, k ? "," : "",
                            f4 && k + 1 == t->ndim ? 2 * t->shape[k] : t->shape[k]);
        if (d->dtype != t->dtype && !f4) ckpt_buf_printf(b, "%s2", t->ndim ? "," : "");
        ckpt_buf_printf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", d->begin, d->end);
    }
    ckpt_buf_byte(b, '}');
    while (!b->failed && b->len % 8) ckpt_buf_byte(b, ' ');
    if (b->failed) return ckpt_err_nomem();
    if (b->len > MAX_HEADER)
        return ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                        "safetensors header of %zu bytes exceeds the format's "
                        "limit of %u",
                        b->len, MAX_HEADER);
    return 0;
}

/* ------------------------------------------------------------ data */

typedef struct sink_ctx {
    ckpt_atomic *out;
    XXH3_state_t *xxh;
    int crc_on; /* the tensor is its input storage's bytes, whose CRC-32 is
                   still to be checked */
    uint32_t crc;
} sink_ctx;

static int write_sink(void *ctx, const void *p, size_t n) {
    sink_ctx *s = ctx;
    ckpt_xxh3_update(s->xxh, p, n);
    if (s->crc_on) s->crc = (uint32_t)libdeflate_crc32(s->crc, p, n);
    return ckpt_atomic_write(s->out, p, n);
}

static int covers_storage(const data_t *d);

static int write_all(st_writer *w, ckpt_atomic *a, const ckpt_write_options *opts,
                     ckpt_write_stats *stats) {
    uint8_t len[8];
    uint64_t n = w->header.len;
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(n >> (8 * i));
    int rc = ckpt_atomic_write(a, len, 8);
    if (!rc) rc = ckpt_atomic_write(a, w->header.p, w->header.len);
    XXH3_state_t xxh;
    memset(&xxh, 0, sizeof xxh);
    sink_ctx s = {a, &xxh, 0, 0};
    ckpt_ptrmap verified = {0}; /* input storages checked against their sums */
    if (!rc) ckpt_wr_progress(opts, 0, w->ndata);
    for (size_t i = 0; !rc && i < w->ndata; i++) {
        data_t *d = w->order[i];
        ckpt_xxh3_reset(&xxh);
        /* the input is verified as it is read: whole when the tensor is
         * its storage's bytes, else read whole once more */
        int whole = covers_storage(d) && !d->root->big_endian;
        s.crc_on = whole && d->root->has_crc32 && ckpt_wr_source_unverified(&verified, d->root);
        s.crc = 0;
        if ((rc = ckpt_tensor_stream_at(d->t, a->written, write_sink, &s))) break;
        uint64_t digest = ckpt_xxh3_digest(&xxh);
        if ((rc = ckpt_wr_verify_source(&verified, d->root, whole, s.crc, digest))) break;
        char hex[17];
        ckpt_hex64(hex, digest);
        memcpy(w->header.p + d->digest_at, hex, 16);
        ckpt_wr_progress(opts, i + 1, w->ndata);
    }
    ckpt_ptrmap_free(&verified);
    if (!rc) rc = ckpt_atomic_pwrite(a, w->header.p, w->header.len, 8);
    if (!rc) {
        stats->tensors = w->ndata;
        stats->keys = w->nnamed;
        stats->bytes = a->written;
    }
    return rc;
}

/* File order (dtype rank descending, then name) and contiguous offsets.
 * data[] keeps its plan order (paths index into it). */
static int by_file_ptr(const void *a, const void *b) {
    return by_file_order(*(data_t *const *)a, *(data_t *const *)b);
}

/* Storage groups numbered by their first tensor in file order: plan()
 * found them in storage address order, which differs from run to run, and
 * the output must not. */
static int number_groups(st_writer *w) {
    int64_t *renum = ckpt_malloc((w->ngroups ? w->ngroups : 1) * sizeof *renum);
    group_t *sorted = ckpt_malloc((w->ngroups ? w->ngroups : 1) * sizeof *sorted);
    if (!renum || !sorted) {
        ckpt_free(renum);
        ckpt_free(sorted);
        return ckpt_err_nomem();
    }
    for (size_t g = 0; g < w->ngroups; g++) renum[g] = -1;
    int64_t next = 0;
    for (size_t i = 0; i < w->ndata; i++) {
        data_t *d = w->order[i];
        if (d->group < 0) continue;
        if (renum[d->group] < 0) {
            sorted[next] = w->groups[d->group];
            renum[d->group] = next++;
        }
        d->group = renum[d->group];
    }
    ckpt_free(w->groups);
    ckpt_free(renum);
    w->groups = sorted;
    return 0;
}

static int assign_offsets(st_writer *w) {
    w->order = ckpt_malloc((w->ndata ? w->ndata : 1) * sizeof *w->order);
    if (!w->order) return ckpt_err_nomem();
    for (size_t i = 0; i < w->ndata; i++) w->order[i] = &w->data[i];
    qsort(w->order, w->ndata, sizeof *w->order, by_file_ptr);
    uint64_t at = 0;
    for (size_t i = 0; i < w->ndata; i++) {
        data_t *d = w->order[i];
        d->begin = at;
        if (ckpt_add_overflow(at, d->t->nbytes, &at))
            return ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET, "tensor data exceeds 2^64 bytes");
        d->end = at;
    }
    return number_groups(w);
}

int ckpt_write_safetensors(ckpt_atomic *a, const ckpt_value *root, const ckpt_write_options *opts,
                           ckpt_write_stats *stats) {
    st_writer w = {0};
    int rc = ckpt_wr_collect(&w.named, &w.nnamed, root);
    if (!rc) rc = plan(&w);
    if (!rc) rc = assign_offsets(&w);
    if (!rc) rc = build_structure(&w, root);
    if (!rc) rc = build_aliases(&w);
    if (!rc) rc = build_header(&w, opts);
    if (!rc) rc = write_all(&w, a, opts, stats);
    ckpt_wr_named_free(w.named, w.nnamed);
    ckpt_free(w.paths);
    ckpt_free(w.data);
    ckpt_free(w.order);
    ckpt_free(w.groups);
    ckpt_ptrmap_free(&w.node_data);
    ckpt_ptrmap_free(&w.ids);
    ckpt_buf_free(&w.structure);
    ckpt_buf_free(&w.aliases);
    ckpt_buf_free(&w.header);
    return rc;
}
