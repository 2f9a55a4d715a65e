"""Writes into existing handles: ``write`` from the host, ``copy`` on the device, ``fill`` with a value;
on whole handles and on views, ordered with launches like any other work, and bad input refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import DTYPES
from cubeplug.testing import gates, kernels
from cubeplug.testing.suite.data import random_bytes, view_offset

N = 1000


class TestWriteCopyFill:
    """``client.write``, ``client.copy`` and ``client.fill`` change exactly the bytes they name."""

    @pytest.mark.parametrize("kind", ["numpy", "bytes", "memoryview", "bytearray"])
    def test_write_whole_handle(self, cubeplug_client: Any, kind: str) -> None:
        c = cubeplug_client
        h = c.create(np.zeros(N, np.int32))
        values = np.arange(N, dtype=np.int32) * 3 - 7
        data = {"numpy": values, "bytes": values.tobytes(), "memoryview": values.data,
                "bytearray": bytearray(values.tobytes())}[kind]  # fmt: skip
        c.write(h, data)
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), values)

    def test_write_into_a_view_leaves_its_neighbours(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        a = view_offset(c)
        base = random_bytes(6 * a, 3)
        h = c.create(base)
        view = h.offset_start(a).offset_end(2 * a)
        new = random_bytes(view.size, 4)
        c.write(view, new)
        assert bytes(c.read_one(h)) == base[:a] + new + base[-2 * a :]
        c.write(h.offset_start(3).offset_end(5), b"\x01" * (6 * a - 8))  # any byte offset
        assert bytes(c.read_one(h)) == base[:3] + b"\x01" * (6 * a - 8) + base[-5:]

    def test_writes_are_ordered_with_launches(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        h = c.create(np.zeros(N, np.int32))
        c.launch(k, kernels.cubes(N), [h], [N])  # 1
        c.write(h, np.full(N, 10, np.int32))  # after the launch: 10
        c.launch(k, kernels.cubes(N), [h], [N])  # after the write: 11
        values = np.arange(N, dtype=np.int32)
        c.write(h, values)  # the host array may change once write returns
        values[:] = -1
        c.launch(k, kernels.cubes(N), [h], [N])
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.arange(N) + 1)

    def test_copy_whole_and_views(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        a = view_offset(c)
        src_bytes, dst_bytes = random_bytes(4 * a, 5), random_bytes(4 * a, 6)
        src, dst = c.create(src_bytes), c.create(dst_bytes)
        c.copy(src.offset_start(a), dst.offset_end(a))
        assert bytes(c.read_one(dst)) == src_bytes[a:] + dst_bytes[-a:]
        c.copy(src, dst)
        assert bytes(c.read_one(dst)) == src_bytes
        assert bytes(c.read_one(src)) == src_bytes  # the source is untouched

    def test_copies_are_ordered_with_launches(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        src = c.create(np.zeros(N, np.int32))
        dst = c.create(np.zeros(N, np.int32))
        for _ in range(5):
            c.launch(k, kernels.cubes(N), [src], [N])
        c.copy(src, dst)  # sees the five launches
        c.launch(k, kernels.cubes(N), [src], [N])  # does not change the copy
        c.launch(k, kernels.cubes(N), [dst], [N])  # runs on the copy
        np.testing.assert_array_equal(c.to_numpy(dst, "i32"), np.full(N, 6))
        np.testing.assert_array_equal(c.to_numpy(src, "i32"), np.full(N, 6))

    @pytest.mark.parametrize(
        ("dtype", "value"),
        [("f32", 2.5), ("f32", -0.0), ("i32", -7), ("u32", 2**32 - 1), ("u8", 255), ("f64", 1e300),
         ("i64", -(2**63)), ("f16", 1.5), ("bool", True)],
    )  # fmt: skip
    def test_fill_every_declared_dtype(self, cubeplug_client: Any, dtype: str, value: Any) -> None:
        c = cubeplug_client
        gates.require_dtype(c, dtype)
        dt = DTYPES[dtype]
        h = c.create(np.zeros(N, dt))
        c.fill(h, value, dtype)
        got = c.to_numpy(h, dtype)
        want = np.full(N, value, dt)
        assert got.tobytes() == want.tobytes()  # bit-exact: -0.0 stays negative

    def test_fill_a_view_and_ordering(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        a = view_offset(c)
        words = a // 4
        h = c.create(np.full(3 * words, 100, np.int32))
        c.launch(k, kernels.cubes(3 * words), [h], [3 * words])  # 101 everywhere, then:
        c.fill(h.offset_start(a).offset_end(a), -3, "i32")
        want = np.full(3 * words, 101, np.int32)
        want[words : 2 * words] = -3
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), want)

    @pytest.mark.parametrize("value", ["zero", "pattern"])
    @pytest.mark.parametrize("dtype", ["u8", "u16", "u32", "u64"])
    def test_fill_every_element_size_in_views(self, cubeplug_client: Any, dtype: str, value: str) -> None:
        """Fills of 1, 2, 4 and 8-byte elements (any dtype: a fill is bytes), of zero and of a pattern
        of distinct bytes, on a whole handle and on views at aligned and at odd element offsets, some
        of them beyond what a native fill command takes: the neighbours keep their bytes."""
        c = cubeplug_client
        dt = DTYPES[dtype]
        width = dt.itemsize
        fill = 0 if value == "zero" else int.from_bytes(bytes(range(0xA1, 0xA1 + width)), "little")
        element = fill.to_bytes(width, "little")
        a = view_offset(c)
        n = 6 * a + 8 * width
        base = random_bytes(n, 11)
        for start, end in [(0, 0), (a, a), (width, 3 * width), (3 * width, 0), (a + width, width)]:
            h = c.create(base)
            c.fill(h.offset_start(start).offset_end(end), fill, dtype)
            middle = n - start - end
            want = base[:start] + element * (middle // width) + base[n - end :]
            assert bytes(c.read_one(h)) == want, (start, end)
        big = c.create(random_bytes(1 << 20, 12))  # large enough for a multi-step device fill
        c.fill(big, fill, dtype)
        assert bytes(c.read_one(big)) == element * ((1 << 20) // width)

    def test_fills_are_ordered_with_launches_and_copies(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        h = c.create(np.zeros(N, np.int32))
        other = c.create(np.zeros(N, np.int32))
        c.launch(k, kernels.cubes(N), [h], [N])  # 1
        c.fill(h, 0, "i32")  # after the launch: 0
        c.launch(k, kernels.cubes(N), [h], [N])  # after the fill: 1
        c.copy(h, other)  # 1
        c.fill(h, 41, "i32")  # after the copy, which keeps 1
        c.launch(k, kernels.cubes(N), [h], [N])  # 42
        c.launch(k, kernels.cubes(N), [other], [N])  # 2
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.full(N, 42))
        np.testing.assert_array_equal(c.to_numpy(other, "i32"), np.full(N, 2))

    def test_copy_within_one_handle_and_between_small_handles(self, cubeplug_client: Any) -> None:
        """Copies between views of one handle (one allocation), at aligned and odd byte offsets, and
        between small handles (which pooled memory may keep in one page): exactly the bytes named."""
        c = cubeplug_client
        a = view_offset(c)
        n = 8 * a
        base = random_bytes(n, 21)
        for src_at, dst_at, size in [(0, 4 * a, 4 * a), (4 * a, 0, 3 * a), (a, 5 * a, 2 * a + 4),
                                     (3, 4 * a + 1, 2 * a - 5), (0, 4 * a, 4 * a - 3)]:  # fmt: skip
            h = c.create(base)
            src, dst = h.range(src_at, size), h.range(dst_at, size)
            c.copy(src, dst)
            want = bytearray(base)
            want[dst_at : dst_at + size] = base[src_at : src_at + size]
            assert bytes(c.read_one(h)) == bytes(want), (src_at, dst_at, size)
        for size in (4, 1000, 4096, 65536):
            x, y = c.create(random_bytes(size, size)), c.create(random_bytes(size, size + 1))
            c.copy(x, y)
            assert bytes(c.read_one(y)) == random_bytes(size, size)
            assert bytes(c.read_one(x)) == random_bytes(size, size)

    def test_copy_within_one_handle_is_ordered_with_launches(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        k = gates.kernel(c, kernels.ADD_ONE)
        words = view_offset(c) // 4 * 4  # each half starts at an aligned offset
        h = c.create(np.zeros(2 * words, np.int32))
        first, second = h.offset_end(4 * words), h.offset_start(4 * words)
        for _ in range(3):
            c.launch(k, kernels.cubes(2 * words), [h], [2 * words])  # 3 everywhere
        c.copy(first, second)
        c.launch(k, kernels.cubes(words), [first], [words])  # 4 in the first half, after the copy
        c.copy(second, first)  # 3 again
        c.launch(k, kernels.cubes(2 * words), [h], [2 * words])  # 4 everywhere
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.full(2 * words, 4))

    def test_overlapping_copy_is_refused(self, cubeplug_client: Any) -> None:
        """Overlapping ranges of one allocation are refused (the native copies leave them undefined);
        a range copied onto itself is a no-op."""
        c = cubeplug_client
        h = c.create(np.arange(64, dtype=np.int32))
        for src, dst in [(h.offset_end(4), h.offset_start(4)), (h.offset_start(8), h.offset_end(8)),
                         (h.offset_start(1).offset_end(3), h.offset_start(3).offset_end(1))]:  # fmt: skip
            with pytest.raises(ValidationError, match="overlap"):
                c.copy(src, dst)
        c.copy(h, h)
        c.copy(h.offset_start(16), h.offset_start(16))
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.arange(64))

    def test_bad_input_is_refused_and_harms_nothing(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        h = c.create(np.arange(8, dtype=np.int32))
        other = c.create(np.zeros(4, np.int32))
        cases: list[tuple[Callable[[], Any], str]] = [
            (lambda: c.write(h, b"short"), "sizes must match"),
            (lambda: c.write(h, [1, 2, 3]), "numpy.asarray"),
            (lambda: c.write("not a handle", b"abcd"), "handle"),
            (lambda: c.copy(h, other), "sizes must match"),
            (lambda: c.copy(h, None), "destination handle"),
            (lambda: c.fill(h, 2**40, "i32"), "cannot be stored as i32"),
            (lambda: c.fill(h, "x", "f32"), "cannot be stored as f32"),
            (lambda: c.fill(h.offset_start(1), 0, "i32"), "whole number of i32"),
            (lambda: c.fill(h, 0, "no-such-dtype"), "unknown dtype"),
        ]
        for call, message in cases:
            with pytest.raises(ValidationError, match=message):
                call()
        np.testing.assert_array_equal(c.to_numpy(h, "i32"), np.arange(8))
        c.write(other, np.ones(4, np.int32))
        np.testing.assert_array_equal(c.to_numpy(other, "i32"), np.ones(4))

    def test_empty_handles(self, cubeplug_client: Any) -> None:
        c = cubeplug_client
        h = c.create(b"")
        c.write(h, b"")
        c.copy(h, c.create(b""))
        c.fill(h, 1, "u8")
        assert bytes(c.read_one(h)) == b""
