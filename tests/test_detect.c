/* test_detect.c - ckpt_detect_format, the one content sniff that
 * ckpt_open, the scanner and doctor share: every rule, its order, and
 * what a short head can and cannot show. */
#include <stdlib.h>

#include "ckpt.h"
#include "harness.h"

static ckpt_format detect(const char *s, size_t n) { return ckpt_detect_format(s, n); }

TEST(empty_and_short) {
    CHECK_EQ_INT(ckpt_detect_format(NULL, 0), CKPT_FORMAT_UNKNOWN);
    CHECK_EQ_INT(detect("", 0), CKPT_FORMAT_UNKNOWN);
    CHECK_EQ_INT(detect("PK\3", 3), CKPT_FORMAT_UNKNOWN);
    CHECK_EQ_INT(detect("\x80", 1), CKPT_FORMAT_UNKNOWN); /* PROTO without its byte */
    CHECK_EQ_INT(detect("\x00\x01", 2), CKPT_FORMAT_UNKNOWN);
    CHECK_EQ_STR(ckpt_format_name(CKPT_FORMAT_UNKNOWN), "unknown");
}

TEST(zip) {
    CHECK_EQ_INT(detect("PK\3\4", 4), CKPT_FORMAT_TORCH_ZIP);
    CHECK_EQ_INT(detect("PK\5\6rest", 8), CKPT_FORMAT_UNKNOWN); /* an end record is not a start */
}

TEST(safetensors_and_index) {
    CHECK_EQ_INT(detect("\x02\0\0\0\0\0\0\0{}", 10), CKPT_FORMAT_SAFETENSORS);
    CHECK_EQ_INT(detect("\x04\0\0\0\0\0\0\0  {}", 12), CKPT_FORMAT_SAFETENSORS);
    CHECK_EQ_INT(detect("\x02\0\0\0\0\0\0\0", 8), CKPT_FORMAT_UNKNOWN); /* no header byte */
    CHECK_EQ_INT(detect("{\"weight_map\": {}}", 18), CKPT_FORMAT_SAFETENSORS_SHARDED);
    CHECK_EQ_INT(detect(" \n\t\r{", 5), CKPT_FORMAT_SAFETENSORS_SHARDED);
    /* a NUL in the first 8 bytes is a binary length, not text */
    CHECK_EQ_INT(detect("{\0\0\0\0\0\0\0{", 9), CKPT_FORMAT_SAFETENSORS);
    /* whitespace that runs past n hides what follows */
    CHECK_EQ_INT(detect("    ", 4), CKPT_FORMAT_UNKNOWN);
}

TEST(pickles) {
    static const char legacy[] = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
    CHECK_EQ_INT(detect(legacy, sizeof legacy - 1), CKPT_FORMAT_TORCH_LEGACY);
    CHECK_EQ_INT(detect(legacy, 11), CKPT_FORMAT_PICKLE); /* too short to see the magic */
    CHECK_EQ_INT(detect("\x80\x05\x95", 3), CKPT_FORMAT_PICKLE);
    CHECK_EQ_INT(detect("\x80\x06", 2), CKPT_FORMAT_UNKNOWN);         /* no such protocol */
    CHECK_EQ_INT(detect("cposix\nsystem\n", 14), CKPT_FORMAT_PICKLE); /* protocol 0 */
    CHECK_EQ_INT(detect("(lp0\n", 5), CKPT_FORMAT_PICKLE);
    CHECK_EQ_INT(detect("hello", 5), CKPT_FORMAT_UNKNOWN);
}

TEST(unsupported) {
    char tar[512];
    memset(tar, 0, sizeof tar);
    memcpy(tar, "{weights", 8); /* a member name that reads like JSON */
    memcpy(tar + 257, "ustar", 5);
    /* tarfile takes a block for a tar header by its checksum alone ("ustar"
     * or not): without a valid one this is JSON-looking text */
    CHECK_EQ_INT(ckpt_detect_format(tar, sizeof tar), CKPT_FORMAT_SAFETENSORS_SHARDED);
    memset(tar + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof tar; i++) sum += (unsigned char)tar[i];
    snprintf(tar + 148, 8, "%06o", sum);
    CHECK_EQ_INT(ckpt_detect_format(tar, sizeof tar), CKPT_FORMAT_UNKNOWN);
    memset(tar + 257, 0, 5); /* a V7 header, no "ustar": still a tar */
    sum = 0;
    memset(tar + 148, ' ', 8);
    for (size_t i = 0; i < sizeof tar; i++) sum += (unsigned char)tar[i];
    snprintf(tar + 148, 8, "%06o", sum);
    CHECK_EQ_INT(ckpt_detect_format(tar, sizeof tar), CKPT_FORMAT_UNKNOWN);
    CHECK_EQ_INT(ckpt_detect_format(tar, 261), CKPT_FORMAT_SAFETENSORS_SHARDED);
    CHECK_EQ_INT(detect("PYTORCH1rest", 12), CKPT_FORMAT_UNKNOWN);
}

/* DCP's .metadata: pickle.dump(Metadata) at protocol 4 (PROTO, FRAME,
 * SHORT_BINUNICODE module), BINUNICODE, or GLOBAL (protocols 2 and 3),
 * bytes as torch 2.13 writes them */
TEST(dcp_metadata) {
    static const char p4[] = "\x80\x04\x95\x68\x05\0\0\0\0\0\0\x8c\x25"
                             "torch.distributed.checkpoint.metadata\x94";
    static const char p2[] = "\x80\x02X\x25\0\0\0torch.distributed.checkpoint.metadata";
    static const char other[] = "\x80\x04\x95\x68\x05\0\0\0\0\0\0\x8c\x25"
                                "torch.distributed.checkpoint.metadatX\x94";
    CHECK_EQ_INT(detect(p4, sizeof p4 - 1), CKPT_FORMAT_DCP);
    CHECK_EQ_INT(detect(p2, sizeof p2 - 1), CKPT_FORMAT_DCP);
    /* protocols 2 and 3 as pickle.dumps writes them (GLOBAL), and as ckpt
     * convert writes DCP directories */
    static const char global[] = "\x80\x02"
                                 "ctorch.distributed.checkpoint.metadata\nMetadata\nq\0)";
    static const char global_bad[] = "\x80\x03"
                                     "ctorch.distributed.checkpoint.metadata.x\nMetadata\n";
    CHECK_EQ_INT(detect(global, sizeof global - 1), CKPT_FORMAT_DCP);
    CHECK_EQ_INT(detect(global_bad, sizeof global_bad - 1), CKPT_FORMAT_PICKLE);
    CHECK_EQ_INT(detect(global, 30), CKPT_FORMAT_PICKLE); /* the name cut short */
    CHECK_EQ_INT(detect(other, sizeof other - 1), CKPT_FORMAT_PICKLE);
    CHECK_EQ_INT(detect(p4, 20), CKPT_FORMAT_PICKLE); /* the name cut short */
    CHECK_EQ_STR(ckpt_format_name(CKPT_FORMAT_DCP), "dcp");
}

int main(void) {
    RUN(empty_and_short);
    RUN(dcp_metadata);
    RUN(zip);
    RUN(safetensors_and_index);
    RUN(pickles);
    RUN(unsupported);
    return harness_end();
}
