/* shell.h - printed commands: a word as ckpt_shell_quote writes it, in an
 * arena. */
#ifndef CKPT_SHELL_H
#define CKPT_SHELL_H

#include "base/alloc.h"

/* s as one POSIX shell word (ckpt_shell_quote), in a; NULL when out of
 * memory. */
char *ckpt_shell_word(ckpt_arena *a, const char *s);

#endif
