/* scan_policy.h - what the scanner calls dangerous, and what it takes for
 * a pickle (in a file, a zip member or a string literal) or for a format
 * it does not look into.
 *
 * The verdict never depends on this table: any global off the allowlist
 * (builders.h plus the caller's list) makes a file unsafe. The table only
 * decides the severity shown for such a global (dangerous: a known
 * dangerous family - code execution, process control, network or file
 * access, FORMATS.md §5; suspicious: anything else) and
 * which names a caller's allowlist may not override. */
#ifndef CKPT_SCAN_POLICY_H
#define CKPT_SCAN_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "base/source.h"
#include "ckpt.h"

/* Severity of the global module.name (module already name-mapped, name
 * possibly dotted) that is not allowlisted. *why receives a static phrase
 * for the message naming the family, e.g. "a known code-execution family"
 * (builtins.eval) or "a known dangerous family (network access)"
 * (requests.api.get). */
ckpt_severity ckpt_scan_classify(const char *module, const char *name, const char **why);

/* 1 if module.name is a class that only builds a value from its arguments
 * and state, touching no file, process or code: pathlib's path classes,
 * argparse.Namespace, types.SimpleNamespace (Lightning and YOLO checkpoints
 * hold them). The loader still imports them, so they are not allowlisted:
 * a file naming one gets the verdict "review" until the caller allows it;
 * never dangerous (ckpt_scan_classify rates them suspicious). */
int ckpt_scan_data_class(const char *module, const char *name);

/* Python 2 module names the unpickler maps (_compat_pickle IMPORT_MAPPING
 * subset that matters here: __builtin__, copy_reg, UserDict, UserList,
 * UserString). Returns `module` when
 * no mapping applies. Static or borrowed string. */
const char *ckpt_scan_map_module(const char *module);

/* 1 if p[0..n) starts like a pickle stream: PROTO 0..5, or a protocol 0/1
 * opcode that can begin a stream. */
int ckpt_scan_pickle_start(const uint8_t *p, size_t n);

/* 1 if p[0..n) is shaped like a whole pickle: PROTO 0..5 at the start
 * (picklescan sniffs zip members this way), or a protocol 0/1 start whose
 * last byte, ignoring trailing whitespace, is STOP '.'. Used for content
 * that is not named as a pickle (zip members, literals): only the first
 * and last bytes are read, so big storages cost nothing. */
int ckpt_scan_pickle_shape(const uint8_t *p, size_t n);

/* ckpt_scan_pickle_shape of the n bytes at p, read through src into v
 * (base/source.h: with pread where p is a file's, memory lent): the first
 * bytes (and 62 after them, kept in v), then backwards from the end to
 * its last byte that is not whitespace. 0 and *yes, or the read's error. */
int ckpt_scan_pickle_shape_at(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t n,
                              int *yes);

/* 1 if calling module.name unpickles (some of) its arguments: a loader or
 * gadget of the deserializer family (pickle.loads, _pickle.load, dill,
 * cloudpickle, joblib, pandas.read_pickle, numpy.load) or torch's
 * (torch.load, torch.serialization.load, torch.storage._load_from_bytes).
 * Only the literals such a call receives, directly or through the calls
 * that build its arguments (base64.b64decode(...), io.BytesIO(...)), are
 * scanned as nested pickles: any other string is data. */
int ckpt_scan_unpickles(const char *module, const char *name);

/* How a str/bytes literal may hold a pickle: verbatim, as the latin-1
 * text protocol 2 writes bytes as (_codecs.encode), hex or base64. */
typedef enum ckpt_lit_enc {
    CKPT_LIT_NONE = 0,
    CKPT_LIT_RAW,
    CKPT_LIT_LATIN1,
    CKPT_LIT_HEX,
    CKPT_LIT_BASE64
} ckpt_lit_enc;

/* The encoding p[0..n) may be, judged on its first few bytes (and the
 * last one for RAW): cheap, whatever the literal's size. */
ckpt_lit_enc ckpt_scan_literal_encoding(const uint8_t *p, size_t n);

/* Decodes p[0..n) as enc into out, which has room for n bytes (every
 * decoding shrinks); *len receives the decoded length. 0, or -1 when the
 * text is not of that encoding after all. */
int ckpt_scan_literal_decode(ckpt_lit_enc enc, const uint8_t *p, size_t n, uint8_t *out,
                             size_t *len);

/* Formats recognised by their magic but not looked into (7z, gzip, bzip2,
 * xz, zstd, RAR, PYTORCH1, and joblib's zlib, LZMA, LZ4 and 'ZF' files):
 * a description, or NULL. Tar archives are read
 * (container/tar.h). */
const char *ckpt_scan_foreign_container(const uint8_t *p, size_t n);

/* 1 if p[0..n) starts like safetensors: a u64 LE header length that fits
 * the input, then a JSON object. ckpt_open_memory validates the rest. */
int ckpt_scan_looks_safetensors(const uint8_t *p, size_t n);

/* ckpt_scan_looks_safetensors of the n bytes at p, read through src into
 * v as ckpt_scan_pickle_shape_at reads: the length and a first chunk of
 * the header, then on while it is whitespace. 0 and *yes, or the read's
 * error. */
int ckpt_scan_looks_safetensors_at(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t n,
                                   int *yes);

/* In *c the first byte of the bytes [from, end) at p that is not JSON
 * whitespace (space, tab, CR, LF), or -1: read through src into v a
 * 4 KiB-aligned chunk at a time (a read of the first 4 KiB at p serves
 * the first chunk). 0, or the read's error. */
int ckpt_scan_first_non_ws(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t from,
                           size_t end, int *c);

#endif
