"""The interpreter's expressions compiled into closures (:mod:`cubeplug.lang.interp_expr`): compiled
once per kernel, kept by node identity without mixing nodes up, and giving the interpreter's
results (the differential tests of every std op against numpy run through them too)."""

from __future__ import annotations

import numpy as np

from cubeplug import lang as cl
from cubeplug.lang import Array, f32, interp, ir
from cubeplug.lang.errors import Loc
from cubeplug.lang.interp_expr import Exprs
from cubeplug.lang.types import i32, u32

LOC = Loc("test", 1, 1)


class Launch:
    def __init__(self, count: tuple[int, int, int], dims: tuple[int, int, int]) -> None:
        self.count, self.cube_dim = count, dims


def test_a_node_made_after_another_was_dropped_gets_its_own_closure() -> None:
    # The range loops' conditions and any node built at run time: a dropped node's id may be
    # taken by the next one; the cache holds its nodes so that it never hands out a stale closure.
    exprs = Exprs()
    for k in range(200):
        assert exprs(ir.Const(k, i32, LOC))(None) == k


def test_binary_operators_and_lane_rules() -> None:
    exprs = Exprs()

    class Run:
        n = 4
        env = {"v": np.array([1, 2, 3, 4], np.int32)}
        values = {"s": 10}

    v, s = ir.Var("v", i32, LOC), ir.Var("s", i32, LOC, kind="param")
    summed = exprs(ir.BinOp("+", ir.BinOp("*", v, v, i32, LOC), s, i32, LOC))(Run())
    np.testing.assert_array_equal(summed, [11, 14, 19, 26])
    assert summed.dtype == np.int32
    # i32 wraps, as the dialects' arithmetic does
    Run.env = {"v": np.array([2**31 - 1, 0, -(2**31), 5], np.int32)}
    np.testing.assert_array_equal(exprs(ir.BinOp("+", v, v, i32, LOC))(Run()), [-2, 0, 0, 10])
    # the operand closures are built once per node
    node = ir.BinOp("-", v, s, i32, LOC)
    assert exprs(node) is exprs(node) and exprs.split(node)[0] is exprs(v)


@cl.kernel
def nested(y: Array[f32], x: Array[f32], n: u32):
    i = cl.ABSOLUTE_POS
    acc = f32(0)
    for k in range(3):
        for k2 in range(4):
            if (i + k + k2) % 3 == 0:
                acc = acc + x[(i + k2) % n] if acc < 50.0 else acc - 1.0
    y[i] = acc


def _nested_numpy(x: np.ndarray) -> np.ndarray:
    n = len(x)
    out = np.zeros(n, np.float32)
    for i in range(n):
        acc = np.float32(0)
        for k in range(3):
            for k2 in range(4):
                if (i + k + k2) % 3 == 0:
                    acc = np.float32(acc + x[(i + k2) % n]) if acc < 50.0 else np.float32(acc - 1.0)
        out[i] = acc
    return out


def test_launches_compile_each_expression_once_and_match_numpy() -> None:
    spec = nested.specialize_for("python", None, 64, True, {})
    run = spec.source
    assert isinstance(run, interp.Interpreter)
    x = np.random.default_rng(3).random(200).astype(np.float32) * 20
    for launch in range(2):
        y = np.full(256, np.nan, np.float32)
        run(Launch((4, 1, 1), (64, 1, 1)), y, x, np.uint32(len(x)), np.uint32(len(y)), np.uint32(len(x)))
        np.testing.assert_array_equal(y[:200], _nested_numpy(x))
        compiled = len(run.plan.exprs._fns)
        if launch == 0:
            first = compiled
    assert compiled == first > 0
