"""Example agents, their actions, the root swarms.json, the game and the demo scripts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mail import MAILAgentTemplate, MAILSwarmTemplate
from mail.examples import EXAMPLES
from mail.examples.game import NumberGuessGame
from mail.examples.game.actions import GameRuleError, record_guess
from mail.examples.math_dummy.actions import calculate_expression
from mail.examples.math_dummy.evaluator import ExpressionError, evaluate
from mail.examples.weather_dummy.actions import forecast, get_weather_forecast
from mail.factories import (
    LiteLLMActionAgentFunction,
    LiteLLMAgentFunction,
    LiteLLMSupervisorFunction,
)
from mail.swarms_json import read_swarms_json_file, validate_swarm_from_swarms_json

REPO = Path(__file__).resolve().parent.parent
SWARMS_JSON = REPO / "swarms.json"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 + 3 * 4", 14),
        ("(1 + 2) ** 3", 27),
        ("2^10", 1024),
        ("-7 // 2", -4),
        ("sqrt(16) + abs(-2)", 6.0),
        ("10 / 4", 2.5),
    ],
)
def test_evaluator_computes_arithmetic(expression: str, value: float):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('true')", "unknown function|unsupported"),
        ("(1).__class__", "unsupported syntax"),
        ("9 ** 9 ** 9", "exponents above"),
        ("1 / 0", "division by zero"),
        ("open('x')", "unknown function 'open'"),
        ("", "empty"),
        ("2 +", "not a valid arithmetic expression"),
        ("'a' * 3", "only numbers"),
    ],
)
def test_evaluator_refuses_anything_but_arithmetic(expression: str, reason: str):
    with pytest.raises(ExpressionError, match=reason):
        evaluate(expression)


async def test_calculate_expression_action_formats_results():
    assert (
        await calculate_expression.function({"expression": "12 * (3 + 4)"}) == "12 * (3 + 4) = 84"
    )
    assert (
        await calculate_expression.function({"expression": "10 / 3", "precision": 2})
        == "10 / 3 = 3.33"
    )
    with pytest.raises(ValueError, match="precision"):
        await calculate_expression.function({"expression": "1", "precision": 40})


async def test_weather_forecast_is_deterministic_fake_data():
    def weather(data: dict) -> tuple:
        return tuple(v for k, v in data.items() if k != "location")

    assert forecast("Paris", 1) == forecast("Paris", 1)
    assert weather(forecast("Paris", 1)) == weather(forecast(" paris ", 1))
    days = {weather(forecast("Paris", d)) for d in range(5)}
    assert len(days) > 1  # the data varies by day, not a constant
    text = await get_weather_forecast.function(
        {"location": "Paris", "days_ahead": 1, "metric": False}
    )
    assert text.startswith("Forecast for Paris (tomorrow):") and "°F" in text
    assert "Synthetic demo data" in text
    with pytest.raises(ValueError, match="location"):
        await get_weather_forecast.function({"location": ""})


@pytest.mark.parametrize(
    ("name", "factory_cls", "action_names", "supervisor"),
    [
        ("supervisor", LiteLLMSupervisorFunction, [], True),
        ("weather", LiteLLMActionAgentFunction, ["get_weather_forecast"], False),
        ("math", LiteLLMActionAgentFunction, ["calculate_expression"], False),
        ("consultant", LiteLLMAgentFunction, [], False),
        ("analyst", LiteLLMAgentFunction, [], False),
    ],
)
def test_examples_load_with_from_example(name, factory_cls, action_names, supervisor):
    spec = EXAMPLES[name]
    assert spec.agent_params["system"].startswith(f"You are {name}")
    template = MAILAgentTemplate.from_example(name, comm_targets=["supervisor"])
    assert [a.name for a in template.actions] == action_names
    assert template.can_complete_tasks is supervisor and template.enable_entrypoint is supervisor
    agent = template.instantiate({"user_token": "t"})
    assert isinstance(agent.function, factory_cls)


def test_root_swarms_json_validates_and_both_swarms_instantiate():
    swarms = read_swarms_json_file(SWARMS_JSON)
    by_name = {s["name"]: s for s in swarms}
    # email-review: docs/review.md; local: docs/agents-and-factories.md
    assert set(by_name) == {"example", "local", "demo", "email-review"}
    for swarm in swarms:
        validate_swarm_from_swarms_json(swarm)
    for name in ("example", "local", "demo"):
        assert [a["name"] for a in by_name[name]["agents"]] == ["supervisor", "weather", "math"]
    assert {a["agent_params"]["llm"] for a in by_name["demo"]["agents"]} == {"mail/demo"}
    assert {a["agent_params"]["use_proxy"] for a in by_name["demo"]["agents"]} == {False}
    assert all(a["agent_params"]["llm"].startswith("openai/") for a in by_name["example"]["agents"])
    local = MAILSwarmTemplate.from_swarm_json_file("local", str(SWARMS_JSON))
    assert {a.tool_format for a in local.agents} == {"completions"}  # its api_base says so
    for name in ("example", "local", "demo"):
        template = MAILSwarmTemplate.from_swarm_json_file(name, str(SWARMS_JSON))
        swarm = template.instantiate({"user_token": "t"}, user_id="u", print_llm_streams=False)
        assert set(swarm.agents_by_name) == {"supervisor", "weather", "math"}
        weather_fn = swarm.agents_by_name["weather"].function
        assert isinstance(weather_fn, LiteLLMActionAgentFunction)
        # The runtime's print_llm_streams switch reaches the inner LiteLLM functions.
        assert weather_fn.action_agent_fn.print_llm_streams is False
        assert swarm.agents_by_name["supervisor"].function.supervisor_fn.print_llm_streams is False


async def test_demo_swarm_answers_offline_in_process():
    template = MAILSwarmTemplate.from_swarm_json_file("demo", str(SWARMS_JSON))
    swarm = template.instantiate({"user_token": "t"}, user_id="u", print_llm_streams=False)
    runner = asyncio.create_task(swarm.run_continuous())
    try:
        response, events = await asyncio.wait_for(
            swarm.post_message(body="What is 6 * 7?", show_events=True), 60
        )
    finally:
        await swarm.shutdown()
        await asyncio.wait_for(runner, 10)
    assert response["message"]["subject"] == "::task_complete::"
    assert response["message"]["body"] == "6 * 7 = 42"
    calls = [e.data["extra_data"]["tool_name"] for e in events if e.event == "tool_call"]
    assert calls == ["send_request", "calculate_expression", "send_response", "task_complete"]


async def test_game_actions_enforce_the_rules():
    game = NumberGuessGame()
    game.round_open = True
    assert await record_guess(game, {"player_name": "Alice", "guess": 5}) == (
        "Recorded Alice's guess for round 0: 5"
    )
    assert game.guesses == {"Alice": 5}
    with pytest.raises(GameRuleError, match="unknown player 'Zed'"):
        await record_guess(game, {"player_name": "Zed", "guess": 5})
    with pytest.raises(GameRuleError, match="between 1 and 20"):
        await record_guess(game, {"player_name": "Bob", "guess": 99})
    game.round_open = False
    with pytest.raises(GameRuleError, match="no round"):
        await record_guess(game, {"player_name": "Bob", "guess": 3})


async def test_manual_mode_game_runs_to_completion_with_private_and_public_steps():
    game = NumberGuessGame(rounds=2, seed=3)
    result = await asyncio.wait_for(game.run(), 120)
    transcript = result.transcript
    # Private guesses go only to the GameMaster; announcements and table talk go to everyone.
    private = [line for line in transcript if "-> GameMaster:" in line]
    assert len(private) == 2 * len(game.players)
    assert all("I guess" in line for line in private)
    # The GameMaster saw the buffered private guesses and recorded each through its action.
    recorded = [line for line in transcript if line.startswith("GameMaster -> everyone: Done.")]
    assert len(recorded) == 2 and all(line.count("Recorded") == 3 for line in recorded)
    assert sum(result.scores.values()) >= 2
    assert result.winners and all(w in game.players for w in result.winners)
    assert transcript[-1].startswith("GameMaster -> everyone: Final scores:")


def _offline_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and not k.startswith("LITELLM_PROXY")
    }
    env["PYTHONPATH"] = str(REPO / "src")
    return env


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("run_demo.py", "A (::task_complete::): 12 * (3 + 4) = 84"),
        ("game_demo.py", "Winner:"),
    ],
)
def test_demo_scripts_run_offline_without_api_keys(script: str, expected: str, tmp_path: Path):
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script)],
        cwd=tmp_path,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert expected in completed.stdout
    if script == "run_demo.py":
        assert completed.stdout.count("::task_complete::") == 3
        assert "Forecast for Paris (tomorrow)" in completed.stdout


def test_examples_spec_factories_resolve():
    for spec in EXAMPLES.values():
        module, _, attr = spec.factory.partition(":")
        imported = __import__(module, fromlist=[attr])
        assert callable(getattr(imported, attr))
    assert json.loads(SWARMS_JSON.read_text())  # well-formed JSON
