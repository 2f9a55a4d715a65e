"""The ``c`` dialect generator: one source for CUDA and OpenCL through the prelude's macros.

Locals, ``shared`` (``LOCAL``) and ``local`` arrays are declared at the top of the kernel (OpenCL
wants ``__local`` at kernel scope). Atomics go through ``CL_ATOMIC_*`` macros defined here for both
APIs. :func:`generate` also returns a line map (generated line -> the user's source location), used
to point a backend's compile error at the Python line.
"""

from __future__ import annotations

from cubeplug.lang import ir
from cubeplug.lang.errors import Loc
from cubeplug.lang.names import entry_name, unwrap
from cubeplug.lang.types import DType

C_TYPES = {
    "f16": "half", "f32": "float", "f64": "double", "i32": "int", "u32": "unsigned int",
    "i64": "long long", "u64": "unsigned long long", "bool": "bool",
}
_UNSIGNED = {"i32": "unsigned int", "i64": "unsigned long long"}
_ATOMICS = """\
#ifdef __OPENCL_VERSION__
#define CL_ATOMIC_add(p, v) atomic_add((p), (v))
#define CL_ATOMIC_sub(p, v) atomic_sub((p), (v))
#define CL_ATOMIC_min(p, v) atomic_min((p), (v))
#define CL_ATOMIC_max(p, v) atomic_max((p), (v))
#define CL_ATOMIC_exchange(p, v) atomic_xchg((p), (v))
#define CL_ATOMIC_compare_exchange(p, c, v) atomic_cmpxchg((p), (c), (v))
#else
#define CL_ATOMIC_add(p, v) atomicAdd((p), (v))
#define CL_ATOMIC_sub(p, v) atomicSub((p), (v))
#define CL_ATOMIC_min(p, v) atomicMin((p), (v))
#define CL_ATOMIC_max(p, v) atomicMax((p), (v))
#define CL_ATOMIC_exchange(p, v) atomicExch((p), (v))
#define CL_ATOMIC_compare_exchange(p, c, v) atomicCAS((p), (c), (v))
#endif
"""
_FLOAT_FN = {"abs": "fabs", "min": "fmin", "max": "fmax"}


def literal(value: int | float | bool, ty: DType) -> str:
    """A constant spelled in C."""
    if ty.name == "bool":
        return "true" if value else "false"
    if ty.is_float:
        text = repr(float(value))
        if not any(c in text for c in ".e"):
            text += ".0"
        return {"f32": f"{text}f", "f64": text}.get(ty.name, f"((half){text}f)")
    v = int(value)
    if ty.name == "i32":
        if v >= 0:
            return str(v)
        return f"({v})" if v > -(2**31) else "(-2147483647 - 1)"
    if ty.name == "u32":
        return f"{v}u"
    return f"(({C_TYPES[ty.name]}){v})" if v > -(2**63) else "((long long)(-9223372036854775807 - 1))"


class CGen:
    """Emits the C source of one :class:`~cubeplug.lang.ir.KernelIR`."""

    def __init__(self, k: ir.KernelIR) -> None:
        self.k = k
        self.lines: list[str] = []
        self.locs: list[Loc | None] = []
        self.depth = 0
        self.lens = {a.name: a.len_name for a in k.arrays}

    def line(self, text: str, loc: Loc | None = None) -> None:
        self.lines.append("    " * self.depth + text)
        self.locs.append(loc)

    def generate(self) -> tuple[str, tuple[Loc | None, ...]]:
        k = self.k
        if _uses_atomics(k.body):
            for text in _ATOMICS.splitlines():
                self.line(text)
        params = []
        by_name = {a.name: a for a in k.arrays}
        scal = {s.name: s for s in k.scalars}
        for name in k.order:
            if name in by_name:
                a = by_name[name]
                const = "" if a.written or a.atomic else "const "
                params.append(f"GLOBAL {const}{C_TYPES[a.elem.name]}* {name}")
            else:
                params.append(f"{C_TYPES[scal[name].ty.name]} {name}")
        params += [f"unsigned int {n}" for n in k.hidden_names]
        self.line(f"KERNEL {entry_name(k.name)}({', '.join(params)}) {{")
        self.depth = 1
        for d in k.decls:
            prefix = "LOCAL " if d.space == "shared" else ""
            self.line(f"{prefix}{C_TYPES[d.elem.name]} {d.name}[{d.size}];", d.loc)
        for name, ty in k.locals:
            self.line(f"{C_TYPES[ty.name]} {name} = {literal(0, ty)};")
        self.block(k.body)
        self.depth = 0
        self.line("}")
        return "\n".join(self.lines) + "\n", tuple(self.locs)

    # ------------------------------------------------------------------------------- statements
    def block(self, b: ir.Block) -> None:
        for s in b.stmts:
            self.stmt(s)

    def stmt(self, s: ir.Stmt) -> None:
        if isinstance(s, ir.Assign):
            self.line(f"{s.name} = {unwrap(self.expr(s.value))};", s.loc)
        elif isinstance(s, ir.Store):
            store = f"{s.array}[{self.expr(s.index)}] = {self.expr(s.value)};"
            if s.checked:
                store = f"if ({self.in_bounds(s.array, s.index, s.guard)}) {store}"
            self.line(store, s.loc)
        elif isinstance(s, ir.Atomic):
            args = ", ".join(self.expr(a) for a in s.args)
            call = f"CL_ATOMIC_{s.op}(&{s.array}[{self.expr(s.index)}], {args})"
            text = f"{s.out} = {call};" if s.out else f"{call};"
            if s.checked:
                other = f" else {s.out} = {literal(0, s.ty)};" if s.out else ""
                text = f"if ({self.in_bounds(s.array, s.index, s.guard)}) {{ {text} }}{other}"
            self.line(text, s.loc)
        elif isinstance(s, ir.If):
            self.line(f"if ({unwrap(self.expr(s.cond))}) {{", s.loc)
            self.nested(s.then)
            if s.orelse.stmts:
                self.line("} else {", s.loc)
                self.nested(s.orelse)
            self.line("}")
        elif isinstance(s, ir.While):
            self.line(f"while ({unwrap(self.expr(s.cond))}) {{", s.loc)
            self.nested(s.body)
            self.line("}")
        elif isinstance(s, ir.RangeFor):
            cmp = ">" if isinstance(s.step, ir.Const) and s.step.value < 0 else "<"
            self.line(
                f"for ({s.var} = {self.expr(s.start)}; {s.var} {cmp} {self.expr(s.stop)}; "
                f"{s.var} += {self.expr(s.step)}) {{", s.loc,
            )
            self.nested(s.body)
            self.line("}")
        elif isinstance(s, ir.Break):
            self.line("break;", s.loc)
        elif isinstance(s, ir.Continue):
            self.line("continue;", s.loc)
        elif isinstance(s, ir.Return):
            self.line("return;", s.loc)
        elif isinstance(s, ir.Barrier):
            self.line("SYNC_CUBE();", s.loc)
        else:  # pragma: no cover
            raise TypeError(s)

    def nested(self, b: ir.Block) -> None:
        self.depth += 1
        self.block(b)
        self.depth -= 1

    def in_bounds(self, array: str, index: ir.Expr, guard: ir.Expr | None = None) -> str:
        decl = self.k.array(array)
        bound = str(decl.size) + "u" if isinstance(decl, ir.ArrayDecl) else self.lens[array]
        idx = self.expr(index)
        unsigned = _UNSIGNED.get(index.ty.name)
        if unsigned:
            idx = f"(({unsigned}){idx})"
        if guard is not None:
            return f"{self.expr(guard)} && {idx} < {bound}"
        return f"{idx} < {bound}"

    # ------------------------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            return literal(e.value, e.ty)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Builtin):
            return e.name
        if isinstance(e, ir.BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            ty = e.a.ty
            if e.op == "//":
                return f"floor({a} / {b})" if ty.is_float else f"({a} / {b})"
            if e.op == "%" and ty.is_float:
                return f"fmod({a}, {b})"
            if e.op == "**":
                return f"pow({a}, {b})"
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({a} {op} {b})"
        if isinstance(e, ir.UnOp):
            return f"({'!' if e.op == 'not' else e.op}{self.expr(e.a)})"
        if isinstance(e, ir.Cast):
            return f"(({C_TYPES[e.ty.name]})({self.expr(e.a)}))"
        if isinstance(e, ir.Call):
            args = [self.expr(a) for a in e.args]
            if e.ty.is_int and e.fn == "abs":
                return args[0] if e.ty.kind == "u" else f"({args[0]} < 0 ? -{args[0]} : {args[0]})"
            fn = _FLOAT_FN.get(e.fn, e.fn) if e.ty.is_float else e.fn
            return f"{fn}({', '.join(args)})"
        if isinstance(e, ir.Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, ir.Load):
            load = f"{e.array}[{self.expr(e.index)}]"
            if e.checked:
                return f"({self.in_bounds(e.array, e.index, e.guard)} ? {load} : {literal(0, e.ty)})"
            return load
        raise TypeError(e)  # pragma: no cover


def _uses_atomics(b: ir.Block) -> bool:
    for s in b.stmts:
        if isinstance(s, ir.Atomic):
            return True
        if any(_uses_atomics(c) for c in ir.children(s)):
            return True
    return False


def generate(k: ir.KernelIR) -> tuple[str, tuple[Loc | None, ...]]:
    """The ``c`` source of a kernel and its line map (one entry per generated line)."""
    return CGen(k).generate()
