/* verify.c - full integrity check: every byte of every storage is read,
 * every zip member's CRC-32 is compared with the central directory.
 *
 * Large inputs are read in windows that are released after use
 * (ckpt_file_release), so peak memory stays bounded whatever the file
 * size even though the file is memory-mapped. */
#include <libdeflate.h>
#include <xxhash.h>

#include "error.h"
#include "file.h"

#define WINDOW ((uint64_t)16 << 20)

/* Reads every byte of p[0..n): XXH3 is cheaper than the page faults it
 * forces, so a mapping that cannot be read fails here, in verify. */
static uint64_t touch(const ckpt_file *f, const uint8_t *p, uint64_t n) {
    uint64_t h = 0;
    for (uint64_t done = 0; done < n; done += WINDOW) {
        size_t len = (size_t)(n - done < WINDOW ? n - done : WINDOW);
        ckpt_file_prefetch(f, p + done, len);
        h ^= XXH3_64bits(p + done, len);
        ckpt_file_release(f, p + done, len);
    }
    return h;
}

static uint32_t crc_windows(const ckpt_file *f, const uint8_t *p, uint64_t n) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < n; done += WINDOW) {
        size_t len = (size_t)(n - done < WINDOW ? n - done : WINDOW);
        ckpt_file_prefetch(f, p + done, len);
        crc = libdeflate_crc32(crc, p + done, len);
        ckpt_file_release(f, p + done, len);
    }
    return crc;
}

static int verify_zip(ckpt_file *f, ckpt_verify_report *rep) {
    ckpt_zip *z = f->zip;
    uint64_t budget = f->opts.limits.max_inflate_bytes;
    for (size_t i = 0; i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        const uint8_t *data;
        /* a scratch arena per member keeps inflated copies from piling up */
        ckpt_arena scratch = {0};
        int rc = ckpt_zip_read(z, e, &scratch, &budget, &data);
        /* on a mismatch, check_crc recomputes to report it */
        if (rc == 0 && crc_windows(f, data, e->usize) != e->crc32)
            rc = ckpt_zip_check_crc(z, e, data);
        ckpt_arena_free(&scratch);
        if (rc) return rc;
        rep->members++;
        rep->bytes += e->usize;
    }
    return 0;
}

static int verify_storages(ckpt_file *f, ckpt_verify_report *rep) {
    for (size_t i = 0; i < f->nshards; i++) {
        int rc = verify_storages(f->shards[i], rep);
        if (rc) return rc;
    }
    if (f->nshards) return 0;
    for (size_t i = 0; i < f->nstorages; i++) {
        const ckpt_storage *st = f->storages[i];
        if (!st->data && st->nbytes)
            return ckpt_err(CKPT_E_FORMAT, f->path, st->member, st->file_offset,
                            "storage %s has no data", st->key ? st->key : "");
        (void)touch(f, st->data, st->nbytes);
        rep->bytes += st->nbytes;
    }
    return 0;
}

int ckpt_verify(ckpt_file *f, ckpt_verify_report *report) {
    ckpt_verify_report local = {0};
    ckpt_verify_report *rep = report ? report : &local;
    *rep = (ckpt_verify_report){0};
    if (!f) return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "file is NULL");
    int rc = f->zip ? verify_zip(f, rep) : verify_storages(f, rep);
    if (rc) return rc;
    rep->tensors = f->ntensors;
    rep->ok = 1;
    return 0;
}
