/* dtype.c - names and sizes of element types, and the torch/numpy maps. */
#include "model/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    unsigned bits;
} dtypes[CKPT_DT_COUNT] = {
    [CKPT_DT_UNKNOWN] = {"UNKNOWN", 0},
    [CKPT_DT_BOOL] = {"BOOL", 8},
    [CKPT_DT_U8] = {"U8", 8},
    [CKPT_DT_I8] = {"I8", 8},
    [CKPT_DT_I16] = {"I16", 16},
    [CKPT_DT_U16] = {"U16", 16},
    [CKPT_DT_I32] = {"I32", 32},
    [CKPT_DT_U32] = {"U32", 32},
    [CKPT_DT_I64] = {"I64", 64},
    [CKPT_DT_U64] = {"U64", 64},
    [CKPT_DT_F16] = {"F16", 16},
    [CKPT_DT_BF16] = {"BF16", 16},
    [CKPT_DT_F32] = {"F32", 32},
    [CKPT_DT_F64] = {"F64", 64},
    [CKPT_DT_C32] = {"C32", 32},
    [CKPT_DT_C64] = {"C64", 64},
    [CKPT_DT_C128] = {"C128", 128},
    [CKPT_DT_F8_E5M2] = {"F8_E5M2", 8},
    [CKPT_DT_F8_E4M3] = {"F8_E4M3", 8},
    [CKPT_DT_F8_E8M0] = {"F8_E8M0", 8},
    [CKPT_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [CKPT_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [CKPT_DT_F4] = {"F4", 4},
    [CKPT_DT_F6_E2M3] = {"F6_E2M3", 6},
    [CKPT_DT_F6_E3M2] = {"F6_E3M2", 6},
    [CKPT_DT_QI8] = {"QI8", 8},
    [CKPT_DT_QU8] = {"QU8", 8},
    [CKPT_DT_QI32] = {"QI32", 32},
    [CKPT_DT_QU4X2] = {"QU4X2", 8},
    [CKPT_DT_QU2X4] = {"QU2X4", 8},
    [CKPT_DT_F4_X2] = {"F4_X2", 8},
    [CKPT_DT_BITS8] = {"BITS8", 8},
    [CKPT_DT_BITS16] = {"BITS16", 16},
    [CKPT_DT_BITS1X8] = {"BITS1X8", 8},
    [CKPT_DT_BITS2X4] = {"BITS2X4", 8},
    [CKPT_DT_BITS4X2] = {"BITS4X2", 8},
};

const char *ckpt_dtype_name(ckpt_dtype dt) {
    if ((unsigned)dt >= CKPT_DT_COUNT) return "UNKNOWN";
    return dtypes[dt].name;
}

ckpt_dtype ckpt_dtype_from_name(const char *name) {
    for (unsigned i = 1; i < CKPT_DT_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0) return (ckpt_dtype)i;
    return CKPT_DT_UNKNOWN;
}

unsigned ckpt_dtype_bits(ckpt_dtype dt) {
    if ((unsigned)dt >= CKPT_DT_COUNT) return 0;
    return dtypes[dt].bits;
}

int ckpt_dtype_is_float(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_F16:
    case CKPT_DT_BF16:
    case CKPT_DT_F32:
    case CKPT_DT_F64:
    case CKPT_DT_F8_E5M2:
    case CKPT_DT_F8_E4M3:
    case CKPT_DT_F8_E8M0:
    case CKPT_DT_F8_E4M3FNUZ:
    case CKPT_DT_F8_E5M2FNUZ:
    case CKPT_DT_F4:
    case CKPT_DT_F6_E2M3:
    case CKPT_DT_F6_E3M2: return 1;
    default: return 0;
    }
}

unsigned ckpt_dtype_size(ckpt_dtype dt) {
    unsigned bits = ckpt_dtype_bits(dt);
    return bits % 8 ? 0 : bits / 8;
}

typedef struct {
    const char *name;
    ckpt_dtype dt;
} name_map;

static ckpt_dtype lookup(const name_map *m, const char *name) {
    for (; m->name; m++)
        if (strcmp(m->name, name) == 0) return m->dt;
    return CKPT_DT_UNKNOWN;
}

/* torch/storage.py _dtype_to_storage_type_map (FORMATS.md §2.4). */
static const name_map storage_classes[] = {{"DoubleStorage", CKPT_DT_F64},
                                           {"FloatStorage", CKPT_DT_F32},
                                           {"HalfStorage", CKPT_DT_F16},
                                           {"LongStorage", CKPT_DT_I64},
                                           {"IntStorage", CKPT_DT_I32},
                                           {"ShortStorage", CKPT_DT_I16},
                                           {"CharStorage", CKPT_DT_I8},
                                           {"ByteStorage", CKPT_DT_U8},
                                           {"BoolStorage", CKPT_DT_BOOL},
                                           {"BFloat16Storage", CKPT_DT_BF16},
                                           {"ComplexDoubleStorage", CKPT_DT_C128},
                                           {"ComplexFloatStorage", CKPT_DT_C64},
                                           {"QInt8Storage", CKPT_DT_QI8},
                                           {"QInt32Storage", CKPT_DT_QI32},
                                           {"QUInt8Storage", CKPT_DT_QU8},
                                           {"QUInt4x2Storage", CKPT_DT_QU4X2},
                                           {"QUInt2x4Storage", CKPT_DT_QU2X4},
                                           {"UntypedStorage", CKPT_DT_U8},
                                           {NULL, CKPT_DT_UNKNOWN}};

ckpt_dtype ckpt_dtype_from_storage_class(const char *name) { return lookup(storage_classes, name); }

static const name_map torch_names[] = {{"float32", CKPT_DT_F32},
                                       {"float", CKPT_DT_F32},
                                       {"float64", CKPT_DT_F64},
                                       {"double", CKPT_DT_F64},
                                       {"float16", CKPT_DT_F16},
                                       {"half", CKPT_DT_F16},
                                       {"bfloat16", CKPT_DT_BF16},
                                       {"int64", CKPT_DT_I64},
                                       {"long", CKPT_DT_I64},
                                       {"int32", CKPT_DT_I32},
                                       {"int", CKPT_DT_I32},
                                       {"int16", CKPT_DT_I16},
                                       {"short", CKPT_DT_I16},
                                       {"int8", CKPT_DT_I8},
                                       {"uint8", CKPT_DT_U8},
                                       {"uint16", CKPT_DT_U16},
                                       {"uint32", CKPT_DT_U32},
                                       {"uint64", CKPT_DT_U64},
                                       {"bool", CKPT_DT_BOOL},
                                       {"complex32", CKPT_DT_C32},
                                       {"chalf", CKPT_DT_C32},
                                       {"complex64", CKPT_DT_C64},
                                       {"cfloat", CKPT_DT_C64},
                                       {"complex128", CKPT_DT_C128},
                                       {"cdouble", CKPT_DT_C128},
                                       {"float8_e5m2", CKPT_DT_F8_E5M2},
                                       {"float8_e4m3fn", CKPT_DT_F8_E4M3},
                                       {"float8_e8m0fnu", CKPT_DT_F8_E8M0},
                                       {"float8_e4m3fnuz", CKPT_DT_F8_E4M3FNUZ},
                                       {"float8_e5m2fnuz", CKPT_DT_F8_E5M2FNUZ},
                                       {"qint8", CKPT_DT_QI8},
                                       {"quint8", CKPT_DT_QU8},
                                       {"qint32", CKPT_DT_QI32},
                                       {"quint4x2", CKPT_DT_QU4X2},
                                       {"quint2x4", CKPT_DT_QU2X4},
                                       {"float4_e2m1fn_x2", CKPT_DT_F4_X2},
                                       {"bits8", CKPT_DT_BITS8},
                                       {"bits16", CKPT_DT_BITS16},
                                       {"bits1x8", CKPT_DT_BITS1X8},
                                       {"bits2x4", CKPT_DT_BITS2X4},
                                       {"bits4x2", CKPT_DT_BITS4X2},
                                       {NULL, CKPT_DT_UNKNOWN}};

ckpt_dtype ckpt_dtype_from_torch_name(const char *name) { return lookup(torch_names, name); }

const char *ckpt_dtype_torch_name(ckpt_dtype dt) {
    for (const name_map *m = torch_names; m->name; m++) /* canonical names first */
        if (m->dt == dt) return m->name;
    return NULL;
}

static const name_map numpy_codes[] = {
    {"b1", CKPT_DT_BOOL}, {"?", CKPT_DT_BOOL}, {"u1", CKPT_DT_U8},    {"i1", CKPT_DT_I8},
    {"u2", CKPT_DT_U16},  {"i2", CKPT_DT_I16}, {"u4", CKPT_DT_U32},   {"i4", CKPT_DT_I32},
    {"u8", CKPT_DT_U64},  {"i8", CKPT_DT_I64}, {"f2", CKPT_DT_F16},   {"f4", CKPT_DT_F32},
    {"f8", CKPT_DT_F64},  {"c8", CKPT_DT_C64}, {"c16", CKPT_DT_C128}, {NULL, CKPT_DT_UNKNOWN}};

ckpt_dtype ckpt_dtype_from_numpy(const char *code) { return lookup(numpy_codes, code); }

const char *ckpt_dtype_numpy_code(ckpt_dtype dt) {
    for (const name_map *m = numpy_codes; m->name; m++) /* "b1" before "?" */
        if (m->dt == dt) return m->name;
    return NULL;
}
