"""Driver objects are released by ``close()`` (or by the server's finalizer), never by the cyclic GC.

A server sits in reference cycles (client <-> server, memory management -> server). Whatever
driver objects those cycles still hold are released by the cyclic garbage collector, in no
particular order, on whichever thread collects. NVIDIA's OpenCL driver crashed there (a segfault in
``clReleaseMemObject`` inside ``gc.collect()`` on the out-of-memory path of a later test, releasing
sub-buffers of a closed client), so the cycles must hold no PyOpenCL object: these tests look into
what the collector would free and fail, on any platform, if a PyOpenCL object is among it. The last
test replays, in a subprocess, the sub-buffer pattern that crashed the driver itself.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from cubeplug import CompileError, Kernel
from cubeplug.backends.opencl.devices import device_context
from cubeplug.backends.opencl.storage import OpenCLStorage
from tests.backends.opencl.conftest import make_client, make_config, requires_opencl, test_selector
from tests.backends.opencl.kernels import ADD_ONE

pytestmark = requires_opencl

HELPER_THREADS = ("cubeplug-gc", "cubeplug-opencl-waiter", "cubeplug-opencl-release")


def _helpers() -> int:
    return sum(t.name in HELPER_THREADS for t in threading.enumerate())


def _opencl_garbage() -> list[str]:
    """The PyOpenCL objects (exceptions aside) that a full collection finds in garbage cycles."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(0)
    found = sorted(
        {
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith("pyopencl") and not isinstance(o, BaseException)
        }
    )
    gc.garbage.clear()
    gc.collect()
    return found


@pytest.fixture
def clean_gc() -> Iterator[None]:
    """No garbage of earlier tests in the collection these tests look at."""
    gc.collect()
    yield


def _exercise(c) -> None:  # type: ignore[no-untyped-def]
    """Touch every kind of driver object a server makes: queues on several streams, pages and
    sub-buffers bound to a kernel, staging chunks, pinned arrays, read markers, profiling fills."""
    n = 1 << 12
    x = c.create(np.zeros(4 * n, np.int32))
    views = [x.offset_start(k * n * 4).offset_end((3 - k) * n * 4) for k in range(4)]
    for v in views:
        c.launch(ADD_ONE, n // 64, [v], [n])

    def other_stream() -> None:
        y = c.create(np.ones(n, np.int32))
        c.launch(ADD_ONE, n // 64, [y], [n])
        c.launch(ADD_ONE, n // 64, [views[0]], [n])  # memory of another stream: pinned, waited for
        c.read_async([y]).result(timeout=60)

    t = threading.Thread(target=other_stream)
    t.start()
    t.join(timeout=60)
    with c.stream():
        assert c.to_numpy(x, "i32")[0] == 2
    _, duration = c.profile(lambda: c.launch(ADD_ONE, n // 64, [views[1]], [n]))
    assert duration.seconds() >= 0
    pinned = c.reserve_staging([4096])
    pinned[0][:] = 1
    c.create(pinned[0])
    c.memory_cleanup()
    c.sync()


class _Logged:
    """Stands in for a ``cl.Buffer``: records when it is released."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __del__(self) -> None:
        self.log.append(self.name)


def test_sub_buffers_are_released_before_their_page() -> None:
    # A fixed order, whatever holds the buffers: kernels let go, then sub-buffers, then the page.
    storage = OpenCLStorage(device_context(test_selector()[0], make_config()))
    log: list[str] = []
    forgot: list[bool] = []
    storage.forget_bindings = lambda: forgot.append(True)
    for sid in (1, 2):
        storage._pages[sid] = _Logged(log, f"page{sid}")
        storage._sizes[sid] = 256
        storage._subs[sid] = {(0, 8): _Logged(log, f"sub{sid}")}
    storage._reserved = 512
    storage.dealloc(1)
    assert log == ["sub1", "page1"] and forgot == [True]  # kernels let go of their sub-buffers first
    storage.close()
    assert log == ["sub1", "page1", "sub2", "page2"] and storage.reserved() == 0


def test_closed_client_leaves_no_driver_object_to_the_collector(clean_gc) -> None:  # type: ignore[no-untyped-def]
    before = _helpers()
    c = make_client()
    _exercise(c)
    c.close()
    assert _helpers() == before  # the helper threads stopped with close()
    del c
    assert _opencl_garbage() == []


def test_handles_outliving_their_closed_client(clean_gc) -> None:  # type: ignore[no-untyped-def]
    c = make_client()
    h = c.create(np.arange(1000, dtype=np.int32))
    view = h.offset_start(1024)
    c.launch(ADD_ONE, 1, [view], [16])
    c.close()
    c.close()  # twice is harmless
    del c, view
    assert _opencl_garbage() == []
    del h  # its page is gone already: dropping it now is harmless
    gc.collect()


def test_dropped_client_is_released_by_its_finalizer(clean_gc) -> None:  # type: ignore[no-untyped-def]
    before = _helpers()
    c = make_client()
    _exercise(c)
    c.launch(ADD_ONE, 1, [c.create(np.zeros(64, np.int32))], [64])  # work still queued
    del c  # never closed
    assert _opencl_garbage() == []  # the collection ran the finalizer, which released them first
    assert _helpers() == before


def test_failed_build_leaves_no_program_to_the_collector(clean_gc) -> None:  # type: ignore[no-untyped-def]
    c = make_client()
    try:
        with pytest.raises(CompileError):
            c.launch(Kernel("broken", [], {"c": "KERNEL broken() { not C at all }"}), 1)
    finally:
        c.close()
    del c
    assert _opencl_garbage() == []


LENT_AT_A_PAGE_START = """
import numpy as np
from tests.backends.opencl.conftest import make_client
from tests.backends.opencl.kernels import ADD_ONE

c = make_client()
align = c.capabilities.offset_alignment
for n in (24, 56, 104, 200, 248, 608, 1024, 3000):  # slices of different sizes, lent at the same places
    h = c.create(np.zeros(n, np.int32))
    c.launch(ADD_ONE, (n + 63) // 64, [h], [n])
    if n * 4 > align:
        view = h.offset_start(align)
        c.launch(ADD_ONE, 1, [view], [(n * 4 - align) // 4])
        del view
    assert c.to_numpy(h, "i32")[0] == 1
    del h
    c.sync()
c.close()
print("closed cleanly")
"""


VIEWS_ENDING_WITH_THEIR_HANDLE = """
import numpy as np
from tests.backends.opencl.conftest import make_client
from tests.backends.opencl.kernels import ADD_ONE

c = make_client()
align = c.capabilities.offset_alignment
other = c.create(np.zeros(512, np.int32))  # so that h is not at its page's start: h binds a sub-buffer
h = c.create(np.zeros(512, np.int32))
view = h.offset_start(align)  # another sub-buffer, ending where h's does
c.launch(ADD_ONE, 8, [h], [512])
c.launch(ADD_ONE, 8, [view], [512 - align // 4])
c.sync()
assert c.to_numpy(h, "i32")[align // 4] == 2
c.close()
print("closed cleanly")
"""


def run_apart(script: str) -> None:
    """Run ``script`` in its own interpreter: a driver crash fails the test, not the session."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "closed cleanly" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_a_handle_and_a_view_ending_with_it_release_cleanly() -> None:
    # Crashed NVIDIA's driver (580) at close while the sub-buffers were released oldest first.
    run_apart(VIEWS_ENDING_WITH_THEIR_HANDLE)


def test_slices_lent_at_a_page_start_release_cleanly() -> None:
    # The pattern that crashed NVIDIA's driver at close (run apart: a segfault fails this test, not the
    # session): slices of several sizes lent over time at the start of one page, each bound to a kernel.
    run_apart(LENT_AT_A_PAGE_START)
