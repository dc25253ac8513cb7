/* pickle.h - the restricted pickle machine.
 *
 * Executes every opcode of pickle protocols 0 to 5 over an in-memory
 * buffer without ever calling anything: GLOBAL/STACK_GLOBAL/INST push
 * references; REDUCE/NEWOBJ/NEWOBJ_EX/OBJ/INST on a reference that is on
 * the allowlist (builders.h) run our own data builder; on any other
 * reference they produce an opaque CKPT_KIND_OBJECT named "module.qualname"
 * holding its arguments (obj.args, a TUPLE; NEWOBJ_EX appends its kwargs
 * DICT as a last item when non-empty), BUILD state (obj.state) and
 * APPEND(S)/SETITEM(S)/ADDITEMS items (obj.items). Calling something that
 * is not a reference (an object, an int...) gives an opaque object "?".
 * Persistent ids go to a caller callback. Every event a scanner needs is
 * reported through on_event, before the opcode can fail; a call's event
 * carries its arguments, so that a scanner can look into what a known
 * unpickling gadget (pickle.loads...) would unpickle.
 *
 * Semantics follow CPython's Modules/_pickle.c: a value stack plus a mark
 * stack (no opcode pops below the innermost MARK), a memo keyed by any
 * non-negative integer, protocol-0 text operands ending in '\n', and
 * _compat_pickle's Python 2 name mapping (__builtin__ -> builtins,
 * copy_reg -> copyreg, ...) applied to GLOBAL/INST names when the
 * protocol is below 3, before the allowlist check. Deliberate differences:
 *   - STACK_GLOBAL on operands that are not str does not fail: it pushes a
 *     symbolic reference with module "?" (and name "?" unless the name is a
 *     str), reported with symbolic = 1. EXT1/2/4 push a reference "?" /
 *     "ext:<code>", also symbolic. Neither is ever allowlisted.
 *   - FRAME is read as _pickle.c reads it, by a file unpickler
 *     (torch.load, io.BytesIO) and a memory one (pickle.loads) alike;
 *     where the two read different bytes (an operand or text line that
 *     starts inside a frame and ends past it, except the data of the
 *     bytes opcodes; a FRAME inside another that reaches past it) the
 *     pickle is refused (CKPT_E_FORMAT). pickle.py, which refuses every
 *     crossing and every FRAME inside another, is not what loaders use.
   - STRING/BINSTRING/SHORT_BINSTRING (Python 2 str) give STR when the
 *     bytes are valid UTF-8, else BYTES.
 *   - STR is always valid UTF-8: lone surrogates, which Python accepts
 *     ("surrogatepass"), become U+FFFD, and the str is marked
 *     (CKPT_STR_SURROGATE): a dict key such as this, or one holding a
 *     NUL byte, is refused (ckpt_value_key_check).
 *   - Text operands follow _pickle.c: INT is strtol(text, 0) (C octal for
 *     a leading 0, 0x) falling back to PyLong_FromString(text, 0) (0x/0o/
 *     0b prefixes, underscores, blanks around; at most 4300 decimal
 *     digits like Python's int()); LONG is PyLong_FromString after an
 *     optional trailing 'L'; PUT/GET keys are PyLong_FromString(text, 10);
 *     FLOAT is PyOS_string_to_double (no blanks, inf/nan, overflow
 *     refused). A NUL ends any of them, as in C.
 *   - Ints beyond CKPT_BIGINT_MAX_BYTES (LONG1/LONG4, binary-base text)
 *     are a placeholder in scan mode and CKPT_E_LIMIT in reader mode.
 *   - READONLY_BUFFER passes bytes and objects and refuses other data;
 *     NEXT_BUFFER fails (the loaders pass no out-of-band buffers).
 *
 * Bounded: stack plus mark depth (max_pickle_stack), memo entries
 * (max_pickle_memo; an array while keys are dense, a hash map for the
 * others, so a huge memo index costs nothing),
 * opcodes executed plus items/bytes copied by builders (max_pickle_ops);
 * every length is checked against the bytes left before anything is
 * allocated; the memory of the run against the input's budget (budget). Values never recurse, so container nesting needs no bound
 * here; memo references can make cycles (a list containing itself), which
 * walkers of the tree must bound with max_depth. */
#ifndef CKPT_PICKLE_H
#define CKPT_PICKLE_H

#include "base/alloc.h"
#include "ckpt.h"
#include "model/value.h"
#include "format/pickle_event.h"

/* The first opcode torch >= 2.6's weights_only unpickler refuses. */
typedef struct pk_weights_only {
    uint64_t offset; /* absolute; CKPT_NO_OFFSET: none yet */
    uint8_t op;
    /* NULL: an opcode it does not run; else why it refuses what this one
     * acts on ("APPENDS extends only a list"), a static string */
    const char *why;
} pk_weights_only;

typedef struct pk_options {
    const char *file;     /* for errors */
    const char *member;   /* for errors ("" if none) */
    uint64_t base_offset; /* absolute file offset of buf[0] */
    const ckpt_limits *limits;
    ckpt_arena *arena; /* values are allocated here */
    /* Called for PERSID/BINPERSID with the pid (a STR for PERSID); must set
     * *out (any value) or return a CKPT_E_* code with the error recorded.
     * offset: absolute offset of the opcode. NULL: PERSID/BINPERSID fail
     * (CKPT_E_FORMAT), as pickle.load without persistent_load raises.
     * The pid is borrowed for the call: the function may keep pointers to
     * its items (and their bytes), never to the pid itself, whose memory
     * the machine reuses. A STORAGE_ *out must be a new value from
     * o->arena that nothing else holds (the machine reuses it too once
     * the tensor that takes it is built). */
    int (*persistent_load)(void *ctx, ckpt_value *pid, uint64_t offset, ckpt_value **out);
    /* Optional; never fails. Event strings are borrowed for the call. */
    void (*on_event)(void *ctx, const pk_event *ev);
    void *ctx;
    /* Scan mode, for callers that only need the events (scan.c). Every
     * event is reported as in reader mode, with the same offsets, and
     * the stack, mark, memo and type checks are the same (SETITEM on a
     * list still fails, STACK_GLOBAL still resolves str operands from
     * any string opcode and through the memo), but data that no event
     * depends on is not built: ints that fit in int64, floats, bools and
     * None are one shared placeholder per kind (an int reads 0); lists,
     * dicts and sets stay empty (their items are checked, then dropped);
     * tuples keep their items (calls and persistent ids look inside);
     * str and bytes from binary opcodes point into buf, not NUL-
     * terminated; an allowlisted call runs its builder only when events
     * or references depend on it (builders.h), else it gives an opaque
     * OBJECT named after the callable (a BUILD on which names the
     * callable, allowed, where reader mode reports plain data); a numpy
     * array stays an OBJECT. So argument shapes a builder would refuse do
     * not fail; the result of such a call is never the str a STACK_GLOBAL
     * resolves (the global is symbolic) nor the tuple or dict a REDUCE or
     * NEWOBJ takes as arguments (a format error; Python's writers never
     * put one there); and the result of a run is only good for its kind
     * and, for an int beyond int64, its value. */
    int scan_only;
    /* Optional: receives the bytes of the FRAME holding STOP that follow
     * it (0 when STOP ends its frame or there is none). A reader of
     * stacked pickles resumes right after STOP (pickle.loads, a file read
     * through peek) or after the frame (io.BytesIO, a frame read whole),
     * so a next stream has two possible starts. */
    size_t *frame_rest;
    /* Optional: the input's budget left (ckpt_zip_budget of the file's
     * size, less what was inflated). Values, stack, marks and memo of
     * this run may take 1 MiB (so that a tiny input, whose budget is a
     * few hundred bytes, still unpickles) plus *budget; beyond that the
     * run fails with CKPT_E_LIMIT. A compressed pickle gets 1032 opcodes
     * per input byte, each of which may allocate a value: without this
     * a 1 MB file of deflated NONE, POP took 2.2 GB. The caller charges
     * what outlives the run (o->arena's growth). NULL: no such bound. */
    const uint64_t *budget;
    /* Optional: set at the first opcode run that torch's weights_only
     * unpickler refuses (FRAME, STACK_GLOBAL, MEMOIZE, SHORT_BINUNICODE,
     * BINBYTES, text opcodes...: it runs protocol 2 as torch.save writes
     * it), when its offset is still CKPT_NO_OFFSET. */
    pk_weights_only *weights_only;
    /* Optional: receives the opcodes run and the items and bytes
     * builders copied (what max_pickle_ops bounds), as the run ends. */
    uint64_t *ops;
} pk_options;

/* Runs one pickle from buf[0..len) up to and including its STOP opcode
 * (whose value is the top of the stack, as in Python). *out receives the
 * result (owned by o->arena), *consumed the bytes read through STOP (for
 * stacked pickles; bytes after STOP are not looked at). o->limits NULL
 * means CKPT_LIMITS_INIT. Returns 0, or CKPT_E_TRUNCATED (input ends
 * before STOP or inside an operand), CKPT_E_FORMAT (unknown opcode, bad
 * operand, stack or mark underflow, missing memo key, type confusion such
 * as SETITEM on a list, FRAME violation), CKPT_E_LIMIT, CKPT_E_NOMEM,
 * CKPT_E_INVALID_ARG (no arena),
 * or whatever persistent_load or a builder returned; the error names
 * file, member and the absolute offset of the failing opcode. *out is
 * NULL and *consumed 0 on failure. Scratch memory (stack, memo) is
 * released before returning; values stay in o->arena. Each value records
 * the offset of the opcode that first pushed it (value.h pk_at; absolute:
 * ckpt_value_at(v, o->base_offset)), so that a reader of the tree can
 * name the byte of a value it refuses; the shared placeholders of scan
 * mode have none (CKPT_PK_SHARED). */
int ckpt_pickle_run(ckpt_value **out, size_t *consumed, const uint8_t *buf, size_t len,
                    const pk_options *o);

/* The name of opcode op ("SHORT_BINUNICODE"), or NULL for a byte that is
 * none. Static string. */
const char *ckpt_pickle_op_name(uint8_t op);

/* 1 if byte op is a pickle opcode of protocols 0 to 5. */
int ckpt_pickle_is_opcode(uint8_t op);

#endif
