"""The suite's client factory: the clients it made are closed and let go at the end of the test,
though the factory itself may live on (a Hypothesis state machine class keeps it for the process)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from cubeplug.testing.backend import BackendUnderTest
from cubeplug.testing.fixtures import FreshClients
from cubeplug.testing.suite.model import machine


def test_clients_of_a_state_machine_are_freed_after_close(no_automatic_gc: None) -> None:
    clients = FreshClients(BackendUnderTest("cpu"))
    made: list[weakref.ref[Any]] = []

    def make() -> Any:
        client = clients.make()
        made.append(weakref.ref(client))
        return client

    run_state_machine_as_test(
        machine(make),
        settings=settings(max_examples=3, stateful_step_count=5, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck)),
    )  # fmt: skip
    clients.close()
    gc.collect()
    assert made  # the machine made its clients through the factory
    assert [ref for ref in made if ref() is not None] == []
