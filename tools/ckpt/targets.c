/* targets.c - the checkpoints one argument stands for (cli.h): a
 * diffusers pipeline directory's model components, each checked on its
 * own as `ckpt scan DIR` scans each of their files, else the argument. */
#include <string.h>

#include "cli.h"

int cli_each_target(const char *arg, cli_target_fn fn, void *ctx) {
    ckpt_pipeline *p = NULL;
    int rc = ckpt_pipeline_open(&p, arg), worst = CLI_OK;
    size_t n = ckpt_pipeline_count(p);
    cli_target t = {arg, NULL, NULL, NULL, 0};

    if (rc == CKPT_E_NOTFOUND) return fn(&t, ctx);
    if (rc) {
        cli_error e;
        cli_error_capture(&e, rc);
        cli_report(arg, &e);
        return CLI_USAGE;
    }
    if (n == 0) {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, arg, strlen(arg));
        fputs(": a diffusers pipeline whose model_index.json names no model component "
              "(a folder holding config.json)\n",
              stderr);
        worst = CLI_USAGE;
    }
    for (size_t i = 0; i < n; i++) {
        cli_error e;
        t.path = ckpt_pipeline_path(p, i);
        t.component = ckpt_pipeline_component(p, i);
        t.unloadable = NULL;
        t.pipeline = p;
        t.index = i;
        if ((rc = ckpt_pipeline_check(p, i)) != 0) {
            cli_error_capture(&e, rc);
            t.unloadable = &e;
            rc = cli_report(t.path, &e);
            if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
        }
        rc = fn(&t, ctx);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    ckpt_pipeline_free(p);
    return worst;
}

int cli_several_targets(const char *const *args, size_t n) {
    ckpt_pipeline *p = NULL;
    int several = n > 1 || (n == 1 && ckpt_pipeline_open(&p, args[0]) == 0);

    ckpt_pipeline_free(p);
    return several;
}

void cli_json_pipeline(cli_json_writer *j, const cli_target *t) {
    if (t->component == NULL) return;
    cli_json_key(j, "pipeline");
    cli_json_object_begin(j);
    cli_json_key(j, "component");
    cli_json_string(j, t->component);
    cli_json_key(j, "error");
    if (t->unloadable)
        cli_json_error(j, t->unloadable, t->path);
    else
        cli_json_null(j);
    cli_json_object_end(j);
}
