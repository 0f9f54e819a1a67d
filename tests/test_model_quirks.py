"""What real OpenAI-compatible servers did to the LiteLLM agent functions, replayed by the
scripted server (`ServerQuirks`, byte for byte where it matters) with the behaviour each now
gets: an endpoint without the Responses API, a server that refuses tool_choice "required" or
an assistant message without content, answers that ignore a forced tool, streams without
usage, an overflowing context, a refused connection, generation slower than the timeout, and
a task that times out with a call in flight.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import socket

import pytest

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.api.prompts import TARGETS_HEADER, augment_system_prompts
from mail.factories import LiteLLMAgentFunction, LLMCallError, RetryPolicy
from support.scripted_llm import (
    LLAMA_CPP_PYTHON,
    ScriptedLLM,
    ServerQuirks,
    error,
    hang,
    text,
    tool_call,
)

HISTORY = [{"role": "user", "content": "What is 2 + 2?"}]
# The documented defaults for an agent with an api_base (docs/agents-and-factories.md).
LOCAL_MAX_TOKENS, LOCAL_REQUEST_TIMEOUT, PLACEHOLDER_API_KEY = 1024, 180.0, "no-key"
TASK_COMPLETE = {"type": "function", "name": "task_complete"}


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LiteLLMAgentFunction, "retry_policy", RetryPolicy(base_delay=0.01, max_delay=0.02)
    )


@pytest.fixture
async def llama():
    async with ScriptedLLM(quirks=LLAMA_CPP_PYTHON) as server:
        yield server


def _agent(server: ScriptedLLM, **overrides) -> LiteLLMAgentFunction:
    params = dict(
        name="supervisor",
        comm_targets=["math"],
        tools=[],
        llm="openai/local-model",
        tool_format="completions",
        use_proxy=False,
        api_base=server.base_url,
        print_llm_streams=False,
    )
    params.update(overrides)
    return LiteLLMAgentFunction(**params)


def _solo_swarm(llm: ScriptedLLM, **params) -> MAILSwarmTemplate:
    """One supervisor on `llm`, configured the way docs/agents-and-factories.md says."""
    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=[],
        agent_params={
            "llm": "openai/local-model",
            "use_proxy": False,
            "api_base": llm.base_url,
            **params,
        },
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    return MAILSwarmTemplate(
        name="quirks", version="1.0.0", agents=[supervisor], actions=[], entrypoint="supervisor"
    )


def _model_calls(events) -> list[dict]:
    """The `model_call` records among a task's events (stream events or `TaskEvent`s)."""
    found = []
    for event in events:
        if event.event == "model_call":
            data = getattr(event, "extra_data", None)
            found.append(data if data is not None else event.data["extra_data"])
    return found


# ------------------------------------------------------------------------- /v1/responses 404


async def test_a_server_without_the_responses_api_is_named_with_the_setting_to_change(llama):
    fn = _agent(llama, tool_format="responses")

    with pytest.raises(LLMCallError) as info:
        await fn(copy.deepcopy(HISTORY))

    message = str(info.value)
    assert "not retried" in message and f"HTTP 404 from {llama.base_url}: Not Found" in message
    assert 'set the agent\'s tool_format to "completions"' in message
    assert info.value.kind == "configuration"  # not unknown_model: the model name is fine
    assert len(llama.requests) == 1


async def test_an_agent_given_an_api_base_defaults_to_chat_completions(llama):
    template = _solo_swarm(llama)
    assert template.agents[0].tool_format == "completions"
    swarm = template.instantiate({"user_token": "t"}, user_id="u", print_llm_streams=False)
    llama.queue(tool_call("task_complete", {"finish_message": "4"}))
    try:
        response, _ = await asyncio.wait_for(swarm.post_message(body="2 + 2?"), 60)
    finally:
        await swarm.shutdown()
    assert response["message"]["body"] == "4"
    assert {r.path for r in llama.requests} == {"/v1/chat/completions"}


# ---------------------------------------------------------- tool_choice "required" refused


async def test_a_server_refusing_required_is_asked_with_auto_once_detected(llama):
    fn = _agent(llama)
    llama.queue(tool_call("send_request", {"target": "math", "subject": "s", "body": "2+2"}))
    llama.queue(tool_call("await_message", {"reason": None}))

    _, first = await fn(copy.deepcopy(HISTORY))
    _, second = await fn(copy.deepcopy(HISTORY))

    assert [c.tool_name for c in first + second] == ["send_request", "await_message"]
    # Detected on the first call (500, empty message) and asked again at once with "auto";
    # remembered for this server and model: the second call asks "auto" straight away.
    assert [r.body["tool_choice"] for r in llama.requests] == ["required", "auto", "auto"]
    other = _agent(llama, llm="openai/another-model")
    llama.queue(tool_call("await_message", {"reason": None}))
    await other(copy.deepcopy(HISTORY))
    assert llama.requests[-2].body["tool_choice"] == "required"  # a different model asks anew


async def test_a_retry_after_the_refusal_of_required_asks_with_auto(llama):
    # Refused "required", then the "auto" request timed out (a slow CPU): the retry asks
    # "auto" straight away. It used to send "required" again, refused again: a wasted
    # request, recorded as one more model call of the task on each retry.
    await _warm(llama, llm="openai/slow-model")
    fn = _agent(llama, llm="openai/slow-model", request_timeout=0.5)
    llama.queue(hang(30.0))
    llama.queue(tool_call("await_message", {"reason": None}))

    _, [call] = await fn(copy.deepcopy(HISTORY))

    assert call.tool_name == "await_message"
    assert [r.body["tool_choice"] for r in llama.requests] == ["required", "auto", "auto"]


async def test_default_tool_choice_keeps_a_forced_tool_forced(llama):
    # default_tool_choice "auto" (the old workaround for such servers) replaces "required"
    # only: the runtime's forced task_complete still goes out as the named tool choice.
    fn = _agent(llama, default_tool_choice="auto")
    llama.queue(tool_call("task_complete", {"finish_message": "4"}))
    llama.queue(tool_call("await_message", {"reason": None}))

    _, [forced] = await fn(copy.deepcopy(HISTORY), TASK_COMPLETE)
    _, [normal] = await fn(copy.deepcopy(HISTORY), "required")

    assert (forced.tool_name, normal.tool_name) == ("task_complete", "await_message")
    assert [r.body["tool_choice"] for r in llama.requests] == [
        {"type": "function", "function": {"name": "task_complete"}},
        "auto",
    ]


async def test_a_model_that_only_answers_with_nothing_fails_with_what_to_do(llama):
    # llama-cpp-python's chatml-function-calling under "auto": when the model picks a message
    # over a tool, the message comes back empty (its grammar allows nothing else) - every
    # such answer of a real run. The task fails at task_no_tool_call_limit (3), within
    # max_steps, saying what would help: raising the limit only buys more empty answers.
    for _ in range(10):
        llama.queue(text(""))
    swarm = _solo_swarm(llama).instantiate({"user_token": "t"}, user_id="u")
    try:
        response, _ = await swarm.post_message(body="What is 12 * 7?", max_steps=6, timeout=300)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    body = response["message"]["body"]
    assert response["message"]["subject"] == "::task_error::", response
    assert "3 times in a row" in body and "task_no_tool_call_limit" in body, body
    assert "use a model that calls tools reliably" in body, body
    assert "its server gives this model tool calls" in body, body
    # The refusal of "required" (asked again at once with "auto"), then three empty answers.
    assert [r.get("error") for r in recorded] == ["InternalServerError", None, None, None]
    assert [r.body["tool_choice"] for r in llama.requests] == ["required"] + ["auto"] * 3


def _pair_swarm(llm: ScriptedLLM, **params) -> MAILSwarmTemplate:
    """A supervisor and a math agent on `llm`, as docs/agents-and-factories.md says."""
    settings = {"llm": "openai/local-model", "use_proxy": False, "api_base": llm.base_url}
    supervisor = MAILAgentTemplate(
        name="supervisor",
        factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
        comm_targets=["math"],
        agent_params={**settings, **params},
        enable_entrypoint=True,
        can_complete_tasks=True,
    )
    math = MAILAgentTemplate(
        name="math",
        factory="python::mail.factories.base:LiteLLMAgentFunction",
        comm_targets=["supervisor"],
        agent_params={**settings, **params},
    )
    return MAILSwarmTemplate(
        name="quirks",
        version="1.0.0",
        agents=[supervisor, math],
        actions=[],
        entrypoint="supervisor",
    )


def _forced(request) -> bool:
    return isinstance(request.body.get("tool_choice"), dict)


def _by_supervisor(request) -> bool:
    return "task_complete" in request.tool_names and not _forced(request)


async def test_every_model_call_counts_toward_max_steps(llama):
    # The request the server refuses ("required", a 500 within 0.1 s) is a recorded model
    # call: it counts as a step like the turn's answer does. It did not: with max_steps 6 a
    # real run recorded 7 calls (the refusal and 6 turns).
    for _ in range(6):
        llama.queue(
            tool_call("send_request", {"target": "math", "subject": "q", "body": "12*7?"}),
            match=_by_supervisor,
        )
        llama.queue(
            tool_call("send_response", {"target": "supervisor", "subject": "a", "body": "84"}),
            match=lambda r: "task_complete" not in r.tool_names,
        )
    llama.queue(tool_call("task_complete", {"finish_message": "84"}), match=_forced)
    swarm = _pair_swarm(llama).instantiate({"user_token": "t"}, user_id="u")
    try:
        response, _ = await swarm.post_message(body="What is 12 * 7?", max_steps=4, timeout=300)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    assert response["message"]["body"] == "84", response
    choices = [r.body["tool_choice"] for r in llama.requests]
    # The refusal, the supervisor's request, math's answer, and the entrypoint's turn to
    # finish: 4 calls, max_steps (the finish is the last allowed call, not one past it); it
    # gets math's answer and the order to finish together.
    assert choices[:3] == ["required", "auto", "auto"] and _forced(llama.requests[3]), choices
    assert len(recorded) == len(llama.requests) == 4, choices
    last = json.dumps(llama.requests[3].messages[-2:])
    assert "84" in last and "::maximum_steps_reached::" in last, last


@pytest.mark.parametrize(
    ("stream", "max_steps", "calls", "completed"),
    [
        (False, 1, 1, True),  # the user's message and the order to finish, in one call
        (False, 2, 1, False),  # the refusal of "required" leaves no call for "auto"
        (False, 3, 3, True),  # refusal, "auto" (text), the forced finish
        (True, 1, 1, True),
        (True, 3, 2, False),  # empty stream, refusal: "auto" would take the finish's call
        (True, 4, 4, True),  # empty stream, refusal, "auto" plain (text), the forced finish
    ],
)
async def test_model_calls_stay_within_max_steps(llama, stream, max_steps, calls, completed):
    # A model that calls no tool unless forced, behind a server that refuses "required" and
    # cannot stream a tool call: every request the server sees is a recorded model call, and
    # there are never more than max_steps. The forced task_complete is the last allowed call
    # (v1.3 made it one past the limit), and a turn's detection requests count as they go out
    # (they were counted when the turn ended: the first streamed turn made 4 calls).
    for _ in range(10):
        llama.queue(tool_call("task_complete", {"finish_message": "84"}), match=_forced)
        llama.queue(text("I think it is 84."), match=lambda r: not _forced(r))
    swarm = _solo_swarm(llama, stream_tokens=stream).instantiate({"user_token": "t"}, "u")
    try:
        response, _ = await swarm.post_message(
            body="What is 12 * 7?", max_steps=max_steps, timeout=300
        )
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    sent = [(r.stream, r.body["tool_choice"]) for r in llama.requests]
    assert len(recorded) == len(llama.requests) == calls <= max_steps, sent
    body = response["message"]["body"]
    if completed:
        assert body == "84" and _forced(llama.requests[-1]), (response, sent)
        assert "What is 12 * 7?" in json.dumps(llama.requests[-1].messages), sent
    else:
        assert response["message"]["subject"] == "::agent_error::", response
        assert f"step limit (max_steps {max_steps}" in body and "not made" in body, body


@pytest.mark.parametrize("max_steps", [3, 4])
async def test_a_broadcast_near_the_step_limit_starts_only_the_turns_that_fit(max_steps):
    # A broadcast counted one step but started a model turn per recipient: a supervisor that
    # broadcast to 3 agents at max_steps 3 or 4 made 5 calls. Each recipient's turn is a
    # step now; the recipients past the limit's last call get nothing, and that call is the
    # entrypoint's forced finish.
    workers = ["alpha", "beta", "gamma"]
    async with ScriptedLLM() as llm:
        for _ in range(10):
            llm.queue(
                tool_call("send_broadcast", {"subject": "q", "body": "12*7?"}),
                match=_by_supervisor,
            )
            llm.queue(
                tool_call("send_response", {"target": "supervisor", "subject": "a", "body": "84"}),
                match=lambda r: "task_complete" not in r.tool_names,
            )
            llm.queue(tool_call("task_complete", {"finish_message": "84"}), match=_forced)
        settings = {"llm": "openai/local-model", "use_proxy": False, "api_base": llm.base_url}
        agents = [
            MAILAgentTemplate(
                name="supervisor",
                factory="python::mail.factories.supervisor:LiteLLMSupervisorFunction",
                comm_targets=workers,
                agent_params=settings,
                enable_entrypoint=True,
                can_complete_tasks=True,
            ),
            *(
                MAILAgentTemplate(
                    name=name,
                    factory="python::mail.factories.base:LiteLLMAgentFunction",
                    comm_targets=["supervisor"],
                    agent_params=settings,
                )
                for name in workers
            ),
        ]
        template = MAILSwarmTemplate(
            name="quirks", version="1.0.0", agents=agents, actions=[], entrypoint="supervisor"
        )
        swarm = template.instantiate({"user_token": "t"}, user_id="u")
        try:
            response, _ = await swarm.post_message(
                body="What is 12 * 7?", max_steps=max_steps, timeout=300
            )
            task = swarm.get_task_by_id(response["message"]["task_id"])
            recorded = _model_calls(task.events) if task is not None else []
        finally:
            await swarm.shutdown()
        requests = list(llm.requests)
    sent = [("task_complete" in r.tool_names, r.body["tool_choice"]) for r in requests]
    assert len(recorded) == len(requests) <= max_steps, sent
    # Completed by the forced finish, the limit's own call, though the answers of the turns
    # still running were counted (past the limit) before it went out.
    assert response["message"]["body"] == "84" and _forced(requests[-1]), (response, sent)


# ----------------------------------------------------- a server that cannot stream tool calls


@pytest.mark.parametrize("breaks", [False, True], ids=["stream-ends", "stream-breaks"])
async def test_a_streamed_agent_falls_back_to_plain_requests_once_per_model(breaks, caplog):
    # llama-cpp-python cannot stream a tool call ("required" asserts, "auto" raises once the
    # model chose a tool): it answers 200 with an event stream that ends before any chunk (or
    # breaks off: its app raised after the headers), which read as "the model answered with
    # nothing" (or a connection error, retried) and failed every streamed task.
    quirks = dataclasses.replace(LLAMA_CPP_PYTHON, tool_stream_breaks=breaks)
    async with ScriptedLLM(quirks=quirks) as llama:
        swarm = _solo_swarm(llama, stream_tokens=True).instantiate({"user_token": "t"}, user_id="u")
        answers = []
        try:
            for question in ("2 + 2?", "3 + 3?"):
                llama.queue(tool_call("task_complete", {"finish_message": str(len(answers) + 4)}))
                response, _ = await swarm.post_message(body=question, timeout=300)
                task = swarm.get_task_by_id(response["message"]["task_id"])
                answers.append((response, _model_calls(task.events) if task is not None else []))
        finally:
            await swarm.shutdown()
    (first, first_calls), (second, second_calls) = answers
    assert first["message"]["body"] == "4" and second["message"]["body"] == "5", answers
    sent = [(r.stream, r.body["tool_choice"]) for r in llama.requests]
    assert sent == [
        (True, "required"),  # an empty stream
        (False, "required"),  # refused (500): "auto" from now on
        (False, "auto"),  # the turn fell back to plain: the tool call, no streaming from now on
        (False, "auto"),  # the second task: one request
    ]
    assert llama.empty_streams == [llama.requests[0]]
    broken = "MidStreamFallbackError" if breaks else None
    assert [r.get("error") for r in first_calls] == [broken, "InternalServerError", None]
    assert len(second_calls) == 1
    said = [r.getMessage() for r in caplog.records if "without streaming" in r.getMessage()]
    assert len(said) == 1 and llama.base_url in said[0], said


async def test_the_plain_request_after_an_empty_stream_survives_a_dropped_connection():
    # llama-cpp-python closes the connection of an empty tool-call stream just after its end,
    # when the client has already sent the plain request on it: "Connection error" without
    # reaching the model. The retry went through the stream again and met the same close, so
    # the call failed "the same way twice"; a turn that fell back to plain stays plain, so
    # the retry goes out on a fresh connection and is answered.
    quirks = dataclasses.replace(LLAMA_CPP_PYTHON, drops_kept_connection=True)
    async with ScriptedLLM(quirks=quirks) as llama:
        llama.queue(tool_call("task_complete", {"finish_message": "4"}))
        swarm = _solo_swarm(llama, stream_tokens=True).instantiate({"user_token": "t"}, "u")
        try:
            response, _ = await swarm.post_message(body="2 + 2?", max_steps=5, timeout=300)
            task = swarm.get_task_by_id(response["message"]["task_id"])
            recorded = _model_calls(task.events) if task is not None else []
        finally:
            await swarm.shutdown()
    sent = [(r.stream, r.body["tool_choice"]) for r in llama.requests]
    assert response["message"]["body"] == "4", (response, sent)
    assert sent == [
        (True, "required"),  # an empty stream, its connection closed at the next request
        (False, "required"),  # on that connection: dropped unanswered (a connection error)
        (False, "required"),  # the retry, plain, on a fresh connection: refused (500)
        (False, "auto"),  # the answer
    ], sent
    assert len(recorded) == len(sent) <= 5


async def test_a_streamed_agent_whose_model_answers_nothing_either_way_still_fails(llama):
    # An empty stream and an empty plain answer: the model's own empty answer, counted as a
    # turn without a tool call; every request is a model call within max_steps.
    for _ in range(20):
        llama.queue(text(""))
    swarm = _solo_swarm(llama, stream_tokens=True).instantiate({"user_token": "t"}, user_id="u")
    try:
        response, _ = await swarm.post_message(body="What is 12 * 7?", max_steps=10, timeout=300)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    body = response["message"]["body"]
    assert response["message"]["subject"] == "::task_error::", response
    assert "3 times in a row" in body and "task_no_tool_call_limit" in body, body
    # Turn 1: the empty stream of "required", its refusal, then "auto" plain (the turn fell
    # back); turns 2 and 3: "auto" streamed and plain (the plain answer was empty too: not
    # learnt).
    assert [(r.stream, r.body["tool_choice"]) for r in llama.requests] == [
        (True, "required"),
        (False, "required"),
        (False, "auto"),
    ] + [(True, "auto"), (False, "auto")] * 2
    assert len(recorded) == len(llama.requests) == 7 <= 10


# ------------------------------------------------------- assistant messages without content


async def test_an_assistant_tool_call_message_goes_out_with_empty_content(llama):
    fn = _agent(llama)
    history = copy.deepcopy(HISTORY)
    llama.queue(tool_call("send_request", {"target": "math", "subject": "s", "body": "2+2"}))
    _, [call] = await fn(history, "auto")
    history.append(call.completion)  # as the runtime stores it
    history.append(call.create_response_msg("SUCCESS: message sent"))
    llama.queue(tool_call("await_message", {"reason": None}))

    _, [waiting] = await fn(history, "auto")

    assert waiting.tool_name == "await_message"
    sent = [m for m in llama.requests[-1].body["messages"] if m["role"] == "assistant"]
    assert sent and sent[0]["content"] == "" and sent[0]["tool_calls"]
    assert len(llama.requests) == 2  # no 500, no retry


async def test_a_500_saying_the_request_is_wrong_or_repeating_itself_is_not_retried():
    async with ScriptedLLM() as plain:
        fn = _agent(plain)
        # The words llama-cpp-python's chat template answered for a message it cannot render.
        plain.queue(error(500, "'dict object' has no attribute 'content'"))
        with pytest.raises(LLMCallError, match="not retried") as info:
            await fn(copy.deepcopy(HISTORY), "auto")
        assert "has no attribute 'content'" in str(info.value)
        assert len(plain.requests) == 1

        plain.requests.clear()
        for _ in range(5):
            plain.queue(error(500, "CUDA error: out of memory"))
        with pytest.raises(LLMCallError) as info:
            await fn(copy.deepcopy(HISTORY), "auto")
        assert len(plain.requests) == 2  # the same failure twice: not three more times
    message = str(info.value)
    assert "failed the same way twice" in message
    assert f"HTTP 500 from {plain.base_url}: CUDA error: out of memory" in message


# ------------------------------------------------------------------- context, connection


async def test_an_overflowing_context_fails_at_once_in_the_servers_words():
    async with ScriptedLLM(quirks=ServerQuirks(context_tokens=50)) as server:
        fn = _agent(server)
        with pytest.raises(LLMCallError) as info:
            await fn([{"role": "user", "content": "x" * 400}], "auto")
    assert len(server.requests) == 1
    assert info.value.kind == "context_window"
    assert "This model's maximum context length is 50 tokens" in str(info.value)
    assert "lower the agent's max_tokens" in str(info.value)


async def test_a_refused_connection_says_it_cannot_connect_and_stops_after_two_tries():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    base = f"http://127.0.0.1:{port}/v1"
    fn = LiteLLMAgentFunction(
        name="w",
        comm_targets=[],
        tools=[],
        llm="openai/local-model",
        tool_format="completions",
        use_proxy=False,
        api_base=base,
        print_llm_streams=False,
    )

    with pytest.raises(LLMCallError) as info:
        await fn(copy.deepcopy(HISTORY))

    message = str(info.value)
    assert f"cannot connect to {base}" in message
    assert "failed the same way twice" in message and "HTTP 500" not in message


async def test_an_api_base_without_a_key_reaches_the_server(llama, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llama.queue(tool_call("await_message", {"reason": None}))

    _, [call] = await _agent(llama)(copy.deepcopy(HISTORY), "auto")

    assert call.tool_name == "await_message"
    assert llama.requests[0].headers["Authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


# ------------------------------------------------------------------------- slow generation


async def test_local_servers_get_a_default_output_and_time_bound(llama):
    fn = _agent(llama)
    assert fn.request_timeout == LOCAL_REQUEST_TIMEOUT
    llama.queue(tool_call("await_message", {"reason": None}))
    await fn(copy.deepcopy(HISTORY), "auto")
    assert llama.requests[0].body["max_tokens"] == LOCAL_MAX_TOKENS
    own = _agent(llama, max_tokens=50, request_timeout=7.0)
    assert (own.max_tokens, own.request_timeout) == (50, 7.0)


async def _warm(server: ScriptedLLM, **settings) -> None:
    """One call without a tight timeout: LiteLLM's first-call set-up (seconds on a busy
    machine) is paid here, not inside a test's request_timeout."""
    server.queue(tool_call("await_message", {"reason": None}))
    await _agent(server, **settings)(copy.deepcopy(HISTORY), "auto")
    server.requests.clear()


async def test_a_timed_out_request_is_closed_before_the_next_and_not_retried_twice(llama):
    await _warm(llama)
    fn = _agent(llama, request_timeout=0.5)
    for _ in range(4):
        llama.queue(hang(30.0))

    with pytest.raises(LLMCallError) as info:
        await fn(copy.deepcopy(HISTORY), "auto")

    assert "failed the same way twice" in str(info.value)
    assert f"no answer from {llama.base_url} within the request timeout" in str(info.value)
    assert len(llama.requests) == 2
    # The server saw each timed-out request go (it stops generating for it).
    for _ in range(100):
        if len(llama.disconnected) == 2:
            break
        await asyncio.sleep(0.05)
    assert llama.disconnected == llama.requests


async def test_a_timed_out_call_is_charged_its_prompt(llama):
    # A server that timed out had the whole prompt (llama-cpp-python goes on generating for
    # it): the call's record counts its input, estimated, as a cut call's does, so a budget
    # sees the work. Before, such calls were recorded with 0 tokens.
    await _warm(llama)
    swarm = _solo_swarm(llama, request_timeout=0.5).instantiate({"user_token": "t"}, user_id="u")
    for _ in range(4):
        llama.queue(hang(30.0))
    try:
        response, _ = await swarm.post_message(body="2 + 2?", timeout=300)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    assert "higher request_timeout" in response["message"]["body"], response
    timed_out = [r for r in recorded if r.get("error") not in (None, "InternalServerError")]
    assert len(timed_out) == 2, [r.get("error") for r in recorded]
    assert all(r["input_tokens"] > 100 and r["estimated"] is True for r in timed_out), recorded


async def test_a_stream_slower_than_the_request_timeout_is_closed():
    # Every chunk comes within the timeout, the whole reply does not: the timeout is the call's.
    async with ScriptedLLM(quirks=ServerQuirks(chunk_delay=0.2)) as slow:
        await _warm(slow, stream_tokens=True)
        slow.disconnected.clear()
        fn = _agent(slow, request_timeout=0.6, stream_tokens=True)
        for _ in range(3):
            slow.queue(text("a long answer that keeps coming, word after word after word"))
        with pytest.raises(LLMCallError) as info:
            await fn(copy.deepcopy(HISTORY), "auto")
        assert "within the request timeout" in str(info.value)
        assert "higher request_timeout in the agent's agent_params" in str(info.value)
        assert len(slow.requests) == 2
        for _ in range(100):
            if len(slow.disconnected) == 2:
                break
            await asyncio.sleep(0.05)
        assert slow.disconnected == slow.requests  # closed: a streaming server stops there


async def test_the_call_in_flight_when_a_task_times_out_is_recorded_and_stopped(llama):
    # A first call pays for LiteLLM's import and first-call set-up (seconds on a busy
    # machine), so the task's own call reaches the server well within its timeout.
    llama.queue(tool_call("await_message", {"reason": None}))
    await _agent(llama)(copy.deepcopy(HISTORY), "auto")
    llama.requests.clear()
    swarm = _solo_swarm(llama).instantiate({"user_token": "t"}, user_id="u")
    llama.queue(hang(60.0))
    try:
        response, _ = await swarm.post_message(body="2 + 2?", timeout=5)
        task = swarm.get_task_by_id(response["message"]["task_id"])
        recorded = _model_calls(task.events) if task is not None else []
    finally:
        await swarm.shutdown()
    assert response["message"]["subject"] == "::task_timeout::"
    # The first call was the server's refusal of tool_choice "required" (recorded as failed).
    assert [r.get("error") for r in recorded] == ["InternalServerError", "cut: the task timed out"]
    assert recorded[-1]["input_tokens"] > 0 and recorded[-1]["estimated"] is True
    assert [r.body["tool_choice"] for r in llama.requests] == ["required", "auto"]
    for _ in range(100):
        if llama.disconnected:
            break
        await asyncio.sleep(0.05)
    assert llama.disconnected == llama.requests[1:]  # the server was told


# ------------------------------------------------------------------------------- usage


@pytest.mark.parametrize("stream_usage", ["when_asked", "never"])
async def test_streamed_calls_ask_for_usage_and_estimates_count_the_tools(stream_usage):
    async with ScriptedLLM(quirks=ServerQuirks(stream_usage=stream_usage)) as server:
        swarm = _solo_swarm(server, stream_tokens=True, system="Be brief.").instantiate(
            {"user_token": "t"}, user_id="u", print_llm_streams=False
        )
        server.queue(tool_call("task_complete", {"finish_message": "4"}))
        try:
            _, events = await asyncio.wait_for(
                swarm.post_message(body="2 + 2?", show_events=True), 60
            )
        finally:
            await swarm.shutdown()
    body = server.requests[0].body
    assert body["stream_options"] == {"include_usage": True}
    [call] = _model_calls(events)
    if stream_usage == "when_asked":  # the server's own count
        assert (call["input_tokens"], call["output_tokens"]) == (11, 7)
        assert "estimated" not in call
    else:  # counted here: the tool schemas and the system prompt are most of the prompt
        tools_and_prompt = len(json.dumps(body["tools"])) + len(body["messages"][0]["content"])
        assert call["estimated"] is True
        assert call["input_tokens"] >= tools_and_prompt // 4


# ------------------------------------------------------------------------------- prompt


def test_an_agent_without_peers_gets_no_peer_section_in_its_prompt(llama):
    template = _solo_swarm(llama, system="You answer questions.")
    swarm = template.instantiate({"user_token": "t"}, user_id="u")
    [agent] = swarm.agents
    augment_system_prompts([agent])
    assert agent.function.system == "You answer questions."
    assert TARGETS_HEADER not in agent.function.system
