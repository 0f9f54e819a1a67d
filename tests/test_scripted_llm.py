"""The scripted LLM provider used by the factory tests (raw HTTP, no LiteLLM)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from support.scripted_llm import ScriptedLLM, error, reasoning, text, tool_call


async def _post(url: str, body: dict) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body, headers={"X-Test": "1"}) as response:
            return response.status, await response.text()


def _sse_events(raw: str) -> list[tuple[str | None, str]]:
    events = []
    for frame in raw.strip().split("\n\n"):
        name, data = None, ""
        for line in frame.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        events.append((name, data))
    return events


async def test_records_requests_and_reports_missing_replies():
    async with ScriptedLLM() as llm:
        assert llm.base_url == f"http://127.0.0.1:{llm.port}/v1"
        status, body = await _post(
            f"{llm.base_url}/chat/completions", {"model": "m", "messages": []}
        )
        assert status == 500 and "no reply queued" in body
        assert llm.unanswered and llm.requests[0].headers["X-Test"] == "1"
        assert llm.requests[0].format == "completions"


async def test_match_selects_replies_and_completions_json_shape():
    async with ScriptedLLM() as llm:
        llm.queue(text("for b"), match=lambda r: r.system_text == "B")
        llm.queue(reasoning("hmm"), tool_call("f", {"x": 1}, call_id="call_1"))
        body = {"model": "m", "messages": [{"role": "system", "content": "A"}]}
        status, raw = await _post(f"{llm.base_url}/chat/completions", body)
        message = json.loads(raw)["choices"][0]["message"]
        assert status == 200 and message["reasoning_content"] == "hmm"
        assert message["tool_calls"][0] == {
            "id": "call_1",
            "type": "function",
            "function": {"name": "f", "arguments": '{"x": 1}'},
        }
        body["messages"][0]["content"] = "B"
        _, raw = await _post(f"{llm.base_url}/chat/completions", body)
        assert json.loads(raw)["choices"][0]["message"]["content"] == "for b"
        assert llm.pending == 0


async def test_completions_stream_splits_tool_arguments_across_chunks():
    async with ScriptedLLM() as llm:
        llm.queue(tool_call("f", {"city": "Paris", "days": 3}))
        _, raw = await _post(f"{llm.base_url}/chat/completions", {"model": "m", "stream": True})
        events = _sse_events(raw)
        assert events[-1] == (None, "[DONE]")
        deltas = [json.loads(d)["choices"][0]["delta"] for _, d in events[:-1]]
        pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
        assert len(pieces) > 2 and json.loads("".join(pieces)) == {"city": "Paris", "days": 3}


async def test_responses_stream_reasoning_only_in_summary_events():
    async with ScriptedLLM() as llm:
        llm.queue(reasoning("deep thought"), text("hi"), tool_call("f", {}))
        _, raw = await _post(f"{llm.base_url}/responses", {"model": "m", "stream": True})
        events = _sse_events(raw)
        names = [name for name, _ in events]
        assert names[0] == "response.created" and names[-1] == "response.completed"
        deltas = [
            json.loads(d)["delta"]
            for n, d in events
            if n == "response.reasoning_summary_text.delta"
        ]
        assert "".join(deltas) == "deep thought"
        final = json.loads(events[-1][1])["response"]["output"]
        assert [item["type"] for item in final] == ["message", "function_call"]


async def test_anthropic_messages_blocks_stream_and_errors():
    async with ScriptedLLM() as llm:
        llm.queue(reasoning("why"), text("so"), tool_call("f", {"a": 1}, call_id="toolu_1"))
        _, raw = await _post(f"{llm.root_url}/v1/messages", {"model": "claude", "max_tokens": 10})
        content = json.loads(raw)["content"]
        assert [b["type"] for b in content] == ["thinking", "text", "tool_use"]
        assert content[2] == {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}

        llm.queue(text("streamed"))
        _, raw = await _post(f"{llm.root_url}/v1/messages", {"model": "claude", "stream": True})
        names = [name for name, _ in _sse_events(raw)]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        assert "content_block_delta" in names

        llm.queue(error(529, "overloaded"))
        status, raw = await _post(f"{llm.root_url}/v1/messages", {"model": "claude"})
        assert status == 529
        assert json.loads(raw) == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "overloaded"},
        }


def test_queue_rejects_mixing_errors_with_parts():
    llm = ScriptedLLM()
    with pytest.raises(TypeError):
        llm.queue(text("a"), error(500))  # type: ignore[arg-type]
