"""Tables whose entries hold a weak reference to what they are about, and leave with it."""

from __future__ import annotations

import weakref
from collections.abc import MutableMapping
from typing import Any


def forget_entry(table: MutableMapping[Any, tuple[Any, ...]], key: Any, ref: weakref.ref[Any]) -> None:
    """The callback of ``ref``, the weak reference an entry ``table[key]`` holds first: the entry
    goes when its object is collected, if it is still the entry of that reference (the key, often
    an ``id()``, may name another object by then, with an entry of its own). Bind ``table`` and
    ``key`` with ``functools.partial``; ``weakref.ref`` passes ``ref``."""
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        table.pop(key, None)  # another thread may have emptied the table meanwhile
