"""Shared-memory tensors (docs/protocol.md, "Shared-memory tensors (same host)").

:class:`ShmRegion` owns this process's mapping of one region the supervisor created for it
(``Client.create_shm``); :class:`AsyncShmRegion` is the same for :class:`torchfarm.AsyncClient`.
:class:`ShmTensor` says where in a region an input's bytes are, :class:`ShmOutput` where a request's
outputs go. Only region tokens and offsets cross the socket; the tensor bytes stay in the region.

The supervisor owns the region's name (it unlinks it on release); a ShmRegion owns only its
mapping, which it unmaps on release. Linux only: the region is the file ``/dev/shm/<name>``.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from ._dtypes import to_wire_array, wire_dtype
from .errors import Internal, InvalidArgument

__all__ = ["AsyncShmRegion", "ShmOutput", "ShmRegion", "ShmTensor", "OUTPUT_ALIGNMENT"]

# output_shm offsets, and every output after the first, start at a multiple of this.
OUTPUT_ALIGNMENT = 64

_SHM_DIR = "/dev/shm"


def map_region(name: str, nbytes: int) -> mmap.mmap:
    """Maps the POSIX shared-memory object `name` (``/dev/shm/<name without the slash>``)
    read-write; `nbytes` is its size from the shm_create reply.

    Raises Internal when the name is no plain object name (the reply is malformed: it must not
    point anywhere else) or the object is smaller than `nbytes`; InvalidArgument when it cannot
    be opened (another host, another user) with the OS's reason.
    """
    file_name = name.lstrip("/")
    if not file_name or "/" in file_name or file_name in (".", ".."):
        raise Internal(f"malformed reply: shared-memory name {name!r} is not a plain name")
    path = os.path.join(_SHM_DIR, file_name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as e:
        raise InvalidArgument(
            f"cannot open shared-memory region {name} ({path}: {e.strerror}); shared memory "
            "works only on the supervisor's host, for its user or its ipc_group") from e
    try:
        size = os.fstat(fd).st_size
        if size < nbytes:
            raise Internal(f"shared-memory region {name} holds {size} bytes, the supervisor "
                           f"announced {nbytes}")
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)  # the mapping keeps the memory; the descriptor is no longer needed


def _shape(shape: Any, where: str) -> Tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in (shape if isinstance(shape, Sequence) else (shape,)))
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where}: shape {shape!r} is not a list of integers") from None
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{where}: shape {list(dims)} has a negative dimension")
    return dims


def _byte_count(dtype: np.dtype, shape: Tuple[int, ...]) -> int:
    count = 1
    for d in shape:
        count *= d
    return dtype.itemsize * count


class ShmRegion:
    """This process's read-write mapping of a shared-memory region the supervisor created.

    Made by :meth:`torchfarm.Client.create_shm`; do not construct it yourself. Attributes:
    ``region`` (the token that names it in requests: a capability, share it only with clients
    you trust), ``name`` (the POSIX shared-memory name), ``nbytes``.

    Release it with :meth:`release` (or use it as a context manager): the supervisor unlinks it
    and this process unmaps it. Arrays or memoryviews over it that are still referenced keep
    the memory mapped until they are garbage-collected. A region nobody releases is freed by
    the supervisor after ``client_shm.idle_timeout_s`` without a request naming it.

    While a request that reads or writes the region is in flight, do not write its input ranges
    nor read its output range (protocol.md, "Rules").
    """

    def __init__(self, region: str, name: str, nbytes: int, mapping: mmap.mmap,
                 release: Callable[["ShmRegion"], Any]) -> None:
        self._region = region
        self._name = name
        self._nbytes = nbytes
        self._mapping: Optional[mmap.mmap] = mapping
        self._release = release  # the owning client's release_shm

    @property
    def region(self) -> str:
        return self._region

    @property
    def name(self) -> str:
        return self._name

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def released(self) -> bool:
        return self._mapping is None

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview of the whole region."""
        return memoryview(self._mapped())

    def array(self, dtype: Any, shape: Any, offset: int = 0) -> np.ndarray:
        """A writable numpy view of `shape` elements of `dtype` at byte `offset` (a multiple of
        the dtype's item size). Fill it, then pass ``ShmTensor(region, offset, dtype, shape)``."""
        numpy_dtype = wire_dtype(dtype, "ShmRegion.array")
        dims = _shape(shape, "ShmRegion.array")
        self._check_range(numpy_dtype, _byte_count(numpy_dtype, dims), offset, "array")
        count = _byte_count(numpy_dtype, dims) // numpy_dtype.itemsize
        return np.frombuffer(self._mapped(), numpy_dtype, count, offset).reshape(dims)

    def write(self, value: Any, offset: int = 0) -> "ShmTensor":
        """Copies `value` (numpy array, torch tensor or array-like) into the region at byte
        `offset` (a multiple of its item size) and returns the ShmTensor naming it."""
        array = to_wire_array(value, "ShmRegion.write")
        self._check_range(array.dtype, array.nbytes, offset, "array")
        destination = np.frombuffer(self._mapped(), np.uint8, array.nbytes, offset)
        destination[:] = array.reshape(-1).view(np.uint8)
        return ShmTensor(self, offset, array.dtype, array.shape)

    def output_view(self, dtype: np.dtype, shape: Tuple[int, ...], offset: int) -> np.ndarray:
        """A read-only view of an output the supervisor wrote at `offset` (used by decoding)."""
        count = _byte_count(dtype, shape) // dtype.itemsize
        view = np.frombuffer(self._mapped(), dtype, count, offset).reshape(shape)
        view.flags.writeable = False
        return view

    def release(self) -> None:
        """Releases the region in the supervisor and unmaps it here; a second call does nothing.

        Raises the supervisor's error (NotFound when it already freed an idle region); the
        local mapping is gone either way."""
        self._release(self)

    def unmap(self) -> None:
        """Drops this process's mapping (the client calls it on release). Dropping the last
        reference unmaps the memory; arrays or memoryviews still alive over it keep it mapped,
        and valid, until they are garbage-collected too."""
        self._mapping = None

    def _mapped(self) -> mmap.mmap:
        if self._mapping is None:
            raise InvalidArgument(f"shared-memory region {self._name} was released")
        return self._mapping

    def _check_range(self, dtype: np.dtype, nbytes: int, offset: int, what: str) -> None:
        if not isinstance(offset, (int, np.integer)) or offset < 0:
            raise InvalidArgument(f"offset must be a non-negative integer, got {offset!r}")
        if offset % dtype.itemsize:
            raise InvalidArgument(f"offset {offset} is not a multiple of the {dtype.name} item "
                                  f"size {dtype.itemsize}")
        if offset + nbytes > self._nbytes:
            raise InvalidArgument(f"{what} of {nbytes} bytes does not fit in region {self._name} "
                                  f"of {self._nbytes} bytes at offset {offset}")

    def __enter__(self) -> "ShmRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = ", released" if self.released else ""
        return f"{type(self).__name__}(name={self._name!r}, nbytes={self._nbytes}{state})"


class AsyncShmRegion(ShmRegion):
    """A :class:`ShmRegion` of an :class:`torchfarm.AsyncClient`: ``await region.release()``,
    ``async with``."""

    def __init__(self, region: str, name: str, nbytes: int, mapping: mmap.mmap,
                 release: Callable[["ShmRegion"], Awaitable[Any]]) -> None:
        super().__init__(region, name, nbytes, mapping, release)

    async def release(self) -> None:  # type: ignore[override]
        """As :meth:`ShmRegion.release`, as a coroutine."""
        await self._release(self)

    def __enter__(self) -> "ShmRegion":
        raise TypeError("an AsyncShmRegion is released with 'async with' or 'await release()'")

    async def __aenter__(self) -> "AsyncShmRegion":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


@dataclass(frozen=True)
class ShmTensor:
    """An input whose bytes lie in a shared-memory region: ``shape`` elements of ``dtype``,
    C-contiguous and little-endian, at byte ``offset`` (a multiple of the dtype's item size).

    Pass it to ``infer``/``infer_many`` in place of an array; the request then carries the
    region and offset instead of a data frame. ``region`` is a :class:`ShmRegion` (its size is
    checked here) or a region token of this client's supervisor. Made by
    :meth:`ShmRegion.write`, or directly after filling :meth:`ShmRegion.array`.
    """

    region: Union[ShmRegion, str]
    offset: int
    dtype: Any
    shape: Tuple[int, ...]

    def __post_init__(self) -> None:
        dtype = wire_dtype(self.dtype, "ShmTensor")
        shape = _shape(self.shape, "ShmTensor")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)
        if isinstance(self.region, ShmRegion):
            self.region._check_range(dtype, self.nbytes, self.offset, "ShmTensor")
            return
        if not isinstance(self.region, str) or not self.region:
            raise InvalidArgument(f"ShmTensor: region must be a ShmRegion or a token, "
                                  f"got {self.region!r}")
        if not isinstance(self.offset, (int, np.integer)) or self.offset < 0:
            raise InvalidArgument(f"offset must be a non-negative integer, got {self.offset!r}")
        if self.offset % dtype.itemsize:
            raise InvalidArgument(f"offset {self.offset} is not a multiple of the {dtype.name} "
                                  f"item size {dtype.itemsize}")

    @property
    def token(self) -> str:
        return self.region.region if isinstance(self.region, ShmRegion) else self.region

    @property
    def nbytes(self) -> int:
        return _byte_count(self.dtype, self.shape)


@dataclass(frozen=True)
class ShmOutput:
    """Where a request's outputs go: the range ``[offset, offset + nbytes)`` of `region`
    (``nbytes=None``: up to the region's end). `offset` must be a multiple of 64; output k is
    written at the next multiple of 64 after output k-1. Passing a :class:`ShmRegion` as
    ``output_shm`` means the whole region.

    The outputs ``infer`` returns are read-only views into the region: the next request that
    writes that range overwrites them (``.copy()`` what you keep), and they stay readable after
    the region is released.
    """

    region: ShmRegion
    offset: int = 0
    nbytes: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.region, ShmRegion):
            raise InvalidArgument(f"output_shm: region must be a ShmRegion mapped by this client "
                                  f"(outputs are read from it), got {self.region!r}")
        offset = self.offset
        if not isinstance(offset, (int, np.integer)) or offset < 0 or offset % OUTPUT_ALIGNMENT:
            raise InvalidArgument(f"output_shm: offset {offset!r} is not a non-negative multiple "
                                  f"of {OUTPUT_ALIGNMENT}")
        if self.nbytes is None:
            object.__setattr__(self, "nbytes", max(0, self.region.nbytes - offset))
        if not isinstance(self.nbytes, (int, np.integer)) or self.nbytes < 0:
            raise InvalidArgument(f"output_shm: nbytes must be a non-negative integer, "
                                  f"got {self.nbytes!r}")
        if offset + self.nbytes > self.region.nbytes:
            raise InvalidArgument(f"output_shm: range of {self.nbytes} bytes at offset {offset} "
                                  f"does not fit in region {self.region.name} of "
                                  f"{self.region.nbytes} bytes")

    @property
    def token(self) -> str:
        return self.region.region


def as_output_shm(value: Union[ShmOutput, ShmRegion, None]) -> Optional[ShmOutput]:
    """The ``output_shm`` argument of ``infer`` as a ShmOutput (a region: all of it)."""
    if value is None or isinstance(value, ShmOutput):
        return value
    if isinstance(value, ShmRegion):
        return ShmOutput(value)
    raise InvalidArgument(f"output_shm must be a ShmOutput or a ShmRegion, got {value!r}")


def uses_shm(inputs: Sequence[Any], output: Optional[ShmOutput]) -> bool:
    return output is not None or any(isinstance(v, ShmTensor) for v in inputs)
