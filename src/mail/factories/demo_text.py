"""Text heuristics used by the offline demo model (`mail/demo`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

_XML_FROM = re.compile(r'<from type="(\w+)">(.*?)</from>', re.S)
_XML_TO = re.compile(r"<to>(.*?)</to>", re.S)
_XML_SUBJECT = re.compile(r"<subject>(.*?)</subject>", re.S)
_XML_BODY = re.compile(r"<body>(.*)</body>", re.S)
_BLOCK = re.compile(
    r"<(public|private)_message>\s*<from>(.*?)</from>\s*(?:<to>.*?</to>\s*)?(.*?)</\1_message>",
    re.S,
)

STOPWORDS = frozenset(
    "the a an and or of to in on at for with about from is are was were be can could would "
    "should what whats how who when where which please tell me my your you i it its this that "
    "there their them give get need want know let some any just also into than then".split()
)

DOMAIN_WORDS: dict[str, frozenset[str]] = {
    "weather": frozenset(
        "weather forecast forecasts temperature rain raining sunny snow wind humidity climate "
        "cloudy storm degrees umbrella hot cold outlook".split()
    ),
    "math": frozenset(
        "math calculate calculation compute sum add plus minus subtract times multiply "
        "multiplied divide divided arithmetic equation expression percent square total "
        "evaluate".split()
    ),
    "analyst": frozenset(
        "analyze analyse analysis data trend trends report metrics statistics insight insights "
        "numbers".split()
    ),
    "consultant": frozenset(
        "advice advise recommend recommendation strategy plan consult suggest options".split()
    ),
}


@dataclass(frozen=True)
class Incoming:
    """One message as the agent saw it."""

    sender: str
    sender_type: str
    subject: str
    body: str
    to_all: bool = False
    manual: bool = False


def parse_incoming(content: str) -> Incoming:
    """Read a `build_mail_xml` rendering; anything else is a manual-step prompt."""
    if "<incoming_message>" not in content:
        return Incoming("system", "system", "", content, manual=True)
    sender = _XML_FROM.search(content)
    subject = _XML_SUBJECT.search(content)
    body = _XML_BODY.search(content)
    to = _XML_TO.search(content)
    return Incoming(
        sender=sender.group(2).strip() if sender else "",
        sender_type=sender.group(1) if sender else "user",
        subject=subject.group(1).strip() if subject else "",
        body=body.group(1).strip() if body else "",
        to_all=bool(to and ">all<" in to.group(1)),
    )


def message_blocks(text: str) -> list[tuple[str, str, str]]:
    """(visibility, sender, body) of each `<public_message>`/`<private_message>` block."""
    return [(m.group(1), m.group(2).strip(), m.group(3).strip()) for m in _BLOCK.finditer(text)]


def words(text: str) -> set[str]:
    return {
        w for w in re.findall(r"[a-z][a-z']+", text.lower()) if len(w) >= 3 and w not in STOPWORDS
    }


def name_tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z]+", name.lower()) if t}


def vocabulary(name: str, description: str = "") -> set[str]:
    """Words that suggest a request is for the agent or action called `name`."""
    vocab = name_tokens(name) | words(description)
    for domain, domain_words in DOMAIN_WORDS.items():
        if domain in vocab or vocab & domain_words:
            vocab |= domain_words | {domain}
    return vocab


def fit_score(request: str, name: str, description: str = "") -> int:
    score = len(words(request) & vocabulary(name, description))
    if extract_expression(request) and vocabulary(name, description) & DOMAIN_WORDS["math"]:
        score += 2
    return score


# ------------------------------------------------------------------------------------------
# Extraction

_NUMBER_WORDS = {
    " plus ": " + ",
    " minus ": " - ",
    " times ": " * ",
    " multiplied by ": " * ",
    " divided by ": " / ",
    " over ": " / ",
}
_EXPRESSION = re.compile(r"[\d(][\d\s.+\-*/()%^]*[\d)]")
_LOCATION = re.compile(r"\b(?:in|at|for|near|of)\s+([A-Z][\w'.-]*(?:[ -][A-Z][\w'.-]*)*)")


def extract_expression(text: str) -> str | None:
    """The longest arithmetic expression in `text` (needs a digit and an operator)."""
    normalized = f" {text} "
    for word, symbol in _NUMBER_WORDS.items():
        normalized = re.sub(word, symbol, normalized, flags=re.I)
    candidates = [
        m.group(0).strip()
        for m in _EXPRESSION.finditer(normalized)
        if re.search(r"\d", m.group(0)) and re.search(r"[+\-*/%^]", m.group(0))
    ]
    if not candidates:
        return None
    return max(candidates, key=len).replace("^", "**")


def extract_location(text: str) -> str | None:
    match = _LOCATION.search(text)
    return match.group(1).rstrip(".?!,") if match else None


def extract_days_ahead(text: str) -> int | None:
    lowered = text.lower()
    match = re.search(r"in (\d+) days?", lowered)
    if match:
        return int(match.group(1))
    if "day after tomorrow" in lowered:
        return 2
    if "tomorrow" in lowered:
        return 1
    if "today" in lowered or "now" in lowered:
        return 0
    return None


def first_number(text: str) -> float | None:
    match = re.search(r"-?\d+(?:\.\d+)?", text)
    return float(match.group(0)) if match else None


def deterministic_pick(low: int, high: int, *seeds: str) -> int:
    digest = hashlib.sha256("\x00".join(seeds).encode()).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low + 1)


def _types_of(schema: dict[str, Any]) -> tuple[set[str], bool]:
    """Declared JSON types of a property and whether null is allowed."""
    types: set[str] = set()
    variants = schema.get("anyOf") or schema.get("oneOf") or [schema]
    for variant in variants:
        declared = variant.get("type")
        if isinstance(declared, list):
            types.update(declared)
        elif isinstance(declared, str):
            types.add(declared)
    return types - {"null"}, "null" in types


def fill_arguments(
    parameters: dict[str, Any], text: str, sender: str | None = None
) -> dict[str, Any]:
    """Arguments for a tool, taken from `text` by parameter name and type."""
    args: dict[str, Any] = {}
    for key, schema in (parameters.get("properties") or {}).items():
        types, nullable = _types_of(schema)
        lowered = key.lower()
        value: Any = None
        if "enum" in schema and schema["enum"]:
            value = next((v for v in schema["enum"] if str(v).lower() in text.lower()), None)
            value = value if value is not None else schema["enum"][0]
        elif "string" in types:
            if any(k in lowered for k in ("location", "city", "place", "where")):
                value = extract_location(text) or text.strip()
            elif any(k in lowered for k in ("expression", "expr", "formula", "equation")):
                value = extract_expression(text) or text.strip()
            elif sender and any(k in lowered for k in ("player", "name", "who", "sender")):
                value = sender
            else:
                value = text.strip()
        elif types & {"integer", "number"}:
            if "day" in lowered:
                value = extract_days_ahead(text)
            elif not any(k in lowered for k in ("precision", "decimal")):
                number = first_number(text)
                if number is not None:
                    value = int(number) if "integer" in types else number
        elif "boolean" in types:
            if "metric" in lowered or "celsius" in lowered:
                value = not re.search(r"fahrenheit|imperial", text, re.I)
        elif "array" in types:
            value = []
        elif "object" in types:
            value = {}
        if value is None and not nullable and key in (parameters.get("required") or []):
            value = _neutral(types)
        if value is not None or nullable:
            args[key] = value
    return args


def _neutral(types: set[str]) -> Any:
    for kind, neutral in (("string", ""), ("integer", 0), ("number", 0), ("boolean", False)):
        if kind in types:
            return neutral
    return None


def summarize(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
