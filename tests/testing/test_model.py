"""The stateful model's teardown: memory must be back to zero once its handles are dropped; a handle
that only garbage holds (a reference cycle) does not fail it, one still referenced does."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cubeplug.testing.suite.model import machine
from tests.conftest import make_cpu_client


def _model() -> Any:
    model = machine(make_cpu_client)()
    model.create(0, [1, 2, 3])  # a live entry the teardown reads and drops
    return model


def test_teardown_frees_a_handle_held_only_by_a_reference_cycle(no_automatic_gc: None) -> None:
    model = _model()
    cycle: list[Any] = [model.client.create(b"\0" * 64)]
    cycle.append(cycle)
    del cycle
    model.teardown()  # collects the cycle, then finds memory back to zero


def test_teardown_fails_while_a_handle_is_still_referenced(no_automatic_gc: None) -> None:
    before = set(threading.enumerate())
    model = _model()
    held = model.client.create(b"\0" * 64)
    with pytest.raises(AssertionError, match="bytes_in_use"):
        model.teardown()
    assert not held.is_dropped
    # The workers stop all the same.
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
