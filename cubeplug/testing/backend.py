"""The backend under test: which one the suite runs against, and how it gets clients for it.

The shared client is ``cubeplug.client(selector)``, so the suite exercises the same selection and
plugin path users take. Tests that need their own configuration (a memory limit) or clean memory
figures get a fresh client built through the plugin registry from a modified config, so the shared
client is never touched. A built-in backend whose entry point is not registered in this
environment (a source checkout installed before the backend existed) is registered in process.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cubeplug.core.errors import BackendUnavailableError

# The registry is imported inside the functions below, not here: this module loads with the pytest
# plugin (entry point ``pytest11``) in every pytest session of an environment holding cubeplug, and
# the registry brings the client and numpy (about 0.1 s) that a session not testing cubeplug never needs.
if TYPE_CHECKING:
    from cubeplug.core.client import ComputeClient

#: The module variable a test module sets to name the backend it runs the suite against.
MODULE_VARIABLE = "CUBEPLUG_BACKEND"


def env_selector(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The selector in ``CUBEPLUG_TEST_<NAME>`` (e.g. ``CUBEPLUG_TEST_OPENCL=opencl:pocl:0``), if set."""
    env = os.environ if env is None else env
    value = env.get(f"CUBEPLUG_TEST_{name.upper().replace('-', '_')}", "").strip()
    return value or None


def resolve_selector(
    option: str | None, module_backend: str | None, env: Mapping[str, str] | None = None
) -> str:
    """The selector to test: the module's backend (its device refined by the option or the variable).

    A test module that names its backend runs against it whatever ``--cubeplug-backend`` says; the
    option (or the variable) only picks its device or platform when it names the same backend.
    With neither, the selector is ``"auto"`` (configuration and environment decide).
    """
    from cubeplug.registry.selection import parse_selector

    if module_backend:
        name = parse_selector(module_backend).backend
        if option and parse_selector(option).backend == name:
            return option
        return env_selector(name, env) or module_backend
    return option or "auto"


@dataclass(frozen=True)
class BackendUnderTest:
    """A selector and the clients the suite makes for it."""

    selector: str

    @property
    def name(self) -> str:
        """The backend's name as the selector gives it (``"auto"`` until a client is made)."""
        from cubeplug.registry.selection import parse_selector

        return parse_selector(self.selector).backend

    def client(self) -> ComputeClient:
        """The process-wide client of the selector (``cubeplug.client``); BackendUnavailableError if none."""
        from cubeplug.registry.selection import client

        try:
            return client(self.selector)
        except BackendUnavailableError:
            if not register_builtin(self.name):
                raise
        return client(self.selector)

    def fresh(self, device: int | None = None, **sections: Any) -> ComputeClient:
        """A new client of the selector (or of its backend's ``device``), its config's ``sections``
        overridden (``memory={"limit": 1}``)."""
        from cubeplug.registry.plugins import registry
        from cubeplug.registry.selection import select
        from cubeplug.registry.settings import effective_config, with_overrides

        self.client()  # the same availability checks (and fallback registration) as the shared client
        eff = effective_config()
        selection = select(self.selector, config=eff)
        config = with_overrides(eff, sections, "conformance suite") if sections else eff
        if selection.selector.filter is not None:
            config = with_overrides(
                config, {"backends": {selection.backend: {"filter": selection.selector.filter}}}, "selector"
            )
        reg = registry()
        reg.configure(eff.config)
        index = selection.device if device is None else device
        return reg.build_client(selection.backend, index, config.config)


def register_builtin(name: str) -> bool:
    """Register ``cubeplug.backends.<name>.plugin`` in process when no entry point names it; True if done."""
    from cubeplug.registry.plugins import register_backend, registry

    if name == "auto" or name in registry().names():
        return False
    try:
        module = importlib.import_module(f"cubeplug.backends.{name}.plugin")
    except ImportError:
        return False
    register_backend(module)
    return True


def cpu_client() -> ComputeClient:
    """A fresh reference CPU client, the other end of ``to_client`` tests (made by name, through the
    registry, as any backend's: the suite imports no backend)."""
    return BackendUnderTest("cpu").fresh()
