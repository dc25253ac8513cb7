/* verify.h - what convert takes from verify: the input's digests, checked
 * as the writers read the bytes they cover. */
#ifndef CKPT_JOBS_VERIFY_H
#define CKPT_JOBS_VERIFY_H

#include "model/file.h"

/* Records each well-formed "ckpt.xxh3" digest of f (and of its shards or
 * DCP parts) on the storage of its tensor when the tensor is that
 * storage's bytes (storage->xxh3, has_xxh3: every safetensors tensor), so
 * that the writers check it in the pass that reads them (model/tensor.h).
 * Digests of views, malformed ones and names without a tensor are left to
 * ckpt_verify (a torch archive's members also carry their CRC-32). 0, or
 * CKPT_E_NOMEM. */
int ckpt_verify_expect_digests(ckpt_file *f);

/* The file, f or one of its shards, whose entries flatten to one name when
 * that is what ckpt_verify's error e says (its bytes verified: the error
 * names no member and no offset); NULL when e is about something else. */
const ckpt_file *ckpt_verify_name_collision(const ckpt_file *f, const ckpt_error *e);

#endif
