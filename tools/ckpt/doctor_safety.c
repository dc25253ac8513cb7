/* doctor_safety.c - the doctor's "safety" section: `ckpt scan` of every
 * file the report covers, so one report says whether loading it with
 * torch.load would run code. */
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

int cli_doctor_safety_run(cli_doctor_safety *s, const char *const *paths,
                      const char *const *names, size_t n)
{
    memset(s, 0, sizeof *s);
    s->names = calloc(n ? n : 1, sizeof *s->names);
    s->reports = calloc(n ? n : 1, sizeof *s->reports);
    s->errors = calloc(n ? n : 1, sizeof *s->errors);
    if (!s->names || !s->reports || !s->errors)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int rc = ckpt_scan(&s->reports[i], paths[i], NULL);

        s->names[i] = names[i];
        if (rc == CKPT_E_NOMEM)
            return -1;
        if (rc != 0)
            cli_error_capture(&s->errors[i], rc);
        s->n++;
    }
    return 0;
}

/* How bad a verdict is: unsafe, then unscannable (something was not
 * examined), then not-a-checkpoint (nothing to examine), then safe. */
static int rank(ckpt_verdict v)
{
    switch (v) {
    case CKPT_VERDICT_UNSAFE:
        return 3;
    case CKPT_VERDICT_UNSCANNABLE:
        return 2;
    case CKPT_VERDICT_NOT_A_CHECKPOINT:
        return 1;
    default:
        return 0;
    }
}

/* The worst verdict over all files, named as the scan names it; a file
 * that could not be scanned at all counts as unscannable. */
static ckpt_verdict worst(const cli_doctor_safety *s)
{
    ckpt_verdict w = CKPT_VERDICT_SAFE;

    for (size_t i = 0; i < s->n; i++) {
        ckpt_verdict v = s->reports[i] ? ckpt_scan_verdict(s->reports[i])
                                       : CKPT_VERDICT_UNSCANNABLE;

        if (rank(v) > rank(w))
            w = v;
    }
    return w;
}

/* The first global of a finding with the given severity, or NULL. */
static const char *first_global(const ckpt_scan_report *r, ckpt_severity sev)
{
    size_t n = ckpt_scan_finding_count(r);

    for (size_t i = 0; i < n; i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (f->severity == sev && f->global)
            return f->global;
    }
    return NULL;
}

int cli_doctor_safety_concern(const cli_doctor_safety *s, FILE *out)
{
    ckpt_verdict w = worst(s);

    if (w == CKPT_VERDICT_SAFE)
        return 0;
    if (out) {
        const char *g = NULL;

        for (size_t i = 0; i < s->n && !g; i++)
            if (s->reports[i]) {
                g = first_global(s->reports[i], CKPT_SEVERITY_DANGEROUS);
                if (!g)
                    g = first_global(s->reports[i], CKPT_SEVERITY_SUSPICIOUS);
            }
        fprintf(out, "%s", ckpt_verdict_name(w));
        if (g && w == CKPT_VERDICT_UNSAFE) {
            fputs(" (", out);
            cli_put_text(out, g, strlen(g));
            fputc(')', out);
        }
    }
    return 1;
}

static void show_file_json(cli_json_writer *j, const char *name,
                           const ckpt_scan_report *r, const cli_error *e)
{
    cli_json_object_begin(j);
    cli_json_key(j, "file");
    cli_json_string(j, name);
    cli_json_key(j, "verdict");
    cli_json_string(j, r ? ckpt_verdict_name(ckpt_scan_verdict(r)) : "unscannable");
    if (!r) {
        cli_json_key(j, "error");
        cli_json_string(j, e->message);
    }
    cli_json_key(j, "findings");
    cli_json_array_begin(j);
    for (size_t i = 0; r && i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (f->severity == CKPT_SEVERITY_INFO)
            continue;
        cli_json_object_begin(j);
        cli_json_key(j, "severity");
        cli_json_string(j, ckpt_severity_name(f->severity));
        cli_json_key(j, "kind");
        cli_json_string(j, f->kind);
        if (f->global) {
            cli_json_key(j, "global");
            cli_json_string(j, f->global);
        }
        if (f->member && f->member[0]) {
            cli_json_key(j, "member");
            cli_json_string(j, f->member);
        }
        cli_json_key(j, "offset");
        cli_json_uint(j, f->offset);
        cli_json_key(j, "message");
        cli_json_string(j, f->message);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
    cli_json_object_end(j);
}

static void show_file_text(const char *name, const ckpt_scan_report *r,
                           const cli_error *e, int several)
{
    ckpt_verdict v = r ? ckpt_scan_verdict(r) : CKPT_VERDICT_UNSCANNABLE;
    const char *color = v == CKPT_VERDICT_SAFE ? CLI_GREEN : CLI_RED;
    size_t shown = 0;

    fputs("  ", stdout);
    if (several) {
        cli_put_text(stdout, name, strlen(name));
        fputs(": ", stdout);
    }
    printf("%s%s%s", cli_color(color), ckpt_verdict_name(v), cli_color(CLI_RESET));
    if (!r) {
        fputs(": ", stdout);
        cli_put_text(stdout, e->message, strlen(e->message));
    } else if (v == CKPT_VERDICT_SAFE) {
        fputs(": every global is an allowlisted data or tensor builder; "
              "loading it runs no code", stdout);
    }
    fputc('\n', stdout);
    for (size_t i = 0; r && i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (f->severity == CKPT_SEVERITY_INFO)
            continue;
        if (++shown > 10) {
            puts("    ... (`ckpt scan` lists them all)");
            break;
        }
        printf("    %s: ", ckpt_severity_name(f->severity));
        cli_put_text(stdout, f->message, strlen(f->message));
        if (f->member && f->member[0]) {
            fputs(" (", stdout);
            cli_put_text(stdout, f->member, strlen(f->member));
            printf(", offset %llu)", (unsigned long long)f->offset);
        } else {
            printf(" (offset %llu)", (unsigned long long)f->offset);
        }
        fputc('\n', stdout);
    }
}

void cli_doctor_safety_show(const cli_doctor_safety *s, cli_json_writer *j)
{
    if (j) {
        cli_json_object_begin(j);
        cli_json_key(j, "verdict");
        cli_json_string(j, ckpt_verdict_name(worst(s)));
        cli_json_key(j, "files");
        cli_json_array_begin(j);
        for (size_t i = 0; i < s->n; i++)
            show_file_json(j, s->names[i], s->reports[i], &s->errors[i]);
        cli_json_array_end(j);
        cli_json_object_end(j);
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        show_file_text(s->names[i], s->reports[i], &s->errors[i], s->n > 1);
}

void cli_doctor_safety_free(cli_doctor_safety *s)
{
    for (size_t i = 0; s->reports && i < s->n; i++)
        ckpt_scan_report_free(s->reports[i]);
    free(s->names);
    free(s->reports);
    free(s->errors);
    memset(s, 0, sizeof *s);
}
