"""A deterministic agent that logs each of its calls (one model call each) to the file named
by ``$MAIL_TEST_AGENT_CALLS`` (set by the test for its server), so calls are counted across
a kill -9 of the server."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.support.interswarm_agents import supervisor as _supervisor

CALLS_ENV = "MAIL_TEST_AGENT_CALLS"


def counted_supervisor(name: str, comm_targets: list[str], **kw: Any):  # noqa: ANN201
    """`tests.support.interswarm_agents.supervisor`, writing one line per call (a model call)
    to the file named by ``$MAIL_TEST_AGENT_CALLS``: the last message it was handed."""
    return _logged(name, _supervisor(name, comm_targets, **kw))


def _logged(name: str, inner: Any):  # noqa: ANN202
    log = os.environ.get(CALLS_ENV)

    async def agent(history: list[dict[str, Any]], tool_choice: Any = "required"):  # noqa: ANN202
        if log:
            last = ""
            for item in reversed(history):
                content = item.get("content")
                if item.get("role") in ("user", "tool") and isinstance(content, str):
                    last = content
                    break
            with open(log, "a", encoding="utf-8") as out:
                out.write(json.dumps({"agent": name, "last": last[-400:]}) + "\n")
        return await inner(history, tool_choice)

    return agent
