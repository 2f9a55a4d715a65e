"""Clients for the kernel-language tests: cpu always; opencl (PoCL), webgpu (lavapipe) and cuda
(``gpu`` marker) when present, built as tests/std builds them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.std.conftest import make_client, skip_reason

BACKENDS = (
    pytest.param("cpu"),
    pytest.param("opencl"),
    pytest.param("webgpu"),
    pytest.param("cuda", marks=pytest.mark.gpu),
)


@pytest.fixture(scope="session", params=BACKENDS)
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One client per backend for the whole session."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    made = make_client(request.param)
    yield made
    made.close()


@pytest.fixture(scope="session")
def cpu() -> Iterator[Any]:
    """A CPU client (the interpreter)."""
    made = make_client("cpu")
    yield made
    made.close()
