/* pickle_log.c - a reader's data.pkl events for the scan (pickle_log.h). */
#include <string.h>

#include "base/error.h"
#include "format/pickle_builders.h"
#include "format/pickle_log.h"

pk_log *ckpt_pickle_log_new(ckpt_arena *arena, uint64_t base, size_t len, const ckpt_limits *limits,
                            uint64_t budget) {
    pk_log *log = ckpt_arena_alloc(arena, sizeof *log);
    if (!log) return NULL;
    memset(log, 0, sizeof *log);
    log->arena = arena;
    log->base = base;
    log->len = len;
    log->limits = *limits;
    log->budget = budget;
    log->wo.offset = CKPT_NO_OFFSET;
    return log;
}

/* 1 if the call of ev is one the log stands for. */
static int call_alike(pk_log *log, const pk_event *ev) {
    if (!ev->allowed || ev->symbolic) return 0;
    for (unsigned i = 0; i < 4; i++)
        if (ev->module == log->seen[i][0] && ev->name == log->seen[i][1]) return 1;
    if (!ckpt_builders_scan_alike(ev->module, ev->name)) return 0;
    log->seen[log->next_seen][0] = ev->module;
    log->seen[log->next_seen][1] = ev->name;
    log->next_seen = (log->next_seen + 1) % 4;
    return 1;
}

void ckpt_pickle_log_event(pk_log *log, const pk_event *ev) {
    if (log->unalike) return; /* of no use any more */
    switch (ev->kind) {
    case PK_EV_PERSID: return;
    case PK_EV_CALL:
        if (call_alike(log, ev))
            log->calls++;
        else
            log->unalike = 1;
        return;
    case PK_EV_GLOBAL:
    case PK_EV_BUILD: break;
    }
    if (ckpt_arena_grow(log->arena, (void **)&log->ev, &log->cap, log->n + 1, sizeof *log->ev)) {
        log->unalike = 1;
        return;
    }
    pk_log_event *e = &log->ev[log->n];
    *e = (pk_log_event){.offset = ev->offset,
                        .module = ckpt_arena_strdup(log->arena, ev->module),
                        .name = ckpt_arena_strdup(log->arena, ev->name),
                        .kind = (uint8_t)ev->kind,
                        .opcode = ev->opcode,
                        .allowed = ev->allowed != 0,
                        .symbolic = ev->symbolic != 0,
                        .on_reference = ev->on_reference != 0};
    if (!e->module || !e->name)
        log->unalike = 1;
    else
        log->n++;
}

void ckpt_pickle_log_end(pk_log *log, int rc, size_t consumed) {
    log->consumed = consumed;
    log->usable = rc == 0 && !log->unalike && log->wo.offset == CKPT_NO_OFFSET;
}
