/* cmd_verify.c - `ckpt verify FILE...`: open and fully verify each file,
 * one line per file:
 *   OK FILE (FORMAT, N tensors, B bytes checked)
 *   OK FILE (FORMAT, N tensors, B bytes checked); structure only: this file carries no checksums
 *   CORRUPT FILE: MESSAGE (MEMBER, offset N)
 *   ERROR FILE: MESSAGE
 * Exit 0 when all are OK, 1 when one is corrupt, 2 when one could not be
 * read at all (which wins over 1). */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

/* Prints the line for a file that failed with e; returns its exit code. */
static int print_failure(const char *path, const cli_error *e)
{
    int rc = cli_exit_code(e->code);

    if (rc == CLI_USAGE)
        printf("%sERROR%s ", cli_color(CLI_RED), cli_color(CLI_RESET));
    else
        printf("%sCORRUPT%s ", cli_color(CLI_RED), cli_color(CLI_RESET));
    cli_put_files(stdout, path, e);
    cli_put_text(stdout, e->message, strlen(e->message));
    if (rc != CLI_USAGE)
        cli_put_location(stdout, e, 1);
    fputc('\n', stdout);
    return rc;
}

static int verify_one(const char *path)
{
    ckpt_file *f = NULL;
    ckpt_verify_report report;
    cli_error e;
    int rc = ckpt_open(&f, path, NULL);

    if (rc == 0)
        rc = ckpt_verify(f, &report);
    if (rc != 0) {
        cli_error_capture(&e, rc);
        ckpt_close(f);
        return print_failure(path, &e);
    }
    printf("%sOK%s ", cli_color(CLI_GREEN), cli_color(CLI_RESET));
    cli_put_text(stdout, path, strlen(path));
    printf(" (%s, %zu tensors, %" PRIu64 " bytes checked)",
           ckpt_format_name(ckpt_file_format(f)), ckpt_file_tensor_count(f),
           report.bytes);
    /* what was vouched for: without a checksum, only that structure and
     * sizes are consistent, not that the bytes are the ones written */
    if (cli_checksums(f) == CLI_CHECKSUMS_NONE)
        fputs("; structure only: this file carries no checksums", stdout);
    fputc('\n', stdout);
    ckpt_close(f);
    return CLI_OK;
}

/* 1 when argv[i] is a FILE, given whether options are still allowed;
 * "--" switches them off. */
static int is_file_arg(const char *a, int *options)
{
    if (*options && strcmp(a, "--") == 0) {
        *options = 0;
        return 0;
    }
    return !(*options && a[0] == '-' && a[1] != '\0');
}

int cli_cmd_verify(const cli_command *cmd, int argc, char **argv)
{
    int i, files = 0, worst = CLI_OK, options = 1;

    /* Check the whole command line before touching any file. */
    for (i = 1; i < argc; i++) {
        if (is_file_arg(argv[i], &options))
            files++;
        else if (options && cli_is_help(argv[i]))
            return cli_help(cmd);
        else if (options)
            return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (files == 0)
        return cli_usage_error(cmd, "missing FILE");

    options = 1;
    for (i = 1; i < argc; i++) {
        int rc;

        if (!is_file_arg(argv[i], &options))
            continue;
        rc = verify_one(argv[i]);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK))
            worst = rc;
    }
    return worst;
}
