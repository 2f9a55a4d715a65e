"""Hypothesis-generated u32 expressions: every backend against numpy's own evaluation."""

from __future__ import annotations

import itertools
import linecache
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cubeplug
from cubeplug import lang as cl

_ids = itertools.count()
# Literals are typed (u32(17)): untyped comptime literals fold with Python's unbounded ints.
LEAVES = st.sampled_from(["x", "y", "u32(3)", "u32(17)", "u32(255)", "u32(4000000000)"])


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(st.sampled_from(["+", "-", "*", "&", "|", "^"]), children, children).map(
        lambda t: f"({t[1]} {t[0]} {t[2]})"
    )
    division = st.tuples(st.sampled_from(["//", "%"]), children, children).map(
        lambda t: f"({t[1]} {t[0]} ({t[2]} | 1))"
    )
    shift = st.tuples(st.sampled_from(["<<", ">>"]), children, children).map(
        lambda t: f"({t[1]} {t[0]} ({t[2]} & 31))"
    )
    minmax = st.tuples(st.sampled_from(["min", "max"]), children, children).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]})"
    )
    return st.one_of(binary, division, shift, minmax)


EXPRS = st.recursive(LEAVES, _combine, max_leaves=8)


def make_kernel(expr: str) -> Any:
    """A kernel computing ``expr`` per element, its source registered in linecache."""
    name = f"<hypothesis-kernel-{next(_ids)}>"
    text = (
        "@cl.kernel\n"
        "def k(a: Array[u32], b: Array[u32], out: Array[u32]):\n"
        "    i = cl.ABSOLUTE_POS\n"
        "    if i < len(out):\n"
        "        x = a[i]\n"
        "        y = b[i]\n"
        f"        out[i] = {expr}\n"
    )
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    namespace: dict[str, Any] = {"cl": cl, "Array": cl.Array, "u32": cl.u32}
    exec(compile(text, name, "exec"), namespace)
    return namespace["k"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=EXPRS, seed=st.integers(0, 2**16))
def test_u32_expressions_match_numpy(client: Any, expr: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    ys = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):
        want = eval(expr, {"x": xs, "y": ys, "min": np.minimum, "max": np.maximum, "u32": np.uint32})
    want = np.broadcast_to(np.asarray(want, dtype=np.uint32), (100,))
    a, b, out = client.create(xs), client.create(ys), client.create(np.zeros(100, np.uint32))
    make_kernel(expr).launch(client, cubeplug.CubeCount(1), 128, a, b, out)
    np.testing.assert_array_equal(client.to_numpy(out, "u32"), want, err_msg=expr)
