"""The wire schemas in spec/ and the swarms.json schema in docs/, via mail.schemas."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mail import schemas
from mail.swarms_json.validation import RESERVED_ACTION_NAMES

REPO_ROOT = Path(__file__).resolve().parents[1]
TASK = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


@pytest.fixture(scope="module")
def reference_examples() -> Path:
    """The shared reference example payloads, next to the repository (../shared)."""
    examples = REPO_ROOT.parent / "shared" / "reference" / "data" / "examples"
    if not examples.is_dir():
        pytest.skip("shared reference data is not present next to the repository")
    return examples


def _address(kind: str, name: str) -> dict[str, str]:
    return {"address_type": kind, "address": name}


def request_message() -> dict[str, Any]:
    return {
        "id": "0f0e0d0c-0b0a-4909-8807-060504030201",
        "timestamp": "2025-03-04T05:06:07.123456+00:00",
        "msg_type": "request",
        "message": {
            "task_id": TASK,
            "request_id": "12345678-1234-4234-8234-123456789abc",
            "sender": _address("user", "u-1"),
            "recipient": _address("agent", "supervisor"),
            "subject": "Question",
            "body": "How warm is it?",
            "sender_swarm": "home",
            "recipient_swarm": "home",
            "routing_info": {"stream": True},
        },
    }


def broadcast_message(msg_type: str = "broadcast") -> dict[str, Any]:
    return {
        "id": "1f0e0d0c-0b0a-4909-8807-060504030201",
        "timestamp": "2025-03-04T05:06:07Z",
        "msg_type": msg_type,
        "message": {
            "task_id": TASK,
            "broadcast_id": "22345678-1234-4234-8234-123456789abc",
            "sender": _address("agent", "supervisor"),
            "recipients": [_address("agent", "all")],
            "subject": "Done",
            "body": "All finished",
            "recipient_swarms": ["home", "away"],
        },
    }


def interrupt_message() -> dict[str, Any]:
    msg = broadcast_message("interrupt")
    msg["message"]["interrupt_id"] = msg["message"].pop("broadcast_id")
    return msg


def response_message() -> dict[str, Any]:
    msg = request_message()
    msg["msg_type"] = "response"
    msg["message"]["request_id"] = "not-a-uuid-and-that-is-fine"
    return msg


def interswarm_envelope(msg_type: str = "request") -> dict[str, Any]:
    payload = request_message()["message"]
    payload["recipient"] = _address("agent", "weather@away")
    return {
        "message_id": "33345678-1234-4234-8234-123456789abc",
        "source_swarm": "home",
        "target_swarm": "away",
        "timestamp": "2025-03-04T05:06:07-05:00",
        "payload": payload,
        "msg_type": msg_type,
        "auth_token": "secret",
        "task_owner": "user:u-1@home",
        "task_contributors": ["user:u-1@home"],
        "metadata": {"expect_response": True},
    }


# --------------------------------------------------------------------------- loading


def test_schema_files_are_valid_draft_2020_12() -> None:
    for name in (schemas.CORE_SCHEMA, schemas.INTERSWARM_SCHEMA, schemas.SWARMS_SCHEMA):
        schema = schemas.load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        validator = schemas.get_validator(name)
        assert validator is schemas.get_validator(name)  # cached


def test_schema_files_are_found_in_the_repository() -> None:
    assert (
        schemas.find_schema_file(schemas.CORE_SCHEMA)
        == REPO_ROOT / "spec" / "MAIL-core.schema.json"
    )
    assert (
        schemas.find_schema_file(schemas.SWARMS_SCHEMA) == REPO_ROOT / "docs" / "swarms-schema.json"
    )
    with pytest.raises(FileNotFoundError, match="no-such.schema.json"):
        schemas.find_schema_file("no-such.schema.json")


# --------------------------------------------------------------------------- reference cross-check


def test_reference_examples_validate_against_our_schemas(reference_examples: Path) -> None:
    files = sorted(reference_examples.glob("*.json"))
    assert len(files) >= 7
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        if path.name.startswith("interswarm"):
            schemas.validate_interswarm(data, allow_null_optional=False)
        else:
            schemas.validate_message(data, allow_null_optional=False)


def test_reference_examples_break_when_mangled(reference_examples: Path) -> None:
    data = json.loads((reference_examples / "mail_message_request.json").read_text())
    data["message"]["request_id"] = "12"
    with pytest.raises(schemas.SchemaValidationError, match="request_id"):
        schemas.validate_message(data)


# --------------------------------------------------------------------------- core: positives


@pytest.mark.parametrize(
    "factory",
    [request_message, response_message, broadcast_message, interrupt_message],
)
def test_valid_core_messages(factory: Any) -> None:
    assert schemas.schema_errors(factory(), schemas.CORE_SCHEMA) == []
    schemas.validate_message(factory(), allow_null_optional=False)


def test_broadcast_complete_uses_the_broadcast_shape() -> None:
    schemas.validate_message(broadcast_message("broadcast_complete"))
    wrong = interrupt_message()
    wrong["msg_type"] = "broadcast_complete"
    with pytest.raises(schemas.SchemaValidationError):
        schemas.validate_message(wrong)


def test_messages_built_by_the_core_constructors_validate() -> None:
    from mail.core.message import (
        create_agent_address,
        create_user_address,
        make_broadcast,
        make_message,
        make_request,
    )

    request = make_request(TASK, create_user_address("u"), create_agent_address("a"), "s", "b")
    schemas.validate_message(make_message(request, "request"))
    broadcast = make_broadcast(
        TASK, create_agent_address("a"), [create_agent_address("all")], "s", "b"
    )
    schemas.validate_message(make_message(broadcast, "broadcast_complete"))


# --------------------------------------------------------------------------- core: negatives


def _mutate(msg: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(msg)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("id",), _DELETE, "'id' is a required property"),
        (("message", "body"), _DELETE, "'body' is a required property"),
        (("message", "sender"), _DELETE, "'sender' is a required property"),
        (("id",), "not-a-uuid", "is not a 'uuid'"),
        (("message", "task_id"), "1234", "is not a 'uuid'"),
        (("message", "request_id"), "xyz", "is not a 'uuid'"),
        (("timestamp",), "yesterday", "is not a 'date-time'"),
        (("timestamp",), "2025-02-30T00:00:00Z", "is not a 'date-time'"),
        (("message", "subject"), 5, "is not of type 'string'"),
        (("message", "routing_info"), [], "is not of type 'object'"),
        (("message", "sender", "address_type"), "robot", "is not one of"),
        (("message", "sender", "address"), "", "should be non-empty"),
        (("message", "extra"), 1, "Additional properties are not allowed"),
        (("extra",), 1, "Additional properties are not allowed"),
        (("message", "sender", "extra"), 1, "Additional properties are not allowed"),
        (("msg_type",), "buffered", "is not one of"),
        (("message",), "text", "is not of type 'object'"),
    ],
)
def test_invalid_request_messages(path: tuple[str, ...], value: Any, fragment: str) -> None:
    bad = _mutate(request_message(), path, value)
    with pytest.raises(schemas.SchemaValidationError) as info:
        schemas.validate_message(bad)
    assert any(fragment in err for err in info.value.errors), info.value.errors


def test_msg_type_binds_the_payload_shape() -> None:
    # A well-formed broadcast payload labelled as a request is rejected...
    mislabelled = broadcast_message()
    mislabelled["msg_type"] = "request"
    errors = schemas.schema_errors(mislabelled, schemas.CORE_SCHEMA)
    assert any("'request_id' is a required property" in e for e in errors)
    assert any("'broadcast_id'" in e for e in errors)  # an additional property there
    # ...and a request payload labelled as an interrupt too.
    as_interrupt = request_message()
    as_interrupt["msg_type"] = "interrupt"
    assert schemas.schema_errors(as_interrupt, schemas.CORE_SCHEMA)


def test_broadcast_needs_at_least_one_recipient() -> None:
    bad = _mutate(broadcast_message(), ("message", "recipients"), [])
    with pytest.raises(schemas.SchemaValidationError, match="recipients"):
        schemas.validate_message(bad)


def test_null_optional_fields_are_tolerated_only_when_allowed() -> None:
    msg = _mutate(request_message(), ("message", "recipient_swarm"), None)
    schemas.validate_message(msg)
    with pytest.raises(schemas.SchemaValidationError, match="recipient_swarm"):
        schemas.validate_message(msg, allow_null_optional=False)
    # Required fields never become optional by being null.
    with pytest.raises(schemas.SchemaValidationError, match="body"):
        schemas.validate_message(_mutate(request_message(), ("message", "body"), None))


def test_error_message_names_the_schema_and_counts_extra_errors() -> None:
    bad = _mutate(request_message(), ("message", "subject"), 1)
    bad = _mutate(bad, ("message", "body"), 2)
    with pytest.raises(schemas.SchemaValidationError) as info:
        schemas.validate_message(bad)
    assert str(info.value).startswith("invalid payload for MAIL-core.schema.json: message.")
    assert "(and 1 more)" in str(info.value)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- interswarm


@pytest.mark.parametrize("msg_type", ["request", "response"])
def test_valid_interswarm_envelopes(msg_type: str) -> None:
    schemas.validate_interswarm(interswarm_envelope(msg_type), allow_null_optional=False)


def test_interswarm_broadcast_and_interrupt_payloads() -> None:
    env = interswarm_envelope("broadcast")
    env["payload"] = broadcast_message()["message"]
    schemas.validate_interswarm(env)
    env["msg_type"] = "interrupt"
    with pytest.raises(schemas.SchemaValidationError, match="interrupt_id"):
        schemas.validate_interswarm(env)
    env["payload"] = interrupt_message()["message"]
    schemas.validate_interswarm(env)


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("task_owner",), _DELETE, "'task_owner' is a required property"),
        (("task_contributors",), _DELETE, "'task_contributors' is a required property"),
        (("source_swarm",), "", "should be non-empty"),
        (("task_contributors",), "user:u@home", "is not of type 'array'"),
        (("msg_type",), "broadcast_complete", "is not one of"),
        (("auth_token",), 42, "is not of type 'string'"),
        (("timestamp",), "12:00", "is not a 'date-time'"),
        (("hops",), 1, "Additional properties are not allowed"),
        (("payload", "task_id"), "nope", "is not a 'uuid'"),
        (("payload", "recipient"), _DELETE, "'recipient' is a required property"),
    ],
)
def test_invalid_interswarm_envelopes(path: tuple[str, ...], value: Any, fragment: str) -> None:
    bad = _mutate(interswarm_envelope(), path, value)
    with pytest.raises(schemas.SchemaValidationError) as info:
        schemas.validate_interswarm(bad)
    assert any(fragment in err for err in info.value.errors), info.value.errors


def test_interswarm_payload_is_a_bare_payload_not_a_message() -> None:
    env = interswarm_envelope()
    env["payload"] = request_message()  # the whole MAILMessage: wrong
    with pytest.raises(schemas.SchemaValidationError):
        schemas.validate_interswarm(env)


def test_interswarm_null_auth_token() -> None:
    env = interswarm_envelope()
    env["auth_token"] = None
    schemas.validate_interswarm(env)
    with pytest.raises(schemas.SchemaValidationError, match="auth_token"):
        schemas.validate_interswarm(env, allow_null_optional=False)


# --------------------------------------------------------------------------- swarms.json schema


def test_swarms_schema_rejects_bad_documents() -> None:
    good = [
        {
            "name": "s",
            "version": "1.3.6",
            "entrypoint": "a",
            "agents": [
                {
                    "name": "a",
                    "factory": "python::pkg.mod:make",
                    "comm_targets": [],
                    "agent_params": {},
                }
            ],
        }
    ]
    schemas.validate_swarms_json(good)
    # Action names: the schema lists exactly the names the loader refuses.
    schema = json.loads(schemas.find_schema_file(schemas.SWARMS_SCHEMA).read_text())
    reserved = schema["$defs"]["Action"]["properties"]["name"]["not"]["enum"]
    assert set(reserved) == RESERVED_ACTION_NAMES
    action = {"name": "help", "description": "d", "parameters": {}, "function": "python::m:f"}
    assert any(
        "should not be valid" in e
        for e in schemas.schema_errors([{**good[0], "actions": [action]}], schemas.SWARMS_SCHEMA)
    )
    for path, value, fragment in [
        ((0, "version"), "1.3", "does not match"),
        ((0, "agents"), [], "should be non-empty"),
        ((0, "agents", 0, "factory"), "pkg.mod:make", "does not match"),
        ((0, "agents", 0, "tool_format"), "xml", "is not one of"),
        ((0, "name"), "a@b", "does not match"),
        ((0, "agents", 0, "name"), "w@x", "does not match"),
    ]:
        bad = copy.deepcopy(good)
        target: Any = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        errors = schemas.schema_errors(bad, schemas.SWARMS_SCHEMA)
        assert any(fragment in e for e in errors), (path, errors)
    with pytest.raises(schemas.SchemaValidationError):
        schemas.validate_swarms_json(good[0])  # a single swarm is not a swarms.json document
