"""An outside agent that joins a MAIL swarm over MCP and helps it finish a task (docs/mcp.md).

    uv run python scripts/mcp_demo_agent.py http://localhost:8000 "$TOKEN"

It joins the swarm as `factchecker`, asks the swarm (as its user) to have the factchecker
check a date, answers the request the swarm's supervisor sends it, and prints the task's
final answer, which carries its reply. Runs offline against the demo swarm (`mail/demo`).
"""

from __future__ import annotations

import asyncio
import json
import sys

from mail.mcp_face.client import call_json as call
from mail.mcp_face.client import connect


async def main(url: str, key: str) -> None:
    async with connect(url, key) as session:
        joined = await call(
            session, "join_swarm", name="factchecker", description="checks dates and facts"
        )
        print("joined as", joined["joined_as"], "next to", ", ".join(joined["agents"]))
        # Start a task as the swarm's user; its answer comes once the factchecker replied.
        task = asyncio.create_task(
            call(session, "post_message", body="Ask the factchecker: is the launch on Monday?")
        )
        got = await call(session, "wait_for_messages", timeout_seconds=60)
        for message in got["messages"]:
            print(f"{message['sender']} asks: {message['body']}")
            await call(
                session,
                "send_response",
                target=message["sender"],
                subject="Re: " + message["subject"],
                body="Checked: the launch is on Monday, 9:00.",
                task_id=message["task_id"],
            )
        answer = await task
        print(json.dumps({"task_id": answer["task_id"], "response": answer["response"]}))
        await call(session, "leave_swarm")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
