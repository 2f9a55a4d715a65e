"""The python dialect: callables and source text, CompileError with line numbers."""

from __future__ import annotations

import numpy as np
import pytest

from cubeplug import Buffer, CompileError, Kernel, Scalar

SOURCE = """
def scale(launch, x, factor):
    x *= factor * FACTOR
"""


def test_source_text_with_defines(cpu_client) -> None:  # type: ignore[no-untyped-def]
    k = Kernel(
        "scale", [Buffer("x", "f32"), Scalar("factor", "f32")], {"python": SOURCE}, defines={"FACTOR": 2}
    )
    x = cpu_client.create(np.ones(3, dtype=np.float32))
    cpu_client.launch(k, 1, [x], [3.0])
    np.testing.assert_array_equal(cpu_client.to_numpy(x, "f32"), [6, 6, 6])


def test_syntax_error_is_a_compile_error_with_line(cpu_client) -> None:  # type: ignore[no-untyped-def]
    k = Kernel("bad", [Buffer("x", "f32")], {"python": "def bad(launch, x):\n    x +=\n"})
    with pytest.raises(CompileError) as info:
        cpu_client.launch(k, 1, [cpu_client.empty(4)])
    err = info.value
    assert err.line == 2 and err.backend == "cpu" and err.kernel == "bad"
    assert "   2 |     x +=" in err.dump()
    cpu_client.launch(Kernel("ok", [], {"python": lambda launch: None}), 1)  # the client still works


def test_missing_entry_point(cpu_client) -> None:  # type: ignore[no-untyped-def]
    k = Kernel("entry", [], {"python": "def other(launch):\n    pass\n"})
    with pytest.raises(CompileError, match="no function named 'entry'"):
        cpu_client.launch(k, 1)


def test_vector_buffers_arrive_as_rows(cpu_client) -> None:  # type: ignore[no-untyped-def]
    def rows(launch, v):  # type: ignore[no-untyped-def]
        v[:, 3] = v[:, 0] + v[:, 1] + v[:, 2]

    k = Kernel("rows", [Buffer("v", "f32", vector=4)], {"python": rows})
    h = cpu_client.create(np.arange(8, dtype=np.float32))
    cpu_client.launch(k, 1, [h])
    np.testing.assert_array_equal(cpu_client.to_numpy(h, "f32"), [0, 1, 2, 3, 4, 5, 6, 15])


def test_launch_info(cpu_client) -> None:  # type: ignore[no-untyped-def]
    seen = []
    k = Kernel(
        "info", [], {"python": lambda launch: seen.append((launch.count, launch.cube_dim))}, cube_dim=(8, 2)
    )
    cpu_client.launch(k, (3, 2, 1))
    cpu_client.sync()
    assert seen == [((3, 2, 1), (8, 2, 1))]
