/* text.c - small text helpers of the report layer (text.h). */
#include "report/text.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

const char *ckpt_report_dims(char *buf, size_t cap, unsigned ndim, const uint64_t *shape) {
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (unsigned i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)shape[i]);
    if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "]");
    if (used >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
    return buf;
}

int ckpt_report_string(char **out, size_t *len, ckpt_buf *b) {
    ckpt_buf_byte(b, '\0');
    if (b->failed) {
        ckpt_buf_free(b);
        return ckpt_err_nomem();
    }
    *out = (char *)b->p;
    if (len) *len = b->len - 1;
    return 0;
}

void ckpt_string_free(char *s) { ckpt_free(s); }
