"""`summarize_text` (extractive: the most representative sentences) and `create_bibliography`."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from mail.api import action
from mail.examples.arguments import (
    array,
    bounded_text,
    choice,
    clamped,
    integer,
    objects,
    one_of,
    schema,
    string,
)

STYLES = ("apa", "mla", "chicago", "simple")
MAX_TEXT = 100_000
_STOP = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was "
    "were which with".split()
)

SUMMARIZE_TEXT_PARAMETERS = schema(
    ["text"],
    text=string("The text to condense"),
    max_length=integer("The longest summary wanted, in characters (default 300)", 50, 2000),
)

_SOURCE_FIELDS = ("title", "author", "url", "date", "source_type")

CREATE_BIBLIOGRAPHY_PARAMETERS = schema(
    ["sources"],
    sources=array(
        {
            "type": "object",
            "properties": {field: {"type": "string"} for field in _SOURCE_FIELDS},
        },
        "The sources to list",
    ),
    style=one_of(STYLES, "The citation style (default apa)"),
)


def summarize(text: str, max_length: int) -> str:
    """The sentences whose words recur most in the text, in their original order."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s]
    if not sentences:
        return ""
    words = [w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP]
    frequency = Counter(words)

    def score(sentence: str) -> float:
        tokens = [w for w in re.findall(r"[a-z]+", sentence.lower()) if w not in _STOP]
        return sum(frequency[t] for t in tokens) / (len(tokens) or 1)

    ranked = sorted(range(len(sentences)), key=lambda i: (-score(sentences[i]), i))
    chosen: list[int] = []
    length = 0
    for index in ranked:
        extra = len(sentences[index]) + (1 if chosen else 0)
        if length + extra > max_length:
            continue
        chosen.append(index)
        length += extra
    if not chosen:  # even the best sentence is too long: cut it at a word boundary
        return sentences[ranked[0]][: max_length - 3].rsplit(" ", 1)[0] + "..."
    return " ".join(sentences[i] for i in sorted(chosen))


def cite(source: dict[str, Any], style: str) -> str:
    """One bibliography entry for `source` in `style`."""
    title = str(source.get("title") or "Untitled").strip()
    author = str(source.get("author") or "").strip()
    date = str(source.get("date") or "n.d.").strip()
    url = str(source.get("url") or "").strip()
    found_year = re.search(r"\d{4}", date)
    year = found_year.group(0) if found_year else date
    lead = f"{author}. " if author else ""
    link = f" {url}" if url else ""
    if style == "apa":
        return f"{lead}({year}). {title}.{link}"
    if style == "mla":
        return f'{lead}"{title}." {date}.{link}'
    if style == "chicago":
        return f'{lead}"{title}." Accessed {date}.{link}'
    return f"{title} - {author or 'unknown author'} ({date}){link}"


@action(
    description="Summarize a text by keeping its most representative sentences.",
    parameters=SUMMARIZE_TEXT_PARAMETERS,
)
async def summarize_text(args: dict[str, Any]) -> str:
    text = bounded_text(args, "text", MAX_TEXT)
    if not text.strip():
        raise ValueError("text is required")
    max_length = clamped(args, "max_length", 300, 50, 2000)
    summary = summarize(text, max_length)
    return json.dumps(
        {"summary": summary, "original_length": len(text), "summary_length": len(summary)}
    )


@action(
    description="Format a list of sources as a bibliography (apa, mla, chicago or simple).",
    parameters=CREATE_BIBLIOGRAPHY_PARAMETERS,
)
async def create_bibliography(args: dict[str, Any]) -> str:
    style = choice(args, "style", STYLES, default="apa")
    entries = sorted(cite(s, style) for s in objects(args, "sources"))
    return "\n".join(entries) if entries else "(no sources)"
