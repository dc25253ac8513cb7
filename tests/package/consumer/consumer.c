/* consumer.c - a program that uses an installed libckpt the way a user's
 * would: #include <ckpt.h>, open a safetensors image from memory, check
 * what it holds. Prints "ckpt VERSION: NAME DTYPE" and exits 0. */
#include <ckpt.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    static const char st[] = "\x38\0\0\0\0\0\0\0"
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  "
                             "\0\0\x80?";
    ckpt_file *f = NULL;
    const ckpt_tensor *t;

    if (ckpt_open_memory(&f, st, sizeof st - 1, "mem.safetensors", NULL) != 0) {
        fprintf(stderr, "consumer: %s\n", ckpt_error_last()->message);
        return 1;
    }
    t = ckpt_file_tensor(f, 0);
    if (ckpt_file_tensor_count(f) != 1 || strcmp(ckpt_tensor_name(t), "w") != 0) {
        fprintf(stderr, "consumer: unexpected contents\n");
        ckpt_close(f);
        return 1;
    }
    printf("ckpt %s: %s %s\n", CKPT_VERSION_STRING, ckpt_tensor_name(t),
           ckpt_dtype_name(ckpt_tensor_dtype(t)));
    ckpt_close(f);
    return 0;
}
