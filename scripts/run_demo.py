"""Run a swarm from swarms.json in-process and print its answers.

By default this is the `demo` swarm on the offline demo model (`mail/demo`): no API key,
proxy or server needed.

    uv run python scripts/run_demo.py
    uv run python scripts/run_demo.py "What is 7 * 6?" "Weather in Lisbon tomorrow?"
    OPENAI_API_KEY=... uv run python scripts/run_demo.py --swarm example "Weather in Oslo?"
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_QUESTIONS = [
    "What's the weather in Paris tomorrow?",
    "What is 12 * (3 + 4)?",
    "What is the weather in Oslo, and what is 2 + 2?",
]


async def run(swarm_name: str, source: Path, questions: list[str], timeout: float) -> int:
    from mail import MAILSwarmTemplate

    template = MAILSwarmTemplate.from_swarm_json_file(swarm_name, str(source))
    swarm = template.instantiate(
        instance_params={"user_token": "demo"}, user_id="demo-user", print_llm_streams=False
    )
    runner = asyncio.create_task(swarm.run_continuous())
    failures = 0
    try:
        for question in questions:
            response, _ = await asyncio.wait_for(swarm.post_message(body=question), timeout)
            message = response["message"]
            print(f"Q: {question}")
            print(f"A ({message['subject']}): {message['body']}\n")
            if message["subject"] != "::task_complete::":
                failures += 1
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(runner, 10)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", nargs="*", help="messages to send (default: three examples)")
    parser.add_argument("--swarm", default="demo", help="swarm name in swarms.json (default: demo)")
    parser.add_argument("--source", type=Path, default=REPO_ROOT / "swarms.json")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per question")
    args = parser.parse_args()
    return asyncio.run(
        run(args.swarm, args.source, args.questions or DEFAULT_QUESTIONS, args.timeout)
    )


if __name__ == "__main__":
    sys.exit(main())
