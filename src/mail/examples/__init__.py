"""Example agents (and a manual-mode game) built on the LiteLLM agent functions.

`EXAMPLES` is what `MAILAgentTemplate.from_example(name, comm_targets)` reads: one
`ExampleSpec` per bundled agent (`supervisor`, `weather`, `math`, `consultant`, `analyst`).
The specs default to a real OpenAI model; set ``agent_params["llm"] = "mail/demo"`` on the
template to run them offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_EXAMPLE_LLM = "openai/gpt-5-mini"


@dataclass(frozen=True)
class ExampleSpec:
    """How to build one bundled example agent."""

    factory: str
    agent_params: dict[str, Any]
    actions_factory: Callable[[], list[Any]] | None = None
    enable_entrypoint: bool = False
    can_complete_tasks: bool = False
    tool_format: str = "responses"
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _params(prompt_module: str) -> dict[str, Any]:
    import importlib

    prompts = importlib.import_module(prompt_module)
    return {"llm": DEFAULT_EXAMPLE_LLM, "system": prompts.SYSPROMPT, "use_proxy": False}


def _weather_actions() -> list[Any]:
    from mail.examples.weather_dummy.actions import get_actions

    return get_actions()


def _math_actions() -> list[Any]:
    from mail.examples.math_dummy.actions import get_actions

    return get_actions()


EXAMPLES: dict[str, ExampleSpec] = {
    "supervisor": ExampleSpec(
        factory="mail.factories.supervisor:LiteLLMSupervisorFunction",
        agent_params=_params("mail.examples.supervisor.prompts"),
        enable_entrypoint=True,
        can_complete_tasks=True,
        description="Coordinates the other agents and completes the task.",
    ),
    "weather": ExampleSpec(
        factory="mail.examples.weather_dummy.agent:LiteLLMWeatherFunction",
        agent_params=_params("mail.examples.weather_dummy.prompts"),
        actions_factory=_weather_actions,
        description="Answers weather questions with the get_weather_forecast action.",
    ),
    "math": ExampleSpec(
        factory="mail.examples.math_dummy.agent:LiteLLMMathFunction",
        agent_params=_params("mail.examples.math_dummy.prompts"),
        actions_factory=_math_actions,
        description="Evaluates arithmetic with the calculate_expression action.",
    ),
    "consultant": ExampleSpec(
        factory="mail.examples.consultant_dummy.agent:LiteLLMConsultantFunction",
        agent_params=_params("mail.examples.consultant_dummy.prompts"),
        description="Gives recommendations; may ask the analyst for analysis.",
    ),
    "analyst": ExampleSpec(
        factory="mail.examples.analyst_dummy.agent:LiteLLMAnalystFunction",
        agent_params=_params("mail.examples.analyst_dummy.prompts"),
        description="Analyses data and trends.",
    ),
}

__all__ = ["DEFAULT_EXAMPLE_LLM", "EXAMPLES", "ExampleSpec"]
