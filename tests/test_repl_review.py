"""The REPL's `review` decision syntax (the command itself runs against a real server in
tests/test_action_review_e2e.py)."""

from __future__ import annotations

import argparse

import pytest

from mail.repl.handlers import held_calls_in
from mail.repl.parser import build_parser, parse_command, review_decision


def test_decision_words() -> None:
    assert review_decision("c1=accept") == {"tool_call_id": "c1", "type": "accept"}
    assert review_decision('c1=edit:{"to": "x@y.z"}') == {
        "tool_call_id": "c1",
        "type": "edit",
        "args": {"to": "x@y.z"},
    }
    assert review_decision("c1=respond:Friday: 3pm") == {
        "tool_call_id": "c1",
        "type": "respond",
        "message": "Friday: 3pm",
    }
    assert review_decision("c1=ignore") == {"tool_call_id": "c1", "type": "ignore"}
    assert review_decision("c1=ignore:not now")["message"] == "not now"


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("c1=acept", "Did you mean 'accept'"),
        ("c1", "CALL_ID=DECISION"),
        ("c1=edit", "edit needs the new arguments"),
        ("c1=edit:[1]", "expected a JSON object"),
        ("c1=respond:", "respond needs a message"),
    ],
)
def test_bad_decision_words(word: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        review_decision(word)


def test_command_line_and_paused_answers() -> None:
    args = parse_command(build_parser(), ["rv", "t1", "a=accept", "b=respond:yes", "-se"])
    assert args.command == "review" and args.task_id == "t1" and args.show_events
    assert [d["type"] for d in args.decisions] == ["accept", "respond"]
    held = '[{"tool_call_id": "a", "allowed_decisions": ["accept"]}]'
    assert held_calls_in(held)[0]["tool_call_id"] == "a"
    assert held_calls_in("[1, 2]") == [] and held_calls_in("plain answer") == []
