"""`calculate_expression`: evaluates arithmetic safely (see `evaluator`).

`calculate_expression` is a `MAILAction` (as in v1.3, so swarms.json can list it under
`action_imports`); the coroutine it runs is `evaluate_text`.
"""

from __future__ import annotations

from typing import Any

from mail.api import MAILAction
from mail.examples.arguments import integer, schema, string
from mail.examples.math_dummy.evaluator import evaluate

DESCRIPTION = "Evaluate a basic arithmetic expression inside the math agent"

PARAMETERS = schema(
    ["expression"],
    expression=string("Expression to evaluate"),
    precision=integer("Optional number of decimal places", 0, 12),
)


def _format(value: int | float, precision: int | None) -> str:
    if precision is not None:
        return f"{value:.{precision}f}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


async def evaluate_text(args: dict[str, Any]) -> str:
    """The action's function: `"{expression} = {result}"`."""
    expression = str(args.get("expression") or "")
    precision = args.get("precision")
    if precision is not None:
        precision = int(precision)
        if not 0 <= precision <= 12:
            raise ValueError("precision must be between 0 and 12")
    value = evaluate(expression)
    return f"{expression.strip()} = {_format(value, precision)}"


calculate_expression = MAILAction(
    name="calculate_expression",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=evaluate_text,
)


def get_actions() -> list[MAILAction]:
    """The math agent's actions, as new `MAILAction` objects."""
    return [MAILAction("calculate_expression", DESCRIPTION, PARAMETERS, evaluate_text)]
