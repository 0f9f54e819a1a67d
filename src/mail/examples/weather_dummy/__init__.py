"""Example weather agent with a deterministic, fake `get_weather_forecast` action."""

from mail.examples.weather_dummy.actions import get_weather_forecast
from mail.examples.weather_dummy.agent import (
    LiteLLMWeatherFunction,
    factory_weather_dummy,
    weather_agent_params,
)
from mail.examples.weather_dummy.prompts import SYSPROMPT as WEATHER_SYSPROMPT
from mail.examples.weather_dummy.types import action_get_weather_forecast

__all__ = [
    "WEATHER_SYSPROMPT",
    "LiteLLMWeatherFunction",
    "action_get_weather_forecast",
    "factory_weather_dummy",
    "get_weather_forecast",
    "weather_agent_params",
]
