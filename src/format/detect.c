/* detect.c - the one content sniff (see detect.h): magic numbers and the
 * shape of a safetensors header or index, in the order ckpt_open tries
 * them. A format is chosen by content, never by file name. */
#include "format/detect.h"

#include <string.h>

#include "container/tar.h"

/* torch.save's legacy files start with the pickle of
 * torch.serialization.MAGIC_NUMBER (0x1950a86a20f9469cfc6c) as torch
 * writes it: PROTO 2, LONG1 of 10 bytes. The first 12 bytes suffice to
 * tell it from other pickles; the legacy reader checks the decoded value. */
static const uint8_t legacy_magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc,
                                       0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8};

/* JSON's whitespace, which may precede an index's '{' or a safetensors
 * header's (after its 8-byte length). */
static int is_json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* First non-whitespace byte at or after `from`, or -1. */
static int first_non_ws(const uint8_t *p, size_t n, size_t from) {
    for (size_t i = from; i < n; i++)
        if (!is_json_ws(p[i])) return p[i];
    return -1;
}

/* A pickle stream, as pickle.load would start reading one: PROTO 0..5, or
 * an opcode protocols 0 and 1 start with. */
static int looks_like_pickle(const uint8_t *p, size_t n) {
    if (n >= 2 && p[0] == 0x80) return p[1] <= 5;
    return n >= 1 && p[0] != 0 && strchr("(}]lcdLIFSVNKJUX)", p[0]) != NULL;
}

/* pickle.dump(Metadata) at protocol 0 or 1 starts with
 * copyreg._reconstructor(Metadata, object, None): GLOBAL "copy_reg\n
 * _reconstructor\n" (copyreg without fix_imports), a memo PUT ("p0\n") or
 * BINPUT, MARK, then GLOBAL "module\nMetadata\n". */
static int reconstructed_dcp(const uint8_t *p, size_t n, const char *module, size_t mlen) {
    static const char *const heads[] = {"ccopy_reg\n_reconstructor\n",
                                        "ccopyreg\n_reconstructor\n"};
    size_t i = 0;
    for (size_t k = 0; !i && k < sizeof heads / sizeof *heads; k++) {
        size_t len = strlen(heads[k]);
        if (n >= len && !memcmp(p, heads[k], len)) i = len;
    }
    if (!i) return 0;
    if (i < n && p[i] == 'p') { /* PUT: decimal digits, newline */
        size_t j = i + 1;
        while (j < n && j - i < 12 && p[j] >= '0' && p[j] <= '9') j++;
        if (j == i + 1 || j >= n || p[j] != '\n') return 0;
        i = j + 1;
    } else if (i < n && p[i] == 'q') { /* BINPUT: one byte */
        i += 2;
    }
    return i + 2 + mlen <= n && p[i] == '(' && p[i + 1] == 'c' &&
           !memcmp(p + i + 2, module, mlen) && p[i + 2 + mlen] == '\n';
}

/* DCP's `.metadata`: pickle.dump(Metadata) at protocol 2..5 starts with
 * PROTO, a FRAME (protocol 4+), then the module name of the Metadata
 * class: SHORT_BINUNICODE or BINUNICODE (STACK_GLOBAL's operands), or at
 * protocols 2 and 3 (and ckpt convert's output) GLOBAL "module\n". */
static int looks_like_dcp_metadata(const uint8_t *p, size_t n) {
    static const char module[] = "torch.distributed.checkpoint.metadata";
    size_t mlen = sizeof module - 1, i = 2;
    if (n >= 1 && p[0] == 'c') return reconstructed_dcp(p, n, module, mlen);
    if (n < 3 || p[0] != 0x80 || p[1] < 2 || p[1] > 5) return 0;
    if (p[i] == 0x95) i += 9; /* FRAME + 8-byte length */
    if (i + 2 + mlen <= n && p[i] == 0x8c && p[i + 1] == mlen)
        return memcmp(p + i + 2, module, mlen) == 0;
    if (i + 5 + mlen <= n && p[i] == 'X' && p[i + 1] == mlen && !p[i + 2] && !p[i + 3] && !p[i + 4])
        return memcmp(p + i + 5, module, mlen) == 0;
    if (i + 2 + mlen <= n && p[i] == 'c')
        return memcmp(p + i + 1, module, mlen) == 0 && p[i + 1 + mlen] == '\n';
    return 0;
}

const char *ckpt_detect_unsupported(const uint8_t *p, size_t n, uint64_t *offset) {
    *offset = 0;
    if (n >= 8 && memcmp(p, "PYTORCH1", 8) == 0)
        return "unsupported: PyTorch 'PYTORCH1' preview format";
    /* torch.load tries tarfile first: any first block with a valid
     * checksum, "ustar" or not (container/tar.h) */
    if (ckpt_tar_sniff(p, n) != CKPT_TAR_NO)
        return "unsupported: tar archive (PyTorch < 0.4 legacy tar format)";
    return NULL;
}

ckpt_format ckpt_detect_format(const void *head, size_t n) {
    const uint8_t *p = head;
    uint64_t off;
    if (p == NULL || n == 0) return CKPT_FORMAT_UNKNOWN;
    if (n >= 4 && memcmp(p, "PK\3\4", 4) == 0) return CKPT_FORMAT_TORCH_ZIP;
    if (ckpt_detect_unsupported(p, n, &off)) return CKPT_FORMAT_UNKNOWN;
    /* An index is text from its first byte; a safetensors file starts with
     * a binary u64 length whose high bytes are zero for any header under
     * 2^56 bytes. */
    if (first_non_ws(p, n, 0) == '{' && memchr(p, 0, n < 8 ? n : 8) == NULL)
        return CKPT_FORMAT_SAFETENSORS_SHARDED;
    if (n >= 9 && first_non_ws(p, n, 8) == '{') return CKPT_FORMAT_SAFETENSORS;
    if (n >= sizeof legacy_magic && memcmp(p, legacy_magic, sizeof legacy_magic) == 0)
        return CKPT_FORMAT_TORCH_LEGACY;
    if (looks_like_dcp_metadata(p, n)) return CKPT_FORMAT_DCP;
    if (looks_like_pickle(p, n)) return CKPT_FORMAT_PICKLE;
    return CKPT_FORMAT_UNKNOWN;
}
