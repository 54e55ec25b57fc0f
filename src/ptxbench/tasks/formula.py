"""Arithmetic formulas over a task's axes (FLOPs, bytes), parsed with a whitelist instead of ``eval``.

Task files are data that anyone may write; a formula may use numbers, axis names, ``+ - * / // % **``,
parentheses and ``min``/``max``/``ceil_div``, nothing else. A *condition* (a variant's ``when``) may also
compare (``== != < <= > >=``) and combine with ``and``/``or``/``not``; true is 1, false 0.
"""

from __future__ import annotations

import ast
import operator
from functools import cache

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCTIONS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


class FormulaError(ValueError):
    pass


@cache
def _parse(expression: str) -> ast.Expression:
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"formula {expression!r} is not valid: {exc.msg}") from None
    for node in ast.walk(tree):
        allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Constant, ast.Name,
                   ast.Load, ast.Call, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.Not, *_BINARY, *_COMPARE)
        if not isinstance(node, allowed):
            raise FormulaError(f"formula {expression!r} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
            raise FormulaError(f"formula {expression!r} calls something other than {sorted(_FUNCTIONS)}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise FormulaError(f"formula {expression!r} has a non-numeric constant")
    return tree


def names_in(expression: str) -> set[str]:
    """Variables a formula reads (function names excluded)."""
    tree = _parse(expression)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(expression: str, variables: dict[str, int | float]) -> float:
    """Evaluate a checked formula; unknown names are an error, not zero."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise FormulaError(f"formula {expression!r} reads unknown name {node.id!r}")
            return variables[node.id]
        if isinstance(node, ast.UnaryOp):
            value = walk(node.operand)
            if isinstance(node.op, ast.Not):
                return float(not value)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Compare):
            left = walk(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = walk(right_node)
                if not _COMPARE[type(op)](left, right):
                    return 0.0
                left = right
            return 1.0
        if isinstance(node, ast.BoolOp):
            values = (bool(walk(v)) for v in node.values)
            return float(all(values) if isinstance(node.op, ast.And) else any(values))
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(walk(arg) for arg in node.args))  # type: ignore[union-attr]
        raise FormulaError(f"unexpected node in {expression!r}")  # pragma: no cover - _parse forbids it

    return walk(_parse(expression))


def holds(condition: str, variables: dict[str, int | float]) -> bool:
    """Whether a condition (a formula read as true when nonzero) holds for these values."""
    return evaluate(condition, variables) != 0
