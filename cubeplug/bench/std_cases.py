"""The std-op rows of ``cubeplug bench``: what cubeplug runs, what the array library runs for the same
work, how the first result is checked against NumPy, and how much work one call is.

Only the public :mod:`cubeplug.std` functions are called. Every row's inputs are made once per
backend (:class:`Inputs`) and shared by the rows: a vector ``x`` of ``n`` f32 in [0, 1) (positive,
so that a relative error of a sum is meaningful), a second vector ``y``, a ``side x side`` matrix and
the two square matrices of matmul. The ops that write in place (``fill``, ``axpy``) get buffers of
their own. Bytes per call are the least traffic the op needs (a scan reads and writes each element
once), so GB/s compares with the device's copy bandwidth.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug import std
from cubeplug.bench.raw_arrays import ArrayLibrary

#: The ops ``--ops`` selects from, in the order the rows are measured and shown.
OPS = (
    "fill",
    "copy",
    "axpy",
    "reduce_sum",
    "reduce",
    "argmax",
    "reduce_axis",
    "scan",
    "transpose",
    "map",
    "matmul",
)

#: The value ``fill`` writes and the ``a`` of ``axpy``.
FILL_VALUE = 1.5
AXPY_A = 0.5


@cl.func
def bench_map2(a, b):  # type: ignore[no-untyped-def]
    """The ``map`` row's function of two inputs (the raw side runs the same expression)."""
    return a * b + a


@dataclass(frozen=True)
class Case:
    """One row: cubeplug's call, the library's call for the same work (None: no library), a check of
    cubeplug's first result (an error message, or None when it is right) and the work of one call."""

    op: str
    row: str
    dtype: str
    shape: tuple[int, ...]
    ours: Callable[[], object]
    check: Callable[[object], str | None]
    theirs: Callable[[], object] | None
    raw_call: str | None
    #: Bytes one call moves at least ("GB/s"), or floating-point operations ("TFLOP/s").
    work: float
    unit: str = "GB/s"
    #: Why the row is not measured on this device (then nothing else counts).
    skipped: str | None = None


def _close(got: np.ndarray, want: np.ndarray, rel: float) -> str | None:
    """None when ``got`` is within ``rel`` of ``want`` relative to ``want``'s largest magnitude."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    error = float(np.max(np.abs(got.astype(np.float64) - want))) / scale if want.size else 0.0
    return None if error <= rel else f"relative error {error:.3g} > {rel:g}"


def _equal(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    wrong = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
    return f"{wrong} of {want.size} elements differ from NumPy's" if wrong >= 0 else f"shape {got.shape}"


class Inputs:
    """The rows' inputs of one backend: host arrays, their device copies and the library's copies."""

    def __init__(self, client: Any, arrays: ArrayLibrary | None, n: int, side: int, mm: int) -> None:
        self.client, self.arrays = client, arrays
        self.n, self.side, self.mm = n, side, mm
        self._rng = np.random.default_rng(20)
        self._host: dict[str, np.ndarray] = {}
        self._device: dict[str, Any] = {}
        self._raw: dict[str, Any] = {}

    def host(self, name: str) -> np.ndarray:
        """``x``, ``y`` (n f32), ``m`` (side x side f32), ``a``, ``b`` (mm x mm f32 in [-0.5, 0.5)),
        ``a16``, ``b16`` (their f16 roundings)."""
        if name not in self._host:
            rng, n, side, mm = self._rng, self.n, self.side, self.mm
            if name in ("x", "y"):
                value = rng.random(n, dtype=np.float32)
            elif name == "m":
                value = rng.random((side, side), dtype=np.float32)
            elif name in ("a", "b"):
                value = rng.random((mm, mm), dtype=np.float32) - np.float32(0.5)
            elif name in ("a16", "b16"):
                value = self.host(name[0]).astype(np.float16)
            else:
                raise KeyError(name)
            self._host[name] = value
        return self._host[name]

    def array(self, name: str) -> Any:
        """The device copy of a host array, as a cubeplug Array (its ``handle`` is the buffer)."""
        if name not in self._device:
            self._device[name] = self.client.asarray(self.host(name))
        return self._device[name]

    def handle(self, name: str) -> Any:
        """The device buffer of a host array."""
        return self.array(name).handle

    def raw(self, name: str) -> Any:
        """The array library's copy of a host array."""
        assert self.arrays is not None
        if name not in self._raw:
            self._raw[name] = self.arrays.asarray(self.host(name))
        return self._raw[name]

    def close(self) -> None:
        """Drop every array (device memory goes back at the next cleanup)."""
        self._host.clear()
        self._device.clear()
        self._raw.clear()


def _read(client: Any, result: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A std result (Handle or Array) as a NumPy array of ``shape``."""
    handle = getattr(result, "handle", result)
    count = int(np.prod(shape)) if shape else 1
    out: np.ndarray = client.to_numpy(handle, dtype)[:count].reshape(shape)
    return out


def _lib_call(lib: ArrayLibrary | None, what: str) -> str | None:
    return f"{lib.name}.{what}" if lib else None


def _fill(inputs: Inputs) -> list[Case]:
    client, n, lib = inputs.client, inputs.n, inputs.arrays
    filled = client.empty(4 * n)
    raw: Any = lib.asarray(np.empty(n, np.float32)) if lib else None
    return [
        Case(
            "fill",
            "fill",
            "f32",
            (n,),
            lambda: std.fill(client, filled, n, FILL_VALUE),
            lambda got: _equal(_read(client, got, "f32", (n,)), np.full(n, FILL_VALUE, np.float32)),
            (lambda: raw.fill(FILL_VALUE)) if lib else None,
            _lib_call(lib, "ndarray.fill"),
            4.0 * n,
        )
    ]


def _copy(inputs: Inputs) -> list[Case]:
    client, n, lib = inputs.client, inputs.n, inputs.arrays
    x, hx, copied = inputs.handle("x"), inputs.host("x"), client.empty(4 * n)
    raw, rx = (lib.asarray(np.empty(n, np.float32)), inputs.raw("x")) if lib else (None, None)
    return [
        Case(
            "copy",
            "copy",
            "f32",
            (n,),
            lambda: std.copy(client, x, n, out=copied),
            lambda got: _equal(_read(client, got, "f32", (n,)), hx),
            functools.partial(lib.xp.copyto, raw, rx) if lib else None,  # looked up once, not timed
            _lib_call(lib, "copyto"),
            8.0 * n,
        )
    ]


def _axpy(inputs: Inputs) -> list[Case]:
    client, n, lib = inputs.client, inputs.n, inputs.arrays
    x, hx, hy = inputs.handle("x"), inputs.host("x"), inputs.host("y")
    y = client.create(hy)  # written in place: not the shared ``y``
    want = (np.float32(AXPY_A) * hx + hy).astype(np.float64)  # the check sees the first call's result
    how = " (ElementwiseKernel)" if lib and lib.name == "cupy" else " (2 ufuncs with out=)"
    return [
        Case(
            "axpy",
            "axpy",
            "f32",
            (n,),
            lambda: std.axpy(client, AXPY_A, x, y, n),
            lambda got: _close(_read(client, got, "f32", (n,)), want, 1e-6),
            lib.axpy(AXPY_A, inputs.raw("x"), lib.asarray(hy)) if lib else None,
            f"{lib.name}: y = a * x + y in place{how}" if lib else None,
            12.0 * n,
        )
    ]


def _map(inputs: Inputs) -> list[Case]:
    client, n, lib = inputs.client, inputs.n, inputs.arrays
    x, y, hx, hy = inputs.handle("x"), inputs.handle("y"), inputs.host("x"), inputs.host("y")
    want = (hx * hy + hx).astype(np.float64)
    how = " (ElementwiseKernel)" if lib and lib.name == "cupy" else ""
    return [
        Case(
            "map",
            "map a * b + a (2 inputs)",
            "f32",
            (n,),
            lambda: std.map(client, bench_map2, x, y),
            lambda got: _close(_read(client, got, "f32", (n,)), want, 1e-6),
            lib.map2(inputs.raw("x"), inputs.raw("y")) if lib else None,
            f"{lib.name}: a * b + a{how}" if lib else None,
            12.0 * n,
        )
    ]


@dataclass(frozen=True)
class _VectorRow:
    """A row over the vector ``x``: cubeplug's call, the library function of the same name as
    ``raw`` (``xp.sum``...), NumPy's answer, the result's dtype and whether it holds n elements
    (else one), the relative tolerance (None: equality) and the bytes moved per element."""

    row: str
    ours: Callable[[Any, Any, int], object]
    raw: str
    want: Callable[[np.ndarray], np.ndarray]
    dtype: str
    whole: bool
    rel: float | None
    per_element: float


_VECTOR_ROWS = {
    "reduce_sum": _VectorRow("reduce_sum", std.reduce_sum, "sum",
                             lambda h: np.asarray(h.sum(dtype=np.float64)), "f32", False, 1e-5, 4.0),
    "reduce": _VectorRow("reduce max", lambda c, x, n: std.reduce(c, x, n, "max"), "max",
                         lambda h: np.asarray(h.max()), "f32", False, None, 4.0),
    "argmax": _VectorRow("argmax", std.argmax, "argmax", lambda h: np.asarray(h.argmax(), np.int64),
                         "u32", False, None, 4.0),
    "scan": _VectorRow("scan inclusive sum", std.scan, "cumsum", lambda h: np.cumsum(h, dtype=np.float64),
                       "f32", True, 1e-5, 8.0),
}  # fmt: skip


def _vector_case(op: str, inputs: Inputs) -> list[Case]:
    """The row of ``op`` (a key of :data:`_VECTOR_ROWS`)."""
    spec = _VECTOR_ROWS[op]
    client, n, lib = inputs.client, inputs.n, inputs.arrays
    x = inputs.handle("x")
    rx = inputs.raw("x") if lib else None

    def check(got: object) -> str | None:
        mine = _read(client, got, spec.dtype, (n,) if spec.whole else ())
        expected = spec.want(inputs.host("x"))
        if spec.rel is None:
            return _equal(mine.astype(expected.dtype), expected)
        return _close(mine, expected, spec.rel)

    raw = functools.partial(getattr(lib.xp, spec.raw), rx) if lib else None  # looked up once, not timed
    return [Case(op, spec.row, "f32", (n,), lambda: spec.ours(client, x, n), check, raw,
                 _lib_call(lib, spec.raw), spec.per_element * n)]  # fmt: skip


def _reduce_axis(inputs: Inputs) -> list[Case]:
    client, side, lib = inputs.client, inputs.side, inputs.arrays
    m, xp = inputs.array("m"), (lib.xp if lib else np)
    rm = inputs.raw("m") if lib else None
    cases = []
    for axis in (0, 1):

        def check(got: object, axis: int = axis) -> str | None:
            want = inputs.host("m").sum(axis=axis, dtype=np.float64)
            return _close(_read(client, got, "f32", (side,)), want, 1e-5)

        cases.append(
            Case(
                "reduce_axis",
                f"reduce_axis sum axis={axis}",
                "f32",
                (side, side),
                lambda axis=axis: std.reduce_axis(client, m, axis, "sum"),  # type: ignore[misc]
                check,
                (lambda axis=axis: xp.sum(rm, axis=axis)) if lib else None,  # type: ignore[misc]
                _lib_call(lib, f"sum(m, axis={axis})"),
                4.0 * side * side,
            )
        )
    return cases


def _transpose(inputs: Inputs) -> list[Case]:
    client, side, lib = inputs.client, inputs.side, inputs.arrays
    m = inputs.handle("m")
    rm: Any = inputs.raw("m") if lib else None

    def check(got: object) -> str | None:
        return _equal(_read(client, got, "f32", (side, side)), np.ascontiguousarray(inputs.host("m").T))

    return [
        Case(
            "transpose",
            "transpose",
            "f32",
            (side, side),
            lambda: std.transpose(client, m, side, side),
            check,
            (lambda: rm.T.copy()) if lib else None,
            f"{lib.name}: m.T.copy()" if lib else None,
            8.0 * side * side,
        )
    ]


def _raw_matmul(inputs: Inputs, a: str, b: str) -> Callable[[], object] | None:
    """The library's matmul of the same two matrices (None without a library)."""
    lib = inputs.arrays
    if lib is None:
        return None
    ra, rb = inputs.raw(a), inputs.raw(b)
    return functools.partial(lib.xp.matmul, ra, rb)  # looked up once, not timed


def _matmul_cases(inputs: Inputs, lib: ArrayLibrary | None) -> list[Case]:
    client, mm = inputs.client, inputs.mm
    rows = sorted({0, mm // 2, mm - 1})
    flops = 2.0 * mm**3
    cases = []
    for dtype, a_name, b_name in (("f32", "a", "b"), ("f16", "a16", "b16")):
        if dtype not in client.capabilities.dtypes:
            cases.append(Case("matmul", "matmul", dtype, (mm, mm, mm), lambda: None, lambda got: None, None,
                              None, flops, "TFLOP/s", f"the device declares no {dtype}"))  # fmt: skip
            continue
        ha, hb = inputs.host(a_name), inputs.host(b_name)
        da, db = inputs.handle(a_name), inputs.handle(b_name)
        extra = {"dtype": dtype} if dtype != "f32" else {}
        want = ha[rows].astype(np.float64) @ hb.astype(np.float64)
        # f32 accumulation over k terms of |a b| <= 1/4: about k ulps at worst; an f16 result adds
        # its own rounding (2^-11 of the largest value).
        tol = 1e-6 * mm + (float(np.max(np.abs(want))) * 2.0**-10 if dtype == "f16" else 0.0)

        def check(got: Any, want: np.ndarray = want, tol: float = tol) -> str | None:
            handle = getattr(got, "handle", got)
            out = "f16" if handle.size == 2 * mm * mm else "f32"
            error = float(np.max(np.abs(client.to_numpy(handle, out, (mm, mm))[rows] - want)))
            return None if error <= tol else f"max abs error {error:.3g} > {tol:.3g} ({out} result)"

        cases.append(
            Case(
                "matmul",
                "matmul",
                dtype,
                (mm, mm, mm),
                lambda da=da, db=db, extra=extra: std.matmul(client, da, db, mm, mm, mm, **extra),  # type: ignore[misc]
                check,
                _raw_matmul(inputs, a_name, b_name),
                f"{lib.name}.matmul ({dtype})" if lib else None,
                flops,
                "TFLOP/s",
            )
        )
    return cases


#: The row builders of each op.
_BUILDERS: dict[str, Callable[[Inputs], list[Case]]] = {
    "fill": _fill,
    "copy": _copy,
    "axpy": _axpy,
    **{op: functools.partial(_vector_case, op) for op in _VECTOR_ROWS},
    "reduce_axis": _reduce_axis,
    "transpose": _transpose,
    "map": _map,
    "matmul": lambda inputs: _matmul_cases(inputs, inputs.arrays),
}


def cases(inputs: Inputs, op: str) -> list[Case]:
    """The rows of one op of :data:`OPS` (its inputs are made, and shared with later rows, here)."""
    return _BUILDERS[op](inputs)
