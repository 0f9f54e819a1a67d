"""The number-guessing game loop, driven with `manual_step`."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from mail.examples.game.actions import get_game_master_actions
from mail.examples.game.prompts import game_master_prompt, player_prompt

GAME_MASTER = "GameMaster"
DEFAULT_PLAYERS = {"Alice": "bold and chatty", "Bob": "careful and dry", "Carol": "cheerful"}


@dataclass
class GameResult:
    winners: list[str]
    scores: dict[str, int]
    transcript: list[str]


@dataclass
class NumberGuessGame:
    """Game state plus the swarm that plays it (built by `create`)."""

    players: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PLAYERS))
    rounds: int = 2
    low: int = 1
    high: int = 20
    seed: int = 7
    llm: str = "mail/demo"
    tool_format: str = "responses"
    task_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    round_number: int = 0
    round_open: bool = False
    guesses: dict[str, int] = field(default_factory=dict)
    scores: dict[str, int] = field(default_factory=dict)
    transcript: list[str] = field(default_factory=list)
    swarm: Any = None
    _runner: asyncio.Task[None] | None = None

    # -- setup -------------------------------------------------------------------------------

    def build_template(self) -> Any:
        from mail.api import MAILAgentTemplate, MAILSwarmTemplate

        names = list(self.players)
        common = {"llm": self.llm, "use_proxy": False}
        actions = get_game_master_actions(self)
        game_master = MAILAgentTemplate(
            name=GAME_MASTER,
            factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
            comm_targets=names,
            actions=actions,
            agent_params={**common, "system": game_master_prompt(names, self.low, self.high)},
            enable_entrypoint=True,
            can_complete_tasks=True,
            tool_format=self.tool_format,  # type: ignore[arg-type]
        )
        players = [
            MAILAgentTemplate(
                name=name,
                factory="python::mail.factories.base:LiteLLMAgentFunction",
                comm_targets=[GAME_MASTER],
                actions=[],
                agent_params={**common, "system": player_prompt(name, style)},
                tool_format=self.tool_format,  # type: ignore[arg-type]
            )
            for name, style in self.players.items()
        ]
        return MAILSwarmTemplate(
            name="number-guess",
            version="1.3.6",
            agents=[game_master, *players],
            actions=actions,
            entrypoint=GAME_MASTER,
        )

    async def start(self, print_llm_streams: bool = False) -> None:
        self.swarm = self.build_template().instantiate(
            instance_params={"user_token": "game"},
            user_id="game-host",
            print_llm_streams=print_llm_streams,
        )
        # Manual mode: agents only act when stepped; their mail waits in per-agent buffers.
        self._runner = asyncio.create_task(self.swarm.run_continuous(mode="manual"))
        self.scores = {name: 0 for name in self.players}
        init = self.swarm.build_message(
            subject="::init::",
            body=f"A number-guessing game starts with {', '.join(self.players)}.",
            targets=["all"],
            sender_type="user",
            type="broadcast",
            task_id=self.task_id,
        )
        await self.swarm.submit_message_nowait(init)
        await self.swarm.await_queue_empty()

    async def stop(self) -> None:
        if self.swarm is not None:
            await self.swarm.shutdown()
        if self._runner is not None:
            await asyncio.wait_for(self._runner, 10)

    # -- stepping helpers --------------------------------------------------------------------

    async def _step(self, target: str, payload: str, targets: list[str], kind: str) -> str:
        await self.swarm.await_queue_empty()
        message = await self.swarm.manual_step(
            task_id=self.task_id,
            target=target,
            response_targets=targets,
            response_type=kind,
            payload=payload,
        )
        body = str(message["message"]["body"])
        audience = "everyone" if targets == ["all"] else ", ".join(targets)
        self.transcript.append(f"{target} -> {audience}: {body}")
        return body

    async def announce(self, payload: str) -> str:
        """The GameMaster speaks to the whole table (a public broadcast)."""
        return await self._step(GAME_MASTER, payload, ["all"], "broadcast")

    async def ask_privately(self, player: str, payload: str) -> str:
        """A player answers only the GameMaster (a private response)."""
        return await self._step(player, payload, [GAME_MASTER], "response")

    async def table_talk(self, player: str, payload: str) -> str:
        return await self._step(player, payload, ["all"], "broadcast")

    # -- the game ----------------------------------------------------------------------------

    def _resolve_round(self, secret: int) -> list[str]:
        if not self.guesses:
            return []
        best = min(abs(g - secret) for g in self.guesses.values())
        winners = sorted(p for p, g in self.guesses.items() if abs(g - secret) == best)
        for player in winners:
            self.scores[player] += 1
        return winners

    async def play_round(self, secret: int) -> None:
        self.round_number += 1
        self.guesses = {}
        self.round_open = True
        await self.announce(
            f"=== ROUND {self.round_number} ===\n"
            "Announce to the table:\n"
            f"Round {self.round_number} begins: send me a secret guess between {self.low} "
            f"and {self.high}."
        )
        for player in self.players:
            await self.ask_privately(
                player,
                f"[PRIVATE - only GameMaster sees this] Round {self.round_number}: guess the "
                f"secret number between {self.low} and {self.high}. Reply with: I guess <number>.",
            )
        await self.announce(
            "Use the record_guess tool once for each private guess above, then confirm to the "
            "table that the guesses are in."
        )
        self.round_open = False
        winners = self._resolve_round(secret)
        guesses = ", ".join(f"{p} {g}" for p, g in self.guesses.items()) or "none"
        await self.announce(
            "Announce these results to the table:\n"
            f"Round {self.round_number}: the secret number was {secret}. Guesses: {guesses}. "
            f"Round winner: {', '.join(winners) or 'nobody'}. Scores: {self._score_line()}."
        )
        for player in self.players:
            await self.table_talk(player, "Say one short sentence to the table about the round.")

    def _score_line(self) -> str:
        return ", ".join(f"{p} {s}" for p, s in self.scores.items())

    async def run(self) -> GameResult:
        rng = random.Random(self.seed)
        secrets = [rng.randint(self.low, self.high) for _ in range(self.rounds)]
        await self.start()
        try:
            for secret in secrets:
                await self.play_round(secret)
            top = max(self.scores.values())
            winners = [p for p, s in self.scores.items() if s == top]
            await self.announce(
                "The game is over. Announce the final result:\n"
                f"Final scores: {self._score_line()}. Winner: {' and '.join(winners)}."
            )
        finally:
            await self.stop()
        return GameResult(
            winners=winners, scores=dict(self.scores), transcript=list(self.transcript)
        )
