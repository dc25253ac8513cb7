/* table.c - a file's logical tree as one table of words
 * (ckpt_file_value_table, include/ckpt/file.h).
 *
 * One walk with the one walker: a node is numbered when it is left, so
 * children come before parents; a node seen before is skipped, so each is
 * written once and a cycle is never followed. Children are written as
 * their value pointers while the walk runs (a container that contains
 * itself is not numbered yet when its child refers to it) and replaced by
 * their numbers once every node has one. Everything is read through the
 * public accessors, so the table says what the per-node calls say. */
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/ptrmap.h"
#include "model/file.h"
#include "model/walk.h"

#define NODE_WORDS CKPT_TABLE_NODE_WORDS
#define TENSOR_WORDS CKPT_TABLE_TENSOR_WORDS

typedef struct builder {
    const ckpt_file *f;
    ckpt_ptrmap seen; /* value -> node index, UINT64_MAX while entered */
    ckpt_buf nodes, tensors, refs, dims, text;
    size_t nnodes, ntensors;
    /* the last string placed, by address: a storage's device and member
     * are shared by all its tensors */
    const char *last_str[2];
    int64_t last_at[2];
} builder;

static void put(ckpt_buf *b, int64_t w) { ckpt_buf_put(b, &w, sizeof w); }

static int64_t ptr_word(const void *p) { return p ? (int64_t)(uintptr_t)p : -1; }

static int64_t put_text(builder *b, const char *s, size_t n) {
    int64_t at = (int64_t)b->text.len;
    ckpt_buf_put(&b->text, s, n);
    return at;
}

/* Text offset of a string shared by many tensors (slot 0 device, 1 member). */
static int64_t put_shared(builder *b, int slot, const char *s) {
    if (s != b->last_str[slot]) {
        b->last_str[slot] = s;
        b->last_at[slot] = put_text(b, s, strlen(s));
    }
    return b->last_at[slot];
}

/* torch's strides for a new tensor of t's shape (what torch.empty gives). */
static int new_tensor_strides(const ckpt_tensor *t) {
    const uint64_t *shape = ckpt_tensor_shape(t), *stride = ckpt_tensor_stride(t);
    uint64_t expect = 1;
    for (unsigned i = ckpt_tensor_ndim(t); i-- > 0;) {
        if (stride[i] != expect) return 0;
        expect *= shape[i] > 1 ? shape[i] : 1;
    }
    return 1;
}

static void put_tensor(builder *b, const ckpt_tensor *t) {
    unsigned ndim = ckpt_tensor_ndim(t);
    uint64_t sid = ckpt_tensor_storage_id(t);
    int64_t flags = 0;
    if (ckpt_file_storage_is_raw(b->f, sid)) flags |= CKPT_TABLE_RAW;
    if (ckpt_tensor_is_contiguous(t)) flags |= CKPT_TABLE_CONTIGUOUS;
    if (ckpt_tensor_is_parameter(t)) flags |= CKPT_TABLE_PARAMETER;
    if (ckpt_tensor_requires_grad(t)) flags |= CKPT_TABLE_REQUIRES_GRAD;
    if (ckpt_tensor_is_numpy(t)) flags |= CKPT_TABLE_NUMPY;
    if ((flags & CKPT_TABLE_RAW) && ckpt_tensor_storage_offset(t) == 0 &&
        ckpt_tensor_nbytes(t) == ckpt_tensor_storage_nbytes(t) && new_tensor_strides(t))
        flags |= CKPT_TABLE_WHOLE;
    const void *data = NULL;
    size_t size;
    if (!(flags & CKPT_TABLE_CONTIGUOUS) || ckpt_tensor_data(t, &data, &size)) data = NULL;
    const char *device = ckpt_tensor_device(t), *member = ckpt_tensor_member(t);
    uint64_t off = ckpt_tensor_file_offset(t);
    int64_t rec[TENSOR_WORDS] = {
        ckpt_tensor_dtype(t),
        ndim,
        (int64_t)(b->dims.len / sizeof(int64_t)),
        (int64_t)sid,
        (int64_t)ckpt_tensor_storage_offset(t),
        (int64_t)ckpt_tensor_numel(t),
        (int64_t)ckpt_tensor_nbytes(t),
        (int64_t)ckpt_tensor_storage_nbytes(t),
        flags,
        data ? (int64_t)(uintptr_t)data : 0,
        put_shared(b, 0, device),
        (int64_t)strlen(device),
        off == CKPT_NO_OFFSET ? -1 : (int64_t)off,
        put_shared(b, 1, member),
        (int64_t)strlen(member),
        (int64_t)(uintptr_t)t,
    };
    ckpt_buf_put(&b->tensors, rec, sizeof rec);
    const uint64_t *shape = ckpt_tensor_shape(t), *stride = ckpt_tensor_stride(t);
    for (unsigned i = 0; i < ndim; i++) put(&b->dims, (int64_t)shape[i]);
    for (unsigned i = 0; i < ndim; i++) put(&b->dims, (int64_t)stride[i]);
}

static int64_t dict_class(const ckpt_value *v) {
    const char *cls = ckpt_value_dict_class(v);
    if (!cls) return 0;
    return strcmp(cls, "collections.OrderedDict") == 0 ? 1 : 2;
}

/* The node's record (children as pointers, numbered later). */
static void put_node(builder *b, const ckpt_value *v) {
    int64_t rec[NODE_WORDS] = {ckpt_value_kind(v), 0, 0, 0, 0};
    /* a numpy scalar (BOOL, INT, FLOAT): its dtype, else 0 */
    if (rec[0] == CKPT_KIND_BOOL || rec[0] == CKPT_KIND_INT || rec[0] == CKPT_KIND_FLOAT)
        rec[4] = ckpt_value_numpy_dtype(v);
    int64_t refs_at = (int64_t)(b->refs.len / sizeof(int64_t));
    size_t n = ckpt_value_len(v);
    switch (rec[0]) {
    case CKPT_KIND_BOOL: {
        int x = 0;
        (void)ckpt_value_bool(v, &x);
        rec[1] = x;
        break;
    }
    case CKPT_KIND_INT: {
        int64_t x;
        rec[2] = -1;
        if (ckpt_value_int(v, &x) == 0) {
            rec[1] = x;
        } else {
            const char *dec = ckpt_value_int_decimal(v);
            rec[3] = (int64_t)strlen(dec);
            rec[2] = put_text(b, dec, (size_t)rec[3]);
        }
        break;
    }
    case CKPT_KIND_FLOAT: {
        double x = 0;
        (void)ckpt_value_float(v, &x);
        memcpy(&rec[1], &x, sizeof x);
        break;
    }
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: {
        size_t len = 0;
        const char *s = ckpt_value_str(v, &len);
        rec[1] = put_text(b, s, len);
        rec[2] = (int64_t)len;
        rec[3] = ckpt_value_class(v) != NULL;
        break;
    }
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        rec[1] = refs_at;
        rec[2] = (int64_t)n;
        rec[3] = ckpt_value_class(v) != NULL;
        for (size_t i = 0; i < n; i++) put(&b->refs, ptr_word(ckpt_value_item(v, i)));
        break;
    case CKPT_KIND_DICT:
        rec[1] = refs_at;
        rec[2] = (int64_t)n;
        rec[3] = dict_class(v);
        rec[4] = ptr_word(ckpt_value_dict_state(v));
        for (size_t i = 0; i < n; i++) {
            put(&b->refs, ptr_word(ckpt_value_key(v, i)));
            put(&b->refs, ptr_word(ckpt_value_item(v, i)));
        }
        break;
    case CKPT_KIND_TENSOR:
        rec[1] = (int64_t)b->ntensors++;
        put_tensor(b, ckpt_value_tensor(v));
        break;
    case CKPT_KIND_OBJECT: {
        const char *name = ckpt_value_object_name(v);
        rec[2] = (int64_t)strlen(name);
        rec[1] = put_text(b, name, (size_t)rec[2]);
        rec[3] = ptr_word(ckpt_value_object_args(v));
        rec[4] = ptr_word(ckpt_value_object_state(v));
        break;
    }
    default: break; /* NONE */
    }
    ckpt_buf_put(&b->nodes, rec, sizeof rec);
}

static int enter(ckpt_walk *w, ckpt_walk_frame *node) {
    builder *b = w->ctx;
    uint64_t idx;
    if (ckpt_ptrmap_get(&b->seen, node->value, &idx)) return CKPT_WALK_SKIP;
    int rc = ckpt_ptrmap_put(&b->seen, node->value, UINT64_MAX);
    if (rc) return rc;
    switch (ckpt_value_kind(node->value)) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
    case CKPT_KIND_OBJECT: return CKPT_WALK_DESCEND;
    default: return CKPT_WALK_PRUNE;
    }
}

static int leave(ckpt_walk *w, ckpt_walk_frame *node) {
    builder *b = w->ctx;
    put_node(b, node->value);
    return ckpt_ptrmap_put(&b->seen, node->value, b->nnodes++);
}

/* A child pointer word replaced by its node index (-1 stays). */
static void number(const builder *b, int64_t *word) {
    uint64_t idx = 0;
    if (*word != -1) {
        (void)ckpt_ptrmap_get(&b->seen, (const void *)(uintptr_t)*word, &idx);
        *word = (int64_t)idx;
    }
}

static void builder_free(builder *b) {
    ckpt_ptrmap_free(&b->seen);
    ckpt_buf_free(&b->nodes);
    ckpt_buf_free(&b->tensors);
    ckpt_buf_free(&b->refs);
    ckpt_buf_free(&b->dims);
    ckpt_buf_free(&b->text);
}

/* The table and its words in one allocation, the text in another. */
typedef struct table_block {
    ckpt_value_table t;
    int64_t words[];
} table_block;

static int finish(builder *b, ckpt_value_table **out) {
    size_t n[4] = {b->nodes.len, b->tensors.len, b->refs.len, b->dims.len};
    size_t total = 0;
    for (int i = 0; i < 4; i++) {
        if (total > SIZE_MAX - sizeof(table_block) - n[i]) return ckpt_err_nomem();
        total += n[i];
    }
    table_block *blk = ckpt_malloc(sizeof *blk + total);
    char *text = ckpt_malloc(b->text.len ? b->text.len : 1);
    if (!blk || !text) {
        ckpt_free(blk);
        ckpt_free(text);
        return ckpt_err_nomem();
    }
    const ckpt_buf *parts[4] = {&b->nodes, &b->tensors, &b->refs, &b->dims};
    size_t at = 0, starts[4];
    for (int i = 0; i < 4; i++) {
        starts[i] = at / sizeof(int64_t);
        if (n[i]) memcpy((char *)blk->words + at, parts[i]->p, n[i]);
        at += n[i];
    }
    if (b->text.len) memcpy(text, b->text.p, b->text.len);
    blk->t = (ckpt_value_table){.version = CKPT_VALUE_TABLE_VERSION,
                                .words = blk->words,
                                .nwords = total / sizeof(int64_t),
                                .nnodes = b->nnodes,
                                .ntensors = b->ntensors,
                                .tensors_at = starts[1],
                                .refs_at = starts[2],
                                .dims_at = starts[3],
                                .text = text,
                                .ntext = b->text.len};
    /* children: pointers until now */
    for (size_t i = 0; i < b->nnodes; i++) {
        int64_t *rec = blk->words + i * NODE_WORDS;
        if (rec[0] == CKPT_KIND_DICT || rec[0] == CKPT_KIND_OBJECT) number(b, &rec[4]);
        if (rec[0] == CKPT_KIND_OBJECT) number(b, &rec[3]);
    }
    for (size_t k = starts[2]; k < starts[3]; k++) number(b, &blk->words[k]);
    *out = &blk->t;
    return 0;
}

int ckpt_file_value_table(ckpt_value_table **out, const ckpt_file *f) {
    if (!out || !f)
        return ckpt_err(CKPT_E_INVALID_ARG, f ? f->path : "", NULL, CKPT_NO_OFFSET,
                        "out and f are required");
    *out = NULL;
    const ckpt_value *root;
    int rc = ckpt_file_logical_root(&root, f);
    if (rc) return rc;
    builder b = {.f = f};
    ckpt_walk w;
    ckpt_walk_init(&w, &f->opts.limits, f->path, NULL);
    w.enter = enter;
    w.leave = leave;
    w.ctx = &b;
    w.follow = CKPT_WALK_KEYS | CKPT_WALK_DICT_STATE | CKPT_WALK_OBJECT_PARTS;
    rc = ckpt_walk_run(&w, root);
    if (rc == 0 &&
        (b.nodes.failed || b.tensors.failed || b.refs.failed || b.dims.failed || b.text.failed))
        rc = ckpt_err_nomem();
    if (rc == 0) rc = finish(&b, out);
    builder_free(&b);
    return rc;
}

void ckpt_value_table_free(ckpt_value_table *t) {
    if (!t) return;
    ckpt_free((void *)t->text);
    ckpt_free(t); /* the block starts with the table */
}
