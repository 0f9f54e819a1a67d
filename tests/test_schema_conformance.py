"""Every message the runtime emits validates against spec/MAIL-core.schema.json."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from mail import schemas
from support.scripted_agents import (
    AgentSpec,
    ScriptedAgent,
    make_runtime,
    run_task,
    send_broadcast,
    send_interrupt,
    send_request,
    send_response,
    task_complete,
    tool_call,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DATA = REPO_ROOT.parent / "shared" / "reference" / "data"


def _subject(history: list[dict[str, Any]]) -> str:
    return str(history[-1]["content"]).split("<subject>")[1].split("</subject>")[0]


def _supervisor(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    last = str(history[-1]["content"])
    if '<from type="user">' in last:
        return [
            send_request("worker", "compute the total", "Compute"),
            send_interrupt("worker", "do this first", "Urgent"),
            send_broadcast("status: all systems go", "Status"),
            tool_call("lookup", {"q": "prices"}),
        ]
    if _subject(history) == "::action_complete::":
        return [tool_call("ignore_broadcast", {})]
    return [task_complete("The total is 42")]


def _worker(history: list[dict[str, Any]], tool_choice: Any) -> list[Any]:
    subject = _subject(history)
    if subject == "Urgent":
        return [tool_call("ignore_broadcast", {"reason": "noted the interrupt"})]
    if subject == "Status":
        return [tool_call("acknowledge_broadcast", {"note": "systems go"})]
    return [send_response("supervisor", "42", "Total")]


async def _lookup(args: dict[str, Any]) -> str:
    return "prices: 40 + 2"


async def _emitted_messages() -> list[dict[str, Any]]:
    rt = make_runtime(
        {
            "supervisor": AgentSpec(
                ScriptedAgent("supervisor", default=_supervisor), ["worker"], True
            ),
            "worker": AgentSpec(ScriptedAgent("worker", default=_worker), ["supervisor"]),
        },
        {"lookup": _lookup},
        swarm_name="conformance",
    )
    rt.agents["supervisor"].actions = ["lookup"]
    response = await run_task(rt, "c0ffee00-0000-4000-8000-000000000001", "add things up")
    assert response["message"]["body"] == "The total is 42"
    task_id = response["message"]["task_id"]
    messages = [
        e.extra_data["full_message"]
        for e in rt.get_task_events(task_id)
        if e.event == "new_message"
    ]
    return [*messages, response]


async def test_every_emitted_message_validates_against_our_core_schema() -> None:
    messages = await _emitted_messages()
    kinds = {m["msg_type"] for m in messages}
    assert kinds == {"request", "response", "broadcast", "interrupt", "broadcast_complete"}
    senders = {m["message"]["sender"]["address_type"] for m in messages}
    assert senders == {"user", "agent", "system"}
    for message in messages:
        schemas.validate_message(message)


async def test_emitted_messages_validate_against_the_reference_schema_when_present() -> None:
    # Our spec/ file is what the project ships; when the shared reference data sits next to
    # the repository, cross-check against its schema too. Without it, check our own copy
    # with a plain validator, so the test asserts the same thing in a standalone clone.
    reference = REFERENCE_DATA / "MAIL-core.schema.json"
    path = reference if reference.is_file() else schemas.find_schema_file(schemas.CORE_SCHEMA)
    schema = json.loads(path.read_text(encoding="utf-8"))
    validator = Draft202012Validator(schema, format_checker=FormatChecker())
    for message in await _emitted_messages():
        cleaned = copy.deepcopy(message)
        # Local messages carry null swarm fields / routing_info (as the original did);
        # the schema types them as non-null optional fields.
        for key in ("sender_swarm", "recipient_swarm", "recipient_swarms", "routing_info"):
            if cleaned["message"].get(key) is None:
                cleaned["message"].pop(key, None)
        errors = [e.message for e in validator.iter_errors(cleaned)]
        assert errors == [], (message["msg_type"], errors)


def _builtin_examples() -> dict[str, Any]:
    """Example payloads in the shape of the protocol's reference examples."""
    task = "5b3d1e0a-9c1f-4a7e-8d2b-3f4a5b6c7d8e"

    def addr(kind: str, name: str) -> dict[str, str]:
        return {"address_type": kind, "address": name}

    def envelope(msg_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "0f0e0d0c-0b0a-4909-8807-060504030201",
            "timestamp": "2025-03-04T05:06:07.123456+00:00",
            "message": payload,
            "msg_type": msg_type,
        }

    direct = {
        "task_id": task,
        "request_id": "12345678-1234-4234-8234-123456789abc",
        "sender": addr("user", "u-1"),
        "recipient": addr("agent", "supervisor"),
        "subject": "Hello",
        "body": "What is the weather?",
    }
    group = {
        "task_id": task,
        "broadcast_id": "22345678-1234-4234-8234-123456789abc",
        "sender": addr("agent", "supervisor"),
        "recipients": [addr("agent", "all")],
        "subject": "::task_complete::",
        "body": "Done",
        "sender_swarm": "example",
        "recipient_swarms": ["example"],
    }
    interrupt = {k: v for k, v in group.items() if k != "broadcast_id"}
    interrupt["interrupt_id"] = "32345678-1234-4234-8234-123456789abc"
    return {
        "request": envelope("request", direct),
        "response": envelope("response", {**direct, "sender": addr("agent", "weather")}),
        "broadcast": envelope("broadcast", {**group, "subject": "News"}),
        "broadcast_complete": envelope("broadcast_complete", group),
        "interrupt": envelope("interrupt", interrupt),
    }


def test_reference_example_payloads_validate() -> None:
    examples_dir = REFERENCE_DATA / "examples"
    if examples_dir.is_dir():
        examples = {
            p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(examples_dir.glob("mail_message_*.json"))
        }
        assert len(examples) >= 5
        interswarm = sorted(examples_dir.glob("interswarm_*.json"))
        for path in interswarm:
            schemas.validate_interswarm(json.loads(path.read_text(encoding="utf-8")))
    else:
        examples = _builtin_examples()
    kinds = set()
    for name, example in examples.items():
        schemas.validate_message(example, allow_null_optional=False)
        kinds.add(example["msg_type"])
        # And the schema is not vacuous: the same example without its task id is rejected.
        broken = copy.deepcopy(example)
        del broken["message"]["task_id"]
        assert schemas.schema_errors(broken, schemas.CORE_SCHEMA), name
    assert kinds == {"request", "response", "broadcast", "interrupt", "broadcast_complete"}
