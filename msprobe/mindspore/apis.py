"""Which MindSpore APIs the collector wraps (level L1/mix) and under which entry-name prefix.

The API set is read from MindSpore itself when the collector starts, so that a new MindSpore version brings its
new APIs: every public function of `mindspore.mint` (prefix `Mint`), `mindspore.mint.nn.functional`
(`MintFunctional`), the functional API of `mindspore.ops` (`Functional`, the names of `mindspore.ops.function`),
the compute methods and operators of `mindspore.Tensor` (`Tensor`) and the collectives of
`mindspore.communication.comm_func` (`Distributed`) and `mindspore.mint.distributed` (`MintDistributed`), minus
the names below, each excluded for the reason given beside it.
"""

from __future__ import annotations

import functools
import inspect

import mindspore as ms
import mindspore.mint.nn.functional as mint_functional
from mindspore import Tensor, mint, ops

# Tensor operators recorded under their own names (`a + b` is Tensor.__add__), as the reference records them.
TENSOR_OPERATORS = frozenset(f"__{n}__" for n in """
add radd iadd sub rsub isub mul rmul imul truediv mod rmod imod ifloordiv pow rpow matmul rmatmul
and or xor eq ne lt le gt ge neg abs bool
""".split())

# Tensor methods that are not computations on the tensor's values: host transfer and metadata queries, storage,
# layout and memory management, autograd plumbing, the framework's internal state setters. (The reference records
# three metadata queries, `nelement`, `is_complex` and `is_signed`; so do we, so that both name the same calls.)
_TENSOR_NOT_COMPUTE = frozenset("""
asnumpy numpy tolist item itemset data_ptr data_sync dim ndimension numel is_contiguous
is_floating_point is_init is_pinned is_shared storage storage_offset stride
untyped_storage has_init init_data value get_bytes convert_bytes_to_tensor to_dlpack from_dlpack
register_hook remove_hook hooks requires_grad_ retain_grad set_ set_cast_dtype set_const_arg
set_device_address set_dtype set_init_flag set_param_info assign_value assign_value_cpp flush_from_cache offload
offload_file_path pin_memory move_to wait_pipeline getitem_index_info setitem_index_info delete_ contiguous
type to_coo to_csr
""".split())

# Python-level Tensor methods that only forward to another recorded Tensor method: the inner call is recorded
# (`astype` is `to`, `expand` is `broadcast_to`), as the reference records it, so that the same operation always
# has the same name.
_TENSOR_DELEGATES = frozenset("astype expand to_ ptp choose".split())

# Names in mindspore.mint that are decorators or internal aliases of other mint functions, not APIs.
_MINT_INTERNAL = frozenset("""
constexpr jit_forbidden_register jit_view_unsupported cdist_ equal_ext_op flatten_ext softmax_ext squeeze_impl
""".split())

# Names in mindspore.ops.function that are not operations on tensors: function transforms (they take and return
# functions), graph-compiler helpers, printing and tensor dumps, gradient stops (autograd bookkeeping), sparse
# tensor helpers, the collectives (recorded under Distributed/MintDistributed from their own modules) and
# `is_floating_point`, a dtype query (as Tensor.is_floating_point; nn.MultiheadAttention asks it of its masks).
_OPS_NOT_RECORDED = frozenset("""
is_floating_point grad value_and_grad jvp vjp jacfwd jacrev linearize vmap partial get_grad depend print_ tensordump reshard
move_to stop_gradient stop_gradient_ make_coo_tensor make_csr_tensor make_map_parameter make_row_tensor
make_row_tensor_inner make_sparse_tensor dense_to_sparse_coo dense_to_sparse_csr row_tensor_add
row_tensor_get_dense_shape row_tensor_get_indices row_tensor_get_values coo2csr csr2coo csr_to_coo csr_to_dense
""".split())

# Collective functions of the two communication modules (process-group management, barriers and pickled-object
# collectives carry no tensor data and are not recorded).
_COLLECTIVE_EXCLUDED = frozenset("""
init_process_group destroy_process_group get_rank get_world_size new_group get_backend get_global_rank
get_process_group_ranks get_group_rank is_available is_initialized barrier send_object_list recv_object_list
all_gather_object broadcast_object_list gather_object scatter_object_list P2POp
""".split())


def _functions(module, names) -> list:
    result = []
    for name in names:
        obj = getattr(module, name, None)
        if name.startswith("_") or obj is None or not callable(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
            continue
        result.append(name)
    return result


def _tensor_methods() -> list:
    names = []
    for name in dir(Tensor):
        if name.startswith("_") and name not in TENSOR_OPERATORS:
            continue
        if name in _TENSOR_NOT_COMPUTE or name in _TENSOR_DELEGATES:
            continue
        static = inspect.getattr_static(Tensor, name, None)
        if static is None or isinstance(static, (property, type)) or not callable(getattr(Tensor, name, None)):
            continue
        names.append(name)
    return names


@functools.lru_cache(maxsize=1)
def api_targets() -> tuple:
    """(owner, attribute, prefix) of every API the collector wraps."""
    from mindspore.communication import comm_func
    from mindspore.mint import distributed as mint_distributed

    targets = []
    targets += [(mint, n, "Mint") for n in _functions(mint, dir(mint)) if n not in _MINT_INTERNAL]
    targets += [(mint_functional, n, "MintFunctional") for n in _functions(mint_functional, dir(mint_functional))
                if not n.endswith(("_ext", "_op", "_func")) and n not in ("inplace_elu", "inplace_silu")]
    ops_names = set(getattr(ops.function, "__all__", ())) | {"cast", "mm"}
    targets += [(ops, n, "Functional") for n in _functions(ops, sorted(ops_names))
                if n not in _OPS_NOT_RECORDED and not n.startswith(("coo_", "csr_"))]
    targets += [(Tensor, n, "Tensor") for n in _tensor_methods()]
    for module, prefix in ((comm_func, "Distributed"), (mint_distributed, "MintDistributed")):
        targets += [(module, n, prefix) for n in _functions(module, getattr(module, "__all__", ()))
                    if n not in _COLLECTIVE_EXCLUDED]
    return tuple(targets)


COLLECTIVE_PREFIXES = ("Distributed", "MintDistributed")


def is_float_dtype(dtype) -> bool:
    return dtype in (ms.float16, ms.float32, ms.float64, ms.bfloat16, ms.complex64, ms.complex128)
