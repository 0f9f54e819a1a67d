"""Module-level names of the v1.3.6 package that programs import by path (issue 41).

Each was importable from the module named here in v1.3.6; a program moving over must find it
at the same place with the same meaning.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.support.v13_swarm import template

pytestmark = pytest.mark.timeout(120)


async def test_agent_history_key_names_the_histories_of_a_finished_task() -> None:
    from mail.core.runtime import AGENT_HISTORY_KEY, MAILRuntime

    swarm = template().instantiate(instance_params={}, user_id="u-names")
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="Status?"), 30)
        task_id = response["message"]["task_id"]
        runtime = swarm.runtime
        assert isinstance(runtime, MAILRuntime)
        key = AGENT_HISTORY_KEY.format(task_id=task_id, agent_name="supervisor")
        history = runtime.agent_histories[key]
        assert any("Status?" in str(item.get("content")) for item in history), history
    finally:
        await swarm.shutdown()


def test_message_module_keeps_the_all_agents_address_and_contributor_parsing() -> None:
    from mail.core.message import (
        MAIL_ALL_LOCAL_AGENTS,
        create_agent_address,
        parse_task_contributor,
        parse_task_contributors,
    )

    assert MAIL_ALL_LOCAL_AGENTS == create_agent_address("all")
    contributors = ["user:u-1@alpha", "swarm:beta@alpha", "agent:helper@beta"]
    assert parse_task_contributors(contributors) == [
        ("user", "u-1", "alpha"),
        ("swarm", "beta", "alpha"),
        ("agent", "helper", "beta"),
    ]
    assert parse_task_contributors([]) == []
    with pytest.raises(ValueError):
        parse_task_contributors(["user:u-1@alpha", "no-role-here"])
    assert parse_task_contributors(contributors[:1]) == [parse_task_contributor(contributors[0])]


def test_interswarm_xml_takes_the_envelope_as_message() -> None:
    from mail.core.message import (
        build_interswarm_mail_xml,
        create_agent_address,
        format_agent_address,
    )

    envelope = {
        "message_id": "5f0c3d1e-8f8b-4a53-9e52-3f1d2f1c0a11",
        "source_swarm": "alpha",
        "target_swarm": "beta",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "payload": {
            "task_id": "6a1c3d1e-8f8b-4a53-9e52-3f1d2f1c0a11",
            "request_id": "7b1c3d1e-8f8b-4a53-9e52-3f1d2f1c0a11",
            "sender": format_agent_address("supervisor", "alpha"),
            "recipient": create_agent_address("helper"),
            "subject": "Hi",
            "body": "hello over there",
            "sender_swarm": "alpha",
            "recipient_swarm": "beta",
            "routing_info": {},
        },
        "msg_type": "request",
        "auth_token": None,
        "task_owner": "user:u-1@alpha",
        "task_contributors": ["user:u-1@alpha"],
        "metadata": {},
    }
    text = build_interswarm_mail_xml(message=envelope)  # type: ignore[arg-type]
    assert text == build_interswarm_mail_xml(envelope)  # type: ignore[arg-type]
    assert "<source_swarm>alpha</source_swarm>" in text
    assert "<body>hello over there</body>" in text


def test_parsing_prefixes_keep_their_v13_names() -> None:
    from mail.utils.parsing import (
        PYTHON_STRING_PREFIX,
        URL_STRING_PREFIX,
        read_python_string,
        resolve_prefixed_string_references,
    )

    assert (PYTHON_STRING_PREFIX, URL_STRING_PREFIX) == ("python::", "url::")
    target = "mail.core.message:create_agent_address"
    assert read_python_string(PYTHON_STRING_PREFIX + target) is read_python_string(target)
    resolved = resolve_prefixed_string_references({"f": PYTHON_STRING_PREFIX + target})
    assert resolved["f"] is read_python_string(target)


def test_url_reference_errors_keep_v13s_wording() -> None:
    import socket

    from mail.utils.parsing import read_url_string

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/prompt.json"
    assert read_url_string(f"url::{url}") == url
    with pytest.raises(RuntimeError, match="^error reading URL string") as raised:
        read_url_string(f"url::{url}", raise_on_error=True)
    assert url in str(raised.value)
