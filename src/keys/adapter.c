/* adapter.c - a PEFT LoRA adapter (adapter_model.safetensors) matched
 * against its base model: it is not a state dict of the model, so the
 * match says what it is and whether every module it targets is in the
 * model with the shapes its low-rank factors need. */
#include <inttypes.h>
#include <string.h>

#include "base/error.h"
#include "keys/keys.h"

/* The factors PEFT saves per target module: lora_A.weight [r, in],
 * lora_B.weight [out, r] (Linear), lora_embedding_A [r, num_embeddings],
 * lora_embedding_B [embedding_dim, r] (Embedding); `axis` is the dimension
 * of the factor that equals `base_axis` of the base weight [out, in]
 * ([num_embeddings, embedding_dim]). */
typedef struct factor {
    const char *suffix;
    unsigned axis, base_axis;
    int first; /* counts the target module once */
} factor;

static const factor FACTORS[] = {
    {".lora_A.weight", 1, 1, 1},
    {".lora_B.weight", 0, 0, 0},
    {".lora_embedding_A", 1, 0, 1},
    {".lora_embedding_B", 0, 1, 0},
};

#define PEFT_PREFIX "base_model.model."

static const factor *factor_of(const char *name, size_t *module_len) {
    size_t len = strlen(name);
    for (size_t k = 0; k < sizeof FACTORS / sizeof *FACTORS; k++) {
        size_t sl = strlen(FACTORS[k].suffix);
        if (len > sl && strcmp(name + len - sl, FACTORS[k].suffix) == 0) {
            *module_len = len - sl;
            return &FACTORS[k];
        }
    }
    return NULL;
}

/* The one rule of what an adapter is: its factors are at least half of
 * its n keys (the rest: modules_to_save copies, DoRA magnitudes). */
static int is_adapter(size_t nfactors, size_t n) { return nfactors > 0 && nfactors * 2 >= n; }

size_t ckpt_adapter_factors(const ckpt_file *f, size_t *modules) {
    size_t n = ckpt_file_tensor_count(f), nfactors = 0, mlen;
    *modules = 0;
    for (size_t i = 0; i < n; i++) {
        const factor *k = factor_of(ckpt_tensor_name(ckpt_file_tensor(f, i)), &mlen);
        if (!k) continue;
        nfactors++;
        *modules += (size_t)k->first;
    }
    if (is_adapter(nfactors, n)) return nfactors;
    *modules = 0;
    return 0;
}

/* The base weight of module (len bytes, PEFT's prefix stripped) in e:
 * MODULE.weight, or MODULE.base_layer.weight of a model PEFT wraps;
 * *w NULL when neither is there. 0, or CKPT_E_NOMEM. */
static int base_weight(const ckpt_manifest *e, const char *module, size_t len, ckpt_arena *a,
                       const ckpt_manifest_entry **w) {
    static const char *const tails[] = {".weight", ".base_layer.weight"};
    *w = NULL;
    for (size_t k = 0; k < 2; k++) {
        const char *name = ckpt_arena_printf(a, "%.*s%s", (int)len, module, tails[k]);
        if (!name) return CKPT_E_NOMEM;
        size_t j = ckpt_manifest_lookup(e, name, strlen(name));
        if (j != CKPT_KEYS_NONE) {
            *w = &e->entries[j];
            return 0;
        }
    }
    return 0;
}

const char *ckpt_adapter_note(const ckpt_manifest *c, const ckpt_manifest *e, ckpt_arena *a,
                              int *nomem) {
    size_t nfactors = 0, modules = 0, absent = 0, wrong = 0;
    const char *first_absent = NULL, *first_wrong = NULL;
    *nomem = 0;
    for (size_t i = 0; i < c->n; i++) {
        const ckpt_manifest_entry *f = &c->entries[i];
        size_t mlen;
        const factor *k = factor_of(f->name, &mlen);
        if (!k) continue;
        nfactors++;
        modules += (size_t)k->first;
        const char *module = f->name;
        size_t pl = strlen(PEFT_PREFIX);
        if (mlen > pl && strncmp(module, PEFT_PREFIX, pl) == 0) module += pl, mlen -= pl;
        const ckpt_manifest_entry *w;
        if (base_weight(e, module, mlen, a, &w)) return *nomem = 1, NULL;
        if (!w) {
            absent += (size_t)k->first;
            if (!first_absent && !(first_absent = ckpt_arena_strndup(a, module, mlen)))
                return *nomem = 1, NULL;
        } else if (f->ndim == 2 && w->ndim == 2 && f->shape[k->axis] != w->shape[k->base_axis] &&
                   !wrong++) {
            first_wrong = ckpt_arena_printf(
                a, "%s [%" PRIu64 ", %" PRIu64 "] against %s [%" PRIu64 ", %" PRIu64 "]", f->name,
                f->shape[0], f->shape[1], w->name, w->shape[0], w->shape[1]);
            if (!first_wrong) return *nomem = 1, NULL;
        }
    }
    if (!is_adapter(nfactors, c->n)) return NULL;
    const char *head = ckpt_arena_printf(a,
                                         "a PEFT LoRA adapter, not weights of this model (%zu "
                                         "lora_A/lora_B keys for %zu target modules)",
                                         nfactors, modules);
    const char *note =
        !head    ? NULL
        : absent ? ckpt_arena_printf(a, "%s: %zu target module%s not in the expected model (%s)",
                                     head, absent, absent == 1 ? " is" : "s are", first_absent)
        : wrong  ? ckpt_arena_printf(a, "%s: %zu factor%s the wrong size for the base weight (%s)",
                                     head, wrong, wrong == 1 ? " has" : "s have", first_wrong)
                 : ckpt_arena_printf(a,
                                     "%s: every target module is in the expected model, with the "
                                      "shapes its factors need; load the base weights, then apply "
                                      "the adapter (PEFT)",
                                     head);
    if (!note) *nomem = 1;
    return note;
}
