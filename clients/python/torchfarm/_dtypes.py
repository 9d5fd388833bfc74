"""Wire dtypes (docs/protocol.md) and array-likes as the arrays the wire carries.

Shared by the request encoder (_wire.py) and shared-memory regions (shm.py); no I/O here.
"""

from __future__ import annotations

import sys
from typing import Any, Union

import numpy as np

from .errors import InvalidArgument

# numpy dtype -> wire dtype name. bfloat16 is a wire dtype but numpy has none, so the Python
# client can neither send nor receive it.
WIRE_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16",
    np.dtype(np.int64): "int64",
    np.dtype(np.int32): "int32",
    np.dtype(np.int16): "int16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.bool_): "bool",
}
NUMPY_DTYPES = {name: dtype.newbyteorder("<") for dtype, name in WIRE_NAMES.items()}


def wire_name(dtype: np.dtype) -> str:
    """The wire name of a numpy dtype of either byte order (KeyError when there is none)."""
    return WIRE_NAMES[dtype.newbyteorder("=")]


def wire_dtype(dtype: Any, where: str) -> np.dtype:
    """`dtype` (a wire name, numpy dtype or type) as the little-endian numpy dtype of a wire
    dtype; InvalidArgument naming `where` when it is none."""
    try:
        numpy_dtype = np.dtype(dtype)
    except TypeError:
        numpy_dtype = None
    if numpy_dtype is None or numpy_dtype.newbyteorder("=") not in WIRE_NAMES:
        supported = ", ".join(NUMPY_DTYPES)
        shown = dtype if numpy_dtype is None else numpy_dtype
        raise InvalidArgument(f"{where}: dtype {shown} is not sent by the Python client "
                              f"(supported: {supported})")
    return numpy_dtype.newbyteorder("<")


def _from_torch(tensor: Any) -> np.ndarray:
    """A torch tensor as a numpy array sharing its memory when it is already a CPU tensor."""
    if str(tensor.dtype) == "torch.bfloat16":
        raise InvalidArgument(
            "bfloat16 tensors are unsupported in the Python client (numpy has no bfloat16); "
            "convert with tensor.float() or use the C++ client"
        )
    return tensor.detach().cpu().contiguous().numpy()


def _is_torch_tensor(value: Any) -> bool:
    # Only a program that imported torch can pass a tensor, so never import it here.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def to_wire_array(value: Any, index: Union[int, str]) -> np.ndarray:
    """Any array-like (numpy array, torch tensor, nested lists, scalars) as a C-contiguous
    little-endian array of a wire dtype. No copy when `value` already is one. `index` names the
    value in error messages: an input number, or a phrase."""
    where = f"input {index}" if isinstance(index, int) else index
    if _is_torch_tensor(value):
        value = _from_torch(value)
    try:
        array = np.asarray(value)
    except Exception as e:  # numpy raises several types for ragged or odd input
        raise InvalidArgument(f"{where}: not an array: {e}") from e
    if array.dtype.newbyteorder("=") not in WIRE_NAMES:
        supported = ", ".join(NUMPY_DTYPES)
        raise InvalidArgument(f"{where}: dtype {array.dtype} is not sent by the Python "
                              f"client (supported: {supported})")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (never applied to 0-d: it would make them 1-d)
    return array
