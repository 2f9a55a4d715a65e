"""The CPU device queue: a worker thread that runs submitted batches in order.

The CPU backend has one queue, so it returns no EventStreamBackend (a backend's ``stream.py``) and
orders its virtual streams with the core scheduler, which hands each stream's batch here. Running
the work on a thread of its own makes it really asynchronous: a missing flush or a wrong
cross-stream order shows up as a wrong result, as it would on a GPU.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

Task = tuple[Callable[..., Any], tuple[Any, ...]]


class WorkerQueue:
    """Runs batches of ``(function, args)`` tasks in submission order on one thread."""

    def __init__(self, name: str = "cubeplug-cpu") -> None:
        self._queue: queue.SimpleQueue[list[Task] | None] = queue.SimpleQueue()
        #: Exceptions raised by tasks, surfaced by the server at the next flush or sync.
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, batch: list[Task]) -> None:
        """Queue a batch; its tasks run after every batch submitted before it.

        The batch's first task becomes its claim (:func:`claimed`): the worker runs the batch only if
        it claims it first, so a submission interrupted half-way is either run or dropped, and
        :meth:`settle` says which.
        """
        batch.insert(0, (_claim, ({},)))
        self._queue.put(batch)

    @staticmethod
    def settle(batch: list[Task], ran: int) -> int:
        """How many tasks of ``batch`` run, for a submission that raised: all of them when the worker
        claimed the batch, none when it did not (it then never runs it: the claim is taken here)."""
        if batch and batch[0][0] is _claim:
            claim: dict[str, str] = batch[0][1][0]
            if claim.setdefault("by", "dropped") == "worker":  # atomic: one of the two wins
                return len(batch)
            return 1  # the claim itself, which only says "dropped"
        return 0  # interrupted before it was handed over

    def fence(self) -> threading.Event:
        """An event set once everything submitted so far has run."""
        done = threading.Event()
        self._queue.put([(done.set, ())])
        return done

    def close(self) -> None:
        """Stop the worker after the work already submitted."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        get = self._queue.get
        while True:
            batch = get()
            if batch is None:
                return
            self._run_batch(batch)
            # Drop the batch (and the memory its bindings hold) before waiting for the next one.
            del batch

    def _run_batch(self, batch: list[Task]) -> None:
        for fn, args in batch:
            try:
                fn(*args)
            except _Dropped:  # its submission was interrupted and the batch reported as dropped
                return
            except BaseException as e:  # surfaced at the next flush/sync
                self.errors.append(e)


class _Dropped(Exception):
    """The worker lost the race for a batch's claim: the batch was reported dropped and is skipped."""


def _claim(claim: dict[str, str]) -> None:
    """A batch's first task: the worker claims the batch, unless its submitter took the claim first."""
    if claim.setdefault("by", "worker") != "worker":
        raise _Dropped
