/* xxh3_rate.c - GB/s of ckpt_xxh3_64 over an in-memory buffer, for
 * bench_xxh3.py. Built twice, against the static and the shared libckpt,
 * so a build that loses the vector path shows as a lower rate.
 *
 *     xxh3_rate MIB ROUNDS  ->  "GBPS DIGEST" (best round) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ckpt.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: xxh3_rate MIB ROUNDS\n");
        return 2;
    }
    size_t n = (size_t)strtoul(argv[1], NULL, 10) << 20;
    int rounds = atoi(argv[2]);
    unsigned char *p = malloc(n ? n : 1);
    if (!p || rounds < 1) return 2;
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + (i >> 12));
    double best = 0;
    unsigned long long digest = 0;
    for (int r = 0; r < rounds; r++) {
        double t = now();
        digest ^= ckpt_xxh3_64(p, n);
        t = now() - t;
        if (t > 0 && (double)n / t > best) best = (double)n / t;
    }
    printf("%.2f %016llx\n", best / 1e9, digest);
    free(p);
    return 0;
}
