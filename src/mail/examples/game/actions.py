"""Game-state actions for the GameMaster, bound to one game with `functools.partial`."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from mail.api import MAILAction


class GameState(Protocol):
    """What the actions read and write of a game (``game.NumberGuessGame`` has it); typed
    structurally so this module stays below game.py, which builds the actions."""

    players: dict[str, str]
    low: int
    high: int
    round_number: int
    round_open: bool
    guesses: dict[str, int]


class GameRuleError(ValueError):
    """A move the rules do not allow; the message goes back to the agent as the tool result."""


class RecordGuessArgs(BaseModel):
    """Record one player's secret guess for the current round."""

    player_name: str = Field(description="The player who made the guess")
    guess: int = Field(description="The number the player guessed")


async def record_guess(game: GameState, args: dict[str, Any]) -> str:
    player = str(args.get("player_name", "")).strip()
    if player not in game.players:
        raise GameRuleError(f"unknown player '{player}'; players are {', '.join(game.players)}")
    if not game.round_open:
        raise GameRuleError("no round is accepting guesses right now")
    try:
        guess = int(args.get("guess"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise GameRuleError(f"guess must be a whole number, got {args.get('guess')!r}") from None
    if not game.low <= guess <= game.high:
        raise GameRuleError(f"guess must be between {game.low} and {game.high}")
    game.guesses[player] = guess
    return f"Recorded {player}'s guess for round {game.round_number}: {guess}"


def get_game_master_actions(game: GameState) -> list[MAILAction]:
    from mail.api import MAILAction

    return [
        MAILAction.from_pydantic_model(
            model=RecordGuessArgs,
            function=partial(record_guess, game),
            name="record_guess",
        )
    ]
