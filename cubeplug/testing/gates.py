"""Skips by declared capability, and nothing else: the only reasons the suite skips a test.

A test that needs a capability calls :func:`require` (or :func:`require_dtype`); the skip reason is
exactly ``"backend lacks <capability>"``, so a run's summary lists what each backend lacks. A
backend that compiles none of the suite's dialects skips every launch with
:data:`NO_DIALECT`. The suite never skips by backend name.
"""

from __future__ import annotations

from typing import Any

import pytest

from cubeplug.core.kernel import Kernel
from cubeplug.testing.kernels import SUITE_DIALECTS

#: The skip reason of launches on a backend whose dialects the suite has no kernels in.
NO_DIALECT = "backend compiles none of the suite's dialects"


def lacks(capability: str) -> str:
    """The skip reason for a missing capability."""
    return f"backend lacks {capability}"


def require(client: Any, capability: str) -> None:
    """Skip unless the client's capabilities declare ``capability`` (a true flag or a non-zero figure)."""
    if not client.capabilities.has(capability):
        pytest.skip(lacks(capability))


def require_dtype(client: Any, dtype: str) -> None:
    """Skip unless ``dtype`` is among the client's declared dtypes."""
    if dtype not in client.capabilities.dtypes:
        pytest.skip(lacks(dtype))


def compiles_suite_dialect(client: Any) -> bool:
    """True when the backend compiles one of the dialects the suite writes kernels in."""
    return any(d in SUITE_DIALECTS for d in client.server.dialects)


def suite_dialect(client: Any) -> str:
    """The first of the backend's dialects the suite writes kernels in; skip when there is none."""
    for dialect in client.server.dialects:
        if dialect in SUITE_DIALECTS:
            return str(dialect)
    pytest.skip(NO_DIALECT)


def kernel(client: Any, kernel: Kernel) -> Kernel:
    """``kernel`` once the backend is known to compile one of the suite's dialects and the kernel has it."""
    dialect = suite_dialect(client)
    if not any(d in kernel.sources for d in client.server.dialects):
        pytest.fail(
            f"the suite has no {dialect} source for kernel {kernel.name!r}: its parameters "
            f"({', '.join(sorted({p.dtype for p in kernel.params}))}) cannot be written in {dialect}, "
            f"yet the backend declares them in its capabilities"
        )
    return kernel
