/* npy.h - what np.load does with a .npy file (or an .npz member): the
 * header read as numpy.lib.format reads it.
 *
 * Layout: "\x93NUMPY", major, minor (1.0, 2.0 or 3.0, else np.load
 * raises), the header length (u16 LE for 1.0, u32 LE after), the header:
 * latin-1 text (UTF-8 for 3.0) of a Python literal dict that
 * ast.literal_eval evaluates, with exactly the keys 'descr',
 * 'fortran_order' (a bool) and 'shape' (a tuple of ints). The array data
 * follows; when the dtype that descr_to_dtype builds has an object field
 * (descr 'O', '|O', '<O8', 'object', a (subdtype, shape) tuple or a
 * structured list with such a field), np.load(allow_pickle=True) runs
 * pickle.load on it.
 *
 * The literal is parsed with a subset of Python's grammar: dicts, lists,
 * tuples (and parentheses), '...' and "..." strings without backslashes,
 * decimal ints (an L suffix for 1.0 and 2.0 headers, as numpy's
 * _filter_header drops it), True, False, None. Anything else (comments,
 * escapes, string concatenation, floats, unknown dtype strings) gives
 * CKPT_NPY_UNSURE: numpy may read it, ckpt cannot say how. */
#ifndef CKPT_NPY_H
#define CKPT_NPY_H

#include "base/alloc.h"

typedef enum ckpt_npy_kind {
    CKPT_NPY_PLAIN,   /* numbers, strings, bytes: np.load unpickles nothing */
    CKPT_NPY_OBJECT,  /* an object dtype: the data is a pickle stream */
    CKPT_NPY_REFUSED, /* np.load raises before reading any data */
    CKPT_NPY_UNSURE   /* ckpt cannot tell how numpy reads the header */
} ckpt_npy_kind;

typedef struct ckpt_npy_header {
    ckpt_npy_kind kind;
    size_t data_offset; /* where the array data (or pickle) starts */
    uint64_t at;        /* offset the reason is about */
    const char *why;    /* static text for REFUSED and UNSURE */
} ckpt_npy_header;

/* 0 when p[0..n) does not start with the .npy magic (np.load then takes
 * the file for a pickle or an .npz); else 1 and *h filled. Headers longer
 * than max_header bytes and literals nested deeper than max_depth are
 * UNSURE. Only the first ckpt_npy_header_bytes(p, n, max_header) bytes of
 * p are read: p may hold just those, n being the input's size. The parsed
 * literal lives in arena `a` (freed by the caller); -1 when an allocation
 * fails. */
int ckpt_npy_read_header(ckpt_npy_header *h, ckpt_arena *a, const uint8_t *p, size_t n,
                         uint64_t max_header, uint32_t max_depth);

/* How many bytes of an input of n bytes ckpt_npy_read_header reads, from
 * its first min(n, 12) at p: those, or the whole header when it is read
 * (at most 12 + max_header). */
size_t ckpt_npy_header_bytes(const uint8_t *p, size_t n, uint64_t max_header);

#endif
