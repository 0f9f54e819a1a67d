"""A swarm template is fully checked when it is built (issue 12, item 6).

Each broken definition must fail in Python at ``MAILSwarmTemplate`` build time, make
``mail server`` exit with status 2 and one readable line, and make ``POST /swarms/load``
answer 400 -- never a 500 for the next caller.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.stub_agents import stub_swarms_json

from mail.api import MAILSwarmTemplate
from mail.swarms_json import build_swarms_from_json
from server_fixtures import (
    ServerProcess,
    auth,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(120)

SUPERVISOR = "python::mail.factories.supervisor:LiteLLMSupervisorFunction"


def _swarm() -> dict[str, Any]:
    return copy.deepcopy(stub_swarms_json()[0])


def _with_llm_supervisor(params: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(swarm: dict[str, Any]) -> None:
        swarm["agents"][0]["factory"] = SUPERVISOR
        swarm["agents"][0]["agent_params"] = params

    return edit


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(swarm: dict[str, Any]) -> None:
        target: Any = swarm
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _rename_worker_all(swarm: dict[str, Any]) -> None:
    swarm["agents"][1]["name"] = "all"
    swarm["agents"][0]["comm_targets"] = ["all"]
    swarm["agents"][1]["comm_targets"] = ["supervisor"]


BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "factory-not-importable": (
        _set(("agents", 0, "factory"), "python::nonexistent.mod:Foo"),
        "factory 'python::nonexistent.mod:Foo' cannot be imported",
    ),
    "factory-without-colon": (
        _set(("agents", 0, "factory"), "python::tests.support.stub_agents.stub_factory"),
        "must look like 'python::module:object'",
    ),
    "agent-params-typo": (
        _with_llm_supervisor({"lmm": "mail/demo"}),
        "agent_params 'lmm' is not a parameter of factory LiteLLMSupervisorFunction."
        " Did you mean 'llm'?",
    ),
    "llm-missing": (_with_llm_supervisor({}), "needs 'llm' in agent_params, which is missing"),
    "llm-not-a-string": (
        _with_llm_supervisor({"llm": 5}),
        "agent_params 'llm' must be a str, got int",
    ),
    "parameters-not-object": (
        _set(("actions", 0, "parameters"), {"type": "string"}),
        "action 'human_review' field 'parameters' must be a JSON schema with \"type\": \"object\"",
    ),
    "agent-named-all": (_rename_worker_all, "'all' is reserved"),
    "action-function-not-importable": (
        _set(("actions", 0, "function"), "python::nope:x"),
        "action 'human_review': function 'python::nope:x' cannot be imported: "
        "ModuleNotFoundError: No module named 'nope'",
    ),
    "agent-param-not-importable": (
        _set(("agents", 1, "agent_params"), {"system": "python::nope:x"}),
        "agent 'worker': agent_params 'system' ('python::nope:x') cannot be imported: "
        "ModuleNotFoundError: No module named 'nope'",
    ),
    "action-schema-type-unknown": (
        _set(("actions", 0, "parameters", "properties", "question"), {"type": "nonsense"}),
        "action 'human_review': parameter 'question' has unsupported JSON schema type 'nonsense'",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_templates_fail_when_built(case: str) -> None:
    edit, message = BROKEN[case]
    swarm = _swarm()
    edit(swarm)
    with pytest.raises(ValueError) as info:
        MAILSwarmTemplate.from_swarms_json(swarm)
    assert message in str(info.value)


def test_a_sound_llm_template_still_builds() -> None:
    swarm = _swarm()
    _with_llm_supervisor({"llm": "mail/demo", "use_proxy": False})(swarm)
    template = MAILSwarmTemplate.from_swarms_json(swarm)
    assert template.agents[0].agent_params["llm"] == "mail/demo"


def test_two_swarms_with_one_name_in_a_file() -> None:
    with pytest.raises(ValueError, match="two swarms are named 'stub'"):
        build_swarms_from_json([_swarm(), _swarm()])


@pytest.mark.parametrize("case", ["factory-not-importable", "agent-params-typo"])
def test_mail_server_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    edit, message = BROKEN[case]
    swarm = _swarm()
    edit(swarm)
    (tmp_path / "swarms.json").write_text(json.dumps([swarm]), encoding="utf-8")
    port = free_port()
    config = write_config(tmp_path, port=port)
    proc = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
    assert proc.wait_exit(60) == 2
    err = proc.stderr_path.read_text()
    assert message in err
    assert "Traceback" not in err


def test_duplicate_swarm_names_stop_the_server(tmp_path: Path) -> None:
    (tmp_path / "swarms.json").write_text(json.dumps([_swarm(), _swarm()]), encoding="utf-8")
    port = free_port()
    config = write_config(tmp_path, port=port)
    proc = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
    assert proc.wait_exit(60) == 2
    assert "two swarms are named 'stub'" in proc.stderr_path.read_text()


def test_swarms_load_answers_400_and_keeps_serving(tmp_path: Path) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port)
    keys_file = tmp_path / "registries" / "keys.json"
    admin = create_key(keys_file, "admin", "root")
    user = create_key(keys_file, "user", "newcomer")
    proc = ServerProcess(tmp_path, port, args=["--config", str(config)]).start()
    try:
        for case, (edit, message) in BROKEN.items():
            swarm = _swarm()
            edit(swarm)
            r = httpx.post(
                f"{proc.base_url}/swarms/load",
                json={"json": json.dumps(swarm)},
                headers=auth(admin),
                timeout=30,
            )
            assert r.status_code == 400, (case, r.text)
            assert message in r.json()["detail"], case
        # The server still runs the swarm it had: a new caller is served, not given a 500.
        r = httpx.post(
            f"{proc.base_url}/message", json={"body": "hi"}, headers=auth(user), timeout=30
        )
        assert r.status_code == 200 and r.json()["response"] == "echo[newcomer]: hi"
    finally:
        assert proc.stop() == 0, proc.logs()
