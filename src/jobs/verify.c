/* verify.c - full integrity check: every byte of every storage is read,
 * every zip member's CRC-32 is compared with the central directory, and
 * in files ckpt wrote every tensor's XXH3-64 digest ("ckpt.xxh3") too.
 *
 * Bytes are read with pread into one private window (source.h), never
 * through the mapping: memory stays bounded whatever the file size, and a
 * file that shrinks while it is verified is reported (CKPT_E_TRUNCATED,
 * naming member and offset) instead of killing the process with SIGBUS. */
#include <inttypes.h>
#include <jansson.h>
#include <libdeflate.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "container/zip.h"
#include "model/file.h"
#include "model/tensor.h"
#include "format/write.h"

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

/* Re-records zip.c's CRC-32 mismatch so that it names what the member
 * holds (the tensors whose storage it is) and what its offset is. */
static int crc_mismatch(const ckpt_file *f, const ckpt_zip_entry *e) {
    char msg[512], names[512] = "";
    size_t shown = 0, total = 0, used = 0;
    snprintf(msg, sizeof msg, "%s", ckpt_error_last()->message);
    for (size_t i = 0; i < f->ntensors; i++) {
        const ckpt_tensor *t = &f->tensors[i];
        if (strcmp(ckpt_tensor_member(t), e->name) != 0) continue;
        if (shown < NAMED_MAX && used < sizeof names) {
            int k = snprintf(names + used, sizeof names - used, "%s%s", shown ? ", " : "", t->name);
            used += k > 0 ? (size_t)k : 0;
            shown++;
        }
        total++;
    }
    char more[48] = "";
    if (total > shown) snprintf(more, sizeof more, " and %zu more", total - shown);
    if (total == 0)
        return ckpt_err(CKPT_E_CHECKSUM, f->path, e->name, e->data_offset,
                        "%s (member data starts at offset %" PRIu64 ")", msg, e->data_offset);
    return ckpt_err(CKPT_E_CHECKSUM, f->path, e->name, e->data_offset,
                    "%s; the member holds tensor%s %s%s (member data starts at offset "
                    "%" PRIu64 ")",
                    msg, total == 1 ? "" : "s", names, more, e->data_offset);
}

static int verify_zip(ckpt_file *f, ckpt_verify_report *rep, uint8_t *buf) {
    ckpt_zip *z = f->zip;
    uint64_t budget = ckpt_zip_budget(&f->opts.limits, f->map_size);
    for (size_t i = 0; i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        const uint8_t *data;
        uint32_t crc = 0;
        /* a scratch arena per member keeps inflated copies from piling up */
        ckpt_arena scratch = {0};
        int rc = ckpt_zip_read(z, e, &scratch, &budget, &data);
        /* stored members come from the file (pread), inflated ones from
         * the arena; on a mismatch, check_crc recomputes to report it */
        if (rc == 0) rc = read_windows(&f->source, data, e->usize, e->name, buf, &crc);
        if (rc == 0 && crc != e->crc32 && ckpt_zip_check_crc(z, e, data) == CKPT_E_CHECKSUM)
            rc = crc_mismatch(f, e);
        ckpt_arena_free(&scratch);
        if (rc) return rc;
        rep->members++;
        rep->bytes += e->usize;
    }
    return 0;
}

static int verify_storages(ckpt_file *f, ckpt_verify_report *rep, uint8_t *buf) {
    for (size_t i = 0; i < f->nshards; i++) {
        ckpt_file *shard = f->shards[i]; /* torch shards: every member's CRC */
        int rc = shard->zip ? verify_zip(shard, rep, buf) : verify_storages(shard, rep, buf);
        if (rc) return rc;
    }
    if (f->nshards) return 0;
    for (size_t i = 0; i < f->nstorages; i++) {
        const ckpt_storage *st = f->storages[i];
        int resolved = ckpt_storage_resolve(st);
        if (resolved) return resolved;
        if (!st->data && st->nbytes)
            return ckpt_err(CKPT_E_FORMAT, f->path, st->member, st->file_offset,
                            "storage %s has no data", st->key ? st->key : "");
        int rc = read_windows(st->source, st->data, st->nbytes, st->member, buf, NULL);
        if (rc) return rc;
        rep->bytes += st->nbytes;
    }
    return 0;
}

/* ------------------------------------------------------------ digests */

static int hex_digest(const char *s, uint64_t *out) {
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -1;
        h = h << 4 | (uint64_t)v;
    }
    *out = h;
    return s[16] == '\0' ? 0 : -1;
}

/* Files written by ckpt carry an XXH3-64 digest per tensor in metadata
 * "ckpt.xxh3" (JSON text {"name": "16 hex digits"}; ckpt.h, "write"):
 * every listed tensor must exist and hash to its digest. Tensors are
 * checked in name order, so the first mismatch reported is the first
 * corrupt tensor by name. Tensors without a digest (aliases of a stored
 * tensor) are covered by the one they alias. */
static int verify_digests(ckpt_file *f) {
    const char *text = NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], CKPT_META_XXH3) == 0) text = f->meta_vals[i];
    if (!text) return 0;
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    int rc = json_is_object(doc)
                 ? 0
                 : ckpt_err(CKPT_E_FORMAT, f->path, "", CKPT_NO_OFFSET,
                            "metadata \"%s\" is not a JSON object of digests", CKPT_META_XXH3);
    for (size_t i = 0; !rc && i < f->ntensors; i++) {
        const ckpt_tensor *t = &f->tensors[i];
        const json_t *want = json_object_get(doc, t->name);
        uint64_t expect, got;
        if (!want) continue;
        if (!json_is_string(want) || hex_digest(json_string_value(want), &expect)) {
            rc = ckpt_err(CKPT_E_FORMAT, f->path, ckpt_tensor_member(t), CKPT_NO_OFFSET,
                          "tensor \"%s\": digest in \"%s\" is not 16 hex digits", t->name,
                          CKPT_META_XXH3);
        } else if ((rc = ckpt_tensor_xxh3(t, &got)) == 0 && got != expect) {
            char hex[17];
            ckpt_hex64(hex, got);
            rc = ckpt_err(CKPT_E_CHECKSUM, f->path, ckpt_tensor_member(t),
                          ckpt_tensor_file_offset(t),
                          "tensor \"%s\": XXH3-64 of its contents is %s, the file "
                          "records %s",
                          t->name, hex, json_string_value(want));
        }
    }
    const char *name;
    json_t *val;
    json_object_foreach(doc, name, val) {
        if (rc) break;
        if (!ckpt_file_find_tensor(f, name))
            rc = ckpt_err(CKPT_E_MISMATCH, f->path, "", CKPT_NO_OFFSET,
                          "\"%s\" has a digest for tensor \"%s\", which the file "
                          "does not hold",
                          CKPT_META_XXH3, name);
    }
    json_decref(doc);
    return rc;
}

int ckpt_verify(ckpt_verify_report *report, ckpt_file *f) {
    ckpt_verify_report local = {0};
    ckpt_verify_report *rep = report ? report : &local;
    *rep = (ckpt_verify_report){0};
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "file is NULL");
    /* digests first: a corrupt tensor is named, not just its zip member */
    int rc = verify_digests(f);
    uint8_t *buf = rc ? NULL : ckpt_malloc(WINDOW);
    if (rc == 0 && !buf) rc = ckpt_err_nomem();
    if (rc == 0) rc = f->zip ? verify_zip(f, rep, buf) : verify_storages(f, rep, buf);
    ckpt_free(buf);
    if (rc) return rc;
    rep->tensors = f->ntensors;
    rep->ok = 1;
    return 0;
}

ckpt_checksums ckpt_file_checksums(const ckpt_file *f) {
    switch (f->format) {
    case CKPT_FORMAT_TORCH_ZIP: return CKPT_CHECKSUMS_CRC32;
    case CKPT_FORMAT_TORCH_SHARDED: /* zip shards have CRCs, legacy ones none */
        for (size_t i = 0; i < f->nshards; i++)
            if (!f->shards[i]->zip) return CKPT_CHECKSUMS_NONE;
        return CKPT_CHECKSUMS_CRC32;
    case CKPT_FORMAT_SAFETENSORS:
    case CKPT_FORMAT_SAFETENSORS_SHARDED:
        for (size_t i = 0; i < f->nmeta; i++)
            if (strcmp(f->meta_keys[i], CKPT_META_XXH3) == 0) return CKPT_CHECKSUMS_DIGESTS;
        return CKPT_CHECKSUMS_NONE;
    default: return CKPT_CHECKSUMS_NONE;
    }
}
