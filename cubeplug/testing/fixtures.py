"""The suite's pytest fixtures: the backend under test and the clients tests use.

They come with ``from cubeplug.testing.suite import *`` (so a two-line test module works with or
without the pytest plugin) and with the plugin (for ``pytest --pyargs cubeplug.testing``). A test
module names its backend with ``CUBEPLUG_BACKEND = "name"``; otherwise ``--cubeplug-backend``
decides (see :func:`cubeplug.testing.backend.resolve_selector`). A backend that cannot run here
skips the suite with the selection's reason; a plugin that fails to load is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cubeplug.core.errors import BackendUnavailableError
from cubeplug.testing.backend import MODULE_VARIABLE, BackendUnderTest, cpu_client, resolve_selector

#: The command-line option naming the backend (``NAME[:DEVICE]``, any selector).
BACKEND_OPTION = "--cubeplug-backend"


@pytest.fixture(scope="module")
def cubeplug_backend(request: pytest.FixtureRequest) -> BackendUnderTest:
    """The backend under test, from the module's ``CUBEPLUG_BACKEND``, the option or the environment."""
    option = request.config.getoption("cubeplug_backend", default=None)
    module_backend = getattr(request.module, MODULE_VARIABLE, None)
    backend = BackendUnderTest(resolve_selector(option, module_backend))
    try:
        backend.client()
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    return backend


@pytest.fixture
def cubeplug_client(cubeplug_backend: BackendUnderTest) -> Iterator[Any]:
    """The shared client of the backend; every stream is synced after the test (raising its errors)."""
    client = cubeplug_backend.client()
    yield client
    client.sync(all_streams=True)


class FreshClients:
    """Makes fresh clients of a backend (``make(memory={"limit": n})``) and closes them all at the end."""

    def __init__(self, backend: BackendUnderTest) -> None:
        self.backend = backend
        self.made: list[Any] = []

    def make(self, **sections: Any) -> Any:
        """A fresh client, closed by :meth:`close`."""
        client = self.backend.fresh(**sections)
        self.made.append(client)
        return client

    def close(self) -> None:
        """Close every client made, and forget them: ``make`` may outlive the test (Hypothesis keeps
        every state machine class, with the factory it was given, for the process), and a closed
        client still holds its device objects (a WebGPU device and its poll thread each)."""
        made, self.made = self.made, []
        for client in made:
            client.close()


@pytest.fixture
def cubeplug_new_client(cubeplug_backend: BackendUnderTest) -> Iterator[Callable[..., Any]]:
    """A factory of fresh clients (``make(memory={"limit": n})``), each closed after the test."""
    clients = FreshClients(cubeplug_backend)
    yield clients.make
    clients.close()


@pytest.fixture
def cubeplug_fresh_client(cubeplug_new_client: Callable[..., Any]) -> Any:
    """A fresh client of the backend with the effective config (clean memory figures)."""
    return cubeplug_new_client()


@pytest.fixture
def cubeplug_cpu_client() -> Iterator[Any]:
    """A fresh reference CPU client, closed after the test."""
    client = cpu_client()
    yield client
    client.close()
