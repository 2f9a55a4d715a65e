"""The reference CPU backend: numpy storage, a worker thread as the device, the ``python`` dialect.

It is the backend that always works, and the first one a backend author reads: every other
backend has the same files (plugin.py, storage.py, stream.py, compiler.py, server.py).
"""
