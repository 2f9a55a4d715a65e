"""The verifier: ``sync_cube()`` only in uniform control flow.

A value is uniform when it is the same for every unit of a cube: constants, ``CUBE_POS*``,
``CUBE_COUNT*``, scalar params, hidden lengths, and locals only ever assigned uniform values in
uniform control flow (found by iterating to a fixed point). Memory reads, atomics' results,
``UNIT_POS*`` and ``ABSOLUTE_POS*`` are not. Control flow is uniform when every enclosing ``if`` and
loop condition is uniform, no enclosing loop can be left early by only some units, and no ``return``
under non-uniform control flow came before.
"""

from __future__ import annotations

from dataclasses import dataclass

from cubeplug.lang import ir
from cubeplug.lang.errors import KernelSyntaxError

_UNIFORM_BUILTINS = ("CUBE_POS", "CUBE_COUNT")


@dataclass
class _State:
    nonuniform: set[str]
    check: bool
    kernel: str
    diverged: str | None = None
    changed: bool = False


def _uniform(e: ir.Expr, st: _State) -> bool:
    if isinstance(e, ir.Const):
        return True
    if isinstance(e, ir.Var):
        return e.kind != "local" or e.name not in st.nonuniform
    if isinstance(e, ir.Builtin):
        return e.name.startswith(_UNIFORM_BUILTINS)
    if isinstance(e, ir.Load):
        return False
    if isinstance(e, ir.BinOp):
        return _uniform(e.a, st) and _uniform(e.b, st)
    if isinstance(e, (ir.UnOp, ir.Cast)):
        return _uniform(e.a, st)
    if isinstance(e, ir.Call):
        return all(_uniform(a, st) for a in e.args)
    if isinstance(e, ir.Select):
        return _uniform(e.cond, st) and _uniform(e.a, st) and _uniform(e.b, st)
    if isinstance(e, ir.VecNew):
        return all(_uniform(a, st) for a in e.args)
    if isinstance(e, ir.VecGet):
        return _uniform(e.v, st)
    raise TypeError(e)  # pragma: no cover


def _mark(name: str, st: _State) -> None:
    if name not in st.nonuniform:
        st.nonuniform.add(name)
        st.changed = True


def _early_exit(b: ir.Block, st: _State, uniform: bool, nested: bool) -> ir.Stmt | None:
    """A break/continue (of this loop) or return reached under non-uniform control flow."""
    for s in b.stmts:
        if isinstance(s, (ir.Break, ir.Continue)) and not nested and not uniform:
            return s
        if isinstance(s, ir.Return) and not uniform:
            return s
        if isinstance(s, ir.If):
            u = uniform and _uniform(s.cond, st)
            for child in (s.then, s.orelse):
                found = _early_exit(child, st, u, nested)
                if found is not None:
                    return found
        elif isinstance(s, (ir.While, ir.RangeFor)):
            cond_u = _uniform(s.cond, st) if isinstance(s, ir.While) else all(
                _uniform(x, st) for x in (s.start, s.stop, s.step))
            found = _early_exit(s.body, st, uniform and cond_u, True)
            if found is not None:
                return found
    return None


def _walk(b: ir.Block, st: _State, reason: str | None) -> None:
    for s in b.stmts:
        why = reason or st.diverged
        if isinstance(s, ir.Assign):
            if why or not _uniform(s.value, st):
                _mark(s.name, st)
        elif isinstance(s, ir.Atomic):
            if s.out:
                _mark(s.out, st)
        elif isinstance(s, ir.If):
            bad = None if _uniform(s.cond, st) else f"the `if` at {s.loc} depends on a per-unit value"
            inner = why or bad
            _walk(s.then, st, inner)
            _walk(s.orelse, st, inner)
        elif isinstance(s, (ir.While, ir.RangeFor)):
            if isinstance(s, ir.While):
                bounds_u = _uniform(s.cond, st)
            else:
                bounds_u = all(_uniform(x, st) for x in (s.start, s.stop, s.step))
            inner = why
            if inner is None and not bounds_u:
                inner = f"the loop at {s.loc} runs a per-unit number of times"
            if inner is None:
                exit_ = _early_exit(s.body, st, True, False)
                if exit_ is not None:
                    inner = f"the loop at {s.loc} may be left early by only some units (at {exit_.loc})"
            if isinstance(s, ir.RangeFor) and inner:
                _mark(s.var, st)
            _walk(s.body, st, inner)
        elif isinstance(s, ir.Return):
            if why and st.diverged is None:
                st.diverged = f"some units returned at {s.loc}"
        elif isinstance(s, ir.Barrier) and why and st.check:
            raise KernelSyntaxError(
                f"sync_cube() must be reached by every unit of the cube, but {why}", s.loc, "sync_cube()",
                kernel=st.kernel,
            )


def verify(k: ir.KernelIR) -> None:
    """KernelSyntaxError for a ``sync_cube()`` in non-uniform control flow."""
    st = _State(set(), False, k.name)
    while True:
        st.changed = False
        st.diverged = None
        _walk(k.body, st, None)
        if not st.changed:
            break
    st.check = True
    st.diverged = None
    _walk(k.body, st, None)
