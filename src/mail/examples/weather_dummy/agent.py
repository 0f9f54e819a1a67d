"""Factory of the example weather agent."""

from mail.examples.legacy import example_agent_params, example_factory
from mail.examples.weather_dummy.prompts import SYSPROMPT
from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMWeatherFunction(LiteLLMActionAgentFunction):
    """The weather agent: a LiteLLM action agent whose action is `get_weather_forecast`."""


# v1.3's names: default agent_params and the deprecated function-style factory.
weather_agent_params = example_agent_params(SYSPROMPT)
factory_weather_dummy = example_factory(LiteLLMWeatherFunction, "factory_weather_dummy", "weather")

__all__ = ["LiteLLMWeatherFunction", "factory_weather_dummy", "weather_agent_params"]
