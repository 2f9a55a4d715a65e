"""Which sub-buffer patterns NVIDIA's OpenCL driver survives releasing at close (run each apart).

    python3 bench/probes/opencl_release_views.py PAIRS [ORDER]   e.g. "x,y x,yv"  (AXPY on each pair)

ORDER is how the storage releases at close: "subs" (sub-buffers, then pages: the storage's own
order), "reversed" (sub-buffers newest first), "pages" (pages first, then sub-buffers), "kernel"
(also set every kernel's buffer arguments to a page before the release).

Prints "closed cleanly" when the client closed without crashing the process.
"""
import sys

import numpy as np

from tests.backends.opencl.conftest import make_client
from tests.backends.opencl.test_launch_plan import AXPY

order = sys.argv[2] if len(sys.argv) > 2 else "subs"
client = make_client()
storage = client.server.cl_storage


def close() -> None:
    if order == "kernel":
        page = next(iter(storage._pages.values()))
        for compiled in client.launcher.compiled.values():
            prog = compiled.program
            for slot in prog.buffer_slots:
                prog.kernel.set_arg(slot, page)
    subs = storage._subs
    if order == "reversed":
        for page in list(subs):
            for key in reversed(list(subs[page])):
                del subs[page][key]
    elif order == "pages":
        storage._pages.clear()
        subs.clear()
    print("released", flush=True)


storage_close = storage.close
storage.close = lambda: (close(), storage_close())  # type: ignore[method-assign]
x = client.create(np.arange(512, dtype=np.float32))
y = client.create(np.ones(512, dtype=np.float32))
align = client.server.memory_properties.alignment
h = {"x": x, "y": y, "xv": x.offset_start(align), "yv": y.offset_start(align),
     "ye": y.offset_end(align), "xe": x.offset_end(align)}
for pair in sys.argv[1].split():
    a, b = (h[name] for name in pair.split(","))
    n = min(a.size, b.size) // 4
    client.launch(AXPY, 8, [a, b], [1.0, n])
client.sync()
print(sys.argv[1], "launched", flush=True)
client.close()
print("closed cleanly", flush=True)
