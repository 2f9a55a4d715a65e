"""Fixtures of the tests of cubeplug.testing."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """No automatic collection during the test (garbage stays until the test collects it), and the
    objects from before the test frozen, out of the collector's sight: late in the suite a full
    collection walks 6M objects (3 s here), where the test's own few thousand are what it checks."""
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()
