"""A small manual-mode game: players secretly guess a number, a game master keeps score.

It exercises manual stepping (`run_continuous(mode="manual")` + `manual_step`), private vs
public responses, message buffering, and game-state actions built with
`MAILAction.from_pydantic_model` and `functools.partial`. It runs offline on the demo model
(`scripts/game_demo.py`) or on any real model.
"""

from mail.examples.game.game import GameResult, NumberGuessGame

__all__ = ["GameResult", "NumberGuessGame"]
