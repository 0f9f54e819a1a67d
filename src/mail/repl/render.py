"""How the REPL shows things to a person: rich text, tables and pretty JSON.

Server text is always a `rich.text.Text`, never markup, so a message cannot restyle the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

MAX_EVENT_LINES = 12

EVENT_STYLES = {
    "new_message": "cyan",
    "tool_call": "magenta",
    "builtin_tool_call": "magenta",
    "breakpoint_tool_call": "bold yellow",
    "action_review": "bold yellow",
    "action_review_decision": "yellow",
    "action_call": "yellow",
    "action_complete": "yellow",
    "await_message": "blue",
    "task_complete": "bold green",
    "task_complete_call": "green",
    "ping": "dim",
}


def parse_event_data(data: Any) -> Any:
    if isinstance(data, str):
        try:
            return json.loads(data)
        except ValueError:
            return data
    return data


def event_text(name: str, data: Any) -> str:
    """The human part of an event: its description, or the final response."""
    if isinstance(data, dict):
        if name in ("task_complete", "task_error") and "response" in data:
            return str(data["response"])
        if data.get("description"):
            return str(data["description"])
        if name == "ping":
            return ""
        return json.dumps(data, ensure_ascii=False)
    return "" if data is None else str(data)


def _clip(text: str) -> str:
    lines = text.splitlines() or [""]
    if len(lines) <= MAX_EVENT_LINES:
        return text
    hidden = len(lines) - MAX_EVENT_LINES
    return "\n".join(lines[:MAX_EVENT_LINES]) + f"\n… {hidden} more lines (use -v for everything)"


class Renderer:
    def __init__(self, console: Console) -> None:
        self.console = console

    # ------------------------------------------------------------------ plain lines

    def success(self, message: str) -> None:
        self.console.print(Text("✓ ", style="green") + Text(message))

    def error(self, message: str) -> None:
        self.console.print(Text("✗ ", style="bold red") + Text(message))

    def warn(self, message: str) -> None:
        self.console.print(Text("! ", style="yellow") + Text(message))

    def info(self, message: str, style: str = "", *, soft_wrap: bool = False) -> None:
        # soft_wrap: a command line meant to be copied is never broken with inserted newlines.
        self.console.print(Text(message.rstrip("\n"), style=style), soft_wrap=soft_wrap)

    def json(self, value: Any) -> None:
        try:
            self.console.print_json(data=value)
        except TypeError:  # not JSON-able (e.g. a pydantic object): fall back to repr
            self.console.print(Text(repr(value)))

    # ------------------------------------------------------------------ structures

    def banner(self, version: str, base_url: str, swarm: str | None = None) -> None:
        """The greeting, once GET /health has answered (``swarm``: the name it gave)."""
        self.console.print(Text(f"MAIL CLIent v{version}", style="bold cyan"))
        served = f" (swarm {swarm})" if swarm else ""
        self.console.print(
            Text(
                f"connected to {base_url}{served} — type 'help' for commands, 'exit' to leave",
                style="dim",
            )
        )

    def unreachable(self, version: str, base_url: str, problem: str) -> None:
        """The greeting when the server did not answer: the server is the problem, not a key."""
        self.console.print(Text(f"MAIL CLIent v{version}", style="bold cyan"))
        self.error(f"no MAIL server answers at {base_url}: {problem}")
        self.info(
            "start one there (`mail server`) or check the URL; commands will work once it "
            "answers ('exit' to leave)",
            style="dim",
        )

    def fields(self, rows: Iterable[tuple[str, Any]]) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, value in rows:
            table.add_row(Text(key), Text("" if value is None else str(value)))
        self.console.print(table)

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        title: str = "",
        *,
        empty: str = "",
    ) -> None:
        """A table of `rows`; with no rows and an `empty` text, that text instead."""
        cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
        if not cells and empty:
            self.info(empty)
            return
        table = Table(title=title or None, show_lines=False)
        for index, column in enumerate(columns):
            if index == 0:
                # The first column holds the ids people copy into the next command: never
                # elided; the other columns fold (wrap) to make room, losing nothing.
                widest = max((len(row[0]) for row in cells if row), default=0)
                table.add_column(column, no_wrap=True, min_width=min(max(widest, len(column)), 64))
            else:
                table.add_column(column, overflow="fold")
        for row in cells:
            table.add_row(*(Text(cell) for cell in row))
        self.console.print(table)

    def response(self, body: Any, title: str = "response") -> None:
        text = body if isinstance(body, str) else json.dumps(body, indent=2, ensure_ascii=False)
        self.console.print(Panel(Text(text), title=title, title_align="left", border_style="green"))

    def event(self, name: str | None, raw_data: Any, verbose: bool = False) -> None:
        event_name = name or "message"
        data = parse_event_data(raw_data)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(min_width=22, no_wrap=True)
        grid.add_column(overflow="fold")
        stamp = event_stamp(data)
        style = "bold red" if "error" in event_name else EVENT_STYLES.get(event_name, "white")
        label = Text(event_name, style=style)
        if verbose:
            grid.add_row(stamp, label, "")
            self.console.print(grid)
            if isinstance(data, str):
                self.console.print(Text(data))
            else:
                self.json(data)
            return
        # A grid keeps multi-line descriptions aligned under their first line.
        grid.add_row(stamp, label, Text(_clip(event_text(event_name, data))))
        self.console.print(grid)

    def events(self, events: Iterable[dict[str, Any]], verbose: bool = False) -> None:
        for item in events:
            self.event(item.get("event"), item.get("data"), verbose)

    def help(self, commands: Iterable[tuple[str, Sequence[str], str]]) -> None:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        table.add_column("command")
        table.add_column("aliases", style="dim")
        table.add_column("what it does")
        for name, aliases, summary in commands:
            table.add_row(Text(name, style="cyan"), Text(", ".join(aliases)), Text(summary))
        self.console.print(table)
        self.console.print(
            Text(
                "Quote arguments with spaces. 'help COMMAND' or 'COMMAND -h' shows its options. "
                "Ctrl+C interrupts a running command.",
                style="dim",
            )
        )


def event_stamp(data: Any) -> str:
    """When the event happened (its own timestamp, local time), not when it is shown."""
    raw = data.get("timestamp") if isinstance(data, dict) else None
    if not isinstance(raw, str):
        return datetime.now().strftime("%H:%M:%S")
    return local_time(raw)


def local_time(raw: str) -> str:
    """An ISO 8601 time as local time: the clock time, with the date when it is another day."""
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return raw[:19]
    if when.tzinfo is not None:
        when = when.astimezone()
    if when.date() != datetime.now(when.tzinfo).date():
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return when.strftime("%H:%M:%S")
