"""MAIL tools: the tool specs offered to agents and the record of a call an agent made."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model, model_validator

from mail.core.help_text import TOOL_HELP_NAMES, tool_help_text
from mail.core.message import (
    ALL_AGENTS,
    MAILMessage,
    create_agent_address,
    make_broadcast,
    make_interrupt,
    make_message,
    make_request,
)

ToolStyle = Literal["completions", "responses"]

MAIL_TOOL_NAMES: list[str] = [
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
"""Tools every MAIL runtime implements (a list, as in v1.3: ``MAIL_TOOL_NAMES + [...]``)."""

SUPERVISOR_ONLY_TOOL_NAMES: frozenset[str] = frozenset(
    {
        "send_interrupt",
        "send_broadcast",
        "task_complete",
        "send_interswarm_broadcast",
        "discover_swarms",
    }
)
"""Tools only offered to supervisors (via `create_supervisor_tools`)."""

RUNTIME_TOOL_NAMES: frozenset[str] = frozenset(
    {*MAIL_TOOL_NAMES, "send_interswarm_broadcast", "discover_swarms"}
)
"""Every tool name the runtime handles itself; any other name is treated as an action."""


# --------------------------------------------------------------------------------------------
# Agent tool calls


class AgentToolCall(BaseModel):
    """One tool call made by an agent, with the provider output it came from.

    `completion` holds the assistant message (Chat Completions style) and `responses` the output
    items (Responses API style); at least one of them is needed so the call can be replayed into
    the agent's history. `reasoning` and `preamble` carry the model's thinking and any text it
    produced before this call.
    """

    tool_name: str
    tool_args: dict[str, Any]
    tool_call_id: str
    completion: dict[str, Any] = Field(default_factory=dict)
    responses: list[dict[str, Any]] = Field(default_factory=list)
    reasoning: list[str] | None = None
    preamble: str | None = None

    @model_validator(mode="after")
    def _require_provider_output(self) -> AgentToolCall:
        if not self.completion and not self.responses:
            raise ValueError("Either 'completion' or 'responses' must be defined (non-empty).")
        return self

    def create_response_msg(self, content: str) -> dict[str, str]:
        """Build the history entry that carries this call's result back to the model.

        The form follows whichever provider output is present, not the agent's tool format.
        """
        if self.completion:
            return {
                "role": "tool",
                "name": self.tool_name,
                "content": content,
                "tool_call_id": self.tool_call_id,
            }
        return {
            "type": "function_call_output",
            "call_id": self.tool_call_id,
            "output": content,
        }


# --------------------------------------------------------------------------------------------
# Pydantic model -> OpenAI strict tool


def _resolve_ref(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local JSON schema references are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"unresolvable JSON schema reference {ref!r}")
        node = node[part]
    if not isinstance(node, dict):
        raise ValueError(f"JSON schema reference {ref!r} does not point to a schema")
    return node


def _make_strict(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one JSON schema node (in place) into the form OpenAI's strict mode accepts."""
    for defs_key in ("$defs", "definitions"):
        defs = node.get(defs_key)
        if isinstance(defs, dict):
            for sub in defs.values():
                _make_strict(sub, root)

    # Free-form dicts declare additionalProperties themselves; only closed objects get False.
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False

    properties = node.get("properties")
    if isinstance(properties, dict):
        # Strict mode wants every property required; optional ones are expressed as nullable.
        node["required"] = list(properties)
        for key, sub in properties.items():
            properties[key] = _make_strict(sub, root)

    items = node.get("items")
    if isinstance(items, dict):
        node["items"] = _make_strict(items, root)

    for union_key in ("anyOf", "oneOf"):
        variants = node.get(union_key)
        if isinstance(variants, list):
            node[union_key] = [_make_strict(v, root) for v in variants]

    all_of = node.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            node.pop("allOf")
            node.update(_make_strict(all_of[0], root))
        else:
            node["allOf"] = [_make_strict(v, root) for v in all_of]

    # A null default is implied by the nullable type; strict mode rejects it as noise.
    if "default" in node and node["default"] is None:
        node.pop("default")

    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        # A $ref with sibling keywords (e.g. a description) is not allowed: inline the target.
        target = copy.deepcopy(_resolve_ref(root, ref))
        merged = {**target, **node}
        merged.pop("$ref")
        node.clear()
        node.update(merged)
        return _make_strict(node, root)
    return node


def to_strict_json_schema(model_cls: type[BaseModel]) -> dict[str, Any]:
    """Return the JSON schema of `model_cls` rewritten for OpenAI's strict function calling."""
    schema = model_cls.model_json_schema()
    return _make_strict(schema, schema)


def pydantic_function_tool(
    model_cls: type[BaseModel],
    name: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """Build a Chat Completions strict function tool from a pydantic model.

    The name defaults to the class name and the description to the class docstring; the
    description key is omitted when neither is available.
    """
    if description is None:
        description = model_cls.__doc__
    function: dict[str, Any] = {
        "name": name or model_cls.__name__,
        "strict": True,
        "parameters": to_strict_json_schema(model_cls),
    }
    if description is not None:
        function["description"] = description
    return {"type": "function", "function": function}


def pydantic_model_to_tool(
    model_cls: type[BaseModel],
    name: str | None = None,
    description: str | None = None,
    style: ToolStyle = "completions",
) -> dict[str, Any]:
    """Build a strict function tool from a pydantic model, in the layout of `style`."""
    tool = pydantic_function_tool(model_cls, name=name, description=description)
    if style == "completions":
        return tool
    if style == "responses":
        return _make_tools([tool])[0]
    raise ValueError(f"unknown tool style {style!r}; expected 'completions' or 'responses'")


def get_tool_spec_name(tool: Mapping[str, Any]) -> str | None:
    """The name of a tool spec in either layout (Responses or Chat Completions), or None."""
    name = tool.get("name")
    if isinstance(name, str) and name:
        return name
    function = tool.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    return None


def get_tool_name(tool: dict[str, Any]) -> str:
    """Name of a tool dict in either layout."""
    name = get_tool_spec_name(tool)
    if name is not None:
        return name
    raise ValueError(f"tool has no name: {tool!r}")


def _make_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions function tools (``pydantic_function_tool``'s shape) in the Responses
    layout; tools of other types are passed on as they are.

    v1.3 re-exported the OpenAI SDK's private helper of this name, which only accepted the
    SDK's own ``pydantic_function_tool`` objects; plain dicts of that shape work here too.
    """
    converted: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") != "function" or not isinstance(tool.get("function"), Mapping):
            converted.append(dict(tool))
            continue
        function = tool["function"]
        if "parameters" not in function:
            raise ValueError(f"function tool {function.get('name')!r} has no parameters")
        converted.append(
            {
                "type": "function",
                "name": function["name"],
                "description": function.get("description"),
                "parameters": function["parameters"],
                "strict": bool(function.get("strict") or False),
            }
        )
    return converted


# --------------------------------------------------------------------------------------------
# Tool specs


def _cached_tool(builder: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Memoize a tool builder and hand out deep copies.

    Agent functions rebuild their tool list on every model call; generating pydantic models and
    schemas each time is wasteful, and callers may mutate what they get, hence the copies.
    """
    cached = functools.lru_cache(maxsize=256)(builder)

    @functools.wraps(builder)
    def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cached(*args, **kwargs))

    return wrapper


def _build(name: str, doc: str, style: ToolStyle, **fields: tuple[Any, Any]) -> dict[str, Any]:
    model = create_model(name, __doc__=doc, **fields)  # type: ignore[call-overload]
    return pydantic_model_to_tool(model, name=name, description=doc, style=style)


def _target_field(targets: Sequence[str], enable_interswarm: bool) -> tuple[Any, Any]:
    allowed = ", ".join(targets)
    if enable_interswarm:
        description = (
            "Name of the agent that receives this message; agents in other swarms can be "
            "reached as well (write a remote agent as agent-name@swarm-name, e.g. "
            f"analyst@research). Must be one of: {allowed}"
        )
        return (str, Field(description=description))
    description = f"Name of the agent that receives this message. Must be one of: {allowed}"
    # An empty enum is not a valid schema; with no targets the model can only be told so.
    extra: dict[str, Any] | None = {"enum": list(targets)} if targets else None
    return (str, Field(description=description, json_schema_extra=extra))


def _field(annotation: Any, **options: Any) -> tuple[Any, Any]:
    """One argument of a tool: its type and its pydantic `Field` (description, default)."""
    return (annotation, Field(**options))


def _optional_text(description: str) -> tuple[Any, Any]:
    return _field(str | None, default=None, description=description)


def _subject_field(what: str) -> tuple[Any, Any]:
    return _field(str, description=f"Short subject line summarising the {what}.")


def _body_field(what: str) -> tuple[Any, Any]:
    return _field(
        str,
        description=f"Full text of the {what}. The recipient sees only this, so include "
        "every detail it needs.",
    )


def _fixed_tool(name: str, doc: str, **fields: tuple[Any, Any]) -> Callable[..., dict[str, Any]]:
    """The builder of a tool whose arguments do not depend on the agent (only on `style`)."""

    def create(style: ToolStyle = "completions") -> dict[str, Any]:
        return _build(name, doc, style, **fields)

    create.__doc__ = f"The `{name}` tool."
    return _cached_tool(create)


@_cached_tool
def _addressed_tool(
    name: str,
    doc: str,
    what: str,
    targets: tuple[str, ...],
    enable_interswarm: bool,
    style: ToolStyle,
) -> dict[str, Any]:
    return _build(
        name,
        doc,
        style,
        target=_target_field(targets, enable_interswarm),
        subject=_subject_field(what),
        body=_body_field(what),
    )


_REQUEST_DOC = (
    "Send a request to another agent: ask it for information or hand it a piece of work. "
    "The recipient answers with send_response; call await_message if you have nothing else "
    "to do until the answer arrives."
)
_RESPONSE_DOC = (
    "Reply to an agent that sent you a request. Address the agent that asked and put the "
    "complete answer in the body."
)
_INTERRUPT_DOC = (
    "Interrupt another agent with an urgent message that is handled before its ordinary "
    "requests and responses. Use it to stop, correct or redirect work already in progress."
)


def create_request_tool(
    targets: Sequence[str], enable_interswarm: bool = False, style: ToolStyle = "completions"
) -> dict[str, Any]:
    """The `send_request` tool, restricted to `targets` unless interswarm addressing is on."""
    return _addressed_tool(
        "send_request", _REQUEST_DOC, "request", tuple(targets), enable_interswarm, style
    )


def create_response_tool(
    targets: Sequence[str], enable_interswarm: bool = False, style: ToolStyle = "completions"
) -> dict[str, Any]:
    """The `send_response` tool, restricted to `targets` unless interswarm addressing is on."""
    return _addressed_tool(
        "send_response", _RESPONSE_DOC, "response", tuple(targets), enable_interswarm, style
    )


def create_interrupt_tool(
    targets: Sequence[str], enable_interswarm: bool = False, style: ToolStyle = "completions"
) -> dict[str, Any]:
    """The `send_interrupt` tool, restricted to `targets` unless interswarm addressing is on."""
    return _addressed_tool(
        "send_interrupt", _INTERRUPT_DOC, "interrupt", tuple(targets), enable_interswarm, style
    )


# One message to every agent of the local swarm.
create_broadcast_tool = _fixed_tool(
    "send_broadcast",
    "Send the same message to every agent in the swarm at once, for announcements or "
    "context everyone needs. A broadcast asks for no reply.",
    subject=_subject_field("broadcast"),
    body=_body_field("broadcast"),
    targets=_field(
        list[str],
        description='Intended audience; pass ["all"]. The broadcast reaches every '
        "agent of the swarm whatever this list contains.",
    ),
)


create_acknowledge_broadcast_tool = _fixed_tool(
    "acknowledge_broadcast",
    "Acknowledge the broadcast you are handling without replying: it is kept in your "
    "memory and no message is sent. Only valid while handling a broadcast.",
    note=_optional_text("Optional private note stored with the broadcast."),
)


create_ignore_broadcast_tool = _fixed_tool(
    "ignore_broadcast",
    "Ignore the broadcast you are handling because it does not concern you: nothing is "
    "stored and no message is sent.",
    reason=_optional_text("Optional reason, used only for logging."),
)


create_await_message_tool = _fixed_tool(
    "await_message",
    "End your turn and wait for the next message addressed to you, such as the answer "
    "to a request you sent. Fails if you have no outstanding requests and no messages "
    "are waiting.",
    reason=_optional_text("Optional note on what you are waiting for."),
)


# The runtime sends the requested text back as a system broadcast.
create_help_tool = _fixed_tool(
    "help",
    "Ask the MAIL runtime for guidance on how to work in this swarm. The help text is "
    "delivered to you as a message on your next turn.",
    get_summary=_field(bool, default=True, description="Include an overview of MAIL."),
    get_identity=_field(bool, default=False, description="Include your name, swarm and addresses."),
    get_tool_help=_field(
        list[Literal[TOOL_HELP_NAMES]],  # type: ignore[valid-type]
        default=[],
        description="Tools to explain, each with a worked example.",
    ),
    get_full_protocol=_field(
        bool, default=False, description="Include the full MAIL protocol specification."
    ),
)


create_task_complete_tool = _fixed_tool(
    "task_complete",
    "Finish the current task and deliver the final answer to the user. Call it once, when "
    "all the work you depend on is done.",
    finish_message=_field(
        str,
        description="The final answer for the user. It is all the user sees, so make "
        "it complete and self-contained.",
    ),
)


create_interswarm_broadcast_tool = _fixed_tool(
    "send_interswarm_broadcast",
    "Send one broadcast to agents in other swarms.",
    subject=_subject_field("broadcast"),
    body=_body_field("broadcast"),
    target_swarms=_field(
        list[str],
        default=[],
        description="Names of the swarms to reach; an empty list means every known swarm.",
    ),
)


create_swarm_discovery_tool = _fixed_tool(
    "discover_swarms",
    "Hand discovery URLs to the swarm registry so that the swarms listed there are "
    "registered and their agents become reachable.",
    discovery_urls=_field(list[str], description="URLs of swarm discovery endpoints to read."),
)


# --------------------------------------------------------------------------------------------
# Tool sets


def _assemble(
    builders: Iterable[tuple[str, Callable[[], dict[str, Any]]]],
    exclude_tools: Iterable[str] | None,
) -> list[dict[str, Any]]:
    excluded = set(exclude_tools or ())
    return [build() for name, build in builders if name not in excluded]


def create_mail_tools(
    targets: Sequence[str],
    enable_interswarm: bool = False,
    style: ToolStyle = "completions",
    exclude_tools: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """Tools for every agent: request, response, broadcast handling, await and help."""
    return _assemble(
        [
            ("send_request", lambda: create_request_tool(targets, enable_interswarm, style)),
            ("send_response", lambda: create_response_tool(targets, enable_interswarm, style)),
            ("acknowledge_broadcast", lambda: create_acknowledge_broadcast_tool(style)),
            ("ignore_broadcast", lambda: create_ignore_broadcast_tool(style)),
            ("await_message", lambda: create_await_message_tool(style)),
            ("help", lambda: create_help_tool(style)),
        ],
        exclude_tools,
    )


def create_supervisor_tools(
    targets: Sequence[str],
    can_complete_tasks: bool = True,
    enable_interswarm: bool = False,
    exclude_tools: Iterable[str] | None = None,
    style: ToolStyle = "completions",
    _debug_include_intraswarm: bool = True,
) -> list[dict[str, Any]]:
    """Extra tools for supervisors: interrupt/broadcast, interswarm helpers, task_complete."""
    builders: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if _debug_include_intraswarm:
        builders.append(
            ("send_interrupt", lambda: create_interrupt_tool(targets, enable_interswarm, style))
        )
        builders.append(("send_broadcast", lambda: create_broadcast_tool(style)))
    if enable_interswarm:
        builders.append(
            ("send_interswarm_broadcast", lambda: create_interswarm_broadcast_tool(style))
        )
        builders.append(("discover_swarms", lambda: create_swarm_discovery_tool(style)))
    if can_complete_tasks:
        builders.append(("task_complete", lambda: create_task_complete_tool(style)))
    return _assemble(builders, exclude_tools)


# --------------------------------------------------------------------------------------------
# Tool call -> MAIL message

DEFAULT_FINISH_MESSAGE = "Task completed successfully"


def _text_arg(call: AgentToolCall, key: str) -> str:
    try:
        value = call.tool_args[key]
    except KeyError:
        raise ValueError(f"tool call '{call.tool_name}' is missing argument '{key}'") from None
    return value if isinstance(value, str) else str(value)


def _direct_message(call: AgentToolCall, sender: str, task_id: str) -> MAILMessage:
    # send_request / send_response: the target is kept verbatim (agent or agent@swarm); the
    # runtime decides about remote delivery.
    payload = make_request(
        task_id,
        create_agent_address(sender),
        create_agent_address(_text_arg(call, "target")),
        _text_arg(call, "subject"),
        _text_arg(call, "body"),
    )
    return make_message(payload, "request" if call.tool_name == "send_request" else "response")


def _interrupt_message(call: AgentToolCall, sender: str, task_id: str) -> MAILMessage:
    payload = make_interrupt(
        task_id,
        create_agent_address(sender),
        [create_agent_address(_text_arg(call, "target"))],
        _text_arg(call, "subject"),
        _text_arg(call, "body"),
    )
    return make_message(payload, "interrupt")


def _broadcast_message(call: AgentToolCall, sender: str, task_id: str) -> MAILMessage:
    # The `targets` argument is not used: a broadcast always goes to every local agent.
    payload = make_broadcast(
        task_id,
        create_agent_address(sender),
        [create_agent_address(ALL_AGENTS)],
        _text_arg(call, "subject"),
        _text_arg(call, "body"),
    )
    return make_message(payload, "broadcast")


def _task_complete_message(call: AgentToolCall, sender: str, task_id: str) -> MAILMessage:
    finish = call.tool_args.get("finish_message") or DEFAULT_FINISH_MESSAGE
    payload = make_broadcast(
        task_id,
        create_agent_address(sender),
        [create_agent_address(ALL_AGENTS)],
        "Task complete",
        finish if isinstance(finish, str) else str(finish),
    )
    return make_message(payload, "broadcast_complete")


_CONVERTERS: dict[str, Callable[[AgentToolCall, str, str], MAILMessage]] = {
    "send_request": _direct_message,
    "send_response": _direct_message,
    "send_interrupt": _interrupt_message,
    "send_broadcast": _broadcast_message,
    "task_complete": _task_complete_message,
}


def convert_call_to_mail_message(call: AgentToolCall, sender: str, task_id: str) -> MAILMessage:
    """Turn a message-sending tool call by agent `sender` into a MAIL message for `task_id`."""
    converter = _CONVERTERS.get(call.tool_name)
    if converter is None:
        raise ValueError(
            f"tool '{call.tool_name}' does not produce a MAIL message; expected one of: "
            + ", ".join(_CONVERTERS)
        )
    return converter(call, sender, task_id)


# --------------------------------------------------------------------------------------------
# Breakpoint bodies


def _provider_record(call: AgentToolCall) -> dict[str, Any] | None:
    """The provider's own record of `call`: an Anthropic ``tool_use`` block of its completion,
    or the Responses ``function_call`` item of its output (matched by call id)."""
    content = call.completion.get("content") if call.completion else None
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_use"
                and block.get("id") == call.tool_call_id
            ):
                return block
    for item in call.responses:
        if item.get("type") == "function_call" and item.get("call_id") == call.tool_call_id:
            return item
    return None


def normalize_breakpoint_tool_call(
    call: AgentToolCall, raw: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One element of a ``::breakpoint_tool_call::`` body, in the Responses ``function_call``
    layout whatever the provider: ``{"arguments", "call_id", "name", "type", "id", "status"}``.

    `raw` is the provider's record of the call (looked up in the call when not given). A
    Responses item keeps its own ``id``, arguments text and status; any other call (Chat
    Completions, an Anthropic ``tool_use`` block) gets ``id`` ``fc_<call id>``, so an
    Anthropic call ``toolu_x`` is ``fc_toolu_x`` as in v1.3.
    """
    if raw is None:
        raw = _provider_record(call)
    call_id: Any = None
    name: Any = None
    arguments: Any = None
    item_id: Any = None
    status: Any = None
    if raw is not None and raw.get("type") == "function_call":
        call_id, name, arguments = raw.get("call_id"), raw.get("name"), raw.get("arguments")
        item_id, status = raw.get("id"), raw.get("status")
    elif raw is not None and raw.get("type") == "tool_use":
        call_id, name, arguments = raw.get("id"), raw.get("name"), raw.get("input")
    call_id = call_id or call.tool_call_id
    if arguments is None:
        arguments = call.tool_args
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, separators=(",", ":"))
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name or call.tool_name,
        "type": "function_call",
        "id": item_id or f"fc_{call_id}",
        "status": status or "completed",
    }


# --------------------------------------------------------------------------------------------
# v1.3's other module-level helpers (for agent functions written against it)


def get_tool_help(tools: list[str]) -> str:
    """The help text of each named MAIL tool, one section per tool (as the `help` tool shows)."""
    return tool_help_text(tools)


def convert_manual_step_call_to_mail_message(
    call: Any,
    sender: str,
    task_id: str,
    response_targets: list[str],
    response_type: Literal["broadcast", "response", "request"],
) -> MAILMessage:
    """The message a manual step's answer becomes: `call.tool_args`' ``subject`` and ``body``
    (or ``content``, a text answer's) from agent `sender` to `response_targets` (a request
    or response goes to the first target, a broadcast to all of them)."""
    if not response_targets:
        raise ValueError("response_targets must name at least one recipient")
    args = call.tool_args
    subject = args.get("subject", "")
    body = args.get("body") or args.get("content", "")
    source = create_agent_address(sender)
    targets = [create_agent_address(target) for target in response_targets]
    if response_type == "broadcast":
        payload: Any = make_broadcast(task_id, source, targets, subject, body)
    elif response_type in ("request", "response"):
        payload = make_request(task_id, source, targets[0], subject, body)
    else:
        raise ValueError(f"invalid response_type '{response_type}'")
    return make_message(payload, response_type)
