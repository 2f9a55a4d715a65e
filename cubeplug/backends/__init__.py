"""Built-in backends; each registers through the ``cubeplug.backends`` entry-point group.

Each backend is a plugin as a third-party one is: it imports cubeplug only through
:mod:`cubeplug.plugin` (the plugin surface and the backend toolkit), never another backend, so any
of them could ship as a distribution of its own. Every backend folder has the same files, meaning
the same things:

- ``plugin.py``: the hook implementations (the entry point names this module);
- ``storage.py``: the :class:`~cubeplug.plugin.ComputeStorage` (raw device pages);
- ``stream.py``: the :class:`~cubeplug.plugin.EventStreamBackend` of a device with native streams
  (CUDA, OpenCL), or ``queue.py``: the one device queue that the core scheduler feeds (CPU, WebGPU);
- ``compiler.py``: the kernel dialects' compiler;
- ``server.py``: the :class:`~cubeplug.plugin.ComputeServer` subclass.

Anything else is named for what it does (``options.py``, ``transfers.py``, ``staging.py``...).
"""
