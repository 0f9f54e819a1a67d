"""The import layers (docs/architecture.md): the contracts hold, and they catch a cycle put
back; what crossed a layer by an import before (``MAILSwarmTemplate.start_server``) still works."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.server_fixtures import REPO_ROOT, ServerProcess, free_port, server_env
from tests.support.stub_agents import stub_swarms_json

LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the copy of the package in ``tree/src`` with the project's contracts."""
    assert LINT_IMPORTS is not None, "lint-imports is a dev dependency: uv sync"
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={**server_env(), "PYTHONPATH": str(tree / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        REPO_ROOT / "src" / "mail",
        tree / "src" / "mail",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _prepend(path: Path, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + sep + line + "\n" + rest, encoding="utf-8")


def test_contracts_hold_and_a_cycle_put_back_breaks_them(package_copy: Path) -> None:
    kept = _lint_imports(package_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "0 broken" in kept.stdout

    mail = package_copy / "src" / "mail"
    # The two ends of two cycles this layering removed: the server reaching into cluster/
    # (api -> server -> cluster -> api) and a module below store.base typing against it.
    _prepend(mail / "server" / "app_factory.py", "from mail.cluster.settings import is_loopback")
    _prepend(
        mail / "store" / "records.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mail.store.base import TaskStore",
    )
    broken = _lint_imports(package_copy)
    assert broken.returncode != 0
    assert "mail.server is not allowed to import mail.cluster" in broken.stdout
    assert "mail.server.app_factory -> mail.cluster.settings" in broken.stdout
    assert "No cycles are allowed in mail.store" in broken.stdout


def test_start_server_serves_the_template_through_the_launch_hook(tmp_path: Path) -> None:
    """``MAILSwarmTemplate.start_server`` in a user's script: api/ no longer imports the server,
    the starter ``import mail`` installs serves it."""
    port = free_port()
    script = tmp_path / "serve.py"
    swarm = json.dumps(stub_swarms_json("hooked")[0])
    script.write_text(
        "import sys\n"
        "from mail import MAILSwarmTemplate\n"
        f"template = MAILSwarmTemplate.from_swarm_json({swarm!r})\n"
        "template.start_server(port=int(sys.argv[1]), host='127.0.0.1', launch_ui=False,"
        " open_browser=False)\n",
        encoding="utf-8",
    )
    server = ServerProcess(tmp_path, port, args=[str(port)], script=script)
    try:
        server.start()
        root = httpx.get(f"{server.base_url}/", timeout=10).json()
        assert root["swarm"]["name"] == "hooked"
        assert httpx.get(f"{server.base_url}/ui", timeout=10).status_code == 404  # launch_ui off
    finally:
        server.stop()
