/* cmd_scan.c - `ckpt scan [--json] [--allow NAME]... [--policy FILE]
 * FILE...`: would loading each FILE run code? Nothing in it is executed.
 *
 * Human form, per file, as doctor's safety section: the verdict line
 *   SAFE|UNSAFE|UNSCANNABLE|NOT-A-CHECKPOINT FILE (N dangerous, ...)
 * then one line per finding (severity, kind, global, member and byte
 * offset, message). A note after them says when torch.load's default
 * since torch 2.6 (weights_only=True) refuses the file, and at what; it is
 * no finding and changes neither verdict nor exit status.
 * JSON: one object per file {"file", "verdict", "findings", "globals",
 * "weights_only": that note or null};
 * an array of them for several files. A file that cannot be read at all
 * gives {"file", "verdict": null, "error": {"code", "message", "file",
 * "member", "offset"}} (as `ckpt verify --json` writes errors) and exit
 * status 2.
 * An --allow naming a known dangerous family is ignored by the scan, which
 * says so in an info finding; stderr says it once too.
 * Exit 0 when every file is safe, 1 when one is not, 2 for usage or I/O
 * errors (which win over 1). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* The caller's allowlist: --allow values (borrowed from argv) and names
 * read from --policy files (owned). */
typedef struct allowlist {
    const char **names;
    size_t n, cap;
    char **owned;
    size_t nowned, ownedcap;
} allowlist;

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    void *p;
    size_t ncap;

    if (need <= *cap) return 0;
    ncap = *cap ? *cap * 2 : 16;
    if (ncap < need || ncap > SIZE_MAX / elem) return -1;
    p = realloc(*arr, ncap * elem);
    if (!p) return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static int allow_add(allowlist *a, const char *name) {
    if (grow((void **)&a->names, &a->cap, a->n + 1, sizeof *a->names)) return -1;
    a->names[a->n++] = name;
    return 0;
}

static void allow_free(allowlist *a) {
    size_t i;

    for (i = 0; i < a->nowned; i++) free(a->owned[i]);
    free(a->owned);
    free(a->names);
}

/* "module.qualname": no spaces or control bytes, a '.' with text on both
 * sides. */
static int valid_qualname(const char *s) {
    size_t i, n = strlen(s);

    if (n < 3 || s[0] == '.' || s[n - 1] == '.' || !strchr(s, '.')) return 0;
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f) return 0;
    return 1;
}

static void bad_policy_line(const cli_command *cmd, const char *path, size_t lineno) {
    fprintf(stderr, "ckpt %s: ", cmd->name);
    cli_put_text(stderr, path, strlen(path));
    fprintf(stderr, ":%zu: expected one module.qualname per line\n", lineno);
}

/* Reads a policy file: one module.qualname per line, '#' starts a
 * comment, blank lines are skipped. Returns CLI_OK or CLI_USAGE (with the
 * message printed). */
static int read_policy(const cli_command *cmd, allowlist *a, const char *path) {
    FILE *fp = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = CLI_OK;

    if (!fp) {
        fprintf(stderr, "ckpt %s: cannot open policy file ", cmd->name);
        cli_put_text(stderr, path, strlen(path));
        fprintf(stderr, ": %s\n", strerror(errno));
        return CLI_USAGE;
    }
    while ((len = getline(&line, &cap, fp)) >= 0) {
        char *s = line, *end, *hash, *copy;

        lineno++;
        if (memchr(line, '\0', (size_t)len)) {
            bad_policy_line(cmd, path, lineno);
            rc = CLI_USAGE;
            break;
        }
        if ((hash = strchr(line, '#')) != NULL) *hash = '\0';
        while (*s && isspace((unsigned char)*s)) s++;
        end = s + strlen(s);
        while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
        if (*s == '\0') continue;
        if (!valid_qualname(s)) {
            bad_policy_line(cmd, path, lineno);
            rc = CLI_USAGE;
            break;
        }
        copy = strdup(s);
        if (!copy || grow((void **)&a->owned, &a->ownedcap, a->nowned + 1, sizeof *a->owned) ||
            allow_add(a, copy)) {
            free(copy);
            fprintf(stderr, "ckpt %s: out of memory\n", cmd->name);
            rc = CLI_USAGE;
            break;
        }
        a->owned[a->nowned++] = copy;
    }
    if (rc == CLI_OK && ferror(fp)) {
        fprintf(stderr, "ckpt %s: cannot read policy file ", cmd->name);
        cli_put_text(stderr, path, strlen(path));
        fputc('\n', stderr);
        rc = CLI_USAGE;
    }
    free(line);
    fclose(fp);
    return rc;
}

static struct {
    cli_list files, allow; /* allow: --allow and --policy, in order */
    int json, quiet, verbose;
} args;

/* ------------------------------------------------------------ output */

static const char *verdict_color(ckpt_verdict v) {
    return cli_color(v == CKPT_VERDICT_SAFE ? CLI_GREEN : CLI_RED);
}

static const char *severity_color(ckpt_severity s) {
    if (s == CKPT_SEVERITY_DANGEROUS) return cli_color(CLI_RED);
    return s == CKPT_SEVERITY_SUSPICIOUS ? cli_color(CLI_YELLOW) : "";
}

/* in_dir: a file of a directory; one that is no checkpoint (config.json)
 * is no finding there, so --quiet leaves it out as it does a safe file */
static void print_human(const char *path, const ckpt_scan_report *r, int in_dir) {
    size_t i, n = ckpt_scan_finding_count(r), count[3] = {0, 0, 0};
    ckpt_verdict v = ckpt_scan_verdict(r);
    const char *name;

    if (args.quiet && (v == CKPT_VERDICT_SAFE || (in_dir && v == CKPT_VERDICT_NOT_A_CHECKPOINT)))
        return;
    for (i = 0; i < n; i++) count[ckpt_scan_finding(r, i)->severity]++;
    name = ckpt_verdict_name(v);
    fputs(verdict_color(v), stdout);
    for (i = 0; name[i]; i++) fputc(toupper((unsigned char)name[i]), stdout);
    printf("%s ", cli_color(CLI_RESET));
    cli_put_text(stdout, path, strlen(path));
    printf(" (%zu dangerous, %zu suspicious, %zu info)\n", count[CKPT_SEVERITY_DANGEROUS],
           count[CKPT_SEVERITY_SUSPICIOUS], count[CKPT_SEVERITY_INFO]);
    for (i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);
        const char *color = severity_color(f->severity);

        if (args.quiet && f->severity == CKPT_SEVERITY_INFO) continue;
        printf("  %s%-10s%s %s", color, ckpt_severity_name(f->severity),
               color[0] ? cli_color(CLI_RESET) : "", f->kind);
        if (f->global) {
            fputc(' ', stdout);
            cli_put_text(stdout, f->global, strlen(f->global));
        }
        fputs(" (", stdout);
        if (f->member[0]) {
            fputs("member ", stdout);
            cli_put_text(stdout, f->member, strlen(f->member));
            fputs(", ", stdout);
        }
        if (f->offset == UINT64_MAX)
            fputs("offset unknown", stdout);
        else
            printf("offset %" PRIu64, f->offset);
        fputs("): ", stdout);
        cli_put_text(stdout, f->message, strlen(f->message));
        fputc('\n', stdout);
    }
    for (i = 0; args.verbose && i < ckpt_scan_global_count(r); i++) {
        fputs("  global     ", stdout);
        cli_put_text(stdout, ckpt_scan_global(r, i), strlen(ckpt_scan_global(r, i)));
        fputc('\n', stdout);
    }
    ckpt_weights_only wo;
    if (!args.quiet && ckpt_scan_weights_only(r, &wo)) {
        fputs("  note       weights-only: ", stdout);
        cli_put_text(stdout, wo.message, strlen(wo.message));
        fputc('\n', stdout);
    }
}

static void print_json(cli_json_writer *j, const char *path, const ckpt_scan_report *r) {
    size_t i, n = ckpt_scan_finding_count(r);

    cli_json_object_begin(j);
    cli_json_key(j, "file");
    cli_json_string(j, path);
    cli_json_key(j, "verdict");
    cli_json_string(j, ckpt_verdict_name(ckpt_scan_verdict(r)));
    cli_json_key(j, "findings");
    cli_json_array_begin(j);
    for (i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        cli_json_object_begin(j);
        cli_json_key(j, "severity");
        cli_json_string(j, ckpt_severity_name(f->severity));
        cli_json_key(j, "kind");
        cli_json_string(j, f->kind);
        if (f->global) {
            cli_json_key(j, "global");
            cli_json_string(j, f->global);
        }
        if (f->member[0]) {
            cli_json_key(j, "member");
            cli_json_string(j, f->member);
        }
        cli_json_key(j, "offset");
        if (f->offset == UINT64_MAX)
            cli_json_null(j);
        else
            cli_json_uint(j, f->offset);
        cli_json_key(j, "message");
        cli_json_string(j, f->message);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
    cli_json_key(j, "globals");
    cli_json_array_begin(j);
    for (i = 0; i < ckpt_scan_global_count(r); i++) cli_json_string(j, ckpt_scan_global(r, i));
    cli_json_array_end(j);
    ckpt_weights_only wo;
    cli_json_key(j, "weights_only");
    if (ckpt_scan_weights_only(r, &wo))
        cli_json_string(j, wo.message);
    else
        cli_json_null(j);
    cli_json_object_end(j);
}

/* An --allow of a dangerous family is ignored by every scan, which says
 * so in a finding; stderr says it once per run, so that it is not missed
 * behind a SAFE or UNSAFE line. */
static void warn_refused_allows(const ckpt_scan_report *r, int *warned) {
    size_t i, n = ckpt_scan_finding_count(r);

    for (i = 0; i < n && !*warned; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (strcmp(f->kind, "allow-ignored") != 0) continue;
        fputs("ckpt scan: ", stderr);
        cli_put_text(stderr, f->message, strlen(f->message));
        fputc('\n', stderr);
    }
    *warned = 1;
}

/* Prints the error of a scan that failed; returns its exit code. */
static int print_error(const char *path, const cli_error *e, cli_json_writer *j) {
    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "file");
        cli_json_string(j, path);
        cli_json_key(j, "verdict");
        cli_json_null(j);
        cli_json_key(j, "error");
        cli_json_error(j, e, path);
        cli_json_object_end(j);
    }
    cli_report(path, e);
    return CLI_USAGE;
}

/* Prints the report of one file; returns its exit code. In a directory
 * (in_dir), a file that is no checkpoint at all (config.json,
 * trainer_state.json) is listed but is not a finding: no loader of the
 * folder unpickles it. */
static int print_result(const char *path, const ckpt_scan_report *r, cli_json_writer *j,
                        int *warned, int in_dir) {
    warn_refused_allows(r, warned);
    if (j)
        print_json(j, path, r);
    else
        print_human(path, r, in_dir);
    return ckpt_scan_verdict(r) == CKPT_VERDICT_SAFE ||
                   (in_dir && ckpt_scan_verdict(r) == CKPT_VERDICT_NOT_A_CHECKPOINT)
               ? CLI_OK
               : CLI_FINDINGS;
}

/* Scans one file and prints its result; returns its exit code. */
static int scan_one(const char *path, const ckpt_scan_options *opts, cli_json_writer *j,
                    int *warned) {
    ckpt_scan_report *r = NULL;
    int rc = ckpt_scan(&r, path, opts);
    cli_error e;

    if (rc != 0) {
        cli_error_capture(&e, rc);
        return print_error(path, &e, j);
    }
    rc = print_result(path, r, j, warned, 0);
    ckpt_scan_report_free(r);
    return rc;
}

static const cli_opt opts[] = {{CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0,
                                "one JSON object per file (an array for several)"},
                               {CLI_OPT_VALUES, "allow", 0, &args.allow, "NAME", 0,
                                "also allow the global NAME (exact module.qualname; "
                                "not for known dangerous families: such an --allow "
                                "is ignored, and the output says so); repeatable"},
                               {CLI_OPT_VALUES, "policy", 0, &args.allow, "FILE", 0,
                                "allow every module.qualname listed in FILE, one per "
                                "line, '#' starts a comment"},
                               {CLI_OPT_BOOL, "quiet", 'q', &args.quiet, NULL, 0,
                                "print nothing for safe files, and no info findings"},
                               {CLI_OPT_BOOL, "verbose", 'v', &args.verbose, NULL, 0,
                                "also list every global each file imports"},
                               {CLI_OPT_ARGS, "FILE", 0, &args.files, NULL, CLI_OPT_REQUIRED, NULL},
                               {0}};

/* The allowlist of --allow and --policy, in the order given. Returns
 * CLI_OK, or CLI_USAGE after printing why. */
static int read_allowlist(const cli_command *cmd, allowlist *list) {
    size_t i;
    int rc;

    for (i = 0; i < args.allow.n; i++) {
        const char *v = args.allow.items[i];

        if (strcmp(args.allow.opts[i]->name, "policy") == 0) {
            if ((rc = read_policy(cmd, list, v)) != CLI_OK) return rc;
        } else if (!valid_qualname(v)) {
            return cli_usage_error(cmd, "--allow takes module.qualname, not '%s'", v);
        } else if (allow_add(list, v)) {
            return cli_usage_error(cmd, "out of memory");
        }
    }
    return CLI_OK;
}

/* A directory of files, each scanned; a DCP directory is one checkpoint. */
static int is_dir(const char *path) {
    struct stat st;

    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !ckpt_is_dcp_dir(path);
}

/* A file of a directory: its report (ckpt_scan_dir_report), or why it
 * has none. */
typedef struct dir_file {
    const char *path;
    const char *name; /* its name in the directory, inside path */
    const ckpt_scan_report *r;
    const ckpt_error *err; /* the walk left it unread, or its scan failed */
    int unread;            /* the walk left it unread */
    int listed;            /* on the one line of a model folder's other files */
} dir_file;

/* Files a model folder holds beside its weights (transformers'
 * save_pretrained and its tokenizers and processors, PEFT, the Trainer,
 * the Hub's model card, a diffusers pipeline's index and scheduler
 * config) and a ckpt store's LATEST (ckpt_is_store_dir: a directory
 * holding it is a store), none of them loaded with pickle. */
static int model_folder_file(const char *name) {
    static const char *const known[] = {"config.json",
                                        "generation_config.json",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json",
                                        "vocab.json",
                                        "vocab.txt",
                                        "merges.txt",
                                        "tokenizer.model",
                                        "spiece.model",
                                        "sentencepiece.bpe.model",
                                        "preprocessor_config.json",
                                        "processor_config.json",
                                        "chat_template.jinja",
                                        "chat_template.json",
                                        "adapter_config.json",
                                        "trainer_state.json",
                                        "all_results.json",
                                        "train_results.json",
                                        "eval_results.json",
                                        "params.json",
                                        "model_index.json",
                                        "scheduler_config.json",
                                        "README.md",
                                        "LICENSE",
                                        "LICENSE.txt",
                                        "NOTICE",
                                        "USE_POLICY.md",
                                        "LATEST"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(name, known[i]) == 0) return 1;
    return 0;
}

/* A file scan_dir lists on one line instead of with a report of its own:
 * one of those names, and no checkpoint (nothing in it but info). A
 * config.json that holds a pickle, and any file of another name, is
 * reported as ever. */
static int listed_only(const dir_file *f) {
    size_t i, n;

    if (!f->r || ckpt_scan_verdict(f->r) != CKPT_VERDICT_NOT_A_CHECKPOINT ||
        !model_folder_file(f->name))
        return 0;
    n = ckpt_scan_finding_count(f->r);
    for (i = 0; i < n; i++)
        if (ckpt_scan_finding(f->r, i)->severity != CKPT_SEVERITY_INFO) return 0;
    return 1;
}

/* An entry of a directory left unread (why): CLI_USAGE, said, never a
 * silent skip. */
static int not_scanned(const char *path, const char *why) {
    fputs("ckpt: ", stderr);
    cli_put_text(stderr, path, strlen(path));
    fputs(": not scanned: ", stderr);
    cli_put_text(stderr, why, strlen(why));
    fputc('\n', stderr);
    return CLI_USAGE;
}

/* The nf files of one directory, each reported, as loading any of them
 * could run code; a shard of a sharded index there has no report of its
 * own (ckpt_scan_dir_scan: its findings are the index's, naming the shard
 * as their member). */
static int print_files(dir_file *fs, size_t nf, cli_json_writer *j, int *warned) {
    size_t k, listed = 0;
    int worst = CLI_OK, rc;

    for (k = 0; k < nf; k++) {
        if (fs[k].unread) {
            rc = not_scanned(fs[k].path, fs[k].err->message);
        } else if (fs[k].err) {
            cli_error e;
            cli_error_copy(&e, fs[k].err);
            rc = print_error(fs[k].path, &e, j);
        } else if (!fs[k].r) {
            continue; /* reported through its index */
        } else if (!j && (fs[k].listed = listed_only(&fs[k])) != 0) {
            listed++;
            continue;
        } else {
            rc = print_result(fs[k].path, fs[k].r, j, warned, 1);
        }
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    if (listed && !args.quiet) {
        /* one line for them all: they are no findings (config.json said
         * NOT-A-CHECKPOINT and two info lines in every model folder) */
        printf("also %zu file%s a model folder holds, not checkpoints:", listed,
               listed == 1 ? "" : "s");
        for (k = 0; k < nf; k++)
            if (fs[k].listed) {
                fputc(' ', stdout);
                cli_put_text(stdout, fs[k].name, strlen(fs[k].name));
            }
        fputc('\n', stdout);
    }
    return worst;
}

/* A directory (a model folder, a Trainer checkpoint): the files the
 * library's walk lists (ckpt_scan_dir_list: regular files and DCP
 * directories, a directory's own before its subdirectories', in name
 * order) scanned as the library scans them (ckpt_scan_dir_scan), printed
 * one directory at a time; an entry it could not examine is said (exit
 * 2). */
static int scan_dir(const char *dir, const ckpt_scan_options *so, cli_json_writer *j, int *warned) {
    ckpt_scan_dir *w = NULL;
    int rc = ckpt_scan_dir_list(&w, dir, NULL), worst = CLI_OK;
    size_t n = ckpt_scan_dir_count(w), i = 0;
    dir_file *fs = NULL;

    if (rc == 0) rc = ckpt_scan_dir_scan(w, so);
    if (rc) {
        const ckpt_error *e = ckpt_error_last();
        ckpt_scan_dir_free(w);
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, dir, strlen(dir));
        fprintf(stderr, ": %s\n", e && e->message ? e->message : ckpt_error_name(rc));
        return CLI_USAGE;
    }
    if (n && (fs = calloc(n, sizeof *fs)) == NULL) {
        ckpt_scan_dir_free(w);
        return not_scanned(dir, "out of memory");
    }
    while (i < n) {
        const ckpt_dir_entry *first = ckpt_scan_dir_entry(w, i);
        size_t nf = 0;

        /* the run of entries in one directory */
        for (; i < n; i++, nf++) {
            const ckpt_dir_entry *e = ckpt_scan_dir_entry(w, i);

            if (e->base != first->base || strncmp(e->name, first->name, e->base) != 0) break;
            fs[nf].path = e->path;
            fs[nf].name = e->name + e->base;
            fs[nf].r = ckpt_scan_dir_report(w, i, &fs[nf].err);
            fs[nf].unread = e->error.code != 0;
            fs[nf].listed = 0;
        }
        rc = print_files(fs, nf, j, warned);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    free(fs);
    ckpt_scan_dir_free(w);
    if (n == 0) {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, dir, strlen(dir));
        fputs(": no file in the directory\n", stderr);
        return CLI_USAGE;
    }
    return worst;
}

static int run(const cli_command *cmd, int argc, char **argv) {
    allowlist list = {0};
    ckpt_scan_options so = CKPT_SCAN_OPTIONS_INIT;
    cli_json_writer jw;
    size_t i;
    int worst = CLI_OK, warned = 0, several = 0;
    int rc = cli_opt_parse(cmd, argc, argv);

    if (rc == CLI_CONTINUE) rc = read_allowlist(cmd, &list);
    if (rc != CLI_OK && rc != CLI_CONTINUE) {
        allow_free(&list);
        return rc;
    }
    if (args.quiet && args.verbose) {
        allow_free(&list);
        return cli_usage_error(cmd, "--quiet and --verbose exclude each other");
    }
    so.allow = list.names;
    so.nallow = list.n;
    for (i = 0; i < args.files.n && !several; i++) /* a directory: several files */
        several = args.files.n > 1 || is_dir(args.files.items[i]);
    if (args.json) {
        cli_json_init(&jw, stdout);
        if (several) cli_json_array_begin(&jw);
    }
    for (i = 0; i < args.files.n; i++) {
        const char *a = args.files.items[i];

        cli_progress(a, i, args.files.n);
        rc = is_dir(a) ? scan_dir(a, &so, args.json ? &jw : NULL, &warned)
                       : scan_one(a, &so, args.json ? &jw : NULL, &warned);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    cli_progress(NULL, args.files.n, args.files.n);
    if (args.json) {
        if (several) cli_json_array_end(&jw);
        fputc('\n', stdout);
    }
    allow_free(&list);
    return worst;
}

const cli_command cli_cmd_scan = {
    "scan",
    "would loading it run code? decided without running it",
    opts,
    "Decides, without executing anything, whether loading each FILE with\n"
    "torch.load or pickle could run code. Every pickle in it is examined:\n"
    "zip members that look like pickles, legacy stacked pickles, streams\n"
    "after STOP, pickles that an unpickling call (pickle.loads...) receives\n"
    "as string literals. Verdicts:\n"
    "  safe              only allowlisted data and tensor builders\n"
    "  unsafe            a global off the allowlist is imported, called or\n"
    "                    built (dangerous: a known dangerous family - code\n"
    "                    execution, process control, network or file access)\n"
    "  unscannable       some content could not be examined (encrypted,\n"
    "                    7z/tar/gzip, zip bomb, a pickle that does not parse)\n"
    "  review            only allowlisted builders and data-only classes\n"
    "                    (pathlib paths, argparse.Namespace): --allow them\n"
    "  not-a-checkpoint  no pickle, zip or safetensors content\n"
    "A sharded index (*.index.json) is scanned through every shard it lists;\n"
    "a directory (a model folder, a Trainer checkpoint), file by file and\n"
    "through its subdirectories (unet/, checkpoint-N/; hidden entries and\n"
    "links to directories are not followed)\n"
    "(there, files that are no checkpoint, e.g. config.json, are no finding,\n"
    "those a model folder holds beside its weights - config, tokenizer,\n"
    "generation config, README.md - and a ckpt store's LATEST are named on\n"
    "one line, and the shards of an index are reported once, through the\n"
    "index).\n"
    "Tensor bytes are not checked (that is `ckpt verify`): a file whose\n"
    "pickles all parse and are clean is safe even if its storages are not.\n"
    "A note after the findings (`note weights-only: ...`; --json:\n"
    "weights_only, else null) says when torch.load's default since torch 2.6\n"
    "(weights_only=True) refuses the file, naming the first global or opcode\n"
    "it refuses and its byte; it is no finding: verdict and exit status stay.\n",
    "Exit status: 0 every file safe, 1 some file not safe, 2 usage or I/O\n"
    "error.\n",
    run,
    NULL};
