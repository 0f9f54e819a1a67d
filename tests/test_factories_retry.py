"""Provider failures: what is retried, how often, and the error raised when giving up."""

from __future__ import annotations

import pytest

from mail.factories import LiteLLMAgentFunction, LLMCallError, RetryPolicy
from mail.factories.retry import is_retryable
from support.scripted_llm import ScriptedLLM, error, hang, reply, text, tool_call

FAST = RetryPolicy(max_attempts=5, base_delay=0.01, max_delay=0.02)
HISTORY = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LiteLLMAgentFunction, "retry_policy", FAST)


@pytest.fixture
async def llm():
    async with ScriptedLLM() as server:
        yield server


def _agent(llm: ScriptedLLM, tool_format: str = "completions", **overrides) -> LiteLLMAgentFunction:
    params = dict(
        name="worker",
        comm_targets=["supervisor"],
        tools=[],
        llm="openai/gpt-4o-mini" if tool_format == "completions" else "openai/gpt-5-mini",
        tool_format=tool_format,
        use_proxy=False,
        api_base=llm.base_url,
        api_key="k",
        print_llm_streams=False,
    )
    params.update(overrides)
    return LiteLLMAgentFunction(**params)


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
@pytest.mark.parametrize("status", [500, 503, 429])
async def test_transient_errors_are_retried(llm: ScriptedLLM, tool_format: str, status: int):
    fn = _agent(llm, tool_format)
    # Two different failures: a 500 that repeats itself word for word is not retried again
    # (tests/test_model_quirks.py); "try later" statuses are, whatever they say.
    llm.queue(error(status, "overloaded, first try"))
    llm.queue(error(status, "overloaded, second try"))
    llm.queue(tool_call("await_message", {"reason": None}))

    _, calls = await fn(list(HISTORY))

    assert calls[0].tool_name == "await_message"
    assert len(llm.requests) == 3


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
async def test_persistent_503_gives_up_after_five_attempts_with_a_clear_error(
    llm: ScriptedLLM, tool_format: str
):
    fn = _agent(llm, tool_format)
    for _ in range(6):
        llm.queue(error(503, "upstream exploded"))

    with pytest.raises(LLMCallError) as info:
        await fn(list(HISTORY))

    message = str(info.value)
    assert "agent 'worker'" in message and "after 5 attempts" in message
    assert f"HTTP 503 from {llm.base_url}: upstream exploded" in message
    assert len(llm.requests) == 5


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_client_errors_are_not_retried(llm: ScriptedLLM, status: int):
    fn = _agent(llm)
    llm.queue(error(status, "bad request body"))
    llm.queue(text("never used"))

    with pytest.raises(LLMCallError, match="not retried") as info:
        await fn(list(HISTORY))

    assert f"HTTP {status}" in str(info.value)
    assert len(llm.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hung_request_times_out_and_is_retried(llm: ScriptedLLM, stream: bool):
    # The timeout bounds the whole call (a streamed one too), LiteLLM's set-up included: a
    # first call pays for that (seconds on a busy machine) outside the bound.
    llm.queue(tool_call("help", {}))
    await _agent(llm, stream_tokens=stream)(list(HISTORY))
    llm.requests.clear()
    fn = _agent(llm, request_timeout=1.0, stream_tokens=stream)
    llm.queue(hang(30.0))
    llm.queue(tool_call("help", {}))

    _, calls = await fn(list(HISTORY))

    assert calls[0].tool_name == "help"
    assert len(llm.requests) == 2


@pytest.mark.parametrize("tool_format", ["completions", "responses"])
async def test_malformed_tool_json_is_retried_then_reported(llm: ScriptedLLM, tool_format: str):
    fn = _agent(llm, tool_format)
    llm.queue(tool_call("send_request", '{"target": "supervisor", "subject": '))
    llm.queue(tool_call("send_request", {"target": "supervisor", "subject": "s", "body": "b"}))

    _, calls = await fn(list(HISTORY))
    assert calls[0].tool_args["body"] == "b"
    assert len(llm.requests) == 2

    for _ in range(3):
        llm.queue(tool_call("send_request", "[1, 2"))
    with pytest.raises(LLMCallError, match="malformed tool arguments 3 times") as info:
        await fn(list(HISTORY))
    assert "send_request" in str(info.value)
    assert len(llm.requests) == 5


async def test_arguments_that_are_not_an_object_count_as_malformed(llm: ScriptedLLM):
    fn = _agent(llm)
    llm.queue(tool_call("help", "[1, 2, 3]"))
    llm.queue(reply(tool_call("help", "{}")))
    _, calls = await fn(list(HISTORY))
    assert calls[0].tool_args == {}
    assert len(llm.requests) == 2


def test_retry_classification_and_backoff():
    class Status(Exception):
        def __init__(self, status_code: int) -> None:
            super().__init__(f"status {status_code}")
            self.status_code = status_code

    assert is_retryable(TimeoutError())
    assert is_retryable(ConnectionResetError())
    assert is_retryable(Status(429)) and is_retryable(Status(502)) and is_retryable(Status(408))
    assert not is_retryable(Status(400)) and not is_retryable(Status(403))
    assert not is_retryable(ValueError("a bug"))
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
