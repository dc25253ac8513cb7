/* device.c - torch.device's rules (c10::Device). */
#include "model/device.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"

/* The device types torch 2.13's c10::parse_type names. */
static const char *const device_types[] = {
    "cpu",  "cuda", "ipu", "xpu",  "mkldnn", "opengl", "opencl", "ideep", "hip",  "ve",
    "fpga", "maia", "xla", "lazy", "vulkan", "mps",    "meta",   "hpu",   "mtia", "privateuseone",
};

int ckpt_device_index(uint64_t i, int *index, char *msg, size_t cap) {
    if (i > INT32_MAX) {
        snprintf(msg, cap,
                 "index %" PRIu64 " does not fit 32 bits (torch 1.13 refuses it, 2.13 keeps its "
                 "low 8 bits)",
                 i);
        return CKPT_E_UNSUPPORTED;
    }
    int w = (int8_t)(uint8_t)(i & 0xff);
    if (w < -1) {
        snprintf(msg, cap,
                 "index %" PRIu64 " is negative as c10's 8-bit DeviceIndex (torch 1.13 raises "
                 "'Device index must not be negative', 2.13 may too)",
                 i);
        return CKPT_E_FORMAT;
    }
    *index = w;
    return 0;
}

static int is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

int ckpt_device_parse(const char *p, size_t n, const char **type, int *index, char *msg,
                      size_t cap) {
    size_t t = 0;
    while (t < n && is_name_char(p[t])) t++;
    size_t d = t + 1, k = d;
    while (k < n && p[k] >= '0' && p[k] <= '9') k++;
    if (!t || (t < n && (p[t] != ':' || k == d || k < n || (p[d] == '0' && k > d + 1)))) {
        snprintf(msg, cap,
                 "expected a device string such as 'cuda:0', got %zu bytes that are none (torch "
                 "raises 'Invalid device string')",
                 n);
        return CKPT_E_FORMAT;
    }
    *type = NULL;
    for (size_t i = 0; i < sizeof device_types / sizeof *device_types; i++)
        if (strlen(device_types[i]) == t && !memcmp(device_types[i], p, t)) *type = device_types[i];
    if (!*type) {
        snprintf(msg, cap,
                 "unknown device type '%.*s' (expected one of cpu, cuda, mps, meta, xla... as "
                 "torch names them)",
                 (int)(t > 32 ? 32 : t), p);
        return CKPT_E_FORMAT;
    }
    *index = -1;
    if (t == n) return 0;
    uint64_t i = 0;
    for (size_t q = d; q < k && i <= INT32_MAX; q++) i = i * 10 + (uint64_t)(p[q] - '0');
    if (i > INT32_MAX) {
        snprintf(msg, cap,
                 "the index in '%.*s' does not fit 32 bits (torch raises 'Could not parse device "
                 "index')",
                 (int)(n > 40 ? 40 : n), p);
        return CKPT_E_FORMAT;
    }
    return ckpt_device_index(i, index, msg, cap);
}
