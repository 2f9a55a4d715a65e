"""A stable, readable text form of the IR, for goldens, ``kernel.ir()`` and the python dialect's
``source()``."""

from __future__ import annotations

from cubeplug.lang import ir


def expr(e: ir.Expr) -> str:
    """One expression."""
    if isinstance(e, ir.Const):
        return f"{e.value!r}:{e.ty}"
    if isinstance(e, ir.Var):
        return e.name if e.kind == "local" else f"%{e.name}"
    if isinstance(e, ir.Builtin):
        return e.name
    if isinstance(e, ir.BinOp):
        return f"({expr(e.a)} {e.op} {expr(e.b)})"
    if isinstance(e, ir.UnOp):
        return f"({e.op} {expr(e.a)})"
    if isinstance(e, ir.Cast):
        return f"{e.ty}({expr(e.a)})"
    if isinstance(e, ir.Call):
        return f"{e.fn}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, ir.Select):
        return f"select({expr(e.cond)}, {expr(e.a)}, {expr(e.b)})"
    if isinstance(e, ir.VecNew):
        return f"{e.ty}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, ir.VecGet):
        return f"{expr(e.v)}.{'xyzw'[e.lane]}"
    if isinstance(e, ir.Load):
        return f"{e.array}[{expr(e.index)}{_check(e.checked, e.guard)}]"
    raise TypeError(e)  # pragma: no cover


def _check(checked: bool, guard: ir.Expr | None) -> str:
    """``?`` after a checked index, with the shape guard of a tensor access."""
    if not checked:
        return ""
    return "?" if guard is None else f"? if {expr(guard)}"


def _block(b: ir.Block, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for s in b.stmts:
        if isinstance(s, ir.Assign):
            out.append(f"{pad}{s.name} = {expr(s.value)}")
        elif isinstance(s, ir.Store):
            lane = "" if s.lane is None else f"[{expr(s.lane)}]"
            out.append(f"{pad}{s.array}[{expr(s.index)}{_check(s.checked, s.guard)}]{lane} = {expr(s.value)}")
        elif isinstance(s, ir.Atomic):
            call = f"atomic_{s.op}({s.array}, {expr(s.index)}, {', '.join(expr(a) for a in s.args)})"
            out.append(f"{pad}{s.out} = {call}" if s.out else f"{pad}{call}")
        elif isinstance(s, ir.If):
            out.append(f"{pad}if {expr(s.cond)}:")
            _block(s.then, depth + 1, out)
            if s.orelse.stmts:
                out.append(f"{pad}else:")
                _block(s.orelse, depth + 1, out)
        elif isinstance(s, ir.RangeFor):
            out.append(f"{pad}for {s.var} in range({expr(s.start)}, {expr(s.stop)}, {expr(s.step)}):")
            _block(s.body, depth + 1, out)
        elif isinstance(s, ir.While):
            out.append(f"{pad}while {expr(s.cond)}:")
            _block(s.body, depth + 1, out)
        else:
            out.append(pad + {ir.Break: "break", ir.Continue: "continue", ir.Return: "return",
                              ir.Barrier: "sync_cube()"}[type(s)])


def print_kernel(k: ir.KernelIR) -> str:
    """The whole kernel: signature, declarations, body."""
    params = []
    arrays = {a.name: a for a in k.arrays}
    scalars = {s.name: s for s in k.scalars}
    for name in k.order:
        if name in arrays:
            a = arrays[name]
            kind = f"Atomic[{a.elem}]" if a.atomic else str(a.elem)
            container = "Tensor" if a.tensor else "Array"
            params.append(f"{name}: {container}[{kind}]{' rw' if a.written else ''}")
        else:
            params.append(f"%{name}: {scalars[name].ty}")
    params += [f"%{n}: u32" for n in k.hidden_names]
    mode = "checked" if k.checked else "unchecked"
    out = [f"kernel {k.name}({', '.join(params)}) cube_dim={k.cube_dim} {mode}"]
    out += [f"  {d.space} {d.name}: {d.elem}[{d.size}]" for d in k.decls]
    out += [f"  var {n}: {t}" for n, t in k.locals]
    _block(k.body, 1, out)
    return "\n".join(out) + "\n"
