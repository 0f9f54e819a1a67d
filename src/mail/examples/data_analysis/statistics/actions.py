"""`calculate_statistics` and `run_correlation`: real computations on the numbers given."""

from __future__ import annotations

import json
import math
import statistics as stats
from typing import Any

from mail.api import action
from mail.examples.arguments import array, schema

METRICS = (
    "count",
    "mean",
    "median",
    "mode",
    "std",
    "variance",
    "min",
    "max",
    "range",
    "sum",
    "percentile_25",
    "percentile_75",
    "iqr",
)
DEFAULT_METRICS = ("count", "mean", "median", "std", "min", "max")
MAX_VALUES = 100_000

CALCULATE_STATISTICS_PARAMETERS = schema(
    ["data"],
    data=array({"type": "number"}, "The numbers to describe"),
    metrics=array(
        {"type": "string", "enum": list(METRICS)},
        f"Which figures to compute (default: {', '.join(DEFAULT_METRICS)})",
    ),
)

RUN_CORRELATION_PARAMETERS = schema(
    ["x", "y"],
    x=array({"type": "number"}, "First series"),
    y=array({"type": "number"}, "Second series"),
)


def _numbers(values: Any, field: str) -> list[float]:
    if not isinstance(values, list):
        raise ValueError(f"'{field}' must be a list of numbers")
    if len(values) > MAX_VALUES:
        raise ValueError(f"'{field}' is limited to {MAX_VALUES} values")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"'{field}' must contain only numbers, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"'{field}' must contain finite numbers")
        out.append(float(value))
    return out


def _percentile(ordered: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def describe(values: list[float], metrics: list[str]) -> dict[str, float | int | None]:
    """The requested metrics of `values` (sample standard deviation and variance)."""
    ordered = sorted(values)
    spread = len(values) > 1
    compute: dict[str, Any] = {
        "count": lambda: len(values),
        "mean": lambda: stats.fmean(values),
        "median": lambda: stats.median(values),
        "mode": lambda: stats.mode(values),
        "std": lambda: stats.stdev(values) if spread else 0.0,
        "variance": lambda: stats.variance(values) if spread else 0.0,
        "min": lambda: ordered[0],
        "max": lambda: ordered[-1],
        "range": lambda: ordered[-1] - ordered[0],
        "sum": lambda: math.fsum(values),
        "percentile_25": lambda: _percentile(ordered, 0.25),
        "percentile_75": lambda: _percentile(ordered, 0.75),
        "iqr": lambda: _percentile(ordered, 0.75) - _percentile(ordered, 0.25),
    }
    result: dict[str, float | int | None] = {}
    for metric in metrics:
        value = compute[metric]()
        result[metric] = round(value, 6) if isinstance(value, float) else value
    return result


def pearson(x: list[float], y: list[float]) -> float:
    mean_x, mean_y = stats.fmean(x), stats.fmean(y)
    dx = [v - mean_x for v in x]
    dy = [v - mean_y for v in y]
    denominator = math.sqrt(math.fsum(a * a for a in dx) * math.fsum(b * b for b in dy))
    if denominator == 0:
        raise ValueError("a series with no variation has no correlation")
    return math.fsum(a * b for a, b in zip(dx, dy, strict=True)) / denominator


def strength(r: float) -> str:
    """A word for the size and direction of a correlation coefficient."""
    size = abs(r)
    if size < 0.2:
        return "negligible"
    word = "very strong" if size >= 0.8 else "strong" if size >= 0.6 else "moderate"
    word = word if size >= 0.4 else "weak"
    return f"{word} {'positive' if r > 0 else 'negative'}"


@action(
    description="Calculate descriptive statistics (mean, median, spread, ...) of numbers.",
    parameters=CALCULATE_STATISTICS_PARAMETERS,
)
async def calculate_statistics(args: dict[str, Any]) -> str:
    values = _numbers(args.get("data"), "data")
    if not values:
        raise ValueError("'data' needs at least one number")
    metrics = args.get("metrics") or list(DEFAULT_METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; available: {', '.join(METRICS)}")
    return json.dumps({"statistics": describe(values, list(metrics))})


@action(
    description="Pearson correlation between two equally long series of numbers.",
    parameters=RUN_CORRELATION_PARAMETERS,
)
async def run_correlation(args: dict[str, Any]) -> str:
    x = _numbers(args.get("x"), "x")
    y = _numbers(args.get("y"), "y")
    if len(x) != len(y):
        raise ValueError(f"x and y must be equally long ({len(x)} vs {len(y)})")
    if len(x) < 3:
        raise ValueError("a correlation needs at least 3 pairs")
    r = pearson(x, y)
    return json.dumps(
        {
            "pearson_r": round(r, 6),
            "r_squared": round(r * r, 6),
            "n": len(x),
            "interpretation": strength(r),
        }
    )
