"""Slice tokens: what a handle holds for the memory a pool lent it.

A pool keeps only a weak reference (:class:`SliceRef`) to each token it hands out. When the last
strong reference to a token goes (a handle, a queued binding, a pinned copy), the weak reference's
callback appends the reference to the pool's ``freed`` deque: a single ``deque.append``, atomic
under the GIL, so it is safe from any thread. The pool drains that deque, under its owner's lock,
before it looks for free memory. Python's reference counting thus plays the role of CubeCL's
``Arc`` strong count, and a slice is never lent again while its token is alive.
"""

from __future__ import annotations

import weakref
from typing import Any

from cubeplug.core.storage import StorageHandle


class SliceToken:
    """The memory of one reservation: the slice's storage region and the last stream that used it."""

    __slots__ = ("__weakref__", "storage", "stream")

    def __init__(self, storage: StorageHandle, stream: int = -1) -> None:
        #: The slice: storage (page) id, byte offset in the page, padded slice size.
        self.storage = storage
        #: The last stream that queued work on this memory; -1 while none has.
        self.stream = stream

    def __repr__(self) -> str:
        s = self.storage
        return f"<SliceToken page={s.id} offset={s.offset} size={s.size} stream={self.stream}>"


class SliceRef(weakref.ref[SliceToken]):
    """A pool's weak reference to a lent token; ``slice`` is the pool's record of the memory."""

    __slots__ = ("slice",)

    slice: Any
