/* shell.c - ckpt_shell_quote: a path in a printed command, as one POSIX
 * shell word. */
#include <string.h>

#include "base/error.h"
#include "base/shell.h"

static int plain(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '/' || c == '-';
}

size_t ckpt_shell_quote(char *buf, size_t cap, const char *s) {
    size_t n = 0, i;
    int quote = s[0] == '\0';

    for (i = 0; s[i] && !quote; i++) quote = !plain(s[i]);
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n + 1 < cap) buf[n] = (c);                                                             \
        n++;                                                                                       \
    } while (0)
    if (quote) PUT('\'');
    for (i = 0; s[i]; i++) {
        if (s[i] == '\'' && quote) {
            PUT('\'');
            PUT('\\');
            PUT('\'');
        }
        PUT(s[i]);
    }
    if (quote) PUT('\'');
#undef PUT
    if (cap) buf[n < cap ? n : cap - 1] = '\0';
    return n;
}

char *ckpt_shell_word(ckpt_arena *a, const char *s) {
    size_t n = ckpt_shell_quote(NULL, 0, s);
    char *w = ckpt_arena_alloc_raw(a, n + 1);

    if (w) ckpt_shell_quote(w, n + 1, s);
    return w;
}
