"""A safe arithmetic evaluator: parses with `ast` and walks only whitelisted nodes.

Never uses `eval`. Supports numbers, + - * / // % **, unary signs, parentheses and the
functions sqrt, abs, round, min and max. Sizes are bounded so an expression cannot exhaust
CPU or memory (e.g. ``9 ** 9 ** 9`` is refused).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_LENGTH = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10**100


class ExpressionError(ValueError):
    """The expression is not valid arithmetic (the message says why)."""


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}


def _check(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError("only numbers are allowed")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ExpressionError("the result is too large")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ExpressionError(f"exponents above {MAX_EXPONENT} are not allowed")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
        except OverflowError:
            raise ExpressionError("the result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise ExpressionError(f"unknown function '{node.func.id}'")
        args = [_eval(arg) for arg in node.args]
        try:
            return _check(function(*args))
        except (TypeError, ValueError) as exc:
            raise ExpressionError(f"{node.func.id}: {exc}") from None
    raise ExpressionError(f"unsupported syntax: {type(node).__name__}")


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression; `^` is accepted as power."""
    text = expression.strip().replace("^", "**")
    if not text:
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ExpressionError(f"not a valid arithmetic expression: {expression!r}") from None
    return _eval(tree)
