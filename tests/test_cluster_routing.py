"""Pure parts of cluster mode (no Ray needed): where an interswarm envelope is delivered, and
the Ray switches a front end sets before Ray is imported."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch

import pytest

from mail.cluster.actor import is_instance_name
from mail.cluster.forwarding import interswarm_recipient
from mail.cluster.settings import is_loopback, prepare_ray_environment


def _body(owner: str, contributors: list[str]) -> bytes:
    return json.dumps(
        {"message": {"task_owner": owner, "task_contributors": contributors}}
    ).encode()


def test_back_goes_to_the_first_local_contributor() -> None:
    body = _body("user:alice@alpha", ["user:alice@alpha", "swarm:alpha@beta"])
    assert interswarm_recipient("/interswarm/back", body, "alpha") == (
        "user",
        "alice",
        "user:alice@alpha",
    )
    # Owned elsewhere, contributed to here: the local contributor's instance.
    body = _body("user:bob@beta", ["user:bob@beta", "swarm:beta@alpha"])
    assert interswarm_recipient("/interswarm/back", body, "alpha") == (
        "swarm",
        "beta",
        "swarm:beta@alpha",
    )


def test_forward_goes_to_the_owner_only_for_tasks_owned_here() -> None:
    ours = _body("admin:ops@alpha", ["admin:ops@alpha"])
    assert interswarm_recipient("/interswarm/forward", ours, "alpha") == (
        "admin",
        "ops",
        "admin:ops@alpha",
    )
    theirs = _body("user:bob@beta", ["user:bob@beta"])
    assert interswarm_recipient("/interswarm/forward", theirs, "alpha") is None


@pytest.mark.parametrize(
    "path,body",
    [
        ("/message", _body("user:alice@alpha", [])),  # not an interswarm delivery
        ("/interswarm/back", b"not json"),
        ("/interswarm/back", b'{"message": []}'),
        ("/interswarm/back", _body("user:x@elsewhere", ["nonsense"])),
        ("/interswarm/back", _body("agent:x@alpha", [])),  # a role no instance has
    ],
)
def test_no_recipient_leaves_the_answer_to_the_callers_host(path: str, body: bytes) -> None:
    assert interswarm_recipient(path, body, "alpha") is None


def test_instance_names_exclude_the_deployment_state_actor() -> None:
    assert is_instance_name("demo/user/alice")
    assert is_instance_name("demo/swarm/beta")
    assert not is_instance_name("_deployment")


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org", ""):
        assert not is_loopback(host), host


@pytest.fixture(autouse=True)
def _leave_imported_ray_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Ray imported by other tests of this process keeps its settings, and the variables
    prepare_ray_environment sets go with the test (monkeypatch.delenv of an absent variable
    records nothing to restore: RAY_AUTH_MODE=token and a loopback node address leaked into
    every later test's subprocesses)."""
    from mail.cluster import settings

    monkeypatch.setattr(settings, "_refresh_imported_ray", lambda: None)
    with patch.dict(os.environ):
        yield


def test_local_cluster_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    changed = prepare_ray_environment("local", "127.0.0.1")
    assert os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "0"
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # loopback node address
    assert os.environ["RAY_AUTH_MODE"] == "token"
    token = os.environ["RAY_AUTH_TOKEN"]
    assert len(token) == 64 and set(changed) >= {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"}


def test_shared_cluster_switches_respect_the_operator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "1")
    # No token on this "machine": the mode stays the operator's (with one, see
    # tests/test_cluster_token_auth.py).
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    changed = prepare_ray_environment("auto", "0.0.0.0")
    assert changed == {}
    assert os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "1"  # the operator's choice
    assert "RAY_AUTH_MODE" not in os.environ  # a shared cluster's mode is the operator's
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ


def test_mail_cluster_refuses_a_private_cluster_and_asks_for_names() -> None:
    from tests.server_fixtures import run_cli

    code, _out, err = run_cli("cluster", "--address", "local", "list")
    assert code == 2
    assert err.startswith("mail cluster: error: a 'local' cluster is private"), err
    code, _out, err = run_cli("cluster", "--address", "auto", "end")
    assert code == 2 and "name the actors to end, or give --all" in err, err
