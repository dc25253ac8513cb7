/* quant.h - what the tensors of a bitsandbytes-quantized state_dict are
 * (transformers' save_pretrained of a model loaded in 4 or 8 bits):
 * elements are not parameters there, and doctor says how many there are.
 *
 * Layouts, by key (bitsandbytes' QuantState.as_dict(packed=True) and
 * Linear8bitLt._save_to_state_dict):
 *   4-bit  W (U8, the parameters packed two to a byte), W.absmax,
 *          W.quant_map, W.nested_absmax, W.nested_quant_map (double
 *          quantization) and W.quant_state.bitsandbytes__nf4 (or __fp4:
 *          a U8 tensor holding JSON, whose "shape" is W's shape before
 *          packing)
 *   8-bit  P.weight (I8, one parameter per element), P.SCB (its scales)
 *          and P.weight_format (older versions) */
#ifndef CKPT_REPORT_QUANT_H
#define CKPT_REPORT_QUANT_H

#include <stdint.h>

#include "base/alloc.h"
#include "ckpt.h"

typedef struct ckpt_quant_summary {
    uint64_t packed;          /* 4-bit weights (W) */
    uint64_t packed_elements; /* their U8 elements */
    uint64_t packed_params;   /* the parameters their quant_state's shapes hold */
    uint64_t unknown_shapes;  /* 4-bit weights whose quant_state gives no shape */
    uint64_t int8;            /* 8-bit weights */
    uint64_t state;           /* quantization-state tensors (absmax, SCB...) */
    uint64_t state_elements;  /* their elements */
} ckpt_quant_summary;

/* Classifies f's tensors by the layouts above; a companion counts only
 * beside its weight (W.absmax with W). Reads each quant_state tensor (at
 * most 64 KiB; a longer or unreadable one gives no shape). *out is all 0
 * for a file without them. */
void ckpt_quant_summarize(ckpt_quant_summary *out, const ckpt_file *f);

/* What f's elements are when it is bitsandbytes-quantized ("quantized with
 * bitsandbytes: the N elements are not parameters one for one; ...: P
 * parameters in all"), in a: doctor's note under "not vouched for" and
 * ckpt_file_quant_note's. *out NULL for a file without those layouts.
 * Returns 0 or CKPT_E_NOMEM. */
int ckpt_quant_note(ckpt_arena *a, const ckpt_file *f, const char **out);

#endif
