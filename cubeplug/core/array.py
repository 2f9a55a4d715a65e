"""Arrays: a typed n-dimensional view over a handle, as a CuPy or PyTorch user expects one.

Users' guide: docs/arrays.md.

An :class:`Array` is a client, a :class:`~cubeplug.Handle`, a numpy dtype, a shape and strides in
elements (the layout of a :class:`~cubeplug.Tensor`). Slicing makes views that share the handle's
memory (the view's handle is the base handle offset to the view's lowest element). ``.numpy()``
and ``numpy.asarray(array)`` read it back; kernels take it wherever they take a handle; DLPack and
``__cuda_array_interface__`` hand it to other libraries where the device has a DLPack device type
(:meth:`ComputeServer.dlpack_device <cubeplug.core.server.ComputeServer.dlpack_device>`):

- the ``cpu`` backend (kDLCPU): ``__dlpack__`` exports a *copy* read back into host memory (the
  backend's pooled memory is lent again once the handle goes, which a DLPack consumer cannot see);
- ``cuda`` (kDLCUDA): zero copy, through the CuPy array of ``client.as_native``;
- other backends: no DLPack consumer exists for their memory; ``.numpy()`` is the way out.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from cubeplug.core.errors import ValidationError, describe
from cubeplug.core.handle import Handle, Tensor, check_shape, contiguous_strides, tensor_extent, view_dims
from cubeplug.core.kernel import DTYPES, dtype_of

#: DLPack device types (``DLDeviceType``).
DL_CPU = 1
DL_CUDA = 2


class Array:
    """A typed n-dimensional view of device memory: ``client``, ``handle``, ``dtype``, ``shape``,
    ``strides`` (in elements). Make one with ``client.asarray(obj)`` or
    ``client.empty_array(shape, dtype)``; read it with ``.numpy()`` or ``numpy.asarray(array)``."""

    __slots__ = ("__weakref__", "_client", "_dtype", "_handle", "_shape", "_strides")

    def __init__(
        self,
        client: Any,
        handle: Handle,
        dtype: Any,
        shape: Any = None,
        strides: Any = None,
    ) -> None:
        if type(handle) is not Handle:
            raise ValidationError(f"an Array views a cubeplug Handle, got {describe(handle)}")
        handle.memory()  # ValidationError for a dropped handle
        dt = DTYPES[dtype_of(dtype)]
        dims = view_dims(handle, dt.itemsize, shape)
        steps = contiguous_strides(dims) if strides is None else check_shape(strides)
        if len(steps) != len(dims):
            raise ValidationError(f"strides {steps} do not match shape {dims}: give one per dimension")
        need = tensor_extent(dims, steps) * dt.itemsize
        if need > handle.size:
            raise ValidationError(
                f"an array of shape {dims} and strides {steps} of {dt} spans {need} B, but the "
                f"handle views only {handle.size} B"
            )
        if need < handle.size:  # the handle covers the elements exactly (what a kernel binds)
            handle = handle.offset_end(handle.size - need)
        self._client = client
        self._handle = handle
        self._dtype = dt
        self._shape = dims
        self._strides = steps

    # ------------------------------------------------------------------ what it is
    @property
    def client(self) -> Any:
        """The client whose device holds the memory (a ComputeClient: typed loosely, since the
        client module imports this one)."""
        return self._client

    @property
    def handle(self) -> Handle:
        """The handle viewed: it starts at the array's first element (a view's handle is offset)."""
        return self._handle

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element type, a numpy dtype."""
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The length of each dimension."""
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """The step of each dimension in elements (numpy's strides divided by the item size)."""
        return self._strides

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self._shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``size * itemsize``), as numpy counts them."""
        return self.size * self._dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are C-contiguous (no gaps): a kernel may take it as a buffer."""
        expected = contiguous_strides(self._shape)
        return all(s == e for s, e, d in zip(self._strides, expected, self._shape) if d > 1)

    @property
    def tensor(self) -> Tensor:
        """The same memory and layout as a :class:`~cubeplug.Tensor` (for ``client.read_tensor``)."""
        return Tensor(self._handle, self._shape, self._strides, self._dtype)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d Array")
        return self._shape[0]

    def __repr__(self) -> str:
        state = "dropped, " if self._handle.token is None else ""
        return (
            f"<cubeplug.Array {state}shape={self._shape} dtype={self._dtype} "
            f"strides={self._strides} on {self._client.backend}>"
        )

    # ------------------------------------------------------------------ reading back
    def numpy(self) -> np.ndarray:
        """A C-contiguous numpy copy of the elements, read after the work that writes them."""
        if self.size == 0:
            return np.empty(self._shape, dtype=self._dtype)
        arr: np.ndarray = self._client.read_tensor(self.tensor)
        return arr.reshape(self._shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError(
                "a cubeplug.Array lives in device memory: numpy can only get a copy of it "
                "(use copy=None or copy=True)"
            )
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def copy(self) -> Array:
        """A contiguous copy on the same client (on the device for a contiguous array)."""
        client = self._client
        if self.is_contiguous:
            handle = client.empty(self.nbytes)
            if self.nbytes:
                client.copy(self._handle, handle)
            return Array(client, handle, self._dtype, self._shape)
        out: Array = client.asarray(self.numpy())
        return out

    # ------------------------------------------------------------------ views
    def __getitem__(self, key: Any) -> Array:
        """A view sharing the memory: ints, slices with positive steps, ``...`` and ``None``."""
        items = key if isinstance(key, tuple) else (key,)
        if sum(1 for k in items if k is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        given = sum(1 for k in items if k is not None and k is not Ellipsis)
        if given > self.ndim:
            raise IndexError(f"too many indices for an Array of {self.ndim} dimensions: {given} were given")
        expanded: list[Any] = []
        for k in items:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - given))
            else:
                expanded.append(k)
        if Ellipsis not in items:
            expanded.extend([slice(None)] * (self.ndim - given))
        shape: list[int] = []
        strides: list[int] = []
        offset = 0  # elements
        dim = 0
        for k in expanded:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            n, st = self._shape[dim], self._strides[dim]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step < 0:
                    raise ValidationError(
                        "an Array view takes positive slice steps only; read it with .numpy() and "
                        "reverse it there"
                    )
                length = len(range(start, stop, step))
                shape.append(length)
                strides.append(st * step)
                if length:
                    offset += start * st
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    raise ValidationError(
                        f"an Array takes ints, slices, '...' and None as indices, got {describe(k)}; "
                        f"for fancy indexing read it with .numpy() first"
                    ) from None
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
                offset += (i % n) * st
            dim += 1
        dims = tuple(shape)
        steps = tuple(strides)
        isz = self._dtype.itemsize
        extent = tensor_extent(dims, steps) * isz
        base = self._handle
        handle = base.range(0, 0) if extent == 0 else base.range(offset * isz, extent)
        return Array(self._client, handle, self._dtype, dims, steps)

    # ------------------------------------------------------------------ interchange
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device type, device id)``: (1, 0) on the cpu backend, (2, id) on cuda."""
        device: tuple[int, int] | None = self._client.server.dlpack_device()
        if device is None:
            raise ValidationError(
                f"DLPack has no device type for {self._client.backend} memory and no library takes "
                f"it; read the array with .numpy() (or numpy.asarray(array))"
            )
        return device

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule: a host copy on the cpu backend, zero copy on cuda."""
        kind, _ = self.__dlpack_device__()
        if kind == DL_CPU:
            if copy is False:
                raise BufferError(
                    "the cpu backend exports a copy (its pooled memory is lent again once the "
                    "handle goes); pass copy=None or copy=True"
                )
            return _export(self.numpy(), stream, max_version, dl_device, None)
        return _export(self.native(), stream, max_version, dl_device, copy)

    def native(self) -> Any:
        """A zero-copy array of the backend's own library over this array (CuPy on cuda), with
        its strides; ValidationError on a backend that has none."""
        isz = self._dtype.itemsize
        extent = tensor_extent(self._shape, self._strides)
        flat = self._client.as_native(self._handle, self._dtype, (extent,))
        if self.is_contiguous:
            return flat.reshape(self._shape)
        # The library's own constructor over the same memory (a cupy.ndarray takes these arguments).
        return type(flat)(
            self._shape, dtype=self._dtype, memptr=flat.data, strides=tuple(s * isz for s in self._strides)
        )

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) of a cuda Array: zero copy."""
        if self._client.server.dlpack_device() is None or self.__dlpack_device__()[0] != DL_CUDA:
            raise AttributeError(
                f"__cuda_array_interface__ is only on cuda Arrays; this one is on "
                f"{self._client.backend}: use .numpy() or DLPack"
            )
        interface: dict[str, Any] = self.native().__cuda_array_interface__
        return interface


def _export(
    arr: Any,
    stream: Any,
    max_version: tuple[int, int] | None,
    dl_device: tuple[int, int] | None,
    copy: bool | None,
) -> Any:
    """``arr.__dlpack__`` with the keywords its library knows (older ones lack the 2023 ones)."""
    kwargs: dict[str, Any] = {}
    if stream is not None:
        kwargs["stream"] = stream
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    try:
        return arr.__dlpack__(**kwargs)
    except TypeError:
        if "max_version" not in kwargs and "dl_device" not in kwargs and "copy" not in kwargs:
            raise
        kwargs.pop("max_version", None)  # a consumer offering v1 takes a v0 capsule as well
        return arr.__dlpack__(**kwargs)


def host_source(obj: Any, dtype: Any) -> np.ndarray | None:
    """``obj`` as a numpy array when it lives in host memory (numpy, a CPU ``__dlpack__`` object,
    anything numpy converts, lists), or None for device memory (``__cuda_array_interface__`` or a
    non-CPU ``__dlpack__``). ValidationError for what holds no numbers."""
    if isinstance(obj, Handle):
        raise ValidationError(
            "asarray of a Handle needs its dtype: client.asarray(handle, dtype) wraps it without a copy"
        )
    if isinstance(obj, np.ndarray):
        arr = obj
    elif hasattr(obj, "__cuda_array_interface__"):
        return None
    elif hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        if obj.__dlpack_device__()[0] != DL_CPU:
            return None
        arr = np.from_dlpack(obj)
    else:
        try:
            arr = np.asarray(obj)
        except ValidationError:
            raise
        except Exception as e:
            raise ValidationError(f"asarray cannot read {describe(obj)} as numbers ({e})") from e
    if dtype is not None:
        arr = arr.astype(DTYPES[dtype_of(dtype)], copy=False)
    if arr.dtype.hasobject or arr.dtype not in DTYPES.values():
        raise ValidationError(
            f"asarray takes numbers of a cubeplug dtype ({', '.join(DTYPES)}), got an array of "
            f"{arr.dtype} from {describe(obj)}; pass dtype=... or convert it with numpy first"
        )
    return arr
