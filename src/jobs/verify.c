/* verify.c - full integrity check: every byte of every storage is read,
 * every zip member's CRC-32 is compared with the central directory, and
 * in files ckpt wrote every tensor's XXH3-64 digest ("ckpt.xxh3") too.
 *
 * Bytes are read with pread into one private window (source.h), never
 * through the mapping: memory stays bounded whatever the file size, and a
 * file that shrinks while it is verified is reported (CKPT_E_TRUNCATED,
 * naming member and offset) instead of killing the process with SIGBUS. */
#include <inttypes.h>
#include <libdeflate.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/json_scan.h"
#include "container/zip.h"
#include "model/file.h"
#include "model/tensor.h"
#include "format/write.h"
#include "open/dcp.h"
#include "jobs/verify.h"

/* Bytes per pread: small enough to stay in cache between the copy and
 * the CRC; larger windows measured no faster (bench/bench_read.py). */
#define WINDOW ((size_t)512 << 10)

/* Reads n bytes at p (f's mapping or memory) in windows into buf; with
 * crc non-NULL, CRC-32 of them into *crc. */
static int read_windows(const ckpt_source *src, const uint8_t *p, uint64_t n, const char *member,
                        uint8_t *buf, uint32_t *crc) {
    ckpt_source_will_read(src, p, n);
    for (uint64_t done = 0; done < n; done += WINDOW) {
        size_t len = (size_t)(n - done < WINDOW ? n - done : WINDOW);
        int rc = ckpt_source_read(src, p + done, buf, len, member);
        if (rc) return rc;
        if (crc) *crc = libdeflate_crc32(*crc, buf, len);
    }
    return 0;
}

/* Tensors named per CRC-32 mismatch before "and N more". */
#define NAMED_MAX 3

/* Whether t's bytes are member e's. A stored member is found by where its
 * data starts: in a shard of a set the storage's member names the shard
 * file instead (open/sharded.c). */
static int holds(const ckpt_tensor *t, const ckpt_zip_entry *e) {
    const ckpt_storage *st = t->storage;
    if (e->method == 0 && st->file_offset != CKPT_NO_OFFSET)
        return st->file_offset == e->data_offset;
    return strcmp(ckpt_tensor_member(t), e->name) == 0;
}

/* The name t is reported by: in a slice of DCP directory `dcp` (NULL
 * otherwise), the fqn of the tensor it is a chunk of (a torch.save slice
 * holds one tensor named ""), else its own name. */
static const char *label(const ckpt_file *dcp, const ckpt_tensor *t) {
    for (size_t i = 0; dcp && i < dcp->ntensors; i++) {
        const ckpt_storage *st = dcp->tensors[i].storage;
        for (size_t k = 0; st->chunks && k < st->chunks->n; k++)
            if (st->chunks->items[k].t == t) return st->key ? st->key : dcp->tensors[i].name;
    }
    return t->name;
}

/* Re-records zip.c's CRC-32 mismatch so that it names what the member
 * holds (the tensors whose storage it is) and what its offset is. */
static int crc_mismatch(const ckpt_file *f, const ckpt_file *dcp, const ckpt_zip_entry *e) {
    char msg[512], names[512] = "";
    size_t shown = 0, total = 0, used = 0;
    snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
    for (size_t i = 0; i < f->ntensors; i++) {
        const ckpt_tensor *t = &f->tensors[i];
        if (!holds(t, e)) continue;
        if (shown < NAMED_MAX && used < sizeof names) {
            int k = snprintf(names + used, sizeof names - used, "%s%s", shown ? ", " : "",
                             label(dcp, t));
            used += k > 0 ? (size_t)k : 0;
            shown++;
        }
        total++;
    }
    char more[48] = "";
    if (total > shown) snprintf(more, sizeof more, " and %zu more", total - shown);
    /* the error's offset is where the member's data starts */
    if (total == 0) return ckpt_err(CKPT_E_CHECKSUM, f->path, e->name, e->data_offset, "%s", msg);
    return ckpt_err(CKPT_E_CHECKSUM, f->path, e->name, e->data_offset,
                    "%s; the member holds tensor%s %s%s", msg, total == 1 ? "" : "s", names, more);
}

/* CRC-32 of the n bytes at p (a member's data, n < WINDOW) through view
 * v: members smaller than a window share its preads (torch.save's
 * storages of a few bytes each: one pread per window, not per member). */
static int crc_small(const ckpt_source *src, ckpt_view *v, const uint8_t *p, size_t n,
                     const char *member, uint32_t *crc) {
    const uint8_t *at;
    int rc = ckpt_source_view(src, v, p, n, WINDOW - n, member, &at);
    if (rc == 0) *crc = libdeflate_crc32(*crc, at, n);
    return rc;
}

static int verify_zip(ckpt_file *f, const ckpt_file *dcp, ckpt_verify_report *rep, uint8_t *buf) {
    ckpt_zip *z = f->zip;
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    ckpt_view small = {0};
    /* a scratch arena for a member's inflated copy, freed before the next
     * (stored members use none) */
    ckpt_arena scratch = {0};
    int rc = 0;
    /* small members are read front to back through `small`: one hint for
     * the file (large ones hint their own range in read_windows) */
    ckpt_source_will_read(&f->source, f->map, f->map_size);
    for (size_t i = 0; rc == 0 && i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        const uint8_t *data;
        uint32_t crc = 0;
        rc = ckpt_zip_read(z, e, &scratch, &budget, &data);
        /* stored members come from the file (pread), inflated ones from
         * the arena; a stored member whose bytes open read already has
         * their CRC-32 (ckpt_zip_crc_seen); on a mismatch, check_crc
         * reads again to report it */
        if (rc == 0 && e->method == 0 && e->crc_seen)
            crc = e->crc_read;
        else if (rc == 0)
            rc = e->usize < WINDOW
                     ? crc_small(&f->source, &small, data, (size_t)e->usize, e->name, &crc)
                     : read_windows(&f->source, data, e->usize, e->name, buf, &crc);
        int recorded = ckpt_zip_crc_recorded(e);
        if (rc == 0 && recorded && crc != e->crc32 &&
            ckpt_zip_check_crc(z, e, data) == CKPT_E_CHECKSUM)
            rc = crc_mismatch(f, dcp, e);
        if (scratch.head) ckpt_arena_free(&scratch);
        if (rc) break;
        rep->members += (uint64_t)recorded;
        rep->bytes += e->usize;
    }
    ckpt_view_free(&small);
    ckpt_arena_free(&scratch);
    /* members whose CRC-32 open took were not read again: a file that
     * shrank since is found by its size */
    return rc ? rc : ckpt_source_check_size(&f->source);
}

/* hashed[i] (may be NULL): storage i was read whole by verify_digests,
 * so it is not read a second time. */
static int verify_storages(ckpt_file *f, ckpt_verify_report *rep, uint8_t *buf,
                           const uint8_t *hashed) {
    for (size_t i = 0; i < f->nstorages; i++) {
        const ckpt_storage *st = ckpt_file_storage_at(f, i);
        int resolved = ckpt_storage_resolve(st);
        if (resolved) return resolved;
        if (!st->data && st->nbytes)
            return ckpt_err(CKPT_E_FORMAT, f->path, st->member, st->file_offset,
                            "storage %s has no data", st->key ? st->key : "");
        int rc = hashed && hashed[i]
                     ? 0
                     : read_windows(st->source, st->data, st->nbytes, st->member, buf, NULL);
        if (rc) return rc;
        rep->bytes += st->nbytes;
    }
    return 0;
}

/* ------------------------------------------------------------ digests */

/* 16 lowercase hex digits (s, len bytes) into *out; -1 otherwise. */
static int hex_digest(const char *s, size_t len, uint64_t *out) {
    uint64_t h = 0;
    if (len != 16) return -1;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -1;
        h = h << 4 | (uint64_t)v;
    }
    *out = h;
    return 0;
}

/* The tensor named by the len bytes at name (no NUL among them), or
 * SIZE_MAX; f->tensors are sorted by name. */
static size_t find_tensor(const ckpt_file *f, const char *name, size_t len) {
    size_t lo = 0, hi = f->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *t = f->tensors[mid].name;
        int c = strncmp(t, name, len);
        if (c == 0) c = t[len] != '\0';
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

enum { DIGEST_NONE, DIGEST_OK, DIGEST_BAD };

/* One digest per tensor from the "ckpt.xxh3" text, read in one pass (a
 * million tensors' digests are 55 MB of JSON): state[i] and want[i] for
 * tensor i; *unknown (ckpt_malloc'd) the first name without a tensor.
 * -1 when the text is not one JSON object of unique names. */
static int read_digests(const ckpt_file *f, const char *text, uint8_t *state, uint64_t *want,
                        char **unknown) {
    ckpt_json_scan s = {.s = (const unsigned char *)text,
                        .n = strlen(text),
                        .max_depth = 128,
                        .file = f->path,
                        .what = "metadata \"" CKPT_META_XXH3 "\""};
    char small[256], *scratch = small, *big = NULL;
    int rc = 0;
    if (ckpt_json_peek(&s) != '{' || ckpt_json_open(&s)) return -1;
    if (ckpt_json_empty(&s, '}')) return ckpt_json_peek(&s) == -1 ? 0 : -1;
    do {
        size_t at = s.i, len, vlen;
        const char *name = ckpt_json_string(&s, scratch, sizeof small, 0, &len);
        if (name && name == scratch && len >= sizeof small) { /* escaped and long */
            ckpt_free(big);
            if (!(big = ckpt_malloc(len + 1))) return ckpt_err_nomem();
            s.i = at;
            name = ckpt_json_string(&s, big, len + 1, 0, &len);
        }
        if (!name || ckpt_json_expect(&s, ':', "':'")) break;
        size_t i = find_tensor(f, name, len);
        if (i == SIZE_MAX && !*unknown) {
            if (!(*unknown = ckpt_malloc(len + 1))) return ckpt_err_nomem();
            memcpy(*unknown, name, len);
            (*unknown)[len] = '\0';
        }
        if (i != SIZE_MAX && state[i] != DIGEST_NONE) break; /* a repeated name */
        const char *hex = NULL;
        if (ckpt_json_peek(&s) == '"') {
            if (!(hex = ckpt_json_string(&s, small, sizeof small, 0, &vlen))) break;
        } else if (ckpt_json_skip(&s)) {
            break;
        }
        if (i != SIZE_MAX)
            state[i] = hex && hex_digest(hex, vlen, &want[i]) == 0 ? DIGEST_OK : DIGEST_BAD;
    } while ((rc = ckpt_json_next(&s, '}')) == 0);
    ckpt_free(big);
    return rc == 1 && ckpt_json_peek(&s) == -1 ? 0 : -1;
}

/* Files written by ckpt carry an XXH3-64 digest per tensor in metadata
 * "ckpt.xxh3" (JSON text {"name": "16 hex digits"}; ckpt.h, "write"):
 * every listed tensor must exist and hash to its digest. Tensors are
 * checked in name order, so the first mismatch reported is the first
 * corrupt tensor by name. Tensors without a digest (aliases of a stored
 * tensor) are covered by the one they alias. A tensor that spans its whole
 * storage contiguously has read every byte of it: hashed[storage id] = 1
 * (hashed NULL: not recorded). */
static int verify_digests(ckpt_file *f, const ckpt_file *dcp, uint8_t *hashed) {
    const char *text = NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], CKPT_META_XXH3) == 0) text = f->meta_vals[i];
    if (!text) return 0;
    size_t n = f->ntensors ? f->ntensors : 1;
    uint8_t *state = ckpt_malloc(n);
    uint64_t *want = ckpt_malloc(n * sizeof *want);
    char *unknown = NULL;
    int rc = state && want ? 0 : ckpt_err_nomem();
    if (rc == 0) {
        memset(state, DIGEST_NONE, n);
        rc = read_digests(f, text, state, want, &unknown);
        if (rc == -1)
            rc = ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                          "metadata \"%s\" is not a JSON object of digests", CKPT_META_XXH3);
    }
    for (size_t i = 0; !rc && i < f->ntensors; i++) {
        const ckpt_tensor *t = &f->tensors[i];
        uint64_t got;
        char hex[17], rec[17];
        if (state[i] == DIGEST_NONE) continue;
        if (state[i] == DIGEST_BAD) {
            rc = ckpt_err(CKPT_E_FORMAT, f->path, ckpt_tensor_member(t), CKPT_NO_OFFSET,
                          "tensor \"%s\": digest in \"%s\" is not 16 hex digits", label(dcp, t),
                          CKPT_META_XXH3);
        } else if ((rc = ckpt_tensor_xxh3(t, &got)) == 0 && got != want[i]) {
            ckpt_hex64(hex, got);
            ckpt_hex64(rec, want[i]);
            rc = ckpt_err(CKPT_E_CHECKSUM, f->path, ckpt_tensor_member(t),
                          ckpt_tensor_file_offset(t),
                          "tensor \"%s\": XXH3-64 of its contents is %s, the file "
                          "records %s",
                          label(dcp, t), hex, rec);
        }
        if (rc == 0 && hashed && ckpt_tensor_is_contiguous(t) && t->storage_offset == 0 &&
            t->nbytes == t->storage->nbytes && t->storage->id < f->nstorages)
            hashed[t->storage->id] = 1;
    }
    if (!rc && unknown)
        rc = ckpt_err(CKPT_E_MISMATCH, f->path, "", CKPT_NO_OFFSET,
                      "\"%s\" has a digest for tensor \"%s\", which the file "
                      "does not hold",
                      CKPT_META_XXH3, unknown);
    ckpt_free(state);
    ckpt_free(want);
    ckpt_free(unknown);
    return rc;
}

int ckpt_verify_expect_digests(ckpt_file *f) {
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < f->nshards; i++)
        rc = ckpt_verify_expect_digests(f->shards[i]);
    for (size_t i = 0; rc == 0 && i < f->nparts; i++) rc = ckpt_verify_expect_digests(f->parts[i]);
    const char *text = NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], CKPT_META_XXH3) == 0) text = f->meta_vals[i];
    if (rc || !text || !f->ntensors) return rc;
    uint8_t *state = ckpt_malloc(f->ntensors);
    uint64_t *want = ckpt_malloc(f->ntensors * sizeof *want);
    char *unknown = NULL;
    rc = state && want ? 0 : ckpt_err_nomem();
    if (rc == 0) {
        memset(state, DIGEST_NONE, f->ntensors);
        rc = read_digests(f, text, state, want, &unknown) == CKPT_E_NOMEM ? CKPT_E_NOMEM : 0;
    }
    for (size_t i = 0; rc == 0 && i < f->ntensors; i++) {
        ckpt_tensor *t = &f->tensors[i];
        ckpt_storage *st = t->storage;
        if (state[i] == DIGEST_OK && ckpt_tensor_is_contiguous(t) && t->storage_offset == 0 &&
            t->nbytes == st->nbytes && !st->big_endian && !st->chunks) {
            st->xxh3 = want[i];
            st->has_xxh3 = 1;
        }
    }
    ckpt_free(state);
    ckpt_free(want);
    ckpt_free(unknown);
    return rc;
}

/* torch.load(mmap=True) takes a storage record's bytes where the zip says
 * its data starts (get_record_offset) without inflating it: a deflated
 * record (torch.save stores every record) gives plain torch.load and
 * mmap=True two different tensors. */
static int check_stored(const ckpt_file *f) {
    if (f->format != CKPT_FORMAT_TORCH_ZIP || !f->zip) return 0;
    /* torch.save compresses nothing: one pass over the directory spares
     * a lookup per storage (100k of them: 22M instructions) */
    size_t compressed = 0;
    for (size_t i = 0; i < f->zip->count; i++) compressed += f->zip->entries[i].method != 0;
    for (size_t i = 0; compressed && i < f->nstorages; i++) {
        const ckpt_storage *st = ckpt_file_storage_at(f, i);
        const ckpt_zip_entry *e = st->member ? ckpt_zip_find(f->zip, st->member) : NULL;
        if (e && e->method != 0)
            return ckpt_err(CKPT_E_MISMATCH, f->path, e->name, e->data_offset,
                            "storage record is compressed (method %u, %" PRIu64 " bytes for "
                            "%" PRIu64 "): torch.load inflates it, but torch.load(mmap=True) "
                            "maps its compressed bytes as the tensor, so the two load "
                            "different values (torch.save never compresses a record)",
                            (unsigned)e->method, e->csize, e->usize);
    }
    return 0;
}

int ckpt_file_check_mmap(const ckpt_file *f) {
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "file is NULL");
    int rc = check_stored(f);
    for (size_t i = 0; rc == 0 && i < f->nshards; i++) rc = check_stored(f->shards[i]);
    return rc;
}

/* One file, checked as if it stood alone: digests first (a corrupt
 * tensor is named, not just its zip member; storages they read whole are
 * not read again, while zip members still are: their CRC-32 is checked
 * too), then every zip member or every storage. */
static int verify_file(ckpt_file *f, const ckpt_file *dcp, ckpt_verify_report *rep, uint8_t *buf) {
    uint8_t *hashed = NULL;
    if (!f->zip && f->nstorages && ckpt_file_checksums(f) == CKPT_CHECKSUMS_DIGESTS) {
        if (!(hashed = ckpt_malloc(f->nstorages))) return ckpt_err_nomem();
        memset(hashed, 0, f->nstorages);
    }
    int rc = dcp ? 0 : check_stored(f);
    if (rc == 0) rc = verify_digests(f, dcp, hashed);
    if (rc == 0) rc = f->zip ? verify_zip(f, dcp, rep, buf) : verify_storages(f, rep, buf, hashed);
    ckpt_free(hashed);
    return rc;
}

/* A DCP directory: no unnamed data file, then every slice it was read
 * from as a checkpoint of its own (zip CRC-32s, ckpt's digests, every
 * byte read, so a truncated data file is found). Chunks and sizes were
 * checked against .metadata, and the tiling, when it was opened. */
static int verify_dcp(ckpt_file *f, ckpt_verify_report *rep, uint8_t *buf) {
    int rc = ckpt_dcp_check_unnamed(f);
    for (size_t i = 0; rc == 0 && i < f->nparts; i++) rc = verify_file(f->parts[i], f, rep, buf);
    return rc;
}

/* A sharded set: digests its index records, if any, what
 * HuggingFaceStorageReader would read differently (open/dcp.h), then every shard as
 * the file it is (its digests, its zip CRC-32s), so a corrupt tensor is
 * named with the shard that holds it. */
static int verify_set(ckpt_file *f, ckpt_verify_report *rep, uint8_t *buf) {
    int rc = verify_digests(f, NULL, NULL);
    if (rc == 0) rc = ckpt_dcp_check_hf_set(f);
    for (size_t i = 0; rc == 0 && i < f->nshards; i++)
        rc = verify_file(f->shards[i], NULL, rep, buf);
    if (rc == 0) rep->shards = f->nshards;
    return rc;
}

/* Two leaves that different keys name alike (flatten.h): torch.load
 * gives both, a flat listing cannot tell them apart. */
static int check_names(const ckpt_file *f) {
    if (!f->ncollisions) return 0;
    return ckpt_err(CKPT_E_MISMATCH, f->path, NULL, CKPT_NO_OFFSET,
                    "%zu pair%s of entries flatten to one name: \"%s\" is both %s and %s "
                    "(torch.load keeps both; a flat state_dict, safetensors or a "
                    "manifest can hold only one)",
                    f->ncollisions, f->ncollisions == 1 ? "" : "s", f->collision_name,
                    f->collision_paths[0], f->collision_paths[1]);
}

const ckpt_file *ckpt_verify_name_collision(const ckpt_file *f, const ckpt_error *e) {
    if (f == NULL || e->code != CKPT_E_MISMATCH || e->member[0] || e->offset != CKPT_NO_OFFSET)
        return NULL;
    for (size_t i = 0; i <= f->nshards; i++) {
        const ckpt_file *g = i ? f->shards[i - 1] : f;
        if (g->ncollisions && strcmp(g->path, e->file) == 0) return g;
    }
    return NULL;
}

int ckpt_verify(ckpt_verify_report *report, ckpt_file *f) {
    ckpt_verify_report local = {0};
    ckpt_verify_report *rep = report ? report : &local;
    *rep = (ckpt_verify_report){0};
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "file is NULL");
    uint8_t *buf = ckpt_malloc(WINDOW);
    if (!buf) return ckpt_err_nomem();
    /* a DCP directory's data files are its shards too, but only slices
     * of them (its parts) are checkpoints */
    int rc = f->format == CKPT_FORMAT_DCP ? verify_dcp(f, rep, buf)
             : f->nshards                 ? verify_set(f, rep, buf)
                                          : verify_file(f, NULL, rep, buf);
    if (rc == 0) rc = check_names(f);
    for (size_t i = 0; rc == 0 && i < f->nshards; i++) rc = check_names(f->shards[i]);
    ckpt_free(buf);
    if (rc) return rc;
    rep->tensors = f->ntensors;
    rep->ok = 1;
    return 0;
}

/* Whether t's bytes are where e blames in file g: in the zip member it
 * names (holds), or else (a storage of a safetensors or legacy file) in
 * [file offset, + nbytes) at e's offset. */
static int damaged(const ckpt_file *g, const ckpt_tensor *t, const ckpt_error *e) {
    const ckpt_zip_entry *z = g->zip && e->member ? ckpt_zip_find(g->zip, e->member) : NULL;
    if (z) return holds(t, z);
    uint64_t at = ckpt_tensor_file_offset(t);
    return !g->zip && at != CKPT_NO_OFFSET && e->offset != CKPT_NO_OFFSET && e->offset >= at &&
           e->offset - at < t->storage->nbytes;
}

size_t ckpt_verify_damaged(const ckpt_file *f, const ckpt_error *e,
                           void (*fn)(const char *name, void *ctx), void *ctx) {
    if (!f || !e || !e->file) return 0;
    const ckpt_file *g = !strcmp(f->path, e->file) ? f : NULL, *dcp = NULL;
    for (size_t i = 0; !g && i < f->nshards; i++)
        if (!strcmp(f->shards[i]->path, e->file)) g = f->shards[i];
    for (size_t i = 0; !g && i < f->nparts; i++)
        if (!strcmp(f->parts[i]->path, e->file)) g = f->parts[i], dcp = f;
    size_t n = 0;
    for (size_t i = 0; g && i < g->ntensors; i++) {
        if (!damaged(g, &g->tensors[i], e)) continue;
        if (fn) fn(label(dcp, &g->tensors[i]), ctx);
        n++;
    }
    return n;
}

/* A set's (a sharded set's shards, a DCP directory's parts): the weakest
 * of its files; none without files. */
static ckpt_checksums weakest(ckpt_file *const *files, size_t n) {
    ckpt_checksums least = n ? CKPT_CHECKSUMS_DIGESTS : CKPT_CHECKSUMS_NONE;
    for (size_t i = 0; i < n; i++) {
        ckpt_checksums c = ckpt_file_checksums(files[i]);
        if (c < least) least = c;
    }
    return least;
}

/* Whether DCP part p (a slice of a data file) lies in q, a safetensors
 * part that is that whole data file and whose tensors carry ckpt's
 * digests: ckpt.dcp's Writer stores a bytes item (DCP's torch.save of a
 * non-tensor value) as a U8 tensor, so verify checks the slice against
 * that tensor's digest as well as against its own zip CRC-32s. (A zip
 * slice cannot start in q's header, JSON text: it is in its tensor
 * bytes, all of which the header's data_offsets cover.) */
static int digested_within(const ckpt_file *p, const ckpt_file *q) {
    return q != p && q->format == CKPT_FORMAT_SAFETENSORS && p->source.map &&
           p->source.map == q->source.map && q->map == q->source.map &&
           ckpt_file_checksums(q) == CKPT_CHECKSUMS_DIGESTS;
}

/* A DCP directory's: the weakest of its parts, a part inside a
 * digest-checked safetensors part counting as that one (digested_within).
 * Covering parts are looked for only while they can change the answer. */
static ckpt_checksums dcp_checksums(const ckpt_file *f) {
    ckpt_checksums least = f->nparts ? CKPT_CHECKSUMS_DIGESTS : CKPT_CHECKSUMS_NONE;
    for (size_t i = 0; i < f->nparts; i++) {
        ckpt_checksums c = ckpt_file_checksums(f->parts[i]);
        for (size_t k = 0; c < least && k < f->nparts; k++)
            if (digested_within(f->parts[i], f->parts[k])) c = CKPT_CHECKSUMS_DIGESTS;
        if (c < least) least = c;
    }
    return least;
}

const char *ckpt_checksums_name(ckpt_checksums c) {
    switch (c) {
    case CKPT_CHECKSUMS_CRC32: return "crc32";
    case CKPT_CHECKSUMS_DIGESTS: return "digests";
    default: return "none";
    }
}

ckpt_checksums ckpt_file_checksums(const ckpt_file *f) {
    switch (f->format) {
    case CKPT_FORMAT_TORCH_ZIP:
        /* compute_crc32=False and skip_data() saves record none */
        for (size_t i = 0; f->zip && i < f->zip->count; i++)
            if (f->zip->entries[i].usize && !ckpt_zip_crc_recorded(&f->zip->entries[i]))
                return CKPT_CHECKSUMS_NONE;
        return CKPT_CHECKSUMS_CRC32;
    case CKPT_FORMAT_TORCH_SHARDED:
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return weakest(f->shards, f->nshards);
    case CKPT_FORMAT_DCP: return dcp_checksums(f);
    case CKPT_FORMAT_SAFETENSORS:
        for (size_t i = 0; i < f->nmeta; i++)
            if (strcmp(f->meta_keys[i], CKPT_META_XXH3) == 0) return CKPT_CHECKSUMS_DIGESTS;
        return CKPT_CHECKSUMS_NONE;
    default: return CKPT_CHECKSUMS_NONE;
    }
}
