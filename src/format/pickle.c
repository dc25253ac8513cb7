/* pickle.c - the restricted pickle machine (see pickle.h for the contract).
 *
 * The structure follows CPython's Modules/_pickle.c: one loop reads an
 * opcode and its operand; values live on a stack; MARK records the stack
 * height on a separate mark stack and the innermost mark is a fence no
 * opcode may pop below; the memo maps integers to values. Nothing is ever
 * imported or called: globals are CKPT_KIND_GLOBAL_ references, calls go
 * to builders.c when allowlisted and become opaque objects otherwise.
 *
 * Every operand read goes through take()/take_line(), which check the
 * bytes left in the input and in the current FRAME. The stack, mark stack
 * and memo live in scratch memory released when the run ends. */
#include "format/pickle.h"

#include <float.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/pickle_builders.h"
#include "base/error.h"
#include "base/utf8.h"

#if defined(__SANITIZE_ADDRESS__)
#define PK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PK_ASAN 1
#endif
#endif
#ifdef PK_ASAN
#include <sanitizer/asan_interface.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum {
    /* protocol 0 and 1 */
    OP_MARK = '(',
    OP_STOP = '.',
    OP_POP = '0',
    OP_POP_MARK = '1',
    OP_DUP = '2',
    OP_FLOAT = 'F',
    OP_INT = 'I',
    OP_BININT = 'J',
    OP_BININT1 = 'K',
    OP_LONG = 'L',
    OP_BININT2 = 'M',
    OP_NONE = 'N',
    OP_PERSID = 'P',
    OP_BINPERSID = 'Q',
    OP_REDUCE = 'R',
    OP_STRING = 'S',
    OP_BINSTRING = 'T',
    OP_SHORT_BINSTRING = 'U',
    OP_UNICODE = 'V',
    OP_BINUNICODE = 'X',
    OP_APPEND = 'a',
    OP_BUILD = 'b',
    OP_GLOBAL = 'c',
    OP_DICT = 'd',
    OP_EMPTY_DICT = '}',
    OP_APPENDS = 'e',
    OP_GET = 'g',
    OP_BINGET = 'h',
    OP_INST = 'i',
    OP_LONG_BINGET = 'j',
    OP_LIST = 'l',
    OP_EMPTY_LIST = ']',
    OP_OBJ = 'o',
    OP_PUT = 'p',
    OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r',
    OP_SETITEM = 's',
    OP_TUPLE = 't',
    OP_EMPTY_TUPLE = ')',
    OP_SETITEMS = 'u',
    OP_BINFLOAT = 'G',
    /* protocol 2 */
    OP_PROTO = 0x80,
    OP_NEWOBJ = 0x81,
    OP_EXT1 = 0x82,
    OP_EXT2 = 0x83,
    OP_EXT4 = 0x84,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
    OP_LONG4 = 0x8b,
    /* protocol 3 */
    OP_BINBYTES = 'B',
    OP_SHORT_BINBYTES = 'C',
    /* protocol 4 */
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d,
    OP_BINBYTES8 = 0x8e,
    OP_EMPTY_SET = 0x8f,
    OP_ADDITEMS = 0x90,
    OP_FROZENSET = 0x91,
    OP_NEWOBJ_EX = 0x92,
    OP_STACK_GLOBAL = 0x93,
    OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
    /* protocol 5 */
    OP_BYTEARRAY8 = 0x96,
    OP_NEXT_BUFFER = 0x97,
    OP_READONLY_BUFFER = 0x98
};

static const char *const op_names[256] = {
    [OP_MARK] = "MARK",
    [OP_STOP] = "STOP",
    [OP_POP] = "POP",
    [OP_POP_MARK] = "POP_MARK",
    [OP_DUP] = "DUP",
    [OP_FLOAT] = "FLOAT",
    [OP_INT] = "INT",
    [OP_BININT] = "BININT",
    [OP_BININT1] = "BININT1",
    [OP_LONG] = "LONG",
    [OP_BININT2] = "BININT2",
    [OP_NONE] = "NONE",
    [OP_PERSID] = "PERSID",
    [OP_BINPERSID] = "BINPERSID",
    [OP_REDUCE] = "REDUCE",
    [OP_STRING] = "STRING",
    [OP_BINSTRING] = "BINSTRING",
    [OP_SHORT_BINSTRING] = "SHORT_BINSTRING",
    [OP_UNICODE] = "UNICODE",
    [OP_BINUNICODE] = "BINUNICODE",
    [OP_APPEND] = "APPEND",
    [OP_BUILD] = "BUILD",
    [OP_GLOBAL] = "GLOBAL",
    [OP_DICT] = "DICT",
    [OP_EMPTY_DICT] = "EMPTY_DICT",
    [OP_APPENDS] = "APPENDS",
    [OP_GET] = "GET",
    [OP_BINGET] = "BINGET",
    [OP_INST] = "INST",
    [OP_LONG_BINGET] = "LONG_BINGET",
    [OP_LIST] = "LIST",
    [OP_EMPTY_LIST] = "EMPTY_LIST",
    [OP_OBJ] = "OBJ",
    [OP_PUT] = "PUT",
    [OP_BINPUT] = "BINPUT",
    [OP_LONG_BINPUT] = "LONG_BINPUT",
    [OP_SETITEM] = "SETITEM",
    [OP_TUPLE] = "TUPLE",
    [OP_EMPTY_TUPLE] = "EMPTY_TUPLE",
    [OP_SETITEMS] = "SETITEMS",
    [OP_BINFLOAT] = "BINFLOAT",
    [OP_PROTO] = "PROTO",
    [OP_NEWOBJ] = "NEWOBJ",
    [OP_EXT1] = "EXT1",
    [OP_EXT2] = "EXT2",
    [OP_EXT4] = "EXT4",
    [OP_TUPLE1] = "TUPLE1",
    [OP_TUPLE2] = "TUPLE2",
    [OP_TUPLE3] = "TUPLE3",
    [OP_NEWTRUE] = "NEWTRUE",
    [OP_NEWFALSE] = "NEWFALSE",
    [OP_LONG1] = "LONG1",
    [OP_LONG4] = "LONG4",
    [OP_BINBYTES] = "BINBYTES",
    [OP_SHORT_BINBYTES] = "SHORT_BINBYTES",
    [OP_SHORT_BINUNICODE] = "SHORT_BINUNICODE",
    [OP_BINUNICODE8] = "BINUNICODE8",
    [OP_BINBYTES8] = "BINBYTES8",
    [OP_EMPTY_SET] = "EMPTY_SET",
    [OP_ADDITEMS] = "ADDITEMS",
    [OP_FROZENSET] = "FROZENSET",
    [OP_NEWOBJ_EX] = "NEWOBJ_EX",
    [OP_STACK_GLOBAL] = "STACK_GLOBAL",
    [OP_MEMOIZE] = "MEMOIZE",
    [OP_FRAME] = "FRAME",
    [OP_BYTEARRAY8] = "BYTEARRAY8",
    [OP_NEXT_BUFFER] = "NEXT_BUFFER",
    [OP_READONLY_BUFFER] = "READONLY_BUFFER",
};

/* Python's int() refuses longer decimal strings (sys.int_info
 * default_max_str_digits). */
#define MAX_INT_DIGITS 4300

/* Ints shared by every use in a run, as CPython shares them: a state_dict
 * pickle holds a few per tensor (storage size, offset, shape, stride). No
 * value of these kinds is ever changed once made. */
#define SMALL_MIN (-5)
#define SMALL_MAX 256

/* Sizes of reused blocks: 16 * (0 .. SPARES-1) bytes, a value and up to 8
 * items (a rebuild's arguments, a persistent id, a shape). */
#define SPARES 8

typedef struct memo_slot {
    uint64_t key;
    ckpt_value *v; /* NULL: empty slot */
} memo_slot;

typedef struct machine {
    const pk_options *o;
    const ckpt_limits *lim;
    ckpt_arena *a;      /* values */
    ckpt_arena scratch; /* stack, marks, memo, text copies */
    const uint8_t *buf;
    size_t len, pos; /* pos: next byte to read */
    size_t op_pos;   /* where the current opcode starts */
    uint8_t op;
    unsigned proto; /* from PROTO; 0 without one, as in Python */
    int in_frame;
    size_t frame_end; /* valid when in_frame */
    /* where operand reads stop: frame_end in a frame, else len; pos never
     * passes it, so the loop tests one bound per opcode */
    size_t end;
    uint64_t ops;       /* opcodes run plus builder work */
    uint64_t ops_limit; /* see pk_build_ctx.ops_limit */
    uint64_t max_alloc; /* bytes of values and scratch (pk_options.budget) */
    uint64_t max_stack; /* lim->max_pickle_stack, read by every push */
    ckpt_value **stack;
    size_t sp, stack_cap;
    /* push's one test: sp below it leaves room in the stack and under
     * max_stack (min(stack_cap, max_stack - nmarks); MARK lowers it) */
    size_t push_lim;
    size_t *marks; /* stack heights recorded by MARK */
    size_t nmarks, marks_cap;
    size_t memo_n; /* entries, dense and hashed (len(memo)) */
    /* memo keys below dense_cap, in chunks of MEMO_CHUNK slots (the
     * first one smaller while dense_cap is); a NULL chunk or slot: not
     * set */
    ckpt_value ***dense;
    size_t dense_cap, dense_n;
    uint64_t dense_bytes; /* the chunks and their directory */
    memo_slot *memo;      /* other keys: open addressing, capacity a power
                             of two */
    size_t hash_n, memo_cap;
    uint64_t seed;
    /* the memo keys a GET may read (see fetched()): a bit each below
     * fetched_bits; fetch_high: some GET may read a key at or past len;
     * keep_all: scan mode, which reuses nothing, keeps every key */
    uint64_t *fetched;
    size_t fetched_bits;
    int fetch_high, keep_all;
    /* the dense keys PUT but not kept (no GET reads them): a bit each,
     * dense_cap bits; their dense slots stay NULL */
    uint64_t *seen;
    /* reader mode: the memory of argument tuples no one can reach again
     * is reused (see release()); spare[k]: a list of free blocks of 16k
     * bytes, linked through their first pointer */
    int reuse;
    void *spare[SPARES];
    /* the last two references asked about (forgets()) and their answers,
     * the last first */
    const ckpt_value *forgets_of[2];
    int forgets[2];
    ckpt_value *result; /* set by STOP */
    pk_build_ctx ctx;   /* build_ctx */
    int scan;           /* pk_options.scan_only */
    /* scan mode: the shared placeholder of each scalar kind */
    ckpt_value *ph_int, *ph_float, *ph_bool, *ph_none;
    /* reader mode: one value each for None, False, True and the ints
     * SMALL_MIN..SMALL_MAX, made on first use (new_int) */
    ckpt_value *none, *bools[2], *small[SMALL_MAX - SMALL_MIN + 1];
} machine;

/* The operand and stack helpers every opcode runs: inlined into step(),
 * whose size otherwise keeps the compiler from doing it. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif
/* Kept out of ckpt_pickle_run, whose loop's registers it would take. */
#if defined(__GNUC__)
#define NOINLINE static __attribute__((noinline))
#else
#define NOINLINE static
#endif

int ckpt_pickle_is_opcode(uint8_t op) { return op_names[op] != NULL; }

static const char *op_name(uint8_t op) { return op_names[op] ? op_names[op] : "pickle"; }

const char *ckpt_pickle_op_name(uint8_t op) { return op_names[op]; }

/* The opcodes torch >= 2.6's weights_only unpickler runs (torch 2.13's
 * _weights_only_unpickler.Unpickler.load): protocol 2 as torch.save
 * writes it; any other is "Unsupported operand". 2: it also checks what
 * the opcode acts on (weights_only_refuses). */
static const uint8_t weights_only_ops[256] = {
    ['c'] = 1,  [0x81] = 2, ['R'] = 2, ['b'] = 2,  ['a'] = 2,  ['e'] = 2,  ['s'] = 2,
    ['u'] = 2,  ['('] = 1,  ['t'] = 1, [0x85] = 1, [0x86] = 1, [0x87] = 1, ['N'] = 1,
    [0x88] = 1, [0x89] = 1, [')'] = 1, [']'] = 1,  ['}'] = 1,  [0x8f] = 1, ['J'] = 1,
    ['K'] = 1,  ['M'] = 1,  ['G'] = 1, ['X'] = 1,  ['U'] = 2,  ['Q'] = 2,  ['h'] = 1,
    ['j'] = 1,  ['q'] = 1,  ['r'] = 1, [0x8a] = 1, [0x80] = 1, ['.'] = 1,
};

/* What torch's weights_only unpickler checks beyond the opcode, on the
 * value an opcode acts on (its types by exact type(), not isinstance):
 * APPEND(S) only to a list, SETITEM(S) only into a dict, OrderedDict or
 * Counter, BUILD only on a tensor, Parameter, OrderedDict or an instance
 * of an allowlisted class, BINPERSID only of a tuple ("storage", ...) or
 * an int, SHORT_BINSTRING only UTF-8 (torch.load's encoding), REDUCE and
 * NEWOBJ only of a global (its name checked at GLOBAL). It checks before
 * acting, so an empty APPENDS or SETITEMS, a no-op to CPython, is refused
 * too. A value whose type is not known here is left to the other checks. */

/* An object the machine did not build (a scan builds none) made by a
 * call of name: an OrderedDict or Counter when name is that class. No
 * callable torch allows returns a list. Any other call's result is an
 * instance of an allowlisted class or a tensor (a call of anything else
 * was refused at its GLOBAL), which BUILD takes, but for the two allowed
 * functions that make neither: bytes and a torch.layout. */
static int wo_object_refused(const ckpt_value *t, uint8_t op) {
    const char *n = t->u.obj.name;
    int mapping = !strcmp(n, "collections.OrderedDict") || !strcmp(n, "collections.Counter");
    if (op == 'a' || op == 'e') return 1;
    if (op == 's' || op == 'u') return !mapping;
    return !strcmp(n, "_codecs.encode") || !strcmp(n, "torch.serialization._get_layout");
}

static int wo_target_refused(const ckpt_value *t, uint8_t op) {
    if (t->kind == CKPT_KIND_OBJECT) return wo_object_refused(t, op);
    switch (op) {
    case 'a':
    case 'e': return t->kind != CKPT_KIND_LIST;
    case 's':
    case 'u': return t->kind != CKPT_KIND_DICT;
    default: /* 'b' */
        switch (t->kind) {
        case CKPT_KIND_TENSOR:
        case CKPT_KIND_STORAGE_: return 0;
        case CKPT_KIND_DICT: return t->dict_class == CKPT_DICT_PLAIN;
        case CKPT_KIND_SET: return t->alt; /* set; not frozenset */
        case CKPT_KIND_TUPLE:              /* torch.Size; not tuple */
        case CKPT_KIND_STR:                /* torch.device; not str */
        case CKPT_KIND_BYTES: /* bytearray; not bytes */ return !t->alt;
        default: return 1; /* None, bool, int, float, list, a class or function */
        }
    }
}

/* An OrderedDict's BUILD is inst.__dict__.update(state) in torch (not
 * pickle's (state, slotstate) split): a dict, or pairs. */
static int wo_odict_state_refused(const ckpt_value *state) {
    if (state->kind == CKPT_KIND_DICT || state->kind == CKPT_KIND_OBJECT) return 0;
    if (state->kind != CKPT_KIND_LIST && state->kind != CKPT_KIND_TUPLE) return 1;
    for (size_t i = 0; i < state->u.seq.n; i++) {
        const ckpt_value *p = state->u.seq.items[i];
        if (p->kind != CKPT_KIND_OBJECT &&
            ((p->kind != CKPT_KIND_TUPLE && p->kind != CKPT_KIND_LIST) || p->u.seq.n != 2))
            return 1;
    }
    return 0;
}

static int wo_is_odict(const ckpt_value *t) {
    return (t->kind == CKPT_KIND_DICT && t->dict_class == CKPT_DICT_ORDERED) ||
           (t->kind == CKPT_KIND_OBJECT && !strcmp(t->u.obj.name, "collections.OrderedDict"));
}

static int wo_pid_refused(const ckpt_value *pid) {
    if (pid->kind == CKPT_KIND_INT) return pid->np_dtype != 0;
    if (pid->kind != CKPT_KIND_TUPLE || pid->alt) return 1;
    if (pid->u.seq.n == 0) return 0;
    const ckpt_value *k = pid->u.seq.items[0];
    if (k->kind == CKPT_KIND_OBJECT) return 0;
    return (k->kind != CKPT_KIND_STR && k->kind != CKPT_KIND_BYTES) || k->alt || k->u.s.len != 7 ||
           memcmp(k->u.s.p, "storage", 7) != 0;
}

/* Why torch's weights_only unpickler refuses the opcode m->op about to
 * run on the stack as it is, or NULL. */
static inline const char *weights_only_refuses(const machine *m) {
    size_t below = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    const ckpt_value *t;
    switch (m->op) {
    case 'a':
        return m->sp >= below + 2 && wo_target_refused(m->stack[m->sp - 2], m->op)
                   ? "APPEND appends only to a list"
                   : NULL;
    case 's':
        return m->sp >= below + 3 && wo_target_refused(m->stack[m->sp - 3], m->op)
                   ? "SETITEM sets items only of a dict, OrderedDict or Counter"
                   : NULL;
    case 'e':
    case 'u': {
        size_t before = m->nmarks > 1 ? m->marks[m->nmarks - 2] : 0;
        if (!m->nmarks || below <= before || !wo_target_refused(m->stack[below - 1], m->op))
            return NULL;
        return m->op == 'e' ? "APPENDS extends only a list, even by nothing"
                            : "SETITEMS sets items only of a dict, OrderedDict or Counter, even "
                              "no items";
    }
    case 'b':
        if (m->sp < below + 2) return NULL;
        t = m->stack[m->sp - 2];
        if (wo_target_refused(t, m->op))
            return "BUILD builds only a tensor, Parameter, OrderedDict or an instance of an "
                   "allowed class";
        return wo_is_odict(t) && wo_odict_state_refused(m->stack[m->sp - 1])
                   ? "BUILD updates an OrderedDict's attributes only from a dict or pairs"
                   : NULL;
    case 'R':
    case 0x81:
        return m->sp >= below + 2 && m->stack[m->sp - 2]->kind != CKPT_KIND_GLOBAL_
                   ? "it calls only an allowed global"
                   : NULL;
    case 'Q':
        return m->sp > below && wo_pid_refused(m->stack[m->sp - 1])
                   ? "a persistent id must be an int or a tuple naming 'storage'"
                   : NULL;
    case 'U':
        return m->pos < m->len && m->len - m->pos - 1 >= m->buf[m->pos] &&
                       !ckpt_utf8_check(m->buf + m->pos + 1, m->buf[m->pos], 0)
                   ? "torch.load decodes SHORT_BINSTRING text as UTF-8"
                   : NULL;
    default: return NULL;
    }
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(machine *m, int code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckpt_err(code, m->o->file, m->o->member, m->o->base_offset + m->op_pos, "%s: %s",
                    op_name(m->op), msg);
}

static int nomem(machine *m) { return fail(m, CKPT_E_NOMEM, "out of memory"); }

/* Reports ev as the event of the current opcode. */
static void emit_event(machine *m, pk_event *ev) {
    if (!m->o->on_event) return;
    ev->opcode = m->op;
    ev->offset = m->o->base_offset + m->op_pos;
    m->o->on_event(m->o->ctx, ev);
}

static void emit(machine *m, pk_event_kind kind, const char *module, const char *name, int allowed,
                 int symbolic) {
    pk_event ev = {
        .kind = kind, .module = module, .name = name, .allowed = allowed, .symbolic = symbolic};
    emit_event(m, &ev);
}

/* ---------------------------------------------------------------- input */

/* FRAME (protocol 4) as CPython's _pickle.c reads it. A memory
 * unpickler (pickle.loads) only checks that the frame's bytes are there; a
 * file unpickler (torch.load reads io.BytesIO, pickle.load a file) reads
 * the frame into a buffer and serves operands from it while it has bytes
 * left. Both read the same bytes unless a read needs more than the buffer
 * holds: _Unpickler_Read then drops the rest of the buffer and reads on
 * after the frame, while a memory unpickler reads on inside it. So an
 * operand or text line that starts inside a frame and ends past it has two
 * readings (refused, CKPT_E_FORMAT), except the data of
 * BINBYTES/SHORT_BINBYTES/BINBYTES8/BYTEARRAY8, which _Unpickler_ReadInto
 * takes from the buffer and then the file, as one run. A read that starts
 * exactly at the end of the frame is after it for every reader. */
HOT void frame_leave_at_end(machine *m) {
    if (m->pos == m->end && m->in_frame) {
        m->in_frame = 0;
        m->end = m->len;
    }
}

/* The error of take(), kept out of its way. */
static int take_fail(machine *m, size_t n) {
    if (n > m->len - m->pos)
        return fail(m, CKPT_E_TRUNCATED, "expected %zu operand bytes, the input has %zu left", n,
                    m->len - m->pos);
    return fail(m, CKPT_E_FORMAT,
                "operand of %zu bytes crosses the end of its FRAME at "
                "offset %" PRIu64 ": a file unpickler (torch.load) and a "
                "memory one (pickle.loads) read different bytes",
                n, m->o->base_offset + m->frame_end);
}

/* Hands out the next n operand bytes. Past the input: CKPT_E_TRUNCATED;
 * across the end of the current frame: CKPT_E_FORMAT (see above). */
HOT int take(machine *m, size_t n, const uint8_t **p) {
    *p = NULL;
    frame_leave_at_end(m);
    if (n > m->end - m->pos) return take_fail(m, n);
    *p = m->buf + m->pos;
    m->pos += n;
    return 0;
}

/* The data of the bytes opcodes, which every reader takes as one run
 * whether or not it crosses the end of the frame. */
static int take_run(machine *m, size_t n, const uint8_t **p) {
    *p = NULL;
    if (n > m->len - m->pos) return take_fail(m, n);
    *p = m->buf + m->pos;
    m->pos += n;
    if (m->in_frame && m->pos >= m->frame_end) {
        m->in_frame = 0;
        m->end = m->len;
    }
    return 0;
}

/* A protocol-0 text operand: the bytes up to '\n' (excluded, consumed). */
static int take_line(machine *m, const uint8_t **p, size_t *n) {
    *p = NULL;
    *n = 0;
    frame_leave_at_end(m);
    const uint8_t *s = m->buf + m->pos;
    const uint8_t *nl = memchr(s, '\n', m->end - m->pos);
    if (!nl) {
        if (m->in_frame && memchr(s, '\n', m->len - m->pos))
            return fail(m, CKPT_E_FORMAT,
                        "text operand crosses the end of its FRAME at offset "
                        "%" PRIu64 ": a file unpickler (torch.load) and a "
                        "memory one (pickle.loads) read different lines",
                        m->o->base_offset + m->frame_end);
        return fail(m, CKPT_E_TRUNCATED, "expected a text operand ending in a newline");
    }
    *p = s;
    *n = (size_t)(nl - s);
    m->pos += *n + 1;
    return 0;
}

HOT uint64_t le_bytes(const uint8_t *p, size_t n) {
    switch (n) { /* the common sizes spelled out: each becomes one load */
    case 1: return p[0];
    case 2: return (uint64_t)p[0] | (uint64_t)p[1] << 8;
    case 4:
        return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
    default: {
        uint64_t x = 0;
        for (size_t i = n; i-- > 0;) x = x << 8 | p[i];
        return x;
    }
    }
}

/* Little-endian unsigned operand of n (1, 2, 4 or 8) bytes. */
HOT int take_uint(machine *m, size_t n, uint64_t *x) {
    *x = 0;
    const uint8_t *p;
    int rc = take(m, n, &p);
    if (rc) return rc;
    *x = le_bytes(p, n);
    return 0;
}

/* ---------------------------------------------------------------- stack */

HOT size_t fence(const machine *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

/* min(stack_cap, max_stack - nmarks): MARK checks that nmarks stays
 * below max_stack. */
static void set_push_lim(machine *m) {
    uint64_t room = m->max_stack - m->nmarks;
    m->push_lim = room < m->stack_cap ? (size_t)room : m->stack_cap;
}

/* push at push_lim: the stack grows, or the run is past max_stack. */
static int push_room(machine *m) {
    if (m->sp + m->nmarks >= m->max_stack)
        return fail(m, CKPT_E_LIMIT, "stack and marks exceed %" PRIu64 " entries", m->max_stack);
    if (m->sp == m->stack_cap && ckpt_arena_grow(&m->scratch, (void **)&m->stack, &m->stack_cap,
                                                 m->sp + 1, sizeof *m->stack))
        return nomem(m);
    set_push_lim(m);
    return 0;
}

HOT int push(machine *m, ckpt_value *v) {
    if (!v) return nomem(m);
    int rc;
    if (m->sp >= m->push_lim && (rc = push_room(m))) return rc;
    /* the first push is the opcode that built it (value.h pk_at); a memo
     * GET or a builder's argument handed back keeps its own */
    if (!v->pk_at && m->op_pos < CKPT_PK_SHARED - 1) v->pk_at = (uint32_t)m->op_pos + 1;
    m->stack[m->sp++] = v;
    return 0;
}

static int underflow(machine *m) {
    return fail(m, CKPT_E_FORMAT,
                m->sp > 0 ? "expected a value above the last MARK"
                          : "expected a value on the stack (stack underflow)");
}

HOT int pop(machine *m, ckpt_value **v) {
    *v = NULL;
    if (m->sp <= fence(m)) return underflow(m);
    *v = m->stack[--m->sp];
    return 0;
}

HOT int top(machine *m, ckpt_value **v) {
    *v = NULL;
    if (m->sp <= fence(m)) return underflow(m);
    *v = m->stack[m->sp - 1];
    return 0;
}

/* ---------------------------------------------------------------- reuse */

/* A state_dict pickle makes, per tensor, a persistent id tuple, the
 * storage value persistent_load returns, a shape, a stride and an
 * argument tuple that no one can reach once the tensor is built: 40% of
 * the memory of the run. The machine marks the TUPLE and STORAGE_ values
 * it makes as solo (u.pk.solo) and clears the mark for good where a
 * second reference can appear: DUP, GET, a PUT of a key some GET reads
 * (the memo is the only way back to a value that left the stack:
 * fetched()), a value a call hands back (it may be an argument). A value
 * on the stack fills one slot unless DUP or GET copied it, and an opcode
 * that takes it off the stack moves that one reference; so a solo value
 * has exactly one holder, and a solo item of a tuple is held by that
 * tuple alone. When a solo tuple is consumed by a call that keeps
 * nothing of its arguments (ckpt_builders_forgets_args), its memory and
 * that of its solo items is reused for later values of the same size
 * (the OrderedDict of a rebuild's hooks too: its empty argument tuple);
 * so is a solo persistent id's once persistent_load has answered it (not
 * its items, which persistent_load may keep). A value that leaves the
 * stack any other way (into a list, dict or set, BUILD state, an
 * object's arguments) is never released. Under AddressSanitizer a
 * released block is poisoned and never reused: any later read of it is
 * reported. */
HOT int is_solo(const ckpt_value *v) {
    return (v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_STORAGE_) && v->u.pk.solo;
}

HOT void not_solo(ckpt_value *v) {
    if (v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_STORAGE_) v->u.pk.solo = 0;
}

/* The bytes of a tuple collect() makes: the value, then its n items. */
HOT size_t tuple_bytes(size_t n) {
    return (sizeof(ckpt_value) + n * sizeof(ckpt_value *) + 15) & ~(size_t)15;
}

/* bytes (a multiple of 16) for a value: a released block of that size,
 * else new ones from the arena. Not zeroed. */
HOT void *spare_or_new(machine *m, size_t bytes) {
    void **head = bytes >> 4 < SPARES ? &m->spare[bytes >> 4] : NULL;
    if (head && *head) {
        void *p = *head;
        *head = *(void **)p;
        return p;
    }
    return ckpt_arena_alloc_raw(m->a, bytes);
}

/* A value the machine made, empty, from a released block when there is
 * one. NULL out of memory. */
HOT ckpt_value *value_new(machine *m, int kind) {
    ckpt_value *v = spare_or_new(m, sizeof *v);
    if (v) *v = (ckpt_value){.kind = (uint8_t)kind};
    return v;
}

/* v's memory, which nothing can reach any more, for a later value of its
 * size: a STORAGE_ value (persistent_load's, one value) or a tuple made
 * by collect() or EMPTY_TUPLE. */
HOT void release(machine *m, ckpt_value *v) {
    size_t bytes = sizeof *v;
    if (v->kind == CKPT_KIND_TUPLE) {
        if (v->u.seq.n && v->u.seq.items != (ckpt_value **)(v + 1)) return; /* not collect's */
        bytes = tuple_bytes(v->u.seq.n);
    }
    if (bytes >> 4 >= SPARES) return;
#ifdef PK_ASAN
    (void)m;
    ASAN_POISON_MEMORY_REGION(v, bytes);
#else
    *(void **)v = m->spare[bytes >> 4];
    m->spare[bytes >> 4] = v;
#endif
}

/* ckpt_builders_forgets_args, asked once per reference: a pickle
 * memoizes the functions it calls for every tensor, two in turn (the
 * OrderedDict of its hooks, the rebuild), which one remembered answer
 * missed every time (200k lookups for 100k tensors). A reference is
 * never released, so its address names it for the whole run. */
HOT int forgets(machine *m, const ckpt_value *callable) {
    if (callable->kind != CKPT_KIND_GLOBAL_) return 0;
    if (callable == m->forgets_of[0]) return m->forgets[0];
    int f = callable == m->forgets_of[1] ? m->forgets[1] : ckpt_builders_forgets_args(callable);
    m->forgets_of[1] = m->forgets_of[0];
    m->forgets[1] = m->forgets[0];
    m->forgets_of[0] = callable;
    m->forgets[0] = f;
    return f;
}

/* args, a solo tuple consumed by a call that keeps nothing of it, and
 * its solo items, which it alone held: one level (a tuple item's own solo
 * items are left, never reused). */
static void release_args(machine *m, ckpt_value *args) {
    for (size_t i = 0; i < args->u.seq.n; i++)
        if (is_solo(args->u.seq.items[i])) release(m, args->u.seq.items[i]);
    release(m, args);
}

/* Closes the innermost MARK: its items are stack[*start .. m->sp). The
 * caller consumes them and sets m->sp = *start. */
static int pop_mark(machine *m, size_t *start) {
    *start = 0;
    if (m->nmarks == 0) return fail(m, CKPT_E_FORMAT, "expected a MARK on the mark stack");
    *start = m->marks[--m->nmarks];
    return 0;
}

/* A LIST, TUPLE or SET of stack[start .. sp), which is then dropped. In
 * scan mode only a tuple keeps its items. The value and its items are one
 * allocation, copied item by item (a state_dict builds four small tuples
 * per tensor): the arena's total grows as by two, the value's size being
 * a multiple of its alignment. */
_Static_assert(sizeof(ckpt_value) % 16 == 0, "ckpt_value keeps the items after it aligned");
HOT int collect(machine *m, int kind, size_t start, ckpt_value **out) {
    *out = NULL;
    size_t n = m->sp - start; /* n <= sp <= max_stack: no overflow below */
    int keep = n && (!m->scan || kind == CKPT_KIND_TUPLE);
    ckpt_value *v = spare_or_new(m, tuple_bytes(keep ? n : 0));
    if (!v) return nomem(m);
    *v = (ckpt_value){.kind = (uint8_t)kind};
    if (keep) {
        ckpt_value **items = (ckpt_value **)(v + 1), *const *from = m->stack + start;
        /* TUPLE1..3, a persistent id (5 items), a rebuild's arguments (6,
         * 7): copied without a call */
        switch (n) {
        case 7: items[6] = from[6]; /* fall through */
        case 6: items[5] = from[5]; /* fall through */
        case 5: items[4] = from[4]; /* fall through */
        case 4: items[3] = from[3]; /* fall through */
        case 3: items[2] = from[2]; /* fall through */
        case 2: items[1] = from[1]; /* fall through */
        case 1: items[0] = from[0]; break;
        default: memcpy(items, from, n * sizeof *items);
        }
        v->u.seq.items = items;
        v->u.seq.n = v->u.seq.cap = n;
    }
    m->sp = start;
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- memo */

/* Writers number memo entries from 0 up (MEMOIZE is len(memo); pickle.py
 * and _pickle.c give BINPUT the same index), and a run memoizes almost
 * every str and container, so the memo is an array indexed by key while
 * keys stay dense; it grows geometrically, up to max_pickle_memo slots,
 * only while at least a quarter of it would be in use. Any other key (a
 * crafted PUT 2^32-1) goes to a hash map, so a huge index costs nothing.
 * A key lives in one of the two: a key hashed before the array grew over
 * it stays in the hash map. The hash is seeded from addresses (ASLR) so
 * that crafted keys cannot force long probe chains; results never depend
 * on it. */
#define DENSE_MIN 64

/* The array is made of chunks allocated when a key in them is first PUT,
 * so that growing it copies no slots and touches no page before a key
 * lands on it: a state_dict of 100k tensors memoizes 800k values, and a
 * contiguous array grown by realloc copied and zeroed 16 MiB for 6.4 MiB
 * of slots. */
#define MEMO_CHUNK_BITS 12
#define MEMO_CHUNK ((size_t)1 << MEMO_CHUNK_BITS)

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static memo_slot *memo_slot_for(memo_slot *t, size_t cap, uint64_t seed, uint64_t key) {
    size_t mask = cap - 1;
    size_t i = (size_t)mix(key ^ seed) & mask;
    while (t[i].v && t[i].key != key) i = (i + 1) & mask;
    return &t[i];
}

/* What the hashed slot of a key no GET reads holds: never read, not NULL. */
static ckpt_value unkept_;
#define UNKEPT (&unkept_)

/* The hashed entry of key (v NULL: none), or NULL when nothing is hashed. */
static memo_slot *hashed(const machine *m, uint64_t key) {
    if (!m->hash_n) return NULL;
    memo_slot *s = memo_slot_for(m->memo, m->memo_cap, m->seed, key);
    return s->v ? s : NULL;
}

/* The dense slot of key (below dense_cap), or NULL when its chunk is not
 * made yet. */
HOT ckpt_value **dense_at(const machine *m, uint64_t key) {
    ckpt_value **c = m->dense[key >> MEMO_CHUNK_BITS];
    return c ? &c[key & (MEMO_CHUNK - 1)] : NULL;
}

/* The dense slot of key (below dense_cap), its chunk made when needed;
 * NULL out of memory. */
static ckpt_value **dense_make(machine *m, uint64_t key) {
    ckpt_value ***c = &m->dense[key >> MEMO_CHUNK_BITS];
    if (!*c) {
        if (!(*c = ckpt_malloc(MEMO_CHUNK * sizeof **c))) return NULL;
        memset(*c, 0, MEMO_CHUNK * sizeof **c);
        m->dense_bytes += MEMO_CHUNK * sizeof **c;
    }
    return &(*c)[key & (MEMO_CHUNK - 1)];
}

HOT ckpt_value *memo_get(const machine *m, uint64_t key) {
    ckpt_value **d = key < m->dense_cap ? dense_at(m, key) : NULL;
    if (d && *d) return *d;
    memo_slot *s = hashed(m, key);
    return s && s->v != UNKEPT ? s->v : NULL;
}

/* Grows the array to cover key when that keeps it a quarter full. Returns
 * 1 when key is now below dense_cap, 0 when key is to be hashed, or an
 * error. */
static int dense_cover(machine *m, uint64_t key) {
    uint64_t limit = m->lim->max_pickle_memo;
    if (key >= limit) return 0;
    uint64_t cap = m->dense_cap ? m->dense_cap : DENSE_MIN;
    while (cap <= key) {
        if (cap > UINT64_MAX / 2) return 0;
        cap *= 2;
    }
    if (cap > limit) cap = limit;
    if (cap > DENSE_MIN && (m->dense_n + 1) * 4 < cap) return 0;
    if (cap > SIZE_MAX / sizeof **m->dense) return 0;
    /* the bits of the keys kept nowhere, a word per 64 keys; first,
     * so that a failure leaves no chunk past dense_cap unfreed */
    size_t words = ((size_t)cap + 63) / 64, old_words = (m->dense_cap + 63) / 64;
    if (words > old_words) {
        uint64_t *seen = ckpt_realloc(m->seen, words * sizeof *seen);
        if (!seen) return nomem(m);
        memset(seen + old_words, 0, (words - old_words) * sizeof *seen);
        m->seen = seen;
        m->dense_bytes += (words - old_words) * sizeof *seen;
    }
    size_t old = (m->dense_cap + MEMO_CHUNK - 1) >> MEMO_CHUNK_BITS;
    size_t chunks = ((size_t)cap + MEMO_CHUNK - 1) >> MEMO_CHUNK_BITS;
    if (chunks > old) {
        ckpt_value ***dir = ckpt_realloc(m->dense, chunks * sizeof *dir);
        if (!dir) return nomem(m);
        memset(dir + old, 0, (chunks - old) * sizeof *dir);
        m->dense = dir;
        m->dense_bytes += (chunks - old) * sizeof *dir;
    }
    /* the first chunk grows with the array until it is whole */
    size_t first = m->dense_cap < MEMO_CHUNK ? m->dense_cap : MEMO_CHUNK;
    size_t first_to = (size_t)cap < MEMO_CHUNK ? (size_t)cap : MEMO_CHUNK;
    if (first_to > first) {
        ckpt_value **c = ckpt_realloc(m->dense[0], first_to * sizeof *c);
        if (!c) return nomem(m);
        memset(c + first, 0, (first_to - first) * sizeof *c);
        m->dense[0] = c;
        m->dense_bytes += (first_to - first) * sizeof *c;
    }
    m->dense_cap = (size_t)cap;
    return 1;
}

/* The bit of a dense key in m->seen. */
HOT uint64_t seen_bit(uint64_t key) { return (uint64_t)1 << (key & 63); }

/* memo[key] = v; v NULL: key is one no GET reads, counted but not kept. */
static int memo_put(machine *m, uint64_t key, ckpt_value *v) {
    ckpt_value **d = key < m->dense_cap ? dense_at(m, key) : NULL;
    if (v && d && *d) { /* PUT over a key replaces it */
        *d = v;
        return 0;
    }
    if (!v && key < m->dense_cap && (m->seen[key >> 6] & seen_bit(key))) return 0;
    memo_slot *s = hashed(m, key);
    if (s) {
        s->v = v ? v : UNKEPT;
        return 0;
    }
    if (m->memo_n >= m->lim->max_pickle_memo)
        return fail(m, CKPT_E_LIMIT, "memo exceeds %" PRIu64 " entries", m->lim->max_pickle_memo);
    int dense = key < m->dense_cap ? 1 : dense_cover(m, key);
    if (dense < 0) return dense;
    m->memo_n++;
    if (dense) {
        m->dense_n++;
        if (!v) {
            m->seen[key >> 6] |= seen_bit(key);
            return 0;
        }
        if (!(d = dense_make(m, key))) return nomem(m);
        *d = v;
        return 0;
    }
    if ((m->hash_n + 1) * 2 > m->memo_cap) { /* keep the load under 1/2 */
        size_t cap = m->memo_cap ? m->memo_cap * 2 : 64;
        memo_slot *t = ckpt_arena_array(&m->scratch, cap, sizeof *t);
        if (!t) return nomem(m);
        for (size_t i = 0; i < m->memo_cap; i++)
            if (m->memo[i].v) *memo_slot_for(t, cap, m->seed, m->memo[i].key) = m->memo[i];
        m->memo = t;
        m->memo_cap = cap;
    }
    s = memo_slot_for(m->memo, m->memo_cap, m->seed, key);
    s->key = key;
    s->v = v ? v : UNKEPT;
    m->hash_n++;
    return 0;
}

/* ---------------------------------------------------------------- fetches */

/* Before the run, find_fetches notes every memo key a GET, BINGET or
 * LONG_BINGET may read. A PUT of any other key only counts it (len(memo),
 * max_pickle_memo) and keeps nothing: a torch.save pickle PUTs every
 * value and GETs a handful, so the memo would otherwise hold every value
 * of the run, and hold on to memory the machine reuses (release()).
 * Scan mode, whose values die with the run and are never reused, skips
 * the pass (its cost is 21M instructions for a 100k-tensor pickle) and
 * keeps every key. */
HOT int fetched(const machine *m, uint64_t key) {
    if (m->keep_all) return 1;
    if (key < m->fetched_bits) return (int)(m->fetched[key >> 6] >> (key & 63) & 1);
    return key >= m->len && m->fetch_high; /* a key below len past the bits: no GET */
}

/* note_fetch's growth of the bits (doubling, up to 2 * len) or its flag
 * for a key at or past len, which no writer uses. */
static int note_fetch_far(machine *m, uint64_t key) {
    if (key >= m->len) {
        m->fetch_high = 1;
        return 0;
    }
    size_t bits = m->fetched_bits ? m->fetched_bits : 256;
    while (bits <= key) bits *= 2;
    size_t old = m->fetched_bits / 64, words = bits / 64;
    uint64_t *f = ckpt_realloc(m->fetched, words * sizeof *f);
    if (!f) return nomem(m);
    memset(f + old, 0, (words - old) * sizeof *f);
    m->fetched = f;
    m->fetched_bits = bits;
    m->dense_bytes += (words - old) * sizeof *f;
    m->fetched[key >> 6] |= (uint64_t)1 << (key & 63);
    return 0;
}

HOT int note_fetch(machine *m, uint64_t key) {
    if (key >= m->fetched_bits) return note_fetch_far(m, key);
    m->fetched[key >> 6] |= (uint64_t)1 << (key & 63);
    return 0;
}

/* ---------------------------------------------------------------- scalars */

/* A scalar, or in scan mode the placeholder of its kind: no event depends
 * on the value, so none is built. None, bools and small ints are made
 * once per run (SMALL_MIN). */
/* v kept in *slot for every later use: built by no one opcode (pk_at). */
static ckpt_value *keep_shared(ckpt_value **slot, ckpt_value *v) {
    if (v) v->pk_at = CKPT_PK_SHARED;
    return *slot = v;
}

HOT ckpt_value *new_int(machine *m, int64_t x) {
    if (m->scan) return m->ph_int;
    if (x < SMALL_MIN || x > SMALL_MAX) {
        ckpt_value *v = value_new(m, CKPT_KIND_INT);
        if (v) v->u.i.v = x;
        return v;
    }
    ckpt_value **v = &m->small[x - SMALL_MIN];
    return *v ? *v : keep_shared(v, ckpt_value_new_int(m->a, x));
}

static ckpt_value *new_float(machine *m, double x) {
    return m->scan ? m->ph_float : ckpt_value_new_float(m->a, x);
}

static ckpt_value *new_bool(machine *m, int x) {
    if (m->scan) return m->ph_bool;
    ckpt_value **v = &m->bools[x != 0];
    return *v ? *v : keep_shared(v, ckpt_value_new_bool(m->a, x));
}

static ckpt_value *new_none(machine *m) {
    if (m->scan) return m->ph_none;
    return m->none ? m->none : keep_shared(&m->none, ckpt_value_new(m->a, CKPT_KIND_NONE));
}

/* ---------------------------------------------------------------- text */

/* Py_ISSPACE and C isspace in the C locale. */
static int is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Digit value in bases up to 36, 99 for anything else. */
static unsigned digit_value(uint8_t c) {
    if (c >= '0' && c <= '9') return (unsigned)(c - '0');
    if (c >= 'a' && c <= 'z') return (unsigned)(c - 'a' + 10);
    if (c >= 'A' && c <= 'Z') return (unsigned)(c - 'A' + 10);
    return 99;
}

/* The length of a text operand as C sees it: CPython passes the line to
 * strtol, PyLong_FromString and PyOS_string_to_double as a C string, so
 * a NUL ends it. */
static size_t c_len(const uint8_t *p, size_t n) {
    const uint8_t *nul = memchr(p, '\0', n);
    return nul ? (size_t)(nul - p) : n;
}

/* An int literal as PyLong_FromString(text, NULL, base) reads it: blanks
 * around, a sign, then for base 0 a 0x/0o/0b prefix (binary bases) or
 * decimal digits without a leading zero unless all are zeros; base 10
 * takes decimal digits only. One underscore may follow the prefix and
 * separate digits. */
typedef struct py_int {
    int neg;
    unsigned base;         /* 2, 8, 10 or 16 */
    const uint8_t *digits; /* digit characters, underscores included */
    size_t span;           /* bytes of digits[] */
    size_t ndigits;        /* digits in it */
} py_int;

/* 0, or -1 when p[0..n) is no such literal. */
static int py_int_parse(const uint8_t *p, size_t n, unsigned base, py_int *x) {
    size_t i = 0;
    int old_octal = 0;
    n = c_len(p, n);
    while (i < n && is_space(p[i])) i++;
    x->neg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) x->neg = p[i++] == '-';
    uint8_t c1 = i + 1 < n ? (uint8_t)(p[i + 1] | 0x20) : 0;
    if (base == 0) {
        if (i >= n || p[i] != '0')
            base = 10;
        else if (c1 == 'x')
            base = 16;
        else if (c1 == 'o')
            base = 8;
        else if (c1 == 'b')
            base = 2;
        else
            base = 10, old_octal = 1;
        if (base != 10) {
            i += 2;
            if (i < n && p[i] == '_') i++;
        }
    }
    if (i < n && p[i] == '_') return -1;
    x->base = base;
    x->digits = p + i;
    x->ndigits = 0;
    uint8_t prev = 0;
    for (; i < n && (digit_value(p[i]) < base || p[i] == '_'); prev = p[i++]) {
        if (p[i] != '_')
            x->ndigits++;
        else if (prev == '_')
            return -1;
    }
    if (prev == '_' || x->ndigits == 0) return -1;
    x->span = (size_t)(p + i - x->digits);
    if (old_octal)
        for (size_t k = 0; k < x->span; k++)
            if (x->digits[k] != '0' && x->digits[k] != '_') return -1;
    while (i < n && is_space(p[i])) i++;
    return i == n ? 0 : -1;
}

/* |x| when it fits in 64 bits: 1, else 0. */
static int py_int_u64(const py_int *x, uint64_t *out) {
    uint64_t v = 0;
    for (size_t k = 0; k < x->span; k++) {
        if (x->digits[k] == '_') continue;
        if (ckpt_mul_overflow(v, x->base, &v) ||
            ckpt_add_overflow(v, digit_value(x->digits[k]), &v))
            return 0;
    }
    *out = v;
    return 1;
}

/* A big int of a binary base (beyond int64): two's-complement little-endian
 * bytes, exact up to CKPT_BIGINT_MAX_BYTES; beyond that a placeholder in
 * scan mode (a big int is data) and CKPT_E_LIMIT in reader mode. */
static int big_binary(machine *m, const py_int *x, ckpt_value **out) {
    unsigned bits = x->base == 16 ? 4 : x->base == 8 ? 3 : 1;
    size_t lead = 0, sig = 0;
    while (lead < x->span && (x->digits[lead] == '0' || x->digits[lead] == '_')) lead++;
    for (size_t k = lead; k < x->span; k++) sig += x->digits[k] != '_';
    if (sig > (CKPT_BIGINT_MAX_BYTES * 8 - 1) / bits) { /* with its sign bit */
        if (m->scan) {
            *out = m->ph_int;
            return 0;
        }
        return fail(m, CKPT_E_LIMIT, "integer of %zu bits, at most %d bytes allowed", sig * bits,
                    CKPT_BIGINT_MAX_BYTES);
    }
    size_t nbytes = sig * bits / 8 + 1, bit = 0;
    uint8_t *le = ckpt_arena_alloc(&m->scratch, nbytes);
    if (!le) return nomem(m);
    memset(le, 0, nbytes);
    for (size_t k = x->span; k-- > lead;) {
        if (x->digits[k] == '_') continue;
        unsigned d = digit_value(x->digits[k]);
        for (unsigned b = 0; b < bits; b++, bit++)
            if (d >> b & 1u) le[bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
    if (x->neg) { /* two's complement negate */
        unsigned carry = 1;
        for (size_t k = 0; k < nbytes; k++) {
            unsigned v = (unsigned)(uint8_t)~le[k] + carry;
            le[k] = (uint8_t)v;
            carry = v >> 8;
        }
    }
    *out = ckpt_value_new_int_le(m->a, le, nbytes);
    return *out ? 0 : nomem(m);
}

/* The value of a parsed int literal. A decimal one beyond int64 keeps its
 * normalised decimal text (exact, without converting it); Python's int()
 * refuses more than 4300 decimal digits (binary bases have no such limit). */
static int py_int_value(machine *m, const py_int *x, ckpt_value **out) {
    uint64_t mag;
    if (x->base == 10 && x->ndigits > MAX_INT_DIGITS)
        return fail(m, CKPT_E_LIMIT, "integer of %zu digits, at most %d allowed", x->ndigits,
                    MAX_INT_DIGITS);
    if (py_int_u64(x, &mag) && mag <= (uint64_t)INT64_MAX + (uint64_t)x->neg) {
        *out = new_int(m, x->neg ? (int64_t)(0 - mag) : (int64_t)mag);
        return *out ? 0 : nomem(m);
    }
    if (x->base != 10) return big_binary(m, x, out);
    char *text = ckpt_arena_alloc(m->a, x->ndigits + 2);
    if (!text || !(*out = ckpt_value_new(m->a, CKPT_KIND_INT))) return nomem(m);
    size_t k = 0, t = 0;
    if (x->neg) text[t++] = '-';
    for (; k < x->span && (x->digits[k] == '0' || x->digits[k] == '_'); k++) {
    }
    for (; k < x->span; k++)
        if (x->digits[k] != '_') text[t++] = (char)x->digits[k];
    text[t] = '\0';
    (*out)->u.i.decimal = text;
    return 0;
}

static int bad_text(machine *m, const char *what, const uint8_t *p, size_t n) {
    return fail(m, CKPT_E_FORMAT, "expected %s, got '%.*s'", what, (int)(n < 40 ? n : 40),
                (const char *)p);
}

/* INT: _pickle.c load_int. strtol(text, &end, 0) first (C's syntax: a
 * leading 0 means octal), taken when it reads up to the newline or a NUL
 * without overflow; a two-byte line reading 0 or 1 is a bool (I00, I01);
 * anything else goes to PyLong_FromString(text, NULL, 0). */
static int op_int(machine *m, const uint8_t *p, size_t n, ckpt_value **out) {
    size_t cut = c_len(p, n), i = 0, start;
    while (i < cut && is_space(p[i])) i++;
    int neg = 0, overflow = 0;
    if (i < cut && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
    unsigned base = 10;
    if (i < cut && p[i] == '0') {
        base = 8;
        if (i + 2 < cut && (p[i + 1] | 0x20) == 'x' && hexval(p[i + 2]) >= 0) base = 16, i += 2;
    }
    uint64_t mag = 0;
    for (start = i; i < cut && digit_value(p[i]) < base; i++)
        if (ckpt_mul_overflow(mag, base, &mag) || ckpt_add_overflow(mag, digit_value(p[i]), &mag))
            overflow = 1;
    if (i == start) i = 0, mag = 0; /* no conversion: end is the text itself */
    if (mag > (uint64_t)INT64_MAX + (uint64_t)neg) overflow = 1;
    if (!overflow && i == cut) {
        int64_t v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        *out = n == 2 && (v == 0 || v == 1) ? new_bool(m, v == 1) : new_int(m, v);
        return *out ? 0 : nomem(m);
    }
    py_int x;
    if (py_int_parse(p, n, 0, &x)) return bad_text(m, "an int", p, n);
    return py_int_value(m, &x, out);
}

/* Memo index of GET/PUT: PyLong_FromString(text, NULL, 10) that fits in a
 * Py_ssize_t. A negative one is refused (PUT) or never found (GET). */
static int parse_index(machine *m, const uint8_t *p, size_t n, uint64_t *key) {
    *key = 0;
    py_int x;
    if (py_int_parse(p, n, 10, &x)) return bad_text(m, "a decimal memo index", p, n);
    if (x.ndigits > MAX_INT_DIGITS)
        return fail(m, CKPT_E_LIMIT, "integer of %zu digits, at most %d allowed", x.ndigits,
                    MAX_INT_DIGITS);
    if (!py_int_u64(&x, key) || *key > (uint64_t)INT64_MAX)
        return fail(m, CKPT_E_FORMAT, "memo index does not fit in a Py_ssize_t");
    if (x.neg && *key)
        return fail(m, CKPT_E_FORMAT,
                    m->op == OP_PUT ? "negative PUT argument"
                                    : "memo key -%" PRIu64 " was never PUT",
                    *key);
    return 0;
}

/* find_fetches: every byte of the input that is a GET, BINGET or
 * LONG_BINGET opcode byte is taken for one, with the operand after it; so
 * the keys noted are all those the run can read, opcode boundaries
 * aside (a byte inside an operand or text adds a key, which only keeps
 * a value longer). A GET's text is its line as parse_index reads it:
 * index characters up to the newline or a NUL; anything else there
 * fails the run. One pass for the three opcode bytes, 16 bytes at a time
 * where SSE2 is there: a torch.save pickle holds them every few bytes
 * (a tensor record's BINGETs; 'g' and 'h' in "weight"), and a memchr
 * pass per byte value paid a call per hit (43M instructions for a
 * 100k-tensor pickle, now 35M). */
static int text_index(const uint8_t *p, size_t left, uint64_t *key) {
    size_t n = 0;
    while (
        n < left &&
        (is_space(p[n]) || digit_value(p[n]) < 10 || p[n] == '_' || p[n] == '+' || p[n] == '-') &&
        p[n] != '\n')
        n++;
    py_int x;
    if (n == left || (p[n] != '\n' && p[n] != '\0') || py_int_parse(p, n, 10, &x) ||
        x.ndigits > MAX_INT_DIGITS || !py_int_u64(&x, key) || *key > (uint64_t)INT64_MAX ||
        (x.neg && *key))
        return 0;
    return 1;
}

/* The key a GET-like byte at buf[i] reads, noted; 0 when there is none. */
static int note_get(machine *m, size_t i) {
    const uint8_t *p = m->buf + i;
    size_t left = m->len - i - 1;
    uint64_t key;
    switch (*p) {
    case OP_BINGET:
        if (!left) return 0;
        key = p[1];
        break;
    case OP_LONG_BINGET:
        if (left < 4) return 0;
        key = le_bytes(p + 1, 4);
        break;
    default: /* OP_GET */
        if (!text_index(p + 1, left, &key)) return 0;
    }
    return note_fetch(m, key);
}

NOINLINE int find_fetches(machine *m) {
    const uint8_t *b = m->buf;
    size_t i = 0;
    int rc;
#if defined(__SSE2__)
    const __m128i g = _mm_set1_epi8(OP_GET), h = _mm_set1_epi8(OP_BINGET),
                  j = _mm_set1_epi8(OP_LONG_BINGET);
    for (; m->len - i >= 16; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, g), _mm_cmpeq_epi8(x, h)),
                                   _mm_cmpeq_epi8(x, j));
        for (unsigned bits = (unsigned)_mm_movemask_epi8(hit); bits; bits &= bits - 1) {
            size_t k = i + (size_t)__builtin_ctz(bits);
            /* most hits: a BINGET of a key the bits already cover */
            if (b[k] == OP_BINGET && m->len - k > 1 && b[k + 1] < m->fetched_bits)
                m->fetched[b[k + 1] >> 6] |= (uint64_t)1 << (b[k + 1] & 63);
            else if ((rc = note_get(m, k)))
                return rc;
        }
    }
#endif
    for (; i < m->len; i++)
        if ((b[i] == OP_GET || b[i] == OP_BINGET || b[i] == OP_LONG_BINGET) &&
            (rc = note_get(m, i)))
            return rc;
    return 0;
}

/* 1 if p[0..n) starts with `word`, ignoring case. */
static int starts_nocase(const uint8_t *p, size_t n, const char *word) {
    size_t k = strlen(word);
    if (n < k) return 0;
    for (size_t i = 0; i < k; i++)
        if ((p[i] | 0x20) != (uint8_t)word[i]) return 0;
    return 1;
}

/* FLOAT: _pickle.c load_float, PyOS_string_to_double: no blanks, a sign,
 * then decimal digits with an optional point and exponent, or inf,
 * infinity or nan in any case; the newline or a NUL must follow. A finite
 * literal too large for a double is refused (OverflowError). */
static int parse_float(machine *m, const uint8_t *p, size_t n, double *x) {
    *x = 0;
    size_t i = 0, digits = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) i++;
    size_t num = i;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) digits++;
    if (i < n && p[i] == '.')
        for (i++; i < n && p[i] >= '0' && p[i] <= '9'; i++) digits++;
    int literal = 0;
    if (digits == 0) {
        i = num;
        if (starts_nocase(p + i, n - i, "nan"))
            i += 3, literal = 1;
        else if (starts_nocase(p + i, n - i, "inf")) {
            i += 3, literal = 1;
            if (starts_nocase(p + i, n - i, "inity")) i += 5;
        } else {
            return bad_text(m, "a float", p, n);
        }
    } else if (i < n && (p[i] | 0x20) == 'e') {
        size_t e = i + 1;
        if (e < n && (p[e] == '+' || p[e] == '-')) e++;
        if (e < n && p[e] >= '0' && p[e] <= '9') {
            while (e < n && p[e] >= '0' && p[e] <= '9') e++;
            i = e;
        }
    }
    if (i < n && p[i] != '\0') return bad_text(m, "a float", p, n);
    char *s = ckpt_arena_strndup(&m->scratch, (const char *)p, i);
    if (!s) return nomem(m);
    *x = strtod(s, NULL);
    if (!literal && (*x > DBL_MAX || *x < -DBL_MAX))
        return fail(m, CKPT_E_FORMAT, "float '%.40s' is too large for a double", s);
    return 0;
}

/* Overwrites each encoded surrogate of valid UTF-8 with U+FFFD (also 3
 * bytes), so that STR stays valid UTF-8. In valid UTF-8, 0xED is always
 * a lead byte. */
static void fix_surrogates(uint8_t *s, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == 0xED && s[i + 1] >= 0xA0) {
            s[i] = 0xEF;
            s[i + 1] = 0xBF;
            s[i + 2] = 0xBD;
            i += 2;
        }
}

/* Appends code point cp as UTF-8 at out[o] (when out is not NULL); returns
 * the byte count. */
static size_t put_utf8(uint8_t *out, size_t o, uint32_t cp) {
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xF0 | cp >> 18);
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (out) memcpy(out + o, b, n);
    return n;
}

/* Python's raw-unicode-escape decoder (protocol-0 UNICODE): bytes are
 * Latin-1 code points, except that \uXXXX and \UXXXXXXXX escapes are
 * decoded when preceded by an odd number of backslashes. Writes UTF-8 to
 * out (NULL: only measures) and its length to *outlen; a lone surrogate
 * becomes U+FFFD and sets *surrogate. Returns 0, or -1 for a malformed
 * escape or a code point above U+10FFFF. */
static int raw_unicode_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *outlen,
                              int *surrogate) {
    size_t i = 0, o = 0;
    while (i < n) {
        if (s[i] != '\\') {
            o += put_utf8(out, o, s[i++]);
            continue;
        }
        size_t run = 0;
        while (i < n && s[i] == '\\') {
            o += put_utf8(out, o, '\\');
            i++, run++;
        }
        if (run % 2 == 0 || i == n || (s[i] != 'u' && s[i] != 'U')) continue;
        o--; /* the last backslash starts the escape */
        size_t count = s[i++] == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < count; k++, i++) {
            if (i == n || hexval(s[i]) < 0) return -1;
            cp = cp << 4 | (uint32_t)hexval(s[i]);
        }
        if (cp > 0x10FFFF) return -1;
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD, *surrogate = 1;
        o += put_utf8(out, o, cp);
    }
    *outlen = o;
    return 0;
}

/* codecs.escape_decode, applied to the quoted body of a protocol-0 STRING
 * (one line, so no \<newline>): \\ \' \" \a \b \f \n \r \t \v, 1-3 octal
 * digits, \xhh; any other escape is kept as written. The output is never
 * longer than the input; its length goes to *outlen. Returns 0, or -1
 * (bad \x, trailing backslash). */
static int escape_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *outlen) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t c = s[i++];
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        if (i == n) return -1;
        c = s[i++];
        switch (c) {
        case '\\':
        case '\'':
        case '"': out[o++] = c; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'v': out[o++] = '\v'; break;
        case 'x':
            if (n - i < 2 || hexval(s[i]) < 0 || hexval(s[i + 1]) < 0) return -1;
            out[o++] = (uint8_t)(hexval(s[i]) << 4 | hexval(s[i + 1]));
            i += 2;
            break;
        default:
            if (c >= '0' && c <= '7') {
                unsigned v = (unsigned)(c - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    v = v * 8 + (unsigned)(s[i++] - '0');
                out[o++] = (uint8_t)v; /* \777 wraps, as in CPython */
            } else {
                out[o++] = '\\';
                out[o++] = c;
            }
        }
    }
    *outlen = o;
    return 0;
}

/* ---------------------------------------------------------------- values */

/* A STR or BYTES value taking ownership of buf[0..n), which must be an
 * arena allocation of n + 1 zeroed-or-written bytes ending in NUL. */
static ckpt_value *str_owned(machine *m, int kind, uint8_t *buf, size_t n) {
    ckpt_value *v = ckpt_value_new(m->a, kind);
    if (!v) return NULL;
    v->u.s.p = (char *)buf;
    v->u.s.len = n;
    return v;
}

/* A STR or BYTES of operand bytes p[0..n): a copy, or in scan mode a view
 * of the input (not NUL-terminated). */
HOT ckpt_value *new_str(machine *m, int kind, const uint8_t *p, size_t n) {
    if (!m->scan) {
        ckpt_value *v = value_new(m, kind);
        if (v && !(v->u.s.p = ckpt_arena_strndup(m->a, (const char *)p, n))) return NULL;
        if (v) v->u.s.len = n;
        return v;
    }
    /* one per str: a view, written once */
    ckpt_value *v = ckpt_arena_alloc(m->a, sizeof *v);
    if (v) *v = (ckpt_value){.kind = (uint8_t)kind, .u.s = {(char *)p, n}};
    return v;
}

/* BINUNICODE and friends: n bytes of UTF-8. */
HOT int op_unicode_bytes(machine *m, size_t n) {
    const uint8_t *p;
    int rc = take(m, n, &p);
    if (rc) return rc;
    int valid = ckpt_utf8_check(p, n, 1);
    if (!valid) return fail(m, CKPT_E_FORMAT, "expected %zu bytes of UTF-8 text", n);
    if (valid == 1) return push(m, new_str(m, CKPT_KIND_STR, p, n));
    ckpt_value *v = ckpt_value_new_str(m->a, CKPT_KIND_STR, p, n); /* a copy to fix */
    if (!v) return nomem(m);
    fix_surrogates((uint8_t *)v->u.s.p, n);
    v->dict_class = CKPT_STR_SURROGATE;
    return push(m, v);
}

/* BINBYTES and friends (kind BYTES), BINSTRING/SHORT_BINSTRING (kind STR:
 * a Python 2 str, kept as STR when it is valid UTF-8, else BYTES). */
static int op_bytes(machine *m, size_t n, int kind) {
    const uint8_t *p;
    int rc = kind == CKPT_KIND_BYTES ? take_run(m, n, &p) : take(m, n, &p);
    if (rc) return rc;
    if (kind == CKPT_KIND_STR && !ckpt_utf8_check(p, n, 0)) kind = CKPT_KIND_BYTES;
    return push(m, new_str(m, kind, p, n));
}

static int op_string(machine *m) {
    const uint8_t *p;
    size_t n;
    int rc = take_line(m, &p, &n);
    if (rc) return rc;
    if (n < 2 || p[0] != p[n - 1] || (p[0] != '\'' && p[0] != '"'))
        return fail(m, CKPT_E_FORMAT, "expected a quoted string operand");
    uint8_t *buf = ckpt_arena_alloc(m->a, n - 1);
    if (!buf) return nomem(m);
    size_t len;
    if (escape_decode(p + 1, n - 2, buf, &len))
        return fail(m, CKPT_E_FORMAT, "expected valid string escapes");
    int utf8 = ckpt_utf8_check(buf, len, 0);
    return push(m, str_owned(m, utf8 ? CKPT_KIND_STR : CKPT_KIND_BYTES, buf, len));
}

static int op_unicode_text(machine *m) {
    const uint8_t *p;
    size_t n, len;
    int rc = take_line(m, &p, &n), surrogate = 0;
    if (rc) return rc;
    if (raw_unicode_decode(p, n, NULL, &len, &surrogate))
        return fail(m, CKPT_E_FORMAT,
                    "expected raw-unicode-escape text with "
                    "valid \\u/\\U escapes");
    uint8_t *buf = ckpt_arena_alloc(m->a, len + 1);
    if (!buf) return nomem(m);
    (void)raw_unicode_decode(p, n, buf, &len, &surrogate);
    ckpt_value *v = str_owned(m, CKPT_KIND_STR, buf, len);
    if (v && surrogate) v->dict_class = CKPT_STR_SURROGATE;
    return push(m, v);
}

/* Python 2 names as Python 3's _compat_pickle maps them when unpickling a
 * protocol 0-2 pickle: NAME_MAPPING first, then IMPORT_MAPPING.
 * ("exceptions", X) maps to ("builtins", X) only for the Python 2
 * exceptions (py2_exceptions): any other name stays in "exceptions", a
 * module Python 3 lacks, so the load fails (a set made from
 * exceptions.set is no set). */
static const struct {
    const char *module, *name, *to_module, *to_name;
} name_map[] = {
    {"__builtin__", "xrange", "builtins", "range"},
    {"__builtin__", "reduce", "functools", "reduce"},
    {"__builtin__", "intern", "sys", "intern"},
    {"__builtin__", "unichr", "builtins", "chr"},
    {"__builtin__", "unicode", "builtins", "str"},
    {"__builtin__", "long", "builtins", "int"},
    {"__builtin__", "basestring", "builtins", "str"},
    {"itertools", "izip", "builtins", "zip"},
    {"itertools", "imap", "builtins", "map"},
    {"itertools", "ifilter", "builtins", "filter"},
    {"itertools", "ifilterfalse", "itertools", "filterfalse"},
    {"itertools", "izip_longest", "itertools", "zip_longest"},
    {"UserDict", "IterableUserDict", "collections", "UserDict"},
    {"UserDict", "UserDict", "collections", "UserDict"},
    {"UserList", "UserList", "collections", "UserList"},
    {"UserString", "UserString", "collections", "UserString"},
    {"whichdb", "whichdb", "dbm", "whichdb"},
    {"_socket", "fromfd", "socket", "fromfd"},
    {"socket", "_socketobject", "socket", "SocketType"},
    {"_multiprocessing", "Connection", "multiprocessing.connection", "Connection"},
    {"multiprocessing.process", "Process", "multiprocessing.context", "Process"},
    {"multiprocessing.forking", "Popen", "multiprocessing.popen_fork", "Popen"},
    {"multiprocessing", "AuthenticationError", "multiprocessing.context", "AuthenticationError"},
    {"multiprocessing", "BufferTooShort", "multiprocessing.context", "BufferTooShort"},
    {"multiprocessing", "ProcessError", "multiprocessing.context", "ProcessError"},
    {"multiprocessing", "TimeoutError", "multiprocessing.context", "TimeoutError"},
    {"urllib", "ContentTooShortError", "urllib.error", "ContentTooShortError"},
    {"urllib", "getproxies", "urllib.request", "getproxies"},
    {"urllib", "pathname2url", "urllib.request", "pathname2url"},
    {"urllib", "quote_plus", "urllib.parse", "quote_plus"},
    {"urllib", "quote", "urllib.parse", "quote"},
    {"urllib", "unquote_plus", "urllib.parse", "unquote_plus"},
    {"urllib", "unquote", "urllib.parse", "unquote"},
    {"urllib", "url2pathname", "urllib.request", "url2pathname"},
    {"urllib", "urlcleanup", "urllib.request", "urlcleanup"},
    {"urllib", "urlencode", "urllib.parse", "urlencode"},
    {"urllib", "urlopen", "urllib.request", "urlopen"},
    {"urllib", "urlretrieve", "urllib.request", "urlretrieve"},
    {"urllib2", "HTTPError", "urllib.error", "HTTPError"},
    {"urllib2", "URLError", "urllib.error", "URLError"},
    {"exceptions", "StandardError", "builtins", "Exception"},
};

static const char *const py2_exceptions[] = {
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BufferError",
    "BytesWarning",
    "DeprecationWarning",
    "EOFError",
    "EnvironmentError",
    "Exception",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "NameError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "ReferenceError",
    "RuntimeError",
    "RuntimeWarning",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
};

static const struct {
    const char *module, *to_module;
} module_map[] = {
    {"__builtin__", "builtins"},
    {"copy_reg", "copyreg"},
    {"Queue", "queue"},
    {"SocketServer", "socketserver"},
    {"ConfigParser", "configparser"},
    {"repr", "reprlib"},
    {"markupbase", "_markupbase"},
    {"_winreg", "winreg"},
    {"thread", "_thread"},
    {"dummy_thread", "_dummy_thread"},
    {"dbhash", "dbm.bsd"},
    {"dumbdbm", "dbm.dumb"},
    {"dbm", "dbm.ndbm"},
    {"gdbm", "dbm.gnu"},
    {"xmlrpclib", "xmlrpc.client"},
    {"SimpleXMLRPCServer", "xmlrpc.server"},
    {"DocXMLRPCServer", "xmlrpc.server"},
    {"httplib", "http.client"},
    {"htmlentitydefs", "html.entities"},
    {"HTMLParser", "html.parser"},
    {"Cookie", "http.cookies"},
    {"cookielib", "http.cookiejar"},
    {"BaseHTTPServer", "http.server"},
    {"SimpleHTTPServer", "http.server"},
    {"CGIHTTPServer", "http.server"},
    {"test.test_support", "test.support"},
    {"commands", "subprocess"},
    {"urlparse", "urllib.parse"},
    {"robotparser", "urllib.robotparser"},
    {"urllib2", "urllib.request"},
    {"anydbm", "dbm"},
    {"whichdb", "dbm"},
    {"_abcoll", "collections.abc"},
    {"cPickle", "pickle"},
    {"_elementtree", "xml.etree.ElementTree"},
    {"UserDict", "collections"},
    {"UserList", "collections"},
    {"UserString", "collections"},
    {"StringIO", "io"},
    {"cStringIO", "io"},
    {"Tkinter", "tkinter"},
    {"Dialog", "tkinter.dialog"},
    {"FileDialog", "tkinter.filedialog"},
    {"ScrolledText", "tkinter.scrolledtext"},
    {"SimpleDialog", "tkinter.simpledialog"},
    {"Tix", "tkinter.tix"},
    {"ttk", "tkinter.ttk"},
    {"Tkconstants", "tkinter.constants"},
    {"Tkdnd", "tkinter.dnd"},
    {"tkColorChooser", "tkinter.colorchooser"},
    {"tkCommonDialog", "tkinter.commondialog"},
    {"tkFileDialog", "tkinter.filedialog"},
    {"tkFont", "tkinter.font"},
    {"tkMessageBox", "tkinter.messagebox"},
    {"tkSimpleDialog", "tkinter.simpledialog"},
};

static void map_name(const char **module, const char **name) {
    for (size_t i = 0; i < sizeof name_map / sizeof *name_map; i++)
        if (!strcmp(*module, name_map[i].module) && !strcmp(*name, name_map[i].name)) {
            *module = name_map[i].to_module;
            *name = name_map[i].to_name;
            return;
        }
    if (!strcmp(*module, "exceptions")) {
        for (size_t i = 0; i < sizeof py2_exceptions / sizeof *py2_exceptions; i++)
            if (!strcmp(*name, py2_exceptions[i])) *module = "builtins";
        return;
    }
    for (size_t i = 0; i < sizeof module_map / sizeof *module_map; i++)
        if (!strcmp(*module, module_map[i].module)) {
            *module = module_map[i].to_module;
            return;
        }
}

/* A GLOBAL_ reference to module.name (given as bytes from the pickle),
 * name-mapped, with its PK_EV_GLOBAL event. */
static int make_global(machine *m, const uint8_t *mod, size_t mlen, const uint8_t *name,
                       size_t nlen, ckpt_value **out) {
    char *ms = ckpt_arena_strndup(&m->scratch, (const char *)mod, mlen);
    char *ns = ckpt_arena_strndup(&m->scratch, (const char *)name, nlen);
    if (!ms || !ns) return nomem(m);
    /* Python decodes both as strict UTF-8 and cannot import a name with a
     * NUL; refusing them also keeps the C strings whole. */
    if (!ckpt_utf8_check((const uint8_t *)ms, mlen, 0) ||
        !ckpt_utf8_check((const uint8_t *)ns, nlen, 0) || memchr(ms, '\0', mlen) ||
        memchr(ns, '\0', nlen))
        return fail(m, CKPT_E_FORMAT, "expected module and name as UTF-8 text without NUL bytes");
    const char *module = ms, *qualname = ns;
    if (m->proto < 3) map_name(&module, &qualname);
    int allow = ckpt_builders_allow(module, qualname);
    emit(m, PK_EV_GLOBAL, module, qualname, allow != 0, 0);
    *out = ckpt_value_new_global(m->a, module, qualname);
    if (!*out) return nomem(m);
    (*out)->u.global.allow = allow;
    return 0;
}

/* A symbolic reference: STACK_GLOBAL on operands that are not str, EXT*. */
static int make_symbolic(machine *m, const char *module, const char *name, ckpt_value **out) {
    emit(m, PK_EV_GLOBAL, module, name, 0, 1);
    *out = ckpt_value_new_global(m->a, module, name);
    return *out ? 0 : nomem(m);
}

static int is_symbolic(const ckpt_value *g) { return !strcmp(g->u.global.module, "?"); }

/* What builders see of the run, set once (ckpt_pickle_run); each call
 * only updates the calling opcode. */
static const pk_build_ctx *build_ctx(machine *m) {
    m->ctx.offset = m->o->base_offset + m->op_pos;
    m->ctx.opcode = m->op;
    return &m->ctx;
}

/* REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST: `callable` applied to args (a
 * TUPLE) and kwargs (a DICT or NULL); newobj: as cls.__new__ (NEWOBJ,
 * NEWOBJ_EX). Allowlisted references run their builder; anything else
 * becomes an opaque object that is never called. */
HOT int call(machine *m, ckpt_value *callable, ckpt_value *args, ckpt_value *kwargs, int newobj,
             ckpt_value **out) {
    const pk_build_ctx *c = build_ctx(m);
    const char *name = "?";
    if (callable->kind == CKPT_KIND_GLOBAL_) {
        int symbolic = is_symbolic(callable);
        int allowed = !symbolic && callable->u.global.allow != 0;
        if (m->o->on_event) {
            pk_event ev = {.kind = PK_EV_CALL,
                           .module = callable->u.global.module,
                           .name = callable->u.global.name,
                           .allowed = allowed,
                           .symbolic = symbolic,
                           .args = args};
            emit_event(m, &ev);
        }
        if (allowed)
            return newobj ? ckpt_builders_new(out, c, callable, args, kwargs)
                          : ckpt_builders_call(out, c, callable, args, kwargs);
        if (!symbolic) name = callable->u.global.qualname;
    } else {
        pk_event ev = {.kind = PK_EV_CALL, .module = "?", .name = "?", .symbolic = 1, .args = args};
        emit_event(m, &ev);
    }
    return ckpt_builders_opaque(out, c, name, args, kwargs);
}

static int expect_kind(machine *m, const ckpt_value *v, int kind, const char *what) {
    if (v->kind == kind) return 0;
    return fail(m, CKPT_E_FORMAT, "expected %s as a %s, got a %s", what, ckpt_value_kind_name(kind),
                ckpt_value_kind_name(v->kind));
}

/* The list APPEND(S) and ADDITEMS add to: a LIST (SET for ADDITEMS), or
 * the items of an opaque object, created on first use. */
static int seq_target(machine *m, ckpt_value *t, int kind, ckpt_value **seq) {
    *seq = NULL;
    if (t->kind == CKPT_KIND_OBJECT) {
        if (!t->u.obj.items && !(t->u.obj.items = ckpt_value_new(m->a, CKPT_KIND_LIST)))
            return nomem(m);
        t = t->u.obj.items;
        kind = CKPT_KIND_LIST;
    }
    if (t->kind != kind)
        return fail(m, CKPT_E_FORMAT, "expected a %s (or an object) to add to, got a %s",
                    ckpt_value_kind_name(kind), ckpt_value_kind_name(t->kind));
    if (t->kind == CKPT_KIND_SET && t->alt) /* Python looks up frozenset.add, which it lacks */
        return fail(m, CKPT_E_FORMAT, "expected a set to add to, got a frozenset");
    *seq = t;
    return 0;
}

/* The dict SETITEM(S) add to: a DICT or an opaque object's items. */
static int dict_target(machine *m, ckpt_value *t, ckpt_value **dict) {
    *dict = NULL;
    if (t->kind == CKPT_KIND_OBJECT) {
        if (!t->u.obj.items && !(t->u.obj.items = ckpt_value_new(m->a, CKPT_KIND_DICT)))
            return nomem(m);
        t = t->u.obj.items;
    }
    if (t->kind != CKPT_KIND_DICT)
        return fail(m, CKPT_E_FORMAT, "expected a dict (or an object) to set items in, got a %s",
                    ckpt_value_kind_name(t->kind));
    *dict = t;
    return 0;
}

/* Python hashes dict keys and set items (ckpt_value_hashable). */
HOT int hash_check(machine *m, const ckpt_value *k, const char *as) {
    char msg[160];
    int rc = ckpt_value_hashable(k, as, msg, sizeof msg);
    return rc ? fail(m, rc, "%s", msg) : 0;
}

/* Work beyond one opcode (keys compared), against the same bound. */
static int charge_ops(machine *m, uint64_t n) {
    if (n <= m->ops_limit - m->ops) {
        m->ops += n;
        return 0;
    }
    return fail(m, CKPT_E_LIMIT, "more than %" PRIu64 " opcodes and copies", m->ops_limit);
}

/* dict[k] = v as Python sets it: a key equal to an earlier one of
 * another name (1 and True, 0.0 and -0.0: ckpt_value_dict_twin) keeps
 * that key and takes the value; keys of one name are told apart later
 * (the last wins when the tree is flattened). */
HOT int set_item(machine *m, ckpt_value *dict, ckpt_value *k, ckpt_value *v) {
    int rc = hash_check(m, k, "key");
    if (rc) return rc;
    if (m->scan) return 0;
    char msg[256];
    if ((rc = ckpt_value_key_check(k, msg, sizeof msg))) return fail(m, rc, "%s", msg);
    uint64_t work = 0;
    size_t twin = ckpt_value_dict_twin(dict, k, &work);
    if ((rc = charge_ops(m, work))) return rc;
    if (twin != SIZE_MAX) {
        dict->u.dict.vals[twin] = v;
        return 0;
    }
    if (dict->kind == CKPT_KIND_DICT && (k->kind == CKPT_KIND_BOOL || k->kind == CKPT_KIND_FLOAT))
        dict->alt |= 1;
    return ckpt_value_dict_set(m->a, dict, k, v) ? nomem(m) : 0;
}

/* ---------------------------------------------------------------- opcodes */

HOT int op_get(machine *m, uint64_t key) {
    ckpt_value *v = memo_get(m, key);
    if (!v) return fail(m, CKPT_E_FORMAT, "memo key %" PRIu64 " was never PUT", key);
    not_solo(v);
    return push(m, v);
}

HOT int op_put(machine *m, uint64_t key) {
    ckpt_value *v;
    int rc = top(m, &v);
    if (rc) return rc;
    /* memo_put's common cases: a key the array covers, set or new while
     * nothing is hashed (so it is nowhere else) and the memo has room */
    int room = !m->hash_n && m->memo_n < m->lim->max_pickle_memo;
    if (!fetched(m, key)) {
        uint64_t *w = key < m->dense_cap ? &m->seen[key >> 6] : NULL;
        if (w && (*w & seen_bit(key) || room)) {
            if (!(*w & seen_bit(key))) m->memo_n++, m->dense_n++;
            *w |= seen_bit(key);
            return 0;
        }
        return memo_put(m, key, NULL);
    }
    not_solo(v); /* a GET can push it again */
    ckpt_value **d = key < m->dense_cap ? dense_at(m, key) : NULL;
    if (d && (*d || room)) {
        if (!*d) m->memo_n++, m->dense_n++;
        *d = v;
        return 0;
    }
    return memo_put(m, key, v);
}

/* FRAME: see frame_leave_at_end. A FRAME inside the current one that ends
 * within it changes nothing for any reader (each only checks that the
 * bytes are there); one that reaches past it has two readings. */
static int op_frame(machine *m) {
    uint64_t n;
    int rc;
    if ((rc = take_uint(m, 8, &n))) return rc;
    if (n > m->len - m->pos)
        return fail(m, CKPT_E_TRUNCATED, "FRAME of %" PRIu64 " bytes, the input has %zu left", n,
                    m->len - m->pos);
    frame_leave_at_end(m);
    if (m->in_frame) {
        if (n <= m->frame_end - m->pos) return 0;
        return fail(m, CKPT_E_FORMAT,
                    "FRAME of %" PRIu64 " bytes reaches past the end of the FRAME it "
                    "is in (offset %" PRIu64 "): a file unpickler (torch.load) and a "
                    "memory one (pickle.loads) read different bytes",
                    n, m->o->base_offset + m->frame_end);
    }
    if (n) { /* an empty frame is no frame */
        m->in_frame = 1;
        m->frame_end = m->end = m->pos + (size_t)n;
    }
    return 0;
}

/* READONLY_BUFFER: memoryview(top), which needs a bytes-like object:
 * bytes and bytearray pass and are kept as they are (a memoryview of a
 * bytearray stays unhashable: it hashes the bytearray), other data kinds
 * fail as in Python; an object (the result of a call) may or may not be
 * bytes-like, so it passes, which can only show more of the pickle. */
static int op_readonly_buffer(machine *m) {
    ckpt_value *v;
    int rc = top(m, &v);
    if (rc) return rc;
    switch (v->kind) {
    case CKPT_KIND_BYTES:
    case CKPT_KIND_OBJECT:
    case CKPT_KIND_TENSOR:
    case CKPT_KIND_STORAGE_: return 0;
    default:
        return fail(m, CKPT_E_FORMAT, "memoryview needs a bytes-like object, got a %s",
                    ckpt_value_kind_name(v->kind));
    }
}

static int op_stack_global(machine *m) {
    ckpt_value *name, *module, *g;
    int rc;
    if ((rc = pop(m, &name)) || (rc = pop(m, &module))) return rc;
    if (module->kind == CKPT_KIND_STR && name->kind == CKPT_KIND_STR) {
        rc = make_global(m, (const uint8_t *)module->u.s.p, module->u.s.len,
                         (const uint8_t *)name->u.s.p, name->u.s.len, &g);
    } else { /* Python fails ("STACK_GLOBAL requires str"); a scanner wants the name */
        const char *known = "?";
        if (name->kind == CKPT_KIND_STR && !memchr(name->u.s.p, 0, name->u.s.len) &&
            !(known = ckpt_arena_strndup(&m->scratch, name->u.s.p, name->u.s.len)))
            return nomem(m);
        rc = make_symbolic(m, "?", known, &g);
    }
    return rc ? rc : push(m, g);
}

static int op_ext(machine *m, size_t n) {
    uint64_t code;
    ckpt_value *g;
    int rc = take_uint(m, n, &code);
    if (rc) return rc;
    if (n == 4) code = (uint64_t)(int64_t)(int32_t)(uint32_t)code;
    char name[32];
    snprintf(name, sizeof name, "ext:%" PRId64, (int64_t)code);
    if ((rc = make_symbolic(m, "?", name, &g))) return rc;
    return push(m, g);
}

HOT int op_reduce(machine *m) {
    ckpt_value *args, *callable, *v;
    int rc;
    if ((rc = pop(m, &args)) || (rc = pop(m, &callable))) return rc;
    if ((rc = expect_kind(m, args, CKPT_KIND_TUPLE, "the arguments"))) return rc;
    if ((rc = call(m, callable, args, NULL, 0, &v))) return rc;
    not_solo(v); /* it may be one of the arguments */
    if (args->u.pk.solo) {
        int f = forgets(m, callable);
        if (f == 1 || (f == 2 && v->kind == CKPT_KIND_DICT)) release_args(m, args);
    }
    return push(m, v);
}

static int op_newobj(machine *m, int ex) {
    ckpt_value *kwargs = NULL, *args, *cls, *v;
    int rc;
    if (ex && (rc = pop(m, &kwargs))) return rc;
    if ((rc = pop(m, &args)) || (rc = pop(m, &cls))) return rc;
    if ((rc = expect_kind(m, args, CKPT_KIND_TUPLE, "the arguments"))) return rc;
    if (kwargs && (rc = expect_kind(m, kwargs, CKPT_KIND_DICT, "the keyword arguments"))) return rc;
    if ((rc = call(m, cls, args, kwargs, 1, &v))) return rc;
    not_solo(v);
    return push(m, v);
}

/* OBJ: MARK cls args... ; INST: MARK args... with the class as operand. */
static int op_obj_inst(machine *m, int inst) {
    ckpt_value *cls = NULL, *args, *v;
    size_t start;
    int rc;
    if (inst) {
        const uint8_t *mod, *name;
        size_t mlen, nlen;
        if ((rc = take_line(m, &mod, &mlen)) || (rc = take_line(m, &name, &nlen)) ||
            (rc = make_global(m, mod, mlen, name, nlen, &cls)))
            return rc;
    }
    if ((rc = pop_mark(m, &start))) return rc;
    if (!inst) {
        if (start == m->sp) return fail(m, CKPT_E_FORMAT, "expected a class after the MARK");
        cls = m->stack[start++];
    }
    if ((rc = collect(m, CKPT_KIND_TUPLE, start, &args))) return rc;
    if (!inst) m->sp--; /* the class */
    if ((rc = call(m, cls, args, NULL, 0, &v))) return rc;
    not_solo(v);
    return push(m, v);
}

static int op_build(machine *m) {
    ckpt_value *state, *target;
    int rc;
    if ((rc = pop(m, &state)) || (rc = top(m, &target))) return rc;
    if (target->kind == CKPT_KIND_GLOBAL_) {
        /* setting attributes of a module or class changes what later
         * globals resolve to: report it, change nothing */
        pk_event ev = {.kind = PK_EV_BUILD,
                       .module = target->u.global.module,
                       .name = target->u.global.name,
                       .symbolic = is_symbolic(target),
                       .on_reference = 1};
        emit_event(m, &ev);
        return 0;
    }
    if (target->kind == CKPT_KIND_OBJECT) {
        const char *dot = strrchr(target->u.obj.name, '.');
        const char *module = "", *name = target->u.obj.name;
        if (dot) {
            module = ckpt_arena_strndup(&m->scratch, name, (size_t)(dot - name));
            if (!module) return nomem(m);
            name = dot + 1;
        }
        emit(m, PK_EV_BUILD, module, name, ckpt_builders_allowed(module, name),
             !strcmp(target->u.obj.name, "?"));
    } else {
        emit(m, PK_EV_BUILD, "", "", 1, 0);
    }
    return ckpt_builders_build(build_ctx(m), target, state);
}

HOT int op_persid(machine *m, int text) {
    ckpt_value *pid, *v;
    int rc;
    if (text) {
        const uint8_t *p;
        size_t n;
        if ((rc = take_line(m, &p, &n))) return rc;
        for (size_t i = 0; i < n; i++)
            if (p[i] > 0x7F) return fail(m, CKPT_E_FORMAT, "expected an ASCII persistent id");
        if (!(pid = ckpt_value_new_str(m->a, CKPT_KIND_STR, p, n))) return nomem(m);
    } else if ((rc = pop(m, &pid))) {
        return rc;
    }
    emit(m, PK_EV_PERSID, "", "", 0, 0);
    if (!m->o->persistent_load) /* pickle.load without one: UnpicklingError */
        return fail(m, CKPT_E_FORMAT,
                    "a persistent id where the loader has no persistent_load (pickle.load "
                    "raises UnpicklingError)");
    v = NULL;
    if ((rc = m->o->persistent_load(m->o->ctx, pid, m->o->base_offset + m->op_pos, &v))) return rc;
    if (!v) return fail(m, CKPT_E_FORMAT, "persistent_load returned no value");
    /* the pid is borrowed for the call; a STORAGE_ is new (pk_options) */
    if (is_solo(pid) && v != pid) release(m, pid);
    if (v->kind == CKPT_KIND_STORAGE_) v->u.pk.solo = (uint8_t)m->reuse;
    return push(m, v);
}

/* LONG1/LONG4: a two's-complement little-endian int of n bytes. Its exact
 * value needs time quadratic in its size, so past CKPT_BIGINT_MAX_BYTES
 * significant bytes it is a placeholder in scan mode (a big int is data;
 * only the legacy magic number's value matters, and it is small) and
 * CKPT_E_LIMIT in reader mode. */
static int op_long_bytes(machine *m, size_t n) {
    const uint8_t *p;
    int rc;
    if ((rc = take(m, n, &p))) return rc;
    /* 8 bytes of two's complement always fit in int64 */
    if (m->scan && n <= 8) return push(m, m->ph_int);
    size_t sig = n;
    if (n > CKPT_BIGINT_MAX_BYTES) { /* sign extension costs nothing */
        uint8_t ext = (p[n - 1] & 0x80) ? 0xFF : 0;
        while (sig > 1 && p[sig - 1] == ext && (p[sig - 2] & 0x80) == (ext & 0x80)) sig--;
    }
    if (sig > CKPT_BIGINT_MAX_BYTES) {
        if (m->scan) return push(m, m->ph_int);
        return fail(m, CKPT_E_LIMIT, "integer of %zu bytes, at most %d allowed", sig,
                    CKPT_BIGINT_MAX_BYTES);
    }
    return push(m, ckpt_value_new_int_le(m->a, p, sig));
}

/* Length operand of n bytes for the opcodes that carry one; signed ones
 * (BINSTRING, LONG4) refuse negative values as Python does. */
HOT int take_len(machine *m, size_t n, int is_signed, size_t *len) {
    *len = 0;
    uint64_t x;
    int rc = take_uint(m, n, &x);
    if (rc) return rc;
    if (is_signed && n == 4 && (x & 0x80000000u))
        return fail(m, CKPT_E_FORMAT, "expected a non-negative length");
    if (x > SIZE_MAX) return fail(m, CKPT_E_TRUNCATED, "length %" PRIu64 " exceeds the input", x);
    *len = (size_t)x;
    return 0;
}

/* INT, LONG, FLOAT: CPython refuses an empty line ("I\n"). */
static int op_text_number(machine *m) {
    const uint8_t *p;
    size_t n;
    ckpt_value *v;
    int rc = take_line(m, &p, &n);
    if (rc) return rc;
    if (n == 0) return fail(m, CKPT_E_FORMAT, "expected a number before the newline");
    if (m->op == OP_FLOAT) {
        double x;
        if ((rc = parse_float(m, p, n, &x))) return rc;
        return push(m, new_float(m, x));
    }
    if (m->op == OP_INT) {
        if ((rc = op_int(m, p, n, &v))) return rc;
        return push(m, v);
    }
    /* LONG: a trailing 'L' (Python 2) is dropped, not required */
    py_int x;
    if (p[n - 1] == 'L') n--;
    if (py_int_parse(p, n, 0, &x)) return bad_text(m, "an int", p, n);
    if ((rc = py_int_value(m, &x, &v))) return rc;
    return push(m, v);
}

static int op_text_memo(machine *m) {
    const uint8_t *p;
    size_t n;
    uint64_t key;
    int rc;
    if ((rc = take_line(m, &p, &n))) return rc;
    if (n == 0) return fail(m, CKPT_E_FORMAT, "expected a memo index before the newline");
    if ((rc = parse_index(m, p, n, &key))) return rc;
    return m->op == OP_GET ? op_get(m, key) : op_put(m, key);
}

static int op_appends(machine *m, int kind) {
    size_t start;
    ckpt_value *t, *seq;
    int rc;
    if ((rc = pop_mark(m, &start))) return rc;
    if (start <= fence(m)) return underflow(m); /* no target below the MARK */
    if (start == m->sp) return 0;               /* _pickle.c: nothing to add, target unchecked */
    t = m->stack[start - 1];
    if ((rc = seq_target(m, t, kind, &seq))) return rc;
    for (size_t i = start; kind == CKPT_KIND_SET && i < m->sp; i++)
        if ((rc = hash_check(m, m->stack[i], "set item"))) return rc;
    size_t k = m->sp - start, n = seq->u.seq.n;
    if (k && !m->scan) { /* as ckpt_value_append does, k items at once */
        if (ckpt_arena_grow(m->a, (void **)&seq->u.seq.items, &seq->u.seq.cap, n + k,
                            sizeof *seq->u.seq.items))
            return nomem(m);
        memcpy(seq->u.seq.items + n, m->stack + start, k * sizeof *seq->u.seq.items);
        seq->u.seq.n = n + k;
    }
    m->sp = start;
    return 0;
}

static int op_setitems(machine *m) {
    size_t start;
    ckpt_value *dict;
    int rc;
    if ((rc = pop_mark(m, &start))) return rc;
    if (start <= fence(m)) return underflow(m); /* no target below the MARK */
    if (start == m->sp) return 0;               /* _pickle.c: nothing to set, target unchecked */
    if ((m->sp - start) % 2)
        return fail(m, CKPT_E_FORMAT, "expected key/value pairs, got %zu items", m->sp - start);
    if ((rc = dict_target(m, m->stack[start - 1], &dict))) return rc;
    for (size_t i = start; i < m->sp; i += 2)
        if ((rc = set_item(m, dict, m->stack[i], m->stack[i + 1]))) return rc;
    m->sp = start;
    return 0;
}

static int op_dict(machine *m) {
    size_t start;
    int rc;
    if ((rc = pop_mark(m, &start))) return rc;
    if ((m->sp - start) % 2)
        return fail(m, CKPT_E_FORMAT, "expected key/value pairs, got %zu items", m->sp - start);
    ckpt_value *d = value_new(m, CKPT_KIND_DICT);
    if (!d) return nomem(m);
    for (size_t i = start; i < m->sp; i += 2)
        if ((rc = set_item(m, d, m->stack[i], m->stack[i + 1]))) return rc;
    m->sp = start;
    return push(m, d);
}

HOT int op_tuple_n(machine *m, size_t n) {
    ckpt_value *t;
    int rc;
    if (m->sp - fence(m) < n) return underflow(m);
    if ((rc = collect(m, CKPT_KIND_TUPLE, m->sp - n, &t))) return rc;
    t->u.pk.solo = (uint8_t)m->reuse;
    return push(m, t);
}

HOT int op_mark_seq(machine *m, int kind) {
    size_t start;
    ckpt_value *v;
    int rc;
    if ((rc = pop_mark(m, &start))) return rc;
    for (size_t i = start; kind == CKPT_KIND_SET && i < m->sp; i++)
        if ((rc = hash_check(m, m->stack[i], "set item"))) return rc;
    if ((rc = collect(m, kind, start, &v))) return rc;
    if (kind == CKPT_KIND_TUPLE) v->u.pk.solo = (uint8_t)m->reuse;
    return push(m, v);
}

static int op_pop(machine *m) {
    /* _pickle.c load_pop: a MARK with nothing above it is popped instead */
    if (m->nmarks && m->marks[m->nmarks - 1] == m->sp) {
        m->nmarks--;
        return 0;
    }
    ckpt_value *v;
    return pop(m, &v);
}

/* What step() returns for STOP, which ends the run: never an error code
 * (those are negative), so the loop tests one value per opcode. */
#define PK_STOPPED 1

HOT int step(machine *m) {
    const uint8_t *p;
    uint64_t x;
    size_t n;
    ckpt_value *a, *b, *c;
    int rc;

    switch (m->op) {
    case OP_PROTO:
        if ((rc = take_uint(m, 1, &x))) return rc;
        if (x > 5) return fail(m, CKPT_E_FORMAT, "unsupported pickle protocol %" PRIu64, x);
        m->proto = (unsigned)x;
        return 0;
    case OP_FRAME: return op_frame(m);
    case OP_STOP: return (rc = pop(m, &m->result)) ? rc : PK_STOPPED;
    case OP_MARK:
        if (m->sp + m->nmarks >= m->max_stack)
            return fail(m, CKPT_E_LIMIT, "stack and marks exceed %" PRIu64 " entries",
                        m->max_stack);
        if (ckpt_arena_grow(&m->scratch, (void **)&m->marks, &m->marks_cap, m->nmarks + 1,
                            sizeof *m->marks))
            return nomem(m);
        m->marks[m->nmarks++] = m->sp;
        set_push_lim(m);
        return 0;
    case OP_POP: return op_pop(m);
    case OP_POP_MARK:
        if ((rc = pop_mark(m, &n))) return rc;
        m->sp = n;
        return 0;
    case OP_DUP:
        if ((rc = top(m, &a))) return rc;
        not_solo(a);
        return push(m, a);

    case OP_NONE: return push(m, new_none(m));
    case OP_NEWTRUE: return push(m, new_bool(m, 1));
    case OP_NEWFALSE: return push(m, new_bool(m, 0));
    case OP_INT:
    case OP_LONG:
    case OP_FLOAT: return op_text_number(m);
    case OP_BININT:
        if ((rc = take_uint(m, 4, &x))) return rc;
        return push(m, new_int(m, (int32_t)(uint32_t)x));
    /* each width its own case: take_uint's size is a constant, one load */
    case OP_BININT1:
        if ((rc = take_uint(m, 1, &x))) return rc;
        return push(m, new_int(m, (int64_t)x));
    case OP_BININT2:
        if ((rc = take_uint(m, 2, &x))) return rc;
        return push(m, new_int(m, (int64_t)x));
    case OP_LONG1:
    case OP_LONG4:
        if ((rc = take_len(m, m->op == OP_LONG1 ? 1 : 4, 1, &n))) return rc;
        return op_long_bytes(m, n);
    case OP_BINFLOAT: {
        double d;
        if ((rc = take(m, 8, &p))) return rc;
        x = 0;
        for (int i = 0; i < 8; i++) x = x << 8 | p[i]; /* big-endian */
        memcpy(&d, &x, sizeof d);
        return push(m, new_float(m, d));
    }

    case OP_STRING: return op_string(m);
    case OP_UNICODE: return op_unicode_text(m);
    case OP_BINSTRING:
    case OP_SHORT_BINSTRING:
        if ((rc = take_len(m, m->op == OP_BINSTRING ? 4 : 1, 1, &n))) return rc;
        return op_bytes(m, n, CKPT_KIND_STR);
    case OP_BINUNICODE:
    case OP_SHORT_BINUNICODE:
    case OP_BINUNICODE8:
        if ((rc = take_len(m, m->op == OP_BINUNICODE ? 4 : m->op == OP_BINUNICODE8 ? 8 : 1, 0, &n)))
            return rc;
        return op_unicode_bytes(m, n);
    case OP_BINBYTES:
    case OP_SHORT_BINBYTES:
    case OP_BINBYTES8:
    case OP_BYTEARRAY8:
        if ((rc = take_len(m,
                           m->op == OP_BINBYTES         ? 4
                           : m->op == OP_SHORT_BINBYTES ? 1
                                                        : 8,
                           0, &n)))
            return rc;
        if ((rc = op_bytes(m, n, CKPT_KIND_BYTES))) return rc;
        /* Python builds a bytearray: unhashable, given back as one */
        if (m->op == OP_BYTEARRAY8) m->stack[m->sp - 1]->alt = 1;
        return 0;

    case OP_EMPTY_TUPLE:
        if ((a = value_new(m, CKPT_KIND_TUPLE))) a->u.pk.solo = (uint8_t)m->reuse;
        return push(m, a);
    case OP_EMPTY_LIST: return push(m, value_new(m, CKPT_KIND_LIST));
    case OP_EMPTY_DICT: return push(m, value_new(m, CKPT_KIND_DICT));
    case OP_EMPTY_SET: return push(m, value_new(m, CKPT_KIND_SET));
    case OP_TUPLE: return op_mark_seq(m, CKPT_KIND_TUPLE);
    case OP_LIST: return op_mark_seq(m, CKPT_KIND_LIST);
    case OP_FROZENSET:
        if ((rc = op_mark_seq(m, CKPT_KIND_SET))) return rc;
        m->stack[m->sp - 1]->alt = 1; /* the set op_mark_seq pushed */
        return 0;
    case OP_DICT: return op_dict(m);
    case OP_TUPLE1: return op_tuple_n(m, 1);
    case OP_TUPLE2: return op_tuple_n(m, 2);
    case OP_TUPLE3: return op_tuple_n(m, 3);
    case OP_APPEND:
        if ((rc = pop(m, &a)) || (rc = top(m, &b)) || (rc = seq_target(m, b, CKPT_KIND_LIST, &c)))
            return rc;
        if (m->scan) return 0;
        return ckpt_value_append(m->a, c, a) ? nomem(m) : 0;
    case OP_APPENDS: return op_appends(m, CKPT_KIND_LIST);
    case OP_ADDITEMS: return op_appends(m, CKPT_KIND_SET);
    case OP_SETITEM: {
        ckpt_value *val, *key, *t, *d;
        if ((rc = pop(m, &val)) || (rc = pop(m, &key)) || (rc = top(m, &t)) ||
            (rc = dict_target(m, t, &d)))
            return rc;
        return set_item(m, d, key, val);
    }
    case OP_SETITEMS: return op_setitems(m);

    case OP_GET:
    case OP_PUT: return op_text_memo(m);
    case OP_BINGET:
        if ((rc = take_uint(m, 1, &x))) return rc;
        return op_get(m, x);
    case OP_LONG_BINGET:
        if ((rc = take_uint(m, 4, &x))) return rc;
        return op_get(m, x);
    case OP_BINPUT:
        if ((rc = take_uint(m, 1, &x))) return rc;
        return op_put(m, x);
    case OP_LONG_BINPUT:
        if ((rc = take_uint(m, 4, &x))) return rc;
        return op_put(m, x);
    case OP_MEMOIZE: return op_put(m, m->memo_n); /* memo[len(memo)] = top */

    case OP_GLOBAL: {
        const uint8_t *mod, *name;
        size_t mlen, nlen;
        if ((rc = take_line(m, &mod, &mlen)) || (rc = take_line(m, &name, &nlen)) ||
            (rc = make_global(m, mod, mlen, name, nlen, &a)))
            return rc;
        return push(m, a);
    }
    case OP_STACK_GLOBAL: return op_stack_global(m);
    case OP_EXT1: return op_ext(m, 1);
    case OP_EXT2: return op_ext(m, 2);
    case OP_EXT4: return op_ext(m, 4);
    case OP_REDUCE: return op_reduce(m);
    case OP_NEWOBJ: return op_newobj(m, 0);
    case OP_NEWOBJ_EX: return op_newobj(m, 1);
    case OP_OBJ: return op_obj_inst(m, 0);
    case OP_INST: return op_obj_inst(m, 1);
    case OP_BUILD: return op_build(m);
    case OP_PERSID: return op_persid(m, 1);
    case OP_BINPERSID: return op_persid(m, 0);

    case OP_READONLY_BUFFER: return op_readonly_buffer(m);
    case OP_NEXT_BUFFER: /* torch.load and pickle.load pass no buffers= */
        return fail(m, CKPT_E_FORMAT, "out-of-band buffer, but the loaders pass none");
    default: return fail(m, CKPT_E_FORMAT, "unknown opcode 0x%02x", m->op);
    }
}

/* Memory every run may take beyond pk_options.budget. */
#define PICKLE_ALLOC_SLACK ((uint64_t)1 << 20)

int ckpt_pickle_run(ckpt_value **out, size_t *consumed, const uint8_t *buf, size_t len,
                    const pk_options *o) {
    static const ckpt_limits default_limits = CKPT_LIMITS_INIT;
    *out = NULL;
    *consumed = 0;
    if (!o || !o->arena || (!buf && len))
        return ckpt_err(CKPT_E_INVALID_ARG, o ? o->file : NULL, o ? o->member : NULL,
                        CKPT_NO_OFFSET, "pickle: expected options with an arena and a buffer");
    machine m = {0};
    m.o = o;
    m.lim = o->limits ? o->limits : &default_limits;
    /* 64 units of work per input byte bounds what memo references can
     * multiply; opcodes alone never exceed one per byte */
    m.ops_limit = m.lim->max_pickle_ops;
    m.max_stack = m.lim->max_pickle_stack;
    if (len < (UINT64_MAX - 65536) / 64 && (uint64_t)len * 64 + 65536 < m.ops_limit)
        m.ops_limit = (uint64_t)len * 64 + 65536;
    m.a = o->arena;
    uint64_t values_at_start = m.a->total;
    m.max_alloc = UINT64_MAX;
    if (o->budget && *o->budget < UINT64_MAX - PICKLE_ALLOC_SLACK)
        m.max_alloc = *o->budget + PICKLE_ALLOC_SLACK;
    m.buf = buf;
    m.len = m.end = len;
    m.ctx = (pk_build_ctx){.arena = m.a,
                           .file = o->file,
                           .member = o->member,
                           .base = o->base_offset,
                           .limits = m.lim,
                           .on_event = o->on_event,
                           .event_ctx = o->ctx,
                           .ops = &m.ops,
                           .ops_limit = m.ops_limit,
                           .scan_only = o->scan_only != 0};
    m.seed = mix((uint64_t)(uintptr_t)&m ^ (uint64_t)(uintptr_t)buf << 16);
    m.reuse = !o->scan_only;
    if (o->scan_only) {
        /* in o->arena: the result may be one of them */
        ckpt_value *ph = ckpt_arena_array(m.a, 4, sizeof *ph);
        if (!ph)
            return ckpt_err(CKPT_E_NOMEM, o->file, o->member, o->base_offset,
                            "pickle: out of memory");
        ph[0].kind = CKPT_KIND_INT;
        ph[1].kind = CKPT_KIND_FLOAT;
        ph[2].kind = CKPT_KIND_BOOL;
        ph[3].kind = CKPT_KIND_NONE;
        for (int i = 0; i < 4; i++) ph[i].pk_at = CKPT_PK_SHARED; /* no opcode of their own */
        m.ph_int = &ph[0];
        m.ph_float = &ph[1];
        m.ph_bool = &ph[2];
        m.ph_none = &ph[3];
        m.scan = 1;
    }

    /* the check after every opcode: values made since the start, scratch
     * and the memo array within max_alloc, as one comparison of totals */
    ckpt_arena *values = m.a;
    uint64_t alloc_limit =
        m.max_alloc <= UINT64_MAX - values_at_start ? values_at_start + m.max_alloc : UINT64_MAX;
    m.keep_all = !m.reuse;
    int rc = m.reuse ? find_fetches(&m) : 0;
    pk_weights_only *wo =
        o->weights_only && o->weights_only->offset == CKPT_NO_OFFSET ? o->weights_only : NULL;
    while (!rc) {
        m.op_pos = m.pos;
        if (m.pos == m.end) { /* the end of the frame, or of the input */
            frame_leave_at_end(&m);
            if (m.pos == m.len) {
                rc = ckpt_err(CKPT_E_TRUNCATED, o->file, o->member, o->base_offset + m.pos,
                              "pickle: expected STOP before the end of the input");
                break;
            }
        }
        m.op = buf[m.pos++];
        const char *why = NULL;
        if (wo && weights_only_ops[m.op] != 1 &&
            (!weights_only_ops[m.op] || (why = weights_only_refuses(&m)))) {
            wo->offset = o->base_offset + m.op_pos;
            wo->op = m.op;
            wo->why = why;
            wo = NULL; /* the first one only */
        }
        if (++m.ops > m.ops_limit) {
            rc = fail(&m, CKPT_E_LIMIT, "more than %" PRIu64 " opcodes and copies", m.ops_limit);
            break;
        }
        rc = step(&m);
        if (rc == 0 && /* STOP allocates nothing: the last check holds */
            values->total + m.scratch.total + m.dense_bytes > alloc_limit)
            rc = fail(&m, CKPT_E_LIMIT,
                      "pickle takes more than %" PRIu64
                      " bytes of memory, this file's inflate budget "
                      "(max_inflate_bytes, at most max_inflate_ratio times the file's size)",
                      m.max_alloc);
    }
    if (o->ops) *o->ops = m.ops;
    if (rc == PK_STOPPED) {
        rc = 0;
        *out = m.result;
        *consumed = m.pos;
        if (o->frame_rest) *o->frame_rest = m.in_frame ? m.frame_end - m.pos : 0;
    }
    ckpt_arena_free(&m.scratch);
    for (size_t i = 0; i < (m.dense_cap + MEMO_CHUNK - 1) >> MEMO_CHUNK_BITS; i++)
        ckpt_free(m.dense[i]);
    ckpt_free(m.dense);
    ckpt_free(m.seen);
    ckpt_free(m.fetched);
    return rc;
}
