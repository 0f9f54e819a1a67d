"""`Idempotency-Key` values as the server reads them (`mail.server.idempotency.key_of`).

An RFC 8941 string, or the same characters unquoted: the usual cases say what the draft says.
"""

from __future__ import annotations

import pytest

from mail.server.errors import BadRequest
from mail.server.idempotency import key_of

MAX = 64


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
