/* builders.h - the allowlist of globals the pickle machine may interpret,
 * and the data builders behind them (never Python code: our own C).
 *
 * Allowlisted (after __builtin__ -> builtins, copy_reg -> copyreg mapping):
 *   collections.OrderedDict, collections.Counter (dict)
 *   torch._utils._rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3,
 *     _rebuild_parameter, _rebuild_parameter_with_state (tensor)
 *   torch._tensor._rebuild_from_type_v2 (applies its func)
 *   torch.nn.parameter.Parameter (NEWOBJ form), torch.Tensor
 *   torch.<X>Storage, torch.storage.UntypedStorage/TypedStorage/_LegacyStorage...
 *     (storage types, used inside persistent ids)
 *   torch.<dtype> (float32, bfloat16, float8_e4m3fn...), torch.Size (tuple),
 *   torch.device (str), torch.serialization._get_layout, qschemes
 *   numpy.core.multiarray.scalar / numpy._core.multiarray.scalar (number),
 *   numpy.dtype, numpy.core.multiarray._reconstruct /
 *     numpy._core.multiarray._reconstruct + numpy.ndarray (tensor)
 *   _codecs.encode (bytes), builtins.set/frozenset (set),
 *   builtins.bytearray/bytes (bytes), builtins.slice/complex (object),
 *   builtins.list/tuple/dict (containers)
 *   torch._utils._rebuild_qtensor (dict: int_repr, dtype, qscheme, scale,
 *     zero_point[, axis]), _rebuild_sparse_tensor and torch 1.x's
 *     _rebuild_sparse_csr_tensor (dict: layout, indices or crow_indices/
 *     col_indices or ccol_indices/row_indices, values, size); a DTensor
 *     (_rebuild_from_type_v2 of _rebuild_wrapper_subclass: dict of
 *     local_tensor, placements, mesh_shape, global_shape)
 *   torch._utils._rebuild_meta_tensor_no_storage, _rebuild_nested_tensor,
 *     _rebuild_wrapper_subclass, _rebuild_device_tensor_from_numpy,
 *     _rebuild_device_tensor_from_cpu_tensor, torch.uint1-7/int1-7,
 *     float4_e2m1fn_x2, bits*, legacy tensor classes (on torch's
 *     weights_only allowlist, so not reported as unsafe; not interpreted:
 *     opaque)
 * BUILD of a module object (nn.Module state or a TorchScript __torch__.*
 * object) makes its state dict: see ckpt_builders_build.
 */
#ifndef CKPT_BUILDERS_H
#define CKPT_BUILDERS_H

#include "format/pickle_event.h"
#include "model/value.h"

/* 1 if torch >= 2.6's weights_only unpickler (torch.load's default)
 * allows the global module.name without add_safe_globals: the allowlist
 * above less builtins.dict/list/tuple/frozenset/bytes/slice, numpy's
 * names, torch 1.x's _rebuild_sparse_csr_tensor, torch.storage.
 * _LegacyStorage, torch.UntypedStorage, CUDA quantized storages and dtype
 * aliases (torch.float). torch 2.13's _get_allowed_globals. */
int ckpt_builders_weights_only(const char *module, const char *name);

/* Context handed to builders for allocation, error reporting, the events
 * of calls they make (torch._tensor._rebuild_from_type_v2 calls its func)
 * and the work budget. */
typedef struct pk_build_ctx {
    ckpt_arena *arena;
    const char *file;
    const char *member;
    uint64_t offset; /* absolute offset of the calling opcode */
    uint64_t base;   /* absolute offset of the pickle's first byte, for
                        the offsets of argument values (ckpt_value_at) */
    uint8_t opcode;  /* the calling opcode, for events */
    const ckpt_limits *limits;
    void (*on_event)(void *ctx, const pk_event *ev); /* may be NULL */
    void *event_ctx;
    /* Work done so far in this pickle, shared with the machine: a builder
     * that copies n items or bytes adds n and fails with CKPT_E_LIMIT past
     * ops_limit, so memo references cannot make copies (set(big_list)
     * called a million times) outgrow the input. */
    uint64_t *ops;
    /* min(limits->max_pickle_ops, 64 x input bytes + 64 Ki): work, and so
     * memory, stays proportional to the pickle's size. */
    uint64_t ops_limit;
    /* pk_options.scan_only: only the builders named at
     * ckpt_builders_call run, and BUILD makes no numpy tensor */
    int scan_only;
} pk_build_ctx;

/* 1 if module.name is allowlisted (module/name already name-mapped).
 * Besides the exact names above: module "torch", "torch.cuda" or
 * "torch.storage" with a storage class name (dtype.h
 * ckpt_dtype_from_storage_class, TypedStorage, _LegacyStorage), and module
 * "torch" with a dtype name (ckpt_dtype_from_torch_name). */
int ckpt_builders_allowed(const char *module, const char *name);
/* The same answer, with which entry: 0 not allowed, 1 allowed by the
 * storage class and dtype rules, 2 + i for entry i of the list above. The
 * machine keeps it in each GLOBAL reference it makes (u.global.allow),
 * which ckpt_builders_call reads. */
int ckpt_builders_allow(const char *module, const char *name);

/* 1 for the callables whose reader-mode results (collections.OrderedDict:
 * an ordered DICT; torch._utils._rebuild_tensor_v2: a TENSOR, else an
 * error or the opaque object scan mode makes) take every check a later
 * opcode makes as scan mode's opaque OBJECT of that name does, in a
 * pickle that torch's weights_only unpickler runs without refusing an
 * opcode (format/pickle_log.h): what torch.save of a state_dict calls.
 * module/name as the machine name-maps them. */
int ckpt_builders_scan_alike(const char *module, const char *name);

/* The value of a call that is not interpreted: an OBJECT `name` (kept,
 * not copied: a static string or a GLOBAL's qualname, which live as long
 * as the values) with
 * obj.args = args (a TUPLE), or args + (kwargs,) when kwargs is a
 * non-empty DICT. Returns 0 or CKPT_E_NOMEM. */
int ckpt_builders_opaque(ckpt_value **out, const pk_build_ctx *c, const char *name,
                         ckpt_value *args, ckpt_value *kwargs);

/* Applies the builder of the allowlisted global `callable` (a
 * CKPT_KIND_GLOBAL_ value the machine made, with u.global.allow) to `args` (a TUPLE; kwargs is a DICT or NULL).
 * *out receives the result. Calls whose arguments have a shape the builder
 * does not model (kwargs, Counter(list), an encoding other than latin-1,
 * UTF-8 or ASCII...) and allowlisted references without a builder
 * (complex, slice, numpy.dtype, qschemes...) give an opaque object
 * "module.name" with the args kept, as the machine does for other globals.
 * With c->scan_only, only _rebuild_from_type_v2 (for the event of its
 * func), numpy _reconstruct (which names its opaque result) and numpy
 * scalar for object scalars (the result is the argument: a reference
 * stays one, and a BUILD on it is reported as such) run; any other call
 * gives that opaque object.
 * Returns 0 or a CKPT_E_* code with the error recorded: CKPT_E_FORMAT for
 * arguments Python itself would reject or a tensor view outside its
 * storage, CKPT_E_LIMIT (ndim, work budget), CKPT_E_UNSUPPORTED (a torch
 * dtype without a ckpt_dtype), CKPT_E_NOMEM. */
int ckpt_builders_call(ckpt_value **out, const pk_build_ctx *c, ckpt_value *callable,
                       ckpt_value *args, ckpt_value *kwargs);

/* What ckpt_builders_call of callable (no kwargs, c->scan_only 0) holds
 * on to of args once it returns, for the machine to reuse the memory of
 * the argument tuples it made: 1, no pointer to args nor to any item of
 * it, whatever it returns (the tensor rebuilders, which copy shape and
 * stride and keep the storage, u.storage, not its value); 2, the same
 * when it returns a DICT (dict and OrderedDict, which keep the keys and
 * values of the mapping or pairs they copy, items of args' items; their
 * other calls give an opaque object that keeps args); 0 for any other
 * callable. */
int ckpt_builders_forgets_args(const ckpt_value *callable);

/* NEWOBJ/NEWOBJ_EX of an allowlisted global: cls.__new__(cls, *args,
 * **kwargs), as pickle.load and torch's weights_only unpickler run it.
 * A global that is no class (a rebuild function, _codecs.encode, a
 * qscheme, a dtype) is CKPT_E_FORMAT, as pickle.load refuses it; list,
 * set, dict, bytearray, OrderedDict and Counter come out empty whatever
 * the arguments (their __new__ ignores them); other classes are built as
 * ckpt_builders_call builds them. With c->scan_only: ckpt_builders_call. */
int ckpt_builders_new(ckpt_value **out, const pk_build_ctx *c, ckpt_value *callable,
                      ckpt_value *args, ckpt_value *kwargs);

/* BUILD of `state` on any value but a GLOBAL reference (the machine only
 * reports those): an OrderedDict or Counter keeps a dict state (or the
 * dicts of a (state, slotstate) pair) as its attributes in dict.state
 * (a torch state dict's _metadata); a plain dict and a tensor (Parameter
 * state, legacy set_) ignore it; a "numpy.ndarray" placeholder with an
 * (version, shape, dtype, is_fortran, rawdata) state of a numeric dtype
 * becomes a CKPT_KIND_TENSOR in place (its bytes stay in the arena, with
 * big_endian from the dtype state; object arrays stay opaque); any other
 * nn.Module object (a state with _parameters, _buffers and _modules) or
 * TorchScript object (class __torch__.*) becomes, in place, a DICT of
 * class CKPT_DICT_MODULE holding what Module.state_dict() would give
 * (children first converted, as they are built before their parent); any other
 * OBJECT stores it in obj.state (numpy.dtype keeps its endianness there;
 * with c->scan_only an ndarray placeholder stays one).
 * Other kinds accept only a None state. Returns 0 or CKPT_E_FORMAT (e.g.
 * ndarray bytes that do not match its shape), CKPT_E_LIMIT, CKPT_E_NOMEM. */
int ckpt_builders_build(const pk_build_ctx *c, ckpt_value *target, ckpt_value *state);

#endif
