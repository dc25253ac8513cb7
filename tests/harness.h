/* harness.h - the in-tree unit-test harness.
 *
 *   TEST(name) { CHECK(cond); CHECK_EQ_INT(a, b); CHECK_EQ_STR(a, b); }
 *   int main(void) { RUN(name); RUN_CORPUS(other); ...; return harness_end(); }
 *
 * Two suites: RUN tests use only what the repository holds or makes; tests
 * that read the real-world corpus (CKPT_CORPUS, ../shared/corpus) are
 * RUN_CORPUS and run only when the environment says CKPT_TEST_SUITE=corpus.
 * ctest registers a binary once per suite it has (tests/CMakeLists.txt),
 * the corpus suite only when the corpus is there.
 *
 * Each failed CHECK prints file:line and the expression; the run ends with
 * the line "N passed, N failed" and a non-zero exit status on failure. */
#ifndef CKPT_HARNESS_H
#define CKPT_HARNESS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_passed, harness_failed, harness_cur_failed;

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            harness_cur_failed = 1;                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long ha_ = (long long)(a), hb_ = (long long)(b);                                      \
        if (ha_ != hb_) {                                                                          \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
                    ha_, hb_);                                                                     \
            harness_cur_failed = 1;                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *ha_ = (a), *hb_ = (b);                                                         \
        if (!ha_ || !hb_ || strcmp(ha_, hb_) != 0) {                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a,  \
                    #b, ha_ ? ha_ : "(null)", hb_ ? hb_ : "(null)");                               \
            harness_cur_failed = 1;                                                                \
        }                                                                                          \
    } while (0)

/* 1 when this run is the corpus suite (CKPT_TEST_SUITE=corpus). */
static inline int harness_corpus_suite(void) {
    const char *s = getenv("CKPT_TEST_SUITE");
    return s && strcmp(s, "corpus") == 0;
}

#define RUN(name)                                                                                  \
    do {                                                                                           \
        if (!harness_corpus_suite()) RUN_ONE(name);                                                \
    } while (0)

#define RUN_CORPUS(name)                                                                           \
    do {                                                                                           \
        if (harness_corpus_suite()) RUN_ONE(name);                                                 \
    } while (0)

#define RUN_ONE(name)                                                                              \
    do {                                                                                           \
        harness_cur_failed = 0;                                                                    \
        name();                                                                                    \
        if (harness_cur_failed) {                                                                  \
            harness_failed++;                                                                      \
            fprintf(stderr, "FAIL %s\n", #name);                                                   \
        } else {                                                                                   \
            harness_passed++;                                                                      \
        }                                                                                          \
    } while (0)

static inline int harness_end(void) {
    printf("%d passed, %d failed\n", harness_passed, harness_failed);
    return harness_failed ? 1 : 0;
}

/* Reads a whole file into a malloc'd buffer; NULL on failure. */
static inline unsigned char *harness_read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) *len = (size_t)n;
    return buf;
}

#endif
