"""Code written against the original v1.3.6 Python API runs unchanged (issue 41).

Each test uses a documented public name the way the original's documentation uses it (its
docs/api.md, configuration.md, registry.md and the ``__all__`` lists of its packages): the
names, signatures, return types and error types a program written for v1.3.6 relies on.
Where our own shape differs, the test also checks that ours is still there under its own
name (docs/python-api.md, "Coming from v1.3.x").

This module: imports and exports, constructors and signatures, swarms.json helpers, the
registry. The runtime and swarms: test_original_api_runtime.py; the server and modules:
test_original_api_server.py; the example packages: test_original_api_examples.py.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from tests.support.v13_swarm import (
    HUMAN_REVIEW,
    swarms_document,
    template,
)

from mail import (
    AgentToolCall,
    MAILAction,
    MAILAgent,
    MAILAgentTemplate,
    MAILMessage,
    MAILSwarm,
    MAILSwarmTemplate,
)
from mail.net import SwarmRegistry

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------------------ 4: imports


def test_runtime_and_tool_helpers_are_exported_like_the_original() -> None:
    import mail
    import mail.core
    from mail import MAILRuntime
    from mail.core import MAILRuntime as CoreRuntime
    from mail.core.runtime import MAILRuntime as Defined

    assert MAILRuntime is CoreRuntime is Defined
    assert "MAILRuntime" in mail.__all__
    # mail.core.__all__ of v1.3.6
    for name in (
        "ActionFunction",
        "ActionOverrideFunction",
        "AgentFunction",
        "AgentCore",
        "AgentToolCall",
        "MAILAddress",
        "MAILBroadcast",
        "MAILInterrupt",
        "MAILInterswarmMessage",
        "MAILMessage",
        "MAILRequest",
        "MAILResponse",
        "create_agent_address",
        "create_admin_address",
        "create_system_address",
        "create_user_address",
        "format_agent_address",
        "parse_agent_address",
        "MAILRuntime",
        "MAIL_TOOL_NAMES",
        "convert_call_to_mail_message",
        "create_acknowledge_broadcast_tool",
        "create_broadcast_tool",
        "create_ignore_broadcast_tool",
        "create_interrupt_tool",
        "create_interswarm_broadcast_tool",
        "create_mail_tools",
        "create_request_tool",
        "create_response_tool",
        "create_supervisor_tools",
        "create_swarm_discovery_tool",
        "create_task_complete_tool",
        "pydantic_model_to_tool",
    ):
        assert name in mail.core.__all__, name
        assert getattr(mail.core, name) is not None, name


def test_tool_helpers_keep_their_documented_signatures_and_shapes() -> None:
    from mail.core import (
        MAIL_TOOL_NAMES,
        convert_call_to_mail_message,
        create_mail_tools,
        create_request_tool,
        create_supervisor_tools,
        pydantic_model_to_tool,
    )

    # A list, as in v1.3: validators there concatenate it with action names.
    assert isinstance(MAIL_TOOL_NAMES, list)
    assert MAIL_TOOL_NAMES + ["lookup"] == [*MAIL_TOOL_NAMES, "lookup"]
    assert "task_complete" in MAIL_TOOL_NAMES

    request = create_request_tool(["helper"], False, "completions")
    assert request["function"]["name"] == "send_request"
    names = [t["name"] for t in create_mail_tools(["helper"], False, "responses")]
    assert names[:2] == ["send_request", "send_response"]
    supervisor = create_supervisor_tools(["helper"], True, False, None, "responses")
    assert "task_complete" in [t["name"] for t in supervisor]

    class Lookup(BaseModel):
        query: str = Field(description="what to look up")

    tool = pydantic_model_to_tool(Lookup, name="lookup", description="Look up.", style="responses")
    assert tool["name"] == "lookup" and tool["type"] == "function"

    call = AgentToolCall(
        tool_name="send_request",
        tool_args={"target": "helper", "subject": "s", "body": "b"},
        tool_call_id="c1",
        completion={"role": "assistant", "content": None},
    )
    message: MAILMessage = convert_call_to_mail_message(call, "supervisor", "task-1")
    assert message["msg_type"] == "request"
    assert message["message"]["recipient"]["address"] == "helper"  # type: ignore[typeddict-item]


def test_importing_mail_stays_cheap() -> None:
    probe = (
        "import sys, mail, mail.core\n"
        "print(sorted(m for m in ('mail.core.runtime', 'sse_starlette', 'uvicorn', 'litellm')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_documented_constructor_parameters_are_accepted() -> None:
    from mail import MAILRuntime

    documented: dict[Any, tuple[str, ...]] = {
        MAILAction: ("name", "description", "parameters", "function"),
        MAILAgentTemplate: (
            "name",
            "factory",
            "comm_targets",
            "actions",
            "agent_params",
            "enable_entrypoint",
            "enable_interswarm",
            "can_complete_tasks",
            "tool_format",
            "exclude_tools",
        ),
        MAILAgent: (
            "name",
            "factory",
            "actions",
            "function",
            "comm_targets",
            "agent_params",
            "enable_entrypoint",
            "enable_interswarm",
            "can_complete_tasks",
            "tool_format",
            "exclude_tools",
        ),
        MAILSwarm: (
            "name",
            "version",
            "agents",
            "actions",
            "entrypoint",
            "user_id",
            "user_role",
            "swarm_registry",
            "enable_interswarm",
            "breakpoint_tools",
            "exclude_tools",
            "task_message_limit",
            "description",
            "keywords",
            "enable_db_agent_histories",
            "print_llm_streams",
        ),
        MAILSwarmTemplate: (
            "name",
            "version",
            "agents",
            "actions",
            "entrypoint",
            "enable_interswarm",
            "breakpoint_tools",
            "exclude_tools",
            "task_message_limit",
            "description",
            "keywords",
            "public",
            "enable_db_agent_histories",
        ),
        MAILRuntime: (
            "agents",
            "actions",
            "user_id",
            "user_role",
            "swarm_name",
            "entrypoint",
            "swarm_registry",
            "enable_interswarm",
            "breakpoint_tools",
            "exclude_tools",
            "enable_db_agent_histories",
            "print_llm_streams",
        ),
        SwarmRegistry: (
            "local_swarm_name",
            "local_base_url",
            "persistence_file",
            "local_swarm_description",
            "local_swarm_keywords",
            "local_swarm_public",
        ),
    }
    for cls, params in documented.items():
        accepted = list(inspect.signature(cls).parameters)
        # In the documented order, so positional calls keep working.
        assert accepted[: len(params)] == list(params), cls.__name__


# ------------------------------------------------------------------------------ 3: swarms.json


def test_swarms_json_exports_the_original_names() -> None:
    import mail.swarms_json
    import mail.swarms_json.utils

    original_all = (
        "SwarmsJSONAction",
        "SwarmsJSONAgent",
        "SwarmsJSONFile",
        "SwarmsJSONSwarm",
        "build_action_from_swarms_json",
        "build_agent_from_swarms_json",
        "build_swarm_from_swarms_json",
        "build_swarms_from_swarms_json",
        "load_swarms_json_from_file",
        "load_swarms_json_from_string",
    )
    for name in original_all:
        assert name in mail.swarms_json.__all__, name
        assert hasattr(mail.swarms_json.utils, name), name
    for name in (
        "validate_swarm_from_swarms_json",
        "validate_agent_from_swarms_json",
        "validate_action_from_swarms_json",
    ):
        assert callable(getattr(mail.swarms_json.utils, name))
    assert "swarms" in mail.swarms_json.SwarmsJSONFile.__annotations__


def test_swarms_json_helpers_load_validate_and_build(tmp_path: Path) -> None:
    from mail.swarms_json.utils import (
        build_action_from_swarms_json,
        build_agent_from_swarms_json,
        build_swarm_from_swarms_json,
        build_swarms_from_swarms_json,
        load_swarms_json_from_file,
        load_swarms_json_from_string,
    )

    document = swarms_document()
    loaded = load_swarms_json_from_string(json.dumps(document))
    assert loaded == {"swarms": document}
    path = tmp_path / "swarms.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    assert load_swarms_json_from_file(str(path)) == {"swarms": document}

    [swarm] = build_swarms_from_swarms_json(loaded["swarms"])
    assert swarm["name"] == "compat"
    assert swarm["breakpoint_tools"] == [] and swarm["enable_interswarm"] is False
    helper = swarm["agents"][1]
    assert helper["tool_format"] == "responses" and helper["actions"] == []
    assert helper["enable_entrypoint"] is False and helper["can_complete_tasks"] is False
    assert build_swarm_from_swarms_json(document[0])["agents"][0]["actions"] == ["lookup"]
    agent = build_agent_from_swarms_json(document[0]["agents"][1])
    assert agent["exclude_tools"] == [] and agent["enable_interswarm"] is False
    action = build_action_from_swarms_json(document[0]["actions"][0])
    assert action["function"] == "python::support.scripted_agents:echo_action"

    # Loading validates: a broken swarm is a ValueError naming what is wrong.
    broken = [{**document[0], "entrypoint": "supervsor"}]
    with pytest.raises(ValueError, match="entrypoint 'supervsor' does not match any agent"):
        load_swarms_json_from_string(json.dumps(broken))
    path.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(ValueError, match="Did you mean 'supervisor'"):
        load_swarms_json_from_file(str(path))
    with pytest.raises(ValueError, match="must contain a list of swarms"):
        load_swarms_json_from_string(json.dumps(document[0]))
    with pytest.raises(ValueError, match="agent candidate must contain a 'factory' field"):
        build_agent_from_swarms_json({"name": "x"})


# ------------------------------------------------------------------------------ 6: from_swarm_json


@pytest.mark.parametrize("field", ["name", "description", "parameters", "function"])
def test_action_from_swarm_json_names_a_missing_field(field: str) -> None:
    entry = dict(swarms_document()[0]["actions"][0])
    assert MAILAction.from_swarm_json(json.dumps(entry)).name == "lookup"
    del entry[field]
    with pytest.raises(ValueError) as info:
        MAILAction.from_swarm_json(json.dumps(entry))
    assert str(info.value) == f"action candidate must contain a '{field}' field"


@pytest.mark.parametrize(
    ("field", "article"),
    [("name", "a"), ("factory", "a"), ("comm_targets", "a"), ("agent_params", "an")],
)
def test_agent_template_from_swarm_json_names_a_missing_field(field: str, article: str) -> None:
    entry = dict(swarms_document()[0]["agents"][1])
    assert MAILAgentTemplate.from_swarm_json(json.dumps(entry)).name == "helper"
    del entry[field]
    with pytest.raises(ValueError) as info:
        MAILAgentTemplate.from_swarm_json(json.dumps(entry))
    assert str(info.value) == f"agent candidate must contain {article} '{field}' field"


def test_from_swarms_json_builds_from_parsed_entries() -> None:
    from mail.swarms_json.utils import build_action_from_swarms_json

    action = MAILAction.from_swarms_json(
        build_action_from_swarms_json(swarms_document()[0]["actions"][0])
    )
    agent = MAILAgentTemplate.from_swarms_json(
        {**swarms_document()[0]["agents"][0]}, actions_by_name={"lookup": action}
    )
    assert agent.actions == [action]


# ------------------------------------------------------------------------------ 7: registry


def test_migrate_auth_tokens_to_env_refs_takes_env_var_prefix_and_returns_none(
    tmp_path: Path,
) -> None:
    path = tmp_path / "registry.json"
    path.write_text(
        json.dumps(
            {
                "local_swarm_name": "alpha",
                "local_base_url": "http://127.0.0.1:9",
                "endpoints": {
                    name: {
                        "swarm_name": name,
                        "base_url": f"http://127.0.0.1:9/{name}",
                        "version": "1.3",
                        "auth_token_ref": f"${{SWARM_AUTH_TOKEN_{name.upper()}}}",
                        "last_seen": None,
                        "is_active": True,
                        "volatile": False,
                    }
                    for name in ("beta", "gamma")
                },
            }
        ),
        encoding="utf-8",
    )
    registry = SwarmRegistry("alpha", "http://127.0.0.1:9", str(path))
    beta = registry.get_swarm_endpoint("beta")
    gamma = registry.get_swarm_endpoint("gamma")
    assert beta is not None and gamma is not None
    beta["auth_token_ref"] = "literal-beta"  # a literal, as an old registry file held

    assert registry.migrate_auth_tokens_to_env_refs(env_var_prefix="COMPAT_TOKEN") is None
    assert beta["auth_token_ref"] == "${COMPAT_TOKEN_BETA}"
    assert registry.get_resolved_auth_token("beta") == "literal-beta"  # usable until restart
    assert "literal-beta" not in path.read_text(encoding="utf-8")

    gamma["auth_token_ref"] = "literal-gamma"
    assert registry.migrate_auth_tokens_to_env_refs("POSITIONAL") is None
    assert gamma["auth_token_ref"] == "${POSITIONAL_GAMMA}"
    gamma["auth_token_ref"] = "literal-gamma-2"
    assert registry.migrate_auth_tokens_to_env_refs(prefix="OURS") is None  # our keyword
    # Ours, under its own name: what was moved, so the caller knows what to export.
    gamma["auth_token_ref"] = "literal-gamma-3"
    assert registry.migrate_auth_tokens(prefix="MINE") == {"gamma": "MINE_GAMMA"}


# ------------------------------------------------------------------------------ more of v1.3


def test_action_decorator_keeps_its_model_and_agent_cores_answer_access() -> None:
    from mail import action

    class Where(BaseModel):
        city: str

    @action(model=Where, description="Say where.")
    async def where(payload: Where) -> str:
        return payload.city

    assert where.parameters_model is Where
    assert where.callback is not None and where.callback.__name__ == "where"

    agent = template(actions=[HUMAN_REVIEW], supervisor_actions=[HUMAN_REVIEW]).instantiate(
        instance_params={}, user_id="u-compat"
    )
    core = agent.agents[0].to_core()
    assert core.can_access_action("human_review") and not core.can_access_action("other")
    assert core.can_access_action_or_tool("task_complete")
    assert not agent.agents[1].to_core().can_access_action_or_tool("task_complete")


def test_swarms_json_cross_check_messages() -> None:
    from mail.swarms_json.utils import validate_swarm_from_swarms_json

    swarm = swarms_document()[0]
    no_entry = {**swarm, "agents": [{**a, "enable_entrypoint": False} for a in swarm["agents"]]}
    with pytest.raises(ValueError, match="no agent has 'enable_entrypoint' set to true"):
        validate_swarm_from_swarms_json(no_entry)
    no_completer = {
        **swarm,
        "agents": [{**a, "can_complete_tasks": False} for a in swarm["agents"]],
    }
    with pytest.raises(ValueError, match="no agent has 'can_complete_tasks' set to true"):
        validate_swarm_from_swarms_json(no_completer)


V13_ALL: dict[str, tuple[str, ...]] = {
    "mail": (
        "AgentToolCall",
        "MAILAction",
        "MAILAgent",
        "MAILAgentTemplate",
        "MAILBroadcast",
        "MAILInterrupt",
        "MAILInterswarmMessage",
        "MAILMessage",
        "MAILRequest",
        "MAILResponse",
        "MAILRuntime",
        "MAILSwarm",
        "MAILSwarmTemplate",
        "action",
    ),
    "mail.net": ("InterswarmRouter", "SwarmRegistry"),
    "mail.config": ("ClientConfig", "ServerConfig", "SwarmConfig"),
    "mail.factories": (
        "ActionAgentFunction",
        "AgentFunction",
        "LiteLLMActionAgentFunction",
        "LiteLLMAgentFunction",
        "LiteLLMSupervisorFunction",
        "SupervisorFunction",
        "action_agent_factory",
        "base_agent_factory",
        "supervisor_factory",
    ),
    "mail.utils": (
        "caller_is_admin",
        "caller_is_admin_or_user",
        "caller_is_agent",
        "caller_is_user",
        "export",
        "extract_token",
        "extract_token_info",
        "get_langmem_store",
        "get_loggers",
        "get_protocol_version",
        "get_token_info",
        "get_version",
        "init_logger",
        "login",
        "read_python_string",
        "require_debug",
        "resolve_prefixed_string_references",
        "serialize_mail_value",
        "target_address_is_interswarm",
    ),
    "mail.stdlib.fs": (
        "create_directory",
        "delete_file",
        "read_directory",
        "read_file",
        "write_file",
    ),
    "mail.stdlib.http": (
        "http_delete",
        "http_get",
        "http_head",
        "http_options",
        "http_patch",
        "http_post",
        "http_put",
    ),
    "mail.stdlib.interswarm": ("get_swarm_health", "get_swarm_registry", "ping_swarm"),
    "mail.stdlib.mcp": (
        "mcp_call_tool",
        "mcp_get_prompt",
        "mcp_list_prompts",
        "mcp_list_resources",
        "mcp_list_tools",
        "mcp_ping",
        "mcp_read_resource",
    ),
    "mail.stdlib.openai": (
        "OpenAIChatCompletionsAgentFunction",
        "OpenAIChatCompletionsSupervisorFunction",
        "OpenAIResponsesAgentFunction",
        "OpenAIResponsesSupervisorFunction",
    ),
}


@pytest.mark.parametrize("module", sorted(V13_ALL))
def test_every_name_of_the_v13_all_lists_is_importable(module: str) -> None:
    import importlib

    imported = importlib.import_module(module)
    missing = [name for name in V13_ALL[module] if getattr(imported, name, None) is None]
    assert missing == []


def test_v13_utils_helpers() -> None:
    from mail.utils import export, get_protocol_version, get_version, serialize_mail_value
    from mail.version import PROTOCOL_VERSION, __version__

    assert get_version() == __version__ and get_protocol_version() == PROTOCOL_VERSION
    assert serialize_mail_value({"a": (1, b"x"), "id": 3}, exclude_keys={"id"}) == {"a": [1, "x"]}
    exported = json.loads(export([template(actions=[HUMAN_REVIEW])]))
    assert exported["n"] == 1
    [swarm] = exported["swarms"]
    assert swarm["name"] == "compat" and swarm["entrypoint"] == "supervisor"
    assert [a["name"] for a in swarm["agents"]] == ["supervisor", "helper"]
    assert swarm["actions"][0]["name"] == "human_review"


# ------------------------------------------------------------------------------ error types


def test_action_decorator_and_loaders_raise_v13s_error_types() -> None:
    from mail import MAILSwarmTemplate, action
    from mail.swarms_json import load_swarms_json_from_string

    class Query(BaseModel):
        q: str

    with pytest.raises(ValueError, match="exactly one of"):

        @action(description="x", model=Query, parameters={"type": "object"})
        async def both(payload: Query) -> str:
            return payload.q

    with pytest.raises(ValueError, match="exactly one of"):

        @action(description="x")
        async def neither(payload: dict[str, Any]) -> str:
            return ""

    with pytest.raises(TypeError, match="BaseModel"):
        action(description="x", model=int)  # type: ignore[arg-type]  # refused before decorating

    for load in (load_swarms_json_from_string, MAILSwarmTemplate.from_swarm_json):
        with pytest.raises(json.JSONDecodeError) as info:
            load("{bad")
        assert "is not valid JSON" in str(info.value)


def test_bad_json_file_is_a_json_decode_error(tmp_path: Path) -> None:
    from mail.swarms_json import load_swarms_json_from_file

    path = tmp_path / "swarms.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(json.JSONDecodeError, match="swarms.json file at .* is not valid JSON"):
        load_swarms_json_from_file(str(path))


# ------------------------------------------------------------------------------ keyword names


def test_v13_keyword_names_are_accepted() -> None:
    from mail.core import format_agent_address
    from mail.swarms_json.utils import (
        build_action_from_swarms_json,
        build_agent_from_swarms_json,
        build_swarm_from_swarms_json,
        build_swarms_from_swarms_json,
        validate_action_from_swarms_json,
        validate_agent_from_swarms_json,
        validate_swarm_from_swarms_json,
    )

    [entry] = swarms_document()
    assert MAILSwarmTemplate.from_swarm_json(json_dump=json.dumps(entry)).name == "compat"
    assert MAILSwarmTemplate.from_swarms_json(swarm_data=entry).name == "compat"
    agent = entry["agents"][1]
    assert MAILAgentTemplate.from_swarm_json(json_dump=json.dumps(agent)).name == "helper"
    assert MAILAction.from_swarm_json(json_dump=json.dumps(entry["actions"][0])).name == "lookup"
    assert build_swarms_from_swarms_json(contents=[entry])[0]["name"] == "compat"
    assert build_swarm_from_swarms_json(swarm_candidate=entry)["name"] == "compat"
    assert build_agent_from_swarms_json(agent_candidate=agent)["name"] == "helper"
    assert build_action_from_swarms_json(action_candidate=entry["actions"][0])["name"] == "lookup"
    validate_swarm_from_swarms_json(swarm_candidate=entry)
    validate_agent_from_swarms_json(agent_candidate=agent)
    validate_action_from_swarms_json(action_candidate=entry["actions"][0])
    assert format_agent_address(agent_name="a", swarm_name="s")["address"] == "a@s"
    assert format_agent_address("a")["address"] == "a"


def test_mail_client_takes_url_as_v13_named_it() -> None:
    from mail.client import MAILClient

    assert MAILClient(url="http://127.0.0.1:9/").base_url == "http://127.0.0.1:9"
    assert MAILClient("http://127.0.0.1:9").base_url == "http://127.0.0.1:9"
    assert MAILClient(base_url="http://127.0.0.1:9").base_url == "http://127.0.0.1:9"
    with pytest.raises(TypeError, match="not both"):
        MAILClient("http://a", url="http://b")
    with pytest.raises(ValueError, match="non-empty URL"):
        MAILClient()


# ------------------------------------------------------------------------------ positional order


def test_start_server_takes_v13_positional_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    from mail import hooks

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(hooks, "_server_starter", lambda template, **options: calls.append(options))
    template().start_server(8001, "127.0.0.1", False, 3000, None, False)
    assert calls == [{"port": 8001, "host": "127.0.0.1", "launch_ui": False, "open_browser": False}]


def test_factories_take_v13_positional_order() -> None:
    from mail.factories import (
        LiteLLMActionAgentFunction,
        LiteLLMSupervisorFunction,
        SupervisorFunction,
        action_agent_factory,
        base_agent_factory,
        supervisor_factory,
    )
    from mail.stdlib.openai import (
        OpenAIChatCompletionsSupervisorFunction,
        OpenAIResponsesSupervisorFunction,
    )

    wiring = ("name", "comm_targets", "tools")
    litellm = (*wiring, "llm", "system", "user_token", "enable_entrypoint", "enable_interswarm")
    for cls in (LiteLLMSupervisorFunction, LiteLLMActionAgentFunction):
        assert list(inspect.signature(cls).parameters)[: len(litellm)] == list(litellm)
    supervisor_order = (*wiring, "can_complete_tasks", "enable_entrypoint", "enable_interswarm")
    assert list(inspect.signature(SupervisorFunction).parameters)[:6] == list(supervisor_order)
    openai_order = ("name", "comm_targets", "model", "tools", "can_complete_tasks")
    for cls in (OpenAIChatCompletionsSupervisorFunction, OpenAIResponsesSupervisorFunction):
        assert list(inspect.signature(cls).parameters)[:5] == list(openai_order)

    sup = LiteLLMSupervisorFunction("boss", ["helper"], [], "mail/demo", "Lead.", "tok-1")
    assert (sup.system, sup.user_token, sup.can_complete_tasks) == ("Lead.", "tok-1", True)
    worker = LiteLLMActionAgentFunction("w", ["boss"], [], "mail/demo", "Work.", "", True)
    assert worker.system == "Work." and worker.enable_entrypoint is True

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for factory, name in (
            (base_agent_factory, "base_agent"),
            (action_agent_factory, "action"),
            (supervisor_factory, "supervisor"),
        ):
            run = factory(["peer"], [], "tok-2", "mail/demo", "Hi.")
            built = run._mail_agent  # type: ignore[attr-defined]
            assert (built.name, built.comm_targets, built.system) == (name, ["peer"], "Hi.")
            assert built.user_token == "tok-2"
        with pytest.raises(TypeError, match="multiple values for argument 'llm'"):
            base_agent_factory(["peer"], [], "tok", "mail/demo", llm="mail/demo")
