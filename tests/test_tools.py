"""Tests for mail.core.tools: tool specs, tool sets, AgentToolCall and call conversion."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from mail.core import tools as T
from mail.core.tools import AgentToolCall

STYLES = ("completions", "responses")
TARGETS = ["weather", "math"]

# name -> (builder taking a style, expected properties in order)
TOOL_BUILDERS: dict[str, tuple[Any, list[str]]] = {
    "send_request": (
        lambda s: T.create_request_tool(TARGETS, style=s),
        ["target", "subject", "body"],
    ),
    "send_response": (
        lambda s: T.create_response_tool(TARGETS, style=s),
        ["target", "subject", "body"],
    ),
    "send_interrupt": (
        lambda s: T.create_interrupt_tool(TARGETS, style=s),
        ["target", "subject", "body"],
    ),
    "send_broadcast": (lambda s: T.create_broadcast_tool(s), ["subject", "body", "targets"]),
    "acknowledge_broadcast": (lambda s: T.create_acknowledge_broadcast_tool(s), ["note"]),
    "ignore_broadcast": (lambda s: T.create_ignore_broadcast_tool(s), ["reason"]),
    "await_message": (lambda s: T.create_await_message_tool(s), ["reason"]),
    "help": (
        lambda s: T.create_help_tool(s),
        ["get_summary", "get_identity", "get_tool_help", "get_full_protocol"],
    ),
    "task_complete": (lambda s: T.create_task_complete_tool(s), ["finish_message"]),
    "send_interswarm_broadcast": (
        lambda s: T.create_interswarm_broadcast_tool(s),
        ["subject", "body", "target_swarms"],
    ),
    "discover_swarms": (lambda s: T.create_swarm_discovery_tool(s), ["discovery_urls"]),
}


def params_of(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"]["parameters"] if "function" in tool else tool["parameters"]


def walk_objects(schema: Any) -> list[dict[str, Any]]:
    """Every sub-schema that declares properties (i.e. every closed object level)."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if "properties" in schema:
            found.append(schema)
        for value in schema.values():
            found.extend(walk_objects(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(walk_objects(value))
    return found


def names(tools: list[dict[str, Any]]) -> list[str]:
    return [T.get_tool_name(t) for t in tools]


# ------------------------------------------------------------------ tool dict layouts


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("tool_name", list(TOOL_BUILDERS))
def test_every_tool_has_layout_and_strict_schema(tool_name: str, style: str) -> None:
    build, expected_props = TOOL_BUILDERS[tool_name]
    tool = build(style)

    if style == "completions":
        assert set(tool) == {"type", "function"}
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "strict", "parameters", "description"}
        assert tool["function"]["strict"] is True
        assert tool["function"]["name"] == tool_name
        description = tool["function"]["description"]
    else:
        assert set(tool) == {"type", "name", "description", "parameters", "strict"}
        assert tool["type"] == "function"
        assert tool["strict"] is True
        assert tool["name"] == tool_name
        description = tool["description"]

    assert T.get_tool_name(tool) == tool_name
    assert isinstance(description, str) and len(description) > 20
    params = params_of(tool)
    assert params["type"] == "object"
    assert params["title"] == tool_name
    assert params["description"] == description
    assert params["additionalProperties"] is False
    assert list(params["properties"]) == expected_props
    assert params["required"] == expected_props
    for prop_name, prop in params["properties"].items():
        assert prop["title"], prop_name
        assert prop.get("description"), prop_name


@pytest.mark.parametrize("style", STYLES)
def test_optional_fields_are_nullable_without_null_default(style: str) -> None:
    for tool, field in (
        (T.create_acknowledge_broadcast_tool(style), "note"),
        (T.create_ignore_broadcast_tool(style), "reason"),
        (T.create_await_message_tool(style), "reason"),
    ):
        prop = params_of(tool)["properties"][field]
        assert prop["anyOf"] == [{"type": "string"}, {"type": "null"}]
        assert "default" not in prop


def test_help_tool_parameters() -> None:
    props = params_of(T.create_help_tool())["properties"]
    assert props["get_summary"] == {**props["get_summary"], "type": "boolean", "default": True}
    assert props["get_identity"]["default"] is False
    assert props["get_full_protocol"]["default"] is False
    assert props["get_tool_help"]["type"] == "array"
    assert props["get_tool_help"]["default"] == []
    assert props["get_tool_help"]["items"]["enum"] == [
        "send_request",
        "send_response",
        "send_broadcast",
        "send_interrupt",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "task_complete",
    ]


def test_array_parameters() -> None:
    broadcast = params_of(T.create_broadcast_tool())["properties"]
    assert broadcast["targets"]["type"] == "array"
    assert broadcast["targets"]["items"] == {"type": "string"}
    interswarm = params_of(T.create_interswarm_broadcast_tool())["properties"]
    assert interswarm["target_swarms"]["items"] == {"type": "string"}
    assert interswarm["target_swarms"]["default"] == []
    discovery = params_of(T.create_swarm_discovery_tool())["properties"]
    assert discovery["discovery_urls"]["type"] == "array"
    assert "default" not in discovery["discovery_urls"]


# ------------------------------------------------------------------ target property


@pytest.mark.parametrize(
    "builder", [T.create_request_tool, T.create_response_tool, T.create_interrupt_tool]
)
@pytest.mark.parametrize("style", STYLES)
def test_target_is_enum_without_interswarm(builder: Any, style: str) -> None:
    target = params_of(builder(["weather", "math"], False, style))["properties"]["target"]
    assert target["type"] == "string"
    assert target["enum"] == ["weather", "math"]
    assert target["description"].endswith("Must be one of: weather, math")
    assert "@" not in target["description"]


@pytest.mark.parametrize(
    "builder", [T.create_request_tool, T.create_response_tool, T.create_interrupt_tool]
)
@pytest.mark.parametrize("style", STYLES)
def test_target_is_free_form_with_interswarm(builder: Any, style: str) -> None:
    target = params_of(builder(["weather", "analyst@research"], True, style))["properties"][
        "target"
    ]
    assert target["type"] == "string"
    assert "enum" not in target
    assert "agent-name@swarm-name" in target["description"]
    assert "Must be one of: weather, analyst@research" in target["description"]


def test_target_without_targets_has_no_empty_enum() -> None:
    target = params_of(T.create_request_tool([]))["properties"]["target"]
    assert "enum" not in target


def test_returned_tools_are_independent_copies() -> None:
    first = T.create_request_tool(["a"])
    first["function"]["parameters"]["properties"]["target"]["enum"].append("intruder")
    first["function"]["name"] = "changed"
    second = T.create_request_tool(["a"])
    assert second["function"]["name"] == "send_request"
    assert params_of(second)["properties"]["target"]["enum"] == ["a"]


def test_targets_accept_any_sequence() -> None:
    from_tuple = T.create_request_tool(("a", "b"))
    from_list = T.create_request_tool(["a", "b"])
    assert from_tuple == from_list


# ------------------------------------------------------------------ tool sets


@pytest.mark.parametrize("style", STYLES)
def test_mail_tools_order_and_style(style: str) -> None:
    tools = T.create_mail_tools(TARGETS, style=style)
    assert names(tools) == [
        "send_request",
        "send_response",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "help",
    ]
    for tool in tools:
        assert ("function" in tool) == (style == "completions")


def test_mail_tools_exclude() -> None:
    tools = T.create_mail_tools(TARGETS, exclude_tools=["help", "send_response", "not_a_tool"])
    assert names(tools) == [
        "send_request",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
    ]


def test_mail_tools_interswarm_reaches_targets() -> None:
    tools = T.create_mail_tools(["a"], enable_interswarm=True)
    for tool in tools[:2]:
        assert "enum" not in params_of(tool)["properties"]["target"]


def test_supervisor_tools_sets() -> None:
    assert names(T.create_supervisor_tools(TARGETS)) == [
        "send_interrupt",
        "send_broadcast",
        "task_complete",
    ]
    assert names(T.create_supervisor_tools(TARGETS, enable_interswarm=True)) == [
        "send_interrupt",
        "send_broadcast",
        "send_interswarm_broadcast",
        "discover_swarms",
        "task_complete",
    ]
    assert names(T.create_supervisor_tools(TARGETS, can_complete_tasks=False)) == [
        "send_interrupt",
        "send_broadcast",
    ]
    assert names(T.create_supervisor_tools(TARGETS, _debug_include_intraswarm=False)) == [
        "task_complete"
    ]
    assert (
        T.create_supervisor_tools(
            TARGETS, can_complete_tasks=False, _debug_include_intraswarm=False
        )
        == []
    )


def test_supervisor_tools_exclude_and_style() -> None:
    tools = T.create_supervisor_tools(
        TARGETS,
        enable_interswarm=True,
        exclude_tools=["send_broadcast", "discover_swarms"],
        style="responses",
    )
    assert names(tools) == ["send_interrupt", "send_interswarm_broadcast", "task_complete"]
    assert all(tool["strict"] is True and "name" in tool for tool in tools)
    interrupt = params_of(tools[0])["properties"]["target"]
    assert "enum" not in interrupt  # interswarm addressing reaches the interrupt tool too


def test_tool_name_constants() -> None:
    assert T.MAIL_TOOL_NAMES == [
        "send_request",
        "send_response",
        "send_interrupt",
        "send_broadcast",
        "task_complete",
        "acknowledge_broadcast",
        "ignore_broadcast",
        "await_message",
        "help",
    ]
    assert T.RUNTIME_TOOL_NAMES == frozenset(
        {*T.MAIL_TOOL_NAMES, "send_interswarm_broadcast", "discover_swarms"}
    )
    assert "send_request" not in T.SUPERVISOR_ONLY_TOOL_NAMES
    every_supervisor_tool = T.create_supervisor_tools(TARGETS, enable_interswarm=True)
    assert set(names(every_supervisor_tool)) == T.SUPERVISOR_ONLY_TOOL_NAMES
    every_tool = names(T.create_mail_tools(TARGETS)) + names(every_supervisor_tool)
    assert set(every_tool) == T.RUNTIME_TOOL_NAMES


def test_get_tool_name() -> None:
    assert T.get_tool_name({"type": "function", "name": "x"}) == "x"
    assert T.get_tool_name({"type": "function", "function": {"name": "y"}}) == "y"
    assert T.get_tool_name({"type": "web_search", "name": None, "function": {"name": "z"}}) == "z"
    with pytest.raises(ValueError, match="no name"):
        T.get_tool_name({"type": "web_search"})


# ------------------------------------------------------------------ pydantic_model_to_tool


class Address(BaseModel):
    street: str
    city: str = "Paris"
    zip_code: str | None = None


class Person(BaseModel):
    """A person with optional contact data."""

    name: str = Field(description="Full name")
    age: int | None = None
    tags: list[str] = []
    home: Address
    work: Address | None = Field(default=None, description="Office address, if any")
    previous: list[Address] = []
    kind: Literal["employee", "contractor"] = "employee"
    extra: dict[str, Any] = {}


def test_pydantic_model_to_tool_nested_model() -> None:
    tool = T.pydantic_model_to_tool(Person)
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "Person"
    assert function["strict"] is True
    assert function["description"] == "A person with optional contact data."
    params = function["parameters"]
    assert params["title"] == "Person"
    assert params["description"] == "A person with optional contact data."
    assert params["required"] == list(params["properties"])

    props = params["properties"]
    assert props["age"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert "default" not in props["age"]
    assert props["tags"] == {
        "default": [],
        "items": {"type": "string"},
        "title": "Tags",
        "type": "array",
    }
    assert props["kind"]["enum"] == ["employee", "contractor"]
    assert props["kind"]["default"] == "employee"
    # A bare $ref stays a reference; the referenced definition is strict.
    assert props["home"] == {"$ref": "#/$defs/Address"}
    address = params["$defs"]["Address"]
    assert address["additionalProperties"] is False
    assert address["required"] == ["street", "city", "zip_code"]
    assert address["properties"]["city"]["default"] == "Paris"
    assert address["properties"]["zip_code"]["anyOf"][1] == {"type": "null"}
    # A $ref with siblings (the description) is inlined.
    work = props["work"]
    assert "$ref" not in work
    assert work["description"] == "Office address, if any"
    assert work["anyOf"][0] == {"$ref": "#/$defs/Address"}
    assert props["previous"]["items"] == {"$ref": "#/$defs/Address"}
    # Free-form dicts keep their open shape.
    assert props["extra"]["additionalProperties"] is True

    for obj in walk_objects(params):
        assert obj["required"] == list(obj["properties"])
        assert obj["additionalProperties"] is False


class Inner(BaseModel):
    value: int


class Outer(BaseModel):
    inner: Inner = Field(description="Described nested model")
    maybe: Inner | None = None


def test_ref_with_siblings_is_inlined_and_strict() -> None:
    params = T.pydantic_model_to_tool(Outer, style="responses")["parameters"]
    inner = params["properties"]["inner"]
    assert "$ref" not in inner
    assert inner["description"] == "Described nested model"
    assert inner["properties"] == {"value": {"title": "Value", "type": "integer"}}
    assert inner["required"] == ["value"]
    assert inner["additionalProperties"] is False
    # Inlining must not alias the definition.
    inner["properties"]["value"]["title"] = "changed"
    assert params["$defs"]["Inner"]["properties"]["value"]["title"] == "Value"


@pytest.mark.parametrize("model", [Person, Outer, Address])
def test_strict_schema_matches_openai_converter(model: type[BaseModel]) -> None:
    # The OpenAI SDK (installed with litellm) is the reference for what "strict" means.
    from openai.lib._pydantic import to_strict_json_schema as openai_strict

    assert T.to_strict_json_schema(model) == openai_strict(model)


def test_pydantic_model_to_tool_overrides_and_styles() -> None:
    completions = T.pydantic_model_to_tool(Address, name="lookup", description="Find it")
    assert completions["function"]["name"] == "lookup"
    assert completions["function"]["description"] == "Find it"
    responses = T.pydantic_model_to_tool(
        Address, name="lookup", description="Find it", style="responses"
    )
    assert responses == {
        "type": "function",
        "name": "lookup",
        "description": "Find it",
        "parameters": completions["function"]["parameters"],
        "strict": True,
    }
    with pytest.raises(ValueError, match="unknown tool style"):
        T.pydantic_model_to_tool(Address, style="chat")  # type: ignore[arg-type]


def test_pydantic_function_tool_without_docstring_omits_description() -> None:
    tool = T.pydantic_function_tool(Address)
    assert tool["function"]["name"] == "Address"
    assert "description" not in tool["function"]
    assert "description" not in tool["function"]["parameters"]
    assert T.pydantic_model_to_tool(Address, style="responses")["description"] is None


# ------------------------------------------------------------------ AgentToolCall


def test_agent_tool_call_requires_provider_output() -> None:
    with pytest.raises(ValidationError, match="Either 'completion' or 'responses' must be defined"):
        AgentToolCall(tool_name="x", tool_args={}, tool_call_id="1")
    with pytest.raises(ValidationError, match="non-empty"):
        AgentToolCall(tool_name="x", tool_args={}, tool_call_id="1", completion={}, responses=[])


def test_agent_tool_call_defaults_and_optional_fields() -> None:
    call = AgentToolCall(
        tool_name="x", tool_args={"a": 1}, tool_call_id="1", responses=[{"type": "message"}]
    )
    assert call.completion == {}
    assert call.reasoning is None
    assert call.preamble is None
    other = AgentToolCall(
        tool_name="x", tool_args={}, tool_call_id="2", completion={"role": "assistant"}
    )
    assert other.responses == []
    other.responses.append({"k": "v"})
    third = AgentToolCall(
        tool_name="x", tool_args={}, tool_call_id="3", completion={"role": "assistant"}
    )
    assert third.responses == []  # defaults are not shared between instances

    rich = AgentToolCall(
        tool_name="send_request",
        tool_args={"target": "a"},
        tool_call_id="4",
        completion={"role": "assistant"},
        reasoning=["first thought", "second thought"],
        preamble="Let me ask a.",
    )
    assert rich.reasoning == ["first thought", "second thought"]
    assert rich.preamble == "Let me ask a."
    dumped = rich.model_dump()
    assert dumped["reasoning"] == ["first thought", "second thought"]
    assert "reasoning" not in dumped["tool_args"]
    with pytest.raises(ValidationError):
        AgentToolCall(
            tool_name="x",
            tool_args={},
            tool_call_id="5",
            completion={"a": 1},
            reasoning="not a list",
        )


def test_create_response_msg_completions_form() -> None:
    call = AgentToolCall(
        tool_name="send_request",
        tool_args={},
        tool_call_id="call_1",
        completion={"role": "assistant", "content": None},
        responses=[{"type": "function_call"}],
    )
    # completion wins when both are present
    assert call.create_response_msg("SUCCESS: message sent") == {
        "role": "tool",
        "name": "send_request",
        "content": "SUCCESS: message sent",
        "tool_call_id": "call_1",
    }


def test_create_response_msg_responses_form() -> None:
    call = AgentToolCall(
        tool_name="help",
        tool_args={},
        tool_call_id="fc_9",
        responses=[{"type": "function_call", "call_id": "fc_9"}],
    )
    assert call.create_response_msg("ERROR") == {
        "type": "function_call_output",
        "call_id": "fc_9",
        "output": "ERROR",
    }


# ------------------------------------------------------------------ convert_call_to_mail_message


def make_call(name: str, **args: Any) -> AgentToolCall:
    return AgentToolCall(
        tool_name=name, tool_args=args, tool_call_id="c1", completion={"role": "assistant"}
    )


def assert_envelope(message: dict[str, Any], msg_type: str) -> None:
    assert set(message) == {"id", "timestamp", "message", "msg_type"}
    assert message["msg_type"] == msg_type
    uuid.UUID(message["id"])
    stamp = datetime.datetime.fromisoformat(message["timestamp"])
    assert stamp.utcoffset() == datetime.timedelta(0)


@pytest.mark.parametrize(
    ("tool", "msg_type"), [("send_request", "request"), ("send_response", "response")]
)
def test_convert_direct_messages(tool: str, msg_type: str) -> None:
    call = make_call(tool, target="math", subject="Sum", body="1+1?")
    message = T.convert_call_to_mail_message(call, "supervisor", "task-1")
    assert_envelope(message, msg_type)
    payload = message["message"]
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
    assert payload["task_id"] == "task-1"
    uuid.UUID(payload["request_id"])
    assert payload["sender"] == {"address_type": "agent", "address": "supervisor"}
    assert payload["recipient"] == {"address_type": "agent", "address": "math"}
    assert (payload["subject"], payload["body"]) == ("Sum", "1+1?")
    assert payload["sender_swarm"] is None and payload["recipient_swarm"] is None
    assert payload["routing_info"] == {}


def test_convert_keeps_remote_target_verbatim() -> None:
    call = make_call("send_request", target="analyst@research", subject="s", body="b")
    message = T.convert_call_to_mail_message(call, "supervisor", "t")
    assert message["message"]["recipient"]["address"] == "analyst@research"


def test_convert_ids_are_fresh() -> None:
    call = make_call("send_request", target="math", subject="s", body="b")
    first = T.convert_call_to_mail_message(call, "a", "t")
    second = T.convert_call_to_mail_message(call, "a", "t")
    assert first["id"] != second["id"]
    assert first["message"]["request_id"] != second["message"]["request_id"]


def test_convert_interrupt() -> None:
    call = make_call("send_interrupt", target="math", subject="Stop", body="Wrong problem")
    message = T.convert_call_to_mail_message(call, "supervisor", "t")
    assert_envelope(message, "interrupt")
    payload = message["message"]
    uuid.UUID(payload["interrupt_id"])
    assert "broadcast_id" not in payload
    assert payload["recipients"] == [{"address_type": "agent", "address": "math"}]
    assert (payload["subject"], payload["body"]) == ("Stop", "Wrong problem")
    assert payload["recipient_swarms"] is None


def test_convert_broadcast_goes_to_all() -> None:
    call = make_call("send_broadcast", subject="News", body="Plan changed", targets=["math"])
    message = T.convert_call_to_mail_message(call, "supervisor", "t")
    assert_envelope(message, "broadcast")
    payload = message["message"]
    uuid.UUID(payload["broadcast_id"])
    assert payload["recipients"] == [{"address_type": "agent", "address": "all"}]
    assert payload["sender"] == {"address_type": "agent", "address": "supervisor"}
    assert (payload["subject"], payload["body"]) == ("News", "Plan changed")


def test_convert_task_complete() -> None:
    call = make_call("task_complete", finish_message="The answer is 42.")
    message = T.convert_call_to_mail_message(call, "supervisor", "task-9")
    assert_envelope(message, "broadcast_complete")
    payload = message["message"]
    assert payload["task_id"] == "task-9"
    assert "broadcast_id" in payload
    assert payload["recipients"] == [{"address_type": "agent", "address": "all"}]
    assert payload["subject"] == "Task complete"
    assert payload["body"] == "The answer is 42."


def test_convert_task_complete_without_message_uses_default() -> None:
    message = T.convert_call_to_mail_message(make_call("task_complete"), "s", "t")
    assert message["message"]["body"] == "Task completed successfully"


def test_convert_rejects_other_tools_and_missing_args() -> None:
    with pytest.raises(ValueError, match="does not produce a MAIL message"):
        T.convert_call_to_mail_message(make_call("help"), "a", "t")
    with pytest.raises(ValueError, match="does not produce a MAIL message"):
        T.convert_call_to_mail_message(make_call("my_action", x=1), "a", "t")
    with pytest.raises(ValueError, match="missing argument 'target'"):
        T.convert_call_to_mail_message(make_call("send_request", subject="s", body="b"), "a", "t")
