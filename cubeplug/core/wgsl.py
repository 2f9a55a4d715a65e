"""The ``wgsl`` dialect's conventions shared by the webgpu backend and the kernel language.

A WGSL source reaches buffer param ``p`` as ``p``, an ``array<T>`` binding (docs/kernels.md). A
source whose first line is :data:`STRUCT_BUFFERS` reaches it as ``p.data`` instead: the backend
then declares each buffer as a struct holding the array. The generated code is the same, save how
naga lowers it to SPIR-V: a plain runtime array is reached through a pointer that naga takes once
when the entry point starts, a struct member by one access chain from the binding. With the
kernel language's local arrays split into variables (``codegen_wgsl.split_locals``), NVIDIA's
Vulkan compiler then schedules the register-blocked matmul better: 36.4 -> 42.3 TFLOP/s for
``reg_8x16_vec_db16`` on the H100, where either change alone gained nothing (docs/std.md,
"Vulkan"). So :mod:`cubeplug.lang` writes its WGSL so.
"""

from __future__ import annotations

#: The first line of a WGSL source that reaches its buffers as struct members.
STRUCT_BUFFERS = "// cubeplug: struct buffers"
#: The member holding a buffer's array in that form: ``p.data[i]``.
BUFFER_MEMBER = "data"
