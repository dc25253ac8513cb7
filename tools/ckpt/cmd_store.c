/* cmd_store.c - `ckpt store SUBCOMMAND DIR ...`: numbered generations of a
 * checkpoint in one directory with a LATEST pointer (ckpt_store_*).
 *
 *   commit DIR --name NAME --step N [--keep N] [--replace] SRC   the new path
 *   latest DIR                                       prints the path
 *   list DIR [--json]                                table or JSON, with
 *                                                    doctor's resume verdict
 *   prune DIR [--keep N]
 *   gc DIR [--older-than MINUTES]
 * each with -q (nothing on success) or -v (the generations DIR holds
 * afterwards; list: their paths; gc: also the names it removed). commit
 * says on stderr which generations its pruning removed and when LATEST
 * stays on a newer step.
 *
 * Exit 0 ok; 1 findings or refusal (the step is already committed, the
 * written generation or the source is corrupt, no generation verifies,
 * list or prune found a corrupt generation, list a bad LATEST); 2 usage
 * (a sharded SRC too: commit one file or a DCP directory) or I/O error. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Longest path the commands print. */
#define PATH_CAP 8192

/* Strict decimal: digits only, no sign, within max. */
static int parse_uint(const char *s, uint64_t max, uint64_t *out) {
    char *end;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v > max) return -1;
    *out = v;
    return 0;
}

/* The command line of every subcommand; each table below takes its part. */
static struct {
    const char *dir, *src, *name, *step, *keep, *older;
    int json, replace, quiet, verbose;
} args;

#define DIR_ARG                                                                                    \
    { CLI_OPT_ARG, "DIR", 0, &args.dir, NULL, CLI_OPT_REQUIRED, NULL }
#define QUIET_OPT                                                                                  \
    {                                                                                              \
        CLI_OPT_BOOL, "quiet", 'q', &args.quiet, NULL, 0,                                          \
            "print nothing on success (list: only what is corrupt)"                                \
    }
#define VERBOSE_OPT                                                                                \
    {                                                                                              \
        CLI_OPT_BOOL, "verbose", 'v', &args.verbose, NULL, 0,                                      \
            "also list the generations DIR holds afterwards (list: their paths; "                  \
            "gc: and the names removed)"                                                           \
    }
#define KEEP_OPT                                                                                   \
    {                                                                                              \
        CLI_OPT_VALUE, "keep", 0, &args.keep, "N", 0,                                              \
            "verified generations kept by commit and prune (3)"                                    \
    }

static const cli_opt commit_opts[] = {
    DIR_ARG,
    {CLI_OPT_VALUE, "name", 0, &args.name, "NAME", CLI_OPT_REQUIRED,
     "commit: the label of the generation's file name"},
    {CLI_OPT_VALUE, "step", 0, &args.step, "N", CLI_OPT_REQUIRED,
     "commit: its step, a non-negative integer"},
    KEEP_OPT,
    {CLI_OPT_BOOL, "replace", 0, &args.replace, NULL, 0,
     "commit: replace a step already committed (else refused)"},
    QUIET_OPT,
    VERBOSE_OPT,
    {CLI_OPT_ARG, "SRC", 0, &args.src, NULL, CLI_OPT_REQUIRED, NULL},
    {0}};
static const cli_opt latest_opts[] = {DIR_ARG, QUIET_OPT, VERBOSE_OPT, {0}};
static const cli_opt list_opts[] = {
    DIR_ARG,
    {CLI_OPT_BOOL, "json", 0, &args.json, NULL, 0, "list: one JSON object"},
    QUIET_OPT,
    VERBOSE_OPT,
    {0}};
static const cli_opt prune_opts[] = {DIR_ARG, KEEP_OPT, QUIET_OPT, VERBOSE_OPT, {0}};
static const cli_opt gc_opts[] = {DIR_ARG,
                                  {CLI_OPT_VALUE, "older-than", 0, &args.older, "MINUTES", 0,
                                   "gc: stale age of an unlocked temporary file (60)"},
                                  QUIET_OPT,
                                  VERBOSE_OPT,
                                  {0}};

/* Strict decimal into *out: digits only, no sign, within max. CLI_CONTINUE,
 * or a usage error naming the option. */
static int number(const cli_command *cmd, const char *opt, const char *s, uint64_t max,
                  uint64_t *out) {
    if (s == NULL || parse_uint(s, max, out) == 0) return CLI_CONTINUE;
    return cli_usage_error(cmd, "--%s takes a non-negative integer%s, not '%s'", opt,
                           max == UINT64_MAX ? "" : " below 2^32", s);
}

/* Parses a subcommand's command line (argv[0] is its name) into *o and
 * *step. Returns CLI_CONTINUE, or the exit code to return now. */
static int parse_args(const cli_command *cmd, int argc, char **argv, ckpt_store_options *o,
                      uint64_t *step) {
    uint64_t keep = 0, older = 0;
    int rc = cli_opt_parse(cmd, argc, argv);

    *o = (ckpt_store_options)CKPT_STORE_OPTIONS_INIT;
    o->replace = args.replace;
    if (rc == CLI_CONTINUE && args.quiet && args.verbose)
        return cli_usage_error(cmd, "--quiet and --verbose exclude each other");
    if (rc == CLI_CONTINUE && args.quiet && args.json)
        return cli_usage_error(cmd, "--quiet and --json exclude each other");
    if (rc == CLI_CONTINUE) rc = number(cmd, "step", args.step, UINT64_MAX, step);
    if (rc == CLI_CONTINUE &&
        (rc = number(cmd, "keep", args.keep, UINT32_MAX, &keep)) == CLI_CONTINUE && args.keep)
        o->keep = (uint32_t)keep;
    if (rc == CLI_CONTINUE &&
        (rc = number(cmd, "older-than", args.older, UINT32_MAX, &older)) == CLI_CONTINUE &&
        args.older)
        o->stale_minutes = (uint32_t)older;
    return rc;
}

/* Reports a library failure under the file it concerns (the source, the
 * generation, LATEST or DIR), `dir` when the record names none. */
static int fail(const char *dir, int code) {
    cli_error e;
    char file[1024];
    const char *last = ckpt_error_last()->file;

    snprintf(file, sizeof file, "%s", last && last[0] ? last : dir);
    cli_error_capture(&e, code);
    /* "SRC is corrupt: ...": the message names the file already */
    if (strncmp(e.message, file, strlen(file)) == 0 && e.message[strlen(file)] == ' ') {
        fputs("ckpt: ", stderr);
        cli_put_text(stderr, e.message, strlen(e.message));
        cli_put_location(stderr, &e, 0);
        fputc('\n', stderr);
        return cli_exit_code(code);
    }
    return cli_report(file, &e);
}

static void list_human(const ckpt_store_listing *l, const ckpt_store_options *o);

/* -v: the generations DIR holds now, as list shows them. */
static int show_listing(const ckpt_store_options *o) {
    ckpt_store_listing *l = NULL;
    int rc;

    if (!args.verbose) return CLI_OK;
    if ((rc = ckpt_store_list(&l, args.dir, o)) != 0) return fail(args.dir, rc);
    list_human(l, o);
    ckpt_store_listing_free(l);
    return CLI_OK;
}

/* ------------------------------------------------------------ what went */

/* What a call told through on_event (ckpt_store_event): the names it
 * removed, in its order, what LATEST names after a commit, and whether a
 * commit was refused for a step already committed. */
typedef struct events {
    char **removed;
    size_t n, cap;
    unsigned char *temp; /* removed[i] was a temporary file or directory */
    char *latest;
    int step_taken;
} events;

static void on_event(void *ctx, ckpt_store_event what, const char *file) {
    events *ev = ctx;
    char *copy, **grown;

    if (what == CKPT_STORE_EVENT_STEP_TAKEN) {
        ev->step_taken = 1;
        return;
    }
    if ((copy = strdup(file)) == NULL) return; /* out of memory: one name less said */
    if (what == CKPT_STORE_EVENT_LATEST) {
        free(ev->latest);
        ev->latest = copy;
        return;
    }
    if (ev->n == ev->cap) {
        size_t cap = ev->cap ? ev->cap * 2 : 8;
        unsigned char *temp;
        if ((grown = realloc(ev->removed, cap * sizeof *grown)) != NULL) ev->removed = grown;
        if ((temp = realloc(ev->temp, cap)) != NULL) ev->temp = temp;
        if (grown == NULL || temp == NULL) {
            free(copy);
            return;
        }
        ev->cap = cap;
    }
    ev->temp[ev->n] = what == CKPT_STORE_EVENT_TEMP_REMOVED;
    ev->removed[ev->n++] = copy;
}

static void events_listen(events *ev, ckpt_store_options *o) {
    memset(ev, 0, sizeof *ev);
    o->on_event = on_event;
    o->event_ctx = ev;
}

/* `prefix NAME\n` on out for each name removed, a temporary one's with
 * temp_prefix. */
static void events_removed(FILE *out, const events *ev, const char *prefix,
                           const char *temp_prefix) {
    for (size_t i = 0; i < ev->n; i++) {
        fputs(ev->temp[i] ? temp_prefix : prefix, out);
        cli_put_text(out, ev->removed[i], strlen(ev->removed[i]));
        fputc('\n', out);
    }
}

static void events_free(events *ev) {
    while (ev->n) free(ev->removed[--ev->n]);
    free(ev->removed);
    free(ev->temp);
    free(ev->latest);
}

/* ------------------------------------------------------------ commit */

/* After a commit of `path`: a note on stderr when LATEST names another
 * generation (one with a higher step). */
static void note_latest(const char *latest, const char *path) {
    const char *base = strrchr(path, '/');

    base = base ? base + 1 : path;
    if (latest == NULL || strcmp(latest, base) == 0) return;
    fputs("note: LATEST stays at ", stderr);
    cli_put_text(stderr, latest, strlen(latest));
    fputs(", a higher step; ", stderr);
    cli_put_text(stderr, base, strlen(base));
    fputs(" is committed beside it\n", stderr);
}

static int store_commit(const cli_command *cmd, int argc, char **argv) {
    ckpt_store_options o;
    cli_task task = {NULL, 1};
    uint64_t step = 0;
    char path[PATH_CAP];
    int rc = parse_args(cmd, argc, argv, &o, &step), taken;
    events ev;

    if (rc != CLI_CONTINUE) return rc;
    task.what = args.src;
    if (!args.quiet) {
        o.progress = cli_progress_fn;
        o.progress_ctx = &task;
    }
    events_listen(&ev, &o);
    path[0] = '\0';
    rc = ckpt_store_commit(path, sizeof path, args.dir, args.name, step, args.src, &o);
    cli_progress(NULL, 0, 0);
    o.on_event = NULL; /* -v lists afterwards: nothing more to hear */
    if (path[0] && !args.quiet) {
        cli_put_text(stdout, path, strlen(path));
        fputc('\n', stdout);
        fflush(stdout);
        note_latest(ev.latest, path);
        events_removed(stderr, &ev, "pruned ", "removed a killed writer's ");
    }
    taken = ev.step_taken;
    events_free(&ev);
    if (rc == CKPT_E_INVALID_ARG && taken) {
        fail(args.dir, rc);
        return CLI_FINDINGS; /* a refusal: the step is there, verified */
    }
    return rc ? fail(args.dir, rc) : show_listing(&o);
}

/* ------------------------------------------------------------ latest */

static int store_latest(const cli_command *cmd, int argc, char **argv) {
    ckpt_store_options o;
    uint64_t step;
    char path[PATH_CAP];
    int rc = parse_args(cmd, argc, argv, &o, &step);

    if (rc != CLI_CONTINUE) return rc;
    rc = ckpt_store_latest(path, sizeof path, args.dir, &o);
    if (rc == CKPT_E_NOTFOUND) {
        fail(args.dir, rc);
        return CLI_FINDINGS;
    }
    if (rc) return fail(args.dir, rc);
    if (args.quiet) return CLI_OK;
    cli_put_text(stdout, path, strlen(path));
    fputc('\n', stdout);
    return show_listing(&o);
}

/* ------------------------------------------------------------ list */

/* Whether a verified generation resumes training: doctor's verdict
 * (ckpt_training_resume, "full-resume", "partial", "warm-start-only",
 * "weights-only"), or NULL for a corrupt generation (doctor withholds it)
 * or one that no longer opens. */
static const char *resume_of(const ckpt_store_generation *g, const ckpt_store_options *o) {
    ckpt_file *f = NULL;
    ckpt_training *t = NULL;
    const char *verdict = NULL;

    if (!g->ok || ckpt_open(&f, g->path, &o->open) != 0) return NULL;
    if (ckpt_training_analyze(&t, f) == 0) verdict = ckpt_resume_name(ckpt_training_resume(t));
    ckpt_training_free(t);
    ckpt_close(f);
    return verdict;
}

static void list_json(const ckpt_store_listing *l, const char *dir, const ckpt_store_options *o) {
    cli_json_writer j;
    const char *pfile;
    ckpt_store_pointer p = ckpt_store_list_pointer(l, &pfile);
    size_t i, n = ckpt_store_list_count(l);

    cli_json_init(&j, stdout);
    cli_json_object_begin(&j);
    cli_json_key(&j, "dir");
    cli_json_string(&j, dir);
    cli_json_key(&j, "latest");
    cli_json_object_begin(&j);
    cli_json_key(&j, "status");
    cli_json_string(&j, ckpt_store_pointer_name(p));
    cli_json_key(&j, "file");
    if (pfile[0])
        cli_json_string(&j, pfile);
    else
        cli_json_null(&j);
    cli_json_object_end(&j);
    cli_json_key(&j, "generations");
    cli_json_array_begin(&j);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        const char *verdict;

        cli_json_object_begin(&j);
        cli_json_key(&j, "name");
        cli_json_string(&j, g->name);
        cli_json_key(&j, "step");
        cli_json_uint(&j, g->step);
        cli_json_key(&j, "file");
        cli_json_string(&j, g->file);
        cli_json_key(&j, "path");
        cli_json_string(&j, g->path);
        cli_json_key(&j, "bytes");
        cli_json_uint(&j, g->bytes);
        cli_json_key(&j, "status");
        cli_json_string(&j, g->ok ? "ok" : "corrupt");
        cli_json_key(&j, "resume");
        if ((verdict = resume_of(g, o)) != NULL)
            cli_json_string(&j, verdict);
        else
            cli_json_null(&j);
        if (!g->ok) {
            cli_json_key(&j, "reason");
            cli_json_string(&j, g->reason);
            cli_json_key(&j, "member");
            cli_json_string(&j, g->member);
            cli_json_key(&j, "offset");
            if (g->offset == UINT64_MAX)
                cli_json_null(&j);
            else
                cli_json_uint(&j, g->offset);
        }
        cli_json_key(&j, "latest");
        cli_json_bool(&j, g->latest);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    fputc('\n', stdout);
}

static void list_human(const ckpt_store_listing *l, const ckpt_store_options *o) {
    const char *pfile;
    ckpt_store_pointer p = ckpt_store_list_pointer(l, &pfile);
    size_t i, n = ckpt_store_list_count(l);
    char human[32], digits[24];
    int width = 1;

    /* steps ascend: the last one is the widest */
    if (n)
        width =
            snprintf(digits, sizeof digits, "%" PRIu64, ckpt_store_list_generation(l, n - 1)->step);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        const char *file = args.verbose ? g->path : g->file;

        const char *verdict;

        if (args.quiet && g->ok) continue;
        verdict = resume_of(g, o);
        printf("%*" PRIu64 "  %10s  %s%-7s%s  %-15s  ", width, g->step,
               cli_human_bytes(human, g->bytes), cli_color(g->ok ? CLI_GREEN : CLI_RED),
               g->ok ? "ok" : "corrupt", cli_color(CLI_RESET), verdict ? verdict : "-");
        cli_put_text(stdout, file, strlen(file));
        if (g->latest) fputs("  <- LATEST", stdout);
        if (!g->ok) {
            cli_error e = {0};

            fputs(": ", stdout);
            cli_put_text(stdout, g->reason, strlen(g->reason));
            snprintf(e.member, sizeof e.member, "%s", g->member);
            e.offset = g->offset;
            cli_put_location(stdout, &e, 1);
        }
        fputc('\n', stdout);
    }
    if (args.quiet && (p == CKPT_STORE_POINTER_OK || p == CKPT_STORE_POINTER_ABSENT)) return;
    printf("%zu generation%s; LATEST: %s", n, cli_plural(n), ckpt_store_pointer_name(p));
    if (pfile[0]) {
        fputs(" (", stdout);
        cli_put_text(stdout, pfile, strlen(pfile));
        fputc(')', stdout);
    }
    fputc('\n', stdout);
}

static int store_list(const cli_command *cmd, int argc, char **argv) {
    ckpt_store_options o;
    uint64_t step;
    ckpt_store_listing *l = NULL;
    int rc = parse_args(cmd, argc, argv, &o, &step);
    size_t i, n;
    ckpt_store_pointer p;

    if (rc != CLI_CONTINUE) return rc;
    rc = ckpt_store_list(&l, args.dir, &o);
    if (rc) return fail(args.dir, rc);
    if (args.json) {
        list_json(l, args.dir, &o);
    } else {
        const char *caveat = ckpt_store_lock_caveat(args.dir);
        list_human(l, &o);
        if (caveat && !args.quiet) printf("note: %s\n", caveat);
    }
    p = ckpt_store_list_pointer(l, NULL);
    rc = p == CKPT_STORE_POINTER_OK || p == CKPT_STORE_POINTER_ABSENT ? CLI_OK : CLI_FINDINGS;
    n = ckpt_store_list_count(l);
    for (i = 0; i < n; i++)
        if (!ckpt_store_list_generation(l, i)->ok) rc = CLI_FINDINGS;
    ckpt_store_listing_free(l);
    return rc;
}

/* ------------------------------------------------------------ prune, gc */

/* Prunes, then names the corrupt generations left in place (exit 1 when
 * there are any, as for list). */
static int store_prune(const cli_command *cmd, int argc, char **argv) {
    ckpt_store_options o;
    uint64_t step;
    ckpt_store_listing *l = NULL;
    size_t removed = 0, i, n;
    int rc = parse_args(cmd, argc, argv, &o, &step);

    if (rc != CLI_CONTINUE) return rc;
    rc = ckpt_store_prune_list(&l, &removed, args.dir, &o);
    if (!args.quiet) printf("removed %zu generation%s\n", removed, cli_plural(removed));
    if (rc) return fail(args.dir, rc);
    n = ckpt_store_list_count(l);
    for (i = 0; i < n; i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        cli_error e = {0};

        if (g->ok) continue;
        printf("%scorrupt%s, left in place: ", cli_color(CLI_RED), cli_color(CLI_RESET));
        cli_put_text(stdout, g->file, strlen(g->file));
        fputs(": ", stdout);
        cli_put_text(stdout, g->reason, strlen(g->reason));
        snprintf(e.member, sizeof e.member, "%s", g->member);
        e.offset = g->offset;
        cli_put_location(stdout, &e, 1);
        fputc('\n', stdout);
        rc = CLI_FINDINGS;
    }
    if (args.verbose) list_human(l, &o);
    ckpt_store_listing_free(l);
    return rc;
}

static int store_gc(const cli_command *cmd, int argc, char **argv) {
    ckpt_store_options o;
    uint64_t step;
    size_t files = 0, dirs = 0;
    events ev;
    int rc = parse_args(cmd, argc, argv, &o, &step);

    if (rc != CLI_CONTINUE) return rc;
    events_listen(&ev, &o);
    rc = ckpt_store_gc_count(&files, &dirs, args.dir, &o);
    o.on_event = NULL;
    /* "removed 1 stale temporary file", "... and 2 temporary directories" */
    if (!args.quiet && (files || !dirs))
        printf("removed %zu stale temporary file%s%s", files, cli_plural(files),
               dirs ? " and " : "\n");
    if (!args.quiet && dirs)
        printf("%s%zu stale temporary director%s\n", files ? "" : "removed ", dirs,
               dirs == 1 ? "y" : "ies");
    if (args.verbose) events_removed(stdout, &ev, "  ", "  ");
    events_free(&ev);
    return rc ? fail(args.dir, rc) : show_listing(&o);
}

static const cli_command sub_commit = {"store commit", NULL,         commit_opts, NULL,
                                       NULL,           store_commit, NULL};
static const cli_command sub_latest = {"store latest", NULL,         latest_opts, NULL,
                                       NULL,           store_latest, NULL};
static const cli_command sub_list = {"store list", NULL, list_opts, NULL, NULL, store_list, NULL};
static const cli_command sub_prune = {"store prune", NULL,        prune_opts, NULL,
                                      NULL,          store_prune, NULL};
static const cli_command sub_gc = {"store gc", NULL, gc_opts, NULL, NULL, store_gc, NULL};
static const cli_command *const subs[] = {&sub_commit, &sub_latest, &sub_list,
                                          &sub_prune,  &sub_gc,     NULL};

static int run(const cli_command *cmd, int argc, char **argv) {
    size_t i;

    if (argc < 2) return cli_usage_error(cmd, "missing subcommand");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        cli_opt_usage(stdout, cmd, 1);
        return CLI_OK;
    }
    for (i = 0; subs[i]; i++)
        if (strcmp(argv[1], subs[i]->name + strlen("store ")) == 0)
            return subs[i]->run(subs[i], argc - 1, argv + 1);
    return cli_usage_error(cmd, "unknown subcommand '%s'", argv[1]);
}

static const cli_opt no_opts[] = {{0}};

const cli_command cli_cmd_store = {
    "store",
    "numbered generations with a verified LATEST pointer",
    no_opts,
    "DIR holds generations NAME-STEP.safetensors or NAME-STEP.pt, and\n"
    "NAME-STEP.dcp directories (ckpt.Store's multi-rank commits; steps sort\n"
    "numerically) and LATEST, the name of the newest committed one\n"
    "(for readers without ckpt). NAME is a label, not a namespace: the\n"
    "generations of every NAME in DIR are one sequence by step, and share\n"
    "LATEST and pruning; use one DIR per run.\n"
    "Every file is written atomically (temporary file, fsync, rename, fsync\n"
    "of DIR), so a crash leaves each name absent or complete. Writers take\n"
    "turns through a lock (flock on DIR/.ckpt-store.lock, released if one\n"
    "dies): LATEST only moves forward; list says when DIR's filesystem\n"
    "(NFS, Lustre...) may not honour the lock across hosts.\n"
    "\n"
    "  commit   verify SRC (a corrupt SRC is refused: nothing is written),\n"
    "           copy it (any format ckpt reads but a sharded set; its format\n"
    "           is kept: a DCP directory becomes NAME-N.dcp) into\n"
    "           DIR as generation N (DIR and its parents are created if\n"
    "           missing, mode 0755), re-read and verify it fully, move\n"
    "           LATEST, then prune; prints the new file's path on stdout,\n"
    "           and on stderr `pruned FILE` for each generation its pruning\n"
    "           removed, `removed a killed writer's .FILE.tmp-PID-HEX` for\n"
    "           each temporary file or directory it removed as gc does,\n"
    "           and a note when LATEST stays on a higher step (a\n"
    "           step below LATEST's is committed but does not move it). A\n"
    "           step already committed (it verifies) is refused, exit 1,\n"
    "           unless --replace is given\n"
    "  latest   print the newest generation that verifies (corrupt ones are\n"
    "           skipped, LATEST is not trusted); exit 1 if none does\n"
    "  list     every generation with step, size, status ok/corrupt\n"
    "           (verified) and, for a verified one, doctor's resume verdict\n"
    "           (full-resume, partial, warm-start-only, weights-only; JSON\n"
    "           \"resume\", null when corrupt), and the state of LATEST;\n"
    "           exit 1 if any is bad\n"
    "  prune    keep the N newest generations that verify (at least one)\n"
    "           and LATEST's; remove the older ones. Corrupt generations\n"
    "           never count toward N and never push a good one out: newer\n"
    "           ones are reported and left in place (exit 1) until N newer\n"
    "           generations verify\n"
    "  gc       remove ckpt's temporaries left by killed writers, and no\n"
    "           other file: the names ckpt's atomic writer gives them,\n"
    "           .FILE.tmp-PID-HEX (PID in decimal, HEX exactly 16 lowercase\n"
    "           hex digits, e.g. .run-700.pt.tmp-4242-0123456789abcdef);\n"
    "           any other name (.run-700.pt.tmp.123, run.tmp) stays, whatever\n"
    "           --older-than says. Such a file is never removed while its\n"
    "           writer holds its lock; an unlocked one is removed once its\n"
    "           process is gone or it is unmodified for MINUTES; such a\n"
    "           directory (a killed coordinator's staging) once DIR's lock\n"
    "           is free. -v names each one removed\n",
    "Exit status: 0 ok, 1 refused or corrupt data (a step already\n"
    "committed; corrupt source, new generation, listing, prune), 2 usage\n"
    "(a sharded set as SRC: commit a single file or a DCP directory, which\n"
    "`ckpt convert` makes of it) or I/O error.\n",
    run,
    subs};
