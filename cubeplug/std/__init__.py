"""Standard kernels, as plain functions.

Written once in :mod:`cubeplug.lang` (one generic source per op, specialized by comptime dtype and
operator; f16, f32, f64, i32, u32 where the device declares them): ``map``, ``reduce``, ``argmax``,
``argmin``, ``reduce_axis``, ``scan``, ``transpose``, ``matmul`` (``reduce``, ``transpose`` and
``matmul`` autotuned; ``matmul`` accumulates f16 in f32).
Hand-written for every dialect (``c``, ``wgsl``, ``python``): ``fill``, ``copy`` and ``axpy`` are
elementwise (float4 loads where the views allow it);
``reduce_sum`` is autotuned per device and size bucket (:mod:`cubeplug.core.tune`).
The autotuned ops remember their choice in the autotune cache::

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

#: The autotuned operations of the standard library with one tunable set (``reduce`` and
#: ``transpose`` have one per operator and dtype: ``reduction.reduce_set``, ``transpose.transpose_set``).
TUNABLE_SETS = (REDUCE_SUM, MATMUL)

__all__ = [
    "MATMUL", "REDUCE_SUM", "TUNABLE_SETS", "argmax", "argmin", "axpy", "copy", "fill", "map", "matmul",
    "reduce", "reduce_axis", "reduce_sum", "scan", "transpose",
]
