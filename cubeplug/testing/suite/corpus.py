"""The bad-input corpus: well over a hundred distinct misuses of the public API, one test each.

Each case names the call, the specific exception it must raise and words its message must hold (the
thing that was wrong); after each, a reference handle still reads back exactly and the client still
launches (:class:`~cubeplug.testing.suite.bad_input.Keeper`). A case whose misuse cannot exist on a
backend (an offset alignment of 1 has no misaligned view) is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import BufferTooBig, ConfigError, CubeplugError, ValidationError
from cubeplug.core.kernel import Buffer, CubeCount, Kernel, Scalar
from cubeplug.testing import gates, kernels
from cubeplug.testing.suite.bad_input import Keeper


@dataclass
class Ctx:
    """What a case may use: the client, a spare handle of 64 u32, a dropped one, one of another client."""

    client: Any
    keeper: Keeper
    h: Any
    dropped: Any
    foreign: Any
    #: Makes a new client of the backend with config sections overridden.
    new_client: Callable[..., Any]

    def new(self, **sections: Any) -> Any:
        return self.new_client(**sections)

    @property
    def fill(self) -> Kernel:
        return gates.kernel(self.client, kernels.FILL)

    def typed(self, dtype: str) -> Kernel:
        return gates.kernel(self.client, kernels.typed_add(dtype))

    def pair(self) -> list[Any]:
        c = self.client
        return [c.create(np.zeros(4, np.uint32)), c.create(np.zeros(4, np.uint32))]

    def aligned_misfit(self) -> Any:
        align = int(self.client.capabilities.offset_alignment)
        if align <= 1:
            pytest.skip(gates.lacks("offset_alignment"))  # any byte offset binds: none is misaligned
        return self.keeper.handle.offset_start(align // 2)


@dataclass(frozen=True)
class Case:
    """A misuse: ``call(ctx)`` must raise ``error`` with ``words`` (a regex) in its message."""

    call: Callable[[Ctx], Any]
    error: type[BaseException]
    words: str


V = ValidationError
# Every case below: name -> Case. The names say what is misused; the words what the message names.
CASES: dict[str, Case] = {}


def case(name: str, error: type[BaseException], words: str) -> Callable[[Callable[[Ctx], Any]], None]:
    def add(call: Callable[[Ctx], Any]) -> None:
        assert name not in CASES, name
        CASES[name] = Case(call, error, words)

    return add


# ---------------------------------------------------------------------------------------- empty
for _name, _size in [("negative", -1), ("huge_negative", -(2**40)), ("float", 1.5), ("integral_float", 2.0),
                     ("string", "10"), ("none", None), ("bool", True), ("list", [4]), ("object", object())]:
    case(f"empty_{_name}", V, "size|byte count")(lambda c, s=_size: c.client.empty(s))
case("empty_beyond_any_device", BufferTooBig, "byte|B")(lambda c: c.client.empty(1 << 62))

# ---------------------------------------------------------------------------------------- create
for _name, _data in [("list", [1, 2, 3]), ("str", "text"), ("int", 12), ("none", None),
                     ("dict", {"a": 1}), ("float", 1.5),
                     ("object_array", np.array([object()], dtype=object))]:
    case(f"create_{_name}", V, "create|bytes|buffer|array|dtype")(lambda c, d=_data: c.client.create(d))

# ---------------------------------------------------------------------------------------- write
case("write_not_a_handle", V, "handle|Handle")(lambda c: c.client.write("h", b"abcd"))
case("write_too_short", V, "size")(lambda c: c.client.write(c.h, b"abc"))
case("write_too_long", V, "size")(lambda c: c.client.write(c.h, bytes(4 * 64 + 4)))
case("write_list", V, "numpy|bytes|buffer")(lambda c: c.client.write(c.h, [1, 2, 3]))
case("write_none", V, "numpy|bytes|buffer|None")(lambda c: c.client.write(c.h, None))
case("write_dropped", V, "dropped")(lambda c: c.client.write(c.dropped, bytes(256)))
case("write_foreign", V, "another client")(lambda c: c.client.write(c.foreign, bytes(256)))
case("write_str", V, "numpy|bytes|buffer|str")(lambda c: c.client.write(c.h, "x" * 256))

# ---------------------------------------------------------------------------------------- copy
case("copy_sizes_differ", V, "size")(lambda c: c.client.copy(c.h, c.keeper.handle))
case("copy_src_not_a_handle", V, "handle|Handle")(lambda c: c.client.copy(b"x", c.h))
case("copy_dst_not_a_handle", V, "handle|Handle")(lambda c: c.client.copy(c.h, None))
case("copy_dropped_src", V, "dropped")(lambda c: c.client.copy(c.dropped, c.h))
case("copy_foreign_dst", V, "another client")(lambda c: c.client.copy(c.h, c.foreign))

# ---------------------------------------------------------------------------------------- fill
case("fill_unknown_dtype", V, "f33|dtype")(lambda c: c.client.fill(c.h, 1, "f33"))
case("fill_value_does_not_fit", V, "256|u8")(lambda c: c.client.fill(c.h, 256, "u8"))
case("fill_value_string", V, "seven|i32")(lambda c: c.client.fill(c.h, "seven", "i32"))
case("fill_not_whole_elements", V, "multiple|element")(
    lambda c: c.client.fill(c.client.create(np.zeros(6, np.uint8)), 1, "u32"))  # fmt: skip
case("fill_dropped", V, "dropped")(lambda c: c.client.fill(c.dropped, 1, "u32"))
case("fill_not_a_handle", V, "handle|Handle")(lambda c: c.client.fill(42, 1, "u32"))

# ---------------------------------------------------------------------------------------- reads
for _name, _value in [("handle", "H"), ("none", None), ("int", 42), ("str", "h")]:
    case(f"read_{_name}_not_a_list", V, "list of handles")(
        lambda c, v=_value: c.client.read(c.h if v == "H" else v))  # fmt: skip
    case(f"read_async_{_name}_not_a_list", V, "list of handles")(
        lambda c, v=_value: c.client.read_async(c.h if v == "H" else v))  # fmt: skip
case("read_list_of_non_handles", V, "handle|Handle")(lambda c: c.client.read([c.h, 3]))
case("read_list_with_dropped", V, "dropped")(lambda c: c.client.read([c.h, c.dropped]))
case("read_one_none", V, "handle|Handle")(lambda c: c.client.read_one(None))
case("read_one_dropped", V, "dropped")(lambda c: c.client.read_one(c.dropped))
case("read_one_foreign", V, "another client")(lambda c: c.client.read_one(c.foreign))

# ---------------------------------------------------------------------------------------- to_numpy
case("to_numpy_unknown_dtype", V, "f33|dtype")(lambda c: c.client.to_numpy(c.h, "f33"))
for _name, _shape in [("too_many", (5, 5)), ("too_few", (300,)), ("negative", (-1, 7)), ("str", ("a",)),
                      ("float", 2.5), ("float_dims", (1.5, 2))]:
    case(f"to_numpy_shape_{_name}", V, "shape")(lambda c, s=_shape: c.client.to_numpy(c.h, "u32", s))
case("to_numpy_none", V, "Handle")(lambda c: c.client.to_numpy(None, "u32"))
case("to_numpy_int", V, "Handle")(lambda c: c.client.to_numpy(42, "u32"))
case("to_numpy_slice_token", V, "Handle")(lambda c: c.client.to_numpy(c.h.memory(), "u32"))
case("to_numpy_not_whole_elements", V, "multiple|element|size")(
    lambda c: c.client.to_numpy(c.client.create(np.zeros(6, np.uint8)), "u32"))  # fmt: skip
case("to_numpy_dropped", V, "dropped")(lambda c: c.client.to_numpy(c.dropped, "u32"))

# ---------------------------------------------------------------------------------------- tensors
case("empty_tensor_negative_shape", V, "shape")(lambda c: c.client.empty_tensor((-2, 3), "f32"))
case("empty_tensor_str_shape", V, "shape")(lambda c: c.client.empty_tensor("ab", "f32"))
case("empty_tensor_float_shape", V, "shape")(lambda c: c.client.empty_tensor((2.5,), "f32"))
case("empty_tensor_unknown_dtype", V, "f33|dtype")(lambda c: c.client.empty_tensor((2, 3), "f33"))
case("create_tensor_object_array", V, "dtype|object")(
    lambda c: c.client.create_tensor(np.array([object()], dtype=object)))  # fmt: skip

# ---------------------------------------------------------------------------------------- launches
case("launch_str_kernel", V, "Kernel")(lambda c: c.client.launch("fill_u32", 1, [c.h], [1, 4]))
case("launch_none_kernel", V, "Kernel")(lambda c: c.client.launch(None, 1, [c.h], [1, 4]))
case("launch_unchecked_str_kernel", V, "Kernel")(lambda c: c.client.launch_unchecked("k", 1, [c.h], [1, 4]))
case("launch_no_buffers", V, "buffers")(lambda c: c.client.launch(c.fill, 1, [], [1, 64]))
case("launch_two_buffers", V, "buffers")(lambda c: c.client.launch(c.fill, 1, [c.h, c.h], [1, 64]))
case("launch_no_scalars", V, "scalars")(lambda c: c.client.launch(c.fill, 1, [c.h], []))
case("launch_one_scalar", V, "scalars")(lambda c: c.client.launch(c.fill, 1, [c.h], [1]))
case("launch_three_scalars", V, "scalars")(lambda c: c.client.launch(c.fill, 1, [c.h], [1, 2, 3]))
case("launch_buffers_none", V, "buffers")(lambda c: c.client.launch(c.fill, 1, None, [1, 64]))
case("launch_scalars_none", V, "scalars")(lambda c: c.client.launch(c.fill, 1, [c.h], None))
case("launch_buffers_a_handle", V, "buffers")(lambda c: c.client.launch(c.fill, 1, c.h, [1, 64]))
case("launch_scalars_an_int", V, "scalars")(lambda c: c.client.launch(c.fill, 1, [c.h], 7))
case("launch_unchecked_buffers_none", V, "buffers")(
    lambda c: c.client.launch_unchecked(c.fill, 1, None, [1, 64]))  # fmt: skip
for _name, _count in [("negative", (-1,)), ("negative_y", (1, -1)), ("negative_z", (1, 1, -1)),
                      ("beyond_u32", (2**32,)), ("float", (1.5,)), ("none", (None,)),
                      ("four_axes", (1, 2, 3, 4)),
                      ("str", "8"), ("empty_tuple", ()), ("float_scalar", 2.5)]:
    case(f"launch_count_{_name}", V, "count|CubeCount")(
        lambda c, n=_count: c.client.launch(c.fill, n, [c.h], [1, 64]))  # fmt: skip
case("launch_buffer_not_whole_elements", V, "multiple")(
    lambda c: c.client.launch(c.fill, 1, [c.client.create(np.zeros(6, np.uint8))], [1, 1]))  # fmt: skip
case("launch_buffer_misaligned", V, "offset|align")(
    lambda c: c.client.launch(c.fill, 1, [c.aligned_misfit()], [1, 4]))  # fmt: skip
case("launch_buffer_foreign", V, "another client")(lambda c: c.client.launch(c.fill, 1, [c.foreign], [1, 64]))
case("launch_buffer_dropped", V, "dropped")(lambda c: c.client.launch(c.fill, 1, [c.dropped], [1, 64]))
case("launch_buffer_bytes", V, "buffer|Handle")(lambda c: c.client.launch(c.fill, 1, [b"xxxx"], [1, 1]))
for _dtype, _value in [("u32", -1), ("u32", 2**32), ("i32", 2**31), ("i32", 1.5), ("i32", "seven"),
                       ("f32", 1e39), ("f32", "x"), ("u32", None), ("i32", [1]), ("f32", 1j)]:
    case(f"launch_scalar_{_dtype}_{_value!r}", V, "'a'")(
        lambda c, d=_dtype, v=_value: c.client.launch(c.typed(d), 1, c.pair(), [v, 4]))  # fmt: skip
case("launch_no_source_for_the_backend", V, "no source")(
    lambda c: c.client.launch(kernels.NOWHERE, 1, [c.h], []))  # fmt: skip
case("launch_dynamic_count_too_small", V, "12")(
    lambda c: (gates.require(c.client, "dynamic_count"),
               c.client.launch(gates.kernel(c.client, kernels.GEOMETRY),
                               CubeCount.dynamic(c.h.offset_end(c.h.size - 8)), [c.h], [])))  # fmt: skip
case("launch_dynamic_count_dropped", V, "dropped")(
    lambda c: (gates.require(c.client, "dynamic_count"),
               c.client.launch(gates.kernel(c.client, kernels.GEOMETRY), CubeCount.dynamic(c.dropped),
                               [c.h], [])))  # fmt: skip

# ---------------------------------------------------------------------------------------- handles
case("offset_start_beyond", V, "offset|beyond|size")(lambda c: c.h.offset_start(c.h.size + 1))
case("offset_end_beyond", V, "offset|beyond|size")(lambda c: c.h.offset_end(c.h.size + 1))
case("offsets_cross", V, "offset|beyond|size")(
    lambda c: c.h.offset_start(c.h.size // 2 + 4).offset_end(c.h.size // 2))  # fmt: skip
case("offset_negative", V, "offset|negative")(lambda c: c.h.offset_start(-4))
case("offset_float", V, "offset|int")(lambda c: c.h.offset_end(1.5))
case("offset_of_dropped", V, "dropped")(lambda c: c.dropped.offset_start(4))
case("to_client_not_a_client", CubeplugError, "client")(lambda c: c.client.to_client(c.h, "cpu"))
case("to_client_dropped", V, "dropped")(lambda c: c.client.to_client(c.dropped, c.client))

# ---------------------------------------------------------------------------------------- kernels
case("buffer_unknown_dtype", V, "f33")(lambda c: Buffer("x", "f33"))
case("scalar_unknown_dtype", V, "f33")(lambda c: Scalar("n", "f33"))
case("buffer_bad_access", V, "access|sometimes")(lambda c: Buffer("x", "f32", "sometimes"))
case("kernel_duplicate_params", V, "x")(
    lambda c: Kernel("dup", [Buffer("x", "f32"), Scalar("x", "u32")], {"c": ""}))  # fmt: skip
case("kernel_no_sources", V, "source")(lambda c: Kernel("none", [Buffer("x", "f32")], {}))
case("kernel_params_not_params", V, "param")(lambda c: Kernel("bad", ["x"], {"c": ""}))
case("cube_count_negative", V, "CubeCount|outside")(lambda c: CubeCount(-1))
case("cube_count_float", V, "CubeCount|int")(lambda c: CubeCount(1.5))
case("cube_count_beyond_u32", V, "CubeCount|outside")(lambda c: CubeCount(2**32))
case("cube_count_dynamic_not_a_handle", V, "Handle|handle")(lambda c: CubeCount.dynamic(b"xxxxxxxxxxxx"))

# ---------------------------------------------------------------------------------------- the rest
for _name, _fn in [("int", 42), ("none", None), ("str", "launch")]:
    case(f"profile_{_name}", V, "function")(lambda c, f=_fn: c.client.profile(f))
case("memory_limit_not_a_size", ConfigError, "limit")(
    lambda c: c.new(memory={"limit": "lots"}))  # fmt: skip
case("max_streams_zero", ConfigError, "max_streams")(lambda c: c.new(streaming={"max_streams": 0}))
case("unknown_config_section", ConfigError, "section|bogus")(lambda c: c.new(bogus={"x": 1}))


class TestBadInputCorpus:
    """Each misuse of :data:`CASES` raises its specific error naming what was wrong, and harms nothing."""

    @pytest.mark.parametrize("name", sorted(CASES))
    def test_misuse(
        self,
        cubeplug_client: Any,
        cubeplug_cpu_client: Any,
        cubeplug_new_client: Any,
        keeper: Keeper,
        name: str,
    ) -> None:
        c = cubeplug_client
        h = c.create(np.zeros(64, np.uint32))
        dropped = c.create(np.zeros(64, np.uint32))
        dropped.drop()
        foreign = cubeplug_cpu_client.create(np.zeros(64, np.uint32))
        ctx = Ctx(c, keeper, h, dropped, foreign, cubeplug_new_client)
        misuse = CASES[name]
        with pytest.raises(misuse.error, match=misuse.words):
            misuse.call(ctx)
        np.testing.assert_array_equal(c.to_numpy(h, "u32"), np.zeros(64, np.uint32))
