"""v1.3's second name for the math agent's action."""

from mail.examples.math_dummy.actions import calculate_expression

action_calculate_expression = calculate_expression

__all__ = ["action_calculate_expression"]
