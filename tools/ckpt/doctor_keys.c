/* doctor_keys.c - the doctor's "keys" section: wrapper prefixes that make a
 * strict load_state_dict fail (or a strict=False one load nothing), and the
 * `ckpt rename` that fixes them. */
#include <string.h>

#include "doctor.h"

int cli_doctor_keys_run(cli_doctor_keys *k, const ckpt_file *f, const char *path)
{
    memset(k, 0, sizeof *k);
    k->path = path;
    if (f == NULL)
        return 0;
    return ckpt_keys_hygiene(&k->report, f) == 0 ? 0 : -1;
}

int cli_doctor_keys_concern(const cli_doctor_keys *k, FILE *out)
{
    size_t n = k->report ? ckpt_keys_wrapper_count(k->report) : 0;

    if (n == 0)
        return 0;
    if (out) {
        const ckpt_key_wrapper *w = ckpt_keys_wrapper(k->report, 0);

        fprintf(out, "keys: '%s' on %llu key%s", w->segment,
                (unsigned long long)w->keys, cli_plural(w->keys));
        if (n > 1)
            fprintf(out, " (and %zu more wrapper%s)", n - 1, cli_plural(n - 1));
    }
    return 1;
}

static const char *wrapper_origin(const char *segment)
{
    if (strcmp(segment, "module.") == 0)
        return "nn.DataParallel / DistributedDataParallel";
    if (strcmp(segment, "_orig_mod.") == 0)
        return "torch.compile";
    if (strcmp(segment, "_fsdp_wrapped_module.") == 0)
        return "FSDP";
    return "activation checkpointing";
}

void cli_doctor_keys_show(const cli_doctor_keys *k, cli_json_writer *j)
{
    size_t n = k->report ? ckpt_keys_wrapper_count(k->report) : 0;
    const char *fix = k->report ? ckpt_keys_fix_args(k->report) : NULL;
    const char *collision = k->report ? ckpt_keys_collision(k->report) : NULL;

    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "wrappers");
        cli_json_array_begin(j);
        for (size_t i = 0; i < n; i++) {
            const ckpt_key_wrapper *w = ckpt_keys_wrapper(k->report, i);

            cli_json_object_begin(j);
            cli_json_key(j, "segment");
            cli_json_string(j, w->segment);
            cli_json_key(j, "keys");
            cli_json_uint(j, w->keys);
            cli_json_key(j, "leading");
            cli_json_bool(j, w->leading);
            cli_json_object_end(j);
        }
        cli_json_array_end(j);
        cli_json_key(j, "fix");
        if (fix)
            cli_json_string(j, fix);
        else
            cli_json_null(j);
        cli_json_key(j, "collision");
        if (collision)
            cli_json_string(j, collision);
        else
            cli_json_null(j);
        cli_json_object_end(j);
        return;
    }
    if (k->report == NULL) {
        puts("  not available: the file could not be opened");
        return;
    }
    if (n == 0) {
        puts("  clean: no wrapper prefix (module., _orig_mod., FSDP, "
             "activation checkpointing) on any tensor key");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const ckpt_key_wrapper *w = ckpt_keys_wrapper(k->report, i);

        printf("  '%s' (%s) on %llu key%s%s\n", w->segment,
               wrapper_origin(w->segment), (unsigned long long)w->keys,
               cli_plural(w->keys), w->leading ? ", always leading" : "");
    }
    puts("  a plain model's load_state_dict(strict=True) fails on these keys, "
         "and strict=False loads none of them");
    if (fix) {
        fputs("  fix: ckpt rename ", stdout);
        cli_put_text(stdout, k->path, strlen(k->path));
        printf(" OUT %s\n", fix);
    } else if (collision) {
        fputs("  no safe fix: ", stdout);
        cli_put_text(stdout, collision, strlen(collision));
        fputc('\n', stdout);
    }
}

void cli_doctor_keys_free(cli_doctor_keys *k)
{
    ckpt_keys_report_free(k->report);
    memset(k, 0, sizeof *k);
}
