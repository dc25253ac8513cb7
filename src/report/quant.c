/* quant.c - bitsandbytes-quantized tensors (quant.h). */
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "base/alloc.h"
#include "report/quant.h"

#define QUANT_STATE ".quant_state.bitsandbytes__"
#define MAX_QUANT_STATE 65536u

/* The tensor named by name's first len bytes followed by suffix, or NULL
 * (also when a long name's copy cannot be allocated). */
static const ckpt_tensor *find(const ckpt_file *f, const char *name, size_t len,
                               const char *suffix) {
    char small[256];
    size_t sl = strlen(suffix);
    char *s = len + sl < sizeof small ? small : ckpt_malloc(len + sl + 1);
    if (!s) return NULL;
    memcpy(s, name, len);
    memcpy(s + len, suffix, sl + 1);
    const ckpt_tensor *t = ckpt_file_find_tensor(f, s);
    if (s != small) ckpt_free(s);
    return t;
}

/* The number of parameters the JSON in quant_state tensor t says its weight
 * holds (the product of "shape"); 0 when it says none. */
static uint64_t packed_params(const ckpt_tensor *t) {
    uint64_t n = ckpt_tensor_nbytes(t), params = 0;
    if (ckpt_tensor_dtype(t) != CKPT_DT_U8 || n == 0 || n > MAX_QUANT_STATE) return 0;
    char *text = ckpt_malloc((size_t)n);
    json_t *doc = text && ckpt_tensor_read(t, text, (size_t)n) == 0
                      ? json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, NULL)
                      : NULL;
    const json_t *shape = json_object_get(doc, "shape"), *d;
    size_t i;
    if (json_is_array(shape)) {
        params = 1;
        json_array_foreach(shape, i, d) {
            json_int_t x = json_is_integer(d) ? json_integer_value(d) : -1;
            if (x < 0 || (x && params > UINT64_MAX / (uint64_t)x)) {
                params = 0;
                break;
            }
            params *= (uint64_t)x;
        }
    }
    json_decref(doc);
    ckpt_free(text);
    return params;
}

static int ends(const char *s, size_t n, const char *suffix, size_t *stem) {
    size_t k = strlen(suffix);
    if (n <= k || memcmp(s + n - k, suffix, k)) return 0;
    *stem = n - k;
    return 1;
}

void ckpt_quant_summarize(ckpt_quant_summary *out, const ckpt_file *f) {
    static const char *const packed_state[] = {".absmax", ".quant_map", ".nested_absmax",
                                               ".nested_quant_map"};
    memset(out, 0, sizeof *out);
    size_t count = ckpt_file_tensor_count(f);
    for (size_t i = 0; i < count; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i), *w;
        const char *name = ckpt_tensor_name(t), *qs = strstr(name, QUANT_STATE);
        size_t n = strlen(name), stem = 0;
        int state = 0;
        if (qs && (!strcmp(qs + strlen(QUANT_STATE), "nf4") ||
                   !strcmp(qs + strlen(QUANT_STATE), "fp4"))) {
            w = find(f, name, (size_t)(qs - name), "");
            if ((state = w != NULL) != 0) {
                uint64_t params = packed_params(t);
                out->packed++;
                out->packed_elements += ckpt_tensor_numel(w);
                out->packed_params += params;
                out->unknown_shapes += params == 0;
            }
        } else if (ends(name, n, ".SCB", &stem) || ends(name, n, ".weight_format", &stem)) {
            w = find(f, name, stem, ".weight");
            state = w && ckpt_tensor_dtype(w) == CKPT_DT_I8;
            out->int8 += state && name[stem + 1] == 'S';
        } else {
            for (size_t k = 0; !state && k < sizeof packed_state / sizeof *packed_state; k++)
                state = ends(name, n, packed_state[k], &stem) &&
                        (find(f, name, stem, QUANT_STATE "nf4") ||
                         find(f, name, stem, QUANT_STATE "fp4"));
        }
        if (state) {
            out->state++;
            out->state_elements += ckpt_tensor_numel(t);
        }
    }
}

int ckpt_quant_note(ckpt_arena *a, const ckpt_file *f, const char **out) {
    ckpt_quant_summary q;
    uint64_t elements = 0;
    *out = NULL;
    ckpt_quant_summarize(&q, f);
    if (q.packed == 0 && q.int8 == 0) return 0;
    for (size_t i = 0, n = ckpt_file_tensor_count(f); i < n; i++)
        elements += ckpt_tensor_numel(ckpt_file_tensor(f, i));
    const char *s = ckpt_arena_printf(
        a, "quantized with bitsandbytes: the %" PRIu64 " elements are not parameters one for one",
        elements);
    if (s && q.packed)
        s = ckpt_arena_printf(
            a,
            "%s; %" PRIu64 " 4-bit weight%s pack%s %" PRIu64 " parameters two to a byte in %" PRIu64
            " U8 elements (the shape%s %s quant_state records%s)",
            s, q.packed, q.packed == 1 ? "" : "s", q.packed == 1 ? "s" : "", q.packed_params,
            q.packed_elements, q.packed == 1 ? "" : "s", q.packed == 1 ? "its" : "their",
            q.unknown_shapes ? "; some record none" : "");
    if (s && q.int8)
        s = ckpt_arena_printf(a, "%s; %" PRIu64 " int8 weight%s, a parameter per element", s,
                              q.int8, q.int8 == 1 ? "" : "s");
    if (s)
        s = ckpt_arena_printf(a,
                              "%s; %" PRIu64 " tensor%s of quantization state (absmax, quant_map, "
                              "quant_state, SCB...: %" PRIu64 " elements) hold%s none",
                              s, q.state, q.state == 1 ? "" : "s", q.state_elements,
                              q.state == 1 ? "s" : "");
    if (s && !q.unknown_shapes)
        s = ckpt_arena_printf(a, "%s: %" PRIu64 " parameters in all", s,
                              elements - q.state_elements - q.packed_elements + q.packed_params);
    *out = s;
    return s ? 0 : CKPT_E_NOMEM;
}

int ckpt_file_quant_note(char **out, const ckpt_file *f) {
    ckpt_arena a = {0};
    const char *s;
    int rc;
    if (out == NULL || f == NULL) return CKPT_E_INVALID_ARG;
    *out = NULL;
    rc = ckpt_quant_note(&a, f, &s);
    if (rc == 0 && s) {
        size_t n = strlen(s) + 1;
        if ((*out = ckpt_malloc(n)) != NULL)
            memcpy(*out, s, n);
        else
            rc = CKPT_E_NOMEM;
    }
    ckpt_arena_free(&a);
    return rc;
}
