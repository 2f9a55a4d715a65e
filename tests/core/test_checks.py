"""The generated launch checks (cubeplug/core/checks.py) against the general check they stand for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import Buffer, Kernel, Scalar
from cubeplug.core.checks import make_checker
from cubeplug.core.client import ComputeClient
from cubeplug.core.errors import ValidationError

K = Kernel(
    "k",
    [Buffer("x", "f32"), Scalar("a", "f32"), Buffer("y", "u8"), Scalar("n", "u32"), Scalar("b", "bool")],
    {"python": lambda launch, x, a, y, n, b: None},
)


class Recorder:
    """The general check, recording that it was called."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, server: Any, kernel: Kernel, buffers: Any, scalars: Any) -> Any:
        self.calls += 1
        return server._check_arguments(kernel, buffers, scalars)


def test_plain_arguments_pass_inline_and_come_back_unchanged(cpu_client: ComputeClient) -> None:
    server = cpu_client.server
    k = Kernel("p", [Buffer("x", "f32"), Scalar("a", "f32"), Scalar("n", "u32")], {"python": lambda *a: None})
    general = Recorder()
    check = make_checker(k, 1, general)
    x = cpu_client.empty(16)
    scalars = [1.5, 7]
    assert check(server, [x], scalars) is scalars
    assert general.calls == 0


@pytest.mark.parametrize(
    "case",
    ["numpy_scalar", "integral_float_for_int", "bool_param", "out_of_range", "wrong_count",
     "wrong_type", "dropped", "foreign", "misaligned_size", "too_few_buffers"],
)
def test_anything_else_goes_to_the_general_check(cpu_client: ComputeClient, case: str) -> None:
    server = cpu_client.server
    other = ComputeClient(type(server)(server.storage.__class__()))
    general = Recorder()
    check = make_checker(K, 1, general)
    x, y = cpu_client.empty(16), cpu_client.empty(3)
    buffers: list[Any] = [x, y]
    scalars: list[Any] = [1.0, 3, True]
    expect_error = True
    if case == "numpy_scalar":
        scalars[0] = np.float32(2.0)
        expect_error = False
    elif case == "integral_float_for_int":
        scalars[1] = 3.0
        expect_error = False
    elif case == "bool_param":
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
    if expect_error:
        with pytest.raises(ValidationError) as generated:
            check(server, buffers, scalars)
        with pytest.raises(ValidationError) as full:
            server._check_arguments(K, buffers, scalars)
        assert str(generated.value) == str(full.value)
    else:
        out = check(server, buffers, scalars)
        assert [type(v) for v in out] == [np.float32, np.uint32, np.bool_]
    assert general.calls == 1
    other.close()


def test_offsets_off_the_alignment_take_the_general_path(cpu_client: ComputeClient) -> None:
    k = Kernel("p", [Buffer("x", "u8")], {"python": lambda launch, x: None})
    general = Recorder()
    check = make_checker(k, 256, general)
    x = cpu_client.empty(1024)
    check(cpu_client.server, [x.offset_start(256)], [])
    assert general.calls == 0
    check(cpu_client.server, [x.offset_start(4)], [])
    assert general.calls == 1


def test_launch_rejects_misaligned_views_and_keeps_other_handles(cpu_client: ComputeClient) -> None:
    k = Kernel("p", [Buffer("x", "f32")], {"python": lambda launch, x: None})
    x = cpu_client.create(np.arange(8, dtype=np.float32))
    with pytest.raises(ValidationError, match="not a multiple of its element size"):
        cpu_client.launch(k, 1, [x.offset_end(2)])
    cpu_client.launch(k, 1, [x])
    assert cpu_client.to_numpy(x, "f32").tolist() == list(range(8))
