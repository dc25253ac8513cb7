/* folder_files.c - the other files of a model folder (folder_files.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "container/atomic.h"
#include "open/model_dir.h"
#include "open/sharded.h"
#include "jobs/folder_files.h"

#define COPY_CHUNK ((size_t)1 << 20)
#define HEAD 262 /* enough for every rule of ckpt_detect_format */

static int by_name(const void *a, const void *b) {
    return strcmp(((const ckpt_folder_file *)a)->name, ((const ckpt_folder_file *)b)->name);
}

/* Whether the first bytes of the file at path are a checkpoint's: weights
 * or training state (optimizer.pt, training_args.bin), never copied as
 * the folder's other files. A pickle counts when it opens with PROTO (a
 * text file may start with a protocol 0 opcode). */
static int is_checkpoint(const char *path) {
    unsigned char head[HEAD];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, head, sizeof head, 0);
    close(fd);
    if (n <= 0) return 0;
    ckpt_format f = ckpt_detect_format(head, (size_t)n);
    return f == CKPT_FORMAT_TORCH_ZIP || f == CKPT_FORMAT_SAFETENSORS ||
           f == CKPT_FORMAT_TORCH_LEGACY || f == CKPT_FORMAT_DCP ||
           (f == CKPT_FORMAT_PICKLE && head[0] == 0x80);
}

/* Whether `real` (a real path) is a blob of the Hugging Face cache that
 * snapshot folder `dir` belongs to: dir is REPO/snapshots/REVISION and
 * real is REPO/blobs/NAME, as huggingface_hub links every file of a
 * snapshot. */
static int is_cache_blob(const char *dir, const char *real) {
    char *rd = realpath(dir, NULL);
    int blob = 0;
    char *rev = rd ? strrchr(rd, '/') : NULL;
    if (rev && rev > rd) {
        *rev = '\0';
        char *snaps = strrchr(rd, '/');
        if (snaps && !strcmp(snaps, "/snapshots")) {
            size_t n = (size_t)(snaps - rd);
            blob = strncmp(real, rd, n) == 0 && strncmp(real + n, "/blobs/", 7) == 0 &&
                   real[n + 7] != '\0' && !strchr(real + n + 7, '/');
        }
    }
    free(rd);
    return blob;
}

/* Training state that no checkpoint reader detects by its bytes: a JSON
 * file the Trainer writes under this name (transformers'
 * TRAINER_STATE_NAME: the step, epoch and log history a resume reads).
 * It stays with the training run, as optimizer.pt and rng_state.pth do
 * (is_checkpoint), rather than going with the weights. */
static int is_training_state(const char *name) { return strcmp(name, "trainer_state.json") == 0; }

/* Whether `name` in dir is one of the folder's other files: *keep 1 and
 * *from the path it is read from. */
static int consider(ckpt_arena *a, const char *dir, const char *name, int *keep,
                    const char **from) {
    char index[512], target[PATH_MAX];
    struct stat st;
    *keep = 0;
    if (name[0] == '.' || ckpt_model_dir_rank(name) || is_training_state(name) ||
        ckpt_model_dir_shard_index(index, sizeof index, name))
        return 0;
    const char *path = ckpt_arena_printf(a, "%s/%s", dir, name);
    if (!path) return ckpt_err_nomem();
    if (lstat(path, &st) != 0)
        return ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET, "cannot stat %s: %s", path,
                        strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        if (ckpt_shard_outside(dir, path, target, sizeof target) && !is_cache_blob(dir, target))
            return ckpt_err(CKPT_E_INVALID_ARG, path, NULL, CKPT_NO_OFFSET,
                            "a symbolic link out of the folder (to %s): not followed, "
                            "nothing written; to write the weights alone, name a file as "
                            "the output (DIR/model.safetensors in an existing DIR)",
                            target);
        if (stat(path, &st) != 0)
            return ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET, "cannot stat %s: %s", path,
                            strerror(errno));
    }
    if (!S_ISREG(st.st_mode) || is_checkpoint(path)) return 0;
    *keep = 1;
    *from = path;
    return 0;
}

int ckpt_folder_files_list(ckpt_folder_files *out, ckpt_arena *a, const char *dir) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d)
        return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "cannot list %s: %s", dir,
                        strerror(errno));
    size_t cap = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        const char *from;
        int keep;
        if ((rc = consider(a, dir, e->d_name, &keep, &from)) != 0 || !keep) continue;
        if (ckpt_arena_grow(a, (void **)&out->files, &cap, out->n + 1, sizeof *out->files))
            rc = ckpt_err_nomem();
        else if (!(out->files[out->n].name = ckpt_arena_strdup(a, e->d_name)))
            rc = ckpt_err_nomem();
        else
            out->files[out->n++].from = from;
    }
    closedir(d);
    if (rc == 0 && out->n) qsort(out->files, out->n, sizeof *out->files, by_name);
    return rc;
}

/* Copies one file: from -> target, through ckpt_atomic. */
static int copy_one(const char *from, const char *target, int backup, unsigned char *buf) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = errno;
        if (in >= 0) close(in);
        return ckpt_err(CKPT_E_IO, from, NULL, CKPT_NO_OFFSET, "cannot read %s: %s", from,
                        in >= 0 && err == 0 ? "not a regular file" : strerror(err));
    }
    ckpt_atomic a;
    uint64_t off = 0;
    int rc = ckpt_atomic_begin(&a, target);
    if (rc == 0) rc = ckpt_atomic_write_fd(&a, in, from, buf, COPY_CHUNK, &off, NULL, NULL);
    struct stat now;
    if (rc == 0 && (fstat(in, &now) != 0 || off != (uint64_t)st.st_size ||
                    now.st_size != st.st_size || now.st_mtime != st.st_mtime))
        rc = ckpt_err(CKPT_E_IO, from, NULL, off,
                      "%s changed while it was copied (%llu bytes, then %llu read): not written",
                      from, (unsigned long long)st.st_size, (unsigned long long)off);
    if (rc == 0)
        rc = ckpt_atomic_commit(&a, backup);
    else
        ckpt_atomic_abort(&a);
    close(in);
    return rc;
}

int ckpt_folder_files_copy(const ckpt_folder_files *f, const char *out_dir, int backup,
                           ckpt_arena *a) {
    if (f->n == 0) return 0;
    unsigned char *buf = ckpt_malloc(COPY_CHUNK);
    int rc = buf ? 0 : ckpt_err_nomem();
    for (size_t i = 0; rc == 0 && i < f->n; i++) {
        const char *target = ckpt_arena_printf(a, "%s/%s", out_dir, f->files[i].name);
        rc = target ? copy_one(f->files[i].from, target, backup, buf) : ckpt_err_nomem();
    }
    ckpt_free(buf);
    return rc;
}
