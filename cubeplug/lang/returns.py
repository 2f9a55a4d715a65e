"""Early ``return`` in ``@cl.func`` helpers: the body rewritten so that every ``return`` ends a branch.

A helper is inlined, so a ``return`` cannot jump: the statements after an ``if`` that returns are
moved into both of its branches (``if c: return a`` + rest becomes ``if c: return a`` / ``else:
rest``), recursively, and code after a ``return`` is dropped. Then each ``return e`` assigns the
helper's result local and ends its branch. A ``return`` inside a loop of a helper is not supported
(kernels may return anywhere: their ``return`` is a real one).
"""

from __future__ import annotations

import ast


def has_return(stmts: list[ast.stmt]) -> bool:
    """True when a ``return`` occurs anywhere in ``stmts``."""
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


def early(stmts: list[ast.stmt]) -> bool:
    """True when ``stmts`` (a helper's body) has a ``return`` other than its last statement."""
    return has_return(stmts[:-1]) or (bool(stmts) and not isinstance(stmts[-1], ast.Return)
                                      and has_return(stmts[-1:]))


def in_loop(stmts: list[ast.stmt]) -> ast.Return | None:
    """A ``return`` inside a loop of ``stmts``, if any."""
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, (ast.For, ast.While)):
                for m in ast.walk(n):
                    if isinstance(m, ast.Return):
                        return m
    return None


def hoist(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``stmts`` with the statements after a returning ``if`` moved into its branches."""
    out: list[ast.stmt] = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            out.append(s)
            return out
        if isinstance(s, ast.If) and has_return([s]):
            tail = stmts[i + 1:]
            branch = ast.If(test=s.test, body=_block(s.body + tail, s), orelse=_block(s.orelse + tail, s))
            out.append(ast.copy_location(branch, s))
            return out
        out.append(s)
    return out


def _block(stmts: list[ast.stmt], at: ast.stmt) -> list[ast.stmt]:
    body = hoist(stmts)
    return body or [ast.copy_location(ast.Pass(), at)]
