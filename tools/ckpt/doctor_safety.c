/* doctor_safety.c - the doctor's "safety" section as text: the scan of
 * every file the report covers, so one report says whether loading it
 * with torch.load would run code, and whether torch.load's default since
 * torch 2.6 (weights_only=True) refuses it (a note: no safety finding). */
#include <string.h>

#include "doctor.h"

static void show_file_text(const ckpt_doctor_scan *s, int several) {
    const ckpt_scan_report *r = s->report;
    ckpt_verdict v = r ? ckpt_scan_verdict(r) : CKPT_VERDICT_UNSCANNABLE;
    const char *color = v == CKPT_VERDICT_SAFE ? CLI_GREEN : CLI_RED;
    size_t shown = 0;

    fputs("  ", stdout);
    if (several) {
        cli_put_text(stdout, s->name, strlen(s->name));
        fputs(": ", stdout);
    }
    printf("%s%s%s", cli_color(color), ckpt_verdict_name(v), cli_color(CLI_RESET));
    if (!r) {
        fputs(": ", stdout);
        cli_put_text(stdout, s->error.message, strlen(s->error.message));
    } else if (v == CKPT_VERDICT_SAFE) {
        fputs(ckpt_scan_global_count(r)
                  ? ": every global is an allowlisted data or tensor builder; "
                    "loading it runs no code"
                  : ": it names no global (no pickle, or one of plain data); "
                    "loading it runs no code",
              stdout);
    }
    fputc('\n', stdout);
    for (size_t i = 0; r && i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);

        if (f->severity == CKPT_SEVERITY_INFO) continue;
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
    if (s->about) {
        fputs("    what it is: ", stdout);
        cli_put_text(stdout, s->about, strlen(s->about));
        fputc('\n', stdout);
    }
    ckpt_weights_only wo;
    if (r && ckpt_scan_weights_only(r, &wo)) {
        fputs("    note: ", stdout);
        cli_put_text(stdout, wo.message, strlen(wo.message));
        fputc('\n', stdout);
    }
}

void cli_doctor_safety_show(const ckpt_doctor_report *r) {
    size_t n = ckpt_doctor_scan_count(r);

    for (size_t i = 0; i < n; i++) show_file_text(ckpt_doctor_scan_at(r, i), n > 1);
}
