"""The v1.3.6 server-side names run unchanged (issue 41): ``uvicorn mail.server:app``,
``mail.server.app``, ``mail.config`` and the modules v1.3 had beside them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server_fixtures import free_port, server_env, write_config, write_stub_swarms

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------------------ uvicorn


def uvicorn_process(
    directory: Path, port: int, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``uvicorn mail.server:app`` started as a v1.3 user starts it, in `directory`."""
    command = [sys.executable, "-m", "uvicorn", "mail.server:app", "--host", "127.0.0.1"]
    return subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=directory,
        env=env or server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_up(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "uvicorn did not start in time"
        time.sleep(0.2)


def test_uvicorn_mail_server_app_serves_the_configured_server(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path, name="compat-uv")
    port = free_port()
    write_config(tmp_path, port=port, swarm="compat-uv")
    proc = uvicorn_process(tmp_path, port)
    try:
        wait_until_up(proc, port)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert health.json()["swarm_name"] == "compat-uv"
        # A fresh folder: the first start made the keys and said so (before it was up).
        assert (tmp_path / "registries" / "keys.json").is_file()
        assert (tmp_path / "data" / "mail.db").is_file()
        assert proc.stdout is not None
        printed: list[str] = []
        while not any(line.startswith("  user ") for line in printed):
            printed.append(proc.stdout.readline())
        assert any("No API keys were found, so two were created" in x for x in printed)
        user_key = printed[-1].split()[-1]
        whoami = httpx.get(
            f"http://127.0.0.1:{port}/whoami",
            headers={"Authorization": f"Bearer {user_key}"},
            timeout=5,
        )
        assert whoami.status_code == 200, whoami.text
        assert whoami.json()["role"] == "user"
    finally:
        proc.terminate()
        proc.communicate(timeout=20)

    again = uvicorn_process(tmp_path, port)  # a second start makes no new keys
    try:
        wait_until_up(again, port)
    finally:
        again.terminate()
        out, _ = again.communicate(timeout=20)
    assert "No API keys were found" not in out


def test_uvicorn_in_an_empty_folder_serves_the_swarm_its_mail_toml_names(
    tmp_path: Path,
) -> None:
    """docs/differences.md: `uvicorn mail.server:app` works in a fresh folder. With no
    mail.toml there, the checkout's is read (the search order's last step: the nearest one
    above the installed package); its relative swarm source is relative to it, as `mail
    server` reads it. It was looked for in the empty folder and the start failed (`swarm
    source 'swarms.json' does not exist`)."""
    env = server_env()
    env.pop("MAIL_CONFIG_PATH", None)
    port = free_port()
    proc = uvicorn_process(tmp_path, port, env)
    try:
        wait_until_up(proc, port)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert health.json()["swarm_name"] == "demo"  # the checkout's mail.toml and swarms.json
        assert (tmp_path / "registries" / "keys.json").is_file()  # its data: in the folder
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_mail_server_app_is_the_fastapi_application(tmp_path: Path) -> None:
    # Read in a folder without mail.toml or swarms.json, as v1.3's tests import it: building
    # the application reads nothing and creates nothing; its startup would.
    probe = (
        "from fastapi import FastAPI\n"
        "from starlette.middleware.gzip import GZipMiddleware\n"
        "from mail.server import app, create_app\n"
        "import mail.server\n"
        "assert isinstance(app, FastAPI) and mail.server.app is app\n"
        "assert '/message' in {getattr(r, 'path', '') for r in app.routes}\n"
        "paths = app.openapi()['paths']\n"
        "assert {'/', '/health', '/whoami', '/interswarm/forward'} <= set(paths), paths\n"
        "app.add_middleware(GZipMiddleware)\n"
        "assert isinstance(create_app(), FastAPI)\n"
        "print('ok')\n"
    )
    env = server_env({"MAIL_CONFIG_PATH": str(tmp_path / "absent.toml")})
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_uvicorn_app_refuses_a_database_in_use_with_one_line(tmp_path: Path) -> None:
    from server_fixtures import ServerProcess

    write_stub_swarms(tmp_path, name="compat-uv")
    port = free_port()
    write_config(tmp_path, port=port, swarm="compat-uv")
    running = ServerProcess(tmp_path, port).start()
    try:
        second = uvicorn_process(tmp_path, free_port())
        out, err = second.communicate(timeout=90)
    finally:
        running.stop()
    assert second.returncode != 0, out + err
    assert "Traceback" not in out + err
    [line] = [x for x in err.splitlines() if "is in use by another mail process" in x]
    assert "the MAIL server cannot start: " in line


# ------------------------------------------------------------------------------ modules of v1.3


def test_net_types_names_the_http_answers() -> None:
    import typing

    from mail.net import types

    expected = {
        "GetRootResponse": {"name", "protocol_version", "swarm", "status", "uptime"},
        "SwarmInfo": {"name", "version", "description", "entrypoint", "keywords", "public"},
        "SwarmStatus": {"name", "status"},
        "GetWhoamiResponse": {"id", "role"},
        "GetStatusResponse": {"swarm", "active_users", "user_mail_ready", "user_task_running"},
        "PostMessageResponse": {"response", "events"},
        "GetHealthResponse": {"status", "swarm_name", "timestamp"},
        "GetSwarmsResponse": {"swarms"},
        "PostSwarmsResponse": {"status", "swarm_name"},
        "GetSwarmsDumpResponse": {"status", "swarm_name"},
        "PostSwarmsLoadResponse": {"status", "swarm_name"},
        "PostInterswarmMessageResponse": {"response", "events"},
        "PostInterswarmForwardResponse": {"swarm", "task_id", "status", "local_runner"},
        "PostInterswarmBackResponse": {"swarm", "task_id", "status", "local_runner"},
        "SwarmEndpoint": {"swarm_name", "base_url", "auth_token_ref", "is_active", "latency"},
        "SwarmEndpointCleaned": {"swarm_name", "base_url", "is_active"},
    }
    for name, fields in expected.items():
        shape = getattr(types, name)
        assert fields <= set(typing.get_type_hints(shape)), name
        assert fields <= shape.__required_keys__, name


def test_config_is_a_package_with_v13_modules() -> None:
    import mail.config
    from mail.config import ClientConfig, ServerConfig, SwarmConfig
    from mail.config.client import ClientConfig as ClientConfigV13
    from mail.config.server import ServerConfig as ServerConfigV13
    from mail.config.server import SettingsConfig
    from mail.config.server import SwarmConfig as SwarmConfigV13

    assert (ServerConfigV13, SwarmConfigV13, ClientConfigV13) == (
        ServerConfig,
        SwarmConfig,
        ClientConfig,
    )
    config = ServerConfigV13()
    assert isinstance(config.swarm, SwarmConfig) and isinstance(config.settings, SettingsConfig)
    assert config.settings.task_message_limit == 15 and config.port == 8000
    assert {"ServerConfig", "SwarmConfig", "ClientConfig"} <= set(mail.config.__all__)


def test_url_scheme_and_serialize_helpers_of_v13() -> None:
    from mail.core.events import TaskEvent
    from mail.url_scheme import SwarmURL, parse_swarm_url
    from mail.utils.serialize import dump_mail_result, extract_task_body

    link = parse_swarm_url("swarm://invite?server=mail.example.org:8443&token=k-1")
    assert link == SwarmURL(action="invite", server="mail.example.org:8443", token="k-1")
    assert parse_swarm_url("https://mail.example.org") is None
    assert parse_swarm_url("swarm://teleport?server=x") is None

    answer = {"id": "m-1", "message": {"task_id": "t-1", "subject": "Done", "body": "42"}}
    assert extract_task_body(answer) == "42"
    assert extract_task_body({"body": "direct"}) == "direct"
    assert extract_task_body(object(), {"message": {"body": "second"}}) == "second"
    assert extract_task_body(None) is None

    events = [
        TaskEvent("new_message", "t-1", "request from user"),
        TaskEvent("action_complete", "t-1", "calculate_expression: 6 * 7 = 42"),
    ]
    assert dump_mail_result(answer, events) == "42"
    text = dump_mail_result(answer, events, verbose=True)
    assert "new_message: request from user" in text
    assert "action_complete: calculate_expression: 6 * 7 = 42" in text
    assert text.rstrip().endswith("42") and "t-1" not in text
