"""A stateful test of the client on the CPU backend against a numpy model, with work from 4 threads.

The conformance suite's machine (:func:`cubeplug.testing.suite.model.machine`), run here on the CPU
client with more examples and longer runs: every rule runs its client calls on one of four worker
threads, each with its own stream, and returns as soon as the work is queued: launches on one stream
followed by reads on another only give the model's answer if cross-stream ordering is right.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from cubeplug.testing.suite.model import machine
from tests.conftest import make_cpu_client

ClientMachine = machine(make_cpu_client)
ClientMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None, database=None,
    suppress_health_check=list(HealthCheck),
)  # fmt: skip
TestClientMachine = ClientMachine.TestCase
