"""The portable collectives: what ``client.all_reduce`` and the others run on a backend without its own.

Every backend gets them: device reductions written once in :mod:`cubeplug.lang` (one kernel,
comptime dtype and op, :mod:`cubeplug.collectives.kernels`) plus ``client.copy_to`` between the
participants (device to device where the backend copies between its devices, else through the
host). Importing this package installs them as the core's default
(:func:`cubeplug.core.collective.install_portable`); ``cubeplug.client`` imports it. A backend with a
collective library of its own (NCCL on cuda) returns it from ``ComputeServer.new_collectives``.
"""

from __future__ import annotations

from cubeplug.collectives.portable import PortableCollectives
from cubeplug.core.collective import install_portable

install_portable(PortableCollectives)

__all__ = ["PortableCollectives"]
