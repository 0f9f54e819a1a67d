"""v1.3.6's example packages and its root swarms.json run here (issue 41).

The original's own swarms.json names example agents, prompts and actions by import path
(``python::mail.examples.support.faq.actions:search_faq`` ...) and lists actions under
``action_imports``, which must resolve to `MAILAction` objects. tests/fixtures/v13_swarms.json
is our own file with the same swarms, import paths and action lists (the original's file is
not part of this repository); every swarm in it must load, run on the offline demo model, and
start `mail server` with a mail.toml shaped like the original's.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest

from mail import MAILAction, MAILSwarmTemplate
from server_fixtures import ServerProcess, free_port

pytestmark = pytest.mark.timeout(180)

V13_SWARMS = Path(__file__).parent / "fixtures" / "v13_swarms.json"

# The names each example package of v1.3.6 exported (its ``__all__`` lists).
V13_EXAMPLE_EXPORTS: dict[str, tuple[str, ...]] = {
    "mail.examples": (
        "factory_analyst_dummy",
        "factory_consultant_dummy",
        "factory_math_dummy",
        "factory_weather_dummy",
        "LiteLLMAnalystFunction",
        "LiteLLMConsultantFunction",
        "LiteLLMMathFunction",
        "LiteLLMWeatherFunction",
    ),
    "mail.examples.weather_dummy": (
        "factory_weather_dummy",
        "LiteLLMWeatherFunction",
        "WEATHER_SYSPROMPT",
        "action_get_weather_forecast",
        "get_weather_forecast",
        "weather_agent_params",
    ),
    "mail.examples.math_dummy": (
        "action_calculate_expression",
        "calculate_expression",
        "factory_math_dummy",
        "LiteLLMMathFunction",
        "MATH_SYSPROMPT",
        "math_agent_params",
    ),
    "mail.examples.analyst_dummy": (
        "factory_analyst_dummy",
        "LiteLLMAnalystFunction",
        "ANALYST_SYSPROMPT",
        "analyst_agent_params",
    ),
    "mail.examples.consultant_dummy": (
        "factory_consultant_dummy",
        "LiteLLMConsultantFunction",
        "consultant_agent_params",
        "CONSULTANT_SYSPROMPT",
    ),
    "mail.examples.supervisor": ("SUPERVISOR_SYSPROMPT", "supervisor_agent_params"),
    "mail.examples.weather_dummy.types": ("action_get_weather_forecast",),
    "mail.examples.math_dummy.types": ("action_calculate_expression",),
    "mail.examples.support": (
        "LiteLLMCoordinatorFunction",
        "LiteLLMFaqFunction",
        "LiteLLMClassifierFunction",
        "LiteLLMSentimentFunction",
        "search_faq",
        "classify_ticket",
        "analyze_sentiment",
        "create_escalation",
    ),
    "mail.examples.support.coordinator": ("LiteLLMCoordinatorFunction", "SYSPROMPT"),
    "mail.examples.support.faq": ("LiteLLMFaqFunction", "search_faq", "SYSPROMPT"),
    "mail.examples.support.classifier": (
        "LiteLLMClassifierFunction",
        "classify_ticket",
        "SYSPROMPT",
    ),
    "mail.examples.support.sentiment": (
        "LiteLLMSentimentFunction",
        "analyze_sentiment",
        "create_escalation",
        "SYSPROMPT",
    ),
    "mail.examples.data_analysis": (
        "LiteLLMAnalystFunction",
        "LiteLLMProcessorFunction",
        "LiteLLMStatisticsFunction",
        "LiteLLMReporterFunction",
        "generate_sample_data",
        "parse_csv",
        "calculate_statistics",
        "run_correlation",
        "format_report",
    ),
    "mail.examples.data_analysis.analyst": ("LiteLLMAnalystFunction", "SYSPROMPT"),
    "mail.examples.data_analysis.processor": (
        "LiteLLMProcessorFunction",
        "generate_sample_data",
        "parse_csv",
        "SYSPROMPT",
    ),
    "mail.examples.data_analysis.statistics": (
        "LiteLLMStatisticsFunction",
        "calculate_statistics",
        "run_correlation",
        "SYSPROMPT",
    ),
    "mail.examples.data_analysis.reporter": (
        "LiteLLMReporterFunction",
        "format_report",
        "SYSPROMPT",
    ),
    "mail.examples.research": (
        "LiteLLMResearcherFunction",
        "LiteLLMSearcherFunction",
        "LiteLLMVerifierFunction",
        "LiteLLMSummarizerFunction",
        "search_topic",
        "extract_facts",
        "verify_claim",
        "rate_confidence",
        "summarize_text",
        "create_bibliography",
    ),
    "mail.examples.research.researcher": ("LiteLLMResearcherFunction", "SYSPROMPT"),
    "mail.examples.research.searcher": (
        "LiteLLMSearcherFunction",
        "search_topic",
        "extract_facts",
        "SYSPROMPT",
    ),
    "mail.examples.research.verifier": (
        "LiteLLMVerifierFunction",
        "verify_claim",
        "rate_confidence",
        "SYSPROMPT",
    ),
    "mail.examples.research.summarizer": (
        "LiteLLMSummarizerFunction",
        "summarize_text",
        "create_bibliography",
        "SYSPROMPT",
    ),
}

# v1.3's example actions: name -> (required arguments, all arguments), as the tools showed them.
V13_ACTIONS: dict[str, tuple[set[str], set[str]]] = {
    "get_weather_forecast": ({"location"}, {"location", "days_ahead", "metric"}),
    "calculate_expression": ({"expression"}, {"expression", "precision"}),
    "search_faq": ({"query"}, {"query", "max_results"}),
    "classify_ticket": ({"text"}, {"text"}),
    "analyze_sentiment": ({"text"}, {"text"}),
    "create_escalation": ({"ticket_id", "reason", "priority"}, {"ticket_id", "reason", "priority"}),
    "generate_sample_data": ({"dataset"}, {"dataset", "rows"}),
    "parse_csv": ({"data"}, {"data"}),
    "calculate_statistics": ({"data"}, {"data", "metrics"}),
    "run_correlation": ({"x", "y"}, {"x", "y"}),
    "format_report": ({"title", "sections"}, {"title", "sections"}),
    "search_topic": ({"query"}, {"query", "source"}),
    "extract_facts": ({"text"}, {"text"}),
    "verify_claim": ({"claim"}, {"claim", "sources"}),
    "rate_confidence": ({"claim", "evidence"}, {"claim", "evidence"}),
    "summarize_text": ({"text"}, {"text", "max_length"}),
    "create_bibliography": ({"sources"}, {"sources", "style"}),
}

QUESTIONS = {
    "example": "What is 12 * 7?",
    "example-no-proxy": "What's the weather in Oslo tomorrow?",
    "swarm-alpha": "What is 2 + 2?",
    "swarm-beta": "Should we open a shop in Porto?",
    "support": "How do I reset my password?",
    "data-analysis": "Generate sample sales data and describe it.",
    "research": "Find material on glaciers and summarize it.",
}


def v13_document() -> list[dict[str, Any]]:
    return json.loads(V13_SWARMS.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ the packages


@pytest.mark.parametrize("module", sorted(V13_EXAMPLE_EXPORTS))
def test_example_packages_export_their_v13_names(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [n for n in V13_EXAMPLE_EXPORTS[module] if getattr(imported, n, None) is None]
    assert missing == []


def test_example_actions_are_mail_actions_as_swarms_json_imports_them() -> None:
    from mail.examples import weather_dummy
    from mail.examples.math_dummy.actions import calculate_expression
    from mail.examples.weather_dummy.actions import get_weather_forecast
    from mail.utils import read_python_string

    for name, (required, allowed) in V13_ACTIONS.items():
        module = next(m for m in V13_EXAMPLE_EXPORTS if name in V13_EXAMPLE_EXPORTS[m])
        action = getattr(importlib.import_module(module), name)
        assert isinstance(action, MAILAction), name
        assert action.name == name
        assert set(action.parameters.get("required", [])) == required, name
        assert set(action.parameters["properties"]) == allowed, name
    assert weather_dummy.action_get_weather_forecast is get_weather_forecast
    path = "python::mail.examples.math_dummy.actions:calculate_expression"
    assert read_python_string(path) is calculate_expression

    text = asyncio.run(get_weather_forecast.function({"location": "Oslo"}))
    assert text.startswith("Forecast for Oslo")
    assert asyncio.run(calculate_expression.function({"expression": "6 * 7"})) == "6 * 7 = 42"


def test_example_function_factories_take_v13_positional_arguments() -> None:
    from mail.examples import factory_math_dummy, weather_dummy
    from mail.examples.supervisor import SUPERVISOR_SYSPROMPT, supervisor_agent_params

    with pytest.warns(DeprecationWarning, match="factory_math_dummy"):
        run = factory_math_dummy(["supervisor"], [], "token-1", "mail/demo", "Do sums.")
    agent = run._mail_agent  # type: ignore[attr-defined]
    assert (agent.name, agent.comm_targets, agent.user_token) == ("math", ["supervisor"], "token-1")
    assert (agent.llm, agent.system) == ("mail/demo", "Do sums.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        named = weather_dummy.factory_weather_dummy(
            comm_targets=[], tools=[], user_token="", llm="mail/demo", system="", name="w2"
        )
    assert named._mail_agent.name == "w2"  # type: ignore[attr-defined]
    assert supervisor_agent_params["system"] == SUPERVISOR_SYSPROMPT
    assert set(weather_dummy.weather_agent_params) == {"llm", "system"}


# ------------------------------------------------------------------------------ the swarms.json


def test_v13_swarms_json_loads_every_swarm(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its proxy swarms (use_proxy true by default) need the proxy's URL: checked when a swarm
    # is built here, at its first message in v1.3 (docs/differences.md).
    monkeypatch.setenv("LITELLM_PROXY_API_BASE", "http://127.0.0.1:4000")
    document = v13_document()
    assert [s["name"] for s in document] == list(QUESTIONS)
    for entry in document:
        template = MAILSwarmTemplate.from_swarm_json_file(entry["name"], str(V13_SWARMS))
        assert [a.name for a in template.agents] == [a["name"] for a in entry["agents"]]
        imported = [path.rsplit(":", 1)[1] for path in entry.get("action_imports", [])]
        assert [a.name for a in template.actions] == imported
        for agent, raw in zip(template.agents, entry["agents"], strict=True):
            assert [a.name for a in agent.actions] == raw.get("actions", [])
        swarm = template.instantiate(instance_params={"user_token": "t"}, user_id="u-v13")
        assert swarm.entrypoint == entry["entrypoint"]


@pytest.mark.parametrize("name", list(QUESTIONS))
async def test_v13_swarms_run_on_the_offline_demo_model(name: str) -> None:
    [entry] = [s for s in v13_document() if s["name"] == name]
    for agent in entry["agents"]:
        agent["agent_params"]["llm"] = "mail/demo"
    swarm = MAILSwarmTemplate.from_swarms_json(entry).instantiate(
        instance_params={}, user_id="u-v13"
    )
    try:
        response, events = await asyncio.wait_for(
            swarm.post_message(body=QUESTIONS[name], show_events=True), 60
        )
    finally:
        await swarm.shutdown()
    assert response["message"]["subject"] == "::task_complete::", response["message"]["body"]
    assert events[-1].event == "task_complete"


def test_v13_swarms_json_and_mail_toml_start_mail_server(tmp_path: Path) -> None:
    shutil.copy(V13_SWARMS, tmp_path / "swarms.json")
    port = free_port()
    # The shape of v1.3's mail.toml: relative paths, its [server.settings] and [client] keys.
    (tmp_path / "mail.toml").write_text(
        f"""
[server]
port = {port}
host = "127.0.0.1"
reload = false
debug = false

[server.swarm]
name = "example-no-proxy"
source = "swarms.json"
registry = "registries/example-no-proxy.json"

[server.settings]
task_message_limit = 15
print_llm_streams = true

[client]
timeout = 3600.0
verbose = false
""",
        encoding="utf-8",
    )
    server = ServerProcess(tmp_path, port).start()
    try:
        root = httpx.get(f"{server.base_url}/", timeout=10)
        assert root.status_code == 200, server.logs()
        assert root.json()["swarm"]["name"] == "example-no-proxy"
        assert root.json()["swarm"]["entrypoint"] == "supervisor"
    finally:
        server.stop()
