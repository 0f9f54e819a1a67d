"""spec/: the app matches openapi.yaml (routes, methods, auth, bodies, replies); examples validate."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server import bodies, responses_bridge
from mail.server.app_factory import create_app
from server_fixtures import REPO_ROOT, auth, create_key, stub_swarms_json
from support.api_routes import is_api_path

pytestmark = pytest.mark.timeout(60)

SPEC = REPO_ROOT / "spec"
DEBUG_ONLY = {("POST", "/responses")}  # deliberately not in the public document


def _load_validate_samples() -> Any:
    spec = importlib.util.spec_from_file_location("validate_samples", SPEC / "validate_samples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vs = _load_validate_samples()
OPENAPI = vs.load_openapi()
REGISTRY = vs.build_registry(OPENAPI)


def api_routes(routes: list[Any]) -> list[APIRoute | Route]:
    """Every API route (FastAPI's, and plain Starlette ones such as the POST /message hot
    path), looking inside included routers (we mount routers without prefixes)."""
    found: list[APIRoute | Route] = []
    for route in routes:
        if isinstance(route, APIRoute) or (isinstance(route, Route) and _is_api(route)):
            found.append(route)
        elif hasattr(route, "original_router"):
            found.extend(api_routes(route.original_router.routes))
    return found


def _is_api(route: Route) -> bool:
    return bool(route.methods) and is_api_path(route.path)


def app_operations(app: Any) -> set[tuple[str, str]]:
    return {(m, r.path) for r in api_routes(app.routes) for m in r.methods - {"HEAD", "OPTIONS"}}


def spec_operations() -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), p): op for p, m, op in vs.operations(OPENAPI)}


def make_app(tmp_path: Path) -> Any:
    config = ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "swarm": {"name": "stub", "registry": str(tmp_path / "reg" / "stub.json")},
            "settings": {"instance_idle_timeout": 0},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
        }
    )
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json(public=True)[0])
    return create_app(config, template=template)


def test_routes_and_methods_match_the_document(tmp_path: Path) -> None:
    served = app_operations(make_app(tmp_path)) - DEBUG_ONLY
    assert served == set(spec_operations())


def test_every_operation_has_a_unique_operation_id() -> None:
    ids = [op["operationId"] for op in spec_operations().values()]
    assert len(ids) == len(set(ids))


def _request_properties(operation_id: str) -> set[str]:
    pointer = vs.operation_schema_pointer(OPENAPI, operation_id, "request")
    schema = REGISTRY.resolver(base_uri=vs.OPENAPI_URI).lookup(pointer).contents
    if "$ref" in schema:
        schema = REGISTRY.resolver(base_uri=vs.OPENAPI_URI).lookup(schema["$ref"]).contents
    return set(schema["properties"])


@pytest.mark.parametrize(
    ("operation_id", "fields"),
    [
        ("message", bodies.MESSAGE_FIELDS),
        ("updateHealth", bodies.HEALTH_FIELDS),
        ("registerSwarm", bodies.REGISTER_SWARM_FIELDS),
        ("registerSwarmAlias", bodies.REGISTER_SWARM_FIELDS),
        ("loadSwarm", bodies.LOAD_SWARM_FIELDS),
        ("getTask", bodies.TASK_FIELDS),
    ],
)
def test_request_body_fields_match(operation_id: str, fields: tuple[str, ...]) -> None:
    assert _request_properties(operation_id) == set(fields)


def test_debug_bridge_fields_are_documented_in_its_module() -> None:
    # /responses is outside the public document; its accepted fields live in one tuple.
    assert set(responses_bridge.RESPONSES_FIELDS) >= {"input", "tools", "previous_response_id"}


# ------------------------------------------------------------- replies match the schemas


@contextlib.asynccontextmanager
async def running(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", timeout=30
        ) as client:
            yield client


def _response_schema_ref(method: str, path: str, status: int) -> str:
    op = spec_operations()[(method, path)]
    documented = op["responses"]
    assert str(status) in documented, f"{method} {path} answered {status}, not documented"
    return vs.OPENAPI_URI + vs.operation_schema_pointer(
        OPENAPI, op["operationId"], "response", str(status)
    )


def check(method: str, path: str, response: httpx.Response) -> Any:
    validator = vs.validator_for_ref(
        _response_schema_ref(method, path, response.status_code), REGISTRY
    )
    data = response.json()
    errors = [e.message for e in validator.iter_errors(data)]
    assert not errors, (method, path, response.status_code, errors, data)
    return data


async def test_replies_validate_against_the_document(tmp_path: Path) -> None:
    user = create_key(tmp_path / "keys.json", "user", "spec-user")
    admin = create_key(tmp_path / "keys.json", "admin", "spec-admin")
    agent = create_key(tmp_path / "keys.json", "agent", "spec-agent")
    app = make_app(tmp_path)
    async with running(app) as c:
        check("GET", "/", await c.get("/"))
        check("GET", "/health", await c.get("/health"))
        check(
            "POST", "/health", await c.post("/health", json={"status": "ok"}, headers=auth(admin))
        )
        check("POST", "/health", await c.post("/health", json={}, headers=auth(admin)))
        check("GET", "/whoami", await c.get("/whoami", headers=auth(user)))
        check("GET", "/status", await c.get("/status", headers=auth(user)))
        plain = check(
            "POST", "/message", await c.post("/message", json={"body": "hi"}, headers=auth(user))
        )
        with_events = check(
            "POST",
            "/message",
            await c.post("/message", json={"body": "hi", "show_events": True}, headers=auth(user)),
        )
        assert with_events["events"]
        check("POST", "/message", await c.post("/message", json={"body": 1}, headers=auth(user)))
        check(
            "POST",
            "/message",
            await c.post(
                "/message",
                json={"body": "x", "task_id": "nope", "resume_from": "user_response"},
                headers=auth(user),
            ),
        )
        tasks = check("GET", "/tasks", await c.get("/tasks", headers=auth(user)))
        assert plain["task_id"] in tasks
        check(
            "GET",
            "/task",
            await c.get("/task", params={"task_id": plain["task_id"]}, headers=auth(user)),
        )
        check("GET", "/task", await c.get("/task", params={"task_id": "nope"}, headers=auth(user)))
        check("GET", "/task", await c.get("/task", headers=auth(user)))
        swarms = check("GET", "/swarms", await c.get("/swarms"))
        assert swarms["swarms"][0]["swarm_name"] == "stub"
        check("POST", "/swarms", await c.post("/swarms", json={"name": "x"}, headers=auth(admin)))
        check(
            "POST",
            "/swarms/register",
            await c.post("/swarms/register", json={}, headers=auth(admin)),
        )
        check("GET", "/swarms/dump", await c.get("/swarms/dump", headers=auth(admin)))
        swarm_json = json.dumps(stub_swarms_json()[0])
        check(
            "POST",
            "/swarms/load",
            await c.post("/swarms/load", json={"json": swarm_json}, headers=auth(admin)),
        )
        check(
            "POST",
            "/swarms/load",
            await c.post("/swarms/load", json={"json": "{"}, headers=auth(admin)),
        )
        check(
            "POST",
            "/interswarm/forward",
            await c.post("/interswarm/forward", json={}, headers=auth(agent)),
        )


async def test_security_requirements_match_the_document(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with running(app) as c:
        for (method, path), op in spec_operations().items():
            r = await c.request(method, path, json={})
            public = op.get("security", OPENAPI["security"]) == []
            if public:
                assert r.status_code != 401, (method, path)
            else:
                assert r.status_code == 401, (method, path)
                assert r.headers["www-authenticate"] == "Bearer"
                check(method, path, r)


# ------------------------------------------------------------------------------- samples


def test_examples_validate() -> None:
    assert len(list((SPEC / "examples").glob("*.json"))) >= 10
    assert vs.main([]) == 0


def test_validate_samples_script_fails_on_a_bad_sample(tmp_path: Path) -> None:
    good = json.loads((SPEC / "examples" / "mail_message_request.json").read_text())
    bad = tmp_path / "mail_message_request_bad.json"
    good["message"]["task_id"] = "not-a-uuid"
    del good["message"]["recipient"]
    bad.write_text(json.dumps(good))
    wrong_body = tmp_path / "http_message_request_bad.json"
    wrong_body.write_text(json.dumps({"body": "x", "msg_type": "interrupt"}))
    unknown = tmp_path / "something.json"
    unknown.write_text("{}")
    done = subprocess.run(
        [
            sys.executable,
            str(SPEC / "validate_samples.py"),
            str(bad),
            str(wrong_body),
            str(unknown),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert any(
        line.startswith("FAIL mail_message_request_bad.json") and "recipient" in line
        for line in lines
    )
    assert any(
        line.startswith("FAIL http_message_request_bad.json") and "interrupt" in line
        for line in lines
    )
    assert any(line.startswith("FAIL something.json") for line in lines)
    ok = subprocess.run(
        [sys.executable, str(SPEC / "validate_samples.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stdout
