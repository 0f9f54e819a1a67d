"""`format_report`: findings as a Markdown report."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from mail.api import action
from mail.examples.arguments import array, objects, required_text, schema, string

MAX_SECTIONS = 50

FORMAT_REPORT_PARAMETERS = schema(
    ["title", "sections"],
    title=string("The report's title"),
    sections=array(
        schema(
            ["heading", "content"],
            heading=string("The section's heading"),
            content={"description": "The section's text, or an object or list to show"},
        ),
        "The report's sections, in order",
    ),
)


def _render(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list) and all(not isinstance(i, dict | list) for i in content):
        return "\n".join(f"- {item}" for item in content)
    if isinstance(content, dict) and all(not isinstance(v, dict | list) for v in content.values()):
        rows = "\n".join(f"| {key} | {value} |" for key, value in content.items())
        return f"| item | value |\n| --- | --- |\n{rows}"
    return f"```json\n{json.dumps(content, indent=2)}\n```"


def render_report(title: str, sections: list[dict[str, Any]]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"# {title.strip()}", f"_Generated {stamp}_"]
    for section in sections:
        parts.append(f"## {str(section.get('heading') or 'Untitled').strip()}")
        parts.append(_render(section.get("content", "")))
    return "\n\n".join(parts) + "\n"


@action(
    description="Format a title and sections (heading + content) as a Markdown report.",
    parameters=FORMAT_REPORT_PARAMETERS,
)
async def format_report(args: dict[str, Any]) -> str:
    title = required_text(args, "title")
    sections = objects(args, "sections")
    if len(sections) > MAX_SECTIONS:
        raise ValueError(f"a report has at most {MAX_SECTIONS} sections")
    return render_report(title, sections)
