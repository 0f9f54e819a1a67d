"""Factory of the example weather agent."""

from mail.factories.action import LiteLLMActionAgentFunction


class LiteLLMWeatherFunction(LiteLLMActionAgentFunction):
    """The weather agent: a LiteLLM action agent whose action is `get_weather_forecast`."""


__all__ = ["LiteLLMWeatherFunction"]
