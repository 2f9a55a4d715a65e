"""The portable collectives: what ``client.all_reduce`` and the others run on a backend without its own.

Every backend gets them: device reductions written once in :mod:`cubeplug.lang` (one kernel,
comptime dtype and op, :mod:`cubeplug.collectives.kernels`) plus ``client.copy_to`` between the
participants (device to device where the backend copies between its devices, else through the
host). Importing this package installs them as the core's default
(:func:`cubeplug.core.collective.install_portable`); ``cubeplug.client`` imports it. A backend with a
collective library of its own (NCCL on cuda) returns it from ``ComputeServer.new_collectives``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from cubeplug.collectives.portable import PortableCollectives
from cubeplug.core.collective import install_portable

install_portable(PortableCollectives)

__all__ = ["PortableCollectives", "run_threads"]


def run_threads(fn: Callable[..., Any], clients: Sequence[Any], *args: Any) -> list[Any]:
    """``fn(rank, client, clients, *args)`` for every client, each on a thread of its own (the way
    collectives are called in one process), and each rank's result; the first rank's error is raised
    once every thread ended. ``cubeplug.ray.Workers.run`` calls the same ``fn`` in Ray actors."""
    results: list[Any] = [None] * len(clients)
    errors: list[BaseException | None] = [None] * len(clients)

    def run(rank: int) -> None:
        try:
            results[rank] = fn(rank, clients[rank], clients, *args)
        except BaseException as exc:
            errors[rank] = exc

    threads = [threading.Thread(target=run, args=(r,), name=f"rank-{r}") for r in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for error in errors:
        if error is not None:
            raise error
    return results
