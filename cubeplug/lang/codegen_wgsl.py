"""The ``wgsl`` dialect generator: the entry point and body; the backend writes the bindings.

Buffers are the backend's bindings named as the params, reached as struct members (``p.data[i]``:
the source starts with :data:`~cubeplug.core.wgsl.STRUCT_BUFFERS`, see that module for why; atomic
arrays are declared ``Buffer(..., atomic=True)`` so they bind as ``array<atomic<T>>``); scalars
and hidden lengths are fields of the backend's ``scalars`` struct, each copied into a ``let`` when
the entry point starts. Positions come from the entry point's builtins. A local array every
access of which has a constant index is one variable an element (:func:`split_locals`).
``atomic_compare_exchange`` is a strong compare-and-swap: a loop over
``atomicCompareExchangeWeak`` that retries spurious failures.
"""

from __future__ import annotations

from cubeplug.core.wgsl import BUFFER_MEMBER, STRUCT_BUFFERS
from cubeplug.lang import ir
from cubeplug.lang.emitter import Emitter
from cubeplug.lang.errors import Loc
from cubeplug.lang.fences import storage_fenced
from cubeplug.lang.names import ELEMENT_PREFIX, SCALAR_PREFIX, entry_name, unwrap
from cubeplug.lang.types import DType

W_TYPES = {"f16": "f16", "f32": "f32", "f64": "f64", "i32": "i32", "u32": "u32", "i64": "i64",
           "u64": "u64", "bool": "bool"}
_BUILTINS = {"UNIT_POS": "cl_lid", "CUBE_POS": "cl_wid", "CUBE_COUNT": "cl_nwg", "ABSOLUTE_POS": "cl_gid"}
_ATOMIC_FN = {"add": "atomicAdd", "sub": "atomicSub", "min": "atomicMin", "max": "atomicMax",
              "exchange": "atomicExchange"}


def wtype(ty: DType) -> str:
    """The WGSL spelling of a type (``vec4<f32>`` for ``f32x4``)."""
    if ty.is_vector:
        return f"vec{ty.lanes}<{W_TYPES[ty.scalar.name]}>"
    return W_TYPES[ty.name]


def literal(value: int | float | bool, ty: DType) -> str:
    """A constant spelled in WGSL (every lane ``value`` for a vector)."""
    if ty.is_vector:
        return f"{wtype(ty)}({literal(value, ty.scalar)})"
    if ty.name == "bool":
        return "true" if value else "false"
    if ty.is_float:
        text = repr(float(value))
        if not any(c in text for c in ".e"):
            text += ".0"
        return {"f32": f"{text}f", "f16": f"{text}h"}.get(ty.name, f"f64({text})")
    v = int(value)
    if ty.name == "i32":
        return f"{v}i" if v > -(2**31) else "(-2147483647i - 1i)"
    if ty.name == "u32":
        return f"{v}u"
    return f"{ty.name}({v})"


class WgslGen(Emitter):
    """Emits the WGSL source of one :class:`~cubeplug.lang.ir.KernelIR`."""

    def __init__(self, k: ir.KernelIR) -> None:
        super().__init__(k)
        self.atomic = {a.name for a in k.arrays if a.atomic}
        #: The barriers that must order storage memory too (the others: workgroup memory only).
        self.storage_fenced = storage_fenced(k)
        #: The local arrays declared as one variable an element (see :func:`split_locals`).
        self.split = split_locals(k)
        #: The global arrays (buffer params), reached as their bindings' ``data`` member.
        self.globals = {a.name for a in k.arrays}

    def generate(self) -> tuple[str, tuple[Loc | None, ...]]:
        k = self.k
        self.line(STRUCT_BUFFERS)
        for d in k.decls:
            if d.space == "shared":
                self.line(f"var<workgroup> {d.name}: array<{wtype(d.elem)}, {d.size}>;", d.loc)
        self.line("@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)")
        self.line(
            f"fn {entry_name(k.name)}(@builtin(local_invocation_id) cl_lid: vec3<u32>, "
            "@builtin(workgroup_id) cl_wid: vec3<u32>, @builtin(num_workgroups) cl_nwg: vec3<u32>, "
            "@builtin(global_invocation_id) cl_gid: vec3<u32>) {"
        )
        self.depth = 1
        for d in k.decls:
            if d.space == "local" and d.name in self.split:
                for i in range(d.size):
                    self.line(f"var {element(d.name, i)}: {wtype(d.elem)};", d.loc)
            elif d.space == "local":
                self.line(f"var {d.name}: array<{wtype(d.elem)}, {d.size}>;", d.loc)
        for name, ty in k.locals:
            self.line(f"var {name}: {wtype(ty)} = {literal(0, ty)};")
        # The scalars are fields of a storage struct, which the drivers do not keep in registers
        # across a loop that also touches storage buffers (they may alias): a loop bound
        # `j < scalars.n` reloads it every step. One `let` each, read once, is a register.
        for name in (*(s.name for s in k.scalars), *k.hidden_names):
            self.line(f"let {SCALAR_PREFIX}{name} = scalars.{name};")
        self.block(k.body)
        self.depth = 0
        self.line("}")
        return "\n".join(self.lines) + "\n", tuple(self.locs)

    # ------------------------------------------------------------------------------- statements
    def guarded(self, s: ir.Store | ir.Atomic, text: str, other: str = "") -> None:
        if s.checked:
            tail = f" else {{ {other} }}" if other else ""
            self.line(f"if ({self.in_bounds(s.array, s.index, s.guard)}) {{ {text} }}{tail}", s.loc)
        else:
            self.line(text, s.loc)

    def stmt_memory(self, s: ir.Store | ir.Atomic | ir.Barrier) -> None:
        if isinstance(s, ir.Store):
            ref = self.element_ref(s.array, s.index)
            if s.lane is not None:  # a vector in memory takes a lane store, constant or not
                ref += f"[{self.index(s.lane)}]"
            value = self.expr(s.value)
            if s.array in self.fbits:
                value = f"bitcast<u32>({unwrap(value)})"
            text = f"atomicStore(&{ref}, {value});" if s.array in self.atomic else f"{ref} = {value};"
            self.guarded(s, text)
        elif isinstance(s, ir.Atomic):
            ref = f"&{self.element_ref(s.array, s.index)}"
            args = [self.expr(a) for a in s.args]
            target = s.out or "_"
            if s.array in self.fbits:  # f32 on a u32 atomic: the bits (add, min, max: a CAS loop)
                done = f" {s.out} = bitcast<f32>(cl_old);" if s.out else ""
                text = _f32_atomic(s.op, ref, args) + done
                if not s.checked:
                    text = f"{{ {text} }}"
            elif s.op == "compare_exchange":
                done = f"{s.out} = cl_cas.old_value; " if s.out else ""
                text = (
                    f"loop {{ let cl_cas = atomicCompareExchangeWeak({ref}, {args[0]}, {args[1]}); "
                    f"if (cl_cas.exchanged || cl_cas.old_value != {args[0]}) {{ {done}break; }} }}"
                )
            else:
                text = f"{target} = {_ATOMIC_FN[s.op]}({ref}, {args[0]});"
            other = f"{s.out} = {literal(0, s.ty)};" if s.out else ""
            self.guarded(s, text, other)
        else:
            if id(s) in self.storage_fenced:  # a global write may come before it (fences.py)
                self.line("storageBarrier();", s.loc)
            self.line("workgroupBarrier();", s.loc)

    def element_ref(self, array: str, index: ir.Expr) -> str:
        """``array[index]`` as the source names it: a global array is its binding's ``data``
        member, an element of a split local array is a variable of its own."""
        if array in self.split:
            return element(array, _const_index(index))
        base = f"{array}.{BUFFER_MEMBER}" if array in self.globals else array
        return f"{base}[{self.index(index)}]"

    def in_bounds(self, array: str, index: ir.Expr, guard: ir.Expr | None = None) -> str:
        decl = self.k.array(array)
        bound = f"{decl.size}u" if isinstance(decl, ir.ArrayDecl) else f"{SCALAR_PREFIX}{self.lens[array]}"
        if guard is not None:
            return f"{self.expr(guard)} && {self.as_u32(index)} < {bound}"
        return f"{self.as_u32(index)} < {bound}"

    def as_u32(self, index: ir.Expr) -> str:
        text = self.expr(index)
        return text if index.ty.name == "u32" else f"u32({text})"

    def index(self, index: ir.Expr) -> str:
        return self.expr(index) if index.ty.name in ("u32", "i32") else self.as_u32(index)

    # ------------------------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            return literal(e.value, e.ty)
        if isinstance(e, ir.Var):
            return e.name if e.kind == "local" else f"{SCALAR_PREFIX}{e.name}"
        if isinstance(e, ir.Builtin):
            base, axis = e.name[:-2], e.name[-1].lower()
            return f"{_BUILTINS[base]}.{axis}"
        if isinstance(e, ir.VecNew):
            return f"{wtype(e.ty)}({', '.join(unwrap(self.expr(a)) for a in e.args)})"
        if isinstance(e, ir.VecGet):
            v = self.expr(e.v)
            return f"{v if v.isidentifier() else f'({v})'}.{'xyzw'[e.lane]}"
        if isinstance(e, ir.BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            ty = e.a.ty
            if e.op == "//":
                return f"floor({a} / {b})" if ty.is_float else f"({a} / {b})"
            if e.op == "**":
                return f"pow({a}, {b})"
            if e.op == "%" and ty.kind == "i":
                # a - (a / b) * b: NVIDIA's Vulkan driver (through naga) gives the dividend for a
                # signed `%` with a negative divisor.
                return f"({a} - ({a} / {b}) * {b})"
            if e.op in ("<<", ">>"):  # WGSL shifts by u32 amounts (vecN<u32> for vectors)
                if isinstance(e.b, ir.Const):
                    b = f"{int(e.b.value) & (ty.bits - 1)}u"
                elif e.b.ty.is_vector and e.b.ty.scalar.name != "u32":
                    b = f"vec{e.b.ty.lanes}<u32>({unwrap(b)})"
                elif not e.b.ty.is_vector and e.b.ty.name != "u32":
                    b = f"u32({b})"
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({a} {op} {b})"
        if isinstance(e, ir.UnOp):
            a = self.expr(e.a)
            if e.op == "-" and e.ty.kind == "u":
                return f"({literal(0, e.ty)} - {a})"
            return f"({'!' if e.op == 'not' else e.op}{a})"
        if isinstance(e, ir.Cast):
            return f"{wtype(e.ty)}({unwrap(self.expr(e.a))})"
        if isinstance(e, ir.Call):
            return f"{e.fn}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, ir.Select):
            return f"select({self.expr(e.b)}, {self.expr(e.a)}, {self.expr(e.cond)})"
        if isinstance(e, ir.Load):
            ref = self.element_ref(e.array, e.index)
            load = f"atomicLoad(&{ref})" if e.array in self.atomic else ref
            if e.array in self.fbits:
                load = f"bitcast<f32>({load})"
            if e.checked:
                return f"select({literal(0, e.ty)}, {load}, {self.in_bounds(e.array, e.index, e.guard)})"
            return load
        raise TypeError(e)  # pragma: no cover


def _f32_atomic(op: str, ref: str, args: list[str]) -> str:
    """An f32 atomic on the u32 atomic at ``ref``, leaving the old bits in ``cl_old``: exchange and
    compare-exchange (of the bit patterns) natively, add/min/max as a compare-and-swap loop that
    retries until the word it read is the word it replaced (min/max stop when nothing changes)."""
    if op == "exchange":
        return f"let cl_old = atomicExchange({ref}, bitcast<u32>({unwrap(args[0])}));"
    if op == "compare_exchange":
        return (
            f"let cl_e = bitcast<u32>({unwrap(args[0])}); let cl_n = bitcast<u32>({unwrap(args[1])}); "
            f"var cl_old = 0u; loop {{ let cl_cas = atomicCompareExchangeWeak({ref}, cl_e, cl_n); "
            f"cl_old = cl_cas.old_value; if (cl_cas.exchanged || cl_old != cl_e) {{ break; }} }}"
        )
    new = {"add": "bitcast<f32>(cl_old) + cl_v", "min": "cl_v", "max": "cl_v"}[op]
    stop = {"add": "", "min": "if (!(cl_v < bitcast<f32>(cl_old))) { break; } ",
            "max": "if (!(cl_v > bitcast<f32>(cl_old))) { break; } "}[op]
    return (
        f"let cl_v = {unwrap(args[0])}; var cl_old = atomicLoad({ref}); loop {{ {stop}"
        f"let cl_cas = atomicCompareExchangeWeak({ref}, cl_old, bitcast<u32>({new})); "
        f"if (cl_cas.exchanged) {{ break; }} cl_old = cl_cas.old_value; }}"
    )


#: The largest local array split (``spirv-opt --scalar-replacement``'s default limit is 100; std's
#: largest register block is 128 elements, f64 matmul's accumulators).
MAX_SPLIT = 128


def element(array: str, index: int) -> str:
    """The variable holding element ``index`` of a split local array."""
    return f"{ELEMENT_PREFIX}{array}_{index}"


def _const_index(e: ir.Expr) -> int:
    if not isinstance(e, ir.Const):  # pragma: no cover - split_locals splits constant-indexed arrays only
        raise TypeError(f"a split local array indexed by {e!r}")
    return int(e.value)


def split_locals(k: ir.KernelIR) -> frozenset[str]:
    """The local arrays that every access indexes with a constant in range: unrolled loops leave
    register blocks such as matmul's accumulators indexed only so. naga declares a WGSL array as
    one SPIR-V array variable, and NVIDIA's Vulkan compiler schedules the register-blocked matmul
    worse that way. Each element of such an array is declared as a variable of its own (as
    ``spirv-opt --scalar-replacement`` would split it): with the buffers reached as struct members
    too (:mod:`cubeplug.core.wgsl`), std.matmul's ``reg_8x16_vec_db16`` went from 36.4 to 42.3
    TFLOP/s on the H100; either change alone gained nothing (docs/std.md, "Vulkan")."""
    sizes = {d.name: d.size for d in k.decls if d.space == "local" and d.size <= MAX_SPLIT}
    indexed = set()
    for node in ir.nodes(k.body):
        if isinstance(node, (ir.Load, ir.Store, ir.Atomic)) and node.array in sizes:
            i = node.index
            constant = isinstance(i, ir.Const) and 0 <= int(i.value) < sizes[node.array]
            if not constant or isinstance(node, ir.Atomic):
                indexed.add(node.array)
    return frozenset(sizes) - indexed


def generate(k: ir.KernelIR) -> tuple[str, tuple[Loc | None, ...]]:
    """The ``wgsl`` source of a kernel and its line map (one entry per generated line)."""
    return WgslGen(k).generate()
