"""The WebGPU backend (wgpu-py): GPUBuffer pages, WGSL kernels, one batched submit per flush.

Nothing here imports wgpu at import time; the modules import it inside the functions that need it,
so ``import cubeplug`` works without wgpu installed.
"""
