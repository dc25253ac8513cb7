/* device.h - torch.device's rules (c10::Device), shared by the pickle
 * builder of torch.device and the ckpt.structure decoder. */
#ifndef CKPT_DEVICE_H
#define CKPT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

/* An index as c10 keeps it, in an 8-bit DeviceIndex: 255 is -1 (no
 * index), 256 is 0; other wrapped values are negative, which torch
 * refuses (CKPT_E_FORMAT), and an index past 32 bits is CKPT_E_UNSUPPORTED
 * (torch 1.13 refuses it, 2.13 keeps its low 8 bits). *index is -1 for
 * none. On failure msg holds the reason. */
int ckpt_device_index(uint64_t i, int *index, char *msg, size_t cap);

/* c10::Device(string): ([a-zA-Z_]+)(:([1-9][0-9]*|0))? naming a type of
 * torch 2.13's list, its index read as std::stoi reads it (32 bits) and
 * kept by ckpt_device_index. Returns 0 with *type (a static string) and
 * *index (-1 for none), or CKPT_E_FORMAT / CKPT_E_UNSUPPORTED with the
 * reason in msg. The text is counted, not NUL-terminated. */
int ckpt_device_parse(const char *s, size_t n, const char **type, int *index, char *msg,
                      size_t cap);

#endif
