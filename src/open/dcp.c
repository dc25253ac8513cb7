/* dcp.c - a DCP directory as one checkpoint (dcp.h). What a loader does
 * (FileSystemReader.read_data, then narrow and copy into the global
 * tensor; dcp_to_torch_save with _EmptyStateDictLoadPlanner), done without
 * running a pickle: .metadata names each chunk's slice of a data file;
 * the slice is a torch.save zip (read by the torch zip reader exactly as
 * torch.load would read the slice) or, in the safetensors format, the
 * rank's safetensors file from that offset on. */
#include "open/dcp.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/source.h"
#include "base/strmap.h"
#include "format/dcp_meta.h"
#include "format/detect.h"
#include "model/dtype.h"
#include "open/sharded.h"

#define DATA_SUFFIX ".distcp"
#define HF_SUFFIX ".safetensors" /* _hf_utils.SUFFIX */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int ckpt_is_dcp_dir(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode) && ckpt_dcp_is_dir(path);
}

int ckpt_dcp_hf_name(const char *name) { return ends_with(name, HF_SUFFIX); }

int ckpt_dcp_rank_metadata(const char *name) {
    static const char suffix[] = ".metadata";
    if (strncmp(name, "__", 2) || name[2] < '0' || name[2] > '9' ||
        (name[2] == '0' && name[3] != '.'))
        return -1;
    long r = 0;
    const char *p = name + 2;
    for (; *p >= '0' && *p <= '9'; p++) {
        r = r * 10 + (*p - '0');
        if (r > 1 << 30) return -1;
    }
    return strcmp(p, suffix) ? -1 : (int)r;
}

/* 1 if the safetensors file at `path` has DCP_SHARDING_INFO in its header
 * (looked for in the header's first 64 KiB: safetensors writes
 * __metadata__ first, and DCP's keys sort first in it). Content, not the
 * name, tells DCP's files from others. */
static int has_sharding_info(const char *path) {
    static const char key[] = "\"DCP_SHARDING_INFO\"";
    const char *why;
    int fd = ckpt_open_regular(path, NULL, &why);
    if (fd < 0) return 0;
    uint8_t len[8];
    int found = 0;
    if (pread(fd, len, 8, 0) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
        size_t want = n < (1u << 16) ? (size_t)n : (size_t)1 << 16;
        char *h = ckpt_malloc(want + 1);
        if (h) {
            ssize_t got = pread(fd, h, want, 8);
            if (got < 0) got = 0;
            h[got] = '\0';
            found = memmem(h, (size_t)got, key, sizeof key - 1) != NULL;
            ckpt_free(h);
        }
    }
    close(fd);
    return found;
}

static int exists(const char *dir, const char *name) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0;
}

ckpt_dcp_layout ckpt_dcp_dir_layout(const char *dir) {
    if (exists(dir, ".metadata")) return CKPT_DCP_METADATA;
    DIR *d = opendir(dir);
    if (!d) return CKPT_DCP_NOT;
    int ranks = 0, data = 0, hf = 0;
    for (struct dirent *e; !ranks && (e = readdir(d));) {
        ranks = ckpt_dcp_rank_metadata(e->d_name) >= 0;
        data |= e->d_name[0] != '.' && ends_with(e->d_name, DATA_SUFFIX);
    }
    /* transformers' names first: with them the directory is a model folder */
    if (!ranks && !data && !exists(dir, "model.safetensors.index.json") &&
        !exists(dir, "model.safetensors")) {
        rewinddir(d);
        for (struct dirent *e; !hf && (e = readdir(d));) {
            char path[4096];
            int n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            hf = ckpt_dcp_hf_name(e->d_name) && n > 0 && (size_t)n < sizeof path &&
                 has_sharding_info(path);
        }
    }
    closedir(d);
    return ranks ? CKPT_DCP_RANKS : data ? CKPT_DCP_NO_METADATA : hf ? CKPT_DCP_HF : CKPT_DCP_NOT;
}

int ckpt_dcp_is_dir(const char *dir) { return ckpt_dcp_dir_layout(dir) != CKPT_DCP_NOT; }

typedef struct opener {
    ckpt_file *f;
    const char *dir;
    ckpt_strmap names; /* canonical data file name -> shard index */
    size_t shard_cap, part_cap;
    /* safetensors parts, opened once per (data file, offset): that pair as
     * 16 bytes (keys in f's arena) -> the part's index in st_parts, which
     * holds its DCP_SHARDING_INFO parsed once (read: parsed; NULL when
     * absent or not JSON). A data file of DCP's safetensors format is one
     * part that every chunk in it reads from; a directory holds a file per
     * rank and writer thread. */
    ckpt_strmap st;
    struct st_part {
        ckpt_file *part;
        json_t *sharding;
        int read;
    } * st_parts;
    size_t nst, st_cap;
    int whole_files; /* HF: every chunk is a tensor of the safetensors file */
} opener;

/* "__RANK_N.distcp" -> RANK, else -1. */
static int rank_of(const char *name) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "__", 2)) return -1;
    char *end;
    long r = strtol(base + 2, &end, 10);
    if (end == base + 2 || *end != '_' || r < 0 || r > 1 << 30) return -1;
    return (int)r;
}

/* What placed chunk ch in its data file, for errors about that file: " (the
 * storage_data entry at byte N of .metadata)", or "" for a chunk of an HF
 * layout (no metadata file). Written into buf. */
static const char *placed(char *buf, size_t cap, const ckpt_dcp_chunk *ch) {
    if (!ch || !ch->meta_file) return "";
    const char *base = strrchr(ch->meta_file, '/');
    snprintf(buf, cap, " (the storage_data entry at byte %llu of %s)",
             (unsigned long long)ch->meta_at, base ? base + 1 : ch->meta_file);
    return buf;
}

/* The data file `rel` (as .metadata spells it: len bytes), opened once;
 * ch: the chunk that names it, or NULL (HF layouts: the file itself). */
static int data_file(opener *o, const char *rel, size_t len, const char *fqn,
                     const ckpt_dcp_chunk *ch, size_t *index) {
    ckpt_file *f = o->f;
    char *canon = ckpt_arena_alloc(&f->arena, len + 1);
    CKPT_CHECK_ALLOC(canon);
    const char *why = ckpt_shard_name(canon, rel, len, NULL);
    if (why && ch && ch->meta_file)
        return ckpt_err(CKPT_E_FORMAT, ch->meta_file, fqn, ch->meta_at,
                        "\"%s\": expected a data file of the directory as relative_path, got "
                        "\"%.200s\", which is %s",
                        fqn, rel, why);
    if (why)
        return ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                        "\"%s\": data file \"%.200s\" is %s", fqn, rel, why);
    size_t clen = strlen(canon);
    ckpt_strmap_slot *slot =
        ckpt_strmap_find(&o->names, canon, clen, ckpt_strmap_hash(canon, clen));
    if (slot) {
        *index = slot->val;
        return 0;
    }
    const char *path = ckpt_arena_printf(&f->arena, "%s/%s", o->dir, canon);
    CKPT_CHECK_ALLOC(path);
    struct stat st;
    char claim[300];
    if (stat(path, &st) != 0)
        return ckpt_err(CKPT_E_MISMATCH, path, fqn, CKPT_NO_OFFSET,
                        "missing: .metadata names it as the data file of \"%s\"%s", fqn,
                        placed(claim, sizeof claim, ch));
    if (ckpt_arena_grow(&f->arena, (void **)&f->shards, &o->shard_cap, f->nshards + 1,
                        sizeof *f->shards))
        return ckpt_err_nomem();
    ckpt_file *shard;
    int rc = ckpt_file_open_raw(&shard, path, &f->opts);
    if (rc) return rc;
    f->shards[f->nshards] = shard;
    *index = f->nshards++;
    if (ckpt_strmap_put(&o->names, canon, clen, *index, &slot) < 0) return ckpt_err_nomem();
    return 0;
}

static int add_part(opener *o, ckpt_file *part) {
    ckpt_file *f = o->f;
    if (ckpt_arena_grow(&f->arena, (void **)&f->parts, &o->part_cap, f->nparts + 1,
                        sizeof *f->parts)) {
        ckpt_close(part);
        return ckpt_err_nomem();
    }
    f->parts[f->nparts++] = part;
    return 0;
}

ckpt_format ckpt_dcp_slice_format(const uint8_t *head0, size_t n0, const uint8_t *at, size_t nat,
                                  uint64_t off, int is_bytes, uint64_t *base) {
    *base = off;
    if (!is_bytes && off > 0 && ckpt_detect_format(head0, n0) == CKPT_FORMAT_SAFETENSORS) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | head0[i]; /* detect read 9 bytes */
        if (hlen <= UINT64_MAX - 8 && off >= 8 + hlen) {
            *base = 0;
            return CKPT_FORMAT_SAFETENSORS;
        }
    }
    return ckpt_detect_format(at, nat);
}

/* Re-records an error opening the slice that holds `fqn` (a safetensors
 * header, a torch.save's directory) so that it names fqn and what placed it
 * there: as the member when the error names none. */
static int in_slice(int rc, const char *fqn, const char *claim) {
    if (rc == CKPT_E_NOMEM) return rc;
    const ckpt_error *e = ckpt_error_last();
    char msg[512], file[1024], member[512];
    snprintf(msg, sizeof msg, "%s", e->message);
    snprintf(file, sizeof file, "%s", e->file);
    snprintf(member, sizeof member, "%s", e->member[0] ? e->member : fqn);
    return ckpt_err(rc, file, member, e->offset, "%s (while reading \"%s\"%s)", msg, fqn, claim);
}

/* The checkpoint a slice [off, off+len) of data file `shard` is read
 * from, and in *base where it starts (ckpt_dcp_slice_format). A
 * safetensors file is opened once: *st receives its index in o->st_parts
 * (SIZE_MAX for another format). */
static int open_slice(opener *o, size_t shard, uint64_t off, uint64_t len, int is_bytes,
                      const char *fqn, const char *claim, ckpt_file **out, uint64_t *base,
                      size_t *st) {
    ckpt_file *h = o->f->shards[shard];
    if (off > h->map_size || len > h->map_size - off)
        return ckpt_err(CKPT_E_TRUNCATED, h->path, fqn, h->map_size,
                        "expected \"%s\" at bytes [%llu, %llu) of this file%s, got a file "
                        "that ends at %zu",
                        fqn, (unsigned long long)off,
                        off + len < off ? UINT64_MAX : (unsigned long long)(off + len), claim,
                        h->map_size);
    uint8_t head0[CKPT_HEAD_BYTES], head[CKPT_HEAD_BYTES];
    size_t n0, n = 0;
    int rc = ckpt_file_head(h, 0, head0, &n0);
    if (rc == 0 && !o->whole_files) rc = ckpt_file_head(h, off, head, &n);
    if (rc) return rc;
    /* HuggingFaceStorageReader reads whole safetensors files */
    ckpt_format at = ckpt_dcp_slice_format(head0, n0, head, n, off, is_bytes, base);
    if (o->whole_files && ckpt_detect_format(head0, n0) == CKPT_FORMAT_SAFETENSORS) {
        at = CKPT_FORMAT_SAFETENSORS;
        *base = 0;
    }
    int safetensors = at == CKPT_FORMAT_SAFETENSORS;
    uint64_t key[2] = {shard, *base};
    *st = SIZE_MAX;
    if (safetensors) {
        const ckpt_strmap_slot *sl = ckpt_strmap_find(
            &o->st, (const char *)key, sizeof key, ckpt_strmap_hash((const char *)key, sizeof key));
        if (sl) {
            *st = sl->val;
            *out = o->st_parts[sl->val].part;
            return 0;
        }
        len = h->map_size - *base;
    }
    const char *name =
        ckpt_arena_printf(&o->f->arena, "%s@%llu", h->path, (unsigned long long)*base);
    CKPT_CHECK_ALLOC(name);
    ckpt_file *part;
    rc = ckpt_file_open_part(&part, h, *base, len, name);
    if (rc) return in_slice(rc, fqn, claim);
    if ((rc = add_part(o, part))) return rc;
    if (safetensors) {
        uint64_t *k = ckpt_arena_alloc(&o->f->arena, sizeof key);
        ckpt_strmap_slot *sl;
        if (!k || ckpt_arena_grow(&o->f->arena, (void **)&o->st_parts, &o->st_cap, o->nst + 1,
                                  sizeof *o->st_parts))
            return ckpt_err_nomem();
        memcpy(k, key, sizeof key);
        if (ckpt_strmap_put(&o->st, (const char *)k, sizeof key, o->nst, &sl) < 0)
            return ckpt_err_nomem();
        o->st_parts[o->nst] = (struct st_part){part, NULL, 0};
        *st = o->nst++;
    }
    *out = part;
    return 0;
}

/* A safetensors file's DCP_SHARDING_INFO (its __metadata__ entry), or NULL. */
static const char *sharding_info(const ckpt_file *part) {
    const char *text = NULL;
    for (size_t i = 0; i < part->nmeta; i++)
        if (!strcmp(part->meta_keys[i], "DCP_SHARDING_INFO")) text = part->meta_vals[i];
    return text;
}

/* DCP_SHARDING_INFO's saved_offsets of `fqn` in safetensors part st (its
 * text parsed once: a file holds every tensor of a rank's writer thread),
 * when it lists them, must be the chunk's offsets. */
static int check_saved_offsets(opener *o, size_t st, const char *fqn, const ckpt_dcp_chunk *ch,
                               uint32_t ndim) {
    struct st_part *p = &o->st_parts[st];
    const ckpt_file *part = p->part;
    if (!p->read) {
        const char *text = sharding_info(part);
        p->sharding = text ? json_loads(text, 0, NULL) : NULL;
        p->read = 1;
    }
    const json_t *doc = p->sharding;
    const json_t *so = json_object_get(json_object_get(doc, fqn), "saved_offsets");
    int rc = 0;
    if (so) {
        int same = json_is_array(so) && json_array_size(so) == ndim;
        for (uint32_t d = 0; same && d < ndim; d++) {
            const json_t *x = json_array_get(so, d);
            same = json_is_integer(x) && json_integer_value(x) >= 0 &&
                   (uint64_t)json_integer_value(x) == ch->offsets[d];
        }
        if (!same)
            rc = ckpt_err(CKPT_E_MISMATCH, part->path, fqn, CKPT_NO_OFFSET,
                          "DCP_SHARDING_INFO gives \"%s\" other saved_offsets than its chunk "
                          "in .metadata",
                          fqn);
    }
    return rc;
}

/* The tensor a chunk's slice holds, checked against the chunk. */
static int chunk_tensor(opener *o, const ckpt_dcp_item *it, const ckpt_dcp_chunk *ch, size_t shard,
                        const ckpt_tensor **out) {
    ckpt_file *part;
    uint64_t base;
    size_t st;
    char claim[300];
    placed(claim, sizeof claim, ch);
    int rc = open_slice(o, shard, ch->offset, ch->length, 0, it->fqn, claim, &part, &base, &st);
    if (rc) return rc;
    const ckpt_tensor *t = NULL;
    if (part->format == CKPT_FORMAT_SAFETENSORS) {
        t = ckpt_file_find_tensor(part, it->fqn);
        if (!t)
            return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, CKPT_NO_OFFSET,
                            "the safetensors file holds no tensor \"%s\", which .metadata "
                            "places here%s",
                            it->fqn, claim);
        if ((rc = check_saved_offsets(o, st, it->fqn, ch, it->ndim))) return rc;
        /* a slice inside the file is exactly the tensor's data */
        if (base != ch->offset &&
            (ckpt_tensor_file_offset(t) != ch->offset || t->nbytes != ch->length))
            return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, ch->offset,
                            ".metadata places \"%s\" at [%llu, %llu)%s, where the safetensors "
                            "header has no tensor of that name",
                            it->fqn, (unsigned long long)ch->offset,
                            (unsigned long long)(ch->offset + ch->length), claim);
    } else if (part->root && part->root->kind == CKPT_KIND_TENSOR && part->ntensors == 1) {
        t = &part->tensors[0];
    } else {
        return ckpt_err(CKPT_E_FORMAT, part->path, it->fqn, 0,
                        "expected a torch.save of one tensor in the slice holding a chunk of "
                        "\"%s\"%s, got %s",
                        it->fqn, claim,
                        part->format == CKPT_FORMAT_TORCH_ZIP ? "another torch.save"
                                                              : ckpt_format_name(part->format));
    }
    int same = t->dtype == it->dtype && t->ndim == it->ndim;
    for (uint32_t d = 0; same && d < it->ndim; d++) same = t->shape[d] == ch->sizes[d];
    if (!same)
        return ckpt_err(CKPT_E_MISMATCH, part->path, it->fqn, CKPT_NO_OFFSET,
                        "chunk of \"%s\" holds a %s tensor of %u dimensions that is not the %s "
                        "chunk of the sizes .metadata gives%s",
                        it->fqn, ckpt_dtype_name(t->dtype), t->ndim, ckpt_dtype_name(it->dtype),
                        claim);
    *out = t;
    return 0;
}

/* Row-major order of the boxes' starts (a chunk is a box of the global
 * tensor; this is the order ckpt_tensor_chunk lists them in). */
static int by_offsets(const void *x, const void *y) {
    const ckpt_chunk *a = x, *b = y;
    for (uint32_t d = 0; d < a->t->ndim; d++)
        if (a->offsets[d] != b->offsets[d]) return a->offsets[d] < b->offsets[d] ? -1 : 1;
    return 0;
}

/* A chunk's extent along the dimension of a sweep (check_tiling). */
typedef struct extent {
    uint64_t lo, hi;
    size_t i; /* index in the chunk array */
} extent;

static int by_lo(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* The chunks that hold elements, as extents along dimension d sorted by
 * start; returns the pairs a sweep along d compares (each extent with
 * those that start before it ends). */
static uint64_t sweep_along(const ckpt_chunk *k, size_t n, uint32_t d, extent *e, size_t *m) {
    *m = 0;
    for (size_t i = 0; i < n; i++)
        if (k[i].t->numel)
            e[(*m)++] = (extent){k[i].offsets[d], k[i].offsets[d] + k[i].t->shape[d], i};
    if (*m > 1) qsort(e, *m, sizeof *e, by_lo);
    uint64_t pairs = 0;
    for (size_t a = 0; a < *m; a++) { /* the first extent from a + 1 on that starts at hi */
        size_t lo = a + 1, hi = *m;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (e[mid].lo < e[a].hi)
                lo = mid + 1;
            else
                hi = mid;
        }
        pairs += lo - a - 1;
    }
    return pairs;
}

/* Comparisons an overlap check may make beyond 64 per chunk. */
#define TILING_PAIRS_EXTRA ((uint64_t)1 << 24)

/* The chunks tile the tensor: none overlaps another and together they
 * hold numel elements (inside the tensor: dcp_meta.c checked). Two boxes
 * overlap only if one starts inside the other along every dimension, so
 * a sweep along any one dimension compares each chunk with those that
 * start before it ends there; the dimension taken is the one with the
 * fewest such pairs (a tensor sharded along dimension 1 has none along
 * it, and all N^2/2 along dimension 0). Past 64 pairs per chunk (and
 * 2^24) the check is refused (CKPT_E_LIMIT) rather than run. The chunks
 * end up in row-major order of their starts (ckpt_tensor_chunk's). */
static int check_tiling(const ckpt_file *f, const ckpt_dcp_item *it, ckpt_chunk *k, size_t n) {
    uint64_t numel = 1, total = 0;
    for (uint32_t d = 0; d < it->ndim; d++) numel *= it->size[d]; /* bounded by the view check */
    for (size_t i = 0; i < n; i++) {
        uint64_t m = k[i].t->numel;
        if (ckpt_add_overflow(total, m, &total)) total = UINT64_MAX;
    }
    if (it->ndim == 0) {
        if (n != 1)
            return ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                            "scalar \"%s\" has %zu chunks, expected 1", it->fqn, n);
        return 0;
    }
    if (n > 1) qsort(k, n, sizeof *k, by_offsets);
    extent *e = ckpt_malloc((n ? n : 1) * sizeof *e);
    if (!e) return ckpt_err_nomem();
    uint32_t best_d = 0;
    uint64_t best = UINT64_MAX;
    size_t m = 0;
    for (uint32_t d = 0; d < it->ndim && best; d++) {
        uint64_t pairs = sweep_along(k, n, d, e, &m);
        if (pairs < best) best = pairs, best_d = d;
    }
    if (best > (uint64_t)n * 64 + TILING_PAIRS_EXTRA) {
        ckpt_free(e);
        return ckpt_err(CKPT_E_LIMIT, f->path, it->fqn, CKPT_NO_OFFSET,
                        "\"%s\": telling whether its %zu chunks overlap takes %llu comparisons "
                        "along any dimension, more than 64 per chunk",
                        it->fqn, n, (unsigned long long)best);
    }
    (void)sweep_along(k, n, best_d, e, &m);
    int rc = 0;
    for (size_t a = 0; rc == 0 && a < m; a++) {
        const ckpt_chunk *x = &k[e[a].i];
        for (size_t b = a + 1; rc == 0 && b < m && e[b].lo < e[a].hi; b++) {
            const ckpt_chunk *y = &k[e[b].i];
            int overlap = 1;
            for (uint32_t d = 0; overlap && d < it->ndim; d++) {
                uint64_t lo = x->offsets[d] > y->offsets[d] ? x->offsets[d] : y->offsets[d];
                uint64_t ex = x->offsets[d] + x->t->shape[d];
                uint64_t ey = y->offsets[d] + y->t->shape[d];
                overlap = lo < (ex < ey ? ex : ey);
            }
            if (overlap)
                rc = ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                              "chunks of \"%s\" overlap: the ones in %s@%llu and %s@%llu "
                              "cover common elements",
                              it->fqn, x->file, (unsigned long long)x->offset, y->file,
                              (unsigned long long)y->offset);
        }
    }
    ckpt_free(e);
    if (rc) return rc;
    if (total != numel)
        return ckpt_err(CKPT_E_FORMAT, f->path, it->fqn, CKPT_NO_OFFSET,
                        "chunks of \"%s\" leave a gap: they hold %llu of its %llu elements",
                        it->fqn, (unsigned long long)total, (unsigned long long)numel);
    return 0;
}

static int tensor_value(opener *o, const ckpt_dcp_item *it, ckpt_value **out) {
    ckpt_file *f = o->f;
    ckpt_chunk *k = ckpt_arena_array(&f->arena, it->nchunks ? it->nchunks : 1, sizeof *k);
    ckpt_chunks *cs = ckpt_arena_alloc(&f->arena, sizeof *cs);
    ckpt_storage *st = ckpt_arena_alloc(&f->arena, sizeof *st);
    uint64_t *stride = ckpt_arena_array(&f->arena, it->ndim ? it->ndim : 1, sizeof *stride);
    CKPT_CHECK_ALLOC(k && cs && st && stride);
    for (size_t c = 0; c < it->nchunks; c++) {
        const ckpt_dcp_chunk *ch = &it->chunks[c];
        size_t shard;
        int rc = data_file(o, ch->path, ch->path_len, it->fqn, ch, &shard);
        if (rc == 0) rc = chunk_tensor(o, it, ch, shard, &k[c].t);
        if (rc) return rc;
        k[c].offsets = ch->offsets;
        k[c].file = ch->path;
        k[c].offset = ch->offset;
        k[c].length = ch->length;
        k[c].rank = rank_of(ch->path);
    }
    /* row-major strides; the view check below bounds numel */
    uint64_t numel = 1;
    for (uint32_t d = it->ndim; d-- > 0;) {
        stride[d] = numel;
        if (ckpt_mul_overflow(numel, it->size[d], &numel))
            return ckpt_err(CKPT_E_LIMIT, f->path, it->fqn, CKPT_NO_OFFSET,
                            "\"%s\": element count overflows", it->fqn);
    }
    uint64_t nbytes;
    if (ckpt_mul_overflow(numel, ckpt_dtype_size(it->dtype), &nbytes))
        return ckpt_err(CKPT_E_LIMIT, f->path, it->fqn, CKPT_NO_OFFSET,
                        "\"%s\": byte size overflows", it->fqn);
    *cs = (ckpt_chunks){.ndim = it->ndim, .shape = it->size, .items = k, .n = it->nchunks};
    st->dtype = it->dtype;
    st->nbytes = nbytes;
    st->key = it->fqn;
    st->member = "";
    st->file_offset = CKPT_NO_OFFSET;
    st->chunks = cs;
    int rc = ckpt_tensor_new(out, &f->arena, st, it->dtype, it->ndim, it->size, stride, 0, f->path,
                             it->fqn, CKPT_NO_OFFSET);
    /* after the tensor is built: numel is known to be sane */
    return rc ? rc : check_tiling(f, it, k, it->nchunks);
}

static int bytes_value(opener *o, const ckpt_dcp_item *it, ckpt_value **out) {
    size_t shard, st;
    ckpt_file *part;
    uint64_t base;
    char claim[300];
    placed(claim, sizeof claim, &it->chunks[0]);
    int rc =
        data_file(o, it->chunks[0].path, it->chunks[0].path_len, it->fqn, &it->chunks[0], &shard);
    if (rc == 0)
        rc = open_slice(o, shard, it->chunks[0].offset, it->chunks[0].length, 1, it->fqn, claim,
                        &part, &base, &st);
    if (rc) return rc;
    /* DefaultLoadPlanner.load_bytes: torch.load, which reads the legacy
     * format too (as a tensor chunk's slice is read) */
    if ((part->format != CKPT_FORMAT_TORCH_ZIP && part->format != CKPT_FORMAT_TORCH_LEGACY) ||
        !part->root)
        return ckpt_err(CKPT_E_FORMAT, part->path, it->fqn, 0,
                        "bytes item \"%s\" is not a torch.save (zip or legacy)%s", it->fqn, claim);
    *out = part->root;
    return 0;
}

/* ------------------------------------------------------------ nesting */

/* The state dict as dcp_to_torch_save returns it: every item put back
 * where planner_data's object path says, by the rule of DCP's set_element
 * (_traverse.py): a missing container is a dict when the key that follows
 * is a str and a list when it is an int; lists grow with None up to an
 * index. Dict keys are found through one map keyed by (container, key). */
typedef struct nester {
    ckpt_file *f;
    ckpt_strmap keys;   /* (container, key) -> index of the key in the dict */
    uint64_t max_index; /* list indices past the item count hold no item */
    ckpt_value *filler; /* the None a list grows with, up to an index */
    size_t fillers;     /* list slots still holding it */
    /* what the paths built, for DCP's flatten_state_dict rule (made_lists):
     * each container made (its address -> index in `made`), and the
     * values of bytes items, which the loader's rebuilt state dict holds
     * as BytesStorageMetadata leaves, whatever they unpickle to */
    ckpt_strmap made_at, bytes_leaves;
    struct made {
        ckpt_value *v;
        const ckpt_dcp_item *it; /* the item whose path made it */
        size_t depth;            /* it is the item's path[0..depth) */
        int kept;                /* a list flatten_state_dict descends into */
    } * made;
    size_t nmade, made_cap;
} nester;

/* Records v under its address in map m (val: index), 0 or CKPT_E_NOMEM. */
static int put_addr(nester *n, ckpt_strmap *m, const ckpt_value *v, size_t val) {
    char *k = ckpt_arena_alloc_raw(&n->f->arena, sizeof v);
    ckpt_strmap_slot *slot;
    if (!k) return ckpt_err_nomem();
    memcpy(k, &v, sizeof v);
    return ckpt_strmap_put(m, k, sizeof v, val, &slot) < 0 ? ckpt_err_nomem() : 0;
}

static const ckpt_strmap_slot *find_addr(const ckpt_strmap *m, const ckpt_value *v) {
    return ckpt_strmap_find(m, (const char *)&v, sizeof v,
                            ckpt_strmap_hash((const char *)&v, sizeof v));
}

/* The map's key for `key` in dict `d`: the container's address, the key's
 * kind and its text or value. */
static int dict_key(nester *n, const ckpt_value *d, const ckpt_value *key, const char **out,
                    size_t *len) {
    size_t klen = key->kind == CKPT_KIND_STR ? key->u.s.len : sizeof(int64_t);
    char *b = ckpt_arena_alloc_raw(&n->f->arena, sizeof d + 1 + klen);
    CKPT_CHECK_ALLOC(b);
    memcpy(b, &d, sizeof d);
    b[sizeof d] = (char)key->kind;
    memcpy(b + sizeof d + 1, key->kind == CKPT_KIND_STR ? (const void *)key->u.s.p : &key->u.i.v,
           klen);
    *out = b;
    *len = sizeof d + 1 + klen;
    return 0;
}

static int path_error(const nester *n, const ckpt_dcp_item *it, const char *why) {
    return ckpt_err(CKPT_E_FORMAT, n->f->path, it->fqn, CKPT_NO_OFFSET,
                    "planner_data path of \"%s\" %s (DCP's set_element fails too)", it->fqn, why);
}

/* Slot i of list l, grown with None to hold it. */
static int list_slot(nester *n, const ckpt_dcp_item *it, ckpt_value *l, const ckpt_value *key,
                     ckpt_value ***slot) {
    if (key->kind != CKPT_KIND_INT) return path_error(n, it, "indexes a list with a str");
    if (key->u.i.v < 0 || (uint64_t)key->u.i.v > n->max_index)
        return path_error(n, it, "has a list index out of range");
    size_t i = (size_t)key->u.i.v;
    if (!n->filler && !(n->filler = ckpt_value_new(&n->f->arena, CKPT_KIND_NONE)))
        return ckpt_err_nomem();
    while (l->u.seq.n <= i) {
        if (ckpt_value_append(&n->f->arena, l, n->filler)) return ckpt_err_nomem();
        n->fillers++;
    }
    *slot = &l->u.seq.items[i];
    return 0;
}

/* Container c's entry for key: the slot of its value, a new entry holding
 * `fresh` when there was none (or None in a list). */
static int entry(nester *n, const ckpt_dcp_item *it, ckpt_value *c, const ckpt_value *key,
                 ckpt_value *fresh, ckpt_value ***slot) {
    if (c->kind == CKPT_KIND_LIST) {
        int rc = list_slot(n, it, c, key, slot);
        if (rc == 0 && (**slot)->kind == CKPT_KIND_NONE) {
            n->fillers -= **slot == n->filler;
            **slot = fresh;
        }
        return rc;
    }
    if (c->kind != CKPT_KIND_DICT)
        return path_error(n, it, "goes through a value that is no container");
    const char *k = NULL;
    size_t len = 0;
    int rc = dict_key(n, c, key, &k, &len);
    if (rc) return rc;
    ckpt_strmap_slot *ms;
    int put = ckpt_strmap_put(&n->keys, k, len, c->u.dict.n, &ms);
    if (put < 0) return ckpt_err_nomem();
    if (put == 1) {
        ckpt_value *kv =
            key->kind == CKPT_KIND_STR
                ? ckpt_value_new_str(&n->f->arena, CKPT_KIND_STR, key->u.s.p, key->u.s.len)
                : ckpt_value_new_int(&n->f->arena, key->u.i.v);
        if (!kv || ckpt_value_dict_set(&n->f->arena, c, kv, fresh)) return ckpt_err_nomem();
    }
    *slot = &c->u.dict.vals[ms->val];
    return 0;
}

static int set_element(nester *n, const ckpt_dcp_item *it, ckpt_value *value) {
    ckpt_value *cur = n->f->root, **slot;
    for (size_t i = 1; i < it->npath; i++) {
        int is_str = it->path[i]->kind == CKPT_KIND_STR;
        ckpt_value *fresh = ckpt_value_new(&n->f->arena, is_str ? CKPT_KIND_DICT : CKPT_KIND_LIST);
        CKPT_CHECK_ALLOC(fresh);
        int rc = entry(n, it, cur, it->path[i - 1], fresh, &slot);
        if (rc) return rc;
        cur = *slot;
        if (cur == fresh) {
            if (ckpt_arena_grow(&n->f->arena, (void **)&n->made, &n->made_cap, n->nmade + 1,
                                sizeof *n->made))
                return ckpt_err_nomem();
            n->made[n->nmade] = (struct made){fresh, it, i, 0};
            if ((rc = put_addr(n, &n->made_at, fresh, n->nmade++))) return rc;
        }
    }
    int rc = entry(n, it, cur, it->path[it->npath - 1], value, &slot);
    if (rc == 0) *slot = value; /* an assignment replaces an earlier value */
    if (rc == 0 && it->is_bytes) rc = put_addr(n, &n->bytes_leaves, value, 0);
    return rc;
}

/* DCP's load flattens the state dict it rebuilt from the paths again
 * (_traverse.py traverse_state_dict) and needs every name it gets in the
 * metadata: it descends into a list only when the list holds a tensor, a
 * dict or a list it descends into; a list of bytes items alone (the dict
 * or empty entries that made it a container at save time gone: [[], {}]
 * saved as item c.0) is named as a whole, "c", which the metadata lacks.
 * Lists are made after the containers that hold them, so they are judged
 * in reverse order of making. */
static int made_lists(nester *n) {
    for (size_t i = n->nmade; i-- > 0;) {
        struct made *m = &n->made[i];
        if (m->v->kind != CKPT_KIND_LIST) continue;
        for (size_t k = 0; !m->kept && k < m->v->u.seq.n; k++) {
            const ckpt_value *e = m->v->u.seq.items[k];
            const ckpt_strmap_slot *sl = find_addr(&n->made_at, e);
            if (sl)
                m->kept = e->kind == CKPT_KIND_DICT || n->made[sl->val].kept;
            else
                m->kept = !find_addr(&n->bytes_leaves, e) && e->kind == CKPT_KIND_TENSOR;
        }
        if (!m->kept) {
            char name[256];
            size_t o = 0;
            for (size_t d = 0; d < m->depth && o < sizeof name; d++) {
                const ckpt_value *key = m->it->path[d];
                int w = key->kind == CKPT_KIND_STR
                            ? snprintf(name + o, sizeof name - o, "%s%s", d ? "." : "", key->u.s.p)
                            : snprintf(name + o, sizeof name - o, "%s%lld", d ? "." : "",
                                       (long long)key->u.i.v);
                o += w > 0 ? (size_t)w : 0;
            }
            return ckpt_err(CKPT_E_FORMAT, n->f->path, m->it->fqn, CKPT_NO_OFFSET,
                            "planner_data paths make \"%.200s\" a list of bytes items only "
                            "(\"%s\" among them): DCP's load names such a list as a whole, "
                            "a key the metadata lacks (dcp_to_torch_save fails: Missing key "
                            "in checkpoint state_dict: %.200s)",
                            name, m->it->fqn, name);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ layouts */

/* The metadata pickle `src` is (f itself, or a rank file opened raw), read
 * whole with pread (never through the mapping: the file may shrink) into
 * scratch memory and parsed into f's arena: the parse copies what it
 * keeps. */
static int parse_meta(ckpt_file *f, const ckpt_file *src, ckpt_dcp_meta *meta) {
    /* the chunks keep the file's name (errors about a data file name the
     * metadata that placed it): a rank file's dies with it */
    const char *name = src == f ? f->path : ckpt_arena_strdup(&f->arena, src->path);
    uint8_t *p = name ? ckpt_malloc(src->map_size ? src->map_size : 1) : NULL;
    if (!p) return ckpt_err(CKPT_E_NOMEM, src->path, NULL, 0, "out of memory");
    int rc = ckpt_source_read(&src->source, src->map, p, src->map_size, NULL);
    if (rc == 0) rc = ckpt_dcp_meta_parse(meta, &f->arena, p, src->map_size, name, &f->opts.limits);
    ckpt_free(p);
    return rc;
}

/* Items of several metadata merged by fqn: the first file's order, then
 * each later file's new fqns; an fqn met again adds its chunks. */
typedef struct merger {
    ckpt_file *f;
    ckpt_dcp_meta *all;
    size_t items_cap, seen_cap;
    struct seen {
        size_t chunks_cap;
        const char *from; /* the file that first gave the item */
    } * seen;             /* per item */
    ckpt_strmap index;    /* fqn -> item */
    ckpt_strmap boxes;    /* box_key(item, chunk offsets) -> chunk */
    int hf;               /* HF layout: a box saved twice is ambiguous */
} merger;

static int same_dims(const uint64_t *a, const uint64_t *b, uint32_t n) {
    for (uint32_t d = 0; d < n; d++)
        if (a[d] != b[d]) return 0;
    return 1;
}

static int same_path(const ckpt_dcp_item *a, const ckpt_dcp_item *b) {
    if (a->npath != b->npath) return 0;
    for (size_t i = 0; i < a->npath; i++) {
        const ckpt_value *x = a->path[i], *y = b->path[i];
        if (x->kind != y->kind ||
            (x->kind == CKPT_KIND_STR ? strcmp(x->u.s.p, y->u.s.p) : x->u.i.v != y->u.i.v))
            return 0;
    }
    return 1;
}

static int disagree(const merger *m, const char *file, size_t i, const char *what) {
    const ckpt_dcp_item *it = &m->all->items[i];
    return ckpt_err(CKPT_E_FORMAT, file, it->fqn, CKPT_NO_OFFSET,
                    "\"%s\": its %s here and in %s differ (inconsistent duplicate entries: "
                    "which one a loader gets depends on the rank or file order)",
                    it->fqn, what, m->seen[i].from);
}

/* Records chunk c of item i under its box (item, offsets) unless the box
 * has one: *have receives the chunk the box holds (c when new). Keys are
 * bytes in f's arena. 0 or CKPT_E_NOMEM. */
static int box_put(merger *m, size_t i, size_t c, const uint64_t *offsets, size_t *have) {
    const ckpt_dcp_item *it = &m->all->items[i];
    size_t len = sizeof(uint64_t) * (1 + (size_t)it->ndim);
    uint64_t *key = ckpt_arena_alloc(&m->f->arena, len);
    ckpt_strmap_slot *slot;
    if (!key) return ckpt_err_nomem();
    key[0] = i;
    if (it->ndim) memcpy(key + 1, offsets, it->ndim * sizeof *key);
    if (ckpt_strmap_put(&m->boxes, (const char *)key, len, c, &slot) < 0) return ckpt_err_nomem();
    *have = slot->val;
    return 0;
}

/* A chunk of item i that is new to it; a chunk at the same offsets as
 * one already there is the same box saved again by another rank (a
 * replicated tensor): the first file's copy is the one kept. The box is
 * found by hash, so merging N chunks costs O(N). */
static int merge_chunk(merger *m, const char *file, size_t i, const ckpt_dcp_chunk *ch) {
    ckpt_dcp_item *it = &m->all->items[i];
    size_t c;
    int rc = box_put(m, i, it->nchunks, ch->offsets, &c);
    if (rc) return rc;
    if (c < it->nchunks) {
        if (m->hf)
            return ckpt_err(CKPT_E_FORMAT, file, it->fqn, CKPT_NO_OFFSET,
                            "\"%s\": the chunk at the same saved_offsets is saved twice, here "
                            "and in %s (HuggingFaceStorageReader reads whichever file it lists "
                            "last)",
                            it->fqn, it->chunks[c].path);
        if (!same_dims(it->chunks[c].sizes, ch->sizes, it->ndim))
            return disagree(m, file, i, "chunk sizes at the same offsets");
        return 0;
    }
    if (ckpt_arena_grow(&m->f->arena, (void **)&it->chunks, &m->seen[i].chunks_cap, it->nchunks + 1,
                        sizeof *it->chunks))
        return ckpt_err_nomem();
    it->chunks[it->nchunks++] = *ch;
    return 0;
}

static int merge_item(merger *m, const char *file, const ckpt_dcp_item *it) {
    size_t len = strlen(it->fqn);
    ckpt_strmap_slot *slot;
    int put = ckpt_strmap_put(&m->index, it->fqn, len, m->all->nitems, &slot);
    if (put < 0) return ckpt_err_nomem();
    if (put == 1) {
        size_t n = m->all->nitems + 1;
        if (ckpt_arena_grow(&m->f->arena, (void **)&m->all->items, &m->items_cap, n,
                            sizeof *m->all->items) ||
            ckpt_arena_grow(&m->f->arena, (void **)&m->seen, &m->seen_cap, n, sizeof *m->seen))
            return ckpt_err_nomem();
        m->all->items[m->all->nitems] = *it;
        m->seen[m->all->nitems++] = (struct seen){it->nchunks, file};
        for (size_t c = 0; !it->is_bytes && c < it->nchunks; c++) {
            size_t have;
            int rc = box_put(m, n - 1, c, it->chunks[c].offsets, &have);
            if (rc) return rc;
        }
        return 0;
    }
    size_t i = slot->val;
    const ckpt_dcp_item *have = &m->all->items[i];
    if (have->is_bytes != it->is_bytes) return disagree(m, file, i, "kind (tensor or bytes item)");
    if (!same_path(have, it)) return disagree(m, file, i, "planner_data paths");
    if (it->is_bytes) return 0; /* saved by every rank; the first is kept */
    if (have->dtype != it->dtype || have->ndim != it->ndim ||
        !same_dims(have->size, it->size, it->ndim))
        return disagree(m, file, i, "dtypes or sizes");
    for (size_t c = 0; c < it->nchunks; c++) {
        int rc = merge_chunk(m, file, i, &it->chunks[c]);
        if (rc) return rc;
    }
    return 0;
}

/* RANKS: __0.metadata .. __N-1.metadata, every one present (a loader on
 * the rank of a missing one fails), parsed and merged in rank order. */
static int read_ranks(ckpt_file *f, const char *dir, ckpt_dcp_meta *out) {
    DIR *d = opendir(dir);
    if (!d) return ckpt_err(CKPT_E_IO, dir, "", CKPT_NO_OFFSET, "cannot list the directory");
    int top = -1;
    size_t count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int r = ckpt_dcp_rank_metadata(e->d_name);
        if (r < 0) continue;
        count++;
        if (r > top) top = r;
    }
    closedir(d);
    merger m = {.f = f, .all = out};
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (int r = 0; rc == 0 && r <= top; r++) {
        const char *path = ckpt_arena_printf(&f->arena, "%s/__%d.metadata", dir, r);
        ckpt_file *rank = NULL;
        struct stat st;
        if (!path) {
            rc = ckpt_err_nomem();
        } else if (stat(path, &st) != 0) {
            rc = ckpt_err(CKPT_E_MISMATCH, path, "", CKPT_NO_OFFSET,
                          "missing: the directory holds %zu rank metadata files up to "
                          "__%d.metadata (a save with use_collectives=False) but not this "
                          "one, which %s reads",
                          count, top,
                          r ? "DCP's loader on this rank"
                            : "dcp.load without a process group, dcp_to_torch_save and the "
                              "loader on rank 0");
        }
        if (rc || (rc = ckpt_file_open_raw(&rank, path, &f->opts))) break;
        ckpt_dcp_meta one;
        rc = parse_meta(f, rank, &one);
        ckpt_close(rank);
        for (size_t i = 0; rc == 0 && i < one.nitems; i++) rc = merge_item(&m, path, &one.items[i]);
    }
    ckpt_strmap_free(&m.index);
    ckpt_strmap_free(&m.boxes);
    return rc;
}

/* saved_offsets of `fqn` in DCP_SHARDING_INFO `doc` (ndim of them), as
 * HuggingFaceStorageReader reads it; zeros without DCP_SHARDING_INFO. */
static int saved_offsets(const ckpt_file *part, const json_t *doc, const char *fqn, uint32_t ndim,
                         uint64_t *out) {
    memset(out, 0, (ndim ? ndim : 1) * sizeof *out);
    if (!doc) return 0;
    const json_t *so = json_object_get(json_object_get(doc, fqn), "saved_offsets");
    int ok = json_is_array(so) && json_array_size(so) == ndim;
    for (uint32_t d = 0; ok && d < ndim; d++) {
        const json_t *x = json_array_get(so, d);
        ok = json_is_integer(x) && json_integer_value(x) >= 0;
        if (ok) out[d] = (uint64_t)json_integer_value(x);
    }
    if (!ok)
        return ckpt_err(CKPT_E_FORMAT, part->path, fqn, CKPT_NO_OFFSET,
                        "DCP_SHARDING_INFO has no saved_offsets of %u non-negative ints for "
                        "\"%s\" (HuggingFaceStorageReader fails on it)",
                        ndim, fqn);
    return 0;
}

/* One safetensors file of an HF directory: each tensor a chunk at its
 * saved_offsets; a tensor's size is the largest extent of its chunks. */
static int hf_file(opener *o, merger *m, const char *name) {
    ckpt_file *f = o->f;
    size_t shard;
    ckpt_file *part;
    uint64_t base;
    int rc = data_file(o, name, strlen(name), name, NULL, &shard);
    if (rc) return rc;
    ckpt_file *h = f->shards[shard];
    uint8_t head[CKPT_HEAD_BYTES];
    size_t n;
    if ((rc = ckpt_file_head(h, 0, head, &n))) return rc;
    if (ckpt_detect_format(head, n) != CKPT_FORMAT_SAFETENSORS)
        return ckpt_err(CKPT_E_FORMAT, h->path, "", 0,
                        "not a safetensors file (HuggingFaceStorageReader reads every "
                        "\"*.safetensors\" file of the directory)");
    size_t st;
    if ((rc = open_slice(o, shard, 0, 0, 0, name, "", &part, &base, &st))) return rc;
    const char *text = sharding_info(part);
    json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
    if (text && !json_is_object(doc))
        rc = ckpt_err(CKPT_E_FORMAT, part->path, "", CKPT_NO_OFFSET,
                      "DCP_SHARDING_INFO is not a JSON object");
    for (size_t i = 0; rc == 0 && i < part->ntensors; i++) {
        const ckpt_tensor *t = &part->tensors[i];
        uint32_t nd = t->ndim;
        ckpt_dcp_chunk ch = {.path = name,
                             .path_len = strlen(name),
                             .offset = ckpt_tensor_file_offset(t),
                             .length = t->nbytes,
                             .offsets = ckpt_arena_array(&f->arena, nd ? nd : 1, sizeof(uint64_t)),
                             .sizes = t->shape};
        ckpt_dcp_item it = {.fqn = t->name,
                            .dtype = t->dtype,
                            .ndim = nd,
                            .nchunks = 1,
                            .chunks = ckpt_arena_alloc(&f->arena, sizeof ch),
                            .size = ckpt_arena_array(&f->arena, nd ? nd : 1, sizeof(uint64_t))};
        if (!ch.offsets || !it.chunks || !it.size) {
            rc = ckpt_err_nomem();
            break;
        }
        if ((rc = saved_offsets(part, doc, t->name, nd, ch.offsets))) break;
        for (uint32_t d = 0; d < nd; d++)
            if (ckpt_add_overflow(ch.offsets[d], t->shape[d], &it.size[d]))
                rc = ckpt_err(CKPT_E_FORMAT, part->path, t->name, CKPT_NO_OFFSET,
                              "\"%s\": saved_offsets overflow", t->name);
        it.chunks[0] = ch;
        size_t len = strlen(t->name);
        const ckpt_strmap_slot *slot =
            ckpt_strmap_find(&m->index, t->name, len, ckpt_strmap_hash(t->name, len));
        if (rc == 0 && slot) { /* size: the largest extent, as the reader takes it */
            ckpt_dcp_item *have = &m->all->items[slot->val];
            if (have->dtype != it.dtype || have->ndim != nd) {
                rc = disagree(m, part->path, slot->val, "dtypes or dimension counts");
                break;
            }
            for (uint32_t d = 0; d < nd; d++)
                if (it.size[d] > have->size[d]) have->size[d] = it.size[d];
            memcpy(it.size, have->size, (nd ? nd : 1) * sizeof *it.size);
        }
        if (rc == 0) rc = merge_item(m, part->path, &it);
    }
    json_decref(doc);
    return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int hf_entry(const struct dirent *e) { return ckpt_dcp_hf_name(e->d_name); }

/* HF: every "*.safetensors" file, in name order (the reader lists them). */
static int read_hf(opener *o, const char *dir, ckpt_dcp_meta *out) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, hf_entry, by_name);
    if (n < 0) return ckpt_err(CKPT_E_IO, dir, "", CKPT_NO_OFFSET, "cannot list the directory");
    merger m = {.f = o->f, .all = out, .hf = 1};
    memset(out, 0, sizeof *out);
    o->whole_files = 1;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = rc ? NULL : ckpt_arena_strdup(&o->f->arena, names[i]->d_name);
        if (rc == 0) rc = name ? hf_file(o, &m, name) : ckpt_err_nomem();
        free(names[i]);
    }
    free(names);
    ckpt_strmap_free(&m.index);
    ckpt_strmap_free(&m.boxes);
    return rc;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int ckpt_dcp_read(ckpt_file *f, const char *dir) {
    ckpt_dcp_meta meta = {0};
    opener o = {.f = f, .dir = NULL};
    f->format = CKPT_FORMAT_DCP;
    f->dcp_dir = ckpt_arena_strdup(&f->arena, dir);
    f->root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    CKPT_CHECK_ALLOC(f->dcp_dir && f->root);
    o.dir = f->dcp_dir;
    int rc = !strcmp(f->path, dir)                             ? read_hf(&o, dir, &meta)
             : ckpt_dcp_rank_metadata(base_name(f->path)) >= 0 ? read_ranks(f, dir, &meta)
                                                               : parse_meta(f, f, &meta);
    nester n = {.f = f, .max_index = meta.nitems};
    for (size_t i = 0; rc == 0 && i < meta.nitems; i++) {
        ckpt_dcp_item *it = &meta.items[i];
        ckpt_value *v = NULL;
        if (!it->path) { /* no planner_data entry: at the top, under its fqn */
            it->top_key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, it->fqn, strlen(it->fqn));
            if (!it->top_key) rc = ckpt_err_nomem();
            it->path = &it->top_key;
            it->npath = 1;
        }
        if (rc == 0) rc = it->is_bytes ? bytes_value(&o, it, &v) : tensor_value(&o, it, &v);
        if (rc == 0) rc = set_element(&n, it, v);
    }
    /* flatten_state_dict names a None left in a list as an item of its
     * own, which the metadata lacks */
    if (rc == 0 && n.fillers)
        rc = ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                      "planner_data paths leave %zu list entries without an item "
                      "(dcp_to_torch_save fails: Missing key in checkpoint state_dict)",
                      n.fillers);
    if (rc == 0) rc = made_lists(&n);
    ckpt_strmap_free(&o.names);
    ckpt_strmap_free(&o.st);
    for (size_t i = 0; i < o.nst; i++) json_decref(o.st_parts[i].sharding);
    ckpt_strmap_free(&n.keys);
    ckpt_strmap_free(&n.made_at);
    ckpt_strmap_free(&n.bytes_leaves);
    return rc;
}

/* 1 if dir/name is an empty regular file: FileSystemWriter creates one
 * per writer thread (thread_count) and per rank whether or not any item
 * goes there, and one that got none stays empty and unnamed. */
static int empty_file(const char *dir, const char *name) {
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof path && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
           st.st_size == 0;
}

int ckpt_dcp_check_unnamed(const ckpt_file *f) {
    if (f->format != CKPT_FORMAT_DCP) return 0;
    DIR *d = opendir(f->dcp_dir);
    if (!d) return ckpt_err(CKPT_E_IO, f->dcp_dir, "", CKPT_NO_OFFSET, "cannot list the directory");
    size_t dlen = strlen(f->dcp_dir);
    int ranks = ckpt_dcp_rank_metadata(base_name(f->path)) >= 0, hf = !strcmp(f->path, f->dcp_dir);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (ranks && !strcmp(e->d_name, ".metadata"))
            rc = ckpt_err(CKPT_E_MISMATCH, f->dcp_dir, e->d_name, CKPT_NO_OFFSET,
                          ".metadata lies next to the rank metadata files read: DCP's loader "
                          "reads .metadata and ignores them");
        if (!ranks && !hf && ckpt_dcp_rank_metadata(e->d_name) >= 0)
            rc = ckpt_err(CKPT_E_MISMATCH, f->dcp_dir, e->d_name, CKPT_NO_OFFSET,
                          "%s is ignored: DCP's loader reads .metadata when there is one (the "
                          "rank file was left by a save with use_collectives=False)",
                          e->d_name);
        if (rc || !ends_with(e->d_name, DATA_SUFFIX) || empty_file(f->dcp_dir, e->d_name)) continue;
        int named = 0;
        for (size_t i = 0; !named && i < f->nshards; i++) {
            const char *p = f->shards[i]->path;
            named =
                !strncmp(p, f->dcp_dir, dlen) && p[dlen] == '/' && !strcmp(p + dlen + 1, e->d_name);
        }
        if (!named)
            rc = ckpt_err(CKPT_E_MISMATCH, f->dcp_dir, e->d_name, CKPT_NO_OFFSET,
                          "data file %s is not named by %s (left by another save, or a "
                          "rank's output the coordinator did not record)",
                          e->d_name, ranks ? "any rank's metadata" : ".metadata");
    }
    closedir(d);
    return rc;
}

int ckpt_dcp_check_hf_set(const ckpt_file *f) {
    if (f->format != CKPT_FORMAT_SAFETENSORS_SHARDED) return 0;
    int written = 0;
    for (size_t i = 0; !written && i < f->nshards; i++)
        written = sharding_info(f->shards[i]) != NULL;
    if (!written) return 0;
    /* every tensor where the index has it: whole, at the origin */
    for (size_t i = 0; i < f->nshards; i++) {
        const ckpt_file *sh = f->shards[i];
        const char *text = sharding_info(sh);
        json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
        int rc = 0;
        for (size_t t = 0; rc == 0 && doc && t < sh->ntensors; t++) {
            const ckpt_tensor *x = &sh->tensors[t];
            uint64_t off[CKPT_MAX_NDIM + 1];
            rc = saved_offsets(sh, doc, x->name, x->ndim, off);
            for (uint32_t d = 0; rc == 0 && d < x->ndim; d++)
                if (off[d])
                    rc = ckpt_err(CKPT_E_MISMATCH, sh->path, x->name, CKPT_NO_OFFSET,
                                  "DCP_SHARDING_INFO places \"%s\" at saved_offsets other than "
                                  "0: HuggingFaceStorageReader reads a larger tensor than the "
                                  "index's",
                                  x->name);
        }
        json_decref(doc);
        if (rc) return rc;
    }
    /* and no other "*.safetensors" file next to the index */
    char *dir = ckpt_malloc(strlen(f->path) + 2);
    if (!dir) return ckpt_err_nomem();
    const char *slash = strrchr(f->path, '/');
    size_t dlen = slash ? (size_t)(slash - f->path) : 0;
    memcpy(dir, slash ? f->path : ".", slash ? dlen : 1);
    dir[slash ? dlen : 1] = '\0';
    dlen = strlen(dir);
    DIR *d = opendir(dir);
    int rc = d ? 0 : ckpt_err(CKPT_E_IO, dir, "", CKPT_NO_OFFSET, "cannot list the directory");
    for (struct dirent *e; rc == 0 && d && (e = readdir(d));) {
        if (!ckpt_dcp_hf_name(e->d_name)) continue;
        int listed = 0;
        for (size_t i = 0; !listed && i < f->nshards; i++) {
            const char *p = f->shards[i]->path;
            listed = !strncmp(p, dir, dlen) && p[dlen] == '/' && !strcmp(p + dlen + 1, e->d_name);
        }
        if (!listed)
            rc = ckpt_err(CKPT_E_MISMATCH, dir, e->d_name, CKPT_NO_OFFSET,
                          "%s is not in the index, but HuggingFaceStorageReader (the reader of "
                          "sets with DCP_SHARDING_INFO) reads every \"*.safetensors\" file "
                          "of the directory",
                          e->d_name);
    }
    if (d) closedir(d);
    ckpt_free(dir);
    return rc;
}
