/* ckpt/scan.h - scan: would loading this file run code?.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_SCAN_H
#define CKPT_INCLUDE_SCAN_H

#include "ckpt/file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether loading a file with torch.load / pickle would run code, decided
 * without running anything: every pickle stream in the file (zip members
 * recognised by content, legacy stacked pickles, pickles that an
 * unpickling call such as pickle.loads or torch.load receives as str/bytes
 * literals, up to max_nesting deep; any other string is data) runs through
 * the restricted machine, read as CPython's unpickler reads it, and every
 * global it names, calls or BUILDs is checked against
 * the allowlist of data builders (torch's weights_only set plus numpy
 * scalar/array reconstruction) extended by `allow`. A sharded index (JSON
 * text with a "weight_map" object, detected as ckpt_open does) is as safe
 * as the shard files it lists: ckpt_scan scans each distinct shard in the
 * index's directory (its findings name the shard as their member; a shard
 * that is unreadable, outside the directory or no checkpoint makes the
 * index unscannable; one that does not exist holds no code, an info
 * finding "shard-missing": a loader's open fails there, and ckpt_verify
 * of the set reports it); ckpt_scan_memory cannot reach the shards:
 * the buffer holds no checkpoint content itself (not-a-checkpoint, with
 * an info finding "sharded-index" saying the shards were not scanned).
 * A stream a loader would unpickle that does not parse to its STOP, or
 * that file and memory unpicklers would read differently, makes the file
 * unscannable (an info finding "parse-error" gives the offset).
 * An `allow` entry naming a known dangerous family is ignored, and an
 * info finding of kind "allow-ignored" says so. References: FORMATS.md §5
 * (picklescan, fickling, modelscan bypasses). */
typedef enum ckpt_verdict {
    CKPT_VERDICT_SAFE = 0,             /* only allowlisted globals */
    CKPT_VERDICT_UNSAFE = 1,           /* a global off the allowlist is used */
    CKPT_VERDICT_UNSCANNABLE = 2,      /* content could not be fully examined */
    CKPT_VERDICT_NOT_A_CHECKPOINT = 3, /* no pickle or safetensors content */
    CKPT_VERDICT_REVIEW = 4            /* only allowlisted globals and data-only
                                           classes (pathlib paths,
                                           argparse.Namespace), each named by a
                                           finding of kind "review"; safe once
                                           they are in `allow` */
} ckpt_verdict;

typedef enum ckpt_severity {
    CKPT_SEVERITY_INFO = 0,
    CKPT_SEVERITY_SUSPICIOUS = 1, /* unknown global: cannot vouch for it */
    CKPT_SEVERITY_DANGEROUS = 2   /* a known dangerous family: code
                                       execution, process control, network
                                       or file access */
} ckpt_severity;

/* One finding. Strings are borrowed from the report. */
typedef struct ckpt_finding {
    ckpt_severity severity;
    const char *kind;   /* e.g. "global", "call", "build", "encrypted",
                            "polyglot", "trailing-bytes", "parse-error" */
    const char *global; /* "module.qualname", or NULL */
    const char *member; /* zip member or pickle name ("" for the file);
                            for a shard of a sharded index, the shard's
                            name, or "SHARD:MEMBER" */
    uint64_t offset;    /* absolute byte offset in the file; for a
                            member of an archive inside a zip member,
                            "OUTER:INNER", the offset inside OUTER as
                            extracted (stored or inflated) */
    const char *message;
} ckpt_finding;

typedef struct ckpt_scan_report ckpt_scan_report;

typedef struct ckpt_scan_options {
    unsigned version; /* CKPT_SCAN_OPTIONS_VERSION */
    ckpt_limits limits;
    const char *const *allow; /* extra allowed "module.qualname" (exact) */
    size_t nallow;
    uint32_t max_nesting; /* pickles nested in the literals an
                                 unpickling call receives, levels */
} ckpt_scan_options;
#define CKPT_SCAN_OPTIONS_VERSION 1
#define CKPT_SCAN_OPTIONS_INIT                                                                     \
    {                                                                                              \
        .version = CKPT_SCAN_OPTIONS_VERSION, .limits = CKPT_LIMITS_INIT, .allow = NULL,           \
        .nallow = 0, .max_nesting = 3                                                              \
    }
CKPT_API int ckpt_scan_options_init(ckpt_scan_options *opts, unsigned version);

/* Scans a file / a buffer. *out receives a report even for unsafe,
 * unscannable and non-checkpoint content (the verdict says which); the
 * return is 0 then. Errors: CKPT_E_IO (cannot read), CKPT_E_TRUNCATED
 * (a file read, the one scanned or a shard or data file it names, shrank
 * while being scanned: no report, the error names that file and where it
 * ends now), CKPT_E_NOMEM, CKPT_E_INVALID_ARG. Free with
 * ckpt_scan_report_free (NULL-safe). Files are read with pread, never
 * through a mapping (a file that shrinks is that error, never SIGBUS):
 * their pickles, zip directories and scanned members, headers and index
 * text, not the tensor data, which is only sniffed. */
CKPT_API int ckpt_scan(ckpt_scan_report **out, const char *path, const ckpt_scan_options *opts);
CKPT_API int ckpt_scan_memory(ckpt_scan_report **out, const void *data, size_t size,
                              const char *name, const ckpt_scan_options *opts);
/* Scans the content of f, a file already open (ckpt_open /
 * ckpt_open_memory): the report ckpt_scan of its path (ckpt_scan_memory
 * of its bytes) gives, but a safetensors header is not parsed a second
 * time (the open validated it, with the open's limits), nor a torch zip's
 * directory (the scan walks the one the open read). */
CKPT_API int ckpt_scan_file(ckpt_scan_report **out, const ckpt_file *f,
                            const ckpt_scan_options *opts);
CKPT_API void ckpt_scan_report_free(ckpt_scan_report *r);

CKPT_API ckpt_verdict ckpt_scan_verdict(const ckpt_scan_report *r);
/* "safe", "unsafe", "unscannable", "not-a-checkpoint", "review". Static
 * string. */
CKPT_API const char *ckpt_verdict_name(ckpt_verdict v);
/* "info", "suspicious", "dangerous". Static string. */
CKPT_API const char *ckpt_severity_name(ckpt_severity s);
/* Findings in file order. Borrowed. */
CKPT_API size_t ckpt_scan_finding_count(const ckpt_scan_report *r);
CKPT_API const ckpt_finding *ckpt_scan_finding(const ckpt_scan_report *r, size_t i);
/* torch.load's default since torch 2.6, weights_only=True: whether its
 * restricted unpickler (torch/_weights_only_unpickler.py) refuses the
 * pickles torch.load reads (a torch archive's data.pkl, a legacy file's
 * stacked pickles, a plain pickle file), and the first thing it refuses,
 * in file order: a global off its allowlist (numpy scalars and arrays,
 * argparse.Namespace, pathlib paths, builtins.dict/list/tuple, any class
 * of the user's: ckpt_builders_weights_only's list, which is not the
 * scan's own allowlist) or an opcode outside the protocol 2 set torch.save
 * writes (FRAME, STACK_GLOBAL, MEMOIZE...). Not a safety finding: a safe
 * file may be refused, and the verdict does not change. Torch before 2.6
 * does not load with weights_only by default. */
typedef struct ckpt_weights_only {
    int refused;         /* 1: torch.load(f) of torch >= 2.6 raises */
    const char *global;  /* "module.qualname" refused, or NULL */
    const char *opcode;  /* the refused opcode's name ("FRAME"), or NULL */
    const char *member;  /* the zip member, "" for the file */
    uint64_t offset;     /* absolute byte offset, CKPT_NO_OFFSET when
                           none is refused */
    const char *message; /* "torch.load(weights_only=True) of torch >= 2.6
                            refuses this: global X at byte N (allow it
                            with torch.serialization.add_safe_globals([X])
                            or load with weights_only=False if you trust
                            the file)", or NULL */
} ckpt_weights_only;

/* Fills *out (strings borrowed from the report) and returns out->refused:
 * 0 also for a report that is unscannable or no checkpoint (nothing
 * known) and for safetensors and DCP content, which torch.load does not
 * unpickle. */
CKPT_API int ckpt_scan_weights_only(const ckpt_scan_report *r, ckpt_weights_only *out);

/* Every distinct global the file names, "module.qualname", sorted. */
CKPT_API size_t ckpt_scan_global_count(const ckpt_scan_report *r);
CKPT_API const char *ckpt_scan_global(const ckpt_scan_report *r, size_t i);

/* The files a scan of a sharded index (or of a DCP directory's
 * HuggingFace safetensors files) reached, each once: the shard names as
 * findings name them, relative to the index's directory, in the order
 * scanned; none for any other file. `ckpt scan DIR` reports such a shard
 * through its index, not a second time on its own. */
CKPT_API size_t ckpt_scan_shard_count(const ckpt_scan_report *r);
CKPT_API const char *ckpt_scan_shard(const ckpt_scan_report *r, size_t i);

/* The files a scan of a directory checks (`ckpt scan DIR`, doctor's
 * subdirectories), the one walk both use: each directory's regular files
 * and DCP directories (one checkpoint each) in name order (strcmp), then
 * each of its subdirectories the same way, down to 16 levels below `dir`;
 * hidden entries (a name starting with ".") and links to directories are
 * not followed. An entry that cannot be examined (a subdirectory that
 * cannot be opened or lies deeper, a name that cannot be stat'ed) is
 * listed with error.code != 0 (CKPT_E_IO, CKPT_E_LIMIT) and its message,
 * never left out. `sub` (NULL for none): walk only dir/sub, its names
 * still relative to dir and its depth counted from dir. Returns 0, or
 * CKPT_E_IO when the directory itself cannot be opened, CKPT_E_NOMEM,
 * CKPT_E_INVALID_ARG. Strings are borrowed from the list. */
typedef struct ckpt_dir_entry {
    const char *path; /* dir "/" name */
    const char *name; /* relative to dir: "unet/model.bin" */
    size_t base;      /* where name's last component starts: 5 there, 0 at the top */
    ckpt_error error; /* code 0: to scan; else why it is left unread */
} ckpt_dir_entry;

typedef struct ckpt_scan_dir ckpt_scan_dir;

CKPT_API int ckpt_scan_dir_list(ckpt_scan_dir **out, const char *dir, const char *sub);
CKPT_API size_t ckpt_scan_dir_count(const ckpt_scan_dir *w);
CKPT_API const ckpt_dir_entry *ckpt_scan_dir_entry(const ckpt_scan_dir *w, size_t i);
CKPT_API void ckpt_scan_dir_free(ckpt_scan_dir *w);

/* Whether file k of one directory's n files (names[k]: its name in the
 * directory; reports[m]: file m's scan, NULL when not made) is a shard a
 * sharded index among them reached (ckpt_scan_shard): such a shard is
 * reported once, through the index, by `ckpt scan DIR` and doctor alike.
 * An index is never covered. */
CKPT_API int ckpt_scan_dir_covered(const ckpt_scan_report *const *reports, const char *const *names,
                                   size_t n, size_t k);

/* Scans what `ckpt scan DIR` reports of w's entries, one directory at a
 * time: its JSON files first, then each other file no sharded index
 * there reached (ckpt_scan_dir_covered), each with ckpt_scan and opts
 * (NULL: the defaults). A file whose scan fails is no failure of the
 * call: its error is kept. Returns 0, CKPT_E_NOMEM, or CKPT_E_INVALID_ARG
 * (w NULL, or scanned already). */
CKPT_API int ckpt_scan_dir_scan(ckpt_scan_dir *w, const ckpt_scan_options *opts);
/* After ckpt_scan_dir_scan: entry i's report (borrowed from w), or NULL
 * when it has none; then *error (error may be NULL) says why: the walk
 * left it unread (the entry's own error) or its scan failed; NULL for a
 * shard reported through its index. */
CKPT_API const ckpt_scan_report *ckpt_scan_dir_report(const ckpt_scan_dir *w, size_t i,
                                                      const ckpt_error **error);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_SCAN_H */
