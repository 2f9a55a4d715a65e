"""Standard kernels with sources for every dialect (``c``, ``wgsl``, ``python``), as plain functions.

``fill``, ``copy`` and ``axpy`` are elementwise (float4 loads where the views allow it);
``reduce_sum`` and ``matmul`` are autotuned per device and size bucket (:mod:`cubeplug.core.tune`),
and remember their choice in the autotune cache::

    import cubeplug, cubeplug.std as std
    client = cubeplug.client()
    x = client.create(numpy.ones(1 << 20, numpy.float32))
    total = client.to_numpy(std.reduce_sum(client, x, 1 << 20), "f32")[0]
"""

from __future__ import annotations

from cubeplug.std.axpy import axpy
from cubeplug.std.copy import copy
from cubeplug.std.fill import fill
from cubeplug.std.matmul import MATMUL, matmul
from cubeplug.std.reduce import REDUCE_SUM, reduce_sum

#: Every autotuned operation of the standard library.
TUNABLE_SETS = (REDUCE_SUM, MATMUL)

__all__ = ["MATMUL", "REDUCE_SUM", "TUNABLE_SETS", "axpy", "copy", "fill", "matmul", "reduce_sum"]
