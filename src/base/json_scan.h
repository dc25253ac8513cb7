/* json_scan.h - one pass over JSON text, no tree: the grammar of
 * serde_json (RFC 8259; strings strict UTF-8, surrogates in pairs, no
 * \u0000 since texts become C strings), at the caller's pace. The
 * safetensors header reader and the manifest reader pull values with it
 * and build their own records, so nothing is allocated per node.
 *
 *     ckpt_json_scan s = {.s = text, .n = len, .arena = a, .file = path,
 *                         .base = 8, .what = "safetensors header",
 *                         .max_depth = 127};
 *     if (ckpt_json_peek(&s) != '{') ...
 *
 * Every function returns -1 (or NULL) with the error recorded against
 * file at offset base + i ("<what> is not valid JSON ...: expected X"). */
#ifndef CKPT_JSON_SCAN_H
#define CKPT_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"

typedef struct ckpt_json_scan {
    const unsigned char *s;
    size_t n, i;        /* text, its length, the position */
    unsigned depth;     /* open arrays/objects */
    unsigned max_depth; /* more nested ones are an error */
    ckpt_arena *arena;  /* copies of kept strings */
    const char *file;   /* for errors */
    uint64_t base;      /* file offset of s[0] */
    const char *what;   /* "safetensors header" */
} ckpt_json_scan;

/* Records "<what> is not valid JSON (...): expected <expected>" at i. */
int ckpt_json_syntax(const ckpt_json_scan *s, const char *expected);
int ckpt_json_nomem(const ckpt_json_scan *s);
/* The next non-whitespace byte (whitespace skipped), or -1 at the end. */
int ckpt_json_peek(ckpt_json_scan *s);
/* The byte c next (after whitespace), else a syntax error naming `what`. */
int ckpt_json_expect(ckpt_json_scan *s, int c, const char *what);
/* A string at the next byte. Returns its decoded text: a pointer into s
 * when it has no escapes (*len bytes, not NUL-terminated), else into
 * `scratch` (cap bytes; longer text is truncated but still checked, *len
 * the full length). With `keep`, the text is copied to the arena
 * NUL-terminated and that copy returned. */
const char *ckpt_json_string(ckpt_json_scan *s, char *scratch, size_t cap, int keep, size_t *len);
/* A number: 0 with *out set for an integer in [0, 2^64); 1 for any other
 * valid number (negative, -0, fraction, exponent, too large); -1. */
int ckpt_json_number(ckpt_json_scan *s, uint64_t *out);
/* The literal word (true, false, null) at i. */
int ckpt_json_literal(ckpt_json_scan *s, const char *word);
/* At '[' or '{': enters it (bounded by max_depth). */
int ckpt_json_open(ckpt_json_scan *s);
/* After an element of a container closed by `close`: 1 when it closed, 0
 * when a comma announces the next element, -1 on error. */
int ckpt_json_next(ckpt_json_scan *s, int close);
/* At ']' or '}' right after ckpt_json_open: 1 and consumed when the
 * container is empty, else 0. */
int ckpt_json_empty(ckpt_json_scan *s, int close);
/* Skips any value (serde's IgnoredAny), checking its grammar. */
int ckpt_json_skip(ckpt_json_scan *s);

#endif
