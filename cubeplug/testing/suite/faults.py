"""Faults: interrupts never lose accepted work silently, and a client never hangs in a forked child.

An interrupted flush, sync or read (a KeyboardInterrupt raised at every call and return of its
Python path in turn, and SIGINT at random moments of a launch/flush/read loop, fixed seeds) either
lets the work run or makes a later flush, sync or read raise
:class:`~cubeplug.core.errors.WorkDroppedError`; work never runs twice. In a child made by
``fork``, the parent's client raises
:class:`~cubeplug.core.errors.ForkedClientError` at once, and ``cubeplug.client()`` gives a working
client (or raises BackendUnavailableError saying to use the "spawn" start method); nothing hangs.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import BackendUnavailableError, CubeplugError, ForkedClientError, WorkDroppedError
from cubeplug.registry.selection import client as selected_client
from cubeplug.testing import gates, kernels

#: Launches per interrupt trial.
LAUNCHES = 40
#: Seconds a forked child may take before it counts as hung.
CHILD_TIMEOUT = 60.0


_SUITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # cubeplug/testing


class _Interrupt(KeyboardInterrupt):
    """The KeyboardInterrupt the tests inject (a subclass: nothing else raises it)."""


def _code_roots(client: Any) -> tuple[str, ...]:
    """The directories of cubeplug's package and of the package that holds the client's server (a
    third-party backend's): the code whose interrupt safety the suite checks. The driver libraries
    (wgpu-py, PyOpenCL, CuPy) are not ours to make interrupt-safe: on Vulkan an interrupt inside
    wgpu-py's own Python code crashed the process."""
    here = os.path.dirname(_SUITE)  # cubeplug/
    module = sys.modules.get(type(client.server).__module__.split(".")[0])
    backend = os.path.dirname(os.path.abspath(module.__file__)) if module and module.__file__ else here
    return tuple({here + os.sep, backend + os.sep})


def _interrupt_at_line(fn: Callable[[], Any], target: int, roots: tuple[str, ...]) -> int:
    """Run ``fn()`` with :class:`_Interrupt` raised at the ``target``-th point where a signal could
    land in the code under ``roots`` it runs (this thread): a function's entry or its return to its
    caller, which is where CPython runs signal handlers (on entry, after a call, on a backward jump);
    the number of points seen (fewer than ``target``: it ran to its end)."""
    seen = [0]

    def hit() -> None:
        seen[0] += 1
        if seen[0] == target:
            raise _Interrupt

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            hit()
        return trace

    def first(frame: FrameType, event: str, arg: Any) -> Any:
        # cubeplug's own code and the backend's (``roots``), not the standard library's (whose
        # locks are not interrupt-safe), a driver library's, nor the suite's
        name = frame.f_code.co_filename
        if event != "call" or name.startswith(_SUITE) or not name.startswith(roots):
            return None
        outer: FrameType | None = frame
        while outer is not None:  # not in finalizers: Python ignores (and reports) what they raise
            if outer.f_code.co_name == "__del__":
                return None
            outer = outer.f_back
        hit()
        return trace

    sys.settrace(first)  # this frame is not traced: only the frames fn() opens
    try:
        fn()
    except _Interrupt:
        pass
    finally:
        sys.settrace(None)
    return seen[0]


def _trial_outcome(client: Any, h: Any, accepted: int, in_flight: int = 0) -> str:
    """"ran" when every accepted launch ran once, "reported" when a WorkDroppedError said some were
    dropped (then none ran twice); fails otherwise. ``in_flight`` launches were interrupted around
    their call: each may have been accepted (it returned, the count was not yet raised) or not."""
    reported = False
    for _ in range(3):  # the error is raised once; the reads after it see what ran
        try:
            got = client.to_numpy(h, "i32")
            break
        except WorkDroppedError:
            reported = True
    else:  # pragma: no cover - a drop is raised once
        pytest.fail("WorkDroppedError raised at every read")
    assert (got == got[0]).all(), f"launches ran on part of the buffer: {got[:8]}"
    if reported:  # the interrupted launch may have been accepted: its own call can submit its batch
        assert got[0] <= accepted + in_flight, (
            f"{got[0]} launches ran, only {accepted} were accepted ({in_flight} more interrupted around "
            f"their call)"
        )
        return "reported"
    assert accepted <= got[0] <= accepted + in_flight, (
        f"silent loss: {accepted} launches accepted ({in_flight} more interrupted around their call), "
        f"{got[0]} ran, nothing raised"
    )
    return "ran"


def _flush_paths(client: Any, h: Any) -> list[Callable[[], Any]]:
    return [client.flush, client.sync, lambda: client.read([h]), lambda: client.sync(all_streams=True)]


class TestInterrupts:
    """A KeyboardInterrupt inside a flush, sync or read never loses accepted work silently."""

    def test_interrupt_at_every_point_of_a_flush(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        outcomes: dict[str, int] = {"ran": 0, "reported": 0}
        roots = _code_roots(c)
        for which in range(4):
            target = 1
            while target < 2000:
                h = c.create(np.zeros(n, np.int32))
                accepted = 0
                for _ in range(LAUNCHES):
                    c.launch(k, 1, [h], [n])
                    accepted += 1
                seen = _interrupt_at_line(_flush_paths(c, h)[which], target, roots)
                outcomes[_trial_outcome(c, h, accepted)] += 1
                if seen < target:  # the call ran to its end before the line: every line was tried
                    break
                target += 1 if target < 64 else 7
        assert outcomes["ran"], outcomes

    def test_sigint_at_random_moments(self, cubeplug_new_client: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            pytest.skip("signals reach the main thread only")
        c = cubeplug_new_client()
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        rng = random.Random(17)
        outcomes: dict[str, int] = {"ran": 0, "reported": 0, "interrupted": 0}

        def on_sigint(signum: int, frame: Any) -> None:
            raise _Interrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
        hook = sys.unraisablehook

        def unraisable(info: Any) -> None:  # a signal handled in a finalizer is ignored by Python
            if not isinstance(info.exc_value, _Interrupt):
                hook(info)

        sys.unraisablehook = unraisable
        try:
            for _trial in range(25):
                h = c.create(np.zeros(n, np.int32))
                c.sync()
                accepted = in_flight = 0
                main = threading.main_thread().ident
                assert main is not None
                timer = threading.Timer(rng.uniform(0.0, 0.01), signal.pthread_kill, (main, signal.SIGINT))
                try:
                    try:
                        timer.start()
                        for i in range(LAUNCHES):
                            # A signal can land after the launch returned and before the count is
                            # raised: the launch is then "in flight" (both stores of the tuple
                            # assignment leave the truth within accepted..accepted + in_flight).
                            in_flight = 1
                            c.launch(k, 1, [h], [n])
                            accepted, in_flight = accepted + 1, 0
                            if i % 7 == 3:
                                c.flush()
                            if i % 13 == 5:
                                c.read([h])
                        c.sync()
                        timer.join()
                    finally:
                        _stop(timer)
                except _Interrupt:
                    outcomes["interrupted"] += 1
                outcome = _absorb(lambda h=h, a=accepted, f=in_flight: _trial_outcome(c, h, a, f))
                outcomes[outcome] += 1
        finally:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = hook
        assert outcomes["ran"] + outcomes["reported"] == 25, outcomes
        done: list[int] = []  # the client still serves other threads: no lock was left held
        worker = threading.Thread(target=lambda: done.append(len(c.read([c.create(b"abcd")])[0])))
        worker.start()
        worker.join(30)
        assert done == [4], "another thread's call did not complete: a lock was left held"


def _stop(timer: threading.Timer) -> None:
    """Cancel the timer and wait for its thread, absorbing a signal that lands meanwhile."""
    while True:
        try:
            timer.cancel()
            timer.join()
            return
        except _Interrupt:
            continue


def _absorb(fn: Callable[..., str]) -> str:
    """``fn()``, run again when a late test interrupt lands in it."""
    while True:
        try:
            return fn()
        except _Interrupt:
            continue


# ---------------------------------------------------------------------------------------------- fork
def _child_inherited(client: Any, conn: Any) -> None:
    """In the child: the parent's client must refuse at once, with ForkedClientError."""
    results = []
    h = None
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("create", lambda: client.create(np.ones(4, np.float32))),
        ("empty", lambda: client.empty(64)),
        ("sync", lambda: client.sync()),
        ("flush", lambda: client.flush()),
        ("memory_usage", lambda: client.memory_usage()),
    ]
    for name, call in calls:
        try:
            h = call()
            results.append((name, "no error"))
        except ForkedClientError as e:
            results.append((name, "ForkedClientError" if "spawn" in str(e) else f"no remedy: {e}"))
        except BaseException as e:
            results.append((name, f"{type(e).__name__}: {e}"))
    del h
    conn.send(results)


def _child_fresh(backend: str, conn: Any) -> None:
    """In the child: cubeplug.client() gives a working client, or says to use spawn."""
    try:
        c = selected_client(backend)  # what cubeplug.client is
        h = c.create(np.arange(16, dtype=np.float32))
        k = kernels.ADD_ONE
        x = c.create(np.zeros(8, np.int32))
        if any(d in k.sources for d in c.server.dialects):
            c.launch(k, 1, [x], [8])
        got = c.to_numpy(h, "f32")
        ran = int(c.to_numpy(x, "i32")[0])
        conn.send(("ok", float(got.sum()), ran))
    except BackendUnavailableError as e:
        conn.send(("unavailable", str(e), 0))
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}", 0))


def _run_in_fork(target: Callable[..., None], *args: Any) -> Any:
    """Run ``target(*args, conn)`` in a forked child; its answer, or fail if it hangs or dies."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(CHILD_TIMEOUT):
            pytest.fail(f"the forked child hung ({CHILD_TIMEOUT:.0f} s without an answer)")
        answer = parent.recv()
    except EOFError:
        proc.join(5)
        pytest.fail(f"the forked child died without an answer (exit code {proc.exitcode})")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        parent.close()
    return answer


class TestFork:
    """A forked child gets a clear error for an inherited client and never hangs."""

    def test_inherited_client_raises_in_the_child(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        h = c.create(np.ones(4, np.float32))
        c.sync()
        results = _run_in_fork(_child_inherited, c)
        assert all(r == "ForkedClientError" for _, r in results), results
        np.testing.assert_array_equal(c.to_numpy(h, "f32"), np.ones(4, np.float32))  # the parent's works

    def test_new_client_in_the_child(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        c.create(np.ones(4, np.float32))
        c.sync()
        status, detail, _ran = _run_in_fork(_child_fresh, c.backend)
        if status == "unavailable":
            assert "spawn" in detail, detail
            return
        assert status == "ok", detail
        assert detail == float(np.arange(16).sum())
        assert c.to_numpy(c.create(np.ones(4, np.float32)), "f32").sum() == 4

    def test_errors_are_cubeplug_errors(self) -> None:
        assert issubclass(ForkedClientError, CubeplugError)
        assert issubclass(WorkDroppedError, CubeplugError)
