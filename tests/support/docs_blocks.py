"""Executable documentation, part 1: the blocks of a Markdown page and how outputs are matched.

Pure functions, no I/O beyond reading the page. ``tests/support/docs_runner.py`` runs them.

Every fenced block is classified by its info string:

- ``bash``/``sh``/``shell``/``console`` -> a shell block: runs;
- ``python``/``py`` -> a Python block: runs;
- a ``text`` or untagged block whose first line starts with ``$ `` -> a shell transcript: the
  ``$`` lines run and the other lines are their expected output;
- a ``text`` block of REPL prompts (``mail::...> cmd``/``mail> cmd``) right after a shell block
  that starts ``mail client`` -> a REPL transcript: the commands are typed into that client;
- a ``json``/``text`` block right after a runnable block (nothing but blank lines between) ->
  that block's expected output;
- anything else (``json``, ``toml``, ``text`` ...) -> data, not run.

A block is covered by default. An HTML comment on the line(s) just above the fence changes
that: ``<!-- docs-test: skip (reason) -->`` (never run; a reason is required),
``<!-- docs-test: file=NAME -->`` (the block's text is written to NAME in the page's working
folder before later blocks run), ``<!-- docs-test: status=400 -->`` (the block's last HTTP
answer must have this status instead of a 2xx/3xx).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
PYTHON_LANGS = {"python", "py", "python3"}
OUTPUT_LANGS = {"json", "text", ""}

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+)(?P<info>[^`]*)$")
_MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->")
REPL_PROMPT = re.compile(r"^(?P<prompt>mail(?:::\S+)?> ?)(?P<command>.*)$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)
    kind: str = "data"  # shell | python | transcript | repl | output | data
    output: Block | None = None  # the expected-output block that follows a runnable block

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def skipped(self) -> bool:
        return "skip" in self.markers


def _parse_marker(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    m = re.match(r"skip\b\s*(.*)$", body)
    if m:
        reason = m.group(1).strip().strip("()").strip()
        if not reason:
            raise ValueError(f"docs-test skip marker without a reason: {body!r}")
        out["skip"] = reason
        return out
    for part in body.split():
        key, _, value = part.partition("=")
        if key not in ("file", "status"):
            raise ValueError(f"unknown docs-test marker {part!r} (skip, file=, status=)")
        out[key] = value
    return out


def parse_page(path: Path) -> list[Block]:
    """All fenced blocks of ``path``, classified, with their markers and expected outputs."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: dict[str, str] = {}
    blank_since_block = True  # only blank lines since the last block closed
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.search(line)
        if marker:
            pending.update(_parse_marker(marker.group("body")))
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip():
                blank_since_block = False
                pending = {} if not line.lstrip().startswith("<!--") else pending
            i += 1
            continue
        info = fence.group("info").strip().split()
        lang = info[0].lower() if info else ""
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence.group("fence")):
            body.append(lines[i][len(fence.group("indent")) :])
            i += 1
        i += 1  # closing fence
        block = Block(path, i - len(body) - 1, lang, "\n".join(body) + "\n", pending)
        pending = {}
        previous = blocks[-1] if blocks else None
        _classify(block, previous, blank_since_block)
        blocks.append(block)
        blank_since_block = True
    return blocks


def _classify(block: Block, previous: Block | None, follows_directly: bool) -> None:
    first = block.text.lstrip("\n").splitlines()[0] if block.text.strip() else ""
    runnable_before = (
        previous is not None
        and follows_directly
        and previous.kind in ("shell", "python", "transcript")
        and previous.output is None
        and not previous.skipped
    )
    if "file" in block.markers:
        block.kind = "file"
    elif block.lang in SHELL_LANGS:
        block.kind = "shell"
    elif block.lang in PYTHON_LANGS:
        block.kind = "python"
    elif block.lang in ("text", "") and first.startswith("$ "):
        block.kind = "transcript"
    elif (
        block.lang == "text"
        and REPL_PROMPT.match(first)
        and runnable_before
        and previous is not None
        and re.search(r"\bmail client\b", previous.text)
    ):
        block.kind = "repl"
        previous.output = block
    elif block.lang in OUTPUT_LANGS and runnable_before and previous is not None:
        block.kind = "output"
        previous.output = block


# ------------------------------------------------------------------------------ matching
# Expected outputs are written for people: "..." elides text, and an elided identifier such as
# "call_ff4a..." or "mail_..." stands for a value the reader copies into later commands. So an
# elided identifier is captured (and substituted into later blocks); any other "..." matches
# anything.

PLACEHOLDER = re.compile(r"(?<![\w.])(?P<stem>[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9]*)\.\.\.")


class Mismatch(AssertionError):
    pass


def _pattern(expected: str, bindings: dict[str, str]) -> tuple[re.Pattern[str], list[str]]:
    names: list[str] = []
    parts: list[str] = []
    pos = 0
    for m in re.finditer(PLACEHOLDER.pattern + r"|\.\.\.", expected):
        parts.append(re.escape(expected[pos : m.start()]))
        stem = m.groupdict().get("stem")
        token = m.group(0)
        if stem is not None and token in bindings:
            parts.append(re.escape(bindings[token]))
        elif stem is not None:
            names.append(token)
            # "call_ff4a..." stands for any "call_<id>": the characters shown are illustrative.
            prefix = stem[: stem.rindex("_") + 1]
            parts.append(f"(?P<p{len(names) - 1}>{re.escape(prefix)}[A-Za-z0-9_.-]*)")
        else:
            parts.append(".*?")
        pos = m.end()
    parts.append(re.escape(expected[pos:]))
    return re.compile("".join(parts), re.S), names


def match_text(expected: str, actual: str, bindings: dict[str, str], *, whole: bool) -> None:
    """``actual`` contains (or with ``whole`` is) ``expected``; captures go into ``bindings``."""
    pattern, names = _pattern(expected, bindings)
    m = pattern.fullmatch(actual) if whole else pattern.search(actual)
    if m is None:
        raise Mismatch(f"expected {expected!r}\n     got {actual!r}")
    for index, name in enumerate(names):
        bindings.setdefault(name, m.group(f"p{index}"))


def match_json(expected: Any, actual: Any, bindings: dict[str, str], path: str = "$") -> None:
    """Structural match: dicts by the expected keys, lists element by element, strings with "..."."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch(f"{path}: expected an object, got {actual!r}")
        for key, value in expected.items():
            if key not in actual:
                raise Mismatch(f"{path}: key {key!r} missing in {sorted(actual)}")
            match_json(value, actual[key], bindings, f"{path}.{key}")
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected {len(expected)} items, got {actual!r}")
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            match_json(e, a, bindings, f"{path}[{index}]")
    elif isinstance(expected, str):
        if not isinstance(actual, str):
            raise Mismatch(f"{path}: expected a string, got {actual!r}")
        try:
            match_text(expected, actual, bindings, whole=True)
        except Mismatch as exc:
            raise Mismatch(f"{path}: {exc}") from None
    elif expected != actual:
        raise Mismatch(f"{path}: expected {expected!r}, got {actual!r}")


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def match_output(expected: str, actual: str, bindings: dict[str, str]) -> None:
    """Check ``actual`` against a page's expected output (JSON structurally, else as text)."""
    try:
        expected_value = json.loads(expected)
    except ValueError:
        expected_value = None
    if expected_value is not None:
        try:
            actual_value = json.loads(actual)
        except ValueError as exc:
            raise Mismatch(f"expected JSON like {expected.strip()!r}, got {actual!r}") from exc
        match_json(expected_value, actual_value, bindings)
        return
    match_text(_normalize(expected), _normalize(actual), bindings, whole=False)


def substitute(text: str, bindings: dict[str, str]) -> str:
    for placeholder, value in sorted(bindings.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(placeholder, value)
    return text
