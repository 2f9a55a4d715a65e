"""Standard kernels, as plain functions.

Written once in :mod:`cubeplug.lang` (one generic source per op, specialized by comptime dtype and
operator; each dtype where the device declares it): ``map``, ``reduce``, ``argmax``, ``argmin``,
``reduce_axis``, ``scan``, ``transpose``, ``matmul`` (f16, f32, f64, i32, u32; ``matmul``
accumulates f16 in f32), ``reduce_sum`` (the f32 sum of ``reduce``), ``fill`` and ``copy`` (those
and i64, u64; 16-byte vector stores where the views are aligned) and ``axpy`` (f16, f32, f64;
``Vec[f32, 4]`` loads for f32). ``reduce`` (hence ``reduce_sum``), ``transpose`` and ``matmul`` are
autotuned per device and size bucket (:mod:`cubeplug.core.tune`) and remember their choice in the
autotune cache::

    import cubeplug, cubeplug.std as std
    client = cubeplug.client()
    x = client.create(numpy.ones(1 << 20, numpy.float32))
    total = client.to_numpy(std.reduce_sum(client, x, 1 << 20), "f32")[0]
"""

from __future__ import annotations

from cubeplug.std.argreduce import argmax, argmin
from cubeplug.std.axis import reduce_axis
from cubeplug.std.axpy import axpy
from cubeplug.std.copy import copy
from cubeplug.std.fill import fill
from cubeplug.std.mapping import map
from cubeplug.std.matmul import MATMUL, matmul
from cubeplug.std.reduce import REDUCE_SUM, reduce_sum
from cubeplug.std.reduction import reduce
from cubeplug.std.scan import scan
from cubeplug.std.transpose import transpose

#: The autotuned operations of the standard library with one tunable set (``REDUCE_SUM`` is the
#: f32 sum's set of ``reduce``; its other operators and dtypes, and ``transpose``, have one set each:
#: ``reduction.reduce_set``, ``transpose.transpose_set``).
TUNABLE_SETS = (REDUCE_SUM, MATMUL)

__all__ = [
    "MATMUL", "REDUCE_SUM", "TUNABLE_SETS", "argmax", "argmin", "axpy", "copy", "fill", "map", "matmul",
    "reduce", "reduce_axis", "reduce_sum", "scan", "transpose",
]
