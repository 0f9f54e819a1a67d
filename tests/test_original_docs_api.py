"""Code copied from v1.3.6's documentation and examples runs here.

tests/test_original_api*.py check the names v1.3's own test-suite used; this module takes
the snippets a user copies from v1.3's docs (AGENTS/CLAUDE primers, api.md,
manual-mail-game-guide.md, factories.md) and its example code (the mafia game, the scripts),
with the model calls answered by the scripted LLM on loopback.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from pydantic import BaseModel, Field

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
