"""Handles: offsets accumulate, size accounts for them, reference counting, tensors."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle, Tensor, contiguous_strides


class Token:
    __slots__ = ("__weakref__", "stream")


def make(nbytes: int = 100) -> Handle:
    return Handle(Token(), owner=None, nbytes=nbytes, stream=3)  # type: ignore[arg-type]


def test_offsets_accumulate_and_size_accounts_for_them() -> None:
    h = make(100)
    v = h.offset_start(10).offset_end(5).offset_start(1).offset_end(4)
    assert (v.start, v.end, v.size, v.offset) == (11, 9, 80, 11)
    assert (h.start, h.end, h.size) == (0, 0, 100), "views never change the original"
    assert v.offset_start(80).size == 0


@pytest.mark.parametrize("start, end", [(101, 0), (0, 101), (60, 41)])
def test_offsets_beyond_the_handle(start: int, end: int) -> None:
    with pytest.raises(ValidationError, match="beyond this view"):
        make(100).offset_start(start).offset_end(end)


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
def test_offsets_must_be_non_negative_ints(bad: object) -> None:
    with pytest.raises(ValidationError, match="non-negative"):
        make().offset_start(bad)  # type: ignore[arg-type]


def test_a_range_is_one_view_of_its_bytes() -> None:
    v = make(100).offset_start(10)
    r = v.range(5, 20)
    assert (r.start, r.end, r.size, r.offset) == (15, 65, 20, 15)
    assert v.range(90, 0).size == 0 and v.range(0, 90).size == 90
    with pytest.raises(ValidationError, match=r"bytes \[80, 91\) go beyond this view of 90 B"):
        v.range(80, 11)
    for bad in (-1, 1.0, True, None):
        with pytest.raises(ValidationError, match=f"a range takes non-negative byte counts, got {bad!r}"):
            v.range(bad, 1)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=f"a range takes non-negative byte counts, got {bad!r}"):
            v.range(1, bad)  # type: ignore[arg-type]
    n = v.range(np.int64(5), np.uint32(20))  # numpy integers are byte counts too
    assert (n.start, n.end) == (15, 65) and type(n.start) is int and type(n.end) is int
    v.drop()
    with pytest.raises(ValidationError, match="dropped"):
        v.range(0, 1)


def test_memory_lives_while_any_view_lives() -> None:
    h = make()
    ref = weakref.ref(h.memory())
    v = h.offset_start(4)
    del h
    gc.collect()
    assert ref() is not None
    del v
    gc.collect()
    assert ref() is None


def test_can_mut_counts_other_holders() -> None:
    h = make()
    assert h.can_mut()
    queued = [h.memory()]  # like a binding in queued work
    assert not h.can_mut()
    queued.clear()
    assert h.can_mut()


def test_drop_and_context_manager() -> None:
    with make() as h:
        assert not h.is_dropped
    assert h.is_dropped
    with pytest.raises(ValidationError, match="dropped"):
        h.memory()
    assert "dropped" in repr(h)


def test_tensor_layout() -> None:
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides(()) == ()
    t = Tensor(make(48), (3, 4), (4, 1), np.dtype(np.float32))
    assert t.is_contiguous and t.ndim == 2 and t.size == 12
    assert not Tensor(make(64), (3, 4), (5, 1), np.dtype(np.float32)).is_contiguous
