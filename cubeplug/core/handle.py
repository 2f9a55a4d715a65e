"""Handles: what users hold for device memory, views with byte offsets, and tensors.

A :class:`Handle` holds a *slice token* from memory management. The pools keep no reference to
that token; its finalizer gives the slice back, so a slice becomes free exactly when no handle and
no queued work (whose bindings hold the token too) references it any more: Python's reference
counting plays the role of CubeCL's ``Arc`` strong count.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cubeplug.core.errors import ValidationError

if TYPE_CHECKING:
    from cubeplug.core.memory import SliceToken


class Handle:
    """A view of device memory: a slice plus byte offsets from its start and end."""

    __slots__ = ("__weakref__", "end", "nbytes", "owner", "start", "stream", "token")

    def __init__(
        self, memory: SliceToken, owner: Any, nbytes: int, stream: int, start: int = 0, end: int = 0
    ) -> None:
        #: The slice token this handle holds (None once dropped); read by the launch paths inline.
        self.token: SliceToken | None = memory
        #: The server whose memory this is (a launch checks that it is the launching one).
        self.owner = owner
        #: Bytes of the allocation this handle views (before offsets).
        self.nbytes = nbytes
        #: The stream that allocated the memory (whose pools lent it).
        self.stream = stream
        #: Byte offsets from the start and from the end of the allocation.
        self.start = start
        self.end = end

    @property
    def size(self) -> int:
        """Bytes this view covers: the allocation less both offsets."""
        return self.nbytes - self.start - self.end

    @property
    def offset(self) -> int:
        """Byte offset of this view from the start of its allocation."""
        return self.start

    @property
    def is_dropped(self) -> bool:
        """True once :meth:`drop` was called on this handle."""
        return self.token is None

    @property
    def client(self) -> Any:
        """The client that owns this memory."""
        return getattr(self.owner, "client", None)

    def offset_start(self, nbytes: int) -> Handle:
        """A view that starts ``nbytes`` further in; offsets accumulate."""
        return self._view(nbytes, 0)

    def offset_end(self, nbytes: int) -> Handle:
        """A view that ends ``nbytes`` earlier; offsets accumulate."""
        return self._view(0, nbytes)

    def range(self, at: int, nbytes: int) -> Handle:
        """A view of bytes ``[at, at + nbytes)`` of this one (one view: ``offset_start`` then
        ``offset_end`` would make two)."""
        for n in (at, nbytes):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise ValidationError(f"a range takes non-negative byte counts, got {n!r}")
        at, nbytes = int(at), int(nbytes)
        if at + nbytes > self.size:
            raise ValidationError(
                f"bytes [{at}, {at + nbytes}) go beyond this view of {self.size} B; keep the range within it"
            )
        return self._derive(self.memory(), at, self.size - at - nbytes)

    def _view(self, more_start: int, more_end: int) -> Handle:
        for n in (more_start, more_end):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise ValidationError(f"offsets are non-negative byte counts, got {n!r}")
        memory = self.memory()
        if int(more_start) + int(more_end) > self.size:
            raise ValidationError(
                f"offsets of {more_start} + {more_end} B go beyond this view of {self.size} B; "
                f"keep start + end offsets within the handle's size"
            )
        return self._derive(memory, int(more_start), int(more_end))

    def _derive(self, memory: SliceToken, more_start: int, more_end: int) -> Handle:
        """The view ``more_start`` bytes further in and ``more_end`` earlier, already checked by
        the caller (:meth:`range` and :meth:`_view` each with the message of its own arguments)."""
        start, end = self.start + more_start, self.end + more_end
        return Handle(memory, self.owner, self.nbytes, self.stream, start, end)

    def memory(self) -> SliceToken:
        """The slice token, or ValidationError if the handle was dropped."""
        memory = self.token
        if memory is None:
            raise ValidationError("this handle was dropped with .drop(); create a new handle")
        return memory

    def can_mut(self) -> bool:
        """True when this handle is the only holder of its memory (no other view, no queued work)."""
        memory = self.token
        if memory is None:
            return False
        # References: this handle's slot, the local name, getrefcount's argument.
        return sys.getrefcount(memory) <= _BASE_REFS

    def alias(self) -> Handle:
        """Another handle of the same view, holding the memory on its own (a graph keeps its
        memory through aliases, so the user's ``drop()`` of a handle cannot release it)."""
        return Handle(self.token, self.owner, self.nbytes, self.stream, self.start, self.end)  # type: ignore[arg-type]

    def drop(self) -> None:
        """Release this handle's hold on its memory now; using it afterwards is an error."""
        self.token = None

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        raise ValidationError(
            "a Handle is untyped device memory, which numpy cannot read; use "
            "client.to_numpy(handle, dtype) for its contents, or client.asarray(handle, dtype) for "
            "a cubeplug.Array (which numpy.asarray reads)"
        )

    def __repr__(self) -> str:
        state = "dropped" if self.token is None else f"{self.size} B"
        offs = f", start={self.start}, end={self.end}" if self.start or self.end else ""
        return f"<Handle {state}{offs} stream={self.stream}>"


def _base_refs() -> int:
    class _Token:
        __slots__ = ("__weakref__",)

    h = Handle(_Token(), None, 0, 0)  # type: ignore[arg-type]
    memory = h.token
    return sys.getrefcount(memory)


_BASE_REFS = _base_refs()


@dataclass(frozen=True)
class Tensor:
    """A handle with a shape, strides (in elements) and a dtype; rows may be padded (pitched)."""

    handle: Handle
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_contiguous(self) -> bool:
        """True when the strides are C-contiguous (no row padding)."""
        return self.strides == contiguous_strides(self.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        raise ValidationError(
            "a Tensor lives in device memory, which numpy cannot read directly; use "
            "client.read_tensor(tensor), or client.asarray(tensor) for a cubeplug.Array (which "
            "numpy.asarray reads)"
        )


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides, in elements, of a shape."""
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def gather(data: bytes, tensor: Tensor) -> np.ndarray:
    """The elements of a (possibly pitched) tensor from its raw bytes, C-contiguous."""
    if tensor.size == 0:
        return np.empty(tensor.shape, dtype=tensor.dtype)
    flat = np.frombuffer(data, dtype=tensor.dtype)
    isz = tensor.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        flat, shape=tensor.shape, strides=tuple(s * isz for s in tensor.strides), writeable=False
    )
    return np.ascontiguousarray(view)


def check_shape(shape: Iterable[int]) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, or ValidationError saying what was wrong."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise ValidationError(f"shape must be a sequence of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValidationError(f"shape dimensions are non-negative ints, got {dims!r}")
    return tuple(int(d) for d in dims)


def view_dims(handle: Handle, itemsize: int, shape: Any = None) -> tuple[int, ...]:
    """The dimensions of a view of ``handle`` with elements of ``itemsize`` bytes: ``shape``
    checked (an int is one dimension), or, without one, the handle's size in elements
    (ValidationError when it is no whole number of them). Whether they fit is the caller's."""
    if shape is None:
        if handle.size % itemsize:
            raise ValidationError(
                f"a view of {handle.size} B is not a whole number of {itemsize}-byte elements; "
                f"give a dtype that fits, or a shape"
            )
        return (handle.size // itemsize,)
    return check_shape([int(shape)] if isinstance(shape, (int, np.integer)) else shape)


def tensor_extent(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements spanned by a strided layout (0 for an empty tensor)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, strides))
