/* verify.c - full integrity check: every byte of every storage is read,
 * every zip member's CRC-32 is compared with the central directory. */
#include <xxhash.h>

#include "error.h"
#include "file.h"

/* Reads every byte (XXH3 is cheaper than the page faults it forces), so a
 * mapping that cannot be read fails here rather than in the caller. */
static uint64_t touch(const uint8_t *p, uint64_t n) {
    uint64_t h = 0;
    const uint64_t chunk = (uint64_t)1 << 30;
    for (uint64_t done = 0; done < n; done += chunk)
        h ^= XXH3_64bits(p + done, (size_t)(n - done < chunk ? n - done : chunk));
    return h;
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
        if (rc == 0) rc = ckpt_zip_check_crc(z, e, data);
        ckpt_arena_free(&scratch);
        if (rc) return rc;
        rep->members++;
        rep->bytes += e->usize;
    }
    return 0;
}

static int verify_storages(ckpt_file *f, ckpt_verify_report *rep) {
    uint64_t h = 0;
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
        h ^= touch(st->data, st->nbytes);
        rep->bytes += st->nbytes;
    }
    (void)h;
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
