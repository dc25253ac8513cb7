/* ckpt/report.h - the doctor's health report: everything `ckpt doctor`
 * examines and concludes, for the CLI's text and as its JSON.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_REPORT_H
#define CKPT_INCLUDE_REPORT_H

#include "ckpt/file.h"
#include "ckpt/keys.h"
#include "ckpt/scan.h"
#include "ckpt/store.h"
#include "ckpt/training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A health report of a checkpoint file or directory, as `ckpt doctor`
 * prints it: the file is opened and verified, scanned (would loading it
 * run code?), summarised (tensors, top-level entries), analysed as a
 * training checkpoint (resume readiness, memory, metadata), its keys
 * checked for wrapper prefixes; the shards of a sharded set and the other
 * files of a directory (Hugging Face Trainer layout) are verified one by
 * one. A verdict sums it up: healthy, or the concerns that need attention
 * (corrupt, unsafe, partial resume, wrapper prefixes...). */
typedef struct ckpt_doctor_report ckpt_doctor_report;

typedef struct ckpt_doctor_options {
    unsigned version;       /* CKPT_DOCTOR_OPTIONS_VERSION */
    ckpt_open_options open; /* for every file opened (and its limits for
                               every scan) */
} ckpt_doctor_options;
#define CKPT_DOCTOR_OPTIONS_VERSION 1
#define CKPT_DOCTOR_OPTIONS_INIT                                                                   \
    { .version = CKPT_DOCTOR_OPTIONS_VERSION, .open = CKPT_OPEN_OPTIONS_INIT }
CKPT_API int ckpt_doctor_options_init(ckpt_doctor_options *opts, unsigned version);

/* One top-level entry of the contents: a key of the root dict (value its
 * item), the root itself when it is not a dict (name ""), or, for
 * safetensors, a group of tensors sharing a first name segment (value
 * NULL). name is name_len bytes, not NUL-terminated for a group. */
typedef struct ckpt_doctor_entry {
    const char *name;
    size_t name_len;
    const ckpt_value *value;
    uint64_t tensors, elements; /* tensors under it, their numel summed */
} ckpt_doctor_entry;

/* A file verified on its own: a shard of a sharded set, or another
 * checkpoint file of a directory. error (strings borrowed from the
 * report) is set when !ok. differs: 1 when the file is intact but, being
 * another weights file of a model directory (pytorch_model.bin beside
 * model.safetensors, which loaders take for copies of one save and choose
 * between by their own order), holds other tensors than the file
 * examined (keys less tied copies, dtypes, shapes or values, as ckpt_diff
 * compares them); ok is then 0 and error (CKPT_E_MISMATCH) says how. */
typedef struct ckpt_doctor_check {
    const char *name; /* as the index or the directory names it */
    int ok;
    uint64_t bytes; /* checked, up to the first problem */
    ckpt_error error;
    int differs;
} ckpt_doctor_check;

/* A weights file transformers' from_pretrained reads by its name
 * (model.safetensors, a shard model.safetensors.index.json lists) and
 * refuses for its __metadata__: present, with a "format" other than "pt",
 * "tf", "flax" or "mlx" (format: that value) or none (format NULL). name:
 * as the index or the directory names it; error (CKPT_E_MISMATCH, strings
 * borrowed from the report): what transformers says, and the fix. */
typedef struct ckpt_doctor_refusal {
    const char *name;
    const char *format;
    ckpt_error error;
} ckpt_doctor_refusal;

/* The scan of one file the report covers; report is NULL (and error set)
 * when the scan itself failed. about: for an unsafe file the report knows
 * (a Trainer's training_args.bin: pickled TrainingArguments, which no
 * resume loads), what it is and what to do, one sentence; else NULL. */
typedef struct ckpt_doctor_scan {
    const char *name; /* as shown: a directory's files by their name */
    const ckpt_scan_report *report;
    ckpt_error error;
    const char *about;
} ckpt_doctor_scan;

/* Examines path (a checkpoint file, a sharded index, or a directory) into
 * *out, freed with ckpt_doctor_report_free; opts may be NULL. A file that
 * is corrupt or cannot be parsed still gives a report (it says so).
 * Returns 0, or, when nothing can be examined: CKPT_E_IO (unreadable),
 * CKPT_E_NOMEM, CKPT_E_INVALID_ARG, CKPT_E_NOTFOUND (a directory without
 * a checkpoint file), or the code of a directory that cannot be analysed;
 * *out is then NULL. Not thread-safe with respect to the same path being
 * written; reports are independent otherwise. */
CKPT_API int ckpt_doctor(ckpt_doctor_report **out, const char *path,
                         const ckpt_doctor_options *opts);
/* ckpt_doctor of component i of a diffusers pipeline (its path,
 * ckpt_pipeline_path), the report carrying the component's name and
 * ckpt_pipeline_check's finding: a component DiffusionPipeline
 * .from_pretrained cannot load (weights, no config.json) needs attention,
 * the verdict line saying why first; ckpt_doctor_json writes "pipeline":
 * {"component", "error": null or {"code", "message", "file", "member",
 * "offset"}}. Returns as ckpt_doctor; CKPT_E_INVALID_ARG past the end. */
CKPT_API int ckpt_doctor_pipeline(ckpt_doctor_report **out, const ckpt_pipeline *p, size_t i,
                                  const ckpt_doctor_options *opts);
CKPT_API void ckpt_doctor_report_free(ckpt_doctor_report *r); /* NULL-safe */

/* The report as the JSON object `ckpt doctor --json` prints (compact, no
 * trailing newline): *out (freed with ckpt_string_free) and *len (may be
 * NULL). Returns 0 or CKPT_E_NOMEM. */
CKPT_API int ckpt_doctor_json(char **out, size_t *len, const ckpt_doctor_report *r);
/* What f's elements are when it is a bitsandbytes-quantized state_dict
 * (a 4-bit weight packing two parameters a byte, an int8 weight, their
 * quantization state): the note ckpt_doctor gives under "not vouched
 * for", "quantized with bitsandbytes: the N elements are not parameters
 * one for one; ...: P parameters in all". *out (freed with
 * ckpt_string_free), NULL for a file without those layouts. Returns 0,
 * CKPT_E_INVALID_ARG (NULL out or f), CKPT_E_NOMEM. */
CKPT_API int ckpt_file_quant_note(char **out, const ckpt_file *f);
/* Frees a string the library handed over (ckpt_doctor_json,
 * ckpt_training_json, ckpt_file_quant_note). NULL-safe. */
CKPT_API void ckpt_string_free(char *s);

/* 1 when nothing needs attention. */
CKPT_API int ckpt_doctor_healthy(const ckpt_doctor_report *r);
/* The verdict line: "HEALTHY: FORMAT, N keys, ..." or "ATTENTION:
 * CONCERN; CONCERN". Borrowed; raw text from the file (names, messages):
 * escape it for a terminal. */
CKPT_API const char *ckpt_doctor_summary(const ckpt_doctor_report *r);
/* The weights file examined (for a directory: its main weights file) and
 * the directory (NULL for a file). Borrowed. */
CKPT_API const char *ckpt_doctor_path(const ckpt_doctor_report *r);
CKPT_API const char *ckpt_doctor_directory(const ckpt_doctor_report *r);
/* Of a Hugging Face cache repository (models--ORG--NAME: blobs/,
 * snapshots/REVISION/, refs/main), examined as the snapshot folder its
 * refs/main names: that revision; else NULL. Borrowed. */
CKPT_API const char *ckpt_doctor_snapshot(const ckpt_doctor_report *r);
/* For a ckpt store directory (it holds LATEST): its generations, each
 * verified, and LATEST's state; the path examined is the generation
 * LATEST names, alone (generations are never combined). NULL otherwise.
 * Borrowed. */
CKPT_API const ckpt_store_listing *ckpt_doctor_store(const ckpt_doctor_report *r);
/* When the file's bytes fail verification: why no resume readiness is
 * claimed (what is damaged; inside tensor data torch.load would load the
 * wrong values silently), else NULL. Borrowed. */
CKPT_API const char *ckpt_doctor_resume_withheld(const ckpt_doctor_report *r);
/* The opened file, NULL when it could not be opened; then
 * ckpt_doctor_detected tells what its first bytes show. Borrowed. */
CKPT_API const ckpt_file *ckpt_doctor_file(const ckpt_doctor_report *r);
CKPT_API ckpt_format ckpt_doctor_detected(const ckpt_doctor_report *r);
/* Bytes: the file, or a sharded set's index and shards together. */
CKPT_API uint64_t ckpt_doctor_size(const ckpt_doctor_report *r);
/* Why the file is not intact (opened and verified), or NULL when it is.
 * Borrowed. */
CKPT_API const ckpt_error *ckpt_doctor_error(const ckpt_doctor_report *r);
/* What verification read (up to the first problem). Borrowed. */
CKPT_API const ckpt_verify_report *ckpt_doctor_verify_report(const ckpt_doctor_report *r);
/* 1 when the file carries ckpt's per-tensor digests (metadata ckpt.xxh3). */
CKPT_API int ckpt_doctor_has_digests(const ckpt_doctor_report *r);
/* numel and nbytes over every tensor; nbytes of the tensors of one dtype
 * (and *tensors their count, when not NULL). */
CKPT_API uint64_t ckpt_doctor_elements(const ckpt_doctor_report *r);
CKPT_API uint64_t ckpt_doctor_tensor_bytes(const ckpt_doctor_report *r);
CKPT_API uint64_t ckpt_doctor_dtype_bytes(const ckpt_doctor_report *r, ckpt_dtype dt,
                                          size_t *tensors);
/* Top-level entries (see ckpt_doctor_entry), in root order (groups by
 * name); ckpt_doctor_entries_cut is 1 when the tree was too deep or large
 * to walk whole (tallies partial). Borrowed. */
CKPT_API size_t ckpt_doctor_entry_count(const ckpt_doctor_report *r);
CKPT_API const ckpt_doctor_entry *ckpt_doctor_entry_at(const ckpt_doctor_report *r, size_t i);
CKPT_API int ckpt_doctor_entries_cut(const ckpt_doctor_report *r);
/* Files verified on their own: the shards of a sharded set
 * (ckpt_doctor_sharded is 1), or a directory's other checkpoint files.
 * Borrowed. */
CKPT_API size_t ckpt_doctor_check_count(const ckpt_doctor_report *r);
CKPT_API const ckpt_doctor_check *ckpt_doctor_check_at(const ckpt_doctor_report *r, size_t i);
CKPT_API int ckpt_doctor_sharded(const ckpt_doctor_report *r);
/* 1 when the weights are a file transformers' from_pretrained reads by its
 * name (see ckpt_doctor_refusal), whatever their metadata; then the files
 * of them it refuses (none: it reads them all). Borrowed. */
CKPT_API int ckpt_doctor_from_pretrained(const ckpt_doctor_report *r);
CKPT_API size_t ckpt_doctor_refusal_count(const ckpt_doctor_report *r);
CKPT_API const ckpt_doctor_refusal *ckpt_doctor_refusal_at(const ckpt_doctor_report *r, size_t i);
/* The scans: the file, then a directory's other files. The worst verdict
 * (a failed scan counts as unscannable). Borrowed. */
CKPT_API size_t ckpt_doctor_scan_count(const ckpt_doctor_report *r);
CKPT_API const ckpt_doctor_scan *ckpt_doctor_scan_at(const ckpt_doctor_report *r, size_t i);
CKPT_API ckpt_verdict ckpt_doctor_scan_verdict(const ckpt_doctor_report *r);
/* Key hygiene and training analysis; NULL when the file could not be
 * opened. Borrowed. */
CKPT_API const ckpt_keys_report *ckpt_doctor_keys(const ckpt_doctor_report *r);
CKPT_API const ckpt_training *ckpt_doctor_training(const ckpt_doctor_report *r);
/* What ckpt cannot vouch for, one sentence each (opaque objects, missing
 * checksums, shared storages, strided views...). Borrowed. */
CKPT_API size_t ckpt_doctor_note_count(const ckpt_doctor_report *r);
CKPT_API const char *ckpt_doctor_note(const ckpt_doctor_report *r, size_t i);
/* Seconds each step of ckpt_doctor took ("open", "verify", "summary",
 * "shards", "training", "verify others", "safety"), for benchmarks:
 * the step's name (static), *seconds; NULL past the end. */
CKPT_API const char *ckpt_doctor_timing(const ckpt_doctor_report *r, size_t i, double *seconds);

/* The training analysis as the JSON object of `ckpt inspect --summary
 * --json`: {"file": file, "format": format, "resume", "memory",
 * "metadata"}; *out freed with ckpt_string_free, *len may be NULL.
 * Returns 0, CKPT_E_NOMEM, CKPT_E_INVALID_ARG (t NULL). */
CKPT_API int ckpt_training_json(char **out, size_t *len, const ckpt_training *t, const char *file,
                                const char *format);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_REPORT_H */
