/* scan_policy.c - the known code-execution families (FORMATS.md §5.1
 * picklescan _unsafe_globals, §5.2 fickling UNSAFE_IMPORTS/UnsafeImportsML,
 * §5.3 modelscan, §5.5 published bypasses) and the shape of a pickle. */
#include "scan_policy.h"

#include <string.h>

/* Dotted prefixes: "os" matches os, os.system and os.path.join; a module
 * match covers every submodule (picklescan's fix for asyncio.unix_events)
 * and every attribute, so "code" also covers
 * code.InteractiveInterpreter.runcode. Matching is on the full dotted path
 * module.name, which also catches a name smuggled into the qualname
 * ("torch" + "jit.load"). */
static const char *const dangerous[] = {
    /* builtins that reach code, files or attributes */
    "builtins.eval", "builtins.exec", "builtins.execfile", "builtins.compile",
    "builtins.getattr", "builtins.setattr", "builtins.delattr",
    "builtins.__import__", "builtins.open", "builtins.file",
    "builtins.breakpoint", "builtins.apply", "builtins.globals",
    "builtins.locals", "builtins.vars", "builtins.input",
    "builtins.raw_input", "builtins.help", "builtins.exit", "builtins.quit",
    "builtins.reload", "builtins.__build_class__", "builtins.__loader__",
    "__builtins__",
    /* processes, the interpreter, imports */
    "os", "posix", "nt", "subprocess", "_posixsubprocess", "sys", "pty",
    "commands", "multiprocessing", "_multiprocessing", "concurrent", "code",
    "codeop", "runpy", "marshal", "types", "importlib", "_frozen_importlib",
    "_frozen_importlib_external", "_imp", "imp", "pkgutil", "zipimport",
    "site", "gc", "inspect", "ctypes", "_ctypes", "_interpreters",
    "_xxsubinterpreters", "interpreters", "_winapi", "winreg", "_winreg",
    "msvcrt", "platform", "sched", "atexit", "signal", "_signal",
    "threading", "_thread", "thread",
    /* debuggers, profilers, shells, test and packaging helpers */
    "cProfile", "profile", "pdb", "bdb", "timeit", "trace", "doctest",
    "unittest", "test", "idlelib", "lib2to3", "pydoc", "_pyrepl",
    "ensurepip", "pip", "venv", "distutils", "setuptools", "IPython",
    "_osx_support", "_aix_support", "compileall", "py_compile",
    /* callables that call what they are given */
    "operator", "_operator", "functools",
    /* network */
    "socket", "_socket", "ssl", "http", "httplib", "urllib", "urllib2",
    "requests", "aiohttp", "httpx", "asyncio", "webbrowser", "smtplib",
    "imaplib", "ftplib", "poplib", "telnetlib", "nntplib", "socketserver",
    "SocketServer", "xmlrpc", "select", "selectors", "uuid",
    /* deserializers that run code */
    "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib",
    "shelve", "yaml.load", "yaml.load_all", "yaml.unsafe_load",
    "yaml.unsafe_load_all", "yaml.full_load", "yaml.full_load_all",
    "numpy.load", "numpy.lib.npyio", "pandas.read_pickle", "pandas.io.pickle",
    /* files */
    "io", "_io", "codecs.open", "shutil", "tempfile", "glob", "filecmp",
    "fileinput", "pathlib", "linecache", "mmap", "logging", "syslog",
    "tarfile", "zipfile", "sqlite3", "_sqlite3", "pexpect", "pipes",
    /* numpy and torch internals with published gadgets */
    "numpy.f2py", "numpy.testing", "numpy.distutils", "numpy.ctypeslib",
    "torch.jit", "torch._dynamo", "torch._inductor", "torch.compile",
    "torch.hub", "torch.load", "torch.serialization.load",
    "torch.storage._load_from_bytes", "torch.utils._config_module",
    "torch.utils.collect_env", "torch.utils.bottleneck",
    "torch.utils.data.datapipes", "torch.utils.cpp_extension", "torch.fx",
    "torch.distributed", "torch.package", "torch.multiprocessing",
    "torch._C._jit", "torch.ops", "torch._ops",
};

const char *ckpt_scan_map_module(const char *module) {
    if (strcmp(module, "__builtin__") == 0) return "builtins";
    if (strcmp(module, "copy_reg") == 0) return "copyreg";
    return module;
}

/* 1 if the dotted path module.name equals `prefix` or continues it at a
 * '.' boundary. */
static int path_has_prefix(const char *module, const char *name,
                           const char *prefix) {
    size_t ml = strlen(module), pl = strlen(prefix);
    if (pl <= ml)
        return strncmp(module, prefix, pl) == 0 &&
               (module[pl] == '\0' || module[pl] == '.');
    /* the prefix reaches into the name: module '.' name... */
    if (strncmp(module, prefix, ml) != 0 || prefix[ml] != '.') return 0;
    const char *rest = prefix + ml + 1;
    size_t rl = pl - ml - 1;
    return strncmp(name, rest, rl) == 0 && (name[rl] == '\0' || name[rl] == '.');
}

/* 1 if some '.'-separated component of s is a dunder (__x__). */
static int has_dunder(const char *s) {
    while (*s) {
        const char *end = strchr(s, '.');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n > 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' && s[n - 2] == '_')
            return 1;
        if (!end) break;
        s = end + 1;
    }
    return 0;
}

ckpt_severity ckpt_scan_classify(const char *module, const char *name,
                                 const char **why) {
    module = ckpt_scan_map_module(module);
    for (size_t i = 0; i < sizeof dangerous / sizeof dangerous[0]; i++) {
        if (path_has_prefix(module, name, dangerous[i])) {
            *why = "a known code-execution family";
            return CKPT_SEVERITY_DANGEROUS;
        }
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
static int opens_stream(uint8_t c) {
    static const char ascii[] = "(}])NILFSVKJMUTXGcPBC";
    if (c >= 0x20 && c < 0x7f) return strchr(ascii, c) != NULL;
    switch (c) {
    case 0x82: case 0x83: case 0x84: /* EXT1/2/4 */
    case 0x88: case 0x89:            /* NEWTRUE/NEWFALSE */
    case 0x8a: case 0x8b:            /* LONG1/LONG4 */
    case 0x8c: case 0x8d: case 0x8e: /* SHORT_BINUNICODE/BINUNICODE8/BINBYTES8 */
    case 0x8f: case 0x95: case 0x96: /* EMPTY_SET/FRAME/BYTEARRAY8 */
        return 1;
    default:
        return 0;
    }
}

int ckpt_scan_pickle_start(const uint8_t *p, size_t n) {
    if (n == 0) return 0;
    if (p[0] == 0x80) return n >= 2 && p[1] <= 5;
    return opens_stream(p[0]);
}

int ckpt_scan_pickle_shape(const uint8_t *p, size_t n) {
    if (n >= 2 && p[0] == 0x80) return p[1] <= 5;
    if (n < 2 || !opens_stream(p[0])) return 0;
    while (n > 1 && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == ' ' ||
                     p[n - 1] == '\t'))
        n--;
    return p[n - 1] == '.';
}
