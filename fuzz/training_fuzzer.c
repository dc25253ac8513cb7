/* training_fuzzer.c - the training analysis on whatever ckpt_open accepts:
 * every component, counter, reason and metadata entry is read back, and
 * the strings walked, so that a hostile object tree (shared references,
 * odd key types, optimizer look-alikes) is analysed without a crash. */
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_file *f = NULL;
    ckpt_training *t = NULL;
    size_t i, n = 0;

    if (ckpt_open_memory(&f, data, size, "fuzz", NULL) != 0) return 0;
    if (ckpt_training_analyze(&t, f) == 0) {
        for (i = 0; i < ckpt_training_component_count(t); i++) {
            const ckpt_component *c = ckpt_training_component(t, i);
            n += strlen(c->name) + strlen(c->type) + strlen(c->file) + (size_t)c->bytes +
                 (c->param_groups != NULL);
        }
        for (i = 0; i < ckpt_training_reason_count(t); i++) n += strlen(ckpt_training_reason(t, i));
        for (i = 0; i < ckpt_training_warning_count(t); i++)
            n += strlen(ckpt_training_warning(t, i));
        for (i = 0; i < ckpt_training_meta_count(t); i++) {
            const ckpt_meta_entry *m = ckpt_training_meta(t, i);
            n += strlen(m->key) + (m->text ? strlen(m->text) : 0);
        }
        n += strlen(ckpt_resume_name(ckpt_training_resume(t)));
        (void)ckpt_training_optimizer_ratio(t);
        (void)ckpt_training_weights_path(t);
    }
    ckpt_training_free(t);
    ckpt_close(f);
    return n == (size_t)-1;
}
