"""The OpenCL backend (PyOpenCL): its own storage, in-order queues as streams, the ``c`` kernel dialect.

Devices of every platform are numbered together (``opencl:N``); ``[backends.opencl] platform`` and
``device_type`` filter them first. Runs for real on PoCL (any x86-64 CPU) and on GPU drivers.
"""
