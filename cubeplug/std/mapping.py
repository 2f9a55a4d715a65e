"""``map``: a ``@cl.func`` applied elementwise to 1 to 3 inputs (cubeplug's ``ElementwiseKernel``).

One generic kernel per arity (:data:`KERNELS`) takes the user's function as a comptime value
``F``: lowering inlines ``F`` into a grid-stride loop, specialized for the input and output
dtypes. **Specializations are cached per function object and dtypes** (the comptime values are the
kernel's cache key; a ``@cl.func`` hashes by identity), so the first ``map`` of a function on a
client compiles and later ones launch the cached kernel. Define the function once, at module
level: a ``@cl.func`` made anew on each call compiles anew each time, and every one made stays
cached with its kernel.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.array import Array as DeviceArray
from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks
from cubeplug.std.combine import element_type, lang_type

CUBE = 256


@cl.kernel
def map1(
    a: Array[T], out: Array[U], n: u32,  # type: ignore[name-defined]  # noqa: F821
    F: Comptime[cl.LangFunc], T: Comptime[cl.DType], U: Comptime[cl.DType],
) -> None:
    """``out[i] = U(F(a[i]))``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        out[i] = U(F(a[i]))


@cl.kernel
def map2(
    a: Array[T], b: Array[T], out: Array[U], n: u32,  # type: ignore[name-defined]  # noqa: F821
    F: Comptime[cl.LangFunc], T: Comptime[cl.DType], U: Comptime[cl.DType],
) -> None:
    """``out[i] = U(F(a[i], b[i]))``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        out[i] = U(F(a[i], b[i]))


@cl.kernel
def map3(
    a: Array[T], b: Array[T], c: Array[T], out: Array[U], n: u32,  # type: ignore[name-defined]  # noqa: F821
    F: Comptime[cl.LangFunc], T: Comptime[cl.DType], U: Comptime[cl.DType],
) -> None:
    """``out[i] = U(F(a[i], b[i], c[i]))``."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        out[i] = U(F(a[i], b[i], c[i]))


#: The kernel of each arity.
KERNELS = {1: map1, 2: map2, 3: map3}


def _handle(value: Any, what: str) -> tuple[Handle, int | None]:
    """The handle of an input or output, and its element count when it is an Array."""
    if isinstance(value, DeviceArray):
        if not value.is_contiguous:
            raise ValidationError(f"map: {what} is a strided Array; pass a contiguous one (a copy)")
        return value.handle, value.size
    if isinstance(value, Handle):
        return value, None
    raise ValidationError(f"map: {what} must be a cubeplug Handle or Array, got {type(value).__name__}")


def map(client: Any, func: Any, *inputs: Any, out: Any = None, dtype: Any = None,
        out_dtype: Any = None) -> Any:
    """``out[i] = func(inputs[0][i], ...)`` for every element, ``func`` a ``@cl.func`` of 1 to 3
    arguments. Inputs are Handles or contiguous Arrays of ``dtype`` with the same element count;
    ``dtype`` defaults to the Arrays' own dtype (f32 for Handles alone), and an Array of another
    dtype is refused. The result (of ``out_dtype``, by default ``dtype``, or an ``out`` Array's)
    goes into ``out`` or into a new Handle (a new Array of the first input's shape when the first
    input is an Array), which is returned."""
    if not isinstance(func, cl.LangFunc):
        raise ValidationError(f"map applies a @cl.func, got {type(func).__name__}; decorate it with @cl.func")
    if not 1 <= len(inputs) <= 3:
        raise ValidationError(f"map takes 1 to 3 inputs, got {len(inputs)}")
    given = [v.dtype for v in inputs if isinstance(v, DeviceArray)]
    name = element_type(client, dtype if dtype is not None else (given[0] if given else "f32"), "map")
    for k, value in enumerate(inputs):
        if isinstance(value, DeviceArray) and str(value.dtype) != str(DTYPES[name]):
            raise ValidationError(
                f"map: input {k} is an Array of {value.dtype}, the map's dtype is {name}; pass "
                f"inputs of one dtype (or dtype= that matches them)"
            )
    if out_dtype is None and isinstance(out, DeviceArray):
        out_dtype = out.dtype
    out_name = name if out_dtype is None else element_type(client, out_dtype, "map (out_dtype)")
    if isinstance(out, DeviceArray) and str(out.dtype) != str(DTYPES[out_name]):
        raise ValidationError(
            f"map: out is an Array of {out.dtype}, not {out_name}; pass out_dtype= that matches"
        )
    size = DTYPES[name].itemsize
    handles = []
    counts = set()
    for k, value in enumerate(inputs):
        h, count = _handle(value, f"input {k}")
        counts.add(h.size // size if count is None else count)
        handles.append(h)
    if len(counts) != 1:
        raise ValidationError(f"map: the inputs hold different element counts {sorted(counts)}; pass views "
                              "of equal length")
    n = checks.count(counts.pop())
    for k, h in enumerate(handles):
        checks.buffer(client, h, n * size, f"map: input {k}")
    out_size = DTYPES[out_name].itemsize
    first = inputs[0]
    result: Any
    if out is None:
        result = (client.empty_array(first.shape, out_name) if isinstance(first, DeviceArray)
                  else client.empty(n * out_size))
    else:
        result = out
    target, _ = _handle(result, "out")
    checks.buffer(client, target, n * out_size, "map: out")
    if n:
        KERNELS[len(handles)].launch_unchecked(
            client, CubeCount(checks.groups(n, CUBE)), CUBE, *handles, target, n, F=func,
            T=lang_type(name), U=lang_type(out_name),
        )
    return result
