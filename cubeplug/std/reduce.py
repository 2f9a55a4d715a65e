"""``reduce_sum``: the f32 sum of ``n`` elements, the f32 ``sum`` of :func:`cubeplug.std.reduce`.

Its candidates (:data:`REDUCE_SUM`, the tunable set of f32 sums) are those of
:mod:`cubeplug.std.reduction`, written once in :mod:`cubeplug.lang` for every operator and dtype:
``tree``, ``tree_x16``, ``tree_x16_ilp4``, ``resident_ilp4``, the ``Vec[f32, 4]`` loads ``vec4``,
``vec4_x4``, ``vec4_x16``, ``vec4_x64``, ``vec4_resident``, and the one-pass atomic
``atomic_x16_ilp4``, ``atomic_x16_ilp1`` and ``atomic_vec4_x16`` (``cl.atomic_add`` on ``Atomic[f32]``: CUDA's
``atomicAdd``, a compare-and-swap loop elsewhere; the order of the additions varies from run to
run). The hand-written ``c``/``wgsl``/``python`` kernels they replaced are kept as a reference
figure only, in ``bench/reference/hand_reduce.py``.
"""

from __future__ import annotations

from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.std.combine import SUM
from cubeplug.std.reduction import reduce, reduce_set

#: The tunable set of reduce_sum: ``reduce_set(SUM, "f32")``, the one ``std.reduce(op="sum")`` tunes.
REDUCE_SUM = reduce_set(SUM, "f32")


def reduce_sum(client: Any, handle: Handle, n: int) -> Handle:
    """The f32 sum of the first ``n`` elements of ``handle``, as a new 4-byte handle (autotuned)."""
    result: Handle = reduce(client, handle, n, "sum", "f32")
    return result
