"""``@cl.func``: a device helper inlined into the kernels that call it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cubeplug.lang.errors import NotInKernelError
from cubeplug.lang.source import Captured, capture


class LangFunc:
    """A helper function for kernels; its body is inlined at every call (no recursion)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "func")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = fn.__doc__

    @functools.cached_property
    def captured(self) -> Captured:
        """The parsed source (captured on first use)."""
        return capture(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotInKernelError(f"@cl.func {self.__qualname__} can only be called inside a kernel")

    def __repr__(self) -> str:
        return f"<cl.func {self.__qualname__}>"


def func(fn: Callable[..., Any]) -> LangFunc:
    """Decorator: a helper callable from kernels and other helpers, inlined at each call."""
    return LangFunc(fn)
