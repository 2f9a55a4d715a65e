"""The CUDA backend: NVIDIA GPUs through CuPy's runtime bindings, NVRTC kernels and CUDA streams.

Device memory comes from raw ``cudaMalloc`` pages cut by cubeplug's own pools (not CuPy's pool),
uploads and downloads go through a pool of pinned host buffers, work is ordered on non-blocking CUDA
streams with events, and a handle converts zero-copy to a CuPy array (:mod:`.interop`). No module
here imports CuPy at import time: only the functions that talk to the device do.

Besides the files every backend has (plugin.py, storage.py, stream.py, compiler.py, server.py):
``device.py`` (probing, device properties, the current-device guard), ``options.py``
(``[backends.cuda]``), ``transfers.py`` (every copy: uploads, reads, pitched tensors, peer copies),
``staging.py`` (the pinned staging pool, staged reads), ``launch.py`` (kernel launchers),
``layout.py`` (the pitched tensor layout) and ``interop.py`` (zero-copy CuPy and CAI views).
"""
