"""`mail server`: one-line startup errors, exported environment, clean shutdown, python -m."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server_fixtures import (
    REPO_ROOT,
    ServerProcess,
    auth,
    create_key,
    free_port,
    run_cli,
    server_env,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(90)


def one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("mail server: error:")]
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]


def test_bad_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "mail.toml"
    bad.write_text("[server\nport=1")
    code, _, err = run_cli("server", "-c", str(bad))
    one_line_error(code, err, "is not valid TOML")
    code, _, err = run_cli("server", "-c", str(tmp_path / "missing.toml"))
    one_line_error(code, err, "does not exist")


def test_unknown_log_level_is_one_line_and_exit_2(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    config = write_config(tmp_path, port=free_port())
    code, _, err = run_cli("server", "-c", str(config), "--log-level", "loud")
    one_line_error(code, err, "invalid log level 'loud'")
    assert "Traceback" not in err and "KeyError" not in err


def test_out_of_range_flag_names_the_option_and_the_rule(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    config = write_config(tmp_path, port=free_port())
    code, _, err = run_cli("server", "-c", str(config), "--port", "99999")
    one_line_error(code, err, "invalid option: port: Input should be less than or equal to 65535")
    assert "errors.pydantic.dev" not in err


def test_swarm_missing_from_source_suggests_a_name(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    config = write_config(tmp_path, port=free_port())
    code, _, err = run_cli("server", "-c", str(config), "--swarm-name", "stubb")
    one_line_error(code, err, "swarm 'stubb' not found in")
    assert "Did you mean 'stub'?" in err


def test_invalid_swarms_json_reports_the_validator_message(tmp_path: Path) -> None:
    swarms = json.loads(write_stub_swarms(tmp_path).read_text())
    swarms[0]["entrypoint"] = "supervisr"
    (tmp_path / "swarms.json").write_text(json.dumps(swarms))
    config = write_config(tmp_path, port=free_port())
    code, _, err = run_cli("server", "-c", str(config))
    one_line_error(code, err, "invalid swarm 'stub'")
    assert "Did you mean 'supervisor'?" in err
    (tmp_path / "swarms.json").write_text('{"name": "stub"}')
    code, _, err = run_cli("server", "-c", str(config))
    one_line_error(code, err, "must contain a list of swarms")
    (tmp_path / "swarms.json").write_text("[{")
    code, _, err = run_cli("server", "-c", str(config))
    one_line_error(code, err, "is not valid JSON")
    code, _, err = run_cli(
        "server", "-c", str(config), "--swarm-source", str(tmp_path / "none.json")
    )
    one_line_error(code, err, "does not exist")


def test_port_in_use(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(tmp_path, port=port)
        code, _, err = run_cli("server", "-c", str(config))
    one_line_error(code, err, f"port {port} on 127.0.0.1 is already in use")


def test_half_configured_external_auth(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    config = write_config(tmp_path, port=free_port())
    code, _, err = run_cli(
        "server", "-c", str(config), env={"AUTH_ENDPOINT": "http://127.0.0.1:9/login"}
    )
    one_line_error(code, err, "external auth needs TOKEN_INFO_ENDPOINT to be set")


def test_exports_environment_creates_registry_and_stops_cleanly(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "envy")
    server = ServerProcess(tmp_path, port, args=["-c", str(config)]).start()
    try:
        answers = {}
        for var in ("SWARM_NAME", "SWARM_SOURCE", "SWARM_REGISTRY_FILE", "BASE_URL"):
            r = httpx.post(
                f"{server.base_url}/message",
                json={"body": f"ENV {var}"},
                headers=auth(key),
                timeout=30,
            )
            answers[var] = r.json()["response"]
        assert answers["SWARM_NAME"] == "SWARM_NAME=stub"
        assert answers["SWARM_SOURCE"] == f"SWARM_SOURCE={tmp_path / 'swarms.json'}"
        assert (
            answers["SWARM_REGISTRY_FILE"]
            == f"SWARM_REGISTRY_FILE={tmp_path / 'registries' / 'stub.json'}"
        )
        assert answers["BASE_URL"] == f"BASE_URL=http://127.0.0.1:{port}"
        assert "No API keys were found" not in server.logs()  # keys existed already
    finally:
        assert server.stop() == 0
    logs = server.logs()
    assert "MAIL server stopped" in logs
    assert "Traceback" not in logs
    # The registry is saved at shutdown with the local swarm in it.
    saved = json.loads((tmp_path / "registries" / "stub.json").read_text())
    assert saved["local_swarm_name"] == "stub"


def test_python_dash_m_mail_server_and_sigterm(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mail.server", "-c", str(config)],
        cwd=tmp_path,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    server = ServerProcess(tmp_path, port, proc=proc)
    try:
        server.wait_healthy()
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    assert b"No API keys were found" in out  # first start bootstraps keys
    assert b"Application shutdown complete" in err


def test_mail_server_template_env_injects_a_template(tmp_path: Path) -> None:
    # No swarms.json at all: the template comes from MAIL_SERVER_TEMPLATE.
    port = free_port()
    config = write_config(tmp_path, port=port, swarm="demo", source=str(tmp_path / "missing.json"))
    key = create_key(tmp_path / "registries" / "keys.json", "user", "inj")
    env = {"MAIL_SERVER_TEMPLATE": "tests.support.stub_agents:stub_template"}
    server = ServerProcess(tmp_path, port, args=["-c", str(config)], env=env).start()
    try:
        assert httpx.get(f"{server.base_url}/").json()["swarm"]["name"] == "injected"
        r = httpx.post(
            f"{server.base_url}/message", json={"body": "hi"}, headers=auth(key), timeout=30
        )
        assert r.json()["response"] == "echo[inj]: hi"
    finally:
        assert server.stop() == 0
    assert "MAIL_SERVER_TEMPLATE=tests.support.stub_agents:stub_template" in server.logs()


def test_debug_flag_enables_the_responses_bridge(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    key = create_key(tmp_path / "registries" / "keys.json", "user", "dbg")
    server = ServerProcess(tmp_path, port, args=["-c", str(config), "--debug"]).start()
    try:
        body = {"input": [{"role": "user", "content": "hello bridge"}], "tools": []}
        r = httpx.post(f"{server.base_url}/responses", json=body, headers=auth(key), timeout=30)
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["object"] == "response"
        assert data["output"][0]["content"][0]["text"] == "echo[dbg]: hello bridge"
        assert httpx.post(f"{server.base_url}/responses", json=body).status_code == 401
    finally:
        assert server.stop() == 0


def test_startup_does_not_import_the_model_library(tmp_path: Path) -> None:
    # LiteLLM takes seconds to import; agents import it when they first call a model.
    script = (
        "import asyncio, sys\n"
        "from mail.config import load_config\n"
        "from mail.server.app_factory import create_app\n"
        "from mail.server.state import load_template\n"
        "cfg = load_config().server\n"
        "app = create_app(cfg, template=load_template(cfg))\n"
        "async def main():\n"
        "    async with app.router.lifespan_context(app):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in ('litellm', 'openai', 'anthropic') if m in sys.modules))\n"
    )
    shutil.copy(REPO_ROOT / "mail.toml", tmp_path / "mail.toml")
    shutil.copy(REPO_ROOT / "swarms.json", tmp_path / "swarms.json")
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_version_names_this_an_independent_implementation() -> None:
    from mail.version import PROTOCOL_VERSION, __version__

    code, out, _ = run_cli("version")
    assert code == 0
    first = out.splitlines()[0]
    # The reference implementation is the original (charonlabs/mail v1.3); this is not it.
    assert "reference" not in out, out
    assert first == f"mail (an independent implementation of MAIL) version: {__version__}", out
    assert f"MAIL protocol version: {PROTOCOL_VERSION}" in out
