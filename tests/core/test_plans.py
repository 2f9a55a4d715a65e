"""The generated launch plans (cubeplug/core/plans.py) against the general path they stand for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import Buffer, CubeCount, Kernel, Scalar
from cubeplug.core.client import ComputeClient
from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import ExecutionMode
from cubeplug.core.launcher import launch_general
from cubeplug.core.plans import QueueCode, make_plan
from cubeplug.core.stream import MultiStream
from tests.conftest import make_cpu_client
from tests.core.test_stream import RecordingBackend

K = Kernel(
    "k",
    [Buffer("x", "f32"), Scalar("a", "f32"), Buffer("y", "u8"), Scalar("n", "u32"), Scalar("b", "bool")],
    {"python": lambda launch, x, a, y, n, b: None},
)


class Recorder:
    """The general path, recording that it was called and what it queued."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, server: Any, kernel: Kernel, compiled: Any, count: Any, *rest: Any) -> Any:
        self.calls += 1
        return launch_general(server, kernel, compiled, count, *rest)


def plan_for(client: ComputeClient, kernel: Kernel, alignment: int, general: Recorder) -> Any:
    compiled = client.server.compile_kernel(kernel, ExecutionMode.CHECKED)
    return make_plan(kernel, compiled, alignment, general)


@pytest.fixture
def queued(cpu_client: ComputeClient, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What the CPU server's ``execute`` is asked to queue (instead of queueing it)."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cpu_client.server, "execute", lambda *args: calls.append(args))
    return calls


def test_plain_arguments_are_queued_inline_as_given(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]]
) -> None:
    k = Kernel("p", [Buffer("x", "f32"), Scalar("a", "f32"), Scalar("n", "u32")], {"python": lambda *a: None})
    general = Recorder()
    plan = plan_for(cpu_client, k, 1, general)
    x = cpu_client.empty(16)
    scalars = [1.5, 7]
    count = CubeCount(2)
    plan(cpu_client.server, count, [x], scalars, 5)
    assert general.calls == 0
    (sid, _, queued_count, buffers, values), = queued
    assert (sid, queued_count, buffers, values) == (5, count, [x], scalars) and values is scalars
    plan(cpu_client.server, CubeCount(0), [x], scalars, 5)  # an empty count queues nothing
    assert len(queued) == 1 and general.calls == 0


@pytest.mark.parametrize(
    "case",
    ["numpy_scalar", "integral_float_for_int", "bool_param", "out_of_range", "wrong_count",
     "wrong_type", "dropped", "foreign", "misaligned_size", "too_few_buffers", "dynamic_count"],
)
def test_anything_else_takes_the_general_path(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]], case: str
) -> None:
    server = cpu_client.server
    other = ComputeClient(type(server)(server.storage.__class__()))
    general = Recorder()
    plan = plan_for(cpu_client, K, 1, general)
    x, y = cpu_client.empty(16), cpu_client.empty(3)
    buffers: list[Any] = [x, y]
    scalars: list[Any] = [1.0, 3, True]
    count = CubeCount(1)
    expect_error = True
    if case == "numpy_scalar":
        scalars[0] = np.float32(2.0)
        expect_error = False
    elif case == "integral_float_for_int":
        scalars[1] = 3.0
        expect_error = False
    elif case == "bool_param":
        expect_error = False
    elif case == "dynamic_count":
        count = CubeCount.dynamic(cpu_client.create(np.ones(3, np.uint32)))
        expect_error = False
    elif case == "out_of_range":
        scalars[1] = -1
    elif case == "wrong_count":
        scalars = scalars[:2]
    elif case == "wrong_type":
        scalars[0] = "x"
    elif case == "dropped":
        dropped = cpu_client.empty(16)
        dropped.drop()
        buffers[0] = dropped
    elif case == "foreign":
        buffers[0] = other.empty(16)
    elif case == "misaligned_size":
        buffers[0] = cpu_client.empty(6)
    elif case == "too_few_buffers":
        buffers = buffers[:1]
    compiled = server.compile_kernel(K, ExecutionMode.CHECKED)
    if expect_error:
        with pytest.raises(ValidationError) as generated:
            plan(server, count, buffers, scalars, 0)
        with pytest.raises(ValidationError) as full:
            launch_general(server, K, compiled, count, buffers, scalars, 0)
        assert str(generated.value) == str(full.value)
        assert queued == []
    else:
        plan(server, count, buffers, scalars, 0)
        (_, _, _, _, values), = queued
        assert [type(v) for v in values] == [np.float32, np.uint32, np.bool_]
    assert general.calls == 1
    other.close()


def test_offsets_off_the_alignment_take_the_general_path(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]]
) -> None:
    k = Kernel("p", [Buffer("x", "u8")], {"python": lambda launch, x: None})
    general = Recorder()
    plan = plan_for(cpu_client, k, 256, general)
    x = cpu_client.empty(1024)
    plan(cpu_client.server, CubeCount(1), [x.offset_start(256)], [], 0)
    assert general.calls == 0
    plan(cpu_client.server, CubeCount(1), [x.offset_start(4)], [], 0)
    assert general.calls == 1


def test_the_client_launches_through_the_plan_and_reports_errors(cpu_client: ComputeClient) -> None:
    k = Kernel("p", [Buffer("x", "f32")], {"python": lambda launch, x: None})
    x = cpu_client.create(np.arange(8, dtype=np.float32))
    cpu_client.launch(k, 1, [x])
    assert k in cpu_client.launcher.checked_plans
    with pytest.raises(ValidationError, match="not a multiple of its element size"):
        cpu_client.launch(k, 1, [x.offset_end(2)])
    with pytest.raises(ValidationError, match="takes 1 buffers"):
        cpu_client.launch(k, 1, [])
    cpu_client.launch(k, 1, [x])
    assert cpu_client.to_numpy(x, "f32").tolist() == list(range(8))


def test_a_server_with_plans_is_released_by_reference_counting() -> None:
    import gc
    import weakref

    from tests.conftest import make_cpu_client

    client = make_cpu_client()
    k = Kernel("p", [Buffer("x", "f32")], {"python": lambda launch, x: None})
    client.launch(k, 1, [client.empty(4)])
    client.sync()
    server = weakref.ref(client.server)
    client.close()
    gc.disable()
    try:
        del client
        assert server() is None, "a plan must not hold its server in a reference cycle"
    finally:
        gc.enable()


@pytest.mark.parametrize("bad", [["not", "a", "kernel"], "kernel", None])
def test_something_that_is_not_a_kernel_is_a_validation_error(cpu_client: ComputeClient, bad: Any) -> None:
    x = cpu_client.create(np.arange(4, dtype=np.float32))
    for launch in (cpu_client.launch, cpu_client.launch_unchecked):
        with pytest.raises(ValidationError, match="launch takes a cubeplug.Kernel"):
            launch(bad, 1, [x])
    assert cpu_client.to_numpy(x, "f32").tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------- queue code
P = Kernel("p", [Buffer("x", "f32"), Scalar("a", "f32"), Scalar("n", "u32")], {"python": lambda *a: None})


def inline_plan(
    client: ComputeClient, ran: list[Any], max_streams: int = 4
) -> tuple[Any, MultiStream[Any, Any]]:
    """A plan of ``P`` whose backend lines record what they see, over a MultiStream of recording streams."""
    ms: MultiStream[Any, Any] = MultiStream(RecordingBackend(), max_streams)
    code = QueueCode(["ran.append((stream, b0, t0, s0, s1, count))"], {"ran": ran}, ms)
    compiled = client.server.compile_kernel(P, ExecutionMode.CHECKED)
    return make_plan(P, compiled, 1, Recorder(), code), ms


def test_queue_code_runs_inline_when_the_buffers_are_of_the_launching_streams_slot(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]]
) -> None:
    ran: list[Any] = []
    plan, ms = inline_plan(cpu_client, ran)
    x = cpu_client.empty(16)
    sid = x.stream
    state, _ = ms.enter(sid)  # the slot's stream exists once something ran on it
    cursor = state.cursor
    count = CubeCount(3)
    plan(cpu_client.server, count, [x], [1.5, 7], sid + 4)  # another stream of the same slot
    assert ran == [(state.stream, x, x.token, 1.5, 7, count)] and not queued
    assert x.token.stream == sid + 4, "the memory's last stream is recorded, as enter() does"
    assert state.cursor == cursor + 1
    plan(cpu_client.server, CubeCount(0), [x], [1.5, 7], sid)
    assert len(ran) == 1 and state.cursor == cursor + 1, "an empty count queues nothing"


def test_any_other_stream_case_goes_through_execute(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]]
) -> None:
    ran: list[Any] = []
    plan, ms = inline_plan(cpu_client, ran)
    x = cpu_client.empty(16)
    sid = x.stream
    server = cpu_client.server
    plan(server, CubeCount(1), [x], [1.0, 1], sid)  # no stream state for the slot yet
    ms.enter(sid)
    ms.enter(sid + 1)
    plan(server, CubeCount(1), [x], [1.0, 1], sid + 1)  # memory of another slot: a pin, maybe a wait
    x.token.stream = sid + 1
    plan(server, CubeCount(1), [x], [1.0, 1], sid)  # last used by another slot: maybe a wait
    assert not ran
    assert [(call[0], call[3]) for call in queued] == [(sid, [x]), (sid + 1, [x]), (sid, [x])]
    assert x.token.stream == sid + 1, "execute (here a recorder) is left to record the stream"


def test_an_unchecked_plan_passes_values_as_given_and_tests_only_the_handles(
    cpu_client: ComputeClient, queued: list[tuple[Any, ...]]
) -> None:
    fallbacks: list[Any] = []
    compiled = cpu_client.server.compile_kernel(K, ExecutionMode.UNCHECKED)
    plan = make_plan(K, compiled, 256, lambda *args: fallbacks.append(args[4]), checked=False)
    x, y = cpu_client.empty(64), cpu_client.empty(64)
    odd = y.offset_start(4)  # unaligned, and not whole f32 elements: not tested unchecked
    values = (np.float64(1.5), -3, "anything")  # passed on as they are, even the wrong ones
    plan(cpu_client.server, CubeCount(1), [x, odd], values, 0)
    assert fallbacks == [] and queued[-1][3:] == ([x, odd], values)
    other = make_cpu_client()
    try:
        cases: list[list[Any]] = [[x, other.empty(4)], [x, "not a handle"], [x]]
        for buffers in cases:
            plan(cpu_client.server, CubeCount(1), buffers, values, 0)
        plan(cpu_client.server, CubeCount(1), [x, y], values[:2], 0)
    finally:
        other.close()
    assert fallbacks == [*cases, [x, y]], "what the inlined queueing cannot take goes to the general path"
