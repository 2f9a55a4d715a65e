"""The Ray path: a local cluster of 2 actors (``ray.init(num_cpus=2)``), one cpu client each, doing the
same collectives as in one process, through ``devices=`` the Ray group; and its errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cubeplug[ray]')")

import cubeplug.ray as cpray  # noqa: E402
from cubeplug.collectives import run_threads  # noqa: E402
from cubeplug.core.errors import (  # noqa: E402
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
)

ROOT = Path(__file__).resolve().parents[2]


def test_workers_need_a_cluster() -> None:
    if ray.is_initialized():
        pytest.skip("a cluster is up (the module fixture's)")
    with pytest.raises(CollectiveError, match=r"ray.init\(\)"):
        cpray.Workers(2)


@pytest.fixture(scope="module")
def workers() -> Iterator[cpray.Workers]:
    """Two actors of a local cluster; the actors import this checkout (and this module) first."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "XDG_RUNTIME_DIR": "/tmp"}})  # fmt: skip
    made = cpray.Workers(2, "cpu")
    yield made
    made.shutdown()
    ray.shutdown()


def every_collective(rank: int, client: Any, peers: Any, n: int) -> dict[str, np.ndarray]:
    """One rank's part: the four collectives, as a user writes them for threads or for Ray."""
    x = client.asarray(np.arange(n, dtype=np.float32) * (rank + 1))
    client.all_reduce(x, x, devices=peers)
    b = client.asarray(np.full(n, rank, np.int32))
    client.broadcast(b if rank == 1 else None, b, 1, devices=peers)
    g = client.empty_array(2 * n, "f32")
    client.all_gather(client.asarray(np.full(n, rank + 0.5, np.float32)), g, devices=peers)
    s = client.empty_array(n, "f32")
    client.reduce_scatter(client.asarray(np.arange(2 * n, dtype=np.float32) + rank), s, "max", devices=peers)
    client.sync_collective()
    return {"all_reduce": x.numpy(), "broadcast": b.numpy(), "all_gather": g.numpy(),
            "reduce_scatter": s.numpy()}  # fmt: skip


def check(results: list[dict[str, np.ndarray]], n: int) -> None:
    for rank, got in enumerate(results):
        np.testing.assert_array_equal(got["all_reduce"], np.arange(n, dtype=np.float32) * 3)
        np.testing.assert_array_equal(got["broadcast"], np.full(n, 1, np.int32))
        np.testing.assert_array_equal(got["all_gather"], np.repeat([0.5, 1.5], n).astype(np.float32))
        np.testing.assert_array_equal(got["reduce_scatter"], np.arange(2 * n)[rank * n : (rank + 1) * n] + 1)


def test_the_same_function_on_ray_and_on_threads(workers: cpray.Workers) -> None:
    n = 1001
    check(workers.run(every_collective, n), n)
    clients = [workers_free_client(i) for i in range(2)]  # the same function, two threads, one process
    try:
        check(run_threads(every_collective, clients, n), n)
    finally:
        for c in clients:
            c.close()


def workers_free_client(device: int) -> Any:
    from cubeplug.testing.backend import BackendUnderTest

    return BackendUnderTest("cpu").fresh(device, backends={"cpu": {"devices": 2}})


def mismatched(rank: int, client: Any, peers: Any) -> str:
    x = client.asarray(np.ones(4 + rank, np.float32))
    try:
        client.all_reduce(x, x, devices=peers, timeout=30)
    except CollectiveMismatchError as exc:
        return str(exc)
    return "no error"


def one_never_comes(rank: int, client: Any, peers: Any) -> str:
    x = client.asarray(np.ones(4, np.float32))
    if rank == 1:
        return "stayed away"
    try:
        client.all_reduce(x, x, devices=peers, timeout=1)
    except CollectiveTimeoutError as exc:
        return str(exc)
    return "no error"


def still_works(rank: int, client: Any, peers: Any) -> list[float]:
    x = client.asarray(np.full(3, rank + 1.0, np.float32))
    client.all_reduce(x, x, "prod", devices=peers)
    return list(x.numpy())


def test_errors_across_actors(workers: cpray.Workers) -> None:
    for message in workers.run(mismatched):
        assert "rank 1: src 5, dst 5" in message
    first, second = workers.run(one_never_comes)
    assert "rank 1 never arrived within 1 s" in first and second == "stayed away"
    assert workers.run(still_works) == [[2.0] * 3, [2.0] * 3]  # the group goes on after both

