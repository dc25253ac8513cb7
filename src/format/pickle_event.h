/* pickle_event.h - what the pickle machine reports as it runs (globals,
 * calls, BUILDs, persistent ids): the one type the machine (pickle.h) and
 * its builders (pickle_builders.h) share, so neither includes the other's
 * header for it. */
#ifndef CKPT_PICKLE_EVENT_H
#define CKPT_PICKLE_EVENT_H

#include <stdint.h>

#include "model/value.h"

typedef enum pk_event_kind {
    PK_EV_GLOBAL, /* GLOBAL, STACK_GLOBAL, INST or EXT* resolved a name */
    PK_EV_CALL,   /* REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST called something;
                      also the func of torch._tensor._rebuild_from_type_v2 */
    PK_EV_BUILD,  /* BUILD applied state to a value */
    PK_EV_PERSID  /* PERSID/BINPERSID */
} pk_event_kind;

typedef struct pk_event {
    pk_event_kind kind;
    uint8_t opcode;         /* the opcode byte */
    uint64_t offset;        /* absolute offset of the opcode in the file */
    const char *module;     /* GLOBAL/CALL/BUILD target: module, "?" for a
                              symbolic one, "" for BUILD on plain data */
    const char *name;       /* qualname ("?" symbolic, "" plain data). BUILD
                              on an OBJECT splits its "module.qualname" at
                              the last '.' */
    int allowed;            /* GLOBAL/CALL: 1 if module.name is on the
                              allowlist (so a call runs our builder). BUILD:
                              1 for plain data (dict, tensor) and objects of
                              allowlisted classes, 0 for other objects and
                              for BUILD on a reference (a module or class
                              being modified: allowlist poisoning) */
    int symbolic;           /* 1 if the name did not come from constant strings
                              (e.g. STACK_GLOBAL on a non-str operand) */
    int on_reference;       /* BUILD: 1 when the target is a GLOBAL
                              reference (a module, class or function
                              itself, not an instance of it) */
    const ckpt_value *args; /* PK_EV_CALL: the argument TUPLE (for NEWOBJ_EX
                              without its kwargs), borrowed for the call
                              (scan mode: tuples and objects keep their
                              items, str/bytes point into the input or the
                              arena); NULL when not known */
} pk_event;

#endif
