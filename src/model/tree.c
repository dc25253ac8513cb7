/* write_tree.c - the public tree builder (ckpt_tree_*): values of the
 * checkpoint model created by a caller instead of a reader, then written
 * by ckpt_tree_write. The tree's arena owns every value; tensor bytes stay
 * in caller memory until the write. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model/dtype.h"
#include "model/tensor.h"
#include "model/value.h"
#include "base/error.h"
#include "base/utf8.h"

struct ckpt_tree {
    ckpt_arena arena;
};

static int invalid(const char *what) {
    return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "%s", what);
}

int ckpt_tree_new(ckpt_tree **out) {
    if (!out) return invalid("out is NULL");
    *out = ckpt_malloc(sizeof **out);
    if (!*out) return ckpt_err_nomem();
    memset(*out, 0, sizeof **out);
    return 0;
}

void ckpt_tree_free(ckpt_tree *t) {
    if (!t) return;
    ckpt_arena_free(&t->arena);
    ckpt_free(t);
}

/* Common tail of the constructors: NULL from the arena is out of memory. */
static int made(ckpt_value **out, ckpt_value *v) {
    *out = v;
    return v ? 0 : ckpt_err_nomem();
}

#define CHECK_ARGS(out, t)                                                                         \
    do {                                                                                           \
        if (!(out)) return invalid("out is NULL");                                                 \
        *(out) = NULL;                                                                             \
        if (!(t)) return invalid("tree is NULL");                                                  \
    } while (0)

int ckpt_tree_none(ckpt_value **out, ckpt_tree *t) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new(&t->arena, CKPT_KIND_NONE));
}

int ckpt_tree_bool(ckpt_value **out, ckpt_tree *t, int v) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new_bool(&t->arena, v));
}

int ckpt_tree_int(ckpt_value **out, ckpt_tree *t, int64_t v) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new_int(&t->arena, v));
}

int ckpt_tree_float(ckpt_value **out, ckpt_tree *t, double v) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new_float(&t->arena, v));
}

int ckpt_tree_str(ckpt_value **out, ckpt_tree *t, const char *s, size_t len) {
    CHECK_ARGS(out, t);
    if (!s && len) return invalid("string is NULL");
    /* pickles and JSON carry text as UTF-8: torch could not read it back */
    if (!ckpt_utf8_check(s ? s : "", len, 0)) return invalid("string is not valid UTF-8");
    return made(out, ckpt_value_new_str(&t->arena, CKPT_KIND_STR, s ? s : "", len));
}

int ckpt_tree_bytes(ckpt_value **out, ckpt_tree *t, const void *p, size_t len) {
    CHECK_ARGS(out, t);
    if (!p && len) return invalid("bytes are NULL");
    return made(out, ckpt_value_new_str(&t->arena, CKPT_KIND_BYTES, p ? p : "", len));
}

int ckpt_tree_list(ckpt_value **out, ckpt_tree *t) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new(&t->arena, CKPT_KIND_LIST));
}

int ckpt_tree_tuple(ckpt_value **out, ckpt_tree *t) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new(&t->arena, CKPT_KIND_TUPLE));
}

int ckpt_tree_empty_set(ckpt_value **out, ckpt_tree *t) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new(&t->arena, CKPT_KIND_SET));
}

int ckpt_tree_dict(ckpt_value **out, ckpt_tree *t) {
    CHECK_ARGS(out, t);
    return made(out, ckpt_value_new(&t->arena, CKPT_KIND_DICT));
}

int ckpt_tree_append(ckpt_tree *t, ckpt_value *seq, ckpt_value *item) {
    if (!t || !seq || !item) return invalid("tree, container or item is NULL");
    if (seq->kind != CKPT_KIND_LIST && seq->kind != CKPT_KIND_TUPLE && seq->kind != CKPT_KIND_SET)
        return invalid("can only append to a list, a tuple or a set");
    char msg[160];
    if (seq->kind == CKPT_KIND_SET && ckpt_value_hashable(item, "set item", msg, sizeof msg))
        return invalid(msg);
    return ckpt_value_append(&t->arena, seq, item) ? ckpt_err_nomem() : 0;
}

int ckpt_tree_set(ckpt_tree *t, ckpt_value *dict, ckpt_value *key, ckpt_value *val) {
    if (!t || !dict || !key || !val) return invalid("tree, dict, key or value is NULL");
    if (dict->kind != CKPT_KIND_DICT) return invalid("can only set items of a dict");
    if (key->kind == CKPT_KIND_LIST || key->kind == CKPT_KIND_DICT || key->kind == CKPT_KIND_TENSOR)
        return invalid("dict keys must be leaves or tuples");
    return ckpt_value_dict_set(&t->arena, dict, key, val) ? ckpt_err_nomem() : 0;
}

int ckpt_tree_set_dict_class(ckpt_tree *t, ckpt_value *dict, const char *cls) {
    if (!t || !dict) return invalid("tree or dict is NULL");
    if (dict->kind != CKPT_KIND_DICT) return invalid("only a dict has a mapping class");
    int c = CKPT_DICT_PLAIN;
    if (cls && strcmp(cls, ckpt_dict_class_name(CKPT_DICT_ORDERED)) == 0)
        c = CKPT_DICT_ORDERED;
    else if (cls && strcmp(cls, ckpt_dict_class_name(CKPT_DICT_COUNTER)) == 0)
        c = CKPT_DICT_COUNTER;
    else if (cls)
        return invalid("dict class must be collections.OrderedDict, collections.Counter "
                       "or NULL");
    if (c == CKPT_DICT_PLAIN && dict->u.dict.state)
        return invalid("a plain dict cannot hold attributes (clear the state first)");
    dict->dict_class = (uint8_t)c;
    return 0;
}

int ckpt_tree_set_class(ckpt_tree *t, ckpt_value *v, const char *cls) {
    static const struct {
        int kind;
        const char *name;
    } classes[] = {{CKPT_KIND_SET, "builtins.frozenset"},
                   {CKPT_KIND_TUPLE, "torch.Size"},
                   {CKPT_KIND_STR, "torch.device"},
                   {CKPT_KIND_BYTES, "builtins.bytearray"}};
    if (!t || !v) return invalid("tree or value is NULL");
    size_t i = 0;
    while (cls && i < sizeof classes / sizeof *classes && strcmp(cls, classes[i].name)) i++;
    if (cls && i == sizeof classes / sizeof *classes)
        return invalid("class must be builtins.frozenset, torch.Size, torch.device, "
                       "builtins.bytearray or NULL");
    if (cls && v->kind != classes[i].kind)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "a %s is built from a %s, not a %s", cls,
                        ckpt_value_kind_name(classes[i].kind), ckpt_value_kind_name(v->kind));
    for (size_t k = 0; cls && v->kind == CKPT_KIND_TUPLE && k < v->u.seq.n; k++)
        if (v->u.seq.items[k]->kind != CKPT_KIND_INT)
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "torch.Size holds ints: item %zu is a %s", k,
                            ckpt_value_kind_name(v->u.seq.items[k]->kind));
    v->alt = cls != NULL;
    return 0;
}

int ckpt_tree_set_dict_state(ckpt_tree *t, ckpt_value *dict, ckpt_value *state) {
    if (!t || !dict) return invalid("tree or dict is NULL");
    if (dict->kind != CKPT_KIND_DICT || dict->dict_class == CKPT_DICT_PLAIN)
        return invalid("only an OrderedDict or Counter holds attributes");
    if (state && state->kind != CKPT_KIND_DICT) return invalid("the state must be a dict");
    dict->u.dict.state = state;
    return 0;
}

int ckpt_tree_set_parameter(ckpt_tree *t, ckpt_value *tensor, int requires_grad) {
    if (!t || !tensor) return invalid("tree or tensor is NULL");
    if (tensor->kind != CKPT_KIND_TENSOR) return invalid("only a tensor can be a parameter");
    tensor->u.tensor->is_parameter = 1;
    tensor->u.tensor->requires_grad = requires_grad != 0;
    return 0;
}

int ckpt_tree_tensor_alias(ckpt_value **out, ckpt_tree *t, const ckpt_value *of) {
    CHECK_ARGS(out, t);
    if (!of || of->kind != CKPT_KIND_TENSOR) return invalid("an alias is of a tensor");
    const ckpt_tensor *x = of->u.tensor;
    return ckpt_tensor_new(out, &t->arena, x->storage, x->dtype, x->ndim, x->shape, x->stride,
                           x->storage_offset, "", "", CKPT_NO_OFFSET);
}

int ckpt_tree_tensor_view(ckpt_value **out, ckpt_tree *t, const ckpt_value *of, unsigned ndim,
                          const uint64_t *shape, const uint64_t *stride, uint64_t storage_offset) {
    CHECK_ARGS(out, t);
    if (!of || of->kind != CKPT_KIND_TENSOR) return invalid("a view is of a tensor");
    if (ndim > CKPT_MAX_NDIM || (ndim && (!shape || !stride)))
        return invalid("ndim too large, or shape or stride NULL");
    const ckpt_tensor *x = of->u.tensor;
    int rc = ckpt_tensor_new(out, &t->arena, x->storage, x->dtype, ndim, shape, stride,
                             storage_offset, "", "", CKPT_NO_OFFSET);
    if (rc != CKPT_E_FORMAT && rc != CKPT_E_LIMIT) return rc;
    char msg[512]; /* the record's own text, which ckpt_err overwrites */
    snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
    return invalid(msg);
}

int ckpt_tree_set_numpy(ckpt_tree *t, ckpt_value *v, ckpt_dtype dtype) {
    if (!t || !v) return invalid("tree or value is NULL");
    if (dtype != CKPT_DT_UNKNOWN && !ckpt_dtype_numpy_code(dtype))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "numpy has no dtype %s",
                        ckpt_dtype_name(dtype));
    if (v->kind == CKPT_KIND_TENSOR) {
        if (dtype != CKPT_DT_UNKNOWN && dtype != v->u.tensor->dtype)
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "a numpy array of %s over a tensor of %s", ckpt_dtype_name(dtype),
                            ckpt_dtype_name(v->u.tensor->dtype));
        v->u.tensor->is_numpy = dtype != CKPT_DT_UNKNOWN;
        return 0;
    }
    int ok = dtype == CKPT_DT_UNKNOWN;
    if (v->kind == CKPT_KIND_BOOL) ok |= dtype == CKPT_DT_BOOL;
    if (v->kind == CKPT_KIND_FLOAT)
        ok |= dtype == CKPT_DT_F16 || dtype == CKPT_DT_F32 || dtype == CKPT_DT_F64;
    if (v->kind == CKPT_KIND_INT && !v->u.i.decimal) {
        /* the int64 value fits `dtype` (a big int comes from no tree) */
        int64_t x = v->u.i.v;
        switch (dtype) {
        case CKPT_DT_I8: ok = x >= INT8_MIN && x <= INT8_MAX; break;
        case CKPT_DT_I16: ok = x >= INT16_MIN && x <= INT16_MAX; break;
        case CKPT_DT_I32: ok = x >= INT32_MIN && x <= INT32_MAX; break;
        case CKPT_DT_I64: ok = 1; break;
        case CKPT_DT_U8: ok = x >= 0 && x <= UINT8_MAX; break;
        case CKPT_DT_U16: ok = x >= 0 && x <= UINT16_MAX; break;
        case CKPT_DT_U32: ok = x >= 0 && x <= UINT32_MAX; break;
        case CKPT_DT_U64: ok = x >= 0; break;
        default: break;
        }
    }
    if (!ok)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "a numpy scalar of %s is not built from a %s", ckpt_dtype_name(dtype),
                        ckpt_value_kind_name(v->kind));
    v->np_dtype = (uint8_t)dtype;
    return 0;
}

int ckpt_tree_set_requires_grad(ckpt_tree *t, ckpt_value *tensor, int requires_grad) {
    if (!t || !tensor) return invalid("tree or tensor is NULL");
    if (tensor->kind != CKPT_KIND_TENSOR) return invalid("only a tensor requires grad");
    tensor->u.tensor->requires_grad = requires_grad != 0;
    return 0;
}

int ckpt_tree_tensor(ckpt_value **out, ckpt_tree *t, ckpt_dtype dtype, unsigned ndim,
                     const uint64_t *shape, const void *data, size_t size) {
    CHECK_ARGS(out, t);
    if (ckpt_dtype_bits(dtype) == 0 || dtype == CKPT_DT_UNKNOWN) return invalid("unknown dtype");
    if (ndim > CKPT_MAX_NDIM || (ndim && !shape) || (!data && size))
        return invalid("ndim too large, or shape or data NULL");
    uint64_t numel = 1, bits, stride[CKPT_MAX_NDIM], s = 1;
    for (unsigned i = 0; i < ndim; i++)
        if (ckpt_mul_overflow(numel, shape[i], &numel)) return invalid("shape overflows");
    if (ckpt_mul_overflow(numel, ckpt_dtype_bits(dtype), &bits) || bits % 8 || bits / 8 != size)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "tensor data of %zu bytes, the shape needs %llu elements "
                        "of %s",
                        size, (unsigned long long)numel, ckpt_dtype_name(dtype));
    /* torch's contiguous strides (a zero dimension counts as 1); a shape
     * with a zero can have dimensions whose product overflows */
    for (unsigned i = ndim; i-- > 0;) {
        stride[i] = s;
        if (i && ckpt_mul_overflow(s, shape[i] ? shape[i] : 1, &s))
            return invalid("strides overflow");
    }
    ckpt_storage *st = ckpt_arena_alloc(&t->arena, sizeof *st);
    if (!st) return ckpt_err_nomem();
    *st = (ckpt_storage){.dtype = dtype,
                         .nbytes = size,
                         .data = data ? data : (const void *)"",
                         .key = "",
                         .member = "",
                         .file_offset = CKPT_NO_OFFSET};
    return ckpt_tensor_new(out, &t->arena, st, dtype, ndim, shape, stride, 0, "", "",
                           CKPT_NO_OFFSET);
}
