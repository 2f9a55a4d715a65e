"""The builtins of the kernel language: positions, ``sync_cube``, arrays, math, atomics.

Each is a Python object the frontend recognises by identity; called from plain Python outside a
kernel, it raises :class:`NotInKernelError`. ``CUBE_DIM*`` fold to constants; ``UNIT_POS``,
``CUBE_POS`` and ``ABSOLUTE_POS`` without an axis are linear positions (as in CubeCL), lowered in
the frontend from the per-axis ones.
"""

from __future__ import annotations

from typing import Any

from cubeplug.lang.errors import NotInKernelError


class Intrinsic:
    """A function only meaningful inside a kernel."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotInKernelError(f"cubeplug.lang.{self.name}() can only be used inside a @cl.kernel")

    def __repr__(self) -> str:
        return f"<cubeplug.lang builtin {self.name}>"


class Position:
    """A position builtin (``UNIT_POS_X``...); a u32 value inside a kernel."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<cubeplug.lang position {self.name}>"

    def __index__(self) -> int:
        raise NotInKernelError(f"cubeplug.lang.{self.name} only has a value inside a @cl.kernel")


_AXES = ("X", "Y", "Z")
POSITION_NAMES = tuple(
    f"{base}{suffix}"
    for base in ("ABSOLUTE_POS", "UNIT_POS", "CUBE_POS", "CUBE_DIM", "CUBE_COUNT")
    for suffix in ("", "_X", "_Y", "_Z")
)
POSITIONS: dict[str, Position] = {name: Position(name) for name in POSITION_NAMES}

ABSOLUTE_POS = POSITIONS["ABSOLUTE_POS"]
ABSOLUTE_POS_X = POSITIONS["ABSOLUTE_POS_X"]
ABSOLUTE_POS_Y = POSITIONS["ABSOLUTE_POS_Y"]
ABSOLUTE_POS_Z = POSITIONS["ABSOLUTE_POS_Z"]
UNIT_POS = POSITIONS["UNIT_POS"]
UNIT_POS_X = POSITIONS["UNIT_POS_X"]
UNIT_POS_Y = POSITIONS["UNIT_POS_Y"]
UNIT_POS_Z = POSITIONS["UNIT_POS_Z"]
CUBE_POS = POSITIONS["CUBE_POS"]
CUBE_POS_X = POSITIONS["CUBE_POS_X"]
CUBE_POS_Y = POSITIONS["CUBE_POS_Y"]
CUBE_POS_Z = POSITIONS["CUBE_POS_Z"]
CUBE_DIM = POSITIONS["CUBE_DIM"]
CUBE_DIM_X = POSITIONS["CUBE_DIM_X"]
CUBE_DIM_Y = POSITIONS["CUBE_DIM_Y"]
CUBE_DIM_Z = POSITIONS["CUBE_DIM_Z"]
CUBE_COUNT = POSITIONS["CUBE_COUNT"]
CUBE_COUNT_X = POSITIONS["CUBE_COUNT_X"]
CUBE_COUNT_Y = POSITIONS["CUBE_COUNT_Y"]
CUBE_COUNT_Z = POSITIONS["CUBE_COUNT_Z"]

#: Math builtins: name -> (number of args, float only).
MATH: dict[str, tuple[int, bool]] = {
    "sqrt": (1, True), "exp": (1, True), "log": (1, True), "sin": (1, True), "cos": (1, True),
    "tanh": (1, True), "floor": (1, True), "ceil": (1, True), "abs": (1, False),
    "min": (2, False), "max": (2, False), "pow": (2, True), "fma": (3, True),
}
#: Atomic builtins: name -> number of value args (after array and index).
ATOMICS: dict[str, int] = {
    "atomic_add": 1, "atomic_sub": 1, "atomic_min": 1, "atomic_max": 1, "atomic_exchange": 1,
    "atomic_compare_exchange": 2,
}

sync_cube = Intrinsic("sync_cube")
shared = Intrinsic("shared")
local = Intrinsic("local")
sqrt = Intrinsic("sqrt")
exp = Intrinsic("exp")
log = Intrinsic("log")
sin = Intrinsic("sin")
cos = Intrinsic("cos")
tanh = Intrinsic("tanh")
floor = Intrinsic("floor")
ceil = Intrinsic("ceil")
pow = Intrinsic("pow")
fma = Intrinsic("fma")
atomic_add = Intrinsic("atomic_add")
atomic_sub = Intrinsic("atomic_sub")
atomic_min = Intrinsic("atomic_min")
atomic_max = Intrinsic("atomic_max")
atomic_exchange = Intrinsic("atomic_exchange")
atomic_compare_exchange = Intrinsic("atomic_compare_exchange")


class _Unrolled:
    """What ``unroll(range(...))`` returns outside a kernel: the range itself, iterable."""

    def __init__(self, r: range) -> None:
        self.range = r

    def __iter__(self) -> Any:
        return iter(self.range)


def unroll(r: range) -> Any:
    """``for i in unroll(range(N))``: the loop is expanded at specialization (comptime bounds)."""
    return _Unrolled(r)


INTRINSICS: dict[str, Intrinsic] = {
    v.name: v for v in globals().copy().values() if isinstance(v, Intrinsic)
}
