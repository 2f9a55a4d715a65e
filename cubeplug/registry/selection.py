"""Backend selection: selectors, `cubeplug.use()`, precedence, auto-selection, cached clients.

Users' guide: docs/backends.md and docs/config.md.

Precedence, first that is set wins: the argument in code > ``with cubeplug.use(...)`` > the environment
(``CUBEPLUG_BACKEND``, and ``CUBEPLUG_DEVICE`` for the device index) > the project config's
``[backend] default`` > the user config's > auto. Auto walks the backends by ``[backend] order``, then
GPU before CPU and by priority, probing each and recording why it was skipped; a GPU backend whose
device is a software implementation (lavapipe, PoCL's CPU device: ``Probe.software``) is passed over
unless ``[backend] order`` names it; the CPU reference backend comes last and always works. Clients
are cached per (backend, device, filter, overrides), so several backends live in one process and
``cubeplug.client("cpu")`` returns the same client each time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field, replace
from typing import Any

from cubeplug.core.array import Array
from cubeplug.core.client import ComputeClient
from cubeplug.core.config import EffectiveConfig
from cubeplug.core.errors import BackendUnavailableError, ConfigError, ValidationError
from cubeplug.registry import plugins, settings
from cubeplug.registry.plugins import PluginRegistry
from cubeplug.registry.selector import Selector, parse_selector

#: Re-exported: selection is where users of the registry look for selectors.
__all__ = [
    "Device", "Selection", "Selector", "client", "clients", "device_count", "devices", "enumerate_devices",
    "parse_selector", "reset", "resolve", "select", "use",
]  # fmt: skip

_current: ContextVar[Selector | None] = ContextVar("cubeplug_selector", default=None)


#: The process default set by a plain ``cubeplug.use()`` call (below a ``with`` block's choice).
_default: Selector | None = None
_default_lock = threading.Lock()


class use:
    """``cubeplug.client()`` with no argument selects ``selector``.

    Called plainly, ``cubeplug.use("cpu")`` sets the process default, for every thread, from then on
    (as ``matplotlib.use`` does). As a context manager, ``with cubeplug.use("cpu"):`` scopes it to the
    block in the current thread or task (a contextvar; blocks nest) and leaves the process default
    as it was. A block's choice comes before the process default.
    """

    def __init__(self, selector: str | Selector) -> None:
        global _default
        self.selector = parse_selector(selector, source="cubeplug.use()")
        self._token: Token[Selector | None] | None = None
        with _default_lock:
            self._previous, _default = _default, self.selector

    def __enter__(self) -> Selector:
        global _default
        with _default_lock:  # the block scopes the choice instead: the default goes back
            if _default is self.selector:
                _default = self._previous
        self._token = _current.set(self.selector)
        return self.selector

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)

    def __repr__(self) -> str:
        return f"cubeplug.use({str(self.selector)!r})"


def resolve(
    selector: str | Selector | None = None,
    *,
    config: EffectiveConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Selector, str]:
    """The selector that applies by precedence, and where it came from."""
    if selector is not None:
        return parse_selector(selector, source="argument"), "argument"
    current = _current.get()
    if current is not None:
        return current, "cubeplug.use()"
    if _default is not None:
        return _default, "cubeplug.use() (process default)"
    env = os.environ if env is None else env
    backend = env.get("CUBEPLUG_BACKEND", "").strip()
    if backend:
        sel, origin = parse_selector(backend, "environment variable CUBEPLUG_BACKEND"), "env CUBEPLUG_BACKEND"
    else:
        if config is None:
            config = settings.effective_config()
        where = config.origin("backend.default")
        sel, origin = parse_selector(config.config.backend.default, str(where)), str(where)
        if where.kind == "default":
            origin = "default (auto)"
    device = env.get("CUBEPLUG_DEVICE", "").strip()
    if device:
        if not device.isdigit():
            raise ConfigError(
                f"bad device index {device!r}",
                source="environment variable CUBEPLUG_DEVICE",
                key="CUBEPLUG_DEVICE",
                allowed="a device index: 0, 1, ...",
            )
        sel, origin = replace(sel, device=int(device)), f"{origin} + env CUBEPLUG_DEVICE"
    return sel, origin


@dataclass(frozen=True)
class Selection:
    """What selection chose: selector and origin, backend and device, and why auto skipped the others."""

    selector: Selector
    origin: str
    backend: str
    device: int
    skipped: tuple[tuple[str, str], ...] = field(default=())

    def explain(self) -> str:
        """A one-paragraph account of the choice, for logs and ``cubeplug doctor``."""
        text = f"{self.backend}:{self.device} from {self.selector} ({self.origin})"
        if self.skipped:
            text += "; skipped " + "; ".join(f"{n}: {r}" for n, r in self.skipped)
        return text


def select(
    selector: str | Selector | None = None,
    *,
    config: EffectiveConfig | None = None,
    registry: PluginRegistry | None = None,
) -> Selection:
    """Choose the backend and device for ``selector`` by precedence, probing; raise if it cannot be used."""
    config = config or settings.effective_config()
    reg = registry or plugins.registry()
    reg.configure(config.config)  # before any probe: a probe may list what the config asks for
    sel, origin = resolve(selector, config=config)
    if sel.is_auto:
        name, skipped = _auto(reg, config.config.backend.order)
        return Selection(sel, origin, name, sel.device or 0, skipped)
    backend = reg.backend(sel.backend)  # unknown, blocked or failed: raises
    probe = reg.probe(sel.backend)
    if not probe.ok:
        install = backend.spec.install_hint
        hint = f" ({install})" if install and install not in probe.reason else ""
        raise BackendUnavailableError(
            f"backend {sel.backend!r} selected by {origin} is unavailable here: {probe.reason}{hint}"
        )
    return Selection(sel, origin, sel.backend, sel.device or 0)


def _auto(reg: PluginRegistry, order: list[str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    skipped: list[tuple[str, str]] = []
    for entry in reg.load_all():
        if entry.status in ("failed", "blocked"):
            skipped.append((entry.name, f"{entry.status}: {entry.reason}"))
    backends = {b.name: b for b in reg.loaded_backends()}
    for name in order:
        if name not in backends and name not in {n for n, _ in skipped}:
            skipped.append((name, "named in [backend] order but not installed"))

    def rank(name: str) -> tuple[int, int, int, str]:
        spec = backends[name].spec
        pos = order.index(name) if name in order else len(order)
        return (pos, spec.kind == "cpu", -spec.priority, name)

    for name in sorted(backends, key=rank):
        probe = reg.probe(name)
        if not probe.ok:
            skipped.append((name, f"unavailable: {probe.reason}"))
        elif probe.software and name not in order and backends[name].spec.kind != "cpu":
            device = probe.devices[0] if probe.devices else "its device 0"
            skipped.append((name, f"software device ({device}): a GPU API on the CPU is slower than the CPU "
                                  f"backend, so auto-selection passes it over; ask for {name!r} by name or "
                                  f"list it in [backend] order"))  # fmt: skip
        else:
            return name, tuple(skipped)
    reasons = "; ".join(f"{n}: {r}" for n, r in skipped) or "no backend is installed"
    raise BackendUnavailableError(f"auto-selection found no usable backend ({reasons})")


# ---------------------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class Device:
    """One device of a usable backend: ``cubeplug.client(device.selector)`` drives it."""

    backend: str
    index: int
    name: str

    @property
    def selector(self) -> str:
        """The selector of this device, e.g. ``"cuda:1"``."""
        return f"{self.backend}:{self.index}"

    def __str__(self) -> str:
        return f"{self.selector} {self.name}"


def devices(backend: str | None = None) -> list[Device]:
    """Every device of ``backend``, or of every usable backend (in the order ``cubeplug list`` shows),
    as its probe lists them. A backend that is not usable here has no devices; an unknown name raises
    (the error names the installed backends)."""
    reg = plugins.registry()
    reg.configure(settings.effective_config().config)
    if backend is not None:
        reg.backend(backend)  # unknown, blocked or failed: raises
        names = [backend]
    else:
        reg.load_all()
        names = [b.name for b in reg.loaded_backends()]
    found: list[Device] = []
    for name in names:
        probe = reg.probe(name)
        if probe.ok:
            found.extend(Device(name, i, dev) for i, dev in enumerate(probe.devices))
    return found


#: The seed's (CubeCL's) name for :func:`devices`.
enumerate_devices = devices


def device_count(backend: str | None = None) -> int:
    """How many devices ``backend`` offers here (0 where it is not usable); with no name, every usable
    backend's devices together (CubeCL's ``device_count_total``)."""
    return len(devices(backend))


# ---------------------------------------------------------------------------------------- clients
_clients: dict[tuple[Any, ...], ComputeClient] = {}
_clients_lock = threading.RLock()


def client(selector: str | Selector | None = None, **overrides: Any) -> ComputeClient:
    """The client for ``selector`` (argument > use() > env > config > auto), cached per backend and device.

    Keyword overrides change config values for this client only, e.g. ``memory_limit="1GiB"`` or
    ``streaming={"max_streams": 2}``; a client with overrides is cached under them too.
    """
    eff = settings.effective_config()
    selection = select(selector, config=eff)
    sel = selection.selector
    key = (
        selection.backend,
        selection.device,
        sel.filter,
        tuple(sorted((k, repr(v)) for k, v in overrides.items())),
    )
    cached = _clients.get(key)
    if cached is not None and not cached.closed:
        return cached
    with _clients_lock:
        cached = _clients.get(key)
        if cached is not None and not cached.closed:  # a closed client is replaced
            return cached
        config = settings.with_overrides(eff, overrides) if overrides else eff
        if sel.filter is not None:
            config = settings.with_overrides(
                config, {"backends": {selection.backend: {"filter": sel.filter}}}, "selector"
            )
        reg = plugins.registry()
        if eff.origin("logging.level").kind != "default":  # never override the application's logging
            logging.getLogger("cubeplug").setLevel(eff.config.logging.level.upper())
        made = reg.build_client(selection.backend, selection.device, config.config)
        _clients[key] = made
        return made


#: DLPack device types that a built-in backend takes: kDLCPU, kDLCUDA (and kDLCUDAHost, pinned
#: host memory, which the cpu backend reads).
_DLPACK_BACKENDS = {1: "cpu", 2: "cuda", 3: "cpu"}


#: :func:`client`, under a name that :func:`from_dlpack`'s ``client`` argument does not hide.
_client_of = client


def from_dlpack(obj: Any, client: ComputeClient | None = None) -> Array:
    """``obj`` (anything with ``__dlpack__``, e.g. a numpy array, a CuPy array or a torch tensor)
    as a :class:`~cubeplug.Array`, on ``client`` or, by default, on the client of the object's
    device (the cpu backend for host memory, ``cuda:<id>`` for CUDA memory). Zero copy where the
    backend can take the memory (see ``ComputeClient.asarray``), a copy otherwise."""
    if client is None:
        if isinstance(obj, Array):
            return obj
        device = getattr(obj, "__dlpack_device__", None)
        if device is None or not hasattr(obj, "__dlpack__"):
            raise ValidationError(
                f"from_dlpack takes an object with __dlpack__ and __dlpack_device__, got "
                f"{type(obj).__name__}; for other data use client.asarray(obj)"
            )
        kind, index = device()
        name = _DLPACK_BACKENDS.get(int(kind))
        if name is None:
            raise ValidationError(
                f"no cubeplug backend takes DLPack device type {kind}; copy the data to the host "
                f"and pass that (or pass client= explicitly)"
            )
        client = _client_of(name if name == "cpu" else f"{name}:{int(index)}")
    elif not hasattr(obj, "__dlpack__") and not isinstance(obj, Array):
        raise ValidationError(
            f"from_dlpack takes an object with __dlpack__, got {type(obj).__name__}; for other data "
            f"use client.asarray(obj)"
        )
    return client.asarray(obj)


def clients() -> list[ComputeClient]:
    """Every client created through :func:`client` in this process."""
    with _clients_lock:
        return list(_clients.values())


def reset() -> None:
    """Close and forget every cached client, the registry and the config (for tests)."""
    global _default
    _current.set(None)
    _default = None
    with _clients_lock:
        for made in _clients.values():
            with contextlib.suppress(Exception):
                made.close()
        _clients.clear()
    plugins.reset_registry()
    settings.reset_config()


def _after_fork_in_child() -> None:
    """In a forked child: fresh locks (another thread of the parent may have held one at the fork, and
    the child would wait for it forever). The cached clients stay: each refuses work in the child
    (ForkedClientError), and ``client()`` replaces it as it replaces a closed one."""
    global _clients_lock, _default_lock
    _clients_lock = threading.RLock()
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
