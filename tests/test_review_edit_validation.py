"""An `edit` decision is checked against the action's parameters schema on a real `mail server`
process: a wrong type, a missing required field or an undeclared field is a 400 naming the
field, the action does not run and the call stays held; a fitting edit then runs."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from server_fixtures import ServerProcess, auth, create_key, free_port, healthy, write_config
from support.review_swarm import review_swarms_json
from support.scripted_llm import ScriptedLLM, reply, tool_call

pytestmark = pytest.mark.timeout(600)


async def test_edit_that_does_not_fit_the_schema_is_refused(tmp_path: Path) -> None:
    swarm = f"edit-{uuid.uuid4().hex[:8]}"
    port = free_port()
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    task_id = str(uuid.uuid4())
    async with ScriptedLLM() as llm:
        (tmp_path / "swarms.json").write_text(
            json.dumps([review_swarms_json(swarm, llm.base_url, "completions")]),
            encoding="utf-8",
        )
        config = write_config(tmp_path, port=port, swarm=swarm)
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=240) as client:
                llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "k1"))
                r = await client.post(
                    "/message", json={"body": "email bob", "task_id": task_id}, headers=auth(key)
                )
                assert r.status_code == 200, r.text
                requests_before = len(llm.requests)

                async def decide(args: object) -> httpx.Response:
                    return await client.post(
                        "/message",
                        json={
                            "task_id": task_id,
                            "resume_from": "action_review",
                            "kwargs": {
                                "decisions": [{"tool_call_id": "k1", "type": "edit", "args": args}]
                            },
                        },
                        headers=auth(key),
                    )

                bad = [
                    ({"unexpected": "field", "to": 123}, "'unexpected' is not a parameter"),
                    ({"to": 123, "body": "x"}, "'to': 123 is not of type 'string'"),
                    ({"to": "bob@x.org"}, "'body' is required"),
                ]
                for args, named in bad:
                    r = await decide(args)
                    assert r.status_code == 400, r.text
                    detail = r.json()["detail"]
                    assert "kwargs.decisions[0].args" in detail and named in detail, detail
                    assert "send_email" in detail and "k1" in detail

                # Nothing ran: no decision event, the model was not called, the call is held.
                record = (
                    await client.get("/task", params={"task_id": task_id}, headers=auth(key))
                ).json()
                assert [p["tool_call_id"] for p in record["pending_reviews"]] == ["k1"]
                assert not [e for e in record["events"] if e["event"] == "action_review_decision"]
                assert not [e for e in record["events"] if e["event"] == "action_complete"]
                assert len(llm.requests) == requests_before

                llm.queue(reply(tool_call("task_complete", {"finish_message": "sent"})))
                r = await decide({"to": "bob@x.org", "body": "final"})
                assert r.status_code == 200, r.text
                assert r.json()["response"] == "sent"
                results = [
                    m["content"] for m in llm.requests[-1].messages if m.get("role") == "tool"
                ]
                assert any('"body": "final"' in str(c) for c in results), results
        finally:
            server.stop()


async def test_edit_check_never_fetches_a_schema_ref(
    tmp_path: Path,
) -> None:
    """An action's parameters schema may hold a `$ref` to a URL: checking an edit must not
    make the server fetch it (a blocking request on the event loop, with no timeout: the whole
    server froze while it hung), nor answer 500."""
    hits: list[str] = []
    release = threading.Event()

    class Hanging(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            release.wait(60)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

    hanging = ThreadingHTTPServer(("127.0.0.1", 0), Hanging)
    threading.Thread(target=hanging.serve_forever, daemon=True).start()
    ref = f"http://127.0.0.1:{hanging.server_address[1]}/to.json"

    swarm = f"edit-{uuid.uuid4().hex[:8]}"
    port = free_port()
    key = create_key(tmp_path / "registries" / "keys.json", "user", "alice")
    async with ScriptedLLM() as llm:
        definition = review_swarms_json(swarm, llm.base_url, "completions")
        for action in definition["actions"]:
            if action["name"] == "send_email":
                # Builds locally (the last segment names a $defs entry), yet is a remote URI.
                action["parameters"]["properties"]["to"] = {"$ref": ref}
                action["parameters"]["$defs"] = {"to.json": {"type": "string"}}
        (tmp_path / "swarms.json").write_text(json.dumps([definition]), encoding="utf-8")
        config = write_config(tmp_path, port=port, swarm=swarm)
        server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
        try:
            await healthy(server)
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:

                async def decide(task_id: str, call_id: str, args: object) -> httpx.Response:
                    return await client.post(
                        "/message",
                        json={
                            "task_id": task_id,
                            "resume_from": "action_review",
                            "kwargs": {
                                "decisions": [
                                    {"tool_call_id": call_id, "type": "edit", "args": args}
                                ]
                            },
                        },
                        headers=auth(key),
                    )

                task_id = str(uuid.uuid4())
                llm.queue(tool_call("send_email", {"to": "bob@x.org", "body": "draft"}, "r1"))
                r = await client.post(
                    "/message", json={"body": "email bob", "task_id": task_id}, headers=auth(key)
                )
                assert r.status_code == 200, r.text
                r = await decide(task_id, "r1", {"to": "carol@x.org", "body": "final"})
                assert r.status_code == 400, r.text
                assert "cannot be checked" in r.json()["detail"], r.text
                assert hits == [], hits
                # The server stayed responsive throughout.
                assert (await client.get("/health")).status_code == 200

        finally:
            release.set()
            server.stop()
            hanging.shutdown()
            hanging.server_close()
