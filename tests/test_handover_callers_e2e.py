"""Many callers at once on a real `mail server` (issue 42's turn hand-over): each task goes
supervisor -> worker (writes a file through the stdlib fs action) -> supervisor over the
scripted LLM, so turns hand over after every model call. Every caller gets its own answer,
and each worker's file lands in its own caller's folder (the action's current instance)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, healthy, write_config
from support.scripted_llm import Reply, ScriptedLLM, ScriptedRequest, reply, tool_call

pytestmark = pytest.mark.timeout(600)

FS = ["write_file", "read_directory"]
_BODY = re.compile(r"<body>(go-[A-Za-z0-9-]+)</body>")


def _agent(name: str, llm_url: str, targets: list[str], actions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "factory": "python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        "comm_targets": targets,
        "enable_entrypoint": name == "supervisor",
        "can_complete_tasks": name == "supervisor",
        "tool_format": "completions",
        "actions": actions,
        "agent_params": {
            "llm": "openai/gpt-4o-mini",
            "use_proxy": False,
            "api_base": llm_url,
            "api_key": "test-key",
            "system": f"You are {name}.",
        },
    }


def _swarm(name: str, llm_url: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "entrypoint": "supervisor",
        "action_imports": [f"python::mail.stdlib.fs.actions:{a}" for a in FS],
        "agents": [
            _agent("supervisor", llm_url, ["worker"], []),
            _agent("worker", llm_url, ["supervisor"], FS),
        ],
        "actions": [],
    }


def _text(request: ScriptedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages)


def _is(agent: str) -> Any:
    return lambda request: f"You are {agent}." in _text(request)


def _supervisor(request: ScriptedRequest) -> Reply:
    text = _text(request)
    token = _BODY.findall(text)[0]
    answers = re.findall(r"<body>(wrote [^<]*)</body>", text)
    if answers:
        return reply(tool_call("task_complete", {"finish_message": answers[-1]}))
    return reply(tool_call("send_request", {"target": "worker", "subject": "w", "body": token}))


def _worker(request: ScriptedRequest) -> Reply:
    text = _text(request)
    token = _BODY.findall(text)[-1]
    results = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
    if not results:
        return reply(tool_call("write_file", {"path": f"{token}.txt", "content": token}))
    if len(results) == 1:
        return reply(tool_call("read_directory", {"path": "."}))
    listing = results[-1].replace("\n", " ")
    return reply(
        tool_call(
            "send_response",
            {"target": "supervisor", "subject": "r", "body": f"wrote {token}: {listing}"},
        )
    )


async def test_concurrent_callers_get_their_own_answers_and_folders(tmp_path: Path) -> None:
    name = f"handover-{uuid.uuid4().hex[:8]}"
    port = free_port()
    keys_file = tmp_path / "registries" / "keys.json"
    callers = [f"c{i}" for i in range(6)]
    keys = {c: create_key(keys_file, "user", c) for c in callers}
    admin = create_key(keys_file, "admin", "ops")
    root = tmp_path / "files"
    per_caller = 3
    async with ScriptedLLM() as llm:
        total = len(callers) * per_caller
        for _ in range(total * 2):
            llm.queue(_supervisor, match=_is("supervisor"))
        for _ in range(total * 3):
            llm.queue(_worker, match=_is("worker"))
        (tmp_path / "swarms.json").write_text(json.dumps([_swarm(name, llm.base_url)]))
        config = write_config(
            tmp_path,
            port=port,
            swarm=name,
            extra=f'[stdlib.fs]\nroot = "{root}"\n\n[server.telemetry]\nmetrics = true\n',
        )
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:

                async def ask(caller: str, n: int) -> tuple[str, str, str]:
                    token, task_id = f"go-{caller}-{n}", str(uuid.uuid4())
                    r = await client.post(
                        "/message",
                        json={"body": token, "task_id": task_id},
                        headers=auth(keys[caller]),
                    )
                    assert r.status_code == 200, r.text
                    # the model calls are counted to the agent whose turn made them
                    got = await client.get(
                        "/task", params={"task_id": task_id}, headers=auth(keys[caller])
                    )
                    assert got.status_code == 200, got.text
                    usage = got.json()["usage"]
                    per_agent = {a: u["model_calls"] for a, u in usage["by_agent"].items()}
                    assert per_agent == {"supervisor": 2, "worker": 3}, usage
                    return caller, token, r.json()["response"]

                answers = await asyncio.gather(
                    *(ask(c, n) for c in callers for n in range(per_caller))
                )
                scrape = await client.get("/metrics", headers=auth(admin))
                assert scrape.status_code == 200, scrape.text
                metrics = scrape.text
        finally:
            server.stop()
    assert not llm.unanswered, [_text(r)[-300:] for r in llm.unanswered[:2]]
    for caller, token, response in answers:
        assert response.startswith(f"wrote {token}:"), (token, response)
        # the listing the worker saw holds only this caller's files
        listed = set(re.findall(r"go-(c\d+)-\d+\.txt", response))
        assert listed == {caller}, (token, response)
    for caller in callers:
        folder = root / f"user-{caller}"
        files = sorted(p.name for p in folder.iterdir())
        assert files == [f"go-{caller}-{n}.txt" for n in range(per_caller)], files
    calls = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'mail_agent_calls_total\{agent="(\w+)"\} ([0-9.]+)', metrics)
    }
    assert calls == {"supervisor": 2.0 * total, "worker": 3.0 * total}, calls
    assert len(llm.requests) == 5 * total
