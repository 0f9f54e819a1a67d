"""Ray token authentication as a front end meets it (Ray >= 2.52, docs/security.md).

A head started with ``RAY_AUTH_MODE=token`` refuses drivers without its token. A front end
started without it (no ``RAY_AUTH_*``, no ``~/.ray/auth_token``: ``HOME`` is a scratch folder)
must stop with one line naming the cause and exit 2, not a traceback or minutes of retries.
A front end whose machine has the token in Ray's default file presents it by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server_fixtures import REPO_ROOT, write_stub_swarms
from tests.test_cluster_local import DATABASE_URL, _operator_env, _require, run_front_end

pytestmark = pytest.mark.timeout(300)

_HEAD = """
import sys, ray
ray.init(address="local", include_dashboard=False, _temp_dir=sys.argv[1], num_cpus=1)
print("ADDRESS", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # runs until the test closes stdin
"""


@contextlib.contextmanager
def _head(mode: dict[str, str], prefix: str) -> Iterator[str]:
    """A one-node Ray cluster started with ``mode`` (its RAY_AUTH_* variables) and a scratch
    HOME; yields its GCS address, ends it on exit."""
    _require()
    folder = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    env = {**os.environ, **mode, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "HOME": folder}
    head = subprocess.Popen(
        [sys.executable, "-c", _HEAD, folder],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert head.stdout is not None
        address = next((ln.split()[1] for ln in head.stdout if ln.startswith("ADDRESS")), "")
        assert address, "the head did not start"
        yield address
    finally:
        assert head.stdin is not None
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()


@pytest.fixture(scope="module")
def token_head() -> Iterator[tuple[str, str]]:
    """A one-node Ray cluster that requires a token; yields (GCS address, token)."""
    token = secrets.token_hex(32)
    with _head({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}, "mail-tok-") as address:
        yield address, token


def _front_end(
    tmp_path: Path, address: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    write_stub_swarms(tmp_path, "tok")
    env = _operator_env(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "MAIL_KEYS_FILE": str(tmp_path / "k"),
            "DATABASE_URL": DATABASE_URL,
            "HOME": str(tmp_path),  # no ~/.ray/auth_token of the machine
            **extra,
        }
    )
    return run_front_end(tmp_path, address, "tok", env, timeout=240)


def test_a_front_end_without_the_heads_token_is_one_line_and_exit_2(
    token_head: tuple[str, str], tmp_path: Path
) -> None:
    address, _token = token_head
    started = time.monotonic()
    run = _front_end(tmp_path, address, {})
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    last = [line for line in run.stderr.splitlines() if line.strip()][-1]
    assert last.startswith(f"mail server: error: the Ray cluster at '{address}' refused"), last
    assert "RAY_AUTH_MODE=token" in last and "docs/security.md" in last
    print(f"refused in {time.monotonic() - started:.1f} s")


def test_a_wrong_token_is_one_line_and_exit_2(token_head: tuple[str, str], tmp_path: Path) -> None:
    address, _token = token_head
    started = time.monotonic()
    run = _front_end(tmp_path, address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})
    elapsed = time.monotonic() - started
    assert run.returncode == 2, run.stderr[-3000:]
    last = [line for line in run.stderr.splitlines() if line.strip()][-1]
    assert "refused this front end's token authentication" in last, last
    # Probed before ray.init, which would retry a refused token for minutes.
    assert elapsed < 60, f"a wrong token took {elapsed:.0f} s to be refused"
    print(f"wrong token refused in {elapsed:.1f} s")


def test_the_token_in_rays_default_file_is_presented_by_itself(tmp_path: Path) -> None:
    """With the token in ~/.ray/auth_token and no RAY_AUTH_MODE, a front end turns token
    authentication on for a shared cluster, as `ray start` does; RAY_AUTH_MODE=disabled wins."""
    from mail.cluster import settings

    token_file = tmp_path / ".ray" / "auth_token"
    token_file.parent.mkdir()
    token_file.write_text("a" * 64)
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    try:
        os.environ["HOME"] = str(tmp_path)
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            os.environ.pop(name, None)
        changed = settings.prepare_ray_environment("10.0.0.5:6379", "0.0.0.0")
        assert changed.get("RAY_AUTH_MODE") == "token"
        os.environ["RAY_AUTH_MODE"] = "disabled"
        assert "RAY_AUTH_MODE" not in settings.prepare_ray_environment("10.0.0.5:6379", "0.0.0.0")
        assert os.environ["RAY_AUTH_MODE"] == "disabled"
        token_file.unlink()
        del os.environ["RAY_AUTH_MODE"]
        assert "RAY_AUTH_MODE" not in settings.prepare_ray_environment("10.0.0.5:6379", "0.0.0.0")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def plain_head() -> Iterator[str]:
    """A one-node Ray cluster without token authentication; yields its GCS address."""
    with _head({"RAY_AUTH_MODE": "disabled"}, "mail-plain-") as address:
        yield address


def test_a_token_file_does_not_switch_token_mode_on_for_a_head_without_it(
    plain_head: str, token_head: tuple[str, str], tmp_path: Path
) -> None:
    """A machine with ~/.ray/auth_token (any local `ray.init()` leaves one) joining a cluster
    whose head runs without tokens: a front end in token mode would refuse its own workers'
    calls back, so a streamed answer (Ray generator items pushed to the front end) never
    arrives while plain requests work. The head is asked first; one that wants the token
    gets it."""
    token_file = tmp_path / ".ray" / "auth_token"
    token_file.parent.mkdir()
    token_file.write_text("b" * 64)
    code = (
        "import json, sys\n"
        "from mail.cluster.settings import prepare_ray_environment\n"
        "print(json.dumps(prepare_ray_environment(sys.argv[1], '0.0.0.0')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(tmp_path)
    modes = {}
    cases = (("plain", plain_head, {}), ("token", token_head[0], {}))
    # `--cluster-address auto` with Ray's RAY_ADDRESS naming the head (docs/cluster.md).
    cases += (("auto", "auto", {"RAY_ADDRESS": plain_head}),)
    for name, address, extra in cases:
        run = subprocess.run(
            [sys.executable, "-c", code, address],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        modes[name] = json.loads(run.stdout.strip().splitlines()[-1]).get("RAY_AUTH_MODE")
    assert modes == {"plain": "disabled", "token": "token", "auto": "disabled"}
