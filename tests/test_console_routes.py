"""The console's HTTP side in-process: asset serving and its headers, GET /swarm, the admin
registry and all-tasks routes, `[server] ui`, and start_server's UI options."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail.api import MAILSwarmTemplate
from mail.config import ServerConfig
from mail.server.app_factory import create_app
from mail.server.console import ASSETS_DIR, CONTENT_SECURITY_POLICY
from server_fixtures import auth, create_key, stub_swarms_json

pytestmark = pytest.mark.timeout(60)


def make_config(tmp_path: Path, **top: Any) -> ServerConfig:
    return ServerConfig.model_validate(
        {
            "host": "127.0.0.1",
            "port": 8123,
            "swarm": {"name": "stub", "registry": str(tmp_path / "registries" / "stub.json")},
            "settings": {"instance_idle_timeout": 0},
            "auth": {"mode": "local", "keys_file": str(tmp_path / "keys.json")},
            **top,
        }
    )


@contextlib.asynccontextmanager
async def client_for(tmp_path: Path, **top: Any) -> AsyncIterator[httpx.AsyncClient]:
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])
    app = create_app(make_config(tmp_path, **top), template=template)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", timeout=30
        ) as client:
            yield client


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    return {
        "admin": create_key(tmp_path / "keys.json", "admin", "root"),
        "alice": create_key(tmp_path / "keys.json", "user", "alice"),
        "bob": create_key(tmp_path / "keys.json", "user", "bob"),
    }


async def test_console_assets_need_no_key_and_carry_a_strict_policy(tmp_path: Path) -> None:
    async with client_for(tmp_path) as client:
        redirect = await client.get("/ui")
        assert redirect.status_code == 308 and redirect.headers["location"] == "ui/"
        index = await client.get("/ui/")
        assert index.status_code == 200
        assert index.headers["content-type"].startswith("text/html")
        policy = index.headers["content-security-policy"]
        assert policy == CONTENT_SECURITY_POLICY
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert index.headers["x-content-type-options"] == "nosniff"
        # No inline script or style anywhere in the page.
        assert re.search(r"<script(?![^>]*\bsrc=)", index.text) is None
        assert "<style" not in index.text and "style=" not in index.text
        script = await client.get("/ui/js/app.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert (
            (await client.get("/ui/css/console.css")).headers["content-type"].startswith("text/css")
        )
        for bad in ("/ui/../../pyproject.toml", "/ui/%2e%2e/__init__.py", "/ui/nope.js"):
            assert (await client.get(bad)).status_code == 404, bad


def test_no_asset_uses_inner_html_or_eval() -> None:
    # Text reaches the page through textContent only; these would let markup or code in.
    for path in ASSETS_DIR.rglob("*.js"):
        text = path.read_text(encoding="utf-8")
        for risky in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert risky not in text, f"{risky} in {path.name}"
        assert "localStorage" not in text, f"the key must stay in sessionStorage ({path.name})"


async def test_ui_false_turns_the_console_off(tmp_path: Path) -> None:
    async with client_for(tmp_path, ui=False) as client:
        assert (await client.get("/ui/")).status_code == 404
        assert (await client.get("/ui/js/app.js")).status_code == 404


async def test_swarm_description_needs_a_key_and_reveals_no_internals(
    tmp_path: Path, keys: dict[str, str]
) -> None:
    async with client_for(tmp_path) as client:
        assert (await client.get("/swarm")).status_code == 401
        assert (await client.get("/swarm", headers=auth("wrong"))).status_code == 401
        r = await client.get("/swarm", headers=auth(keys["alice"]))
        assert r.status_code == 200
        body = r.json()
        assert body["name"] == "stub" and body["entrypoint"] == "supervisor"
        assert body["entrypoints"] == ["supervisor"]
        assert body["breakpoint_tools"] == ["human_review"]
        agents = {a["name"]: a for a in body["agents"]}
        assert agents["supervisor"]["comm_targets"] == ["worker"]
        assert (
            agents["supervisor"]["enable_entrypoint"] and agents["supervisor"]["can_complete_tasks"]
        )
        assert agents["supervisor"]["actions"] == ["human_review"]
        assert agents["worker"]["enable_entrypoint"] is False
        (action,) = body["actions"]
        assert action["name"] == "human_review" and action["breakpoint"] is True
        assert action["parameters"]["required"] == ["question"]
        for secret in ("factory", "agent_params", "stub_agents", "function"):
            assert secret not in r.text
        admin = await client.get("/swarm", headers=auth(keys["admin"]))
        assert admin.json() == body


async def test_admin_only_routes(tmp_path: Path, keys: dict[str, str]) -> None:
    async with client_for(tmp_path) as client:
        user = auth(keys["alice"])
        admin = auth(keys["admin"])
        for method, path in (
            ("GET", "/swarms/registry"),
            ("GET", "/tasks/all"),
            ("DELETE", "/swarms/other"),
        ):
            assert (await client.request(method, path)).status_code == 401
            r = await client.request(method, path, headers=user)
            assert r.status_code == 403 and r.json()["detail"] == "invalid role"
        reg = (await client.get("/swarms/registry", headers=admin)).json()["swarms"]
        assert [(s["swarm_name"], s["is_local"]) for s in reg] == [("stub", True)]
        assert all("auth_token" not in k for s in reg for k in s)
        r = await client.delete("/swarms/stub", headers=admin)
        assert r.status_code == 400 and "own swarm" in r.json()["detail"]
        r = await client.delete("/swarms/unknown", headers=admin)
        assert r.status_code == 404 and r.json()["detail"] == "swarm 'unknown' not found"


async def test_admin_sees_every_callers_tasks_users_only_their_own(
    tmp_path: Path, keys: dict[str, str]
) -> None:
    async with client_for(tmp_path) as client:
        alice = await client.post("/message", json={"body": "hi"}, headers=auth(keys["alice"]))
        bob = await client.post("/message", json={"body": "yo"}, headers=auth(keys["bob"]))
        alice_task, bob_task = alice.json()["task_id"], bob.json()["task_id"]
        everything = (await client.get("/tasks/all", headers=auth(keys["admin"]))).json()["tasks"]
        owners = {t["task_id"]: t["instance"] for t in everything}
        assert owners[alice_task] == "user:alice" and owners[bob_task] == "user:bob"
        # Summaries, as in GET /tasks; ?task_id= gives one task's full record.
        assert all("events" not in t and t["event_count"] > 0 for t in everything)
        one = await client.get(f"/tasks/all?task_id={bob_task}", headers=auth(keys["admin"]))
        (full,) = one.json()["tasks"]
        assert full["instance"] == "user:bob" and full["events"]
        mine = (await client.get("/tasks", headers=auth(keys["bob"]))).json()
        assert set(mine) == {bob_task}


def test_start_server_options(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """launch_ui/open_browser are honoured; ui_port/ui_path are accepted and unused."""
    import uvicorn

    from mail.server import app_factory as app_module
    from mail.server import console

    opened: list[str] = []
    configs: list[Any] = []

    class FakeServer:
        started = True
        should_exit = False

        def __init__(self, config: Any) -> None:
            configs.append(config)

        def run(self) -> None:
            pass

    def fake_open(server: Any, url: str, timeout: float = 60.0) -> None:
        opened.append(url)

    monkeypatch.setattr(uvicorn, "Server", FakeServer)
    monkeypatch.setattr(console, "open_browser_when_ready", fake_open)
    template = MAILSwarmTemplate.from_swarms_json(stub_swarms_json()[0])
    app_module.run_server_with_template(
        template,
        port=8765,
        host="127.0.0.1",
        launch_ui=True,
        open_browser=True,
        ui_port=3000,
        ui_path="/nowhere",
    )
    assert opened == ["http://127.0.0.1:8765/ui/"]
    assert "MAIL console: http://127.0.0.1:8765/ui/" in capsys.readouterr().out
    app_module.run_server_with_template(template, port=8766, host="127.0.0.1", launch_ui=False)
    assert opened == ["http://127.0.0.1:8765/ui/"]
    assert "MAIL console" not in capsys.readouterr().out
    from starlette.testclient import TestClient

    # Without the lifespan: only routing is looked at.
    assert TestClient(configs[-1].app).get("/ui/").status_code == 404
    assert TestClient(configs[0].app).get("/ui/").status_code == 200


async def test_replies_of_the_console_routes_match_the_document(
    tmp_path: Path, keys: dict[str, str]
) -> None:
    from test_spec_openapi import check

    async with client_for(tmp_path) as c:
        user, admin = auth(keys["alice"]), auth(keys["admin"])
        await c.post("/message", json={"body": "hi"}, headers=user)
        check("GET", "/swarm", await c.get("/swarm", headers=user))
        check("GET", "/swarm", await c.get("/swarm"))
        check("GET", "/swarms/registry", await c.get("/swarms/registry", headers=admin))
        check("GET", "/swarms/registry", await c.get("/swarms/registry", headers=user))
        check("DELETE", "/swarms/{swarm_name}", await c.delete("/swarms/x", headers=admin))
        check("DELETE", "/swarms/{swarm_name}", await c.delete("/swarms/stub", headers=admin))
        check("GET", "/tasks/all", await c.get("/tasks/all", headers=admin))
        check("GET", "/tasks/all", await c.get("/tasks/all", headers=user))
