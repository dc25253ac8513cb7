/* scan.h - the scan's entry for a file that is already open. */
#ifndef CKPT_JOBS_SCAN_H
#define CKPT_JOBS_SCAN_H

#include "ckpt.h"
#include "model/file.h"

/* ckpt_scan of the content of `f`, a single file opened with the same
 * limits as opts (not a sharded index: its shards are not scanned here).
 * A safetensors header is not parsed again: opening validated it; nor a
 * torch zip's directory: the scan walks the one open read (f->zip). */
int ckpt_scan_opened(ckpt_scan_report **out, const ckpt_file *f, const ckpt_scan_options *opts);

#endif
