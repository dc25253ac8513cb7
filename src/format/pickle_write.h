/* pickle_write.h - the one pickle emitter: opcodes as CPython's pickle.py
 * writes them at protocol 2 (pickletools names in the comments of
 * pickle_write.c), into a growing buffer. torch_write.c pickles data.pkl
 * with it, dcp_write.c a DCP `.metadata`. Every opcode it emits is on
 * torch's weights_only list except NEWOBJ (ckpt_pkw_newobj), which only
 * `.metadata` uses (FileSystemReader loads it with plain pickle.load).
 *
 * Buffer failures are sticky (ckpt_buf.failed): check w->out.failed once
 * at the end. Globals are memoized as pickle.py does (up to 32 distinct
 * ones; the strings must outlive the writer). */
#ifndef CKPT_PICKLE_WRITE_H
#define CKPT_PICKLE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

typedef struct ckpt_pkw {
    ckpt_buf out;
    uint64_t memo; /* next memo index */
    struct {
        const char *module, *name;
        uint64_t memo;
    } globals[32];
    size_t nglobals;
} ckpt_pkw;

/* PROTO 2. */
void ckpt_pkw_proto(ckpt_pkw *w);
void ckpt_pkw_op(ckpt_pkw *w, uint8_t c);
/* BINPUT / LONG_BINPUT of the next memo index. */
void ckpt_pkw_memo_put(ckpt_pkw *w);
/* BINGET / LONG_BINGET of memo index m. */
void ckpt_pkw_memo_get(ckpt_pkw *w, uint64_t m);
/* GLOBAL "module\nname\n", fetched from the memo when written before. */
void ckpt_pkw_global(ckpt_pkw *w, const char *module, const char *name);
/* BININT1 / BININT2 / BININT / LONG1, as pickle.py picks them. */
void ckpt_pkw_int(ckpt_pkw *w, int64_t v);
/* An int of any size as decimal text ("-123..."): LONG1, or LONG4 past 255
 * bytes (which weights_only refuses; Python writes the same). */
int ckpt_pkw_bigint(ckpt_pkw *w, const char *dec);
/* BINUNICODE; CKPT_E_UNSUPPORTED past 4 GiB. */
int ckpt_pkw_str(ckpt_pkw *w, const char *s, size_t n);
/* bytes at protocol 2: _codecs.encode(latin-1 text, 'latin1'). */
int ckpt_pkw_bytes(ckpt_pkw *w, const uint8_t *p, size_t n);
/* BINFLOAT. */
void ckpt_pkw_float(ckpt_pkw *w, double v);
/* A tuple of n non-negative ints (EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE). */
void ckpt_pkw_dims(ckpt_pkw *w, const uint64_t *d, uint32_t n);
/* NEWOBJ of class module.name with no arguments (cls.__new__(cls)), as
 * object.__reduce_ex__(2) pickles a dataclass; memoized. The caller
 * follows with the state and BUILD, or nothing. */
void ckpt_pkw_newobj(ckpt_pkw *w, const char *module, const char *name);
void ckpt_pkw_free(ckpt_pkw *w);

#endif
