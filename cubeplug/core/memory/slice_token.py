"""Slice tokens: what a handle holds for the memory a pool lent it.

A token's finalizer gives its memory back: when the last strong reference to a token goes (a
handle, a view, a pinned binding), ``__del__`` appends the pool's record of the memory to the
pool's ``freed`` deque: a single ``deque.append``, atomic under the GIL, so it is safe from any
thread. The pool drains that deque, under its owner's lock, before it looks for free memory.
Python's reference counting thus plays the role of CubeCL's ``Arc`` strong count, and a slice is
never lent again while its token is alive. (A finalizer, unlike a weak reference with a callback,
costs no second object per reservation.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cubeplug.core.storage import StorageHandle


def _keep(record: Any) -> None:
    """The release of a token that no pool lent: nothing to give back."""


class SliceToken:
    """The memory of one reservation: the slice's storage region and the last stream that used it."""

    __slots__ = ("__weakref__", "give_back", "record", "storage", "stream")

    def __init__(
        self,
        storage: StorageHandle,
        stream: int = -1,
        record: Any = None,
        release: Callable[[Any], object] = _keep,
    ) -> None:
        #: The slice: storage (page) id, byte offset in the page, padded slice size.
        self.storage = storage
        #: The last stream that queued work on this memory; -1 while none has.
        self.stream = stream
        #: The pool's record of this memory, and what gives it back (the pool's ``freed.append``).
        self.record = record
        self.give_back = release

    def __del__(self) -> None:
        self.give_back(self.record)

    def __repr__(self) -> str:
        s = self.storage
        return f"<SliceToken page={s.id} offset={s.offset} size={s.size} stream={self.stream}>"


#: ``lend(storage, record, release)``: a token without the cost of ``__init__`` (pools' hot path).
def lend(storage: StorageHandle, record: Any, release: Callable[[Any], object]) -> SliceToken:
    """A new token for ``storage`` whose death calls ``release(record)``."""
    token = _new(SliceToken)
    token.storage = storage
    token.stream = -1
    token.record = record
    token.give_back = release
    return token


_new = object.__new__
