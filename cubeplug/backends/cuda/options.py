"""The ``[backends.cuda]`` options: parsed and checked once, when a client is built.

========================  ==============================================================  ==========
key                       meaning                                                         default
========================  ==============================================================  ==========
``max_page_size``         largest device page the pools allocate: bytes, ``"2GiB"`` or     ``"25%"``
                          a share of device memory such as ``"25%"``
``pitch_alignment``       largest row alignment of pitched tensors (a power of two, 16 to  ``512``
                          4096); ``0`` turns pitching off (tensors stay contiguous)
``launch``                kernel launch path: ``"driver"`` (``cuLaunchKernel`` on a       ``"auto"``
                          parameter block packed in place, through CuPy's binding or
                          cuda-python's), ``"cupy"`` (CuPy's ``Function`` call, as
                          RawKernel), ``"auto"`` (driver where available)
``pinned_pool_bytes``     pinned host memory the staging pool keeps for reuse              ``"256MiB"``
``staging_max_bytes``     largest transfer staged through pinned memory; larger ones use  ``"64MiB"``
                          the driver's own path for pageable memory (reads above 4 MiB
                          are copied on the device and downloaded that way anyway, off
                          the caller's thread; pinned memory is then their fallback)
``collectives``           ``"nccl"`` (NCCL through ``cupy.cuda.nccl``; missing NCCL is     ``"nccl"``
                          a CollectiveUnavailableError) or ``"portable"`` (cubeplug's
                          kernels and peer copies, as on the other backends)
========================  ==============================================================  ==========
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cubeplug.plugin import ConfigError, check_option_keys

LAUNCH_PATHS = ("auto", "driver", "cupy")
COLLECTIVES = ("nccl", "portable")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_WHERE = "[backends.cuda]"


@dataclass(frozen=True)
class CudaOptions:
    """Effective ``[backends.cuda]`` options (sizes in bytes; ``max_page_size`` may be a fraction)."""

    max_page_size: int | float = 0.25
    pitch_alignment: int = 512
    launch: str = "auto"
    pinned_pool_bytes: int = 256 << 20
    collectives: str = "nccl"
    staging_max_bytes: int = 64 << 20

    def page_size(self, total_memory: int) -> int:
        """The max page size in bytes for a device with ``total_memory`` bytes."""
        if isinstance(self.max_page_size, float):
            return max(1 << 20, int(total_memory * self.max_page_size))
        return self.max_page_size


def parse_bytes(value: Any, key: str) -> int:
    """A byte count from an int or a string such as ``"64MiB"``; ConfigError naming ``key`` if not."""
    if isinstance(value, bool):
        raise ConfigError(
            f"{_WHERE} {key} = {value!r} is not a size", key=key, allowed="bytes, e.g. 67108864 or '64MiB'"
        )
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{_WHERE} {key} = {value} is negative", key=key, allowed="a non-negative size")
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ConfigError(
        f"{_WHERE} {key} = {value!r} is not a size", key=key, allowed="bytes, e.g. 67108864 or '64MiB'"
    )


def _page_size(value: Any) -> int | float:
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            share = float(value.strip()[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise ConfigError(
                f"{_WHERE} max_page_size = {value!r} is not a share of device memory",
                key="max_page_size",
                allowed="a percentage in (0, 100], e.g. '25%'",
            )
        return share
    size = parse_bytes(value, "max_page_size")
    if size < 1 << 20:
        raise ConfigError(
            f"{_WHERE} max_page_size = {value!r} is below 1 MiB",
            key="max_page_size",
            allowed="at least 1 MiB, or a share such as '25%'",
        )
    return size


def _pitch(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (value == 0 or (16 <= value <= 4096 and value & (value - 1) == 0))
    ):
        raise ConfigError(
            f"{_WHERE} pitch_alignment = {value!r} is not allowed",
            key="pitch_alignment",
            allowed="0 (no pitching) or a power of two from 16 to 4096",
        )
    return value


def _launch(value: Any) -> str:
    if value not in LAUNCH_PATHS:
        raise ConfigError(
            f"{_WHERE} launch = {value!r} is not a launch path", key="launch", allowed=", ".join(LAUNCH_PATHS)
        )
    return str(value)


def _collectives(value: Any) -> str:
    if value not in COLLECTIVES:
        raise ConfigError(
            f"{_WHERE} collectives = {value!r} is not an implementation",
            key="collectives",
            allowed=", ".join(COLLECTIVES),
        )
    return str(value)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "collectives": _collectives,
    "max_page_size": _page_size,
    "pitch_alignment": _pitch,
    "launch": _launch,
    "pinned_pool_bytes": functools.partial(parse_bytes, key="pinned_pool_bytes"),
    "staging_max_bytes": functools.partial(parse_bytes, key="staging_max_bytes"),
}


def parse_options(raw: Mapping[str, Any]) -> CudaOptions:
    """Check and convert the ``[backends.cuda]`` table; ConfigError names a bad key and the allowed values."""
    check_option_keys("cuda", raw, _PARSERS)
    values: dict[str, Any] = {key: _PARSERS[key](value) for key, value in raw.items()}
    return CudaOptions(**values)
