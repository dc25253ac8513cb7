/* cmd_convert.c - `ckpt convert IN OUT [--select PREFIX]...
 * [--format safetensors|torch] [--meta KEY=VALUE]... [--config FILE.json]`:
 * ckpt_convert with options from the command line. On success one line on
 * stdout: `wrote OUT (FORMAT, N tensors|storages, B bytes)`. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* A --config file is a model config, not a checkpoint: keep it small. */
#define CONFIG_MAX ((size_t)16 << 20)

typedef struct convert_args {
    const char *in, *out;
    const char **select;
    size_t nselect;
    const char **keys, **values;
    size_t nmeta;
    const char *config_path;
    ckpt_format format;
    int backup;
} convert_args;

/* Reads a whole text file into a malloc'd NUL-terminated buffer; NULL
 * after printing why. */
static char *read_text(const char *path)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, got;

    if (fp == NULL) {
        fputs("ckpt convert: cannot read config ", stderr);
        cli_put_text(stderr, path, strlen(path));
        fputc('\n', stderr);
        return NULL;
    }
    buf = malloc(CONFIG_MAX + 1);
    if (buf != NULL) {
        while ((got = fread(buf + len, 1, CONFIG_MAX + 1 - len, fp)) > 0)
            len += got;
        if (ferror(fp) || len > CONFIG_MAX) {
            fputs(len > CONFIG_MAX ? "ckpt convert: config file larger than 16 MiB\n"
                                   : "ckpt convert: error reading config file\n",
                  stderr);
            free(buf);
            buf = NULL;
        } else {
            buf[len] = '\0';
        }
    }
    fclose(fp);
    return buf;
}

/* Fills *a from argv; returns CLI_OK, or the exit code of a usage error
 * (already reported) or of --help (-1: print help). */
static int parse(const cli_command *cmd, int argc, char **argv, convert_args *a)
{
    int i, files = 0;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (cli_is_help(arg))
            return -1;
        if (strcmp(arg, "--select") == 0 || strcmp(arg, "--format") == 0 ||
            strcmp(arg, "--meta") == 0 || strcmp(arg, "--config") == 0) {
            if (val == NULL)
                return cli_usage_error(cmd, "%s needs a value", arg);
            i++;
            if (strcmp(arg, "--select") == 0) {
                if (val[0] == '\0')
                    return cli_usage_error(cmd, "--select needs a non-empty prefix");
                a->select[a->nselect++] = val;
            } else if (strcmp(arg, "--format") == 0) {
                if (strcmp(val, "safetensors") == 0)
                    a->format = CKPT_FORMAT_SAFETENSORS;
                else if (strcmp(val, "torch") == 0)
                    a->format = CKPT_FORMAT_TORCH_ZIP;
                else
                    return cli_usage_error(cmd, "--format is safetensors or torch");
            } else if (strcmp(arg, "--meta") == 0) {
                const char *eq = strchr(val, '=');
                char *key;

                if (eq == NULL || eq == val)
                    return cli_usage_error(cmd, "--meta needs KEY=VALUE");
                key = malloc((size_t)(eq - val) + 1);
                if (key == NULL)
                    return cli_usage_error(cmd, "out of memory");
                memcpy(key, val, (size_t)(eq - val));
                key[eq - val] = '\0';
                a->keys[a->nmeta] = key;
                a->values[a->nmeta++] = eq + 1;
            } else {
                a->config_path = val;
            }
        } else if (strcmp(arg, "--backup") == 0) {
            a->backup = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return cli_usage_error(cmd, "unknown option '%s'", arg);
        } else if (files < 2) {
            if (files++ == 0)
                a->in = arg;
            else
                a->out = arg;
        } else {
            return cli_usage_error(cmd, "expected IN and OUT only");
        }
    }
    if (files < 2)
        return cli_usage_error(cmd, "missing %s", files ? "OUT" : "IN and OUT");
    return CLI_OK;
}

static const char *unit(const ckpt_convert_report *r)
{
    if (r->format == CKPT_FORMAT_TORCH_ZIP)
        return r->tensors == 1 ? "storage" : "storages";
    return r->tensors == 1 ? "tensor" : "tensors";
}

/* 1 when writing OUT replaces IN itself: the entry OUT names (the atomic
 * rename replaces it, not what a symlink there points to) is the file IN
 * leads to. */
static int same_file(const char *in, const char *out)
{
    struct stat si, so;

    return stat(in, &si) == 0 && lstat(out, &so) == 0 && S_ISREG(so.st_mode) &&
           si.st_dev == so.st_dev && si.st_ino == so.st_ino;
}

static int run(const convert_args *a)
{
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    ckpt_convert_report r;
    char *config = NULL;
    int rc;

    if (a->config_path != NULL && (config = read_text(a->config_path)) == NULL)
        return CLI_USAGE;
    o.format = a->format;
    o.select = a->select;
    o.nselect = a->nselect;
    o.config_json = config;
    o.write.meta_keys = a->keys;
    o.write.meta_values = a->values;
    o.write.nmeta = a->nmeta;
    o.write.backup = a->backup;
    /* safe (the new file replaces the old atomically), but say so */
    if (!a->backup && same_file(a->in, a->out)) {
        fputs("replacing ", stderr);
        cli_put_text(stderr, a->in, strlen(a->in));
        fputs(" in place (use --backup to keep the old file)\n", stderr);
    }
    rc = ckpt_convert(a->in, a->out, &o, &r);
    free(config);
    if (rc != 0) {
        cli_error e;
        const char *file = ckpt_error_last()->file;

        cli_error_capture(&e, rc);
        /* the record names the file at fault (the output for I/O errors) */
        cli_report(file[0] ? file : a->in, &e);
        /* a bad option or a selection matching nothing is a usage error */
        return rc == CKPT_E_NOTFOUND ? CLI_USAGE : cli_exit_code(rc);
    }
    fputs("wrote ", stdout);
    cli_put_text(stdout, a->out, strlen(a->out));
    printf(" (%s, %" PRIu64 " %s, %" PRIu64 " bytes)\n", ckpt_format_name(r.format),
           r.tensors, unit(&r), r.bytes);
    return CLI_OK;
}

int cli_cmd_convert(const cli_command *cmd, int argc, char **argv)
{
    convert_args a = {0};
    size_t n = argc > 0 ? (size_t)argc : 1, i;
    int rc;

    a.select = malloc(n * sizeof *a.select);
    a.keys = malloc(n * sizeof *a.keys);
    a.values = malloc(n * sizeof *a.values);
    if (a.select == NULL || a.keys == NULL || a.values == NULL)
        rc = cli_usage_error(cmd, "out of memory");
    else if ((rc = parse(cmd, argc, argv, &a)) == -1)
        rc = cli_help(cmd);
    else if (rc == CLI_OK)
        rc = run(&a);
    for (i = 0; i < a.nmeta; i++)
        free((void *)a.keys[i]);
    free(a.select);
    free(a.keys);
    free(a.values);
    return rc;
}
