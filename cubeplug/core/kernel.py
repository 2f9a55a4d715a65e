"""Kernels, their parameters, launch counts and compile keys (docs/kernels.md).

A :class:`Kernel` is a plain description: a name, typed parameters, a cube (work-group) size and a
source per dialect. Backends compile it; :class:`CompileCache` keeps what they compiled per device.
Everything a launch needs to validate its arguments is computed once, when the kernel is built.
"""

from __future__ import annotations

import enum
import hashlib
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from cubeplug.core.errors import ValidationError, describe
from cubeplug.core.handle import Handle

#: Every element type cubeplug knows, by its short name.
DTYPES: dict[str, np.dtype[Any]] = {
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
}
_NAMES_BY_DTYPE = {dt: name for name, dt in DTYPES.items()}
_INT_BOUNDS = {
    dt: (int(np.iinfo(dt).min), int(np.iinfo(dt).max)) for dt in DTYPES.values() if dt.kind in "iu"
}
_NUMBERS = (int, float, np.integer, np.floating)
_FLOAT_MAX = {dt: float(np.finfo(dt).max) for dt in DTYPES.values() if dt.kind == "f"}

Access = Literal["read", "write", "read_write"]
_ACCESS = ("read", "write", "read_write")


#: Element types every dialect's source has on every device: a source using them needs nothing
#: enabled, so ``Kernel(dtypes=...)`` leaves them out (a ``bool`` local in WGSL, where a ``bool``
#: buffer is not possible, is no reason to refuse a kernel).
CORE_DTYPES = frozenset({"f32", "i32", "u32", "bool"})


def dtype_of(name: str | np.dtype[Any] | type) -> str:
    """The short dtype name for a name, a numpy dtype or a numpy scalar type."""
    if isinstance(name, str) and name in DTYPES:
        return name
    try:
        dt = np.dtype(name)
    except TypeError:
        dt = None
    if dt is not None and dt in _NAMES_BY_DTYPE:
        return _NAMES_BY_DTYPE[dt]
    raise ValidationError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")


@dataclass(frozen=True, slots=True)
class Buffer:
    """A buffer parameter: its name, element dtype, access, and optional vector width or atomics."""

    name: str
    dtype: str
    access: Access = "read_write"
    vector: int = 1
    atomic: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_of(self.dtype))
        if self.access not in _ACCESS:
            raise ValidationError(f"Buffer {self.name!r}: access {self.access!r} is not one of {_ACCESS}")
        if self.vector not in (1, 2, 4):
            raise ValidationError(f"Buffer {self.name!r}: vector must be 1, 2 or 4, not {self.vector!r}")
        if self.atomic and self.dtype not in ("i32", "u32"):
            raise ValidationError(f"Buffer {self.name!r}: atomic buffers must be i32 or u32")

    @property
    def itemsize(self) -> int:
        """Bytes of one element (a whole vector for vector buffers)."""
        return DTYPES[self.dtype].itemsize * self.vector


@dataclass(frozen=True, slots=True)
class Scalar:
    """A scalar parameter passed by value: its name and dtype."""

    name: str
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_of(self.dtype))


Param = Buffer | Scalar


class ExecutionMode(enum.Enum):
    """Checked launches validate their arguments before the driver call; unchecked ones skip that."""

    CHECKED = "checked"
    UNCHECKED = "unchecked"


#: The largest count along an axis that a CubeCount holds (a u32).
COUNT_MAX = 0xFFFFFFFF


class CubeCount:
    """How many cubes (work-groups) a launch runs: static ``(x, y, z)`` or read from a buffer."""

    __slots__ = ("handle", "x", "y", "z")

    def __init__(self, x: int = 1, y: int = 1, z: int = 1) -> None:
        for axis, v in (("x", x), ("y", y), ("z", z)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValidationError(f"CubeCount.{axis} must be an int, got {v!r}")
            if v < 0 or v > COUNT_MAX:
                raise ValidationError(f"CubeCount.{axis} = {v} is outside 0..2**32-1")
        self.x, self.y, self.z = int(x), int(y), int(z)
        self.handle: Handle | None = None

    @classmethod
    def dynamic(cls, handle: Handle) -> CubeCount:
        """A count of three u32 (x, y, z) stored on the device in ``handle``."""
        if not isinstance(handle, Handle):
            raise ValidationError(
                f"CubeCount.dynamic takes the Handle holding the three u32 counts, got {describe(handle)}"
            )
        count = cls(0, 0, 0)
        count.handle = handle
        return count

    @property
    def is_dynamic(self) -> bool:
        """True when the count is read from a buffer."""
        return self.handle is not None

    @property
    def is_empty(self) -> bool:
        """True for a static count with a zero axis: launching it is a no-op."""
        return self.handle is None and (self.x == 0 or self.y == 0 or self.z == 0)

    def as_tuple(self) -> tuple[int, int, int]:
        """(x, y, z) of a static count."""
        return (self.x, self.y, self.z)

    def __repr__(self) -> str:
        if self.handle is not None:
            return f"CubeCount.dynamic({self.handle!r})"
        return f"CubeCount({self.x}, {self.y}, {self.z})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CubeCount):
            return NotImplemented
        return self.as_tuple() == other.as_tuple() and self.handle is other.handle

    def __hash__(self) -> int:
        return hash((self.x, self.y, self.z, id(self.handle)))


@dataclass(frozen=True, slots=True)
class KernelId:
    """What identifies a compiled kernel: name, source digest, defines, cube dim, mode and dialect."""

    name: str
    digest: str
    defines: tuple[tuple[str, str], ...]
    cube_dim: tuple[int, int, int]
    mode: ExecutionMode
    dialect: str


Source = str | Callable[..., Any]


@dataclass(frozen=True, eq=False)
class Kernel:
    """A compute kernel: typed params in declared order, a cube dim and sources per dialect.

    ``dtypes`` names the element types its source uses besides its parameters' (an f16 local in a
    kernel of f32 arrays): the backends enable what :attr:`uses_dtypes` holds (CUDA's half header,
    OpenCL's ``cl_khr_fp16``, WGSL's ``enable f16``) and a device lacking one refuses the kernel.
    """

    name: str
    params: tuple[Param, ...]
    sources: Mapping[str, Source]
    cube_dim: tuple[int, int, int] = (1, 1, 1)
    defines: Mapping[str, Any] = field(default_factory=dict)
    entry: str | None = None
    #: The element types the source uses besides its parameters', as short names, sorted.
    dtypes: tuple[str, ...] = ()
    #: Every element type the kernel needs of the device: ``dtypes`` and its parameters' dtypes.
    uses_dtypes: frozenset[str] = field(init=False, repr=False)
    # Derived once, used on every checked launch.
    buffer_params: tuple[Buffer, ...] = field(init=False, repr=False)
    scalar_params: tuple[Scalar, ...] = field(init=False, repr=False)
    scalar_dtypes: tuple[np.dtype[Any], ...] = field(init=False, repr=False)
    buffer_itemsizes: tuple[int, ...] = field(init=False, repr=False)
    #: Per scalar param ``(python type, low, high, converter)``: what a launch plan tests inline.
    scalar_checks: tuple[tuple[type, Any, Any, Any], ...] = field(init=False, repr=False)
    digest: str = field(init=False, repr=False)

    def __init__(
        self,
        name: str,
        params: Iterable[Param],
        sources: Mapping[str, Source],
        cube_dim: int | tuple[int, ...] = (1, 1, 1),
        defines: Mapping[str, Any] | None = None,
        entry: str | None = None,
        dtypes: Iterable[str | np.dtype[Any] | type] = (),
    ) -> None:
        set_ = object.__setattr__
        if not isinstance(name, str) or not name.isidentifier():
            raise ValidationError(f"kernel name must be an identifier, got {name!r}")
        params = tuple(params)
        for p in params:
            if not isinstance(p, (Buffer, Scalar)):
                raise ValidationError(f"kernel {name!r}: params must be Buffer or Scalar, got {p!r}")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ValidationError(f"kernel {name!r}: parameter names must be unique, got {names}")
        if not sources:
            raise ValidationError(f"kernel {name!r} has no sources; give at least one dialect")
        dims = _cube_dim(name, cube_dim)
        used = _source_dtypes(name, dtypes)
        set_(self, "name", name)
        set_(self, "params", params)
        set_(self, "sources", dict(sources))
        set_(self, "cube_dim", (int(dims[0]), int(dims[1]), int(dims[2])))
        set_(self, "defines", dict(defines or {}))
        set_(self, "entry", entry)
        set_(self, "dtypes", used)
        set_(self, "uses_dtypes", frozenset(used).union(p.dtype for p in params))
        set_(self, "buffer_params", tuple(p for p in params if isinstance(p, Buffer)))
        set_(self, "scalar_params", tuple(p for p in params if isinstance(p, Scalar)))
        set_(self, "scalar_dtypes", tuple(DTYPES[p.dtype] for p in self.scalar_params))
        set_(self, "buffer_itemsizes", tuple(p.itemsize for p in self.buffer_params))
        set_(self, "scalar_checks", tuple(_fast_check(DTYPES[p.dtype]) for p in self.scalar_params))
        # The used dtypes are part of the key: they change the prelude a source is compiled with.
        key = (name, params, self.cube_dim, sorted(self.defines.items()), sorted(self.uses_dtypes))
        h = hashlib.sha256(repr(key).encode())
        for dialect in sorted(self.sources):
            src = self.sources[dialect]
            h.update(dialect.encode())
            h.update(src.encode() if isinstance(src, str) else _callable_key(src).encode())
        set_(self, "digest", h.hexdigest()[:20])

    @property
    def entry_point(self) -> str:
        """The name of the entry point in the source."""
        return self.entry or self.name

    def lacking(self, have: Container[str]) -> tuple[str, str] | None:
        """The first dtype the kernel uses that ``have`` lacks (its params' in declared order, then
        its source's), with how it uses it ("param 'x' uses f16", "its source uses f16"); None when
        ``have`` holds them all. What a device's refusal of the kernel names."""
        for p in self.params:
            if p.dtype not in have:
                return p.dtype, f"param {p.name!r} uses {p.dtype}"
        for d in self.dtypes:
            if d not in have:
                return d, f"its source uses {d} (Kernel dtypes={self.dtypes})"
        return None

    def kernel_id(self, mode: ExecutionMode, dialect: str) -> KernelId:
        """The compile key of this kernel for a mode and a dialect."""
        defines = tuple(sorted((k, str(v)) for k, v in self.defines.items()))
        return KernelId(self.name, self.digest, defines, self.cube_dim, mode, dialect)

    def pick_dialect(self, dialects: Iterable[str], backend: str) -> str:
        """The first of a backend's dialects this kernel has a source for."""
        dialects = tuple(dialects)
        for d in dialects:
            if d in self.sources:
                return d
        raise ValidationError(
            f"kernel {self.name!r} has no source for backend {backend!r}: it has "
            f"{sorted(self.sources)}, the backend compiles {list(dialects)}; add a source for one of them"
        )

    def check_scalars(self, values: Sequence[Any]) -> Sequence[Any]:
        """The scalar values checked against their dtypes: ``values`` itself when every one is a
        Python int or float in range (the usual case), else converted to numpy scalars; raise
        ValidationError for a wrong count or a value that does not fit."""
        checks = self.scalar_checks
        if type(values) is not list and type(values) is not tuple:
            values = list(values)
        if len(values) == len(checks):
            for (ctype, lo, hi, _), v in zip(checks, values):
                if type(v) is not ctype or not lo <= v <= hi:
                    return self.pack_scalars(values)
            return values
        return self.pack_scalars(values)

    def numpy_scalars(self, values: Sequence[Any]) -> list[Any]:
        """Checked (or unchecked) values as numpy scalars of their dtypes, for backends that want them."""
        try:
            return [dt.type(v) for dt, v in zip(self.scalar_dtypes, values, strict=True)]
        except (OverflowError, ValueError, TypeError) as e:
            raise ValidationError(f"kernel {self.name!r} scalars {list(values)!r}: {e}") from e

    def pack_scalars(self, values: Iterable[Any]) -> list[Any]:
        """The scalar values as numpy scalars of their declared dtypes; raise if one does not fit."""
        values = list(values)
        if len(values) != len(self.scalar_params):
            raise ValidationError(
                f"kernel {self.name!r} takes {len(self.scalar_params)} scalars "
                f"({', '.join(p.name for p in self.scalar_params) or 'none'}), got {len(values)}"
            )
        out = []
        for (ctype, lo, hi, make), p, v in zip(self.scalar_checks, self.scalar_params, values):
            # Fast path: a Python int or float within the dtype's range (the usual case).
            if type(v) is ctype and lo <= v <= hi:
                out.append(make(v))
            else:
                out.append(to_scalar(p, v, self.name))
        return out

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, {len(self.params)} params, cube_dim={self.cube_dim})"


def _cube_dim(name: str, cube_dim: Any) -> tuple[int, ...]:
    """``cube_dim`` as three positive ints (missing axes are 1), or ValidationError saying what is wrong."""
    bad = ValidationError(
        f"kernel {name!r}: cube_dim must be a positive int or a tuple of 1 to 3 positive ints "
        f"(e.g. 256 or (16, 16)), got {describe(cube_dim)}"
    )
    if isinstance(cube_dim, (int, np.integer)) and not isinstance(cube_dim, bool):
        dims: tuple[Any, ...] = (cube_dim,)
    elif isinstance(cube_dim, (tuple, list)):
        dims = tuple(cube_dim)
    else:
        raise bad
    if not 1 <= len(dims) <= 3:
        raise bad
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise bad
    return (*(int(d) for d in dims), 1, 1)[:3]


def _source_dtypes(name: str, dtypes: Any) -> tuple[str, ...]:
    """The short names of ``dtypes`` (an iterable of names or numpy dtypes) beyond
    :data:`CORE_DTYPES`, sorted and unique; ValidationError naming the known ones for an unknown
    name or a value that is no iterable."""
    if isinstance(dtypes, (str, np.dtype, type)) or not isinstance(dtypes, Iterable):
        raise ValidationError(
            f"kernel {name!r}: dtypes must be an iterable of dtype names (e.g. ('f16',)), got "
            f"{describe(dtypes)}"
        )
    names = set()
    for d in dtypes:
        try:
            names.add(dtype_of(d))
        except ValidationError as e:
            raise ValidationError(f"kernel {name!r}: dtypes: {e}") from None
    return tuple(sorted(names - CORE_DTYPES))


def _fast_check(dt: np.dtype[Any]) -> tuple[type, Any, Any, Any]:
    """(Python type, low, high, constructor) for values that skip the full conversion to ``dt``."""
    if dt in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[dt]
        return (int, lo, hi, dt.type)
    if dt in _FLOAT_MAX:
        return (float, -_FLOAT_MAX[dt], _FLOAT_MAX[dt], dt.type)
    return (type(None), 1, 0, dt.type)  # never matches: bools go through to_scalar


def _callable_key(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is not None:
        return f"{fn.__module__}.{fn.__qualname__}:{hashlib.sha256(code.co_code).hexdigest()[:12]}"
    return f"{type(fn).__module__}.{type(fn).__qualname__}:{id(fn)}"


def to_scalar(param: Scalar, value: Any, kernel: str = "?") -> Any:
    """Convert ``value`` to the numpy scalar of ``param``'s dtype, or raise ValidationError."""
    dt = DTYPES[param.dtype]
    if type(value) is int:  # the common case first, without building the error text
        bounds = _INT_BOUNDS.get(dt)
        if bounds is not None and bounds[0] <= value <= bounds[1]:
            return dt.type(value)
    elif type(value) is float:
        fmax = _FLOAT_MAX.get(dt)
        if fmax is not None and -fmax <= value <= fmax:
            return dt.type(value)
    if isinstance(value, np.generic) and value.dtype == dt:
        return value
    where = f"kernel {kernel!r} scalar {param.name!r} ({param.dtype})"
    if dt.kind in "iu":
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ValidationError(f"{where}: {value!r} is not an integer")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBERS):
            raise ValidationError(f"{where}: {value!r} is not a number")
        iv = int(value)
        lo, hi = _INT_BOUNDS[dt]
        if not lo <= iv <= hi:
            raise ValidationError(f"{where}: {iv} does not fit in {lo}..{hi}")
        return dt.type(iv)
    if dt.kind == "f":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBERS):
            raise ValidationError(f"{where}: {value!r} is not a number")
        fv = float(value)
        if np.isfinite(fv) and abs(fv) > _FLOAT_MAX[dt]:
            raise ValidationError(f"{where}: {fv} overflows {param.dtype} (max {_FLOAT_MAX[dt]})")
        return dt.type(fv)
    if dt.kind == "b":
        if not isinstance(value, (bool, np.bool_, int, np.integer)) or int(value) not in (0, 1):
            raise ValidationError(f"{where}: {value!r} is not a bool")
        return np.bool_(bool(value))
    raise ValidationError(f"{where}: unsupported dtype")  # pragma: no cover


class CompileCache:
    """Compiled kernels of one device, by KernelId; thread-safe, compiles each key once."""

    def __init__(self) -> None:
        #: The compiled kernels by id (read it; a backend releasing its driver objects in a fixed
        #: order clears it, as ``clear`` does).
        self.entries: dict[KernelId, Any] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: KernelId, compile: Callable[[], Any]) -> Any:
        """The compiled kernel for ``key``, compiling it with ``compile()`` on a miss."""
        entry = self.entries.get(key)
        if entry is not None:
            self.hits += 1
            return entry
        with self._lock:
            entry = self.entries.get(key)
            if entry is None:
                self.misses += 1
                entry = compile()
                self.entries[key] = entry
            else:
                self.hits += 1
            return entry

    def __contains__(self, key: KernelId) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        """Forget every compiled kernel."""
        with self._lock:
            self.entries.clear()
