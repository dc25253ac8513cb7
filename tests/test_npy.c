/* test_npy.c - .npy headers read as numpy.lib.format reads them
 * (src/format/npy.h). Each expectation was checked against np.load
 * (numpy 1.24 and 2.4) with allow_pickle=True. */
#include <stdlib.h>

#include "format/npy.h"
#include "harness.h"

static ckpt_npy_header h;

/* Wraps a header of version major.minor and reads it. */
static ckpt_npy_kind kind_of(const char *header, int major, int minor) {
    static uint8_t buf[1024];
    size_t n = strlen(header), at = major == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = (uint8_t)minor;
    buf[8] = (uint8_t)n;
    buf[9] = (uint8_t)(n >> 8);
    buf[10] = buf[11] = 0;
    memcpy(buf + at, header, n);
    ckpt_arena a = {0};
    int r = ckpt_npy_read_header(&h, &a, buf, at + n, 1 << 20, 64);
    ckpt_arena_free(&a);
    CHECK_EQ_INT(r, 1);
    return h.kind;
}

#define HDR(d) "{'descr': " d ", 'fortran_order': False, 'shape': (3,), }\n"

TEST(object_dtypes) {
    const char *objects[] = {HDR("'|O'"),
                             HDR("'<O'"),
                             HDR("'O'"),
                             HDR("'|O8'"),
                             HDR("'object'"),
                             HDR("\"|O\""),
                             HDR("('|O', 3)"),
                             HDR("[('a', '<i4'), ('b', '|O')]"),
                             HDR("[(('t', 'a'), '|O')]"),
                             HDR("[['a', '|O']]"),
                             HDR("[('a', [('b', '|O')])]"),
                             HDR("('|O')") /* parentheses, no tuple */};
    for (size_t i = 0; i < sizeof objects / sizeof objects[0]; i++) {
        CHECK_EQ_INT(kind_of(objects[i], 1, 0), CKPT_NPY_OBJECT);
        CHECK_EQ_INT(h.data_offset, 10 + strlen(objects[i]));
    }
    const char *plain[] = {HDR("'<f4'"),
                           HDR("'|b1'"),
                           HDR("'<U5'"),
                           HDR("'|V8'"),
                           HDR("'<M8[ns]'"),
                           HDR("[('', '|V4'), ('b', '<f4')]"),
                           HDR("[('a', '<f8', (2,))]")};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        CHECK_EQ_INT(kind_of(plain[i], 3, 0), CKPT_NPY_PLAIN);
}

TEST(numpy_refuses) {
    CHECK_EQ_INT(kind_of(HDR("'|O'"), 4, 0), CKPT_NPY_REFUSED);
    CHECK_EQ_INT(h.at, 6);
    CHECK_EQ_INT(kind_of(HDR("'|O'"), 1, 1), CKPT_NPY_REFUSED);
    CHECK_EQ_INT(kind_of("{'descr': '|O', 'shape': (3,)}", 1, 0), CKPT_NPY_REFUSED);
    CHECK_EQ_INT(kind_of("{'descr': '|O', 'fortran_order': 0, 'shape': (3,)}", 1, 0),
                 CKPT_NPY_REFUSED);
    CHECK_EQ_INT(kind_of("{'descr': '|O', 'fortran_order': False, 'shape': [3]}", 1, 0),
                 CKPT_NPY_REFUSED);
    CHECK_EQ_INT(kind_of("{'descr': '|O', 'fortran_order': False, 'shape': (3,), 'x': 1}", 1, 0),
                 CKPT_NPY_REFUSED);
    CHECK_EQ_INT(h.at, 10 + 55);
    CHECK_EQ_INT(kind_of("['descr']", 2, 0), CKPT_NPY_REFUSED);
}

TEST(python_2_longs) {
    /* numpy drops an L suffix only for 1.0 and 2.0 headers */
    const char *py2 = "{'descr': '|O', 'fortran_order': False, 'shape': (3L,), }\n";
    CHECK_EQ_INT(kind_of(py2, 2, 0), CKPT_NPY_OBJECT);
    CHECK_EQ_INT(kind_of(py2, 3, 0), CKPT_NPY_UNSURE);
}

TEST(unsure) {
    static const char leading_zero[] = "{'descr': '|O', 'fortran_order': False, 'shape': (01,)}";
    const char *cases[] = {HDR("'i4,O'"),  HDR("'float32'"), HDR("'|O' # c"),
                           HDR("'|' 'O'"), HDR("'\\x7cO'"),  leading_zero};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(kind_of(cases[i], 1, 0), CKPT_NPY_UNSURE);
        CHECK(h.why != NULL && h.at >= 10);
    }
}

int main(void) {
    RUN(object_dtypes);
    RUN(numpy_refuses);
    RUN(python_2_longs);
    RUN(unsure);
    return harness_end();
}
