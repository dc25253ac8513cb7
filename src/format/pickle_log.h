/* pickle_log.h - the events of a reader's run of a torch archive's
 * data.pkl, kept so that a scan of the opened file takes them for those
 * of its own run (jobs/scan.c): one pickle run per command that reads
 * and scans (inspect, doctor, Python's ckpt.load then ckpt.scan).
 *
 * A scan runs the machine in scan mode (pickle.h scan_only), which builds
 * no data; a reader in reader mode. The two report the same events, at
 * the same offsets, and refuse the same bytes, but where a later opcode
 * looks at a value that reader mode built and scan mode left an opaque
 * object (a call's result), or at the items of a list that scan mode
 * drops. The log is `usable` only for a run in which that cannot change
 * an answer: the run reached STOP; torch's weights_only unpickler refuses
 * none of its opcodes (so protocol 2 only: no STACK_GLOBAL, NEWOBJ_EX or
 * EXT, and every APPEND, SETITEM, BUILD and persistent id acts on what
 * torch allows); every call is of a callable whose reader-mode result
 * takes each such check as scan mode's opaque object does
 * (ckpt_builders_scan_alike: an OrderedDict, a rebuilt tensor). Lists,
 * which a scan keeps empty, are looked into by one check only, of the
 * pairs a BUILD gives an OrderedDict, which reader mode refuses unless
 * they come as a dict (pickle.load's (state, slotstate) rule). The scan
 * then needs the same limits and a budget no scan-mode run of ops opcodes
 * can exhaust, and checks those itself.
 *
 * Kept: GLOBAL and BUILD events, with copies of their strings; CALL
 * events are counted only (each is an allowlisted call of an undotted
 * name, which a scan reports nothing of: it reports such a callable at
 * its GLOBAL); PERSID events are dropped (a scan answers them with a
 * placeholder and reports nothing). */
#ifndef CKPT_PICKLE_LOG_H
#define CKPT_PICKLE_LOG_H

#include "base/alloc.h"
#include "format/pickle.h"

typedef struct pk_log_event {
    uint64_t offset;
    const char *module, *name; /* copies */
    uint8_t kind, opcode, allowed, symbolic, on_reference;
} pk_log_event;

typedef struct pk_log {
    ckpt_arena *arena; /* the copies and the array below (the file's) */
    uint64_t base;     /* data.pkl's first byte in the file */
    size_t len;        /* its bytes */
    ckpt_limits limits;
    uint64_t budget; /* pk_options.budget when the run started */
    int usable;      /* see above; 0 until ckpt_pickle_log_end */
    int unalike;     /* a call the log cannot stand for, or no memory */
    size_t consumed, frame_rest;
    pk_weights_only wo;
    uint64_t ops;   /* pk_options.ops */
    uint64_t calls; /* CALL events, counted */
    pk_log_event *ev;
    size_t n, cap;
    /* the last callables found alike, by their strings' addresses (a
     * GLOBAL value's, which live as long as the run's values): a state
     * dict calls two in turn */
    const char *seen[4][2];
    unsigned next_seen;
} pk_log;

/* A new log in arena for the run of the len bytes at base, with limits
 * and the budget its run starts with; NULL when out of memory. Its wo,
 * ops and frame_rest are the run's pk_options.weights_only, ops and
 * frame_rest. */
pk_log *ckpt_pickle_log_new(ckpt_arena *arena, uint64_t base, size_t len, const ckpt_limits *limits,
                            uint64_t budget);

/* pk_options.on_event of the run (ctx: the log). */
void ckpt_pickle_log_event(pk_log *log, const pk_event *ev);

/* After the run, with its code and bytes consumed: sets usable. */
void ckpt_pickle_log_end(pk_log *log, int rc, size_t consumed);

#endif
