/* scan_policy.c - the known dangerous families (code execution, process
 * control, network and file access; FORMATS.md §5.1
 * picklescan _unsafe_globals, §5.2 fickling UNSAFE_IMPORTS/UnsafeImportsML,
 * §5.3 modelscan, §5.5 published bypasses) and the shape of a pickle. */
#include "jobs/scan_policy.h"

#include <string.h>

/* Dotted prefixes: "os" matches os, os.system and os.path.join; a module
 * match covers every submodule (picklescan's fix for asyncio.unix_events)
 * and every attribute, so "code" also covers
 * code.InteractiveInterpreter.runcode. Matching is on the full dotted path
 * module.name, which also catches a name smuggled into the qualname
 * ("torch" + "jit.load"). */
static const char *const code_builtins[] = {
    "builtins.eval",       "builtins.exec",       "builtins.execfile", "builtins.compile",
    "builtins.__import__", "builtins.breakpoint", "builtins.apply",    "builtins.input",
    "builtins.raw_input",  "builtins.help",       "builtins.reload",   "builtins.__build_class__",
    "builtins.__loader__", "__builtins__",
};
static const char *const attribute_builtins[] = {
    "builtins.getattr", "builtins.setattr", "builtins.delattr",
    "builtins.globals", "builtins.locals",  "builtins.vars",
};
static const char *const file_builtins[] = {"builtins.open", "builtins.file"};
static const char *const exit_builtins[] = {"builtins.exit", "builtins.quit"};
/* processes, the interpreter, imports */
static const char *const processes[] = {
    "os",
    "posix",
    "nt",
    "subprocess",
    "_posixsubprocess",
    "sys",
    "pty",
    "commands",
    "multiprocessing",
    "_multiprocessing",
    "concurrent",
    "code",
    "codeop",
    "runpy",
    "marshal",
    "types",
    "importlib",
    "_frozen_importlib",
    "_frozen_importlib_external",
    "_imp",
    "imp",
    "pkgutil",
    "zipimport",
    "site",
    "gc",
    "inspect",
    "ctypes",
    "_ctypes",
    "_interpreters",
    "_xxsubinterpreters",
    "interpreters",
    "_winapi",
    "winreg",
    "_winreg",
    "msvcrt",
    "platform",
    "sched",
    "atexit",
    "signal",
    "_signal",
    "threading",
    "_thread",
    "thread",
};
/* debuggers, profilers, shells, test and packaging helpers; callables
 * that call what they are given */
static const char *const tools[] = {
    "cProfile",  "profile",      "pdb",          "bdb",        "timeit",     "trace",
    "doctest",   "unittest",     "test",         "idlelib",    "lib2to3",    "pydoc",
    "_pyrepl",   "ensurepip",    "pip",          "venv",       "distutils",  "setuptools",
    "IPython",   "_osx_support", "_aix_support", "compileall", "py_compile", "operator",
    "_operator", "functools",
};
static const char *const network[] = {
    "socket",       "_socket",      "ssl",     "http",   "httplib",   "urllib",
    "urllib2",      "requests",     "aiohttp", "httpx",  "asyncio",   "webbrowser",
    "smtplib",      "imaplib",      "ftplib",  "poplib", "telnetlib", "nntplib",
    "socketserver", "SocketServer", "xmlrpc",  "select", "selectors", "uuid",
};
static const char *const deserializers[] = {
    "pickle",
    "_pickle",
    "cPickle",
    "dill",
    "cloudpickle",
    "joblib",
    "shelve",
    "yaml.load",
    "yaml.load_all",
    "yaml.unsafe_load",
    "yaml.unsafe_load_all",
    "yaml.full_load",
    "yaml.full_load_all",
    "numpy.load",
    "numpy.lib.npyio",
    "pandas.read_pickle",
    "pandas.io.pickle",
};
static const char *const files[] = {
    "io",        "_io",     "codecs.open", "shutil",  "tempfile", "glob",   "filecmp",
    "fileinput", "pathlib", "linecache",   "mmap",    "logging",  "syslog", "tarfile",
    "zipfile",   "sqlite3", "_sqlite3",    "pexpect", "pipes",
};
/* numpy and torch internals with published gadgets */
static const char *const internals[] = {
    "numpy.f2py",
    "numpy.testing",
    "numpy.distutils",
    "numpy.ctypeslib",
    "torch.jit",
    "torch._dynamo",
    "torch._inductor",
    "torch.compile",
    "torch.hub",
    "torch.load",
    "torch.serialization.load",
    "torch.storage._load_from_bytes",
    "torch.utils._config_module",
    "torch.utils.collect_env",
    "torch.utils.bottleneck",
    "torch.utils.data.datapipes",
    "torch.utils.cpp_extension",
    "torch.fx",
    "torch.distributed",
    "torch.package",
    "torch.multiprocessing",
    "torch._C._jit",
    "torch.ops",
    "torch._ops",
};

#define FAMILY(t, why)                                                                             \
    { t, sizeof t / sizeof t[0], why }
/* Each group with the phrase its findings carry. */
static const struct family {
    const char *const *prefixes;
    size_t n;
    const char *why;
} families[] = {
    FAMILY(code_builtins, "a known code-execution family"),
    FAMILY(attribute_builtins, "a known code-execution family (attribute access reaching any "
                               "object)"),
    FAMILY(file_builtins, "a known dangerous family (file access)"),
    FAMILY(exit_builtins, "a known dangerous family (process control)"),
    FAMILY(processes, "a known dangerous family (process control, the interpreter, "
                      "imports)"),
    FAMILY(tools, "a known code-execution family (debuggers, shells, test tools, "
                  "callables that call what they are given)"),
    FAMILY(network, "a known dangerous family (network access)"),
    FAMILY(deserializers, "a known code-execution family (a deserializer that runs code)"),
    FAMILY(files, "a known dangerous family (file access)"),
    FAMILY(internals, "a known code-execution family (numpy/torch internals with "
                      "published gadgets)"),
};

/* Classes that only hold data (ckpt_scan_data_class), though their modules
 * are in a dangerous family (pathlib: files; types: code objects) */
static const char *const data_classes[] = {
    "pathlib.Path",       "pathlib.PosixPath",     "pathlib.WindowsPath",
    "pathlib.PurePath",   "pathlib.PurePosixPath", "pathlib.PureWindowsPath",
    "argparse.Namespace", "types.SimpleNamespace",
};

/* Calls that unpickle an argument, besides the deserializers' modules */
static const char *const torch_unpicklers[] = {
    "torch.load",
    "torch.serialization.load",
    "torch.storage._load_from_bytes",
    "numpy.loads",
};

const char *ckpt_scan_map_module(const char *module) {
    if (strcmp(module, "__builtin__") == 0) return "builtins";
    if (strcmp(module, "copy_reg") == 0) return "copyreg";
    /* _compat_pickle.IMPORT_MAPPING: torch's weights_only unpickler allows
     * UserDict.OrderedDict as collections.OrderedDict */
    if (!strcmp(module, "UserDict") || !strcmp(module, "UserList") || !strcmp(module, "UserString"))
        return "collections";
    return module;
}

/* 1 if the dotted path module.name equals `prefix` or continues it at a
 * '.' boundary. */
static int path_has_prefix(const char *module, const char *name, const char *prefix) {
    size_t ml = strlen(module), pl = strlen(prefix);
    if (pl <= ml)
        return strncmp(module, prefix, pl) == 0 && (module[pl] == '\0' || module[pl] == '.');
    /* the prefix reaches into the name: module '.' name... */
    if (strncmp(module, prefix, ml) != 0 || prefix[ml] != '.') return 0;
    const char *rest = prefix + ml + 1;
    size_t rl = pl - ml - 1;
    return strncmp(name, rest, rl) == 0 && (name[rl] == '\0' || name[rl] == '.');
}

int ckpt_scan_unpickles(const char *module, const char *name) {
    module = ckpt_scan_map_module(module);
    for (size_t i = 0; i < sizeof deserializers / sizeof *deserializers; i++)
        if (strncmp(deserializers[i], "yaml.", 5) != 0 &&
            path_has_prefix(module, name, deserializers[i]))
            return 1;
    for (size_t i = 0; i < sizeof torch_unpicklers / sizeof *torch_unpicklers; i++)
        if (path_has_prefix(module, name, torch_unpicklers[i])) return 1;
    return 0;
}

/* 1 if some '.'-separated component of s is a dunder (__x__). */
static int has_dunder(const char *s) {
    while (*s) {
        const char *end = strchr(s, '.');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n > 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' && s[n - 2] == '_') return 1;
        if (!end) break;
        s = end + 1;
    }
    return 0;
}

int ckpt_scan_data_class(const char *module, const char *name) {
    size_t ml = strlen(module);
    for (size_t i = 0; i < sizeof data_classes / sizeof *data_classes; i++)
        if (strncmp(data_classes[i], module, ml) == 0 && data_classes[i][ml] == '.' &&
            strcmp(data_classes[i] + ml + 1, name) == 0)
            return 1;
    return 0;
}

ckpt_severity ckpt_scan_classify(const char *module, const char *name, const char **why) {
    module = ckpt_scan_map_module(module);
    if (ckpt_scan_data_class(module, name)) {
        *why = "a data-only class: it builds a value and runs nothing else; "
               "allow it to accept the file";
        return CKPT_SEVERITY_SUSPICIOUS;
    }
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (size_t i = 0; i < families[f].n; i++)
            if (path_has_prefix(module, name, families[f].prefixes[i])) {
                *why = families[f].why;
                return CKPT_SEVERITY_DANGEROUS;
            }
    /* __globals__, __class__, __subclasses__, __init__...: attribute walks
     * out of an allowlisted object to anything it can reach. */
    if (has_dunder(name)) {
        *why = "a dunder attribute walk out of the named object";
        return CKPT_SEVERITY_DANGEROUS;
    }
    if (strstr(module, "__")) {
        *why = "a module with '__' in its name (e.g. __main__), "
               "not on the allowlist";
        return CKPT_SEVERITY_SUSPICIOUS;
    }
    *why = "not on the allowlist of data builders";
    return CKPT_SEVERITY_SUSPICIOUS;
}

/* Opcodes that can open a stream: they need nothing on the stack. PROTO
 * (0x80) is checked with its operand. */
/* First bytes a pickle stream can start with: every string literal of a
 * scanned pickle is tested, so this is a table rather than a search. */
static const uint8_t stream_openers[256] = {
    ['('] = 1,  ['}'] = 1,  [']'] = 1,  [')'] = 1,  ['N'] = 1,  ['I'] = 1,
    ['L'] = 1,  ['F'] = 1,  ['S'] = 1,  ['V'] = 1,  ['K'] = 1,  ['J'] = 1,
    ['M'] = 1,  ['U'] = 1,  ['T'] = 1,  ['X'] = 1,  ['G'] = 1,  ['c'] = 1,
    ['P'] = 1,  ['B'] = 1,  ['C'] = 1,  [0x82] = 1, [0x83] = 1, [0x84] = 1, /* EXT1/2/4 */
    [0x88] = 1, [0x89] = 1,                                                 /* NEWTRUE/NEWFALSE */
    [0x8a] = 1, [0x8b] = 1,                                                 /* LONG1/LONG4 */
    [0x8c] = 1, [0x8d] = 1, [0x8e] = 1, /* SHORT_BINUNICODE/BINUNICODE8/BINBYTES8 */
    [0x8f] = 1, [0x95] = 1, [0x96] = 1, /* EMPTY_SET/FRAME/BYTEARRAY8 */
};

static int opens_stream(uint8_t c) { return stream_openers[c]; }

int ckpt_scan_pickle_start(const uint8_t *p, size_t n) {
    if (n == 0) return 0;
    if (p[0] == 0x80) return n >= 2 && p[1] <= 5;
    return opens_stream(p[0]);
}

/* Bytes read at a time where whitespace is skipped through a file. */
#define WS_CHUNK ((size_t)4096)

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int ckpt_scan_pickle_shape_at(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t n,
                              int *yes) {
    const uint8_t *b;
    *yes = 0;
    /* the first bytes, with some after them for the caller's next look
     * (an .npy preamble) */
    int rc = ckpt_source_view(src, v, p, n < 2 ? n : 2, 62, NULL, &b);
    if (rc || n < 2) return rc;
    if (b[0] == 0x80) {
        *yes = b[1] <= 5;
        return 0;
    }
    if (!opens_stream(b[0])) return 0;
    /* the last byte of p[1..n) that is not trailing whitespace, else p[0],
     * read backwards a chunk at a time */
    uint8_t first = b[0];
    for (size_t k = n; k > 1;) {
        size_t lo = k - 1 > WS_CHUNK ? k - WS_CHUNK : 1;
        const uint8_t *t;
        if ((rc = ckpt_source_view(src, v, p + lo, k - lo, 0, NULL, &t))) return rc;
        size_t j = k - lo;
        while (j > 0 && is_ws(t[j - 1])) j--;
        if (j > 0) {
            *yes = t[j - 1] == '.';
            return 0;
        }
        k = lo;
    }
    *yes = first == '.';
    return 0;
}

int ckpt_scan_pickle_shape(const uint8_t *p, size_t n) {
    ckpt_view v = {0};
    int yes;
    (void)ckpt_scan_pickle_shape_at(NULL, &v, p, n, &yes); /* memory: no error */
    return yes;
}

/* ------------------------------------------------------------ literals */

static int b64_val(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62; /* standard or URL-safe alphabet */
    if (c == '/' || c == '_') return 63;
    return -1;
}

static int hex_val(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

ckpt_lit_enc ckpt_scan_literal_encoding(const uint8_t *p, size_t n) {
    if (ckpt_scan_pickle_shape(p, n)) return CKPT_LIT_RAW;
    /* bytes in a protocol 2 pickle: _codecs.encode(latin-1 text), whose
     * UTF-8 form of U+0080 is C2 80 */
    if (n >= 4 && p[0] == 0xc2 && p[1] == 0x80 && p[2] <= 5) return CKPT_LIT_LATIN1;
    int h[4];
    if (n >= 4 && n % 2 == 0 && (h[0] = hex_val(p[0])) >= 0 && (h[1] = hex_val(p[1])) >= 0 &&
        (h[2] = hex_val(p[2])) >= 0 && (h[3] = hex_val(p[3])) >= 0) {
        uint8_t two[2] = {(uint8_t)(h[0] << 4 | h[1]), (uint8_t)(h[2] << 4 | h[3])};
        if (ckpt_scan_pickle_start(two, 2)) return CKPT_LIT_HEX;
    }
    if (n >= 8) {
        int v[4];
        for (int i = 0; i < 4; i++)
            if ((v[i] = b64_val(p[i])) < 0) return CKPT_LIT_NONE;
        uint8_t three[3] = {(uint8_t)(v[0] << 2 | v[1] >> 4),
                            (uint8_t)((v[1] & 15) << 4 | v[2] >> 2),
                            (uint8_t)((v[2] & 3) << 6 | v[3])};
        if (ckpt_scan_pickle_start(three, 3)) return CKPT_LIT_BASE64;
    }
    return CKPT_LIT_NONE;
}

int ckpt_scan_literal_decode(ckpt_lit_enc enc, const uint8_t *p, size_t n, uint8_t *out,
                             size_t *len) {
    size_t k = 0;
    if (enc == CKPT_LIT_LATIN1) {
        for (size_t i = 0; i < n; i++) {
            if (p[i] < 0x80)
                out[k++] = p[i];
            else if ((p[i] == 0xc2 || p[i] == 0xc3) && i + 1 < n && (p[i + 1] & 0xc0) == 0x80)
                out[k++] = (uint8_t)((p[i] & 3) << 6 | (p[i + 1] & 0x3f)), i++;
            else
                return -1; /* a code point above U+00FF: not bytes */
        }
    } else if (enc == CKPT_LIT_HEX) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            int hi = hex_val(p[i]), lo = hex_val(p[i + 1]);
            if (hi < 0 || lo < 0) return -1;
            out[k++] = (uint8_t)(hi << 4 | lo);
        }
    } else if (enc == CKPT_LIT_BASE64) { /* line breaks allowed */
        uint32_t acc = 0;
        int bits = 0, pad = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '\n' || p[i] == '\r') continue;
            if (p[i] == '=') {
                pad++;
                continue;
            }
            int v = b64_val(p[i]);
            if (v < 0 || pad) return -1;
            acc = (acc << 6 | (uint32_t)v) & 0xffffff;
            if ((bits += 6) >= 8) {
                bits -= 8;
                out[k++] = (uint8_t)(acc >> bits);
            }
        }
        if (pad > 2) return -1;
    } else {
        return -1;
    }
    *len = k;
    return 0;
}

/* ------------------------------------------------------------ containers */

static uint32_t rd32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether a head that starts with a zlib ('z') or LZMA-alone ('l') magic
 * is no stream the decompressor reads past its first bytes: zlib's first
 * deflate block is of the reserved type 3, or a stored one whose LEN and
 * NLEN (bytes 3-6) are not complements ('invalid block type', 'invalid
 * stored block lengths'); LZMA's range coder starts with a 0 byte (offset
 * 13; 'Corrupt input data'). joblib.load fails there before unpickling
 * anything. A safetensors file whose header length starts 78 01, 78 9C...
 * or is 93 (5D 00) is such a head: it was UNSCANNABLE. */
static int not_a_stream(const uint8_t *p, size_t n, char kind) {
    if (kind == 'l') return n > 13 && p[13] != 0;
    if (kind != 'z' || n < 3) return 0;
    unsigned type = (p[2] >> 1) & 3;
    if (type == 3) return 1;
    return type == 0 && n >= 7 && ((p[3] ^ p[5]) != 0xff || (p[4] ^ p[6]) != 0xff);
}

const char *ckpt_scan_foreign_container(const uint8_t *p, size_t n) {
    static const struct {
        const char *magic;
        size_t len, at;
        char kind; /* 'z' zlib, 'l' LZMA-alone: see not_a_stream */
        const char *what;
    } t[] = {
        {"7z\xbc\xaf\x27\x1c", 6, 0, 0, "7z archive"},
        {"\x1f\x8b", 2, 0, 0, "gzip stream"},
        {"BZh", 3, 0, 0, "bzip2 stream"},
        {"\xfd"
         "7zXZ",
         5, 0, 0, "xz stream"},
        {"\x28\xb5\x2f\xfd", 4, 0, 0, "zstd stream"},
        {"Rar!\x1a\x07", 6, 0, 0, "RAR archive"},
        {"PYTORCH1", 8, 0, 0, "PyTorch 'PYTORCH1' preview-format file"},
        /* joblib.load's compressors (_detect_compressor: zlib's 0x78, with
         * the four checks compressobj writes, LZMA 'alone' 5D 00, LZ4) */
        {"\x78\x01", 2, 0, 'z', "zlib stream (joblib.load decompresses and unpickles it)"},
        {"\x78\x5e", 2, 0, 'z', "zlib stream (joblib.load decompresses and unpickles it)"},
        {"\x78\x9c", 2, 0, 'z', "zlib stream (joblib.load decompresses and unpickles it)"},
        {"\x78\xda", 2, 0, 'z', "zlib stream (joblib.load decompresses and unpickles it)"},
        {"\x5d\x00", 2, 0, 'l', "LZMA stream (joblib.load decompresses and unpickles it)"},
        {"\x04\x22\x4d\x18", 4, 0, 0, "LZ4 frame (joblib.load decompresses and unpickles it)"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (n >= t[i].at + t[i].len && memcmp(p + t[i].at, t[i].magic, t[i].len) == 0)
            return not_a_stream(p, n, t[i].kind) ? NULL : t[i].what;
    /* joblib < 0.10's 'ZF' file: its length as int(..., 16) reads it
     * (spaces, a sign, 0x, digits), then a zlib stream */
    if (n >= 3 && p[0] == 'Z' && p[1] == 'F' &&
        ((p[2] && strchr(" \t\n\r\v\f+-", p[2])) || hex_val(p[2]) >= 0))
        return "joblib 'ZF' zlib file (joblib.load decompresses and unpickles it)";
    return NULL;
}

int ckpt_scan_looks_safetensors_at(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t n,
                                   int *yes) {
    const uint8_t *b;
    *yes = 0;
    if (n < 10) return 0;
    /* the length, and the header's first bytes with it */
    int rc = ckpt_source_view(src, v, p, 8, WS_CHUNK - 8, NULL, &b);
    if (rc) return rc;
    uint64_t hlen = (uint64_t)rd32le(b) | (uint64_t)rd32le(b + 4) << 32;
    if (hlen == 0 || hlen > n - 8) return 0;
    int c;
    if ((rc = ckpt_scan_first_non_ws(src, v, p, 8, 8 + (size_t)hlen, &c))) return rc;
    *yes = c == '{';
    return 0;
}

int ckpt_scan_first_non_ws(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t from,
                           size_t end, int *c) {
    *c = -1;
    for (size_t i = from; i < end;) {
        size_t k = (i / WS_CHUNK + 1) * WS_CHUNK;
        k = (k < end ? k : end) - i;
        const uint8_t *b;
        int rc = ckpt_source_view(src, v, p + i, k, 0, NULL, &b);
        if (rc) return rc;
        for (size_t j = 0; j < k; j++)
            if (!is_ws(b[j])) {
                *c = b[j];
                return 0;
            }
        i += k;
    }
    return 0;
}

int ckpt_scan_looks_safetensors(const uint8_t *p, size_t n) {
    ckpt_view v = {0};
    int yes;
    (void)ckpt_scan_looks_safetensors_at(NULL, &v, p, n, &yes); /* memory: no error */
    return yes;
}
