"""Describing a device to the core, and reading a backend's options (docs/plugins.md).

A server hands :class:`~cubeplug.core.server.ComputeServer` four facts about its device: who it is
(:class:`DeviceInfo`), how its memory is paged (:class:`MemoryProperties`), what it can do
(:class:`Capabilities`) and the free-form ``client.properties``. :func:`device_setup` builds them
the same way for every backend: the fp16, fp64 and int64 flags follow from the dtypes, the largest
allocation is the largest page, and the properties start with the figures every backend reports.
A backend's options, the ``[backends.<name>]`` table of the config, are checked with
:func:`check_option_keys` before their values are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.errors import ConfigError
from cubeplug.core.storage import MemoryProperties


@dataclass(frozen=True)
class DeviceSetup:
    """What a server tells the core about its device: the device arguments of ``ComputeServer``."""

    info: DeviceInfo
    memory_properties: MemoryProperties
    capabilities: Capabilities
    properties: dict[str, Any]

    def server_args(self) -> dict[str, Any]:
        """The keyword arguments of ``ComputeServer.__init__`` these facts fill."""
        return {
            "info": self.info,
            "memory_properties": self.memory_properties,
            "capabilities": self.capabilities,
            "properties": self.properties,
        }


def device_setup(
    info: DeviceInfo,
    memory: MemoryProperties,
    *,
    dtypes: Iterable[str],
    properties: Mapping[str, Any] | None = None,
    **capabilities: Any,
) -> DeviceSetup:
    """A device's :class:`DeviceSetup`.

    The capabilities get ``dtypes``, the ``fp16``, ``fp64`` and ``int64`` flags those dtypes imply,
    ``max_alloc_bytes`` of the largest page (unless given) and the other fields as given. The
    properties are the device's ``name``, ``max_page_size``, ``alignment`` and (where known)
    ``total_memory``, then the backend's own ``properties``.
    """
    names = frozenset(dtypes)
    capabilities.setdefault("max_alloc_bytes", memory.max_page_size)
    caps = Capabilities(
        dtypes=names, fp16="f16" in names, fp64="f64" in names, int64="i64" in names, **capabilities
    )
    props: dict[str, Any] = {
        "name": info.name,
        "max_page_size": memory.max_page_size,
        "alignment": memory.alignment,
    }
    if memory.total_memory is not None:
        props["total_memory"] = memory.total_memory
    props.update(properties or {})
    return DeviceSetup(info, memory, caps, props)


def check_option_keys(backend: str, options: Iterable[str], allowed: Iterable[str]) -> None:
    """ConfigError for the first key of ``[backends.<backend>]`` that is not one of ``allowed``."""
    known = tuple(allowed)
    for key in options:
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r} in [backends.{backend}]: an unknown option is an error (a typo?)",
                key=key,
                allowed=", ".join(known),
            )
