"""``cubeplug.core.weak.forget_entry``: an entry leaves with its object, never another's."""

from __future__ import annotations

import functools
import gc
import weakref
from typing import Any

from cubeplug.core.weak import forget_entry


class Thing:
    pass


def test_an_entry_leaves_when_its_object_is_collected() -> None:
    table: dict[Any, tuple[Any, ...]] = {}
    thing = Thing()
    table["k"] = (weakref.ref(thing, functools.partial(forget_entry, table, "k")), "value")
    del thing
    gc.collect()
    assert table == {}


def test_a_newer_entry_under_the_same_key_stays() -> None:
    # The key (often an id()) now names another object: the old reference's callback leaves it.
    table: dict[Any, tuple[Any, ...]] = {}
    old, new = Thing(), Thing()
    table["k"] = (weakref.ref(old, functools.partial(forget_entry, table, "k")), "old")
    kept = (weakref.ref(new, functools.partial(forget_entry, table, "k")), "new")
    table["k"] = kept
    del old
    gc.collect()
    assert table == {"k": kept}
    table.clear()
    del new
    gc.collect()  # its callback finds nothing to remove
    assert table == {}
