/* store.c - numbered generations of a checkpoint in one directory, with a
 * LATEST pointer (ckpt_store_*; the contract is in ckpt.h).
 *
 * Crash safety comes from the order of the steps, each one atomic: the new
 * generation appears complete or not at all (atomic commit), it is
 * verified before LATEST names it, LATEST is replaced atomically, and old
 * generations are removed only afterwards. A generation is committed once
 * it is in place and verifies; LATEST is the pointer for readers that do
 * not link ckpt. Readers never trust LATEST or a file name alone: what
 * they return has just verified. */
#include "jobs/store.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "format/write.h"
#include "open/store_dir.h"

#define POINTER_FILE CKPT_STORE_POINTER_FILE
#define COPY_CHUNK ((size_t)4 << 20)

/* ------------------------------------------------------------ names */

static int ends_with(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* "NAME-STEP.safetensors" / "NAME-STEP.pt" (a file) or "NAME-STEP.dcp" (a
 * DCP directory, the multi-rank generations of ckpt.Store): 1 with
 * *namelen and *step set, else 0. STEP has no leading zeros so that every
 * step has one name. */
static int parse_generation(const char *file, size_t *namelen, uint64_t *step) {
    size_t len = strlen(file), end;
    if (ends_with(file, len, ".safetensors"))
        end = len - 12;
    else if (ends_with(file, len, ".pt"))
        end = len - 3;
    else if (ends_with(file, len, ".dcp"))
        end = len - 4;
    else
        return 0;
    size_t d = end;
    while (d > 0 && isdigit((unsigned char)file[d - 1])) d--;
    if (d == end || d < 2 || file[d - 1] != '-' || file[0] == '.') return 0;
    if (end - d > 1 && file[d] == '0') return 0;
    uint64_t v = 0;
    for (size_t i = d; i < end; i++)
        if (ckpt_mul_overflow(v, 10, &v) || ckpt_add_overflow(v, (uint64_t)(file[i] - '0'), &v))
            return 0;
    *namelen = d - 1;
    *step = v;
    return 1;
}

/* ------------------------------------------------------------ directory */

typedef struct gen {
    const char *file; /* NAME-STEP.EXT */
    const char *name; /* NAME */
    uint64_t step;
    uint64_t bytes;
} gen;

/* The generations of one directory, ascending by (step, file). */
typedef struct store {
    ckpt_arena arena;
    const char *dir;
    gen *gens;
    size_t n, cap;
} store;

static int cmp_gen(const void *pa, const void *pb) {
    const gen *a = pa, *b = pb;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    return strcmp(a->file, b->file);
}

static int nomem(const char *dir) {
    return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
}

/* "dir/file" in the store's arena (NULL when out of memory). */
static char *join(store *s, const char *file) {
    size_t n = strlen(s->dir);
    const char *sep = n && s->dir[n - 1] == '/' ? "" : "/";
    return ckpt_arena_printf(&s->arena, "%s%s%s", s->dir, sep, file);
}

/* Calls fn for every regular file and directory of dir (not following
 * links; not "." and "..") until it
 * returns non-zero, which is then returned; 0 after the last entry, or
 * CKPT_E_IO when dir cannot be opened or read. */
typedef int (*entry_fn)(void *ctx, int dirfd, const char *name, const struct stat *st);
static int each_file(const char *dir, entry_fn fn, void *ctx) {
    DIR *d = opendir(dir);
    if (!d)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot open directory %s: %s", dir,
                        strerror(errno));
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot read directory %s: %s",
                              dir, strerror(errno));
            break;
        }
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
            continue;
        if ((rc = fn(ctx, dirfd(d), e->d_name, &st))) break;
    }
    closedir(d);
    return rc;
}

/* 1 for a DCP directory generation's name ("NAME-STEP.dcp"). */
static int is_dir_name(const char *file) { return ends_with(file, strlen(file), ".dcp"); }

/* Total size of the regular files directly in the directory `name` of
 * `at` (a DCP directory is flat); 0 when it cannot be read (verification
 * then says why). */
static uint64_t dir_bytes(int at, const char *name) {
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    uint64_t total = 0;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

/* each_file visitor of scan: the generations, files with a file's name and
 * directories with a directory's. */
static int add_generation(void *ctx, int dirfd, const char *name, const struct stat *st) {
    store *s = ctx;
    size_t namelen;
    uint64_t step;
    if (!parse_generation(name, &namelen, &step)) return 0;
    if (S_ISDIR(st->st_mode) != is_dir_name(name)) return 0;
    if (ckpt_arena_grow(&s->arena, (void **)&s->gens, &s->cap, s->n + 1, sizeof *s->gens))
        return nomem(s->dir);
    gen *g = &s->gens[s->n];
    g->file = ckpt_arena_strdup(&s->arena, name);
    g->name = ckpt_arena_strndup(&s->arena, name, namelen);
    g->step = step;
    g->bytes = S_ISDIR(st->st_mode) ? dir_bytes(dirfd, name) : (uint64_t)st->st_size;
    if (!g->file || !g->name) return nomem(s->dir);
    s->n++;
    return 0;
}

static int scan(store *s, const char *dir) {
    *s = (store){.dir = dir};
    int rc = each_file(dir, add_generation, s);
    if (rc == 0 && s->n > 1) qsort(s->gens, s->n, sizeof *s->gens, cmp_gen);
    return rc;
}

static ptrdiff_t find(const store *s, const char *file) {
    for (size_t i = 0; file && i < s->n; i++)
        if (strcmp(s->gens[i].file, file) == 0) return (ptrdiff_t)i;
    return -1;
}

/* Opens and fully verifies a file; 0 or the failing call's code with the
 * error recorded. */
static int verify_path(const char *path, const ckpt_store_options *o) {
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, &o->open);
    if (rc == 0) rc = ckpt_verify(NULL, f);
    ckpt_close(f);
    return rc;
}

static int verify_gen(store *s, size_t i, const ckpt_store_options *o) {
    const char *path = join(s, s->gens[i].file);
    return path ? verify_path(path, o) : nomem(s->dir);
}

/* Verification failed for want of resources, not because of the file. */
static int resource_failure(int code) { return code == CKPT_E_IO || code == CKPT_E_NOMEM; }

/* Creates dir and its missing parents (mkdir -p; mode 0755 less the
 * umask), each made durable by an fsync of its parent, as the Python
 * Store does with os.makedirs. An existing dir is left as it is. */
static int make_dirs(const char *dir) {
    size_t n = strlen(dir);
    char *p = ckpt_malloc(n + 1);
    if (!p) return nomem(dir);
    memcpy(p, dir, n + 1);
    int rc = 0;
    for (size_t i = 1; rc == 0 && i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        if (p[i - 1] == '/') continue; /* "a//b" */
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) == 0) {
            /* the new entry lives in its parent: "." for a relative name */
            char *slash = strrchr(p, '/');
            if (!slash) {
                rc = ckpt_atomic_sync_dir(".");
            } else if (slash == p) {
                rc = ckpt_atomic_sync_dir("/");
            } else {
                *slash = '\0';
                rc = ckpt_atomic_sync_dir(p);
                *slash = '/';
            }
        } else if (errno != EEXIST) {
            rc = ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                          "cannot create store directory %s: %s", p, strerror(errno));
        }
        p[i] = c;
    }
    ckpt_free(p);
    return rc;
}

/* ------------------------------------------------------------ LATEST */

/* Reads LATEST into *st: ABSENT, INVALID, or OK with *file the name it
 * holds (not yet checked against the directory). Returns 0 or
 * CKPT_E_NOMEM. */
static int read_pointer(store *s, ckpt_store_pointer *st, const char **file) {
    ckpt_store_dir_pointer raw;
    size_t namelen;
    uint64_t step;
    int rc = ckpt_store_dir_pointer_read(&s->arena, s->dir, &raw, file);
    *st = raw == CKPT_STORE_DIR_POINTER_ABSENT ? CKPT_STORE_POINTER_ABSENT
                                               : CKPT_STORE_POINTER_INVALID;
    if (rc || raw != CKPT_STORE_DIR_POINTER_OK) return rc;
    if (!parse_generation(*file, &namelen, &step)) {
        *file = "";
        return 0;
    }
    *st = CKPT_STORE_POINTER_OK;
    return 0;
}

static int write_pointer(store *s, const char *file) {
    const char *path = join(s, POINTER_FILE);
    if (!path) return nomem(s->dir);
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, path);
    if (rc == 0) rc = ckpt_atomic_write(&a, file, strlen(file));
    if (rc == 0) rc = ckpt_atomic_write(&a, "\n", 1);
    if (rc == 0) return ckpt_atomic_commit(&a, 0);
    ckpt_atomic_abort(&a);
    return rc;
}

/* ------------------------------------------------------------ lock */

/* The store's lock file: hidden, so no generation or temporary name. */
#define LOCK_FILE ".ckpt-store.lock"

/* Takes the store's exclusive lock (flock on DIR/.ckpt-store.lock, waiting
 * for the holder): writers of one store (commit's final steps, prune)
 * take turns; the kernel releases it when a holder dies. *fd receives the
 * descriptor to pass to unlock_store (-1 where the filesystem has no
 * flock: then nothing is locked, see ckpt_store_lock_caveat). */
static int lock_store(const char *dir, int *fd) {
    char path[PATH_MAX];
    *fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE) >= (int)sizeof path)
        return ckpt_err(CKPT_E_INVALID_ARG, dir, NULL, CKPT_NO_OFFSET, "directory name too long");
    int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot open the store lock %s: %s",
                        path, strerror(errno));
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        int err = errno;
        close(lfd);
        if (err == ENOLCK || err == EOPNOTSUPP || err == EINVAL || err == ENOSYS) return 0;
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot lock the store %s: %s", path,
                        strerror(err));
    }
    *fd = lfd;
    return 0;
}

static void unlock_store(int fd) {
    if (fd >= 0) close(fd); /* drops the flock */
}

const char *ckpt_store_lock_caveat(const char *dir) {
    struct statfs fs;
    if (!dir || statfs(dir, &fs) != 0) return NULL;
    switch ((unsigned long)fs.f_type) {
    case 0x6969UL: /* NFS */
        return "NFS: flock is emulated with byte-range locks through the lock manager "
               "(reliable only with NFSv4 or a running lockd), and renames and directory "
               "fsync are only as atomic as the server and client caching make them: "
               "commit from one host at a time";
    case 0x0BD00BD0UL: /* Lustre */
        return "Lustre: flock works across clients only when mounted with -o flock "
               "(localflock locks per client, noflock not at all): commit from one host "
               "at a time unless the mount has flock";
    case 0xFF534D42UL:
    case 0xFE534D42UL: /* CIFS, SMB2 */
        return "SMB/CIFS: flock and rename semantics depend on the server: commit from "
               "one host at a time";
    case 0x65735546UL: /* FUSE */
        return "FUSE: flock, rename and fsync guarantees are the user-space filesystem's "
               "own: commit from one host at a time unless it documents them";
    case 0x00C36400UL: /* CephFS */
    case 0x47504653UL: /* GPFS */
        return "a network filesystem: flock is honoured across clients only as its "
               "configuration provides: commit from one host at a time";
    default: return NULL;
    }
}

const char *ckpt_store_pointer_name(ckpt_store_pointer p) {
    switch (p) {
    case CKPT_STORE_POINTER_OK: return "ok";
    case CKPT_STORE_POINTER_ABSENT: return "absent";
    case CKPT_STORE_POINTER_MISSING: return "missing";
    case CKPT_STORE_POINTER_CORRUPT: return "corrupt";
    case CKPT_STORE_POINTER_INVALID: return "invalid";
    }
    return "unknown";
}

/* ------------------------------------------------------------ list */

struct ckpt_store_listing {
    store s;                     /* its arena owns everything below */
    ckpt_store_generation *gens; /* gens[i] is s.gens[i]'s */
    size_t first;                /* the listed ones: gens[first..s.n) (list_newest) */
    ckpt_store_pointer pointer;
    const char *pointer_file;
};

static const ckpt_store_options *options(const ckpt_store_options *opts,
                                         ckpt_store_options *defaults) {
    *defaults = (ckpt_store_options)CKPT_STORE_OPTIONS_INIT;
    return opts ? opts : defaults;
}

static void event(const ckpt_store_options *o, ckpt_store_event what, const char *file) {
    if (o->on_event) o->on_event(o->event_ctx, what, file);
}

void ckpt_store_listing_free(ckpt_store_listing *l) {
    if (!l) return;
    ckpt_arena_free(&l->s.arena);
    ckpt_free(l);
}

size_t ckpt_store_list_count(const ckpt_store_listing *l) { return l ? l->s.n - l->first : 0; }

const ckpt_store_generation *ckpt_store_list_generation(const ckpt_store_listing *l, size_t i) {
    return l && i < l->s.n - l->first ? &l->gens[l->first + i] : NULL;
}

ckpt_store_pointer ckpt_store_list_pointer(const ckpt_store_listing *l, const char **file) {
    if (file) *file = l ? l->pointer_file : "";
    return l ? l->pointer : CKPT_STORE_POINTER_ABSENT;
}

/* Fills generation i's listing entry, verifying it unless `verified`
 * (it verified moments ago). Returns 0 or CKPT_E_NOMEM: a failed
 * verification is recorded in the entry. */
static int judge(ckpt_store_listing *l, size_t i, int verified, const ckpt_store_options *o) {
    store *s = &l->s;
    ckpt_store_generation *g = &l->gens[i];
    *g = (ckpt_store_generation){s->gens[i].file,
                                 join(s, s->gens[i].file),
                                 s->gens[i].name,
                                 s->gens[i].step,
                                 s->gens[i].bytes,
                                 1,
                                 0,
                                 "",
                                 "",
                                 UINT64_MAX,
                                 0};
    if (!g->path) return nomem(s->dir);
    int rc = verified ? 0 : verify_path(g->path, o);
    if (rc == 0) return 0;
    if (rc == CKPT_E_NOMEM) return rc;
    const ckpt_error *e = ckpt_error_last();
    g->ok = 0;
    g->code = rc;
    g->reason = ckpt_arena_strdup(&s->arena, e->message);
    /* in a directory generation the problem's file inside it ("__0_0.distcp"),
     * followed by its zip member when it has one */
    size_t n = strlen(g->path);
    if (strncmp(e->file, g->path, n) == 0 && e->file[n] == '/')
        g->member = *e->member ? ckpt_arena_printf(&s->arena, "%s/%s", e->file + n + 1, e->member)
                               : ckpt_arena_strdup(&s->arena, e->file + n + 1);
    else
        g->member = ckpt_arena_strdup(&s->arena, e->member);
    g->offset = e->offset;
    return g->reason && g->member ? 0 : nomem(s->dir);
}

/* Reads LATEST and judges it against the listed (judged) generations; one
 * older than those (list_newest) is verified for it, not listed. */
static int judge_pointer(ckpt_store_listing *l, const ckpt_store_options *o) {
    int rc = read_pointer(&l->s, &l->pointer, &l->pointer_file);
    if (rc || l->pointer != CKPT_STORE_POINTER_OK) return rc;
    ptrdiff_t i = find(&l->s, l->pointer_file);
    if (i < 0) {
        l->pointer = CKPT_STORE_POINTER_MISSING;
    } else if ((size_t)i < l->first) {
        rc = verify_gen(&l->s, (size_t)i, o);
        if (rc == CKPT_E_NOMEM) return rc;
        if (rc) l->pointer = CKPT_STORE_POINTER_CORRUPT;
    } else {
        l->gens[i].latest = 1;
        if (!l->gens[i].ok) l->pointer = CKPT_STORE_POINTER_CORRUPT;
    }
    return 0;
}

/* Fills *l with the generations of dir, not judged yet; its arena is
 * the caller's to free, also on failure. */
static int listing_scan(ckpt_store_listing *l, const char *dir) {
    *l = (ckpt_store_listing){0};
    int rc = scan(&l->s, dir);
    if (rc == 0 && l->s.n) {
        l->gens = ckpt_arena_array(&l->s.arena, l->s.n, sizeof *l->gens);
        if (!l->gens) rc = nomem(dir);
    }
    return rc;
}

/* A listing of dir on the heap, scanned but not judged yet. */
static int listing_new(ckpt_store_listing **out, const char *dir) {
    ckpt_store_listing *l = ckpt_malloc(sizeof *l);
    if (!l) return nomem(dir);
    int rc = listing_scan(l, dir);
    if (rc) {
        ckpt_store_listing_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int ckpt_store_list(ckpt_store_listing **out, const char *dir, const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (!dir) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "dir is NULL");
    ckpt_store_listing *l = NULL;
    int rc = listing_new(&l, dir);
    if (rc) return rc;
    for (size_t i = 0; rc == 0 && i < l->s.n; i++) rc = judge(l, i, 0, o);
    if (rc == 0) rc = judge_pointer(l, o);
    if (rc) {
        ckpt_store_listing_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* The walk of ckpt_store_latest and ckpt_store_list_newest: judges l's
 * generations from the newest down until one verifies and lists those
 * (l->first). An older generation is no answer when a newer one could not
 * be judged (out of memory, unreadable, not corrupt): that failure is
 * returned instead. */
static int judge_newest(ckpt_store_listing *l, const ckpt_store_options *o) {
    l->first = l->s.n;
    while (l->first > 0) {
        size_t i = --l->first;
        int rc = judge(l, i, 0, o);
        if (rc) return rc;
        if (l->gens[i].ok) return 0;
        if (resource_failure(l->gens[i].code)) /* judge recorded the error, still the last */
            return l->gens[i].code;
    }
    return 0;
}

int ckpt_store_list_newest(ckpt_store_listing **out, const char *dir,
                           const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    if (out) *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (!out || !dir)
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET,
                        "out and dir must not be NULL");
    ckpt_store_listing *l = NULL;
    int rc = listing_new(&l, dir);
    if (rc) return rc;
    rc = judge_newest(l, o);
    if (rc == 0) rc = judge_pointer(l, o);
    if (rc) {
        ckpt_store_listing_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* ------------------------------------------------------------ prune */

/* Removes the directory `name` of `at` with what is in it; `depth` levels
 * of subdirectories at most (DCP directories are flat). Returns 0 or an
 * errno. Entries removed while reading may hide others from readdir: a
 * few passes until the directory itself can go. */
static int remove_tree(int at, const char *name, int depth) {
    for (int pass = 0;; pass++) {
        int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return errno == ENOENT ? 0 : errno;
        DIR *d = fdopendir(fd);
        if (!d) {
            int err = errno;
            close(fd);
            return err;
        }
        int err = 0;
        for (struct dirent *e; err == 0 && (e = readdir(d)) != NULL;) {
            struct stat st;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                err = errno == ENOENT ? 0 : errno;
            else if (S_ISDIR(st.st_mode))
                err = depth > 0 ? remove_tree(dirfd(d), e->d_name, depth - 1) : ENOTEMPTY;
            else if (ckpt_atomic_remove_at(dirfd(d), e->d_name) != 0 && errno != ENOENT)
                err = errno;
        }
        closedir(d);
        if (err) return err;
        if (unlinkat(at, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return 0;
        if (errno != ENOTEMPTY || pass == 3) return errno;
    }
}

/* Removes generation `file`. A directory is first renamed to a temporary
 * name (which gc recognises) and that rename made durable, so that a
 * removal cut short never leaves a half generation under a generation's
 * name; then its files go. The caller fsyncs dir afterwards. */
static int remove_generation(store *s, const char *file) {
    const char *path = join(s, file);
    if (!path) return nomem(s->dir);
    if (!is_dir_name(file)) {
        if (ckpt_atomic_remove_at(AT_FDCWD, path) != 0 && errno != ENOENT)
            return ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET,
                            "cannot remove generation %s: %s", path, strerror(errno));
        return 0;
    }
    char *doomed = ckpt_atomic_temp_name(path);
    if (!doomed) return nomem(s->dir);
    int rc = 0;
    if (ckpt_atomic_rename(path, doomed) != 0) {
        if (errno != ENOENT)
            rc = ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET,
                          "cannot rename generation %s away to %s: %s", path, doomed,
                          strerror(errno));
    } else if ((rc = ckpt_atomic_sync_dir(s->dir)) == 0) {
        int err = remove_tree(AT_FDCWD, doomed, 2);
        if (err)
            rc = ckpt_err(CKPT_E_IO, doomed, NULL, CKPT_NO_OFFSET,
                          "cannot remove %s (generation %s, renamed away; gc removes it): %s",
                          doomed, file, strerror(err));
    }
    ckpt_free(doomed);
    return rc;
}

static int is_in(const ptrdiff_t *set, size_t n, size_t i) {
    for (size_t k = 0; k < n; k++)
        if (set[k] == (ptrdiff_t)i) return 1;
    return 0;
}

/* Prunes the generations of l (listed, not judged): from the newest down,
 * each is verified (those in known[] verified moments ago) until `keep`
 * of them, at least one, verify. The generations below the last of those
 * are removed, oldest first, unless protected[]; every generation above
 * it stays, and a corrupt one neither counts nor pushes a good one out.
 * With `full`, protected generations below it are verified too, so that
 * l ends up judging everything that is left (as ckpt_store_list would);
 * without, nothing is verified when no generation could be removed. A
 * verification that fails for want of I/O or memory removes nothing. */
static int prune_listed(ckpt_store_listing *l, uint32_t keep, const ptrdiff_t *known, size_t nknown,
                        const ptrdiff_t *protect, size_t nprotect, int full, size_t *removed,
                        const ckpt_store_options *o) {
    store *s = &l->s;
    size_t want = keep ? keep : 1, good = 0, cut = 0, kept = 0;
    if (!full && s->n <= want) return 0;
    for (size_t i = s->n; i-- > 0;) {
        int rc = judge(l, i, is_in(known, nknown, i), o);
        if (rc) return rc;
        if (resource_failure(l->gens[i].code))
            return ckpt_err(l->gens[i].code, s->dir, NULL, CKPT_NO_OFFSET,
                            "nothing pruned: cannot verify %s: %s", s->gens[i].file,
                            l->gens[i].reason);
        if (l->gens[i].ok && ++good == want) {
            cut = i;
            break;
        }
    }
    for (size_t i = 0; i < s->n; i++) {
        int protected_ = is_in(protect, nprotect, i) || is_in(known, nknown, i);
        if (i < cut && !protected_) {
            int rc = remove_generation(s, s->gens[i].file);
            if (rc) return rc;
            event(o, CKPT_STORE_EVENT_PRUNED, s->gens[i].file);
            if (removed) ++*removed;
            continue;
        }
        if (i < cut && full) {
            int rc = judge(l, i, is_in(known, nknown, i), o);
            if (rc) return rc;
        }
        s->gens[kept] = s->gens[i];
        l->gens[kept++] = l->gens[i];
    }
    s->n = kept;
    return removed && *removed ? ckpt_atomic_sync_dir(s->dir) : 0;
}

/* ckpt_store_prune and ckpt_store_prune_list. */
static int prune_dir(ckpt_store_listing **out, size_t *removed, const char *dir,
                     const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    size_t count = 0;
    if (removed) *removed = 0;
    if (out) *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (!dir) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "dir is NULL");
    ckpt_store_listing *l = NULL;
    int lock;
    int rc = lock_store(dir, &lock);
    if (rc) return rc;
    rc = listing_new(&l, dir);
    if (rc) {
        unlock_store(lock);
        return rc;
    }
    ckpt_store_pointer st;
    const char *file;
    rc = read_pointer(&l->s, &st, &file);
    if (rc == 0) {
        ptrdiff_t pointer = st == CKPT_STORE_POINTER_OK ? find(&l->s, file) : -1;
        rc = prune_listed(l, o->keep, NULL, 0, &pointer, 1, out != NULL, &count, o);
    }
    unlock_store(lock);
    if (rc == 0 && out) rc = judge_pointer(l, o);
    if (removed) *removed = count;
    if (rc || !out) {
        ckpt_store_listing_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int ckpt_store_prune(size_t *removed, const char *dir, const ckpt_store_options *opts) {
    return prune_dir(NULL, removed, dir, opts);
}

int ckpt_store_prune_list(ckpt_store_listing **out, size_t *removed, const char *dir,
                          const ckpt_store_options *opts) {
    if (!out)
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET, "out is NULL");
    return prune_dir(out, removed, dir, opts);
}

/* ------------------------------------------------------------ gc */

typedef struct gc_state {
    const char *dir;
    const ckpt_store_options *o;
    time_t now;
    size_t count, dirs; /* temporary files, directories removed */
    int lock;           /* the store lock: -2 not tried yet, -1 not had */
} gc_state;

/* The store lock if no one holds it, else -1 (also without flock: then
 * nothing tells a live staging directory from a dead one). */
static int try_lock_store(const char *dir) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE) >= (int)sizeof path) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A temporary directory: a generation directory being staged by a
 * coordinator (which holds the store lock from ckpt_store_stage_dir to
 * ckpt_store_stage_free) or one that pruning renamed away (under the
 * lock). Whoever
 * gets the lock finds every one of them dead. */
static int gc_dir(gc_state *g, int dirfd, const char *name) {
    if (g->lock == -2) g->lock = try_lock_store(g->dir);
    if (g->lock < 0) return 0;
    int err = remove_tree(dirfd, name, 2);
    if (err)
        return ckpt_err(CKPT_E_IO, g->dir, NULL, CKPT_NO_OFFSET,
                        "cannot remove temporary directory %s in %s: %s", name, g->dir,
                        strerror(err));
    g->dirs++;
    event(g->o, CKPT_STORE_EVENT_TEMP_REMOVED, name);
    return 0;
}

/* each_file visitor of gc: removes a temporary file no live writer holds
 * (ckpt_atomic_reap_at's rule), or a temporary directory no live
 * coordinator does. */
static int gc_file(void *ctx, int dirfd, const char *name, const struct stat *st) {
    gc_state *g = ctx;
    long pid;
    if (!ckpt_atomic_parse_temp(name, &pid)) return 0;
    if (S_ISDIR(st->st_mode)) return gc_dir(g, dirfd, name);
    int rc = ckpt_atomic_reap_at(dirfd, name, st, g->now, (uint64_t)g->o->stale_minutes * 60, 0);
    if (rc < 0)
        return ckpt_err(CKPT_E_IO, g->dir, NULL, CKPT_NO_OFFSET,
                        "cannot remove temporary file %s in %s: %s", name, g->dir, strerror(-rc));
    if (rc == 0) return 0;
    g->count++;
    event(g->o, CKPT_STORE_EVENT_TEMP_REMOVED, name);
    return 0;
}

int ckpt_store_gc_count(size_t *files, size_t *dirs, const char *dir,
                        const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    if (files) *files = 0;
    if (dirs) *dirs = 0;
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (!dir) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "dir is NULL");
    gc_state g = {.dir = dir, .o = o, .now = time(NULL), .lock = -2};
    int rc = each_file(dir, gc_file, &g);
    unlock_store(g.lock);
    if (files) *files = g.count;
    if (dirs) *dirs = g.dirs;
    if (rc == 0 && g.count + g.dirs) rc = ckpt_atomic_sync_dir(dir);
    return rc;
}

int ckpt_store_gc(size_t *removed, const char *dir, const ckpt_store_options *opts) {
    size_t files = 0, dirs = 0;
    int rc = ckpt_store_gc_count(&files, &dirs, dir, opts);
    if (removed) *removed = files + dirs;
    return rc;
}

/* After a commit, under the store lock (lock: its descriptor, -1 where
 * the filesystem has no flock): the temporary files that writers killed
 * earlier left (a generation's, LATEST's) go, as gc removes them, so that
 * kill -9 in a loop does not fill the disk with them. So do temporary
 * directories when the lock is held: a coordinator holds it from staging
 * to the end, so none is live (gc's rule). Best effort. */
static void sweep_temps(const char *dir, const ckpt_store_options *o, int lock) {
    gc_state g = {.dir = dir, .o = o, .now = time(NULL), .lock = lock >= 0 ? lock : -1};
    (void)each_file(dir, gc_file, &g);
    if (g.count) (void)ckpt_atomic_sync_dir(dir);
}

/* ------------------------------------------------------------ latest */

static int put_path(char *out, size_t cap, const char *path) {
    size_t n = strlen(path);
    if (!out) return 0;
    if (n >= cap)
        return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET,
                        "path buffer of %zu bytes cannot hold %zu bytes", cap, n + 1);
    memcpy(out, path, n + 1);
    return 0;
}

int ckpt_store_latest(char *path, size_t cap, const char *dir, const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (path && cap) path[0] = '\0';
    if (!dir) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "dir is NULL");
    /* LATEST is not consulted: a generation that verifies is committed
     * even when a crash kept LATEST from reaching it */
    ckpt_store_listing *l = NULL;
    int rc = listing_new(&l, dir);
    if (rc == 0) rc = judge_newest(l, o);
    if (rc == 0 && (l->first == l->s.n || !l->gens[l->first].ok))
        rc = ckpt_err(CKPT_E_NOTFOUND, dir, NULL, CKPT_NO_OFFSET,
                      "no generation in %s verifies (%zu found)", dir, l->s.n);
    if (rc == 0) rc = put_path(path, cap, l->gens[l->first].path);
    ckpt_store_listing_free(l);
    return rc;
}

/* ------------------------------------------------------------ commit */

/* Not empty, no '/', no leading '.' (temporary and hidden files), no
 * control bytes, and short enough for the file name to fit NAME_MAX. */
static int valid_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 200 || name[0] == '.' || strchr(name, '/')) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) return 0;
    return 1;
}

/* Before a commit: a valid generation name, and dir, created (with its
 * parents) when it does not exist. */
static int prepare_dir(const char *dir, const char *name) {
    if (!valid_name(name))
        return ckpt_err(CKPT_E_INVALID_ARG, dir, NULL, CKPT_NO_OFFSET,
                        "invalid generation name '%s': it must be 1 to 200 bytes, "
                        "without '/', control characters or a leading '.'",
                        name ? name : "");
    struct stat st;
    return stat(dir, &st) != 0 && errno == ENOENT ? make_dirs(dir) : 0;
}

/* 1 when the generation `file` of step `step` sorts after g. */
static int newer_than(const gen *g, uint64_t step, const char *file) {
    return step != g->step ? step > g->step : strcmp(file, g->file) > 0;
}

/* Refuses a step of `name` that is already committed (verifies). */
static int check_fresh_step(store *s, const char *name, uint64_t step,
                            const ckpt_store_options *o) {
    if (o->replace) return 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->gens[i].step != step || strcmp(s->gens[i].name, name) != 0) continue;
        int rc = verify_gen(s, i, o);
        if (rc == 0) event(o, CKPT_STORE_EVENT_STEP_TAKEN, s->gens[i].file);
        if (rc == 0)
            return ckpt_err(CKPT_E_INVALID_ARG, s->dir, NULL, CKPT_NO_OFFSET,
                            "step %" PRIu64 " of %s is already committed as %s (to "
                            "replace it: --replace, replace=True in Python)",
                            step, name, s->gens[i].file);
        if (resource_failure(rc)) return rc;
    }
    return 0;
}

/* After `file` verified: LATEST names the newest generation that verifies,
 * which is `file` unless a verified one sorts after it; then prune. A
 * failure here leaves `file` committed (it verifies): the message says so. */
static int move_pointer_and_prune(store *s, const char *file, uint64_t step,
                                  const ckpt_store_options *o) {
    const char *newest = file, *what = "moving LATEST";
    int rc = 0;
    for (size_t i = s->n; rc == 0 && i-- > 0 && newer_than(&s->gens[i], step, file) == 0;) {
        rc = verify_gen(s, i, o);
        if (rc == 0) {
            newest = s->gens[i].file;
            break;
        }
        if (!resource_failure(rc)) rc = 0;
    }
    /* readers that read LATEST a moment ago may be opening what it named:
     * that generation is kept until the next move */
    ckpt_store_pointer pst;
    const char *previous = "";
    if (rc == 0) rc = read_pointer(s, &pst, &previous);
    ckpt_store_listing now = {0};
    if (rc == 0) rc = write_pointer(s, newest);
    if (rc == 0) event(o, CKPT_STORE_EVENT_LATEST, newest);
    if (rc == 0) {
        what = "pruning";
        rc = listing_scan(&now, s->dir);
    }
    if (rc == 0) {
        /* both verified moments ago; LATEST names the first, and the new
         * generation is never pruned, even when older than the rest */
        ptrdiff_t known[2] = {find(&now.s, newest), find(&now.s, file)};
        ptrdiff_t protect[2] = {known[0], find(&now.s, previous)};
        size_t removed = 0;
        rc = prune_listed(&now, o->keep, known, 2, protect, 2, 0, &removed, o);
    }
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
        rc = ckpt_err(rc, s->dir, NULL, CKPT_NO_OFFSET, "%s was committed, but %s failed: %s", file,
                      what, msg);
    }
    ckpt_arena_free(&now.s.arena);
    return rc;
}

int ckpt_store_commit_with(char *path, size_t cap, const char *dir, const char *name, uint64_t step,
                           const char *ext, ckpt_store_write_fn write, void *ctx,
                           const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (path && cap) path[0] = '\0';
    if (!dir || !*dir || !write || !ext ||
        (strcmp(ext, ".safetensors") != 0 && strcmp(ext, ".pt") != 0))
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET,
                        "commit needs a directory, a writer and the extension "
                        ".safetensors or .pt");
    int rc = prepare_dir(dir, name);
    store s = {0};
    if (rc == 0) rc = scan(&s, dir);
    const char *file = NULL, *target = NULL;
    if (rc == 0) {
        file = ckpt_arena_printf(&s.arena, "%s-%" PRIu64 "%s", name, step, ext);
        target = file ? join(&s, file) : NULL;
        if (!target) rc = nomem(dir);
    }
    /* a path buffer too small is refused before anything is written */
    if (rc == 0 && path && strlen(target) >= cap) rc = put_path(path, cap, target);
    if (rc == 0) rc = check_fresh_step(&s, name, step, o);

    ckpt_atomic a;
    store cur = {0}; /* the directory under the lock */
    int lock = -1;
    if (rc == 0) rc = ckpt_atomic_begin(&a, target);
    if (rc == 0) {
        rc = write(ctx, &a);
        /* verified under its temporary name, before the rename: a file
         * that does not verify never takes the step's name, so a replaced
         * step (--replace) keeps its previous generation (a source changed
         * between its verification and the copy, a writer's bad bytes) */
        if (rc == 0 && (rc = verify_path(a.tmp, o)) != 0) {
            const ckpt_error *e = ckpt_error_last();
            char msg[512], member[512];
            uint64_t off = e->offset;
            snprintf(msg, sizeof msg, "%s", e->message);
            snprintf(member, sizeof member, "%s", e->member);
            rc = ckpt_err(rc, target, member, off,
                          "%s failed verification after writing; nothing committed: %s", file, msg);
        }
        /* the rest in turn with other writers of this store, against the
         * directory as it is now: a step another writer committed
         * meanwhile is refused, and LATEST only moves forward */
        if (rc == 0) rc = lock_store(dir, &lock);
        if (rc == 0) rc = scan(&cur, dir);
        if (rc == 0) rc = check_fresh_step(&cur, name, step, o);
        if (rc == 0) {
            rc = ckpt_atomic_commit(&a, 0);
            /* renamed, but the directory's fsync failed: the name may not
             * survive a crash, so the generation is not committed; removed,
             * so that a retry of the step is not refused */
            if (rc && a.renamed) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
                unlink(target);
                ckpt_atomic_sync_dir(dir);
                rc = ckpt_err(rc, target, NULL, CKPT_NO_OFFSET,
                              "%s; %s was removed, nothing committed", msg, file);
            }
        } else {
            ckpt_atomic_abort(&a);
        }
        if (rc == 0) rc = put_path(path, cap, target);
        if (rc == 0) rc = move_pointer_and_prune(&cur, file, step, o);
        if (rc == 0) sweep_temps(dir, o, lock);
        unlock_store(lock);
    }
    ckpt_arena_free(&cur.arena);
    ckpt_arena_free(&s.arena);
    return rc;
}

/* ------------------------------------------------------------ directory */

struct ckpt_store_stage {
    ckpt_arena arena; /* owns the strings */
    const char *dir, *name, *file, *target, *staging;
    uint64_t step;
    int lock;      /* the store lock, held from staging to free */
    int committed; /* the staging directory is in place as `target` */
};

const char *ckpt_store_stage_path(const ckpt_store_stage *st) { return st ? st->staging : NULL; }

void ckpt_store_stage_free(ckpt_store_stage *st) {
    if (!st) return;
    if (!st->committed && st->staging) {
        /* nothing committed: the ranks' files go; what a failure here
         * leaves, gc removes once the lock is free */
        if (remove_tree(AT_FDCWD, st->staging, 2) == 0) ckpt_atomic_sync_dir(st->dir);
    }
    unlock_store(st->lock);
    ckpt_arena_free(&st->arena);
    ckpt_free(st);
}

int ckpt_store_stage_dir(ckpt_store_stage **out, const char *dir, const char *name, uint64_t step,
                         const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    if (out) *out = NULL;
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (!out || !dir || !*dir)
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET,
                        "staging needs an out-parameter and a directory");
    ckpt_store_stage *st = ckpt_malloc(sizeof *st);
    if (!st) return nomem(dir);
    *st = (ckpt_store_stage){.step = step, .lock = -1};
    int rc = prepare_dir(dir, name);
    if (rc == 0) rc = lock_store(dir, &st->lock);
    store s = {0};
    char *staging = NULL;
    if (rc == 0) rc = scan(&s, dir);
    if (rc == 0) rc = check_fresh_step(&s, name, step, o);
    if (rc == 0) {
        st->dir = ckpt_arena_strdup(&st->arena, dir);
        st->name = ckpt_arena_strdup(&st->arena, name);
        st->file = ckpt_arena_printf(&st->arena, "%s-%" PRIu64 ".dcp", name, step);
        const char *target = st->file ? join(&s, st->file) : NULL;
        st->target = target ? ckpt_arena_strdup(&st->arena, target) : NULL;
        staging = st->target ? ckpt_atomic_temp_name(st->target) : NULL;
        if (!st->dir || !st->name || !staging) rc = nomem(dir);
    }
    if (rc == 0 && ckpt_atomic_mkdir(staging) != 0)
        rc = ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                      "cannot create the staging directory %s: %s", staging, strerror(errno));
    else if (rc == 0) /* ours to remove from here on */
        st->staging = ckpt_arena_strdup(&st->arena, staging);
    if (rc == 0 && !st->staging) {
        rc = nomem(dir);
        rmdir(staging);
    }
    ckpt_free(staging);
    if (rc == 0) rc = ckpt_atomic_sync_dir(dir);
    ckpt_arena_free(&s.arena);
    if (rc) {
        ckpt_store_stage_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

/* Re-records the current error as "PREFIX: message; SUFFIX", keeping its
 * code, file, member and offset. */
static int reword(int rc, const char *prefix, const char *suffix) {
    const ckpt_error *e = ckpt_error_last();
    char msg[512], file[512], member[512];
    uint64_t off = e->offset;
    snprintf(msg, sizeof msg, "%s", e->message);
    snprintf(file, sizeof file, "%s", e->file);
    snprintf(member, sizeof member, "%s", e->member);
    return ckpt_err(rc, file, member, off, "%s: %s; %s", prefix, msg, suffix);
}

/* fsync of every regular file directly in `path` (a DCP directory is
 * flat), then of the directory itself. */
static int sync_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET, "cannot open directory %s: %s", path,
                        strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        char file[PATH_MAX];
        if (snprintf(file, sizeof file, "%s/%s", path, e->d_name) >= (int)sizeof file)
            rc = ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET, "path too long: %s/%s",
                          path, e->d_name);
        else
            rc = ckpt_atomic_sync_file(file);
    }
    closedir(d);
    return rc ? rc : ckpt_atomic_sync_dir(path);
}

int ckpt_store_commit_dir(char *path, size_t cap, ckpt_store_stage *st,
                          const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (path && cap) path[0] = '\0';
    if (!st || st->committed || !st->staging)
        return ckpt_err(CKPT_E_INVALID_ARG, st && st->dir ? st->dir : "", NULL, CKPT_NO_OFFSET,
                        "no staged directory to commit (NULL, or committed already)");
    int rc = path && strlen(st->target) >= cap ? put_path(path, cap, st->target) : 0;
    if (rc) return rc;
    /* never a generation name for a directory that does not verify */
    if ((rc = verify_path(st->staging, o)) != 0)
        return reword(rc, st->file, "the staged directory does not verify; nothing committed");
    store cur = {0};
    rc = sync_tree(st->staging);
    /* under the lock since staging; checked again for filesystems
     * without flock, where another writer may have committed it */
    if (rc == 0) rc = scan(&cur, st->dir);
    if (rc == 0) rc = check_fresh_step(&cur, st->name, st->step, o);
    struct stat sb;
    int swapped = 0;
    if (rc == 0 && lstat(st->target, &sb) == 0) {
        /* replaced (or a corrupt one): swapped out in one step, so that a
         * crash leaves either generation under the name */
        swapped = ckpt_atomic_exchange(st->staging, st->target) == 0;
        if (!swapped && errno != EINVAL && errno != ENOSYS)
            rc = ckpt_err(CKPT_E_IO, st->target, NULL, CKPT_NO_OFFSET,
                          "cannot swap %s into place: %s; nothing committed", st->staging,
                          strerror(errno));
        else if (!swapped && remove_generation(&cur, st->file) != 0)
            rc = reword(CKPT_E_IO, st->file, "nothing committed");
    }
    if (rc == 0 && !swapped && ckpt_atomic_rename(st->staging, st->target) != 0)
        rc = ckpt_err(CKPT_E_IO, st->target, NULL, CKPT_NO_OFFSET,
                      "cannot rename %s into place: %s; nothing committed", st->staging,
                      strerror(errno));
    if (rc == 0 && (rc = ckpt_atomic_sync_dir(st->dir)) != 0) {
        /* the rename may not survive a crash: not committed. Removed (as
         * pruning removes), so that a retry of the step is not refused */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
        remove_generation(&cur, st->file);
        ckpt_atomic_sync_dir(st->dir);
        rc = ckpt_err(rc, st->target, NULL, CKPT_NO_OFFSET, "%s; %s was removed, nothing committed",
                      msg, st->file);
    }
    if (rc == 0) {
        st->committed = 1;
        /* the swapped-out generation is under the staging name now */
        if (swapped && remove_tree(AT_FDCWD, st->staging, 2) == 0) ckpt_atomic_sync_dir(st->dir);
        rc = put_path(path, cap, st->target);
    }
    if (rc == 0) rc = move_pointer_and_prune(&cur, st->file, st->step, o);
    if (rc == 0) sweep_temps(st->dir, o, st->lock);
    ckpt_arena_free(&cur.arena);
    return rc;
}

/* ------------------------------------------------------------ tree */

typedef struct tree_source {
    const ckpt_value *root;
    ckpt_format format;
    const ckpt_write_options *wopts;
} tree_source;

static int write_tree(void *ctx, ckpt_atomic *a) {
    const tree_source *t = ctx;
    return ckpt_write_value_to(a, t->root, t->format, t->wopts, NULL);
}

int ckpt_store_commit_tree(char *path, size_t cap, const char *dir, const char *name, uint64_t step,
                           const ckpt_value *root, ckpt_format format,
                           const ckpt_write_options *wopts, const ckpt_store_options *opts) {
    if (path && cap) path[0] = '\0';
    if (!root || (format != CKPT_FORMAT_SAFETENSORS && format != CKPT_FORMAT_TORCH_ZIP))
        return ckpt_err(CKPT_E_INVALID_ARG, dir ? dir : "", NULL, CKPT_NO_OFFSET,
                        "commit of a tree needs a root and the format safetensors or "
                        "torch-zip");
    tree_source t = {root, format, wopts};
    return ckpt_store_commit_with(path, cap, dir, name, step,
                                  format == CKPT_FORMAT_SAFETENSORS ? ".safetensors" : ".pt",
                                  write_tree, &t, opts);
}

/* ------------------------------------------------------------ copy */

typedef struct copy_source {
    const char *path;
    const ckpt_store_options *o;
} copy_source;

/* The bytes copied so far of `total`, told to o->progress. */
typedef struct copy_progress {
    const ckpt_store_options *o;
    uint64_t done, total;
} copy_progress;

static void copied(void *ctx, uint64_t n) {
    copy_progress *p = ctx;
    p->done += n;
    /* a file that grew meanwhile: done never passes total */
    if (p->o->progress)
        p->o->progress(p->o->progress_ctx, p->done < p->total ? p->done : p->total, p->total);
}

/* Byte copy of the source file: the generation keeps its format. */
static int copy_file(void *ctx, ckpt_atomic *a) {
    const copy_source *cs = ctx;
    const char *src = cs->path;
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_err(CKPT_E_IO, src, NULL, CKPT_NO_OFFSET, "cannot open %s: %s", src,
                        strerror(errno));
    unsigned char *buf = ckpt_malloc(COPY_CHUNK);
    int rc = buf ? 0 : nomem(src);
    copy_progress p = {cs->o, 0, 0};
    uint64_t n;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) p.total = (uint64_t)st.st_size;
    if (rc == 0 && cs->o->progress) cs->o->progress(cs->o->progress_ctx, 0, p.total);
    if (rc == 0) rc = ckpt_atomic_write_fd(a, fd, src, buf, COPY_CHUNK, &n, copied, &p);
    ckpt_free(buf);
    close(fd);
    return rc;
}

/* Copies the regular file `name` of the directory `from` (symbolic links
 * followed, as ckpt_open reads them) to a new file of that name in the
 * directory `to`, through ckpt_atomic (read back, fsync'd, renamed, no
 * write past the file size limit); p counts the bytes of the whole
 * directory for progress. */
static int copy_into(int from, const char *to, const char *src, const char *name, copy_progress *p,
                     unsigned char *buf) {
    char target[PATH_MAX];
    if (snprintf(target, sizeof target, "%s/%s", to, name) >= (int)sizeof target)
        return ckpt_err(CKPT_E_INVALID_ARG, src, name, CKPT_NO_OFFSET, "path too long: %s/%s", to,
                        name);
    int in = openat(from, name, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return ckpt_err(CKPT_E_IO, src, name, CKPT_NO_OFFSET, "cannot open %s/%s: %s", src, name,
                        strerror(errno));
    ckpt_atomic a;
    uint64_t n;
    int rc = ckpt_atomic_begin(&a, target);
    char source[PATH_MAX];
    (void)snprintf(source, sizeof source, "%s/%s", src, name); /* names it in a read error */
    if (rc == 0) rc = ckpt_atomic_write_fd(&a, in, source, buf, COPY_CHUNK, &n, copied, p);
    if (rc == 0)
        rc = ckpt_atomic_commit(&a, 0);
    else
        ckpt_atomic_abort(&a);
    close(in);
    return rc;
}

/* The commit of a DCP directory `src` (verified): every regular file in
 * it copied into a staging directory, then ckpt_store_commit_dir (fsync,
 * verification of the copy, rename, LATEST, pruning). */
static int commit_dcp_source(char *path, size_t cap, const char *dir, const char *name,
                             uint64_t step, const char *src, const ckpt_store_options *o) {
    ckpt_store_stage *st = NULL;
    int rc = ckpt_store_stage_dir(&st, dir, name, step, o);
    if (rc) return rc;
    int from = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *to = ckpt_store_stage_path(st);
    DIR *d = from >= 0 ? fdopendir(from) : NULL;
    unsigned char *buf = ckpt_malloc(COPY_CHUNK);
    if (!d)
        rc = ckpt_err(CKPT_E_IO, src, NULL, CKPT_NO_OFFSET, "cannot open directory %s: %s", src,
                      strerror(errno));
    else if (!buf)
        rc = nomem(src);
    copy_progress p = {o, 0, rc == 0 ? dir_bytes(AT_FDCWD, src) : 0};
    if (rc == 0 && o->progress) o->progress(o->progress_ctx, 0, p.total);
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, 0) == 0 && S_ISREG(sb.st_mode))
            rc = copy_into(dirfd(d), to, src, e->d_name, &p, buf);
    }
    ckpt_free(buf);
    if (d)
        closedir(d);
    else if (from >= 0)
        close(from);
    if (rc == 0) rc = ckpt_store_commit_dir(path, cap, st, o);
    ckpt_store_stage_free(st);
    return rc;
}

int ckpt_store_commit(char *path, size_t cap, const char *dir, const char *name, uint64_t step,
                      const char *src, const ckpt_store_options *opts) {
    ckpt_store_options defaults;
    const ckpt_store_options *o = options(opts, &defaults);
    CKPT_CHECK_OPTIONS(opts, CKPT_STORE_OPTIONS_VERSION);
    if (path && cap) path[0] = '\0';
    if (!src) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "src is NULL");
    /* The source is verified before anything is written, so that a corrupt
     * source is named as such rather than as a copy that failed. */
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, src, &o->open);
    ckpt_format fmt = rc == 0 ? ckpt_file_format(f) : (ckpt_format)0;
    if (fmt == CKPT_FORMAT_SAFETENSORS_SHARDED || fmt == CKPT_FORMAT_TORCH_SHARDED) {
        ckpt_close(f);
        return ckpt_err(CKPT_E_INVALID_ARG, src, NULL, CKPT_NO_OFFSET,
                        "%s is a sharded set (an index and its shards), not one checkpoint "
                        "to commit: commit a single checkpoint file or a DCP directory "
                        "(`ckpt convert` the set to model.safetensors, model.pt or "
                        "model.dcp first); nothing committed",
                        src);
    }
    if (rc == 0) rc = ckpt_verify(NULL, f);
    if (rc && !resource_failure(rc)) {
        const ckpt_error *e = ckpt_error_last();
        char msg[512], member[512];
        uint64_t off = e->offset;
        snprintf(msg, sizeof msg, "%s", e->message);
        snprintf(member, sizeof member, "%s", e->member);
        int corrupt = rc == CKPT_E_TRUNCATED || rc == CKPT_E_FORMAT || rc == CKPT_E_CHECKSUM ||
                      rc == CKPT_E_MISMATCH;
        rc = ckpt_err(rc, src, member, off, "%s %s: %s; nothing committed", src,
                      corrupt ? "is corrupt" : "cannot be committed", msg);
    }
    ckpt_close(f);
    if (rc) return rc;
    if (fmt == CKPT_FORMAT_DCP) return commit_dcp_source(path, cap, dir, name, step, src, o);
    copy_source ctx = {src, o};
    return ckpt_store_commit_with(path, cap, dir, name, step,
                                  fmt == CKPT_FORMAT_SAFETENSORS ? ".safetensors" : ".pt",
                                  copy_file, &ctx, o);
}
