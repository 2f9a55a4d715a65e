"""The CUDA backend: NVIDIA GPUs through CuPy's runtime bindings, NVRTC kernels and CUDA streams.

Device memory comes from raw ``cudaMalloc`` pages cut by cubeplug's own pools (not CuPy's pool),
uploads and downloads go through a pool of pinned host buffers, work is ordered on non-blocking CUDA
streams with events, and a handle converts zero-copy to a CuPy array (:mod:`.interop`). No module
here imports CuPy at import time: only the functions that talk to the device do.
"""
