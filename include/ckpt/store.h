/* ckpt/store.h - store: numbered generations of a checkpoint, verified before LATEST moves.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_STORE_H
#define CKPT_INCLUDE_STORE_H

#include "ckpt/file.h"
#include "ckpt/write.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A store is a directory of generations, files "NAME-STEP.safetensors" or
 * "NAME-STEP.pt" and DCP directories "NAME-STEP.dcp" (ckpt.Store's
 * multi-rank commits, verified as ckpt_open of the directory reads them;
 * a directory with a file's name, or a file with a directory's, is no
 * generation). STEP is decimal without leading zeros, sorted
 * numerically; equal steps by name. A file LATEST holds the
 * name of the newest committed generation and "\n" (for readers that do
 * not link ckpt: `cat DIR/LATEST`). Every file is written through the
 * atomic commit (temporary ".FILE.tmp-PID-HEX" in DIR, fsync, rename, fsync
 * of DIR), so a crash at any moment leaves each name either absent or
 * complete. A generation is committed once it is in place and verifies.
 * A DCP directory generation is staged under a temporary name and renamed
 * into place whole (ckpt_store_stage_dir, ckpt_store_commit_dir).
 * Nothing is trusted unverified: latest, list and prune open and fully
 * verify (ckpt_verify) the generations they judge. Readers may run at any
 * time. Writers (commit, prune) take turns through an exclusive flock on
 * DIR/.ckpt-store.lock, which the kernel releases if the holder dies: a
 * commit writes its file unlocked, then under the lock re-reads the
 * directory, refuses a step committed meanwhile, renames, verifies, moves
 * LATEST (only ever forward: to the newest generation that verifies) and
 * prunes. Pruning keeps the generation LATEST names and the one it named
 * before the last move, so a reader following LATEST never finds it
 * dangling. Weaker filesystems: on NFS flock is emulated with lock-manager
 * byte-range locks (reliable with NFSv4 or a running lockd), on Lustre it
 * is cluster-wide only with `-o flock`, and rename and directory-fsync
 * atomicity follow the server's caching; ckpt_store_lock_caveat names such
 * a filesystem (and `ckpt store list` prints it): commit from one host at
 * a time there. Where flock is unsupported (ENOLCK, EOPNOTSUPP) commit
 * proceeds unlocked.
 * Other files in DIR are ignored. NAME is a label, not a namespace: the
 * generations of every NAME in DIR form one sequence by step, which
 * LATEST, latest and pruning all go by (keep one run per directory). */
/* What a store call tells its caller as it happens (ckpt_store_options
 * on_event), each with a file name in dir: */
typedef enum ckpt_store_event {
    /* commit, prune: a generation pruning removed */
    CKPT_STORE_EVENT_PRUNED = 0,
    /* gc, and commit: a stale temporary file or directory removed */
    CKPT_STORE_EVENT_TEMP_REMOVED = 1,
    /* commit: the generation LATEST names once it moved (the new one, or
     * a newer one that verifies and keeps it) */
    CKPT_STORE_EVENT_LATEST = 2,
    /* commit: the verified generation holding the step, when the commit
     * is refused for it (CKPT_E_INVALID_ARG; not for a bad name) */
    CKPT_STORE_EVENT_STEP_TAKEN = 3
} ckpt_store_event;
typedef void (*ckpt_store_event_fn)(void *ctx, ckpt_store_event what, const char *file);

typedef struct ckpt_store_options {
    unsigned version;          /* CKPT_STORE_OPTIONS_VERSION */
    uint32_t keep;             /* commit and prune keep the `keep` newest
                               generations that verify (at least the newest
                               one) and LATEST's; default 3 */
    uint32_t stale_minutes;    /* gc: an unlocked temporary file whose PID is
                               still running is stale once unmodified this
                               long; default 60; 0: every unlocked one */
    ckpt_open_options open;    /* limits for opening and verifying generations */
    int replace;               /* commit: 1 replaces a step already committed
                               (else refused); default 0 (version 2) */
    ckpt_progress_fn progress; /* ckpt_store_commit: bytes of the source */
    void *progress_ctx;        /* copied, done of total (its size), from 0;
                                  NULL for none (version 3) */
    /* each event as it happens, with event_ctx; NULL for none (version 4) */
    ckpt_store_event_fn on_event;
    void *event_ctx;
} ckpt_store_options;
#define CKPT_STORE_OPTIONS_VERSION 4
#define CKPT_STORE_OPTIONS_INIT                                                                    \
    {                                                                                              \
        .version = CKPT_STORE_OPTIONS_VERSION, .keep = 3u, .stale_minutes = 60u,                   \
        .open = CKPT_OPEN_OPTIONS_INIT, .replace = 0, .progress = NULL, .progress_ctx = NULL,      \
        .on_event = NULL, .event_ctx = NULL                                                        \
    }
CKPT_API int ckpt_store_options_init(ckpt_store_options *opts, unsigned version);

/* Commits the checkpoint file `src` (any format ckpt_open reads but a
 * sharded set) as generation `step` of `name` in `dir` (created, with its
 * missing parents, mode 0755 less the umask, when it does not exist).
 * `src` is opened and verified first: a corrupt one is refused with
 * "SRC is corrupt: REASON; nothing committed" and nothing is written.
 * Then the bytes are copied unchanged to "dir/NAME-STEP.EXT" (EXT
 * ".safetensors" for a
 * safetensors source, ".pt" for torch zip, legacy and pickle sources)
 * through the atomic commit (fsync of the file and of dir); a DCP
 * directory source (dcp.save's output) has every regular file in it copied
 * into a staging directory and is committed as "dir/NAME-STEP.dcp" by
 * ckpt_store_stage_dir and ckpt_store_commit_dir (below). The file is
 * re-read under its temporary name (sequentially, pread with readahead
 * hints; its pages stay in the page cache, as a torch.save file's would),
 * opened and verified fully before it is renamed to its generation's
 * name (so a replaced step keeps its generation when the new one does
 * not verify); only then is LATEST replaced (atomically) to name the newest
 * verified generation (normally the new one; a verified generation with a
 * higher step keeps it), and only then are generations beyond opts->keep
 * pruned as ckpt_store_prune does (the new generation is never pruned),
 * and what writers killed earlier left removed as ckpt_store_gc removes
 * it (CKPT_STORE_EVENT_TEMP_REMOVED): temporary files, and temporary
 * directories where the store lock works.
 * Pruning verifies up to keep - 1 older generations (the new one is known
 * good). A generation that fails verification is removed and LATEST
 * is not touched. Once it verifies, the generation is committed even if
 * moving LATEST or pruning then fails: the call returns that failure with
 * a message saying the generation was committed, and *path is filled.
 *
 * name: 1 to 200 bytes, no '/', no control bytes, not starting with '.'.
 * A step of `name` that is already committed (a verified file
 * NAME-STEP.*, checked again under the store lock) is refused unless
 * opts->replace; a corrupt one is replaced. path/cap: receives
 * "dir/NAME-STEP.EXT" (NUL-terminated) once the generation is committed;
 * path may be NULL (cap 0). opts may be NULL (CKPT_STORE_OPTIONS_INIT).
 * Returns 0; CKPT_E_INVALID_ARG (bad name, cap too small, step already
 * committed, a sharded source: commit one file or a DCP directory, which
 * ckpt_convert makes of it); CKPT_E_IO (dir or src unreadable, dir cannot
 * be created; write, fsync or rename failed; LATEST or pruning failed
 * after the commit); the ckpt_open/ckpt_verify code when the source or the
 * written copy is malformed or corrupt; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_commit(char *path, size_t cap, const char *dir, const char *name,
                               uint64_t step, const char *src, const ckpt_store_options *opts);

/* ckpt_store_commit of the tree `root` (built with ckpt_tree_*, or a
 * ckpt_file's tree) written in `format` (CKPT_FORMAT_SAFETENSORS:
 * "NAME-STEP.safetensors", or CKPT_FORMAT_TORCH_ZIP: "NAME-STEP.pt")
 * straight into the store's temporary file, as ckpt_tree_write writes it
 * with `wopts` (may be NULL; its backup is ignored): no intermediate file,
 * one write, one fsync, one verifying read. Everything else (the lock,
 * the step check, verification, LATEST, pruning, return codes) as
 * ckpt_store_commit; a writer's error (CKPT_E_INVALID_ARG for a value the
 * format cannot hold) leaves the store untouched. */
CKPT_API int ckpt_store_commit_tree(char *path, size_t cap, const char *dir, const char *name,
                                    uint64_t step, const ckpt_value *root, ckpt_format format,
                                    const ckpt_write_options *wopts,
                                    const ckpt_store_options *opts);

/* The commit of a DCP directory generation "NAME-STEP.dcp" (ckpt.Store's
 * multi-rank commits), in two calls around the ranks' writing:
 *
 *     ckpt_store_stage *st = NULL;
 *     int rc = ckpt_store_stage_dir(&st, dir, name, step, opts);
 *     // every rank writes its files into ckpt_store_stage_path(st)
 *     if (rc == 0) rc = ckpt_store_commit_dir(path, cap, st, opts);
 *     ckpt_store_stage_free(st);
 *
 * ckpt_store_stage_dir creates dir (as ckpt_store_commit does) when
 * missing, takes the store lock and holds it until ckpt_store_stage_free
 * (so other writers wait and gc leaves the staging directory alone;
 * readers are not blocked), refuses a step of `name` already committed
 * (as ckpt_store_commit; unless opts->replace), creates the empty staging
 * directory ".NAME-STEP.dcp.tmp-PID-HEX" in dir and fsyncs dir. *out
 * receives the stage (free with ckpt_store_stage_free); NULL on failure.
 * Returns 0, CKPT_E_INVALID_ARG (bad name, step committed), CKPT_E_IO,
 * CKPT_E_NOMEM. */
typedef struct ckpt_store_stage ckpt_store_stage;
CKPT_API int ckpt_store_stage_dir(ckpt_store_stage **out, const char *dir, const char *name,
                                  uint64_t step, const ckpt_store_options *opts);
/* The staging directory's path (borrowed, lives as long as st). */
CKPT_API const char *ckpt_store_stage_path(const ckpt_store_stage *st);

/* Commits the staged directory, complete (the ranks' files and
 * ".metadata" written), as "dir/NAME-STEP.dcp", by the rules of
 * ckpt_store_commit: it is opened and fully verified (as ckpt_open and
 * ckpt_verify read a DCP directory; a failure is returned with "nothing
 * committed" and the store is untouched), every file in it and the
 * directory itself are fsynced, the step is checked again, it is renamed
 * into place (a generation of that name already there, replaced or
 * corrupt, is swapped out atomically and removed) and dir fsynced; then
 * LATEST moves forward and pruning follows as after ckpt_store_commit
 * (LATEST's previous generation is kept, whatever opts->keep, and
 * nothing is removed unless `keep` generations verify). A failure after
 * the rename says the generation was committed, and *path is filled.
 * path/cap as ckpt_store_commit (checked before anything is renamed).
 * Once per stage; the stage is still freed by ckpt_store_stage_free.
 * Returns 0, the ckpt_open/ckpt_verify code of a staged directory that
 * does not verify, CKPT_E_INVALID_ARG (st NULL or already committed, cap
 * too small, step committed meanwhile), CKPT_E_IO, CKPT_E_NOMEM. */
CKPT_API int ckpt_store_commit_dir(char *path, size_t cap, ckpt_store_stage *st,
                                   const ckpt_store_options *opts);
/* Removes the staging directory unless ckpt_store_commit_dir moved it
 * into place, releases the store lock and frees st. NULL-safe. */
CKPT_API void ckpt_store_stage_free(ckpt_store_stage *st);

/* 1 if `path` is a ckpt store: a directory holding LATEST (the one rule;
 * ckpt_open, ckpt_doctor and the training analysis ask it). Its
 * generations are separate checkpoints, never combined: ckpt_open and
 * ckpt_doctor of the directory read the generation LATEST names, alone,
 * and ckpt_training_analyze_dir refuses it (CKPT_E_MISMATCH). */
CKPT_API int ckpt_is_store_dir(const char *path);

/* The generation to resume from: the newest (highest step; equal steps by
 * file name) that opens and verifies fully; corrupt ones are skipped.
 * LATEST is not consulted, so a LATEST that names a missing, corrupt or
 * older file (after a crash between a generation's rename and LATEST's)
 * changes nothing. path/cap receive "dir/FILE" (NUL-terminated). Returns
 * 0; CKPT_E_NOTFOUND when no generation verifies; CKPT_E_IO when dir, or
 * a generation newer than the answer, cannot be read (unreadable is not
 * corrupt: an older generation would be the wrong answer);
 * CKPT_E_INVALID_ARG when cap is too small; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_latest(char *path, size_t cap, const char *dir,
                               const ckpt_store_options *opts);

/* What LATEST says, as judged by ckpt_store_list. */
typedef enum ckpt_store_pointer {
    CKPT_STORE_POINTER_OK = 0,      /* names a generation that verifies */
    CKPT_STORE_POINTER_ABSENT = 1,  /* there is no LATEST file */
    CKPT_STORE_POINTER_MISSING = 2, /* names a generation file that is not there */
    CKPT_STORE_POINTER_CORRUPT = 3, /* names a generation that does not verify */
    CKPT_STORE_POINTER_INVALID = 4  /* unreadable, or not "FILE\n" for a
                                   generation file name */
} ckpt_store_pointer;
/* "ok", "absent", "missing", "corrupt", "invalid". Static string. */
CKPT_API const char *ckpt_store_pointer_name(ckpt_store_pointer p);

/* One generation as ckpt_store_list found it. Strings are borrowed from the
 * listing. */
typedef struct ckpt_store_generation {
    const char *file; /* "NAME-STEP.EXT" */
    const char *path; /* "dir/NAME-STEP.EXT" */
    const char *name; /* NAME */
    uint64_t step;
    uint64_t bytes;     /* file size; for a directory, its files' */
    int ok;             /* 1 when it opens and verifies, else 0 (corrupt) */
    int code;           /* CKPT_E_* of the first problem; 0 when ok */
    const char *reason; /* its message; "" when ok */
    const char *member; /* zip member of the problem, or ""; in a directory
                           generation its file ("__0_0.distcp", then
                           "/MEMBER" when in a zip member) */
    uint64_t offset;    /* absolute byte offset of the problem, or UINT64_MAX */
    int latest;         /* 1 for the file LATEST names */
} ckpt_store_generation;

typedef struct ckpt_store_listing ckpt_store_listing;

/* Lists and fully verifies every generation of `dir`, and judges LATEST.
 * *out receives the listing (free with ckpt_store_listing_free, NULL-safe),
 * also when some generations are corrupt or unreadable (ok 0, with the
 * reason). Returns 0; CKPT_E_IO when dir cannot be read; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_list(ckpt_store_listing **out, const char *dir,
                             const ckpt_store_options *opts);
/* What resuming needs to know, as a listing: the generations
 * ckpt_store_latest judges, verified from the newest down until one
 * verifies. The listing holds those alone, by ascending step as
 * ckpt_store_list gives them: the one to resume from first, then the
 * corrupt ones newer than it (what resuming from it skips); every
 * generation, each corrupt, when none verifies; none when dir holds no
 * generation (a store never committed to, or not a store). Older
 * generations are neither verified nor listed. LATEST is judged as
 * ckpt_store_list judges it (a generation it names older than the listed
 * ones is verified for that, not listed). Returns 0; CKPT_E_INVALID_ARG
 * when out or dir is NULL; CKPT_E_IO when dir, or a generation newer
 * than the first that verifies, cannot be read (as ckpt_store_latest);
 * CKPT_E_NOMEM (since 0.2). */
CKPT_API int ckpt_store_list_newest(ckpt_store_listing **out, const char *dir,
                                    const ckpt_store_options *opts);
CKPT_API void ckpt_store_listing_free(ckpt_store_listing *l);
/* Generations by ascending step (equal steps by file name), i < count;
 * NULL past the end. */
CKPT_API size_t ckpt_store_list_count(const ckpt_store_listing *l);
CKPT_API const ckpt_store_generation *ckpt_store_list_generation(const ckpt_store_listing *l,
                                                                 size_t i);
/* LATEST's state; *file (may be NULL) receives the file name it holds
 * (borrowed; "" when absent or invalid). */
CKPT_API ckpt_store_pointer ckpt_store_list_pointer(const ckpt_store_listing *l, const char **file);

/* Removes old generations. Generations are verified from the newest down
 * until opts->keep of them (at least one) verify; those older than the
 * last of these are removed, oldest first, whatever their state (unless
 * LATEST names one), then dir is fsynced. Corrupt generations never count
 * toward keep and never cause a good one to be removed: those newer than
 * the kept ones are left in place (ckpt_store_list and
 * ckpt_store_prune_list report them) until keep newer generations verify.
 * Fewer than keep verified generations: nothing is removed. If a
 * verification fails for want of I/O or memory rather than because the
 * file is corrupt, nothing is removed. A directory generation is first
 * renamed to a temporary name ".NAME-STEP.dcp.tmp-PID-HEX" and the
 * rename made durable, then its files are removed, so that a removal cut
 * short leaves no half generation (gc removes the rest). *removed (may be
 * NULL) receives the number of generations removed. Returns 0, CKPT_E_IO (dir unreadable, unlink
 * failed, I/O error while verifying), CKPT_E_NOMEM. */
CKPT_API int ckpt_store_prune(size_t *removed, const char *dir, const ckpt_store_options *opts);

/* Removes stale temporary files left by killed writers (in any directory,
 * e.g. a `ckpt convert` output's): regular files named ".X.tmp-PID-HEX"
 * (the atomic commit's names, 16 lowercase hex digits). A live writer
 * holds an exclusive flock on its temporary file (atomic commit), which
 * the kernel drops when it dies, in any PID namespace: a locked file is
 * never removed. An unlocked one is removed when its PID no longer exists
 * on this machine or it was not modified for opts->stale_minutes (the PID
 * only covers a staging file between its creation and its writer's
 * lock). Temporary directories of that name (a coordinator's staging
 * directory of a DCP generation, or one that pruning renamed away) are
 * removed with their files when gc can take the store lock at once: a
 * live coordinator holds it from ckpt_store_stage_dir to
 * ckpt_store_stage_free. Generations and LATEST are never removed.
 * *removed (may be NULL) receives the count.
 * Returns 0, CKPT_E_IO, CKPT_E_NOMEM. */
CKPT_API int ckpt_store_gc(size_t *removed, const char *dir, const ckpt_store_options *opts);
/* ckpt_store_gc, with the count of temporary files removed in *files and
 * of temporary directories in *dirs (either may be NULL). */
CKPT_API int ckpt_store_gc_count(size_t *files, size_t *dirs, const char *dir,
                                 const ckpt_store_options *opts);

/* A sentence when dir lies on a filesystem whose flock, rename or
 * directory-fsync guarantees may be weaker than a local disk's (NFS,
 * Lustre, SMB, FUSE, CephFS, GPFS; by statfs f_type), else NULL. Static
 * string; thread-safe. */
CKPT_API const char *ckpt_store_lock_caveat(const char *dir);

/* ckpt_store_prune, and then *out receives the listing of what is left,
 * as ckpt_store_list would give it (every generation left was verified by
 * the pruning: the kept ones, the corrupt ones left in place, LATEST's),
 * so a caller can report the corrupt generations without verifying twice.
 * Free with ckpt_store_listing_free (NULL-safe); *out is NULL on failure.
 * *removed (may be NULL) receives the number of files removed, also on
 * failure. Returns the ckpt_store_prune codes, or CKPT_E_INVALID_ARG when
 * out is NULL. */
CKPT_API int ckpt_store_prune_list(ckpt_store_listing **out, size_t *removed, const char *dir,
                                   const ckpt_store_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_STORE_H */
