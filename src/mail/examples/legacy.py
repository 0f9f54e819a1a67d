"""What v1.3's example packages exported besides their agent classes.

Each example agent package had a function-style factory (``factory_weather_dummy`` ...,
deprecated in v1.3 already) and a dict of default ``agent_params``. Both are kept so programs
written for v1.3 import and run unchanged; new code names the agent class as its factory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mail.factories.base import FUNCTION_FACTORY_ORDER, deprecated_function_factory

# The model the example agents name by default (a real one: set "mail/demo" to run offline).
EXAMPLE_LLM = "openai/gpt-5-mini"

# v1.3's example factories took the shared factory parameters up to `use_proxy`.
EXAMPLE_FACTORY_ORDER = FUNCTION_FACTORY_ORDER[: FUNCTION_FACTORY_ORDER.index("use_proxy") + 1]


def example_factory(
    cls: type[Any], factory_name: str, agent_name: str
) -> Callable[..., Callable[..., Awaitable[Any]]]:
    """A deprecated function factory building `cls` (the agent is called `agent_name`)."""
    return deprecated_function_factory(
        cls, factory_name, {"name": agent_name}, EXAMPLE_FACTORY_ORDER
    )


def example_agent_params(system_prompt: str) -> dict[str, Any]:
    """Default ``agent_params`` of an example agent: the model and its system prompt."""
    return {"llm": EXAMPLE_LLM, "system": system_prompt}
