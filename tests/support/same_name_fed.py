"""Federated swarms whose entrypoints share the name `supervisor`, on LiteLLM agents that the
scripted provider answers (so both tool formats run through LiteLLM's real code).

Every swarm's system prompt carries `SWARM=<name>`; one `brain` answers every model request
from the newest incoming MAIL message (and the first one of the task):

* from a user `ASK <swarm> <text>`: ask `supervisor@<swarm>` (subject `question`);
  `ASK2 <s1> <s2> <text>`: ask both in one turn, complete once both answered;
  `BCAST <swarm> <text>`: `send_interswarm_broadcast` to that swarm (`BCAST2 <s1> <s2>`:
  to both, complete once both answered);
* a `question` / `news` from an agent: answer it with `<swarm> says: <text>`; `SPIN` makes
  the agent call `await_message` forever (the loop guard stops it); `HOLD` is answered late;
* an `answer`: complete with `<swarm> got: <answers>` (or pass it on to the agent that asked);
* `TEXTOUT ...`: a plain-text answer, no tool call (the model ignoring tool_choice);
* a `::task_error::` notice or a system message: complete with `error: <text>`.
"""

from __future__ import annotations

import asyncio
import re
import threading

from support.scripted_llm import (
    ReplyLike,
    ScriptedLLM,
    ScriptedRequest,
    hang,
    reply,
    tool_call,
)
from support.scripted_llm import (
    text as text_part,
)

MODELS = {"completions": "openai/gpt-4o-mini", "responses": "openai/gpt-5-mini"}

_MESSAGE = re.compile(
    r'<from type="(\w+)">([^<]*)</from>.*?<subject>(.*?)</subject>\s*<body>(.*?)</body>', re.S
)
_SWARM = re.compile(r"SWARM=(\S+)")
HOLD_SECONDS = 4.0


def swarms_json(name: str, peers: list[str], api_base: str, tool_format: str) -> list[dict]:
    return [
        {
            "name": name,
            "version": "1.0.0",
            "entrypoint": "supervisor",
            "enable_interswarm": True,
            "description": f"same-name test swarm {name}",
            "agents": [
                {
                    "name": "supervisor",
                    "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                    "comm_targets": [f"supervisor@{peer}" for peer in peers],
                    "enable_entrypoint": True,
                    "can_complete_tasks": True,
                    "enable_interswarm": True,
                    "tool_format": tool_format,
                    "agent_params": {
                        "llm": MODELS[tool_format],
                        "use_proxy": False,
                        "api_base": api_base,
                        "api_key": "test-key",
                        "system": f"You are the supervisor. SWARM={name}",
                    },
                }
            ],
            "actions": [],
        }
    ]


def incoming(request: ScriptedRequest) -> list[tuple[str, str, str, str]]:
    """(sender type, sender, subject, body) of every MAIL message the model was shown."""
    found: list[tuple[str, str, str, str]] = []
    for item in request.messages:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str):
            found.extend(_MESSAGE.findall(content))
    return found


def _finish(first: tuple[str, str, str, str], text: str) -> ReplyLike:
    kind, sender, _, _ = first
    if kind in ("user", "admin"):
        return reply(tool_call("task_complete", {"finish_message": text}))
    args = {"target": sender, "subject": "answer", "body": text}
    return reply(tool_call("send_response", args))


def brain(request: ScriptedRequest) -> ReplyLike:
    match = _SWARM.search(request.system_text)
    swarm = match.group(1) if match else "?"
    seen = incoming(request)
    if not seen:
        return reply(tool_call("task_complete", {"finish_message": "error: no message"}))
    first, (kind, sender, subject, body) = seen[0], seen[-1]
    if subject == "::task_error::" or (kind == "system" and first[3] != "SPIN"):
        return _finish(first, f"error: {body}")
    if body.startswith("TEXTOUT"):
        return reply(text_part(f"{swarm} answers in plain text"))  # no tool call at all
    if first[3] == "SPIN":
        return reply(tool_call("await_message", {"reason": "spinning"}))
    if subject == "answer":
        answers = [b for _, _, s, b in seen if s == "answer"]
        wanted = 2 if first[3].startswith(("ASK2 ", "BCAST2 ")) else 1
        if len(answers) < wanted:
            return reply(tool_call("await_message", {"reason": "one more answer"}))
        return _finish(first, f"{swarm} got: {' | '.join(sorted(answers))}")
    if body.startswith("ASK2 "):
        _, one, two, text = body.split(" ", 3)
        return reply(
            *(
                tool_call(
                    "send_request",
                    {"target": f"supervisor@{peer}", "subject": "question", "body": text},
                )
                for peer in (one, two)
            )
        )
    if body.startswith("ASK "):
        _, peer, text = body.split(" ", 2)
        args = {"target": f"supervisor@{peer}", "subject": "question", "body": text}
        return reply(tool_call("send_request", args))
    if body.startswith("BCAST2 "):
        _, one, two, text = body.split(" ", 3)
        args = {"target_swarms": [one, two], "subject": "news", "body": text}
        return reply(tool_call("send_interswarm_broadcast", args))
    if body.startswith("BCAST "):
        _, peer, text = body.split(" ", 2)
        args = {"target_swarms": [peer], "subject": "news", "body": text}
        return reply(tool_call("send_interswarm_broadcast", args))
    if kind == "agent" and subject in ("question", "news"):
        answer = tool_call(
            "send_response",
            {"target": sender, "subject": "answer", "body": f"{swarm} says: {body}"},
        )
        if body == "HOLD":
            return hang(HOLD_SECONDS, reply(answer))
        return reply(answer)
    return _finish(first, f"{swarm} completes: {body}")


class BrainLLM(ScriptedLLM):
    """Every request is answered by `brain` (nothing is queued)."""

    def _take(self, request: ScriptedRequest) -> ReplyLike | None:
        return brain(request)


class ThreadedLLM:
    """A BrainLLM on its own event loop in a daemon thread, for synchronous tests."""

    def __init__(self) -> None:
        self.llm = BrainLLM()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> ThreadedLLM:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.llm.__aenter__(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.llm.__aexit__(None, None, None), self._loop).result(
            10
        )
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return self.llm.base_url

    def requests_for(self, swarm: str) -> list[ScriptedRequest]:
        return [r for r in list(self.llm.requests) if f"SWARM={swarm}" in r.system_text]


def any_text(requests: list[ScriptedRequest], needle: str) -> bool:
    return any(needle in str(r.body) for r in requests)


__all__ = ["HOLD_SECONDS", "ThreadedLLM", "any_text", "brain", "incoming", "swarms_json"]


def register_peer(base_url: str, admin_key: str, name: str, peer_url: str, token: str) -> None:
    """Register swarm `name` at `peer_url` (with the key it knows this swarm by) on the
    server at `base_url`, as its admin does with ``POST /swarms``; volatile: not persisted."""
    import httpx

    r = httpx.post(
        f"{base_url}/swarms",
        json={"name": name, "base_url": peer_url, "auth_token": token, "volatile": True},
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=20,
    )
    assert r.status_code == 200, r.text
