"""The portable implementation: each rank pulls what it needs from the others, then reduces it locally.

Rank ``r`` of a round, on its own thread and stream:

- ``all_reduce``: copies every rank's ``src`` into fresh memory of its own client, then (after every
  rank queued its copies: ``dst`` may be some rank's ``src``) reduces them in rank order, with the one
  :func:`~cubeplug.collectives.kernels.combine` kernel, and copies the result into ``dst``. Every rank
  reduces in the same order with the same kernel, so every rank holds the same bits.
- ``reduce_scatter``: the same over chunk ``r`` of every ``src``.
- ``broadcast``: copies the root's ``src`` into its ``dst``.
- ``all_gather``: copies each rank's ``src`` into its slot of ``dst``.

This moves ``N - 1`` times the data a ring would for ``all_reduce``: it is the path that works on every
backend, not a fast one; backends with a collective library bring their own (``new_collectives``).
Temporaries are fresh allocations, so the kernel binds them at offset 0 whatever the alignment of the
users' views (a copy takes any offset).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cubeplug.core.collective import Collectives, Group, Member, Round
from cubeplug.core.handle import Handle

#: The element types the kernel reduces (``cubeplug.lang``'s arithmetic types).
LANG_DTYPES = frozenset({"f16", "f32", "f64", "i32", "u32", "i64", "u64"})


def chunk(handle: Handle, index: int, nbytes: int) -> Handle:
    """Bytes ``[index * nbytes, (index + 1) * nbytes)`` of ``handle``, as a view."""
    return handle.range(index * nbytes, nbytes)


class PortableCollectives(Collectives):
    """Collectives from copies between clients and one ``cubeplug.lang`` reduction kernel."""

    name = "portable"

    def dtypes(self, client: Any) -> frozenset[str]:
        """The backend's dtypes that the kernel reduces; none where it compiles no ``lang`` dialect."""
        from cubeplug.lang.compile import pick_dialect  # the compiler loads at the first collective

        if pick_dialect(tuple(client.server.dialects)) is None:
            return frozenset()
        return frozenset(client.capabilities.dtypes) & LANG_DTYPES

    def queue(self, group: Group, rnd: Round, member: Member) -> Callable[[], None] | None:
        members: list[Member] = [m for m in rnd.members if m is not None]
        kind = member.call.kind
        if kind == "broadcast":
            root = members[member.call.root]
            _pull(root, root.src, member, member.dst)
            return None
        if kind == "all_gather":
            assert member.src is not None
            n = member.src.size
            for q, other in enumerate(members):
                _pull(other, other.src, member, chunk(member.dst, q, n))
            return None
        n = member.dst.size
        if n == 0:
            return None
        parts = [m.src if kind == "all_reduce" else chunk(m.src, member.rank, n) for m in members]  # type: ignore[arg-type]
        client = member.client
        temps = [client.empty(n) for _ in members]
        for other, part, temp in zip(members, parts, temps):
            _pull(other, part, member, temp)

        def reduce() -> None:  # after every rank queued its reads: dst may be a rank's src
            from cubeplug.collectives import kernels  # cubeplug.lang loads at the first reduction

            call = member.call
            kernels.reduce_into(client, temps[0], temps[1:], n // member.itemsize, call.dtype, call.op)
            client.copy(temps[0], member.dst)

        return reduce


def _pull(owner: Member, src: Handle | None, member: Member, dst: Handle) -> None:
    """Copy ``src`` of ``owner``'s client (after the work on its caller's stream) into ``dst`` of
    ``member``'s (before later work on its stream)."""
    assert src is not None
    owner.client.copy_to(src, member.client, dst, src_stream=owner.stream, dst_stream=member.stream)
