"""Shader modules without wgpu's runtime checks, for unchecked launches.

wgpu makes every shader safe on its own: naga clamps each index into its array (a ``min`` against
the array's length before every access) and gives every loop a counter that ends it after 2^64
steps. An unchecked launch (``ExecutionMode.UNCHECKED``) is the caller's promise that the kernel
stays in bounds, as CubeCL's wgpu runtime reads it too (``create_shader_module_trusted`` with no
runtime checks): the kernel is then built without them. Checked launches keep them.

wgpu-native has ``wgpuDeviceCreateShaderModuleTrusted``; wgpu-py 0.32 does not wrap it, so this
module calls it through wgpu-py's own cffi binding (``wgpu.backends.wgpu_native._api``, a private
module) the way wgpu-py's ``create_shader_module`` calls ``wgpuDeviceCreateShaderModule``. When
that binding is not what it expects (another wgpu-py), :func:`trusted_module` returns None and the
backend builds the checked module: slower, never wrong.
"""

from __future__ import annotations

import functools
from typing import Any

#: wgpu-native's WGPUShaderRuntimeChecks_None: no bounds checks, no forced loop bounds.
_NO_CHECKS = 0


@functools.cache
def _binding() -> Any | None:
    """wgpu-py's wgpu-native binding module when it has what :func:`trusted_module` calls, else None."""
    try:
        from wgpu.backends.wgpu_native import _api
    except ImportError:  # pragma: no cover - another wgpu backend
        return None
    needed = ("ffi", "lib", "libf", "new_struct_p", "to_c_string_view", "GPUShaderModule")
    if not all(hasattr(_api, name) for name in needed):
        return None
    if not hasattr(_api.libf, "wgpuDeviceCreateShaderModuleTrusted"):
        return None
    return _api


def trusted_module(device: Any, code: str, label: str = "") -> Any | None:
    """A GPUShaderModule of the WGSL ``code`` without runtime checks, or None where this wgpu-py
    cannot build one (the caller then builds a checked module). Raises wgpu's GPUError for code
    that does not compile, as ``device.create_shader_module`` does."""
    api = _binding()
    internal = getattr(device, "_internal", None)
    if api is None or internal is None:
        return None
    # As wgpu-py's create_shader_module builds them: new_struct_p keeps what a struct points to
    # (the source text) alive as long as the struct.
    source = api.new_struct_p("WGPUShaderSourceWGSL *", code=api.to_c_string_view(code))
    source[0].chain.next = api.ffi.NULL
    source[0].chain.sType = api.lib.WGPUSType_ShaderSourceWGSL
    descriptor = api.new_struct_p(
        "WGPUShaderModuleDescriptor *",
        nextInChain=api.ffi.cast("WGPUChainedStruct *", source),
        label=api.to_c_string_view(label),
    )
    handle = api.libf.wgpuDeviceCreateShaderModuleTrusted(internal, descriptor, _NO_CHECKS)
    if handle == api.ffi.NULL:  # pragma: no cover - wgpu raises its GPUError first
        return None
    return api.GPUShaderModule(label, handle, device)
