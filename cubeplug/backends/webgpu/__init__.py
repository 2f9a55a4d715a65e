"""The WebGPU backend (wgpu-py): GPUBuffer pages, WGSL kernels, one batched submit per flush.

Nothing here imports wgpu at import time; the modules import it inside the functions that need it,
so ``import cubeplug`` works without wgpu installed.

Besides the files every backend has (plugin.py, which also selects the adapter, storage.py,
compiler.py, server.py, and queue.py, WebGPU having one queue per device and no native streams):
``reads.py`` (read-backs: mappable staging buffers, their mapping, their futures) and ``health.py``
(device loss).
"""
