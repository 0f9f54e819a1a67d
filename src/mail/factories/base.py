"""Agent function base classes and the LiteLLM-backed agent function."""

from __future__ import annotations

import asyncio
import difflib
import inspect
import logging
import os
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from mail.core.tools import (
    AgentToolCall,
    create_mail_tools,
    pydantic_model_to_tool,
)
from mail.factories import completions, responses
from mail.factories._litellm import (
    load_litellm_async,
    missing_provider_keys,
    provider_key_variable,
)
from mail.factories.assembly import StreamPrinter, TurnRequest
from mail.factories.demo_model import is_offline_model
from mail.factories.errors import LLMConfigError
from mail.factories.retry import (
    RetryPolicy,
    Target,
    call_with_retries,
    classify,
    server_words,
    status_code_of,
)

logger = logging.getLogger("mail.factories")

ToolFormat = Literal["completions", "responses"]
ToolChoice = str | dict[str, Any]
AgentResult = tuple[str | None, list[AgentToolCall]]

THINKING_BUDGETS: dict[str, int] = {"minimal": 2000, "low": 4000, "medium": 8000, "high": 16000}
PROXY_PREFIX = "litellm_proxy/"

# An agent with an `api_base` (a local or self-hosted server) gets these unless it sets its
# own: nothing else bounds one generation there (docs/agents-and-factories.md).
LOCAL_MAX_TOKENS = 1024
LOCAL_REQUEST_TIMEOUT = 180.0
# Sent as the key to an `api_base` that needs none: LiteLLM's OpenAI client refuses to send a
# request without one ("Missing credentials").
PLACEHOLDER_API_KEY = "no-key"
# The sampling settings (passed through to LiteLLM as given) that the Responses API has too.
RESPONSES_SETTINGS = ("temperature", "top_p")

# (api_base, model) pairs whose server answered tool_choice "required" with an error: they are
# asked with "auto" from then on, and the agent function checks the answer itself.
_REFUSES_REQUIRED: set[tuple[str, str]] = set()
# (api_base, model) pairs whose server answered a streamed request with tools with an empty
# stream and the same request unstreamed with an answer (llama-cpp-python cannot stream a
# tool call): they are asked without streaming from then on.
_STREAMS_NO_TOOLS: set[tuple[str, str]] = set()


def check_settings(factory_name: str, settings: dict[str, Any], accepted: Any) -> None:
    """Raise TypeError naming any setting `accepted` (a callable) does not take.

    Built-in factories do not swallow unknown keyword arguments: a typo in `agent_params`
    must fail loudly when the swarm is instantiated, not be ignored.
    """
    params = inspect.signature(accepted).parameters
    known = [name for name in params if name not in ("self", "name", "comm_targets", "tools")]
    unknown = [key for key in settings if key not in params]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    raise TypeError(
        f"{factory_name}() got unexpected parameter(s) {', '.join(hints)}; "
        f"accepted parameters: {', '.join(known)}"
    )


def proxy_problem(agent: str, llm: Any, use_proxy: Any, api_base: Any) -> str | None:
    """Why an agent cannot reach its LiteLLM proxy (no base URL anywhere), or None."""
    if use_proxy is not True or not isinstance(llm, str) or is_offline_model(llm):
        return None
    if api_base or os.environ.get("LITELLM_PROXY_API_BASE"):
        return None
    return (
        f"agent '{agent}' has use_proxy=true (the default of the LiteLLM agents) but "
        "LITELLM_PROXY_API_BASE is not set; set it to your LiteLLM proxy URL, or set use_proxy "
        "to false in the agent's agent_params to call the provider directly"
    )


def default_tool_format(api_base: str | None) -> ToolFormat:
    """Chat Completions for an agent pointed at its own server (every OpenAI-compatible
    server has it; many lack the Responses API), the Responses API otherwise."""
    return "completions" if api_base else "responses"


def _refuses_required(exc: BaseException) -> bool:
    """True when a server's error answers the `required` tool choice itself (llama-cpp-python
    answers it with a 500 and an empty message; others name the option)."""
    if status_code_of(exc) not in (400, 422, 500):
        return False
    words = server_words(exc).lower()
    return words == "(an empty error message)" or "tool_choice" in words


def _stream_broke(exc: BaseException) -> bool:
    """True when a streamed call failed on its connection: llama-cpp-python closes the stream
    without ending it when its handler raises after the headers went out."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return (
        classify(exc).signature[0] in ("connect", "io")
        or "MidStreamFallbackError" in names
        or "connection error" in str(exc).lower()
    )


def normalize_tools(tools: list[Any] | None, tool_format: str) -> list[dict[str, Any]]:
    """Tool dicts from a mix of dicts and pydantic model classes."""
    result: list[dict[str, Any]] = []
    for tool in tools or []:
        if isinstance(tool, type) and issubclass(tool, BaseModel):
            result.append(pydantic_model_to_tool(tool, style=tool_format))  # type: ignore[arg-type]
        elif isinstance(tool, dict):
            result.append(tool)
        else:
            raise TypeError(
                f"tools must be tool dicts or pydantic model classes, got {type(tool).__name__}"
            )
    return result


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    name = tool.get("name") or (tool.get("function") or {}).get("name")
    return name if isinstance(name, str) else None


_BODY = re.compile(r"<body>(.*?)</body>", re.S)


def latest_incoming_text(messages: list[dict[str, Any]]) -> str:
    """The body of the newest incoming message in a history (its whole text if no XML)."""
    for item in reversed(messages):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                match = _BODY.search(content)
                return (match.group(1) if match else content).strip()
    return ""


WIRING = (
    "name",
    "comm_targets",
    "tools",
    "enable_entrypoint",
    "enable_interswarm",
    "can_complete_tasks",
    "tool_format",
    "exclude_tools",
)


def wiring_of(values: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The MAILAgentFunction constructor arguments (`WIRING`) among a constructor's `locals()`,
    with `overrides` in their place: what a subclass hands `super().__init__`."""
    return {key: values[key] for key in WIRING} | overrides


class MAILAgentFunction(ABC):
    """Base for class-based agent functions: stores the wiring every agent has.

    Extra keyword arguments are kept in `self.kwargs` for subclasses that accept them.
    Subclasses that set `accepts_model_tools` may receive tools as pydantic model classes;
    they are converted to tool dicts in `tool_format`.
    """

    accepts_model_tools: ClassVar[bool] = False
    # The function calls a model (billed, slow): with a durable store each call first waits
    # for the commit of its task's earlier steps, so a crash never repeats a finished call.
    calls_model: ClassVar[bool] = False
    # What `can_complete_tasks=None` (not given) means for the class: supervisors say True.
    completes_tasks_by_default: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[dict[str, Any]],
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool | None = None,
        tool_format: ToolFormat = "responses",
        exclude_tools: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if tool_format not in ("completions", "responses"):
            raise ValueError(
                f"agent '{name}': tool_format must be 'completions' or 'responses', "
                f"got {tool_format!r}"
            )
        self.name = name
        self.comm_targets = list(comm_targets)
        self.tools = (
            normalize_tools(tools, tool_format) if self.accepts_model_tools else list(tools or [])
        )
        self.enable_entrypoint = enable_entrypoint
        self.enable_interswarm = enable_interswarm
        self.can_complete_tasks = (
            self.completes_tasks_by_default if can_complete_tasks is None else can_complete_tasks
        )
        self.tool_format: ToolFormat = tool_format
        self.exclude_tools = list(exclude_tools or [])
        self.kwargs = kwargs

    @abstractmethod
    def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> Awaitable[AgentResult]:
        """Run one agent turn over `messages` (the runtime's history for this agent)."""

    def wiring(self) -> dict[str, Any]:
        """The constructor arguments every agent function takes, as this one was wired
        (its final tool list included): what a wrapper hands the function it delegates to."""
        return {key: getattr(self, key) for key in WIRING}

    def own_tool_names(self) -> list[str]:
        """Names of the agent's own tools (an own tool replaces a built-in of the same name,
        e.g. team_tools' send_request with wait_for_reply)."""
        return [name for name in (_tool_name(tool) for tool in self.tools) if name]

    def mail_then_own_tools(self, include_mail_tools: bool = True) -> list[dict[str, Any]]:
        """The MAIL tools (when the agent has someone to talk to), then the agent's own."""
        tools: list[dict[str, Any]] = []
        if self.comm_targets and include_mail_tools:
            tools.extend(
                create_mail_tools(
                    self.comm_targets,
                    enable_interswarm=self.enable_interswarm,
                    style=self.tool_format,
                    exclude_tools=[*self.exclude_tools, *self.own_tool_names()],
                )
            )
        tools.extend(self.tools)
        return tools


class LiteLLMAgentFunction(MAILAgentFunction):
    """An agent backed by any LiteLLM model, in either tool format.

    `retry_policy` (class attribute, overridable per instance) sets how provider failures are
    retried. `api_base`, `api_key` and `request_timeout` are additions to the reference
    parameters: they point the agent at a specific endpoint (e.g. a local OpenAI-compatible
    server) and bound each attempt.
    """

    retry_policy: ClassVar[RetryPolicy] = RetryPolicy()
    calls_model: ClassVar[bool] = True

    accepts_model_tools = True

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[dict[str, Any]],
        llm: str,
        system: str = "",
        user_token: str = "",
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool = False,
        tool_format: ToolFormat | None = None,
        exclude_tools: list[str] | None = None,
        reasoning_effort: str | None = None,
        thinking_budget: int | None = None,
        max_tokens: int | None = None,
        memory: bool = True,
        use_proxy: bool = True,
        stream_tokens: bool = False,
        print_llm_streams: bool = True,
        _debug_include_mail_tools: bool = True,
        default_tool_choice: ToolChoice | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        request_timeout: float | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
    ) -> None:
        tool_format = tool_format or default_tool_format(api_base)
        super().__init__(**wiring_of(locals()))
        if not isinstance(llm, str) or not llm.strip():
            raise LLMConfigError(
                f"agent '{name}': 'llm' must be a LiteLLM model name such as "
                f"'openai/gpt-5-mini' (or 'mail/demo' for the offline demo model), got {llm!r}"
            )
        self.llm = llm
        self.system = system or ""
        self.user_token = user_token or ""
        self.reasoning_effort = reasoning_effort
        if thinking_budget is None and reasoning_effort in THINKING_BUDGETS:
            thinking_budget = THINKING_BUDGETS[reasoning_effort]
        self.thinking_budget = thinking_budget
        if max_tokens is None and thinking_budget:
            max_tokens = thinking_budget + 4000
        if max_tokens is None and api_base:
            max_tokens = LOCAL_MAX_TOKENS
        self.max_tokens = max_tokens
        self.thinking: dict[str, Any] = (
            {"type": "enabled", "budget_tokens": thinking_budget}
            if thinking_budget
            else {"type": "disabled"}
        )
        self.memory = memory
        self.use_proxy = use_proxy
        self.stream_tokens = stream_tokens
        self.print_llm_streams = print_llm_streams
        self._debug_include_mail_tools = _debug_include_mail_tools
        self.default_tool_choice = default_tool_choice
        self.api_base = api_base
        self.api_key = api_key
        if request_timeout is None and api_base:
            request_timeout = LOCAL_REQUEST_TIMEOUT
        self.request_timeout = request_timeout
        given = {
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "stop": stop,
            "presence_penalty": presence_penalty,
            "frequency_penalty": frequency_penalty,
        }
        self.model_settings = {key: value for key, value in given.items() if value is not None}
        if tool_format == "responses":
            unsupported = [key for key in self.model_settings if key not in RESPONSES_SETTINGS]
            if unsupported:
                raise LLMConfigError(
                    f"agent '{name}': {', '.join(unsupported)} cannot be sent to the Responses "
                    'API; use tool_format "completions" for them'
                )

    # -- what is sent ------------------------------------------------------------------------

    def build_tools(self) -> list[dict[str, Any]]:
        """MAIL tools (when the agent has someone to talk to), then the agent's own tools."""
        return self.mail_then_own_tools(include_mail_tools=self._debug_include_mail_tools)

    def build_messages(
        self, messages: list[dict[str, Any]], memories: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """The request's messages: the system prompt first, unless history already has one.

        `memories` (notes recalled from the agent's memory) are appended to the system
        prompt of this request only. A new list is returned; the runtime's history is never
        modified here.
        """
        notes = ""
        if memories:
            lines = "\n".join(f"- {m}" for m in memories)
            notes = f"\n\nNotes from your memory that may be relevant:\n{lines}"
        first = messages[0] if messages else None
        if isinstance(first, dict) and first.get("role") == "system":
            if not notes:
                return list(messages)
            return [{**first, "content": f"{first.get('content') or ''}{notes}"}, *messages[1:]]
        if self.system or notes:
            return [{"role": "system", "content": f"{self.system}{notes}".strip()}, *messages]
        return list(messages)

    async def recall_for(self, messages: list[dict[str, Any]]) -> list[str]:
        """Memory notes matching the newest incoming message (agents with `memory=True`)."""
        recall = getattr(self, "recall", None)
        if not self.memory or recall is None:
            return []
        query = latest_incoming_text(messages)
        if not query:
            return []
        try:
            return list(await recall(query, 5))
        except Exception:  # noqa: BLE001 - memory trouble must not fail the model call
            logger.warning("agent %s: memory search failed", self.name, exc_info=True)
            return []

    @property
    def is_demo_model(self) -> bool:
        return is_offline_model(self.llm)

    @property
    def is_anthropic_model(self) -> bool:
        lowered = self.llm.lower()
        return "anthropic" in lowered or "claude" in lowered

    def _model_and_options(self) -> tuple[str, dict[str, Any]]:
        model = self.llm
        options: dict[str, Any] = {"max_retries": 0, "_skip_mcp_handler": True}
        if self.is_demo_model:
            from mail.factories.demo_model import MODELS, PROVIDER

            if model.split("/", 1)[1] not in MODELS:
                raise LLMConfigError(
                    f"agent '{self.name}': unknown offline model '{model}'; the only one is "
                    f"'{PROVIDER}/{MODELS[0]}' (use a LiteLLM model name such as "
                    "'openai/gpt-5-mini' for a real model)"
                )
        elif self.use_proxy:
            if not model.startswith(PROXY_PREFIX):
                model = PROXY_PREFIX + model
            problem = proxy_problem(self.name, self.llm, True, self.api_base)
            if problem:
                raise LLMConfigError(problem)
            if self.user_token:  # none in an instance loaded without its caller's request
                options["extra_headers"] = {"Authorization": f"Bearer {self.user_token}"}
            # The caller's key is the proxy credential unless the deployment configures one.
            if not (self.api_key or os.environ.get("LITELLM_PROXY_API_KEY")) and self.user_token:
                options["api_key"] = self.user_token
        else:
            self._require_provider_key(model)
            if self.api_base and not self.api_key and missing_provider_keys(model):
                options["api_key"] = PLACEHOLDER_API_KEY
        if self.api_base:
            options["api_base"] = self.api_base
        if self.api_key:
            options["api_key"] = self.api_key
        if self.request_timeout:
            options["timeout"] = self.request_timeout
        options.update(self.model_settings)
        return model, options

    @property
    def missing_caller_key(self) -> bool:
        """Its model calls authenticate to the LiteLLM proxy with the caller's API key (no
        `api_key`, no LITELLM_PROXY_API_KEY) and it has none: it was built for an instance
        loaded without a request of its caller (tasks continued at start-up)."""
        if not self.use_proxy or is_offline_model(self.llm):
            return False
        return not (self.api_key or os.environ.get("LITELLM_PROXY_API_KEY") or self.user_token)

    def _require_provider_key(self, model: str) -> None:
        """Fail at once, saying which variable to set, when the provider's key is missing.

        Without it every attempt would fail the same way (or, offline, retry a connection
        five times); an agent with its own ``api_key`` or ``api_base`` is left alone.
        """
        if self.api_key or self.api_base:
            return
        missing = missing_provider_keys(model)
        if missing:
            raise LLMConfigError(
                f"agent '{self.name}' cannot call {model}: {missing[0]} is not set. "
                f"Set {missing[0]} in the server's environment and restart it "
                "(or give the agent an api_key).",
                kind="missing_api_key",
            )

    def _make_attempt(
        self,
        messages: list[dict[str, Any]],
        tool_choice: ToolChoice,
        memories: list[str] | None = None,
    ) -> Callable[[], Awaitable[AgentResult]]:
        """One attempt at the call. An `api_base` server that refuses tool_choice "required"
        is asked again with "auto" at once, and with "auto" from then on (per server and
        model); the runtime checks the answer against the choice it asked for."""
        server = (self.api_base or "", self.llm)
        if tool_choice == "required" and server in _REFUSES_REQUIRED:
            tool_choice = "auto"
        # Set once a streamed request of this turn fell back to a plain one: its later requests
        # (with "auto" after a refusal, a retry) go plain too (one detection request less).
        plain = [False]
        send = self._request(messages, tool_choice, memories, plain)
        if tool_choice != "required" or not self.api_base:
            return send

        async def attempt() -> AgentResult:
            if server in _REFUSES_REQUIRED:  # a retry of this call, after the refusal
                return await self._request(messages, "auto", memories, plain)()
            try:
                return await send()
            except Exception as exc:
                if not _refuses_required(exc):
                    raise
                _REFUSES_REQUIRED.add(server)
                logger.warning(
                    "%s at %s refuses tool_choice 'required' (%s); asking with 'auto' from now on",
                    self.llm,
                    self.api_base,
                    server_words(exc),
                )
                return await self._request(messages, "auto", memories, plain)()

        return attempt

    def _request(
        self,
        messages: list[dict[str, Any]],
        tool_choice: ToolChoice,
        memories: list[str] | None,
        plain: list[bool],
    ) -> Callable[[], Awaitable[AgentResult]]:
        """The call for `tool_choice`. A streamed call with tools to an `api_base` server that
        comes back with nothing (no text, no tool call), or whose stream breaks off, is asked
        once more unstreamed (`plain[0]` is set: the turn's later requests are plain too);
        when that answers, the server cannot stream tool calls (llama-cpp-python ends such a
        stream before its first chunk) and is asked unstreamed from then on (per server and
        model). Both requests are model calls of the turn."""
        server = (self.api_base or "", self.llm)
        send = self._send(messages, tool_choice, memories, self.stream_tokens)
        if (
            not (self.stream_tokens and self.api_base and self.build_tools())
            or self.is_anthropic_model
        ):
            return send

        async def streamed_or_plain() -> AgentResult:
            # Checked per attempt: a retry may know.
            if server not in _STREAMS_NO_TOOLS and not plain[0]:
                try:
                    text, calls = await send()
                except Exception as exc:
                    if not _stream_broke(exc):
                        raise
                    calls = []
                if calls:
                    return text, calls
                plain[0] = True
            answer = await self._send(messages, tool_choice, memories, False)()
            if answer[1] and server not in _STREAMS_NO_TOOLS:
                _STREAMS_NO_TOOLS.add(server)
                logger.warning(
                    "%s at %s answers a streamed request with tools with nothing and the same "
                    "request unstreamed with an answer; asking it without streaming from now on",
                    self.llm,
                    self.api_base,
                )
            return answer

        return streamed_or_plain

    def _send(
        self,
        messages: list[dict[str, Any]],
        tool_choice: ToolChoice,
        memories: list[str] | None,
        stream: bool,
    ) -> Callable[[], Awaitable[AgentResult]]:
        model, options = self._model_and_options()
        tools = self.build_tools()
        request_messages = self.build_messages(messages, memories)
        printer = StreamPrinter(self.name, self.print_llm_streams)
        settings = (self.reasoning_effort, self.max_tokens, stream, printer)
        turn = TurnRequest(model, request_messages, tools, tool_choice, options, *settings)
        run: Callable[[], Awaitable[AgentResult]]
        if self.tool_format == "completions":
            crequest = completions.build_request(
                turn, thinking_budget=self.thinking_budget, anthropic=self.is_anthropic_model
            )
            run = lambda: completions.run(crequest)  # noqa: E731
        else:
            rrequest = responses.build_request(turn)
            run = lambda: responses.run(rrequest)  # noqa: E731
        limit = self.request_timeout
        if not limit:
            return run

        async def bounded() -> AgentResult:
            # The whole call, a streamed reply's last chunk included (LiteLLM's timeout bounds
            # each read): the request is closed, which stops a streaming server generating.
            async with asyncio.timeout(limit):
                return await run()

        return bounded

    # -- the agent function --------------------------------------------------------------------

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        if self.default_tool_choice is not None and tool_choice == "required":
            # Replaces the normal turn's choice only: a forced tool stays forced.
            tool_choice = self.default_tool_choice
        memories = await self.recall_for(messages)
        if not self.is_demo_model:
            # Building the request touches LiteLLM synchronously: import it off the loop first.
            await load_litellm_async()
        attempt = self._make_attempt(messages, tool_choice, memories)
        # What the answer lacks (a forced tool the server did not hold the model to, a text
        # answer to "required" served as "auto") the runtime judges against its own choice.
        return await call_with_retries(
            attempt,
            policy=self.retry_policy,
            what=f"agent '{self.name}' calling {self.llm}",
            target=Target(
                key_variable=None if self.api_key else provider_key_variable(self.llm),
                endpoint=self.api_base,
                api=self.tool_format,
            ),
        )


def inner_function(
    wrapper: MAILAgentFunction, llm: str, settings: dict[str, Any]
) -> LiteLLMAgentFunction:
    """The LiteLLMAgentFunction a wrapper delegates to, built from the wrapper's own wiring
    (its final tool list included) and the LiteLLM settings it was given."""
    return LiteLLMAgentFunction(llm=llm, **wrapper.wiring(), **settings)


class _InnerSetting:
    """A setting of the inner function, read and written through the wrapper (v1.3's wrapper
    classes had these as attributes of their own, which subclasses read)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, wrapper: Any, owner: type | None = None) -> Any:
        if wrapper is None:
            return self
        return getattr(wrapper._inner(), self.name)

    def __set__(self, wrapper: Any, value: Any) -> None:
        setattr(wrapper._inner(), self.name, value)


class DelegatingAgentFunction(MAILAgentFunction):
    """Base of the wrapper classes that hold an inner LiteLLMAgentFunction.

    The wrapper takes the wiring plus every `LiteLLMAgentFunction` setting; it builds the inner
    function from its own wiring (after `_add_role_tools`, its final tool list included) and
    the settings, and keeps it in the attribute `_inner_attr` names (`supervisor_fn`,
    `action_agent_fn`). The model, the prompt and calls are forwarded to it.
    """

    _inner_attr: ClassVar[str]
    calls_model: ClassVar[bool] = True

    # Template checks compare agent_params with these (see mail.api.factory_check).
    accepted_settings = LiteLLMAgentFunction.__init__

    def __init__(
        self,
        name: str,
        comm_targets: list[str],
        tools: list[Any],
        llm: str,
        system: str = "",
        user_token: str = "",
        enable_entrypoint: bool = False,
        enable_interswarm: bool = False,
        can_complete_tasks: bool | None = None,
        tool_format: ToolFormat | None = None,
        exclude_tools: list[str] | None = None,
        reasoning_effort: str | None = None,
        thinking_budget: int | None = None,
        max_tokens: int | None = None,
        memory: bool = True,
        use_proxy: bool = True,
        _debug_include_mail_tools: bool = True,
        stream_tokens: bool = False,
        print_llm_streams: bool = True,
        default_tool_choice: ToolChoice | None = None,
        **settings: Any,
    ) -> None:
        # The parameters are in v1.3's positional order; the ones after `exclude_tools` (and
        # any other `LiteLLMAgentFunction` setting in **settings) go to the inner function.
        check_settings(type(self).__name__, settings, LiteLLMAgentFunction.__init__)
        tool_format = tool_format or default_tool_format(settings.get("api_base"))
        settings.update(
            system=system,
            user_token=user_token,
            reasoning_effort=reasoning_effort,
            thinking_budget=thinking_budget,
            max_tokens=max_tokens,
            memory=memory,
            use_proxy=use_proxy,
            _debug_include_mail_tools=_debug_include_mail_tools,
            stream_tokens=stream_tokens,
            print_llm_streams=print_llm_streams,
            default_tool_choice=default_tool_choice,
        )
        super().__init__(**wiring_of(locals()))
        self._add_role_tools()
        inner = inner_function(self, llm, settings)
        setattr(self, self._inner_attr, inner)
        self.print_llm_streams = inner.print_llm_streams

    def _add_role_tools(self) -> None:
        """Tools the wrapper's role adds to its own before the inner function is built."""

    def _inner(self) -> LiteLLMAgentFunction:
        return getattr(self, self._inner_attr)  # type: ignore[no-any-return]

    reasoning_effort = _InnerSetting()
    thinking_budget = _InnerSetting()
    max_tokens = _InnerSetting()
    memory = _InnerSetting()
    use_proxy = _InnerSetting()
    stream_tokens = _InnerSetting()
    default_tool_choice = _InnerSetting()
    llm = _InnerSetting()
    system = _InnerSetting()
    missing_caller_key = _InnerSetting()

    @property
    def user_token(self) -> str:
        return self._inner().user_token

    async def __call__(
        self, messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
    ) -> AgentResult:
        return await self._inner()(messages, tool_choice)


# The parameter order of the original's function-style factories (v1.3), so positional calls
# such as ``base_agent_factory(["helper"], [], "token", "openai/gpt-5-mini", "prompt")`` work.
FUNCTION_FACTORY_ORDER: tuple[str, ...] = (
    "comm_targets",
    "tools",
    "user_token",
    "llm",
    "system",
    "name",
    "enable_entrypoint",
    "enable_interswarm",
    "can_complete_tasks",
    "tool_format",
    "exclude_tools",
    "reasoning_effort",
    "thinking_budget",
    "max_tokens",
    "memory",
    "use_proxy",
    "stream_tokens",
    "print_llm_streams",
    "_debug_include_mail_tools",
    "default_tool_choice",
)


def deprecated_function_factory(
    cls: type[Any],
    name: str,
    defaults: dict[str, Any] | None = None,
    order: tuple[str, ...] = FUNCTION_FACTORY_ORDER,
) -> Callable[..., Callable[..., Awaitable[AgentResult]]]:
    """The original's function-style factories: build `cls`, return a plain coroutine fn.

    Arguments may be given by keyword or in the original's positional `order`; `defaults`
    fill what is not given (the original's default agent name, for instance).
    """
    fixed = dict(defaults or {})

    def factory(*args: Any, **kwargs: Any) -> Callable[..., Awaitable[AgentResult]]:
        if len(args) > len(order):
            raise TypeError(
                f"{name}() takes at most {len(order)} positional arguments ({len(args)} given)"
            )
        for key, value in zip(order, args, strict=False):
            if key in kwargs:
                raise TypeError(f"{name}() got multiple values for argument '{key}'")
            kwargs[key] = value
        for key, value in fixed.items():
            kwargs.setdefault(key, value)
        warnings.warn(
            f"{name} is deprecated; use {cls.__name__} as the factory",
            DeprecationWarning,
            stacklevel=2,
        )
        agent = cls(**kwargs)

        async def run(
            messages: list[dict[str, Any]], tool_choice: ToolChoice = "required"
        ) -> AgentResult:
            return await agent(messages, tool_choice)

        run._mail_agent = agent  # type: ignore[attr-defined]
        run.calls_model = agent.calls_model  # type: ignore[attr-defined]
        return run

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (
        f"Deprecated: build a `{cls.__name__}` and return a coroutine function. "
        f"Positional order: {', '.join(order[:6])}, ..."
    )
    return factory


base_agent_factory = deprecated_function_factory(
    LiteLLMAgentFunction, "base_agent_factory", {"name": "base_agent"}
)
