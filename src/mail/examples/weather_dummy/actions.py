"""`get_weather_forecast`: deterministic, synthetic forecasts (no network, no real data).

`get_weather_forecast` is a `MAILAction` (as in v1.3, so swarms.json can list it under
`action_imports`); the coroutine it runs is `forecast_text`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mail.api import MAILAction
from mail.examples.arguments import required_text, schema, string

CONDITIONS = (
    "sunny",
    "partly cloudy",
    "overcast",
    "light rain",
    "showers",
    "thunderstorms",
    "windy",
    "foggy",
)

DESCRIPTION = "Get the weather forecast for a given location"


PARAMETERS = schema(
    ["location"],
    location=string("The location to get the weather forecast for"),
    days_ahead={
        "type": "integer",
        "description": "The number of days ahead to get the weather forecast for",
    },
    metric={"type": "boolean", "description": "Whether to use metric units"},
)


def forecast(location: str, days_ahead: int = 0, metric: bool = True) -> dict[str, Any]:
    """The same location and day always give the same forecast."""
    key = f"{location.strip().lower()}|{days_ahead}"
    digest = hashlib.sha256(key.encode()).digest()
    high_c = 5 + digest[0] % 26
    low_c = high_c - (3 + digest[1] % 8)
    rain = (digest[2] % 10) * 10
    condition = CONDITIONS[digest[3] % len(CONDITIONS)]
    if metric:
        high, low, unit = high_c, low_c, "°C"
    else:
        high, low, unit = round(high_c * 9 / 5 + 32), round(low_c * 9 / 5 + 32), "°F"
    return {
        "location": location.strip(),
        "days_ahead": days_ahead,
        "condition": condition,
        "high": high,
        "low": low,
        "unit": unit,
        "precipitation_chance": rain,
    }


def _when(days_ahead: int) -> str:
    return {0: "today", 1: "tomorrow"}.get(days_ahead, f"in {days_ahead} days")


async def forecast_text(args: dict[str, Any]) -> str:
    """The action's function: a one-line forecast for `args["location"]`."""
    location = required_text(args, "location")
    days_ahead = args.get("days_ahead")
    days_ahead = 0 if days_ahead is None else int(days_ahead)
    if not 0 <= days_ahead <= 14:
        raise ValueError("days_ahead must be between 0 and 14")
    metric = args.get("metric")
    data = forecast(location, days_ahead, True if metric is None else bool(metric))
    return (
        f"Forecast for {data['location']} ({_when(days_ahead)}): {data['condition']}, "
        f"high {data['high']}{data['unit']}, low {data['low']}{data['unit']}, "
        f"{data['precipitation_chance']}% chance of precipitation. (Synthetic demo data.)"
    )


get_weather_forecast = MAILAction(
    name="get_weather_forecast",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=forecast_text,
)


def get_actions() -> list[MAILAction]:
    """The weather agent's actions, as new `MAILAction` objects."""
    return [MAILAction("get_weather_forecast", DESCRIPTION, PARAMETERS, forecast_text)]
