"""Example agents (and a manual-mode game) built on the LiteLLM agent functions.

`EXAMPLES` is what `MAILAgentTemplate.from_example(name, comm_targets)` reads: one
`ExampleSpec` per bundled agent (`supervisor`, `weather`, `math`, `consultant`, `analyst`).
The specs default to a real OpenAI model; set ``agent_params["llm"] = "mail/demo"`` on the
template to run them offline.

The names v1.3's `mail.examples` exported (the agent classes, the deprecated
``factory_*_dummy`` functions, and here also the agents' actions, prompts and default
``*_agent_params``) load on first use, from the example packages that hold them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mail.lazy import lazy_exports

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

# v1.3's package-level names -> the example package that defines them.
_V13_EXPORTS: dict[str, str] = {
    "LiteLLMAnalystFunction": "analyst_dummy",
    "factory_analyst_dummy": "analyst_dummy",
    "analyst_agent_params": "analyst_dummy",
    "ANALYST_SYSPROMPT": "analyst_dummy",
    "LiteLLMConsultantFunction": "consultant_dummy",
    "factory_consultant_dummy": "consultant_dummy",
    "consultant_agent_params": "consultant_dummy",
    "CONSULTANT_SYSPROMPT": "consultant_dummy",
    "LiteLLMMathFunction": "math_dummy",
    "factory_math_dummy": "math_dummy",
    "math_agent_params": "math_dummy",
    "MATH_SYSPROMPT": "math_dummy",
    "calculate_expression": "math_dummy",
    "action_calculate_expression": "math_dummy",
    "LiteLLMWeatherFunction": "weather_dummy",
    "factory_weather_dummy": "weather_dummy",
    "weather_agent_params": "weather_dummy",
    "WEATHER_SYSPROMPT": "weather_dummy",
    "get_weather_forecast": "weather_dummy",
    "action_get_weather_forecast": "weather_dummy",
    "supervisor_agent_params": "supervisor",
    "SUPERVISOR_SYSPROMPT": "supervisor",
}


__getattr__, __dir__ = lazy_exports(globals(), _V13_EXPORTS, "mail.examples.")


__all__ = [
    "DEFAULT_EXAMPLE_LLM",
    "EXAMPLES",
    "ExampleSpec",
    "LiteLLMAnalystFunction",
    "LiteLLMConsultantFunction",
    "LiteLLMMathFunction",
    "LiteLLMWeatherFunction",
    "factory_analyst_dummy",
    "factory_consultant_dummy",
    "factory_math_dummy",
    "factory_weather_dummy",
]
