/* doctor_keys.c - the doctor's "keys" section as text: wrapper prefixes
 * that make a strict load_state_dict fail (or a strict=False one load
 * nothing), and the `ckpt rename` that fixes them. */
#include <string.h>

#include "doctor.h"

static const char *wrapper_origin(const char *segment) {
    if (strcmp(segment, "module.") == 0) return "nn.DataParallel / DistributedDataParallel";
    if (strcmp(segment, "_orig_mod.") == 0) return "torch.compile";
    if (strcmp(segment, "_fsdp_wrapped_module.") == 0) return "FSDP";
    return "activation checkpointing";
}

void cli_doctor_keys_show(const ckpt_doctor_report *r) {
    const ckpt_keys_report *k = ckpt_doctor_keys(r);
    size_t n = k ? ckpt_keys_wrapper_count(k) : 0;
    const char *fix = k ? ckpt_keys_fix_args(k) : NULL;
    const char *collision = k ? ckpt_keys_collision(k) : NULL;
    const char *path = ckpt_doctor_path(r);
    const char *root = k ? ckpt_keys_root(k) : "";

    if (k == NULL) {
        puts("  not available: the file could not be opened");
        return;
    }
    if (n == 0) {
        puts("  clean: no wrapper prefix (module., _orig_mod., FSDP, "
             "activation checkpointing) on any tensor key");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const ckpt_key_wrapper *w = ckpt_keys_wrapper(k, i);

        printf("  '%s' (%s) on %llu key%s", w->segment, wrapper_origin(w->segment),
               (unsigned long long)w->keys, cli_plural(w->keys));
        if (*root) {
            fputs(" of the model under '", stdout);
            cli_put_text(stdout, root, strlen(root));
            fputc('\'', stdout);
        }
        puts(w->leading ? ", always leading" : "");
    }
    puts("  a plain model's load_state_dict(strict=True) fails on these keys, "
         "and strict=False loads none of them");
    if (fix) {
        fputs("  fix: ckpt rename ", stdout);
        cli_put_shell(stdout, path);
        printf(" OUT %s\n", fix);
        fputs("  python: ", stdout);
        fix = ckpt_keys_fix_python(k);
        cli_put_text(stdout, fix, strlen(fix));
        fputc('\n', stdout);
    } else if (collision) {
        fputs("  no safe fix: ", stdout);
        cli_put_text(stdout, collision, strlen(collision));
        fputc('\n', stdout);
    }
}
