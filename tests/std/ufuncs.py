"""``@cl.func`` element functions for the tests of ``std.map``."""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl


@cl.func
def saxpy(a: Any, b: Any) -> Any:
    """``2a + b``."""
    return a * 2 + b


@cl.func
def neg(a: Any) -> Any:
    """``0 - a`` (wraps for u32, as numpy's)."""
    return 0 - a


@cl.func
def fma3(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` converted to f32."""
    return cl.f32(a * b + c)
