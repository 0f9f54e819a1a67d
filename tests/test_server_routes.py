"""End-to-end: every route of a real `mail server`, and its 400/401/403/404 answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.support.fake_peer import fake_peer

from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    keyed_stub_server,
    run_cli,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    keys = {"admin": ("admin", "root"), "user": ("user", "carol"), "agent": ("agent", "peer-swarm")}
    directory = tmp_path_factory.mktemp("routes")
    with keyed_stub_server(directory, keys, public=True) as proc:
        proc.keys_file = directory / "registries" / "keys.json"  # type: ignore[attr-defined]
        yield proc


def get(server: ServerProcess, path: str, who: str | None = None, **kw) -> httpx.Response:
    headers = auth(server.keys[who]) if who else {}
    return httpx.get(server.base_url + path, headers=headers, timeout=30, **kw)


def post(server: ServerProcess, path: str, who: str | None, payload=None, **kw) -> httpx.Response:
    headers = auth(server.keys[who]) if who else {}
    return httpx.post(server.base_url + path, headers=headers, json=payload, timeout=30, **kw)


# ------------------------------------------------------------------------------ public


def test_root_has_both_version_spellings_and_swarm_info(server: ServerProcess) -> None:
    data = get(server, "/").json()
    assert data["name"] == "mail"
    assert data["protocol_version"] == data["version"] == "1.3"
    assert data["status"] == "running"
    assert isinstance(data["uptime"], float) and data["uptime"] > 0
    assert data["swarm"] == {
        "name": "stub",
        "version": "1.0.0",
        "description": "stub swarm for server tests",
        "entrypoint": "supervisor",
        "keywords": ["test"],
        "public": True,
    }


def test_health_get_and_admin_update(server: ServerProcess) -> None:
    before = get(server, "/health").json()
    assert before["status"] == "healthy" and before["swarm_name"] == "stub"
    assert post(server, "/health", None, {"status": "x"}).status_code == 401
    r = post(server, "/health", "user", {"status": "x"})
    assert r.status_code == 403 and r.json()["detail"] == "invalid role"
    r = post(server, "/health", "admin", {"status": ""})
    assert r.status_code == 400 and r.json()["detail"] == "status is required"
    r = post(server, "/health", "admin", {"status": "maintenance"})
    assert r.status_code == 200 and r.json()["status"] == "maintenance"
    after = get(server, "/health").json()
    assert after["status"] == "maintenance" and after["timestamp"] > before["timestamp"]
    post(server, "/health", "admin", {"status": "healthy"})


def test_swarms_lists_public_entries_without_secrets(server: ServerProcess) -> None:
    swarms = get(server, "/swarms").json()["swarms"]
    local = next(s for s in swarms if s["swarm_name"] == "stub")
    assert local["base_url"] == server.base_url
    assert local["version"] == "1.3"
    for forbidden in ("auth_token_ref", "public", "volatile"):
        assert forbidden not in local


def test_unknown_route_is_404(server: ServerProcess) -> None:
    assert get(server, "/nope").status_code == 404


def test_responses_route_is_hidden_without_debug(server: ServerProcess) -> None:
    r = post(server, "/responses", None, {"input": [], "tools": []})
    assert r.status_code == 404 and r.json()["detail"] == "Not found"


def test_cors_preflight_from_the_dev_ui_origin(server: ServerProcess) -> None:
    r = httpx.options(
        server.base_url + "/message",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"


# --------------------------------------------------------------------------------- auth


def test_missing_or_malformed_authorization_is_401(server: ServerProcess) -> None:
    r = get(server, "/whoami")
    assert r.status_code == 401 and r.json()["detail"] == "no API key provided"
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(
        server.base_url + "/whoami", headers={"Authorization": f"Basic {server.keys['user']}"}
    )
    # v1.3's words, then what to send instead.
    bad_format = "invalid API key format: send the header 'Authorization: Bearer <key>'"
    assert r.status_code == 401 and r.json()["detail"] == bad_format
    r = httpx.get(server.base_url + "/whoami", headers={"Authorization": "Bearer"})
    assert r.status_code == 401 and r.json()["detail"] == bad_format
    r = httpx.get(server.base_url + "/whoami", headers=auth("mail_not-a-real-key-at-all-000000"))
    assert r.status_code == 401 and r.json()["detail"] == "invalid API key"


def test_whoami_for_each_role(server: ServerProcess) -> None:
    assert get(server, "/whoami", "user").json() == {
        "id": "carol",
        "role": "user",
        "username": "carol",
    }
    assert get(server, "/whoami", "admin").json()["role"] == "admin"
    r = get(server, "/whoami", "agent")
    assert r.status_code == 403 and r.json()["detail"] == "invalid role"


def test_agent_role_cannot_use_user_or_admin_routes(server: ServerProcess) -> None:
    for method, path in [
        ("GET", "/status"),
        ("POST", "/message"),
        ("GET", "/tasks"),
        ("GET", "/swarms/dump"),
    ]:
        r = httpx.request(
            method, server.base_url + path, headers=auth(server.keys["agent"]), json={"body": "x"}
        )
        assert r.status_code == 403, (method, path)


def test_keys_created_and_revoked_while_running_take_effect(server: ServerProcess) -> None:
    key = create_key(server.keys_file, "user", "dave")
    assert httpx.get(server.base_url + "/whoami", headers=auth(key)).json()["id"] == "dave"
    code, out, _ = run_cli("keys", "--keys-file", str(server.keys_file), "revoke", "dave")
    assert code == 0 and "dave" in out
    assert httpx.get(server.base_url + "/whoami", headers=auth(key)).status_code == 401


# ------------------------------------------------------------------------- user routes


def test_status_reports_the_callers_instance(server: ServerProcess) -> None:
    key = create_key(server.keys_file, "user", "erin")
    before = httpx.get(server.base_url + "/status", headers=auth(key)).json()
    assert before["swarm"] == {"name": "stub", "status": "ready"}
    assert before["user_mail_ready"] is False and before["user_task_running"] is False
    httpx.post(server.base_url + "/message", headers=auth(key), json={"body": "hi"}, timeout=30)
    after = httpx.get(server.base_url + "/status", headers=auth(key)).json()
    assert after["user_mail_ready"] is True and after["user_task_running"] is True
    assert after["active_users"] >= before["active_users"] + 1


def test_tasks_and_task_lookup_forms(server: ServerProcess) -> None:
    task_id = post(server, "/message", "user", {"body": "record me"}).json()["task_id"]
    tasks = get(server, "/tasks", "user").json()
    record = tasks[task_id]
    assert record["completed"] is True and record["is_running"] is False
    assert record["task_owner"] == "user:carol@stub"
    assert "events" not in record and record["event_count"] >= 1  # summaries in /tasks
    by_body = httpx.request(
        "GET",
        server.base_url + "/task",
        headers=auth(server.keys["user"]),
        content=json.dumps({"task_id": task_id}),
    )
    assert by_body.status_code == 200 and by_body.json()["task_id"] == task_id
    by_query = get(server, "/task", "user", params={"task_id": task_id})
    assert by_query.json() == by_body.json()
    events = by_query.json()["events"]
    assert isinstance(events[0]["data"], str)  # raw JSON text in task records
    assert events[0]["id"] == "1" and len(events) == record["event_count"]


def test_task_lookup_errors(server: ServerProcess) -> None:
    r = get(server, "/task", "user")
    assert r.status_code == 400 and r.json()["detail"] == "task_id is required"
    r = httpx.request(
        "GET", server.base_url + "/task", headers=auth(server.keys["user"]), json={"task_id": 5}
    )
    assert r.status_code == 400 and r.json()["detail"] == "task_id must be a string"
    r = get(server, "/task", "user", params={"task_id": "does-not-exist"})
    assert r.status_code == 400 and "parameter 'task_id' must be a UUID" in r.json()["detail"]
    missing = "0b7c7a8e-1d2f-4c3b-9a8e-000000000001"
    r = get(server, "/task", "user", params={"task_id": missing})
    assert r.status_code == 404 and r.json()["detail"] == f"task '{missing}' not found"


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        ({"body": "x", "msg_type": 3}, "msg_type must be a string, got int"),
        ({"body": "x", "msg_type": "letter"}, "invalid message type: letter"),
        ({"body": "x", "msg_type": "response"}, "msg_type 'response' cannot be posted"),
        ({"subject": "only"}, "no message provided"),
        ({"body": 7}, "parameter 'body' must be a string, got int"),
        ({"body": "x", "show_events": "yes"}, "parameter 'show_events' must be a boolean"),
        ({"body": "x", "kwargs": []}, "parameter 'kwargs' must be an object"),
        ({"body": "x", "kwargs": {"task_id": "t"}}, "parameter 'kwargs.task_id' duplicates"),
        ({"body": "x", "kwargs": {"timeout": -1}}, "parameter 'kwargs.timeout' must be a positive"),
        ({"body": "x", "kwargs": {"max_steps": "many"}}, "max_steps must be an int or null"),
        ({"body": "x", "kwargs": {"max_steps": "3"}}, "parameter 'kwargs.max_steps' is invalid"),
        ({"body": "x", "kwargs": {"max_steps": -1}}, "0 or null means unlimited), got -1"),
        ({"body": "x", "task_id": "fed-1"}, "parameter 'task_id' must be a UUID"),
        ({"body": "x", "task_id": "*"}, "parameter 'task_id' must be a UUID"),
        ({"body": "x", "task_id": "x" * 100_000}, "parameter 'task_id' must be a UUID"),
        ({"body": "x", "resume_from": "later"}, "parameter 'resume_from' must be one of"),
        (
            {"body": "x", "resume_from": "user_response"},
            "parameter 'task_id' is required when resume_from",
        ),
        (
            {
                "body": "",
                "task_id": "0b7c7a8e-1d2f-4c3b-9a8e-000000000002",
                "resume_from": "breakpoint_tool_call",
            },
            "kwargs.breakpoint_tool_call_result' is required",
        ),
        ({"body": "x", "entrypoint": "worker"}, "'worker' is not an entrypoint agent"),
        ({"body": "x", "entrypoint": "supervisr"}, "Did you mean 'supervisor'?"),
    ],
)
def test_bad_message_bodies_are_400_naming_the_field(
    server: ServerProcess, payload: dict, detail: str
) -> None:
    r = post(server, "/message", "user", payload)
    assert r.status_code == 400, r.text
    assert detail in r.json()["detail"]


def test_unparseable_message_bodies_are_400_not_422(server: ServerProcess) -> None:
    for content in (b"{not json", b"[1, 2]", b""):
        r = httpx.post(
            server.base_url + "/message", headers=auth(server.keys["user"]), content=content
        )
        assert r.status_code == 400, content
        assert r.json()["detail"].startswith("error parsing request")


def test_explicit_entrypoint_is_used(server: ServerProcess) -> None:
    r = post(
        server,
        "/message",
        "user",
        {"body": "hi", "entrypoint": " supervisor ", "show_events": True},
    )
    first = r.json()["events"][0]["data"]["extra_data"]["full_message"]["message"]
    assert first["recipient"] == {"address_type": "agent", "address": "supervisor"}


# ------------------------------------------------------------------------ admin routes


def test_register_swarm_both_paths_and_errors(server: ServerProcess) -> None:
    with fake_peer("peer-a") as peer_a, fake_peer("peer-b") as peer_b:
        r = post(server, "/swarms", "admin", {"name": "peer-a", "base_url": peer_a})
        assert r.status_code == 200
        assert r.json() == {"status": "registered", "swarm_name": "peer-a"}
        r = post(
            server,
            "/swarms/register",
            "admin",
            {"name": "peer-b", "base_url": peer_b + "/", "volatile": True},
        )
        assert r.status_code == 200 and r.json()["swarm_name"] == "peer-b"
    names = {s["swarm_name"] for s in get(server, "/swarms").json()["swarms"]}
    assert {"stub", "peer-a", "peer-b"} <= names
    r = post(server, "/swarms", "admin", {"name": "peer-c"})
    assert r.status_code == 400 and r.json()["detail"] == "name and base_url are required"
    assert (
        post(server, "/swarms", "user", {"name": "x", "base_url": server.base_url}).status_code
        == 403
    )
    r = post(
        server, "/swarms", "admin", {"name": "gone", "base_url": f"http://127.0.0.1:{free_port()}"}
    )
    assert r.status_code == 500 and r.json()["detail"].startswith("error registering swarm:")


def test_dump_swarm(server: ServerProcess) -> None:
    r = get(server, "/swarms/dump", "admin")
    assert r.json() == {"status": "dumped", "swarm_name": "stub"}
    assert get(server, "/swarms/dump", "user").status_code == 403
    deadline = time.monotonic() + 5
    while "swarm dump for admin root" not in server.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "swarm dump for admin root" in server.logs()


def test_load_swarm_replaces_template_and_default_entrypoint(server: ServerProcess) -> None:
    swarm = json.loads((server.directory / "swarms.json").read_text())[0]
    swarm["agents"].append(
        {
            "name": "greeter",
            "factory": "python::tests.support.stub_agents:stub_factory",
            "comm_targets": ["supervisor"],
            "enable_entrypoint": True,
            "can_complete_tasks": True,
            "agent_params": {},
        }
    )
    swarm["entrypoint"] = "greeter"
    r = post(server, "/swarms/load", "user", {"json": json.dumps(swarm)})
    assert r.status_code == 403
    r = post(server, "/swarms/load", "admin", {"json": "{broken"})
    assert r.status_code == 400 and r.json()["detail"].startswith("error loading swarm from JSON")
    r = post(server, "/swarms/load", "admin", {})
    assert r.status_code == 400 and r.json()["detail"] == "parameter 'json' is required"
    r = post(server, "/swarms/load", "admin", {"json": json.dumps(swarm)})
    assert r.status_code == 200 and r.json() == {"status": "success", "swarm_name": "stub"}
    assert get(server, "/").json()["swarm"]["entrypoint"] == "greeter"
    # A caller whose instance is created after the load gets the new default entrypoint.
    key = create_key(server.keys_file, "user", "frank")
    r = httpx.post(
        server.base_url + "/message",
        headers=auth(key),
        json={"body": "hello", "show_events": True},
        timeout=30,
    )
    first = r.json()["events"][0]["data"]["extra_data"]["full_message"]["message"]
    assert first["recipient"]["address"] == "greeter"
    assert r.json()["response"] == "echo[frank]: hello"
