"""The reference CPU backend: numpy storage, a worker thread as the device, the ``python`` dialect.

It is the backend that always works, and the first one a backend author reads: every other
backend has the same files (plugin.py, storage.py, compiler.py, server.py, and queue.py for a single
device queue or stream.py for native streams; see :mod:`cubeplug.backends`). ``queue.py`` here is the
worker thread that runs the scheduler's batches.
"""
