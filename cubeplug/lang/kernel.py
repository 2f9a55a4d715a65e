"""``@cl.kernel``: a Python function compiled for every backend, specialized and cached.

``launch(client, count, cube_dim, *args, **comptime)`` finds the launcher of (client, cube_dim,
comptime values) in a dict; on a miss it specializes the kernel for the client's dialect (cached per
dialect, device dtypes, cube dim, comptime values and mode) and builds the launcher, a small
generated function that splits the buffers from the scalars and appends the hidden array lengths.
A cached launch does no AST or IR work. The caches hold clients weakly: a launcher takes its
client as an argument, and an entry (keyed by the client's id) goes when its client is collected,
so that a client dropped without ``close()`` is not kept alive, with its device memory, by a kernel.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cubeplug.core.errors import CompileError, ValidationError
from cubeplug.core.weak import forget_entry
from cubeplug.lang.compile import Specialized, pick_dialect, specialize
from cubeplug.lang.errors import KernelError, Loc, NotInKernelError
from cubeplug.lang.marshal import bad_argument, bad_tensor, dispatcher_source, launcher_source, unwrap_arrays
from cubeplug.lang.printer import print_kernel
from cubeplug.lang.source import Captured, capture

if TYPE_CHECKING:
    from cubeplug.core.client import ComputeClient
    from cubeplug.core.kernel import CubeCount

CubeDim = int | tuple[int, ...]


def _dims(cube_dim: Any) -> tuple[int, int, int]:
    dims = (cube_dim,) if isinstance(cube_dim, int) else tuple(cube_dim)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise ValidationError(f"cube_dim must be 1 to 3 positive ints, got {cube_dim!r}")
    return (int(dims[0]), int((*dims, 1)[1]), int((*dims, 1, 1)[2]))


def _launcher_key(client: Any, cube_dim: Any, comptime: dict[str, Any]) -> tuple[Any, ...]:
    """The key of a launch's launcher: the client, the cube dim as given (a list as a tuple, to be
    hashable) and the comptime values, if any."""
    if isinstance(cube_dim, list):
        cube_dim = tuple(cube_dim)
    if not comptime:
        return (id(client), cube_dim)
    # The value's type is part of the key: 1, 1.0 and True are equal (and hash alike) in Python
    # but are checked against their Comptime annotations, and may type a local differently.
    return (id(client), cube_dim, tuple((k, type(v), v) for k, v in comptime.items()))


_MISSING = object()  # a positional argument the caller left out

#: A launcher cache entry: (weak reference to its client, launcher, specialization).
_Entry = tuple[weakref.ref[Any], Callable[..., None], Specialized]


class LangKernel:
    """A kernel written in Python; launch it on any client."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = fn.__doc__
        self._specs: dict[tuple[Any, ...], Specialized] = {}
        self._launchers: dict[tuple[Any, ...], _Entry] = {}
        self._unchecked: dict[tuple[Any, ...], _Entry] = {}
        self._lock = threading.Lock()
        #: Per mode (checked?): a one-item list holding (weak reference to the client, cube_dim,
        #: Kernel, comptime values, launcher, comptime types) of the last launch, read by the
        #: generated dispatchers.
        self._state: dict[bool, list[tuple[Any, ...]]] = {True: [(None,)], False: [(None,)]}

    @functools.cached_property
    def captured(self) -> Captured:
        """The parsed source (captured on first use)."""
        return capture(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotInKernelError(
            f"@cl.kernel {self.__qualname__} is launched with .launch(client, count, cube_dim, *args), "
            f"not called"
        )

    def __repr__(self) -> str:
        return f"<cl.kernel {self.__qualname__}>"

    # ------------------------------------------------------------------------------- launches
    # After the first launch, ``launch`` and ``launch_unchecked`` are instance attributes:
    # generated dispatchers (marshal.dispatcher_source) that launch directly when the client, cube
    # dim and comptime values are those of the previous launch, and call ``_dispatch`` else.
    # The methods below forward to them, so that a bound method taken before the first launch
    # (``go = kern.launch``) is not stuck on the dict path (about 0.6 us more a launch here).
    # bench_lang.py took its bound methods that way, so it timed the dict path on its first
    # backend: cpu here, CUDA in the H100 run (its 1.22x, against 1.05x on the next backends).
    def launch(self, client: ComputeClient, count: CubeCount | int | tuple[int, ...], cube_dim: CubeDim,
               *args: Any, **comptime: Any) -> None:
        """Launch with bound-checked array accesses (out-of-bounds writes dropped, reads give 0)."""
        fast = self.__dict__.get("launch")  # a bound method taken before the dispatcher existed
        if fast is not None:
            fast(client, count, cube_dim, *args, **comptime)
        else:
            self._dispatch(True, client, count, cube_dim, args, comptime)

    def launch_unchecked(
        self, client: ComputeClient, count: CubeCount | int | tuple[int, ...], cube_dim: CubeDim,
        *args: Any, **comptime: Any,
    ) -> None:
        """Launch without bound checks (and without the client's argument validation)."""
        fast = self.__dict__.get("launch_unchecked")
        if fast is not None:
            fast(client, count, cube_dim, *args, **comptime)
        else:
            self._dispatch(False, client, count, cube_dim, args, comptime)

    def _dispatch(
        self, checked: bool, client: Any, count: Any, cube_dim: Any, args: tuple[Any, ...],
        comptime: dict[str, Any],
    ) -> None:
        """The general launch: find (or build) the launcher of (client, cube dim, comptime values)."""
        table = self._launchers if checked else self._unchecked
        key = _launcher_key(client, cube_dim, comptime)
        try:
            ref, fn, spec = table[key]
        except (KeyError, TypeError):  # TypeError: an unhashable comptime value; _prepare raises it
            ref = None
        if ref is None or ref() is not client:
            fn, spec = self._prepare(client, cube_dim, comptime, checked, count, args)
            ref = weakref.ref(client, functools.partial(forget_entry, table, key))
            table[key] = (ref, fn, spec)
        else:
            self._check_count(spec, args)
            fn(client, count, *args)
        if isinstance(cube_dim, (int, tuple)):
            self._remember(checked, ref, cube_dim, spec, comptime, fn)

    def _check_count(self, spec: Specialized, args: tuple[Any, ...]) -> None:
        if len(args) != len(spec.args):
            raise ValidationError(
                f"kernel {self.__name__!r} takes {len(spec.args)} arguments after cube_dim "
                f"({', '.join(spec.ir.order)}), got {len(args)}"
            )

    def _remember(self, checked: bool, client: weakref.ref[Any], cube_dim: Any, spec: Specialized,
                  comptime: dict[str, Any], launcher: Callable[..., None]) -> None:
        """Point the fast dispatcher of a mode at this launch's client (held weakly), cube dim and
        comptime values (installing the dispatcher once)."""
        state = self._state[checked]
        names = self._comptime_names
        types = tuple(type(comptime.get(name)) for name in names)
        state[0] = (client, cube_dim, spec.kernel, comptime, launcher, types)
        attr = "launch" if checked else "launch_unchecked"
        if attr in self.__dict__:
            return
        positional = self._positional
        params = tuple(self.captured.tree.args.args[i].arg for i in positional)
        # A kernel with comptime parameters has one specialization per value: its dispatcher calls
        # the remembered specialization's launcher (one frame more) instead of marshalling inline.
        via_launcher = len(positional) < len(self.captured.tree.args.args)
        namespace: dict[str, Any] = {
            "cl__state": state, "cl__NO": _MISSING, "cl__bad": bad_argument, "cl__tensor": bad_tensor,
            "cl__unwrap": unwrap_arrays,
            "cl__slow": functools.partial(self._slow, checked),
        }
        code = dispatcher_source(self.__name__, params, spec, checked, via_launcher, names)
        exec(compile(code, f"<dispatcher {self.__name__}>", "exec"), namespace)
        setattr(self, attr, namespace[f"{self.__name__}_launch"])

    @functools.cached_property
    def _comptime_names(self) -> tuple[str, ...]:
        """The comptime parameters' names, in the signature's order (worked out once: the slow
        launch path reads them at every call)."""
        positional = set(self._positional)
        return tuple(a.arg for i, a in enumerate(self.captured.tree.args.args) if i not in positional)

    @functools.cached_property
    def _positional(self) -> tuple[int, ...]:
        """Indices of the parameters passed positionally at launch (all but comptime ones)."""
        return tuple(i for i, a in enumerate(self.captured.tree.args.args)
                     if a.annotation is None or "Comptime" not in ast.unparse(a.annotation))

    def _slow(self, checked: bool, client: Any, count: Any, cube_dim: Any, args: tuple[Any, ...],
              comptime: dict[str, Any]) -> None:
        given = tuple(a for a in args if a is not _MISSING)
        self._dispatch(checked, client, count, cube_dim, given, comptime)

    def specialized(
        self, client: ComputeClient, cube_dim: CubeDim = 256, *, checked: bool = True, **comptime: Any
    ) -> Specialized:
        """The specialization for a client (its dialect and dtypes), cube dim and comptime values."""
        dialects = tuple(client.server.dialects)
        dialect = pick_dialect(dialects)
        if dialect is None:
            raise CompileError(
                f"cubeplug.lang generates the c, wgsl and python dialects; backend {client.backend!r} "
                f"compiles {list(dialects)}",
                backend=client.backend, kernel=self.__name__,
            )
        caps = client.capabilities
        return self.specialize_for(dialect, frozenset(caps.dtypes), cube_dim, checked, comptime,
                                   shared_limit=caps.max_shared_bytes)

    def specialize_for(
        self, dialect: str, dtypes: frozenset[str] | None, cube_dim: CubeDim, checked: bool,
        comptime: dict[str, Any], shared_limit: int | None = None,
    ) -> Specialized:
        """The (cached) specialization for a dialect, a set of device dtypes and a device's shared
        memory a cube (None: unchecked)."""
        dims = _dims(cube_dim)
        key = (dialect, dtypes, shared_limit, dims, checked,
               tuple(sorted((k, type(v), v) for k, v in comptime.items())))
        spec = self._specs.get(key)
        if spec is None:
            with self._lock:
                spec = self._specs.get(key)
                if spec is None:
                    spec = specialize(self.captured, self.__name__, dict(comptime), dims, checked,
                                      dialect, dtypes, shared_limit)
                    self._specs[key] = spec
        return spec

    def _prepare(
        self, client: Any, cube_dim: Any, comptime: dict[str, Any], checked: bool, count: Any,
        args: tuple[Any, ...],
    ) -> tuple[Callable[..., None], Specialized]:
        """Specialize, build the launcher, and run this first launch (mapping compile errors); the
        caller stores the launcher."""
        spec = self.specialized(client, cube_dim, checked=checked, **comptime)
        self._check_count(spec, args)
        namespace: dict[str, Any] = {
            "kernel": spec.kernel,
            "cl__bad": bad_argument,
            "cl__tensor": bad_tensor,
            "cl__unwrap": unwrap_arrays,
        }
        exec(compile(launcher_source(self.__name__, spec, checked), f"<launcher {self.__name__}>", "exec"),
             namespace)
        fn: Callable[..., None] = namespace[f"{self.__name__}_launch"]
        try:
            fn(client, count, *args)
        except CompileError as e:
            raise self._map_error(spec, e) from e
        return fn, spec

    def _map_error(self, spec: Specialized, e: CompileError) -> CompileError:
        """A backend's compile error of the generated source as a KernelError at the user's line:
        the first ``file:line`` / ``file(line)`` of a user's file in the compiler's log (the ``c``
        source carries ``#line`` directives), else the generated line the backend names, through
        the line map."""
        if isinstance(e, KernelError):
            return e
        loc = user_location(spec.line_map, f"{e.log or ''}\n{e}")
        where = f"{loc.file}:{loc.line}" if loc is not None else f"its line {e.line}"
        if loc is None and e.line is not None and 0 < e.line <= len(spec.line_map):
            loc = spec.line_map[e.line - 1]
        if loc is None:
            return e
        return KernelError(
            f"the generated {spec.dialect} source failed to compile on {e.backend} at {where}: {e}",
            loc, "backend compile", kernel=self.__name__,
        )

    # ------------------------------------------------------------------------------- inspection
    def source(self, client: ComputeClient, cube_dim: CubeDim = 256, *, checked: bool = True,
               **comptime: Any) -> str:
        """The generated source for the client's dialect (the IR text for the python dialect)."""
        spec = self.specialized(client, cube_dim, checked=checked, **comptime)
        return spec.source if isinstance(spec.source, str) else print_kernel(spec.ir)

    def ir(self, cube_dim: CubeDim = 256, *, checked: bool = True, dtypes: frozenset[str] | None = None,
           **comptime: Any) -> str:
        """The IR text of a specialization (no client needed)."""
        return print_kernel(self.specialize_for("python", dtypes, cube_dim, checked, comptime).ir)


def user_location(line_map: tuple[Loc | None, ...], log: str) -> Loc | None:
    """The first place in a compiler's log that names a user's file and line (clang's
    ``file:12:5:``, NVRTC's ``file(12):``), as the location of that line in the line map (its
    column) or at column 1; None when the log names none."""
    files = {loc.file for loc in line_map if loc is not None}
    if not files:
        return None
    pattern = re.compile("(" + "|".join(re.escape(f) for f in sorted(files)) + r")(?::|\()(\d+)")
    for text in log.splitlines():
        if "error" not in text.lower():
            continue
        m = pattern.search(text)
        if m is not None:
            file, line = m.group(1), int(m.group(2))
            return next((loc for loc in line_map if loc is not None and (loc.file, loc.line) == (file, line)),
                        Loc(file, line, 1))
    return None


def kernel(fn: Callable[..., Any]) -> LangKernel:
    """Decorator: a kernel written in Python, launched with ``.launch(client, count, cube_dim, ...)``."""
    return LangKernel(fn)
