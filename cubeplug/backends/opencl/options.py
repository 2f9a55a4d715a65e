"""The ``[backends.opencl]`` options, validated once per client.

``platform`` is a case-insensitive substring of a platform's name, vendor or version (``"pocl"``,
``"nvidia"``, ``"3.1"``); ``device_type`` is ``all``, ``gpu``, ``cpu`` or ``accelerator``. The
selector ``opencl:<filter>:N`` arrives as ``filter`` and takes the place of ``platform`` (or of
``device_type`` when it is ``gpu``, ``cpu`` or ``accelerator``). ``profiling`` (default true) opens
the queues with profiling so that ``client.profile`` times on the device. ``native_launch`` (default
true) launches through the compiled launcher when it is built (``launch_path.py``), and replays
pre-bound graphs through its C loop.
``command_buffers`` (default false) replays captured graphs through ``cl_khr_command_buffer`` where
the device has it; false: through pre-bound kernels (``replay.py``). Off by default because it was
the slower replay wherever it exists: 1000 tiny launches cost 1.0x eager through PoCL 3.1's command
buffer against 0.52x pre-bound (the 2-core CI machine), 1.48x against 1.04x on PoCL 5.0 (the GPU
machine's host), and NVIDIA's driver 580 has no extension (bench/bench_graphs.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cubeplug.plugin import Config, ConfigError, check_option_keys

NAME = "opencl"
DEVICE_TYPES = ("all", "gpu", "cpu", "accelerator", "default")
OPTIONS = ("platform", "device_type", "profiling", "native_launch", "command_buffers", "filter")


@dataclass(frozen=True)
class OpenCLOptions:
    """The validated ``[backends.opencl]`` options."""

    platform: str | None = None
    device_type: str = "all"
    profiling: bool = True
    #: Launch (and replay pre-bound graphs) through the compiled extension when it is built;
    #: false: Python only.
    native_launch: bool = True
    #: Replay graphs through cl_khr_command_buffer where the device has it; false: pre-bound kernels.
    command_buffers: bool = False


def options(config: Config) -> OpenCLOptions:
    """The ``[backends.opencl]`` options of ``config``; ConfigError naming a bad key or value."""
    raw = config.backend_options(NAME)
    where = "[backends.opencl]"
    check_option_keys(NAME, raw, OPTIONS)
    platform = raw.get("platform")
    selector_filter = raw.get("filter")
    if isinstance(selector_filter, str) and selector_filter.lower() in DEVICE_TYPES[1:4]:
        raw["device_type"] = selector_filter  # opencl:gpu:0 filters by device type
    elif selector_filter:
        platform = selector_filter
    if platform is not None and (not isinstance(platform, str) or not platform.strip()):
        raise ConfigError(f"{where} platform must be a non-empty string, got {platform!r}", key="platform")
    device_type = str(raw.get("device_type", "all")).lower()
    if device_type not in DEVICE_TYPES:
        raise ConfigError(
            f"{where} device_type {raw.get('device_type')!r} is not valid",
            key="device_type", allowed=", ".join(DEVICE_TYPES),
        )
    defaults = {"profiling": True, "native_launch": True, "command_buffers": False}
    flags = {key: raw.get(key, default) for key, default in defaults.items()}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where} {key} must be true or false, got {value!r}", key=key)
    return OpenCLOptions(platform.strip() if platform else None, device_type, **flags)


def describe_filter(opts: OpenCLOptions) -> str:
    """The device filter in words, for error messages."""
    parts = []
    if opts.platform:
        parts.append(f"platform matching {opts.platform!r}")
    if opts.device_type != "all":
        parts.append(f"type {opts.device_type}")
    return " and ".join(parts) or "no filter"
