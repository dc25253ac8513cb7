/* manifest_fuzzer.c - JSON manifests (ckpt_manifest_parse) on arbitrary
 * bytes; on success the keys go through ckpt_match (against themselves and,
 * with inference, against a wrapped model), ckpt_diff keys-only and a
 * rename plan, so hostile names reach the segment and rewrite code too. */
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_manifest *m = NULL, *model = NULL;
    if (ckpt_manifest_parse(&m, data, size, "fuzz", NULL) != 0) return 0;
    ckpt_match_result *r = NULL;
    ckpt_match_options o = CKPT_MATCH_OPTIONS_INIT;
    o.normalize = 1;
    if (ckpt_match(&r, m, m, &o) == 0 && !ckpt_match_complete(r) && ckpt_manifest_count(m))
        __builtin_trap(); /* a set always matches itself */
    ckpt_match_result_free(r);
    static const char *const names[] = {"module._orig_mod.fc.weight", "module.fc.bias", "w"};
    if (ckpt_manifest_new(&model, "model") == 0) {
        for (size_t i = 0; i < 3; i++) ckpt_manifest_add(model, names[i], "F32", 0, NULL);
        if (ckpt_match(&r, model, m, &o) == 0) {
            for (size_t i = 0; i < 3 && ckpt_match_rewritten(r, i); i++)
                (void)strlen(ckpt_match_rewritten(r, i));
            ckpt_match_result_free(r);
        }
        if (ckpt_match(&r, m, model, &o) == 0) ckpt_match_result_free(r);
    }
    ckpt_diff_result *d = NULL;
    ckpt_diff_options dopt = CKPT_DIFF_OPTIONS_INIT;
    dopt.keys_only = 1;
    if (ckpt_diff(&d, m, model, &dopt) == 0) ckpt_diff_result_free(d);
    ckpt_rename_plan *p = NULL;
    ckpt_rename_rule rules[] = {{CKPT_RENAME_REPLACE, "_orig_mod.", "", NULL},
                                {CKPT_RENAME_ADD_PREFIX, "x", NULL, NULL}};
    if (ckpt_rename_plan_new(&p, m, rules, 2) == 0) ckpt_rename_plan_free(p);
    ckpt_manifest_free(model);
    ckpt_manifest_free(m);
    return 0;
}
