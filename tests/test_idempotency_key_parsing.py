"""`Idempotency-Key` values as the server reads them (`mail.server.idempotency_wire.key_of`).

The usual key (printable ASCII in quotes, nothing escaped) is taken with one regular
expression match; every other value goes through the RFC 8941 string parser. The match must
never change an answer: for every value, the same key, or the same 400, as the parser alone
gives (checked over the edge cases and 20,000 generated values, the match turned off for the
comparison), and the usual cases say what the draft says.
"""

from __future__ import annotations

import random
import re

import pytest

from mail.server import idempotency_wire
from mail.server.errors import BadRequest
from mail.server.idempotency_wire import key_of

MAX = 64
EDGES = [
    b'"8e03978e-40d5-43e8-bc93-6894a57f9324"',
    b' "spaced"\t',
    b'" inner spaces "',
    b'"a\\"b"',
    b'"a\\\\b"',
    b'"bad \\n escape"',
    b'"unterminated',
    b'"two" "strings"',
    b'""',
    b'" "',
    b"bare-token",
    b'"' + b"x" * MAX + b'"',
    b'"' + b"x" * (MAX + 1) + b'"',
    '"é"'.encode(),
    b'"tab\there"',
    b'"~!#$%&()*+,-./:;<=>?@[]^_`{|}"',
    b'"del\x7f"',
]


def parsed(raw: bytes, max_length: int = MAX) -> str | None:
    try:
        return key_of([raw], max_length)
    except BadRequest as error:
        return f"400 {error.detail}"


def generated(count: int) -> list[bytes]:
    pick = random.Random(0)
    alphabet = [bytes([c]) for c in range(0x20, 0x7F)] + [b"\\", b'"', b"\t", b"\xe9", b"\x7f"]
    values = []
    for _ in range(count):
        inner = b"".join(pick.choices(alphabet, k=pick.randrange(0, 80)))
        values.append(pick.choice([b'"' + inner + b'"', inner, b' "' + inner + b'" ']))
    return values


def test_the_fast_match_never_changes_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    values = EDGES + generated(20_000)
    fast = [(parsed(v), parsed(v, 0)) for v in values]
    monkeypatch.setattr(idempotency_wire, "_PLAIN_KEY", re.compile(rb"(?!)"))  # never matches
    slow = [(parsed(v), parsed(v, 0)) for v in values]
    assert fast == slow
    valid = sum(1 for key, _ in fast if key is not None and not key.startswith("400 "))
    assert 3_000 < valid < len(values) - 3_000  # (both kinds, many of each)


@pytest.mark.parametrize(
    "raw,key",
    [
        (b'"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        (b' "spaced"\t', "spaced"),
        (b'" inner "', " inner "),
        (b'"a\\"b"', 'a"b'),
        (b"bare-token", "bare-token"),
        (b'"' + b"x" * MAX + b'"', "x" * MAX),
    ],
)
def test_keys_read_as_the_draft_says(raw: bytes, key: str) -> None:
    assert key_of([raw], MAX) == key


@pytest.mark.parametrize(
    "raw,detail",
    [
        (b'""', "quoted string"),
        (b'"bad \\n escape"', "quoted string"),
        ('"é"'.encode(), "quoted string"),
        (b'"del\x7f"', "quoted string"),
        (b'"' + b"x" * (MAX + 1) + b'"', "max_idempotency_key_length"),
    ],
)
def test_malformed_keys_are_400(raw: bytes, detail: str) -> None:
    with pytest.raises(BadRequest, match=detail):
        key_of([raw], MAX)
