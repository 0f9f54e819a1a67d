"""`generate_sample_data` (seeded synthetic datasets) and `parse_csv` (CSV text to rows)."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, timedelta
from random import Random
from typing import Any

from mail.api import action
from mail.examples.arguments import bounded_text, choice, clamped, integer, one_of, schema, string

DATASETS = ("sales", "users", "inventory", "weather")
MAX_ROWS = 1000
MAX_CSV_CHARS = 200_000

GENERATE_SAMPLE_DATA_PARAMETERS = schema(
    ["dataset"],
    dataset=one_of(DATASETS, "Which kind of sample data to make"),
    rows=integer("How many rows (default 10)", 1, MAX_ROWS),
)

PARSE_CSV_PARAMETERS = schema(["data"], data=string("CSV text; the first line names the columns"))

_START = date(2025, 1, 1)


def _row(dataset: str, index: int, rng: Random) -> dict[str, Any]:
    day = (_START + timedelta(days=index)).isoformat()
    if dataset == "sales":
        units = rng.randint(1, 40)
        price = round(rng.uniform(5, 120), 2)
        region = rng.choice(["north", "south", "east", "west"])
        return {"date": day, "region": region, "units": units, "revenue": round(units * price, 2)}
    if dataset == "users":
        return {
            "user_id": f"u{1000 + index}",
            "signup_date": day,
            "age": rng.randint(18, 75),
            "sessions": rng.randint(0, 60),
            "plan": rng.choice(["free", "basic", "pro"]),
        }
    if dataset == "inventory":
        stock = rng.randint(0, 500)
        return {
            "sku": f"SKU-{index:04d}",
            "stock": stock,
            "reorder_level": 50,
            "unit_cost": round(rng.uniform(1, 80), 2),
            "needs_reorder": stock < 50,
        }
    high = round(rng.uniform(-5, 32), 1)
    return {
        "date": day,
        "high_c": high,
        "low_c": round(high - rng.uniform(2, 10), 1),
        "rain_mm": round(max(0.0, rng.gauss(2, 4)), 1),
    }


def sample_rows(dataset: str, rows: int) -> list[dict[str, Any]]:
    """The same dataset and size always give the same rows."""
    rng = Random(f"{dataset}:{rows}")
    return [_row(dataset, i, rng) for i in range(rows)]


def _number(text: str) -> float | int | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


@action(
    description="Generate a synthetic sample dataset (sales, users, inventory or weather).",
    parameters=GENERATE_SAMPLE_DATA_PARAMETERS,
)
async def generate_sample_data(args: dict[str, Any]) -> str:
    dataset = choice(args, "dataset", DATASETS)
    rows = clamped(args, "rows", 10, 1, MAX_ROWS)
    data = sample_rows(dataset, rows)
    columns = list(data[0])
    numeric = [c for c in columns if all(isinstance(r[c], int | float) for r in data)]
    numeric = [c for c in numeric if not all(isinstance(r[c], bool) for r in data)]
    return json.dumps(
        {
            "dataset": dataset,
            "columns": columns,
            "numeric_columns": numeric,
            "row_count": rows,
            "rows": data,
            "note": "synthetic data from a fixed seed",
        }
    )


@action(
    description="Parse CSV text into rows, with the column names and which columns are numeric.",
    parameters=PARSE_CSV_PARAMETERS,
)
async def parse_csv(args: dict[str, Any]) -> str:
    text = bounded_text(args, "data", MAX_CSV_CHARS)
    reader = csv.DictReader(io.StringIO(text.strip()))
    if not reader.fieldnames:
        raise ValueError("the CSV text has no header line")
    rows: list[dict[str, Any]] = []
    for raw in reader:
        row = {}
        for key, value in raw.items():
            cell = (value or "").strip()
            number = _number(cell)
            row[str(key).strip()] = number if number is not None else cell
        rows.append(row)
    columns = [c.strip() for c in reader.fieldnames]
    numeric = [c for c in columns if rows and all(isinstance(r.get(c), int | float) for r in rows)]
    return json.dumps(
        {"columns": columns, "numeric_columns": numeric, "row_count": len(rows), "rows": rows}
    )
