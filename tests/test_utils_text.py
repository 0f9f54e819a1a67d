"""`mail.utils.text`: lone surrogates from outside become U+FFFD, valid text stays as it is."""

from __future__ import annotations

from mail.utils.text import loads_valid, valid_text


def test_loads_valid_replaces_escaped_and_raw_lone_surrogates() -> None:
    assert loads_valid('{"a": "x\\ud800y", "\\udfff": ["z"]}') == {"a": "x\ufffdy", "\ufffd": ["z"]}
    # Raw bytes ED A0 80 (a surrogate encoded as if UTF-8): the decoder keeps them too.
    assert loads_valid(b'{"a": "x\xed\xa0\x80y"}') == {"a": "x\ufffdy"}
    # A valid pair is the character it stands for; other text is left alone.
    assert loads_valid('"\\ud83d\\ude00 \\u00e9"') == "\U0001f600 \u00e9"
    assert loads_valid(b'{"n": [1, 2.5, null, true]}') == {"n": [1, 2.5, None, True]}
    for value in loads_valid('["\\ud800", "\\udc00x"]'):
        value.encode("utf-8")  # encodable: no surrogate left


def test_valid_text_leaves_valid_strings_unchanged() -> None:
    text = "plain \u00e9 \U0001f600"
    assert valid_text(text) is text
