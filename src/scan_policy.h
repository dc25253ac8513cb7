/* scan_policy.h - what the scanner calls dangerous, and what it takes for
 * a pickle.
 *
 * The verdict never depends on this table: any global off the allowlist
 * (builders.h plus the caller's list) makes a file unsafe. The table only
 * decides the severity shown for such a global (dangerous: a known
 * code-execution family, FORMATS.md §5; suspicious: anything else) and
 * which names a caller's allowlist may not override. */
#ifndef CKPT_SCAN_POLICY_H
#define CKPT_SCAN_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

/* Severity of the global module.name (module already name-mapped, name
 * possibly dotted) that is not allowlisted. *why receives a static phrase
 * for the message, e.g. "code-execution family 'os'". */
ckpt_severity ckpt_scan_classify(const char *module, const char *name,
                                 const char **why);

/* Python 2 module names the unpickler maps (_compat_pickle IMPORT_MAPPING
 * subset that matters here: __builtin__, copy_reg). Returns `module` when
 * no mapping applies. Static or borrowed string. */
const char *ckpt_scan_map_module(const char *module);

/* 1 if p[0..n) starts like a pickle stream: PROTO 0..5, or a protocol 0/1
 * opcode that can begin a stream. */
int ckpt_scan_pickle_start(const uint8_t *p, size_t n);

/* 1 if p[0..n) is shaped like a whole pickle: PROTO 0..5 at the start
 * (picklescan sniffs zip members this way), or a protocol 0/1 start whose
 * last byte, ignoring trailing whitespace, is STOP '.'. Used for content
 * that is not named as a pickle (zip members, literals): only the first
 * and last bytes are read, so big storages cost nothing. */
int ckpt_scan_pickle_shape(const uint8_t *p, size_t n);

#endif
