"""Code copied from v1.3.6's documentation and examples runs here.

tests/test_original_api*.py check the names v1.3's own test-suite used; this module takes
the snippets a user copies from v1.3's docs (AGENTS/CLAUDE primers, api.md,
manual-mail-game-guide.md, factories.md) and its example code (the mafia game, the scripts),
with the model calls answered by the scripted LLM on loopback.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from tests.server_fixtures import (
    ROOT_ALICE_BOB,
    ServerProcess,
    free_port,
    keyed_stub_server,
    server_env,
)

from support.scripted_llm import ScriptedLLM, text, tool_call

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------ the mafia example's imports


class ScorePointsArgs(BaseModel):
    """Award points to a player."""

    player_name: str = Field(description="Player to award points to")
    points: int = Field(description="Number of points to award")


async def score_points(game: Any, args: dict[str, Any]) -> str:
    game.scores[args["player_name"]] = game.scores.get(args["player_name"], 0) + args["points"]
    return f"Awarded {args['points']} points to {args['player_name']}"


async def test_manual_game_written_like_the_mafia_example(llm: ScriptedLLM) -> None:
    # v1.3's mafia game (the example the primers and the game guide point to) imports the
    # message type from mail.api, next to the swarm classes.
    from mail import MAILAction
    from mail.api import MAILAgentTemplate, MAILMessage, MAILSwarm, MAILSwarmTemplate
    from mail.factories.base import base_agent_factory

    @dataclass
    class Game:
        swarm: MAILSwarm | None = None
        task_id: str = field(default_factory=lambda: str(uuid.uuid4()))
        scores: dict[str, int] = field(default_factory=dict)

        async def step(self, target: str, targets: list[str], payload: str) -> MAILMessage:
            assert self.swarm is not None
            await self.swarm.await_queue_empty()
            kind = "broadcast" if targets == ["all"] else "response"
            return await self.swarm.manual_step(
                task_id=self.task_id,
                target=target,
                response_targets=targets,
                response_type=kind,  # type: ignore[arg-type]
                payload=payload,
            )

    game = Game()
    common = {"use_proxy": False, "api_base": llm.base_url, "api_key": "k", "user_token": "d"}
    master = MAILAgentTemplate(
        name="GameMaster",
        factory=base_agent_factory,
        comm_targets=["Alice"],
        actions=[
            MAILAction.from_pydantic_model(
                model=ScorePointsArgs, function=partial(score_points, game), name="score_points"
            )
        ],
        agent_params={"llm": "openai/gpt-5-mini", "system": "You run the game.", **common},
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    alice = MAILAgentTemplate(
        name="Alice",
        factory=base_agent_factory,
        comm_targets=["GameMaster"],
        actions=[],
        agent_params={"llm": "openai/gpt-5-mini", "system": "You are Alice.", **common},
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    # The guide's build_swarm gives no version.
    template = MAILSwarmTemplate(
        name="my_game",
        agents=[master, alice],
        actions=list(master.actions),
        entrypoint="GameMaster",
    )
    swarm = template.instantiate({"user_token": "dummy"}, "MyGame")
    game.swarm = swarm
    loop = asyncio.create_task(swarm.run_continuous(mode="manual"))
    try:
        init: MAILMessage = swarm.build_message(
            subject="::init::",
            body="Game starting with: Alice",
            targets=["all"],
            sender_type="user",
            type="broadcast",
            task_id=game.task_id,
        )
        await swarm.submit_message_nowait(init)
        llm.queue(text("I choose: ATTACK"))
        said = await asyncio.wait_for(game.step("Alice", ["GameMaster"], "Your move"), 60)
        assert said["msg_type"] == "response"
        assert said["message"]["body"] == "I choose: ATTACK"
        llm.queue(tool_call("score_points", {"player_name": "Alice", "points": 3}))
        llm.queue(text("Alice scores."))
        said = await asyncio.wait_for(game.step("GameMaster", ["all"], "Score Alice"), 60)
        assert said["msg_type"] == "broadcast"
        assert game.scores == {"Alice": 3}
    finally:
        await swarm.shutdown()
        await loop


def test_mail_api_keeps_the_names_its_v13_module_imported() -> None:
    import mail.api as api
    from mail.core.message import MAILInterswarmMessage, MAILMessage
    from mail.core.tasks import MAILTask
    from mail.core.tools import AgentToolCall
    from mail.net import SwarmRegistry

    assert api.MAILMessage is MAILMessage
    assert api.MAILInterswarmMessage is MAILInterswarmMessage
    assert api.MAILTask is MAILTask
    assert api.AgentToolCall is AgentToolCall
    assert api.SwarmRegistry is SwarmRegistry
    with pytest.raises(AttributeError):
        api.NoSuchName  # noqa: B018


# ------------------------------------------------------------------ template wiring attributes


def test_template_supervisors_and_adjacency_matrix_follow_the_wiring() -> None:
    from tests.support.v13_swarm import template

    built = template()
    assert [a.name for a in built.supervisors] == ["supervisor"]
    assert built.agent_names == ["supervisor", "helper"]
    assert built.adjacency_matrix == [[0, 1], [1, 0]]
    built.update_from_adjacency_matrix([[0, 1], [0, 0]])
    assert built.adjacency_matrix == [[0, 1], [0, 0]]
    assert built.adjacency_matrix == built._build_adjacency_matrix()[0]


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


# ------------------------------------------------------------------ start_server from a script

START_SERVER_SCRIPT = """
import sys
from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.factories import LiteLLMSupervisorFunction

supervisor = MAILAgentTemplate(
    name="supervisor",
    factory=LiteLLMSupervisorFunction,
    comm_targets=[],
    actions=[],
    agent_params={"llm": "mail/demo", "system": "You are a helpful assistant.", "use_proxy": False},
    enable_entrypoint=True,
    can_complete_tasks=True,
    tool_format="completions",
)
template = MAILSwarmTemplate(
    name="eval_swarm", version="1.0.0", agents=[supervisor], actions=[], entrypoint="supervisor"
)
template.start_server(
    port=int(sys.argv[1]), host="127.0.0.1", launch_ui=True, ui_port=3000, open_browser=False
)
"""


def test_start_server_in_a_fresh_folder_prints_keys_that_work(tmp_path: Path) -> None:
    # The primers' "Starting a Server (Programmatic)": a script in an empty folder. Like
    # `mail server`, its first start must print the keys it made, or nobody can call it.
    script = tmp_path / "serve.py"
    script.write_text(START_SERVER_SCRIPT, encoding="utf-8")
    port = free_port()
    server = ServerProcess(tmp_path, port, args=[str(port)], script=script)
    try:
        server.start()
        found = re.search(r"user\s+key \(id 'user'\): (\S+)", server.logs())
        assert found, server.logs()
        answer = httpx.post(
            f"{server.base_url}/message",
            headers={"Authorization": f"Bearer {found.group(1)}"},
            json={"subject": "Greeting", "body": "Hello!"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["response"]
    finally:
        server.stop()


# ------------------------------------------------------------------ leaving a stream early

STREAM_BREAK_SCRIPT = """
import asyncio, sys
from tests.support.v13_swarm import template

async def main():
    swarm = template().instantiate({"user_token": "dummy"}, "u-stream")
    loop = asyncio.create_task(swarm.run_continuous()) if sys.argv[1] == "continuous" else None
    # Several streams: asyncio closes what is left open in an order of its own (memory
    # addresses), so one stream alone may happen to be closed the harmless way round.
    for _ in range(8):
        stream = await swarm.post_message_stream(body="Hello")
        async for event in stream.body_iterator:
            if event.event == "task_complete":
                break  # the stream is left open, as a loop that stops reading leaves it
    print("task_complete", flush=True)
    response, _ = await swarm.post_message(body="again")
    print("second:", response["message"]["body"], flush=True)
    await swarm.shutdown()
    if loop is not None:
        await loop

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["continuous", "one-shot"])
def test_breaking_out_of_a_stream_leaves_no_error_at_exit(tmp_path: Path, mode: str) -> None:
    # The primers' `stream = await swarm.post_message_stream(body=...)`, read until
    # task_complete and left there: asyncio closes the open stream when the program ends.
    script = tmp_path / "stream.py"
    script.write_text(STREAM_BREAK_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), mode],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["task_complete", "second: all done"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr


# ------------------------------------------------------------------ MAILClient._build_headers


async def test_client_subclass_extending_build_headers_as_v13_documents(tmp_path: Path) -> None:
    # client.md, "Integration Tips": extend `_build_headers` by subclassing MAILClient. The
    # override is written against v1.3's signature (extra, ignore_auth) and supplies the
    # bearer token itself, so every call succeeds only if its headers are the ones sent.
    from mail.client import ClientConfig, MAILClient

    class TokenFromVault(MAILClient):
        def __init__(self, base_url: str, token: str) -> None:
            super().__init__(base_url, config=ClientConfig(timeout=30))
            self.vault_token = token

        def _build_headers(
            self, extra: dict[str, str] | None = None, ignore_auth: bool = False
        ) -> dict[str, str]:
            headers = super()._build_headers(extra, ignore_auth)
            headers["Authorization"] = f"Bearer {self.vault_token}"
            return headers

    with keyed_stub_server(tmp_path, ROOT_ALICE_BOB) as server:
        async with TokenFromVault(server.base_url, server.keys["alice"]) as client:
            assert (await client.get_whoami())["id"] == "alice"
            answer = await client.post_message("Hello from a subclass")
            assert answer["response"]
            stream = await client.post_message_stream("Stream this task")
            kinds = [event.event async for event in stream]
            assert kinds[-1] == "task_complete"


# ------------------------------------------------------------------ mail.core.tools helpers


class FetchReport(BaseModel):
    """Fetch a report by id."""

    report_id: str = Field(description="The report")


def test_core_tools_helpers_factories_md_tells_agent_authors_to_reuse() -> None:
    from openai import pydantic_function_tool as openai_function_tool

    from mail.core.tools import (
        AgentToolCall,
        _make_tools,
        convert_manual_step_call_to_mail_message,
        get_tool_help,
        get_tool_spec_name,
        pydantic_function_tool,
        pydantic_model_to_tool,
    )

    completions = pydantic_function_tool(FetchReport, name="fetch_report")
    responses = _make_tools([completions, {"type": "web_search"}])
    assert responses == [
        pydantic_model_to_tool(FetchReport, name="fetch_report", style="responses"),
        {"type": "web_search"},
    ]
    # The OpenAI SDK's own pydantic_function_tool objects, which v1.3's helper took.
    assert _make_tools([openai_function_tool(FetchReport, name="fetch_report")]) == responses[:1]

    assert get_tool_spec_name(completions) == "fetch_report"
    assert get_tool_spec_name(responses[0]) == "fetch_report"
    assert get_tool_spec_name({"type": "web_search"}) is None

    help_text = get_tool_help(["send_request", "task_complete"])
    assert "send_request" in help_text and "task_complete" in help_text

    said = AgentToolCall(
        tool_name="text_output",
        tool_args={"content": "I choose: DEFEND"},
        tool_call_id="call-1",
        completion={"role": "assistant", "content": "I choose: DEFEND"},
    )
    private = convert_manual_step_call_to_mail_message(
        said, "Alice", "task-1", ["GameMaster"], "response"
    )
    assert private["msg_type"] == "response"
    assert private["message"]["recipient"] == {"address_type": "agent", "address": "GameMaster"}  # type: ignore[typeddict-item]
    assert private["message"]["body"] == "I choose: DEFEND"
    public = convert_manual_step_call_to_mail_message(said, "Alice", "task-1", ["all"], "broadcast")
    assert public["msg_type"] == "broadcast"
    assert public["message"]["recipients"] == [{"address_type": "agent", "address": "all"}]  # type: ignore[typeddict-item]
    assert public["message"]["sender"] == {"address_type": "agent", "address": "Alice"}


# ------------------------------------------------------------------ subclassing the factories


async def test_supervisor_subclass_reads_and_changes_its_settings(llm: ScriptedLLM) -> None:
    # factories.md: extend an agent function class to share defaults and override settings.
    # v1.3's LiteLLMSupervisorFunction kept reasoning_effort, max_tokens, use_proxy, ... as
    # attributes, so a subclass could read and change them before delegating the call.
    from mail import MAILAgentTemplate, MAILSwarmTemplate
    from mail.factories import LiteLLMSupervisorFunction

    class EscalatingSupervisor(LiteLLMSupervisorFunction):
        def __call__(self, messages: list[dict[str, Any]], tool_choice: Any = "required") -> Any:
            if self.reasoning_effort == "low" and "hard" in str(messages[-1].get("content")):
                self.reasoning_effort = "high"
                self.max_tokens = (self.max_tokens or 0) * 2
            return super().__call__(messages, tool_choice)

    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory=EscalatingSupervisor,
        comm_targets=[],
        actions=[],
        agent_params={
            "llm": "openai/gpt-5-mini",
            "system": "You answer.",
            "use_proxy": False,
            "api_base": llm.base_url,
            "api_key": "k",
            "reasoning_effort": "low",
            "max_tokens": 1000,
        },
        enable_entrypoint=True,
        can_complete_tasks=True,
        tool_format="responses",  # with an api_base the default would be "completions"
    )
    template = MAILSwarmTemplate(
        name="escalate", version="1.0.0", agents=[supervisor], actions=[], entrypoint="supervisor"
    )
    swarm = template.instantiate({"user_token": "dummy"}, "u-escalate")
    try:
        llm.queue(tool_call("task_complete", {"finish_message": "easy answer"}))
        await asyncio.wait_for(swarm.post_message_and_run(body="an easy one"), 60)
        llm.queue(tool_call("task_complete", {"finish_message": "hard answer"}))
        answer, _ = await asyncio.wait_for(swarm.post_message_and_run(body="a hard one"), 60)
    finally:
        await swarm.shutdown()
    assert answer["message"]["body"] == "hard answer"
    easy, hard = llm.requests
    assert easy.body["reasoning"]["effort"] == "low"
    assert hard.body["reasoning"]["effort"] == "high"
    assert hard.body["max_output_tokens"] == 2000


# ------------------------------------------------------------------ ClientConfig and mail.toml


def test_client_config_built_in_code_takes_the_rest_from_mail_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # client.md: "ClientConfig pulls its defaults from the [client] table in mail.toml ...
    # Override per run by constructing ClientConfig(timeout=..., verbose=...)".
    from mail.client import ClientConfig, MAILClient
    from mail.client_config import load_client_config

    config = tmp_path / "mail.toml"
    config.write_text("[client]\ntimeout = 12.5\nverbose = true\nretries = 1\n")
    monkeypatch.setenv("MAIL_CONFIG_PATH", str(config))
    monkeypatch.chdir(tmp_path)

    assert (ClientConfig().timeout, ClientConfig().verbose, ClientConfig().retries) == (
        12.5,
        True,
        1,
    )
    quiet = ClientConfig(verbose=False)
    assert (quiet.timeout, quiet.verbose) == (12.5, False)
    assert MAILClient("http://127.0.0.1:9", config=ClientConfig(retries=0)).config.timeout == 12.5
    # A file named on purpose (`mail client --config`) is read alone, over the built-in values.
    other = tmp_path / "other.toml"
    other.write_text("[client]\nverbose = true\n")
    assert load_client_config(other).timeout == 3600.0
