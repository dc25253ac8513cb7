/* dcp_write.c - a tree as a DCP directory (dcp_write.h): the plan as
 * DefaultSavePlanner makes it, the data file as FileSystemWriter fills it,
 * `.metadata` as pickle.dump(Metadata) gives it (object for object; the
 * opcodes are protocol 2's: NEWOBJ + BUILD for each dataclass). */
#include "format/dcp_write.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/error.h"
#include "base/strmap.h"
#include "format/pickle_write.h"
#include "model/dtype.h"

#define DCP_META "torch.distributed.checkpoint.metadata"
#define DCP_FS "torch.distributed.checkpoint.filesystem"
#define MAX_DEPTH 1000
/* pickle.py batches SETITEMS by this many items */
#define BATCH 1000

/* ------------------------------------------------------------ the plan */

typedef struct planner {
    ckpt_dcp_plan *p;
    ckpt_strmap names; /* fqn -> item */
    const ckpt_value *path[MAX_DEPTH + 1];
} planner;

/* str(k) for a dict key, as a new STR value; NULL with the error recorded
 * for keys whose str() ckpt does not reproduce. */
static const ckpt_value *key_str(planner *pl, const ckpt_value *k) {
    ckpt_arena *a = &pl->p->arena;
    char num[32];
    const char *s = NULL;
    switch (k->kind) {
    case CKPT_KIND_STR: return k; /* str(k) is k */
    case CKPT_KIND_INT:
        if (k->u.i.decimal) {
            s = k->u.i.decimal;
        } else {
            snprintf(num, sizeof num, "%" PRId64, k->u.i.v);
            s = num;
        }
        break;
    case CKPT_KIND_BOOL: s = k->u.b ? "True" : "False"; break;
    case CKPT_KIND_NONE: s = "None"; break;
    default:
        ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                 "a DCP checkpoint names values by str(key), and ckpt does not write a "
                 "dict key of kind %s as DCP would (convert the str, int, bool or None "
                 "keyed parts with --select)",
                 ckpt_value_kind_name(k->kind));
        return NULL;
    }
    ckpt_value *v = ckpt_value_new_str(a, CKPT_KIND_STR, s, strlen(s));
    if (!v) ckpt_err_nomem();
    return v;
}

static int is_tensor(const ckpt_value *v) {
    return v->kind == CKPT_KIND_TENSOR && !v->u.tensor->is_numpy;
}

/* _traverse._is_terminal: a dict never is; a list is unless it holds a
 * tensor, a dict or a list that is not terminal; anything else is. */
static int terminal(const ckpt_value *v, unsigned depth) {
    if (v->kind == CKPT_KIND_DICT) return 0;
    if (v->kind != CKPT_KIND_LIST || depth > MAX_DEPTH) return 1;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const ckpt_value *e = v->u.seq.items[i];
        if ((e->kind == CKPT_KIND_DICT || e->kind == CKPT_KIND_LIST) && !terminal(e, depth + 1))
            return 0;
        if (is_tensor(e)) return 0;
    }
    return 1;
}

/* flat_copy: ".".join(map(str, path)) -> value, refusing a repeated name. */
static int visit(planner *pl, size_t npath, const ckpt_value *v) {
    ckpt_dcp_plan *p = pl->p;
    ckpt_buf name = {0};
    for (size_t i = 0; i < npath; i++) {
        const ckpt_value *k = pl->path[i];
        if (i) ckpt_buf_byte(&name, '.');
        if (k->kind == CKPT_KIND_STR)
            ckpt_buf_put(&name, k->u.s.p, k->u.s.len);
        else
            ckpt_buf_printf(&name, "%" PRId64, k->u.i.v);
    }
    ckpt_buf_byte(&name, '\0');
    char *fqn = name.failed ? NULL : ckpt_arena_strndup(&p->arena, (char *)name.p, name.len - 1);
    int has_nul = !name.failed && strlen((char *)name.p) != name.len - 1;
    ckpt_buf_free(&name);
    if (!fqn) return ckpt_err_nomem();
    if (has_nul)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "cannot write a DCP item whose name contains a NUL byte (\"%s...\")", fqn);
    size_t len = strlen(fqn);
    ckpt_strmap_slot *slot;
    int put = ckpt_strmap_put(&pl->names, fqn, len, p->n, &slot);
    if (put < 0) return ckpt_err_nomem();
    if (put == 0)
        return ckpt_err(CKPT_E_INVALID_ARG, "", fqn, CKPT_NO_OFFSET,
                        "two values flatten to the DCP name \"%s\" (dcp.save refuses it too: "
                        "duplicated flatten key)",
                        fqn);
    const ckpt_value **path = ckpt_arena_array(&p->arena, npath, sizeof *path);
    if (!path ||
        ckpt_arena_grow(&p->arena, (void **)&p->items, &p->cap, p->n + 1, sizeof *p->items))
        return ckpt_err_nomem();
    memcpy(path, pl->path, npath * sizeof *path);
    p->items[p->n++] = (ckpt_dcp_witem){fqn, path, npath, v, is_tensor(v), 0, 0};
    return 0;
}

/* _traverse_obj: dicts by str(key), non-terminal lists by index. */
static int traverse(planner *pl, size_t npath, const ckpt_value *v) {
    if (npath > MAX_DEPTH)
        return ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                        "the state dict nests deeper than %d levels", MAX_DEPTH);
    if (v->kind == CKPT_KIND_DICT) {
        for (size_t i = 0; i < v->u.dict.n; i++) {
            const ckpt_value *k = key_str(pl, v->u.dict.keys[i]);
            if (!k) return ckpt_error_last()->code;
            pl->path[npath] = k;
            int rc = traverse(pl, npath + 1, v->u.dict.vals[i]);
            if (rc) return rc;
        }
        return 0;
    }
    if (terminal(v, 0)) return visit(pl, npath, v);
    for (size_t i = 0; i < v->u.seq.n; i++) {
        ckpt_value *k = ckpt_value_new_int(&pl->p->arena, (int64_t)i);
        if (!k) return ckpt_err_nomem();
        pl->path[npath] = k;
        int rc = traverse(pl, npath + 1, v->u.seq.items[i]);
        if (rc) return rc;
    }
    return 0;
}

int ckpt_dcp_plan_make(ckpt_dcp_plan *p, const ckpt_value *root) {
    memset(p, 0, sizeof *p);
    if (!root || root->kind != CKPT_KIND_DICT)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "a DCP checkpoint saves a state dict, and the root is a %s (select a "
                        "dict with --select)",
                        root ? ckpt_value_kind_name(root->kind) : "nothing");
    planner *pl = ckpt_malloc(sizeof *pl);
    if (!pl) return ckpt_err_nomem();
    memset(pl, 0, sizeof *pl);
    pl->p = p;
    int rc = traverse(pl, 0, root);
    ckpt_strmap_free(&pl->names);
    ckpt_free(pl);
    return rc;
}

void ckpt_dcp_plan_free(ckpt_dcp_plan *p) {
    ckpt_arena_free(&p->arena);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ data file */

/* The tensor as _SerialCpuLoader hands it to torch.save: detached, so a
 * plain tensor without requires_grad. */
static const ckpt_value *detached(ckpt_arena *a, const ckpt_value *v) {
    ckpt_value *d = ckpt_value_new(a, CKPT_KIND_TENSOR);
    ckpt_tensor *t = ckpt_arena_alloc(a, sizeof *t);
    if (!d || !t) return NULL;
    *t = *v->u.tensor;
    t->requires_grad = 0;
    t->is_parameter = 0;
    d->u.tensor = t;
    return d;
}

/* One item appended to the data file: its torch.save zip. */
static int write_item(ckpt_atomic *a, ckpt_dcp_plan *p, ckpt_dcp_witem *it) {
    const ckpt_value *v = it->is_tensor ? detached(&p->arena, it->value) : it->value;
    if (!v) return ckpt_err_nomem();
    it->offset = a->written;
    ckpt_write_stats st;
    int rc = ckpt_write_torch_at(a, v, "archive", 1, NULL, &st);
    if (rc) {
        /* the torch writer's message names the part of the value; say
         * which item it is */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
        return ckpt_err(rc, "", it->fqn, CKPT_NO_OFFSET, "DCP item \"%s\": %s", it->fqn, msg);
    }
    it->length = a->written - it->offset;
    return 0;
}

/* FileSystemWriter's order in a file: the bytes items, then the tensors. */
static int write_data(const char *path, ckpt_dcp_plan *p, const ckpt_write_options *o,
                      uint64_t *size) {
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, path);
    if (rc) return rc;
    size_t done = 0;
    ckpt_wr_progress(o, 0, p->n);
    for (int tensors = 0; tensors < 2; tensors++)
        for (size_t i = 0; rc == 0 && i < p->n; i++) {
            if (p->items[i].is_tensor != tensors) continue;
            rc = write_item(&a, p, &p->items[i]);
            if (rc == 0) ckpt_wr_progress(o, ++done, p->n);
        }
    *size = a.written;
    if (rc == 0) return ckpt_atomic_commit(&a, 0);
    ckpt_atomic_abort(&a);
    return rc;
}

/* ------------------------------------------------------------ .metadata */

static void key(ckpt_pkw *w, const char *s) { ckpt_pkw_str(w, s, strlen(s)); }

/* torch.Size(dims): Size REDUCE ((d0, d1, ...),). */
static void torch_size(ckpt_pkw *w, const uint64_t *d, uint32_t n) {
    ckpt_pkw_global(w, "torch", "Size");
    ckpt_pkw_dims(w, d, n);
    ckpt_pkw_op(w, 0x85); /* TUPLE1 */
    ckpt_pkw_op(w, 'R');
}

/* Opens / closes batch i of n of a dict's items (MARK ... SETITEMS). */
static void batch_open(ckpt_pkw *w, size_t i) {
    if (i % BATCH == 0) ckpt_pkw_op(w, '(');
}
static void batch_close(ckpt_pkw *w, size_t i, size_t n) {
    if (i + 1 == n || i % BATCH == BATCH - 1) ckpt_pkw_op(w, 'u');
}

/* TensorStorageMetadata(TensorProperties.create_from_tensor(t), t.size(),
 * [ChunkStorageMetadata(offsets=zeros, sizes=t.size())]). TensorProperties'
 * state is its __getstate__ tuple (dtype, layout, requires_grad,
 * _MEM_FORMAT_ENCODING(0), pin_memory). */
static int tensor_metadata(ckpt_pkw *w, const ckpt_tensor *t, const uint64_t *zeros) {
    const char *dt = ckpt_dtype_torch_name(t->dtype);
    if (!dt)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "torch has no dtype %s for DCP's TensorProperties",
                        ckpt_dtype_name(t->dtype));
    ckpt_pkw_newobj(w, DCP_META, "TensorStorageMetadata");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "properties");
    ckpt_pkw_newobj(w, DCP_META, "TensorProperties");
    ckpt_pkw_op(w, '(');
    ckpt_pkw_global(w, "torch", dt);
    ckpt_pkw_global(w, "torch.serialization", "_get_layout");
    key(w, "torch.strided");
    ckpt_pkw_op(w, 0x85);
    ckpt_pkw_op(w, 'R');
    ckpt_pkw_op(w, t->requires_grad ? 0x88 : 0x89);
    ckpt_pkw_global(w, DCP_META, "_MEM_FORMAT_ENCODING");
    ckpt_pkw_int(w, 0);
    ckpt_pkw_op(w, 0x85);
    ckpt_pkw_op(w, 'R');
    ckpt_pkw_op(w, 0x89); /* pin_memory */
    ckpt_pkw_op(w, 't');
    ckpt_pkw_op(w, 'b');
    key(w, "size");
    torch_size(w, t->shape, t->ndim);
    key(w, "chunks");
    ckpt_pkw_op(w, ']');
    ckpt_pkw_newobj(w, DCP_META, "ChunkStorageMetadata");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "offsets");
    torch_size(w, zeros, t->ndim);
    key(w, "sizes");
    torch_size(w, t->shape, t->ndim);
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
    ckpt_pkw_op(w, 'a');
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
    return 0;
}

/* The object path tuple of planner_data. */
static void path_tuple(ckpt_pkw *w, const ckpt_dcp_witem *it) {
    if (it->npath > 3) ckpt_pkw_op(w, '(');
    for (size_t i = 0; i < it->npath; i++) {
        const ckpt_value *k = it->path[i];
        if (k->kind == CKPT_KIND_STR)
            ckpt_pkw_str(w, k->u.s.p, k->u.s.len);
        else
            ckpt_pkw_int(w, k->u.i.v);
    }
    ckpt_pkw_op(w, it->npath == 1 ? 0x85 : it->npath == 2 ? 0x86 : it->npath == 3 ? 0x87 : 't');
}

/* MetadataIndex(fqn, offset=zeros for a tensor, index=0 for a tensor as
 * rewrite_index_hints sets it) -> _StorageInfo(relative_path, offset,
 * length); __dict__ order fqn, index, offset as MetadataIndex.__init__
 * sets them (no offset for a bytes item). */
static void storage_entry(ckpt_pkw *w, const ckpt_dcp_witem *it, const uint64_t *zeros) {
    ckpt_pkw_newobj(w, DCP_META, "MetadataIndex");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "fqn");
    key(w, it->fqn);
    key(w, "index");
    if (it->is_tensor) {
        ckpt_pkw_int(w, 0);
        key(w, "offset");
        torch_size(w, zeros, it->value->u.tensor->ndim);
    } else {
        ckpt_pkw_op(w, 'N');
    }
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
    ckpt_pkw_newobj(w, DCP_FS, "_StorageInfo");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "relative_path");
    key(w, CKPT_DCP_DATA_FILE);
    key(w, "offset");
    ckpt_pkw_int(w, (int64_t)it->offset);
    key(w, "length");
    ckpt_pkw_int(w, (int64_t)it->length);
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
}

/* str(uuid.uuid4()), as FileSystemWriter's save_id. */
static void uuid4(char out[37]) {
    uint8_t b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
        for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)i;
    }
    b[6] = (uint8_t)((b[6] & 0x0F) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3F) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static int metadata_pickle(ckpt_pkw *w, const ckpt_dcp_plan *p, const char *checkpoint_id) {
    static const uint64_t zeros[CKPT_MAX_NDIM];
    int rc = 0;
    ckpt_pkw_proto(w);
    ckpt_pkw_newobj(w, DCP_META, "Metadata");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "state_dict_metadata");
    ckpt_pkw_op(w, '}');
    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        const ckpt_dcp_witem *it = &p->items[i];
        batch_open(w, i);
        key(w, it->fqn);
        if (it->is_tensor)
            rc = tensor_metadata(w, it->value->u.tensor, zeros);
        else
            ckpt_pkw_newobj(w, DCP_META, "BytesStorageMetadata");
        batch_close(w, i, p->n);
    }
    key(w, "planner_data");
    ckpt_pkw_op(w, '}');
    for (size_t i = 0; i < p->n; i++) {
        batch_open(w, i);
        key(w, p->items[i].fqn);
        path_tuple(w, &p->items[i]);
        batch_close(w, i, p->n);
    }
    key(w, "storage_data"); /* in the order the items were written */
    ckpt_pkw_op(w, '}');
    size_t k = 0;
    for (int tensors = 0; tensors < 2; tensors++)
        for (size_t i = 0; i < p->n; i++) {
            if (p->items[i].is_tensor != tensors) continue;
            batch_open(w, k);
            storage_entry(w, &p->items[i], zeros);
            batch_close(w, k++, p->n);
        }
    key(w, "storage_meta");
    ckpt_pkw_newobj(w, DCP_META, "StorageMeta");
    ckpt_pkw_op(w, '}');
    ckpt_pkw_op(w, '(');
    key(w, "checkpoint_id");
    ckpt_pkw_global(w, "pathlib", "PosixPath");
    key(w, checkpoint_id);
    ckpt_pkw_op(w, 0x85);
    ckpt_pkw_op(w, 'R');
    char id[37];
    uuid4(id);
    key(w, "save_id");
    key(w, id);
    key(w, "load_id");
    ckpt_pkw_op(w, 'N');
    key(w, "modules");
    ckpt_pkw_op(w, ']');
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
    key(w, "version");
    key(w, "1.0.0"); /* filesystem.py CURRENT_DCP_VERSION */
    ckpt_pkw_op(w, 'u');
    ckpt_pkw_op(w, 'b');
    ckpt_pkw_op(w, '.');
    return rc ? rc : w->out.failed ? ckpt_err_nomem() : 0;
}

static int write_metadata(const char *path, const ckpt_dcp_plan *p, const char *checkpoint_id,
                          uint64_t *size) {
    ckpt_pkw w = {0};
    int rc = metadata_pickle(&w, p, checkpoint_id);
    ckpt_atomic a;
    if (rc == 0) rc = ckpt_atomic_begin(&a, path);
    if (rc == 0) {
        rc = ckpt_atomic_write(&a, w.out.p, w.out.len);
        *size = a.written;
        if (rc == 0)
            rc = ckpt_atomic_commit(&a, 0);
        else
            ckpt_atomic_abort(&a);
    }
    ckpt_pkw_free(&w);
    return rc;
}

int ckpt_write_dcp(const char *dir, const char *checkpoint_id, ckpt_dcp_plan *p,
                   const ckpt_write_options *opts, ckpt_write_stats *stats) {
    *stats = (ckpt_write_stats){0};
    const char *data = ckpt_arena_printf(&p->arena, "%s/%s", dir, CKPT_DCP_DATA_FILE);
    const char *meta = ckpt_arena_printf(&p->arena, "%s/.metadata", dir);
    if (!data || !meta) return ckpt_err_nomem();
    uint64_t data_size = 0, meta_size = 0;
    int rc = write_data(data, p, opts, &data_size);
    if (rc == 0) rc = write_metadata(meta, p, checkpoint_id, &meta_size);
    if (rc) return rc;
    for (size_t i = 0; i < p->n; i++) stats->tensors += (uint64_t)p->items[i].is_tensor;
    stats->keys = p->n;
    stats->bytes = data_size + meta_size;
    return 0;
}
