"""The OpenCL backend (PyOpenCL): its own storage, in-order queues as streams, the ``c`` kernel dialect.

Devices of every platform are numbered together (``opencl:N``); ``[backends.opencl] platform`` and
``device_type`` filter them first. Runs for real on PoCL (any x86-64 CPU) and on GPU drivers.

Besides the files every backend has (plugin.py, storage.py, stream.py, compiler.py, server.py):
``devices.py`` (which devices are offered, their shared contexts) with ``probe_cache.py``,
``options.py`` (``[backends.opencl]``), ``transfers.py`` (uploads, reads, device copies),
``staging.py`` (pinned staging chunks and the transfer policy), ``release.py`` (releasing the
driver objects in a fixed order) and ``launch_path.py`` with ``_fastlaunch.c`` (the launch in C).
"""
