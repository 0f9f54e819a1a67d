"""Play the manual-mode number-guessing game (mail.examples.game) and print the transcript.

Runs offline on the demo model by default; pass --llm to use a real model.

    uv run python scripts/game_demo.py
    OPENAI_API_KEY=... uv run python scripts/game_demo.py --llm openai/gpt-5-mini
"""

from __future__ import annotations

import argparse
import asyncio
import sys


async def play(llm: str, rounds: int, seed: int, timeout: float) -> int:
    from mail.examples.game import NumberGuessGame

    game = NumberGuessGame(llm=llm, rounds=rounds, seed=seed)
    result = await asyncio.wait_for(game.run(), timeout)
    for line in result.transcript:
        print(line)
    scores = ", ".join(f"{name} {score}" for name, score in result.scores.items())
    print(f"\nFinal scores: {scores}")
    print(f"Winner: {' and '.join(result.winners)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", default="mail/demo", help="LiteLLM model (default: mail/demo)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7, help="seed for the secret numbers")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    return asyncio.run(play(args.llm, args.rounds, args.seed, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
