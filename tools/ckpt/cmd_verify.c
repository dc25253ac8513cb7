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
    cli_put_message(stdout, e);
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
        rc = ckpt_verify(&report, f);
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
    if (ckpt_file_checksums(f) == CKPT_CHECKSUMS_NONE)
        fputs("; structure only: this file carries no checksums", stdout);
    fputc('\n', stdout);
    ckpt_close(f);
    return CLI_OK;
}

static struct {
    cli_list files;
} args;

static const cli_opt opts[] = {
    { CLI_OPT_ARGS, "FILE", 0, &args.files, NULL, CLI_OPT_REQUIRED, NULL },
    { 0 }
};

static int run(const cli_command *cmd, int argc, char **argv)
{
    size_t i;
    /* the whole command line is checked before any file is touched */
    int worst = cli_opt_parse(cmd, argc, argv);

    if (worst != CLI_CONTINUE)
        return worst;
    worst = CLI_OK;
    for (i = 0; i < args.files.n; i++) {
        int rc = verify_one(args.files.items[i]);

        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK))
            worst = rc;
    }
    return worst;
}

const cli_command cli_cmd_verify = {
    "verify", "read every byte and check checksums and structure", opts,
    "Opens each FILE and reads every tensor byte, checking zip CRC-32s,\n"
    "storage sizes and structure. Prints one line per file:\n"
    "  OK FILE (FORMAT, N tensors, B bytes checked)\n"
    "  CORRUPT FILE: MESSAGE (MEMBER, offset N)\n"
    "  ERROR FILE: MESSAGE          (the file could not be read)\n",
    "Exit status: 0 all OK, 1 some file corrupt, 2 some file unreadable.\n",
    run, NULL
};
