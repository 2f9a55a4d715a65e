"""The ``c`` dialect generator: one source for CUDA and OpenCL through the prelude's macros.

Locals, ``shared`` (``LOCAL``) and ``local`` arrays are declared at the top of the kernel (OpenCL
wants ``__local`` at kernel scope). Atomics go through ``CL_ATOMIC_*`` macros defined here for both
APIs. Vectors are the APIs' ``float4``/``int2``/``uint4`` types; CUDA's have no operators, so every
vector operation is a small helper function (``cl_v<op>_<type>``) working lane by lane, emitted
before the kernel, and ``CL_MAKE_<type>`` builds a vector (``make_float4`` / ``(float4)(...)``).
:func:`generate` also returns a line map (generated line -> the user's source location), used
to point a backend's compile error at the Python line.
"""

from __future__ import annotations

from collections.abc import Sequence

from cubeplug.lang import ir
from cubeplug.lang.emitter import Emitter
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
#: The arithmetic of the unchecked indices of shared and local arrays (CGen.signed_index).
_INDEX = """\
#ifdef __OPENCL_VERSION__
#define CL_IX unsigned int
#else
#define CL_IX int
#endif
"""
#: f32 atomic arrays are ``unsigned int`` buffers: loads and stores reinterpret the bits; add is
#: CUDA's native ``atomicAdd(float*)`` and a compare-and-swap loop on the bit pattern on OpenCL;
#: min and max are such a loop on both (neither API has a float atomic min/max), stopping as soon as
#: the value would not change; exchange and compare-exchange (of the bit patterns) are the native
#: word operations.
_F32_ATOMICS = """\
#ifdef __OPENCL_VERSION__
#define CL_U2F(u) as_float(u)
#define CL_F2U(f) as_uint(f)
#define CL_F32_FN static inline
#define CL_F32_PTR volatile GLOBAL unsigned int*
#define CL_F32_CAS(p, c, v) atomic_cmpxchg((p), (c), (v))
#define CL_F32_XCHG(p, v) atomic_xchg((p), (v))
CL_F32_FN float cl_atomic_add_f32(CL_F32_PTR p, float v) {
    unsigned int cl_old = *p;
    unsigned int cl_seen;
    while ((cl_seen = atomic_cmpxchg(p, cl_old, as_uint(as_float(cl_old) + v))) != cl_old) cl_old = cl_seen;
    return as_float(cl_old);
}
#else
#define CL_U2F(u) __uint_as_float(u)
#define CL_F2U(f) __float_as_uint(f)
#define CL_F32_FN __device__ inline
#define CL_F32_PTR unsigned int*
#define CL_F32_CAS(p, c, v) atomicCAS((p), (c), (v))
#define CL_F32_XCHG(p, v) atomicExch((p), (v))
CL_F32_FN float cl_atomic_add_f32(CL_F32_PTR p, float v) { return atomicAdd((float*)p, v); }
#endif
CL_F32_FN float cl_atomic_min_f32(CL_F32_PTR p, float v) {
    unsigned int cl_old = *p;
    unsigned int cl_seen;
    while (v < CL_U2F(cl_old) && (cl_seen = CL_F32_CAS(p, cl_old, CL_F2U(v))) != cl_old) cl_old = cl_seen;
    return CL_U2F(cl_old);
}
CL_F32_FN float cl_atomic_max_f32(CL_F32_PTR p, float v) {
    unsigned int cl_old = *p;
    unsigned int cl_seen;
    while (v > CL_U2F(cl_old) && (cl_seen = CL_F32_CAS(p, cl_old, CL_F2U(v))) != cl_old) cl_old = cl_seen;
    return CL_U2F(cl_old);
}
CL_F32_FN float cl_atomic_exchange_f32(CL_F32_PTR p, float v) { return CL_U2F(CL_F32_XCHG(p, CL_F2U(v))); }
CL_F32_FN float cl_atomic_compare_exchange_f32(CL_F32_PTR p, float e, float v) {
    return CL_U2F(CL_F32_CAS(p, CL_F2U(e), CL_F2U(v)));
}
"""
_FLOAT_FN = {"abs": "fabs", "min": "fmin", "max": "fmax"}
#: Vector types by lane type; a bool vector (a comparison's result) is a uint vector of 0/1 lanes.
_VEC_BASE = {"f16": "half", "f32": "float", "i32": "int", "u32": "uint", "bool": "uint"}
_VEC_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow",
            "&": "and", "|": "or", "^": "xor", "<": "lt", "<=": "le", ">": "gt", ">=": "ge",
            "==": "eq", "!=": "ne", "<<": "shl", ">>": "shr"}
#: The elementwise vector operations, written lane by lane in a helper function.
_LANEWISE = (ir.BinOp, ir.UnOp, ir.Cast, ir.Call, ir.Select)
_LANES = "xyzw"
#: The qualifier of a pointer into shared memory (a lane store with a runtime lane).
_SHARED_PTR = """\
#ifdef __OPENCL_VERSION__
#define CL_SHARED_PTR __local
#else
#define CL_SHARED_PTR
#endif
"""
_VEC_PRELUDE = """\
#ifdef __OPENCL_VERSION__
#define CL_VFN static inline
#else
#define CL_VFN __device__ inline
#endif
"""


def ctype(ty: DType) -> str:
    """The C spelling of a type (``float4`` for ``f32x4``)."""
    if ty.is_vector:
        return f"{_VEC_BASE[ty.scalar.name]}{ty.lanes}"
    return C_TYPES[ty.name]


def _make_macro(ty: DType) -> str:
    name = ctype(ty)
    params = ", ".join(_LANES[: ty.lanes])
    args = ", ".join(f"({c})" for c in _LANES[: ty.lanes])
    if ty.scalar.name == "f16":
        # CUDA has no half vectors (cuda_fp16.h's __half2 is a pair for paired arithmetic, with
        # its own make_half2): a struct of the lanes, aligned as a whole for one wide load, as
        # OpenCL's half2/half4 are; the lanes convert to and from float like any __half.
        lanes = _LANES[: ty.lanes]
        sets = " ".join(f"r.{c} = {c};" for c in lanes)
        make = f"cl_make_{name}({', '.join('__half ' + c for c in lanes)}) {{ {name} r; {sets} return r; }}"
        return (f"#ifdef __OPENCL_VERSION__\n#define CL_MAKE_{name}({params}) (({name})({args}))\n#else\n"
                f"struct __align__({2 * ty.lanes}) cl_{name} {{ __half {params}; }};\n"
                f"#define {name} cl_{name}\n__device__ inline {name} {make}\n"
                f"#define CL_MAKE_{name}({params}) cl_make_{name}({args})\n#endif")
    return (f"#ifdef __OPENCL_VERSION__\n#define CL_MAKE_{name}({params}) (({name})({args}))\n#else\n"
            f"#define CL_MAKE_{name}({params}) make_{name}({args})\n#endif")


def literal(value: int | float | bool, ty: DType) -> str:
    """A constant spelled in C."""
    if ty.is_vector:
        lane = literal(value, ty.scalar)
        return f"CL_MAKE_{ctype(ty)}({', '.join([lane] * ty.lanes)})"
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


class CGen(Emitter):
    """Emits the C source of one :class:`~cubeplug.lang.ir.KernelIR`."""

    def __init__(self, k: ir.KernelIR) -> None:
        super().__init__(k)
        #: Vector types used (for their CL_MAKE macros) and helper functions, by name.
        self.vec_types: dict[str, DType] = {}
        self.helpers: dict[str, str] = {}
        #: Whether a lane store goes through a pointer into shared memory (CL_SHARED_PTR).
        self.shared_ptr = False
        #: The kernel's shared and local arrays (their unchecked indices: :meth:`subscript`).
        self.declared = frozenset(d.name for d in k.decls)
        #: Whether an index went through :meth:`signed_index` (CL_IX defined).
        self.signed = False

    def generate(self) -> tuple[str, tuple[Loc | None, ...]]:
        self.kernel()
        head: list[str] = []
        if _uses_atomics(self.k.body):
            head += _ATOMICS.splitlines()
        if self.fbits:
            head += _F32_ATOMICS.splitlines()
        if self.shared_ptr:
            head += _SHARED_PTR.splitlines()
        if self.signed:
            head += _INDEX.splitlines()
        if self.vec_types:
            head += _VEC_PRELUDE.splitlines()
            for ty in self.vec_types.values():
                head += _make_macro(ty).splitlines()
            head += list(self.helpers.values())
        body, locs = line_directives(self.lines, self.locs)
        return "\n".join(head + body) + "\n", (None,) * len(head) + locs

    def vtype(self, ty: DType) -> str:
        """``ctype(ty)``, noting a vector type's use."""
        if ty.is_vector:
            self.vec_types.setdefault(ctype(ty), ty)
        return ctype(ty)

    def helper(self, name: str, ret: DType, params: list[tuple[str, DType]], body: str) -> str:
        """The name of a helper function, defined once."""
        if name not in self.helpers:
            sig = ", ".join(f"{self.vtype(t)} {n}" for n, t in params)
            self.helpers[name] = f"CL_VFN {self.vtype(ret)} {name}({sig}) {{ return {body}; }}"
        return name

    def make(self, ty: DType, lanes: list[str]) -> str:
        return f"CL_MAKE_{self.vtype(ty)}({', '.join(lanes)})"

    def vec_lanewise(self, e: ir.BinOp | ir.UnOp | ir.Cast | ir.Call | ir.Select) -> str:
        """An elementwise vector operation: a call of a helper that applies the scalar operation to
        each lane (operands are evaluated once, as the helper's parameters ``a b c``)."""
        if isinstance(e, ir.Select):
            operands: tuple[ir.Expr, ...] = (e.cond, e.a, e.b)
            tag = "sel"
        elif isinstance(e, ir.Call):
            operands, tag = e.args, e.fn
        elif isinstance(e, ir.BinOp):
            operands, tag = (e.a, e.b), _VEC_OPS[e.op]
        else:
            operands, tag = (e.a,), "cast" if isinstance(e, ir.Cast) else "neg" if e.op == "-" else "not"
        names = "abc"[: len(operands)]
        parts = []
        for c in _LANES[: e.ty.lanes]:
            lane = [ir.Var(f"{n}.{c}" if o.ty.is_vector else n, o.ty.scalar, e.loc)
                    for n, o in zip(names, operands)]
            parts.append(unwrap(self.expr(_on_lanes(e, lane))))
        name = self.helper(f"cl_v{tag}_{'_'.join(o.ty.name for o in operands)}_{e.ty.name}", e.ty,
                           [(n, o.ty) for n, o in zip(names, operands)], self.make(e.ty, parts))
        return f"{name}({', '.join(unwrap(self.expr(o)) for o in operands)})"

    def vec_new(self, e: ir.VecNew) -> str:
        if len(e.args) > 1:
            return self.make(e.ty, [unwrap(self.expr(a)) for a in e.args])
        (s,) = e.args
        if isinstance(s, (ir.Const, ir.Var)):
            return self.make(e.ty, [self.expr(s)] * e.ty.lanes)
        name = self.helper(f"cl_vsplat_{ctype(e.ty)}", e.ty, [("s", e.ty.scalar)],
                           self.make(e.ty, ["s"] * e.ty.lanes))
        return f"{name}({unwrap(self.expr(s))})"

    def kernel(self) -> None:
        k = self.k
        params = []
        by_name = {a.name: a for a in k.arrays}
        scal = {s.name: s for s in k.scalars}
        for name in k.order:
            if name in by_name:
                a = by_name[name]
                const = "" if a.written or a.atomic else "const "
                elem = "unsigned int" if name in self.fbits else self.vtype(a.elem)
                params.append(f"GLOBAL {const}{elem}* {name}")
            else:
                params.append(f"{C_TYPES[scal[name].ty.name]} {name}")
        params += [f"unsigned int {n}" for n in k.hidden_names]
        self.line(f"KERNEL {entry_name(k.name)}({', '.join(params)}) {{")
        self.depth = 1
        for name, ty in k.locals:  # before the first #line (line_directives): no location
            self.line(f"{self.vtype(ty)} {name} = {literal(0, ty)};")
        for d in k.decls:
            prefix = "LOCAL " if d.space == "shared" else ""
            self.line(f"{prefix}{self.vtype(d.elem)} {d.name}[{d.size}];", d.loc)
        self.block(k.body)
        self.depth = 0
        self.line("}")

    # ------------------------------------------------------------------------------- statements
    def stmt_memory(self, s: ir.Store | ir.Atomic | ir.Barrier) -> None:
        if isinstance(s, ir.Store):
            value = self.expr(s.value)
            if s.array in self.fbits:
                value = f"CL_F2U({unwrap(value)})"
            store = f"{self.lane_ref(s.array, s.index, s.lane, s.checked)} = {value};"
            if s.checked:
                store = f"if ({self.in_bounds(s.array, s.index, s.guard)}) {store}"
            self.line(store, s.loc)
        elif isinstance(s, ir.Atomic):
            args = ", ".join(self.expr(a) for a in s.args)
            fn = f"cl_atomic_{s.op}_f32" if s.array in self.fbits else f"CL_ATOMIC_{s.op}"
            call = f"{fn}(&{self.subscript(s.array, s.index, s.checked)}, {args})"
            text = f"{s.out} = {call};" if s.out else f"{call};"
            if s.checked:
                other = f" else {s.out} = {literal(0, s.ty)};" if s.out else ""
                text = f"if ({self.in_bounds(s.array, s.index, s.guard)}) {{ {text} }}{other}"
            self.line(text, s.loc)
        else:
            self.line("SYNC_CUBE();", s.loc)

    def subscript(self, array: str, index: ir.Expr, checked: bool) -> str:
        """``array[index]``. The index of a ``shared`` or ``local`` array in an unchecked access is
        ``CL_IX`` arithmetic (:meth:`signed_index`); every other index is the expression as it is
        (a ``u32`` index wraps as the language says)."""
        if checked or array not in self.declared or index.ty.name != "u32":  # i32 is signed already
            return f"{array}[{self.expr(index)}]"
        return f"{array}[{unwrap(self.signed_index(index))}]"

    def signed_index(self, e: ir.Expr) -> str:
        """``e`` (a u32 index) with its ``+``, ``-`` and ``*`` in ``CL_IX``, every other
        operand converted to it: ``int`` under CUDA, ``unsigned int`` (the language's own
        arithmetic, the same source as without this) under OpenCL.

        Why: an unsigned index must wrap at 2**32, so a compiler may not distribute its arithmetic
        into the address (``(row + 8) * 32 + p`` as ``row * 32 + p`` plus a constant offset);
        signed overflow is undefined, and it may. On the H100 (``bench/probes/index_forms.py``,
        2048^3) std's ``tiled_32`` took 1.033x the time of the hand kernel, whose ``As[row][p]``
        is such an address; with ``int`` indices 0.993x, and the register-blocked matmuls up to
        12 % faster (4096^3 autotuned: 41.6 -> 44.7 TFLOP/s; docs/lang.md, "Indices of shared and
        local arrays"). NVIDIA's OpenCL compiler went both ways (``reg_8x8_vec`` 1.45x
        slower: 103 -> 167 registers a unit, half the occupancy; ``reg_8x16_vec_db16`` 10 %
        faster), so OpenCL keeps unsigned arithmetic; a kernel indexing in i32 gets int on both
        (std's double-buffered matmuls, ``RegBlock.index``). The value
        differs from the unsigned one only where that one wraps, which no index of a shared or
        local array (a few thousand elements) does, and an unchecked access out of the array is
        undefined already."""
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*") and e.ty.name == "u32":
            return f"({self.signed_index(e.a)} {e.op} {self.signed_index(e.b)})"
        if isinstance(e, ir.Const) and 0 <= int(e.value) < 2**31:
            return str(int(e.value))  # an int: CL_IX's type decides the arithmetic
        self.signed = True
        return f"((CL_IX){self.expr(e)})"

    def lane_ref(self, array: str, index: ir.Expr, lane: ir.Expr | None, checked: bool) -> str:
        """``array[index]``, or lane ``lane`` of it: ``.x`` for a constant lane, else the element
        seen as an array of its lanes (CUDA's vector types cannot be indexed), a pointer into the
        array's address space (``CL_SHARED_PTR``: ``__local`` on OpenCL, nothing on CUDA, where
        ``__shared__`` is no pointer qualifier)."""
        ref = self.subscript(array, index, checked)
        if lane is None:
            return ref
        if isinstance(lane, ir.Const):
            return f"{ref}.{_LANES[int(lane.value)]}"
        decl = self.k.array(array)
        shared = isinstance(decl, ir.ArrayDecl) and decl.space == "shared"
        space = "CL_SHARED_PTR " if shared else "" if isinstance(decl, ir.ArrayDecl) else "GLOBAL "
        self.shared_ptr |= shared
        scalar = C_TYPES[decl.elem.scalar.name]
        return f"(({space}{scalar}*)&{ref})[{self.expr(lane)}]"

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
        if isinstance(e, _LANEWISE) and e.ty.is_vector:
            return self.vec_lanewise(e)
        if isinstance(e, ir.VecNew):
            return self.vec_new(e)
        if isinstance(e, ir.VecGet):
            v = self.expr(e.v)
            return f"{v if v.isidentifier() else f'({v})'}.{_LANES[e.lane]}"
        if isinstance(e, ir.BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            ty = e.a.ty
            if e.op == "//":
                if not ty.is_float:
                    return f"({a} / {b})"
                if ty.name == "f16":
                    return f"((half)floor((float)({a}) / (float)({b})))"
                return f"floor({a} / {b})"
            if e.op == "%" and ty.is_float:
                return _float_call("fmod", [a, b], ty)
            if e.op == "**":
                return _float_call("pow", [a, b], ty)
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
            if e.ty.is_float:
                return _float_call(_FLOAT_FN.get(e.fn, e.fn), args, e.ty)
            return f"{e.fn}({', '.join(args)})"
        if isinstance(e, ir.Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, ir.Load):
            load = self.subscript(e.array, e.index, e.checked)
            if e.array in self.fbits:
                load = f"CL_U2F({load})"
            if e.checked:
                if e.ty.is_vector:
                    self.vtype(e.ty)
                return f"({self.in_bounds(e.array, e.index, e.guard)} ? {load} : {literal(0, e.ty)})"
            return load
        raise TypeError(e)  # pragma: no cover


def _float_call(fn: str, args: list[str], ty: DType) -> str:
    """``fn(args)`` for a float ``ty``. f16 goes through float: CUDA's ``__half`` converts implicitly
    to float, double and the integer types, so ``sqrt(h)``, ``fmin(h, g)`` and the like match several
    overloads and NVRTC refuses them (and OpenCL's half math is an extension's); the float result,
    rounded to half, is what a half function would give or closer."""
    if ty.name != "f16":
        return f"{fn}({', '.join(args)})"
    return f"((half){fn}({', '.join(f'(float)({a})' for a in args)}))"


def line_directives(lines: list[str], locs: list[Loc | None]) -> tuple[list[str], tuple[Loc | None, ...]]:
    """The kernel's lines with ``#line N "file"`` directives, so that NVRTC and OpenCL C compilers
    report an error in generated code at the user's file and line; and the line map of the result
    (directives map to None). A directive goes before a located line only where the compiler's own
    count would be off; lines without a location (the signature and locals, which come first, and
    closing braces) take the count as it runs."""
    out: list[str] = []
    where: list[Loc | None] = []
    expect: tuple[str, int] | None = None  # the (file, line) the compiler gives the next line
    for text, loc in zip(lines, locs):
        if loc is not None and expect != (loc.file, loc.line):
            name = loc.file.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'#line {loc.line} "{name}"')
            where.append(None)
            expect = (loc.file, loc.line)
        out.append(text)
        where.append(loc)
        if expect is not None:
            expect = (expect[0], expect[1] + 1)
    return out, tuple(where)


def _on_lanes(e: ir.BinOp | ir.UnOp | ir.Cast | ir.Call | ir.Select, lanes: Sequence[ir.Expr]) -> ir.Expr:
    """The scalar operation of the vector operation ``e`` on one lane of its operands."""
    ty = e.ty.scalar
    if isinstance(e, ir.Select):
        return ir.Select(lanes[0], lanes[1], lanes[2], ty, e.loc)
    if isinstance(e, ir.Call):
        return ir.Call(e.fn, tuple(lanes), ty, e.loc)
    if isinstance(e, ir.BinOp):
        return ir.BinOp(e.op, lanes[0], lanes[1], ty, e.loc)
    if isinstance(e, ir.Cast):
        return ir.Cast(lanes[0], ty, e.loc)
    return ir.UnOp(e.op, lanes[0], ty, e.loc)


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
