"""Example weather agent with a deterministic, fake `get_weather_forecast` action."""
