"""mail.core.message: addresses, constructors and the XML text agents read."""

from __future__ import annotations

import uuid

import pytest

from mail.core import message as M


def _request(**overrides: object) -> M.MAILMessage:
    payload = M.make_request(
        "task-1",
        M.create_user_address("alice"),
        M.create_agent_address("supervisor"),
        "Hello",
        "What is 2+2?",
    )
    msg = M.make_message(payload, "request")
    msg.update(overrides)  # type: ignore[typeddict-item]
    return msg


# ------------------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("supervisor", ("supervisor", None)),
        ("  weather  ", ("weather", None)),
        ("weather@remote", ("weather", "remote")),
        (" foo @ bar@baz ", ("foo", "bar@baz")),
        ("@swarm", ("", "swarm")),
    ],
)
def test_parse_agent_address_splits_at_first_at_and_strips(
    text: str, expected: tuple[str, str | None]
) -> None:
    assert M.parse_agent_address(text) == expected


def test_format_agent_address_with_and_without_swarm() -> None:
    assert M.format_agent_address("a", "s") == {"address_type": "agent", "address": "a@s"}
    assert M.format_agent_address("a", None) == {"address_type": "agent", "address": "a"}
    assert M.format_agent_address("a", "") == {"address_type": "agent", "address": "a"}


@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        (M.create_admin_address, "admin"),
        (M.create_agent_address, "agent"),
        (M.create_system_address, "system"),
        (M.create_user_address, "user"),
    ],
)
def test_address_constructors_and_readers(fn: object, kind: str) -> None:
    address = fn("x-1")  # type: ignore[operator]
    assert address == {"address_type": kind, "address": "x-1"}
    assert list(address) == ["address_type", "address"]
    assert M.get_address_string(address) == "x-1"
    assert M.get_address_type(address) == kind
    assert M.create_address("x-1", kind) == address  # type: ignore[arg-type]


def test_parse_task_contributor() -> None:
    assert M.parse_task_contributor("user:u-1@example") == ("user", "u-1", "example")
    assert M.parse_task_contributor("swarm:peer@a@b") == ("swarm", "peer", "a@b")
    assert M.format_task_contributor("admin", "root", "s") == "admin:root@s"
    for bad in ("user-u1@example", "user:u1"):
        with pytest.raises(ValueError, match="role:id@swarm"):
            M.parse_task_contributor(bad)


# ------------------------------------------------------------------------------ constructors


def test_request_has_every_field_in_order_with_fresh_uuid() -> None:
    payload = M.make_request(
        "t", M.create_agent_address("a"), M.create_agent_address("b"), "s", "b"
    )
    assert list(payload) == [
        "task_id",
        "request_id",
        "sender",
        "recipient",
        "subject",
        "body",
        "sender_swarm",
        "recipient_swarm",
        "routing_info",
    ]
    assert uuid.UUID(payload["request_id"]).version == 4
    assert payload["sender_swarm"] is None and payload["recipient_swarm"] is None
    assert payload["routing_info"] == {}
    other = M.make_response("t", M.create_agent_address("b"), M.create_agent_address("a"), "", "")
    assert other["request_id"] != payload["request_id"]


def test_broadcast_and_interrupt_shapes() -> None:
    recipients = [M.create_agent_address("all")]
    bc = M.make_broadcast("t", M.create_agent_address("a"), recipients, "s", "b")
    it = M.make_interrupt("t", M.create_agent_address("a"), recipients, "s", "b")
    common = ["sender", "recipients", "subject", "body", "sender_swarm", "recipient_swarms"]
    assert list(bc) == ["task_id", "broadcast_id", *common, "routing_info"]
    assert list(it) == ["task_id", "interrupt_id", *common, "routing_info"]
    assert bc["recipient_swarms"] is None and it["routing_info"] == {}
    assert M.message_recipients(M.make_message(bc, "broadcast")) == recipients


def test_make_message_envelope() -> None:
    msg = _request()
    assert list(msg) == ["id", "timestamp", "message", "msg_type"]
    assert uuid.UUID(msg["id"]).version == 4
    assert msg["timestamp"].endswith("+00:00")
    assert M.make_message(msg["message"], "request", message_id="fixed")["id"] == "fixed"
    assert M.message_recipients(msg) == [M.create_agent_address("supervisor")]


def test_message_type_constants() -> None:
    assert M.MAIL_MESSAGE_TYPES == (
        "request",
        "response",
        "broadcast",
        "interrupt",
        "broadcast_complete",
    )
    assert M.ALL_AGENTS == "all"


# ------------------------------------------------------------------------------ XML


def test_build_body_xml_nested_and_lists() -> None:
    xml = M.build_body_xml({"a": 1, "b": {"c": "d"}, "l": [1, 2]})
    assert xml == "<body>\n<a>1</a>\n<b>\n<c>d</c>\n</b>\n<l>1</l>\n<l>2</l>\n</body>"


def test_build_mail_xml_exact_text() -> None:
    msg = _request(timestamp="2025-01-02T03:04:05.678000+00:00")
    rendered = M.build_mail_xml(msg)
    assert rendered == {
        "role": "user",
        "content": (
            "\n<incoming_message>\n"
            "<timestamp>2025-01-02T03:04:05.678000+00:00</timestamp>\n"
            '<from type="user">alice</from>\n'
            "<to>\n"
            "['<address type=\"agent\">supervisor</address>']\n"
            "</to>\n"
            "<subject>Hello</subject>\n"
            "<body>What is 2+2?</body>\n"
            "</incoming_message>\n"
        ),
    }


def test_build_mail_xml_shifts_offsets_to_utc_and_lists_recipients() -> None:
    payload = M.make_broadcast(
        "t",
        M.create_agent_address("sup"),
        [M.create_agent_address("a"), M.create_agent_address("b")],
        "S",
        "<b>not escaped</b>",
    )
    msg = M.make_message(payload, "broadcast")
    msg["timestamp"] = "2025-01-02T03:04:05-05:00"
    content = M.build_mail_xml(msg)["content"]
    assert "<timestamp>2025-01-02T08:04:05+00:00</timestamp>" in content
    assert (
        "['<address type=\"agent\">a</address>', '<address type=\"agent\">b</address>']" in content
    )
    assert "<body><b>not escaped</b></body>" in content


def test_build_mail_xml_manual_is_the_bare_body() -> None:
    assert M.build_mail_xml(_request(), is_manual=True) == {
        "role": "user",
        "content": "What is 2+2?",
    }


def test_build_interswarm_mail_xml_forces_agent_types() -> None:
    payload = M.make_request(
        "t", M.create_user_address("u"), M.create_agent_address("x@remote"), "S", "B"
    )
    envelope: M.MAILInterswarmMessage = {
        "message_id": "m",
        "source_swarm": "local",
        "target_swarm": "remote",
        "timestamp": "2025-01-02T03:04:05+00:00",
        "payload": payload,
        "msg_type": "request",
        "auth_token": None,
        "task_owner": "user:u@local",
        "task_contributors": ["user:u@local"],
        "metadata": None,
    }
    text = M.build_interswarm_mail_xml(envelope)
    assert text.startswith("<interswarm_message>\n<source_swarm>local</source_swarm>")
    assert '<from type="agent">u</from>' in text
    assert '<to>\n<address type="agent">x@remote</address>\n</to>' in text


@pytest.mark.parametrize(
    "items",
    [
        [],
        ['<address type="agent">worker</address>'],
        ['<address type="agent">a</address>', '<address type="user">u</address>'],
        ["it's"],
        ["a'", "b"],
        ["back\\slash"],
        ["new\nline"],
        ["tab\there", "\x00"],
        ["é ü 東京"],
    ],
)
def test_to_list_text_is_the_python_repr_of_the_addresses(items: list[str]) -> None:
    # Agents of the original were prompted with repr() of the list: the fast path keeps it.
    assert M._python_list_text(items) == repr(items)
