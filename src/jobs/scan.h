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
/* ckpt_scan of path, through ckpt_scan_opened when `opened` (NULL: none)
 * is that file open as safetensors or a torch zip. */
int ckpt_scan_path_or_opened(ckpt_scan_report **out, const char *path, const ckpt_file *opened,
                             const ckpt_scan_options *opts);
/* ckpt_scan_dir_scan, the file `opened` (NULL: none) scanned from what
 * its opening read (ckpt_scan_path_or_opened). */
int ckpt_scan_dir_scan_opened(ckpt_scan_dir *w, const ckpt_scan_options *opts,
                              const ckpt_file *opened);

#endif
