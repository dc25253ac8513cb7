/* scan_dir.c - the one walk of a directory whose files a scan checks:
 * `ckpt scan DIR` and doctor's subdirectories list what it lists, in its
 * order, with its skip rules, depth limit and entries left unread. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/alloc.h"
#include "base/error.h"
#include "jobs/scan.h"
#include "open/dcp.h"

/* Subdirectory levels followed below the directory given: a diffusers
 * pipeline keeps its weights one level down (unet/, text_encoder/), a
 * Trainer output in checkpoint-N/. */
#define DIR_DEPTH 16

struct ckpt_scan_dir {
    ckpt_arena arena;
    ckpt_dir_entry *es;
    size_t n, cap;
    const char *root;
    ckpt_scan_report **reports; /* ckpt_scan_dir_scan's, one per entry */
    ckpt_error *failed;         /* a failed scan's error, code 0 else */
};

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends the entry rel (relative to the root; path, root/rel); code != 0:
 * left unread, the error just recorded. */
static int add(ckpt_scan_dir *w, const char *rel, const char *path, int code) {
    if (ckpt_arena_grow(&w->arena, (void **)&w->es, &w->cap, w->n + 1, sizeof *w->es))
        return ckpt_err_nomem();
    ckpt_dir_entry *e = &w->es[w->n];
    const char *slash = strrchr(rel, '/');
    e->name = rel;
    e->base = slash ? (size_t)(slash - rel) + 1 : 0;
    e->path = path;
    if (code) {
        const ckpt_error *last = ckpt_error_last();
        if (last) e->error = *last;
        e->error.code = code;
        e->error.message = ckpt_arena_strdup(&w->arena, last && last->message ? last->message : "");
        e->error.file = ckpt_arena_strdup(&w->arena, path);
        e->error.member = ckpt_arena_strdup(&w->arena, "");
        if (!e->error.message || !e->error.file || !e->error.member) return ckpt_err_nomem();
    }
    w->n++;
    return 0;
}

/* The directory root/rel (rel "" for the root itself), depth levels below
 * the root: its regular files and DCP directories and the entries that
 * cannot be examined, in name order, then each subdirectory the same way.
 * Hidden entries ("." first: caches, atomic-write temporaries) and links
 * to directories are not followed. */
static int walk(ckpt_scan_dir *w, const char *rel, int depth) {
    const char *path = *rel ? ckpt_arena_printf(&w->arena, "%s/%s", w->root, rel) : w->root;
    if (path == NULL) return ckpt_err_nomem();
    DIR *d = opendir(path);
    if (d == NULL) {
        int code = ckpt_err_os(errno, path, NULL, CKPT_NO_OFFSET, "cannot open directory: %s",
                               strerror(errno));
        return depth == 0 ? code : add(w, rel, path, code);
    }
    const char **names = NULL, **subs = NULL, **sub_paths = NULL;
    size_t n = 0, ncap = 0, ns = 0;
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.') continue;
        const char *name = *rel ? ckpt_arena_printf(&w->arena, "%s/%s", rel, de->d_name)
                                : ckpt_arena_strdup(&w->arena, de->d_name);
        if (name == NULL ||
            ckpt_arena_grow(&w->arena, (void **)&names, &ncap, n + 1, sizeof *names))
            rc = ckpt_err_nomem();
        else
            names[n++] = name;
    }
    closedir(d);
    if (rc) return rc;
    if (n) qsort(names, n, sizeof *names, by_name);
    if (n && ((subs = ckpt_arena_array(&w->arena, n, sizeof *subs)) == NULL ||
              (sub_paths = ckpt_arena_array(&w->arena, n, sizeof *sub_paths)) == NULL))
        return ckpt_err_nomem();
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *full = ckpt_arena_printf(&w->arena, "%s/%s", w->root, names[i]);
        struct stat st, lst;
        if (full == NULL) return ckpt_err_nomem();
        if (stat(full, &st) != 0) {
            /* vanished since the listing: no file; else a file unread,
             * said, never a silent skip */
            if (errno != ENOENT)
                rc = add(w, names[i], full,
                         ckpt_err_os(errno, full, NULL, CKPT_NO_OFFSET, "cannot stat: %s",
                                     strerror(errno)));
        } else if (S_ISREG(st.st_mode) || (S_ISDIR(st.st_mode) && ckpt_is_dcp_dir(full)))
            rc = add(w, names[i], full, 0);
        else if (S_ISDIR(st.st_mode) && lstat(full, &lst) == 0 && S_ISDIR(lst.st_mode)) {
            sub_paths[ns] = full;
            subs[ns++] = names[i];
        }
    }
    for (size_t i = 0; rc == 0 && i < ns; i++)
        rc = depth < DIR_DEPTH
                 ? walk(w, subs[i], depth + 1)
                 : add(w, subs[i], sub_paths[i],
                       ckpt_err(CKPT_E_LIMIT, sub_paths[i], NULL, CKPT_NO_OFFSET,
                                "deeper than %d levels of subdirectories", DIR_DEPTH));
    return rc;
}

int ckpt_scan_dir_list(ckpt_scan_dir **out, const char *dir, const char *sub) {
    if (out) *out = NULL;
    if (out == NULL || dir == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, dir, NULL, CKPT_NO_OFFSET, "NULL argument");
    ckpt_scan_dir *w = ckpt_malloc(sizeof *w);
    if (w == NULL) return ckpt_err_nomem();
    memset(w, 0, sizeof *w);
    int depth = 0, rc = 0;
    const char *rel = sub ? sub : "";
    for (const char *p = rel; *rel && p; p = strchr(p + 1, '/')) depth++;
    if ((w->root = ckpt_arena_strdup(&w->arena, dir)) == NULL ||
        (rel = ckpt_arena_strdup(&w->arena, rel)) == NULL)
        rc = ckpt_err_nomem();
    if (rc == 0) rc = walk(w, rel, depth);
    if (rc) {
        ckpt_scan_dir_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

size_t ckpt_scan_dir_count(const ckpt_scan_dir *w) { return w ? w->n : 0; }

const ckpt_dir_entry *ckpt_scan_dir_entry(const ckpt_scan_dir *w, size_t i) {
    return w && i < w->n ? &w->es[i] : NULL;
}

void ckpt_scan_dir_free(ckpt_scan_dir *w) {
    if (w == NULL) return;
    for (size_t i = 0; w->reports && i < w->n; i++) ckpt_scan_report_free(w->reports[i]);
    ckpt_arena_free(&w->arena);
    ckpt_free(w);
}

int ckpt_scan_dir_covered(const ckpt_scan_report *const *reports, const char *const *names,
                          size_t n, size_t k) {
    if (k >= n || (reports[k] && ckpt_scan_shard_count(reports[k]))) return 0;
    for (size_t m = 0; m < n; m++) {
        size_t ns = m == k ? 0 : ckpt_scan_shard_count(reports[m]);
        for (size_t i = 0; i < ns; i++)
            if (strcmp(ckpt_scan_shard(reports[m], i), names[k]) == 0) return 1;
    }
    return 0;
}

static int is_json_name(const char *name) {
    size_t len = strlen(name);
    return len >= 5 && strcmp(name + len - 5, ".json") == 0;
}

/* Keeps the error of the failed scan of entry k (code: what it returned). */
static int keep_failure(ckpt_scan_dir *w, size_t k, int code) {
    const ckpt_error *last = ckpt_error_last();
    ckpt_error *e = &w->failed[k];
    if (last) *e = *last;
    e->code = code;
    e->message = ckpt_arena_strdup(&w->arena, last && last->message ? last->message : "");
    e->file = ckpt_arena_strdup(&w->arena, last && last->file ? last->file : w->es[k].path);
    e->member = ckpt_arena_strdup(&w->arena, last && last->member ? last->member : "");
    return e->message && e->file && e->member ? 0 : ckpt_err_nomem();
}

/* The n entries es[0..n) of one directory (rs: their reports, ns: their
 * names there): the JSON files scanned first, so that a shard an index
 * reached is not scanned again; then a report made before an index that
 * reaches it was read (a DCP directory's safetensors) is dropped, every
 * decision made before any report is freed. */
static int scan_run(ckpt_scan_dir *w, size_t first, size_t n, const char **ns, char *drop,
                    const ckpt_scan_options *opts, const ckpt_file *opened) {
    ckpt_scan_report **rs = w->reports + first;
    const ckpt_scan_report *const *crs = (const ckpt_scan_report *const *)rs;
    for (int json = 1; json >= 0; json--)
        for (size_t k = 0; k < n; k++) {
            const ckpt_dir_entry *e = &w->es[first + k];
            if (e->error.code || is_json_name(ns[k]) != json ||
                ckpt_scan_dir_covered(crs, ns, n, k))
                continue;
            int rc = ckpt_scan_path_or_opened(&rs[k], e->path, opened, opts);
            if (rc == CKPT_E_NOMEM) return rc;
            if (rc && (rs[k] = NULL, keep_failure(w, first + k, rc))) return CKPT_E_NOMEM;
        }
    for (size_t k = 0; k < n; k++) drop[k] = rs[k] && ckpt_scan_dir_covered(crs, ns, n, k);
    for (size_t k = 0; k < n; k++)
        if (drop[k]) {
            ckpt_scan_report_free(rs[k]);
            rs[k] = NULL;
        }
    return 0;
}

int ckpt_scan_dir_scan(ckpt_scan_dir *w, const ckpt_scan_options *opts) {
    return ckpt_scan_dir_scan_opened(w, opts, NULL);
}

int ckpt_scan_dir_scan_opened(ckpt_scan_dir *w, const ckpt_scan_options *opts,
                              const ckpt_file *opened) {
    if (w == NULL || w->reports)
        return ckpt_err(CKPT_E_INVALID_ARG, NULL, NULL, CKPT_NO_OFFSET,
                        w ? "directory scanned already" : "NULL argument");
    size_t n = w->n;
    const char **ns = ckpt_arena_array(&w->arena, n + 1, sizeof *ns);
    char *drop = ckpt_arena_array(&w->arena, n + 1, 1);
    w->failed = ckpt_arena_array(&w->arena, n + 1, sizeof *w->failed);
    w->reports = ckpt_arena_array(&w->arena, n + 1, sizeof *w->reports);
    if (!ns || !drop || !w->failed || !w->reports) {
        w->reports = NULL;
        return ckpt_err_nomem();
    }
    memset(w->reports, 0, (n + 1) * sizeof *w->reports);
    memset(w->failed, 0, (n + 1) * sizeof *w->failed);
    for (size_t i = 0; i < n; i++) ns[i] = w->es[i].name + w->es[i].base;
    for (size_t first = 0, end; first < n; first = end) {
        const ckpt_dir_entry *f = &w->es[first];
        for (end = first + 1; end < n; end++) /* the run of entries in one directory */
            if (w->es[end].base != f->base || strncmp(w->es[end].name, f->name, f->base) != 0)
                break;
        int rc = scan_run(w, first, end - first, ns + first, drop + first, opts, opened);
        if (rc) return rc;
    }
    return 0;
}

const ckpt_scan_report *ckpt_scan_dir_report(const ckpt_scan_dir *w, size_t i,
                                             const ckpt_error **error) {
    const ckpt_error *why = NULL;
    const ckpt_scan_report *r = NULL;
    if (w && i < w->n) {
        r = w->reports ? w->reports[i] : NULL;
        why = w->es[i].error.code               ? &w->es[i].error
              : w->reports && w->failed[i].code ? &w->failed[i]
                                                : NULL;
    }
    if (error) *error = why;
    return r;
}
