/* pickle_fuzzer.c - the restricted pickle machine on arbitrary bytes, as a
 * stack of pickles (legacy torch files are several in a row). A
 * persistent_load turns ('storage', type, key, location, numel) ids into
 * storages so the tensor builders run; everything the machine hands out
 * (events, the value tree, numpy tensor bytes) is read back so that ASan
 * sees any dangling or out-of-bounds pointer. Traps when a failed run
 * still returns a value. */
#include <stdint.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "format/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static void on_event(void *ctx, const pk_event *ev) {
    (void)ctx;
    sink += strlen(ev->module) + strlen(ev->name);
    if (ev->args) sink += ev->args->u.seq.n;
}

static int load(void *ctx, ckpt_value *pid, uint64_t offset, ckpt_value **out) {
    ckpt_arena *a = ctx;
    if (pid->kind != CKPT_KIND_TUPLE || pid->u.seq.n < 5) {
        *out = pid; /* any value: the builders must cope */
        return 0;
    }
    const ckpt_value *type = pid->u.seq.items[1], *numel = pid->u.seq.items[4];
    ckpt_dtype dt = CKPT_DT_F32;
    if (type->kind == CKPT_KIND_GLOBAL_) dt = ckpt_dtype_from_storage_class(type->u.global.name);
    if (dt == CKPT_DT_UNKNOWN || numel->kind != CKPT_KIND_INT || numel->u.i.decimal ||
        numel->u.i.v < 0)
        return ckpt_err(CKPT_E_FORMAT, "fuzz", "", offset, "bad storage id");
    uint64_t nbytes;
    if (ckpt_mul_overflow((uint64_t)numel->u.i.v, ckpt_dtype_size(dt), &nbytes))
        return ckpt_err(CKPT_E_FORMAT, "fuzz", "", offset, "storage size overflows");
    ckpt_storage *st = ckpt_arena_alloc(a, sizeof *st);
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_STORAGE_);
    if (!st || !v) return ckpt_err(CKPT_E_NOMEM, "fuzz", "", offset, "out of memory");
    st->dtype = dt;
    st->nbytes = nbytes;
    st->key = "";
    st->member = "";
    st->file_offset = CKPT_NO_OFFSET;
    v->u.storage = st;
    *out = v;
    return 0;
}

/* Reads the tree back; memo references can make it cyclic, so the walk is
 * bounded in depth and in nodes. */
static void walk(const ckpt_value *v, int depth, size_t *budget) {
    if (!v || depth > 16 || *budget == 0) return;
    (*budget)--;
    switch (v->kind) {
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES:
        if (v->u.s.p[v->u.s.len] != '\0') __builtin_trap();
        sink += v->u.s.len ? (uint8_t)v->u.s.p[0] : 0;
        break;
    case CKPT_KIND_INT:
        if (v->u.i.decimal) sink += strlen(v->u.i.decimal);
        break;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        for (size_t i = 0; i < v->u.seq.n; i++) walk(v->u.seq.items[i], depth + 1, budget);
        break;
    case CKPT_KIND_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            walk(v->u.dict.keys[i], depth + 1, budget);
            walk(v->u.dict.vals[i], depth + 1, budget);
        }
        break;
    case CKPT_KIND_TENSOR: {
        const ckpt_tensor *t = v->u.tensor;
        if (t->nbytes > t->storage->nbytes) __builtin_trap();
        if (t->storage->data && t->storage->nbytes) /* numpy arrays carry their bytes */
            sink += t->storage->data[0] + t->storage->data[t->storage->nbytes - 1];
        break;
    }
    case CKPT_KIND_OBJECT:
        sink += strlen(v->u.obj.name);
        walk(v->u.obj.args, depth + 1, budget);
        walk(v->u.obj.state, depth + 1, budget);
        walk(v->u.obj.items, depth + 1, budget);
        break;
    case CKPT_KIND_GLOBAL_: sink += strlen(v->u.global.qualname); break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_limits lim = CKPT_LIMITS_INIT;
    lim.max_pickle_ops = 200000; /* keeps each input fast */
    lim.max_pickle_stack = 20000;
    lim.max_pickle_memo = 20000;
    size_t pos = 0;
    for (int k = 0; k < 4 && pos < size; k++) {
        ckpt_arena a = {0};
        pk_options o = {.file = "fuzz",
                        .member = "",
                        .base_offset = pos,
                        .limits = &lim,
                        .arena = &a,
                        .persistent_load = load,
                        .on_event = on_event,
                        .ctx = &a};
        ckpt_value *v;
        size_t used;
        int rc = ckpt_pickle_run(&v, &used, data + pos, size - pos, &o);
        if (rc) {
            if (rc > 0 || v || used) __builtin_trap();
            ckpt_arena_free(&a);
            break;
        }
        if (!v || used == 0 || used > size - pos) __builtin_trap();
        size_t budget = 100000;
        walk(v, 0, &budget);
        pos += used;
        ckpt_arena_free(&a);
    }
    return 0;
}
