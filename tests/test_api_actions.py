"""MAILAction and the @action decorator."""

from __future__ import annotations

import functools
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from mail import MAILAction, action
from support.scripted_agents import echo_action, tool_call


class WeatherArgs(BaseModel):
    """Get the weather for a city."""

    city: str = Field(description="The city")
    unit: Literal["celsius", "fahrenheit"] = "celsius"
    when: str = Field(description="When", json_schema_extra={"format": "date-time"})
    days: int | None = None


async def weather(args: dict[str, Any], prefix: str = "") -> str:
    return f"{prefix}{args['city']}: sunny"


async def run(act: MAILAction, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return await act.to_core().execute(tool_call(act.name, args))


# ------------------------------------------------------------------------------ construction


def test_constructor_resolves_function_references() -> None:
    by_string = MAILAction(
        "echo", "Echo", {"type": "object"}, "python::support.scripted_agents:echo_action"
    )
    assert by_string.function is echo_action
    assert by_string.function_ref == "python::support.scripted_agents:echo_action"
    without_prefix = MAILAction("e", "E", {}, "support.scripted_agents:echo_action")
    assert without_prefix.function is echo_action
    assert without_prefix.parameters == {"type": "object", "properties": {}}
    wrapped = MAILAction("again", "Again", {}, by_string)
    assert wrapped.function is echo_action


@pytest.mark.parametrize(
    ("args", "error", "fragment"),
    [
        (("", "d", {}, echo_action), ValueError, "name must be a non-empty string"),
        (("n", "  ", {}, echo_action), ValueError, "needs a non-empty description"),
        (("n", "d", {}, 42), TypeError, "must be callable"),
        (("n", "d", {}, "no_colon_here"), ValueError, "Expected 'module:object' format"),
        (("send_request", "d", {}, echo_action), ValueError, "name 'send_request' is reserved"),
        (("text_output", "d", {}, echo_action), ValueError, "handles 'text_output' itself"),
    ],
)
def test_constructor_rejects_bad_input(args: tuple[Any, ...], error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        MAILAction(*args)


def test_an_action_cannot_take_a_mail_tool_name() -> None:
    # The model would be offered the action's schema, and each call would run the MAIL tool.
    with pytest.raises(ValueError) as info:

        @action(parameters={"type": "object", "properties": {}})
        def task_complete(args: dict[str, Any]) -> str:
            """Finish."""
            return "done"

    assert str(info.value) == (
        "action name 'task_complete' is reserved: the runtime handles 'task_complete' itself (a "
        "MAIL tool, or a model's own output), so the action would never run; choose another "
        "name for the action"
    )


async def test_from_pydantic_model_positional_and_keyword_function() -> None:
    positional = MAILAction.from_pydantic_model(WeatherArgs, weather, "get_weather")
    assert positional.name == "get_weather"
    assert positional.description == "Get the weather for a city."
    assert "title" not in positional.parameters
    assert positional.parameters["required"] == ["city", "when"]
    assert positional.parameters["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]

    partial = functools.partial(weather, prefix="> ")
    keyword = MAILAction.from_pydantic_model(WeatherArgs, function=partial, description="Custom")
    assert keyword.name == "WeatherArgs" and keyword.description == "Custom"
    assert keyword.function is partial
    status, result = await run(keyword, {"city": "Oslo", "when": "now"})
    assert (status, result) == ("success", {"content": "> Oslo: sunny"})

    by_ref = MAILAction.from_pydantic_model(
        WeatherArgs, "python::support.scripted_agents:echo_action", name="echo"
    )
    assert by_ref.function is echo_action
    with pytest.raises(ValueError, match="needs a function"):
        MAILAction.from_pydantic_model(WeatherArgs)


@pytest.mark.parametrize("style", ["responses", "completions"])
def test_to_tool_dict_both_styles_keeps_enum_and_format(style: str) -> None:
    act = MAILAction.from_pydantic_model(WeatherArgs, weather, "get_weather")
    tool = act.to_tool_dict(style=style)  # type: ignore[arg-type]
    if style == "responses":
        assert set(tool) == {"type", "name", "description", "parameters", "strict"}
        spec = tool
    else:
        assert set(tool) == {"type", "function"}
        spec = tool["function"]
        assert set(spec) == {"name", "description", "parameters", "strict"}
    assert tool["type"] == "function"
    assert spec["name"] == "get_weather" and spec["strict"] is True
    assert spec["description"] == "Get the weather for a city."
    params = spec["parameters"]
    assert params["additionalProperties"] is False
    assert sorted(params["required"]) == ["city", "days", "unit", "when"]
    props = params["properties"]
    # Ours: enum and format survive (the original dropped them).
    assert props["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert props["when"]["format"] == "date-time"
    assert props["city"]["description"] == "The city"
    assert {"type": "null"} in props["days"]["anyOf"]


def test_to_tool_dict_handles_nested_objects_arrays_and_refs() -> None:
    class Point(BaseModel):
        x: int
        y: int

    class Shape(BaseModel):
        """A shape."""

        points: list[Point]
        meta: dict[str, Any] = {}
        kind: Literal["polygon", "line"]

    act = MAILAction.from_pydantic_model(Shape, echo_action, "draw")
    props = act.to_tool_dict()["parameters"]["properties"]
    assert props["kind"]["enum"] == ["polygon", "line"]
    assert props["points"]["type"] == "array"
    model = act.to_pydantic_model()
    parsed = model.model_validate({"points": [{"x": 1, "y": 2}], "kind": "line"})
    assert parsed.points[0].x == 1  # type: ignore[attr-defined]


def test_to_pydantic_model_enforces_the_schema() -> None:
    act = MAILAction.from_pydantic_model(WeatherArgs, weather, "get_weather")
    model = act.to_pydantic_model()
    ok = model.model_validate({"city": "Rome", "when": "2025-01-01T00:00:00Z"})
    assert ok.unit == "celsius" and ok.days is None  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        model.model_validate({"city": "Rome", "when": "x", "unit": "kelvin"})
    with pytest.raises(ValidationError):
        model.model_validate({"when": "x"})
    assert model.model_json_schema()["properties"]["when"]["format"] == "date-time"


def test_unsupported_schema_type_is_reported() -> None:
    act = MAILAction(
        "odd", "Odd", {"type": "object", "properties": {"x": {"type": "bogus"}}}, echo_action
    )
    with pytest.raises(ValueError, match="^action 'odd': parameter 'x' has unsupported JSON sch"):
        act.to_tool_dict()


def test_swarm_json_round_trip() -> None:
    data = {
        "name": "echo",
        "description": "Echo the input",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        "function": "python::support.scripted_agents:echo_action",
    }
    act = MAILAction.from_swarm_json(data)
    assert act.function is echo_action
    assert act.to_swarm_json() == data
    import json

    assert MAILAction.from_swarm_json(json.dumps(data)).to_swarm_json() == data


async def test_execute_catches_exceptions() -> None:
    async def broken(args: dict[str, Any]) -> str:
        raise KeyError("missing")

    act = MAILAction("broken", "Broken", {}, broken)
    assert await run(act, {}) == ("error", {"content": "failed to execute action tool: 'missing'"})


# ------------------------------------------------------------------------------ decorator


_EVALUATED_ANNOTATIONS = """
async def get_weather(args: WeatherArgs) -> str:
    \"\"\"Look up the weather.\"\"\"
    assert isinstance(args, WeatherArgs)
    return f"{args.city} in {args.unit}"
"""


def _function_with_evaluated_annotations() -> Any:
    # This module uses `from __future__ import annotations`; compile the function without
    # inheriting that flag so its annotation is the class object itself.
    namespace: dict[str, Any] = {"WeatherArgs": WeatherArgs}
    code = compile(_EVALUATED_ANNOTATIONS, "<actions>", "exec", dont_inherit=True)
    exec(code, namespace)
    return namespace["get_weather"]


async def test_decorator_takes_model_from_annotation_and_docstring() -> None:
    fn = _function_with_evaluated_annotations()
    assert fn.__annotations__["args"] is WeatherArgs
    get_weather = action(fn)
    assert isinstance(get_weather, MAILAction)
    assert get_weather.name == "get_weather"
    assert get_weather.description == "Look up the weather."
    assert get_weather.parameters["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert "title" not in get_weather.parameters
    status, result = await run(get_weather, {"city": "Lima", "when": "now"})
    assert (status, result) == ("success", {"content": "Lima in celsius"})


async def test_decorator_resolves_postponed_annotations() -> None:
    # Modules with `from __future__ import annotations` (like this one) see the annotation
    # as the string "WeatherArgs"; the decorator must still find the model.
    @action
    async def get_weather(args: WeatherArgs) -> str:
        """Look up the weather."""
        return f"{args.city} in {args.unit}"

    assert get_weather.parameters["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    status, result = await run(get_weather, {"city": "Lima", "when": "now"})
    assert (status, result) == ("success", {"content": "Lima in celsius"})


async def test_decorator_with_parameters_and_overrides_and_sync_function() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    @action(name="double", description="Double a number", parameters=schema)
    def doubler(args: dict[str, Any]) -> str:
        return str(args["n"] * 2)

    assert doubler.name == "double" and doubler.description == "Double a number"
    assert doubler.parameters == schema
    assert await run(doubler, {"n": 21}) == ("success", {"content": "42"})


async def test_decorator_with_model_argument() -> None:
    @action(model=WeatherArgs)
    async def forecast(args):  # type: ignore[no-untyped-def]
        """Forecast."""
        return args.city

    assert await run(forecast, {"city": "Kyiv", "when": "t"}) == ("success", {"content": "Kyiv"})


async def test_decorated_action_must_return_a_string() -> None:
    @action(model=WeatherArgs)
    async def count(args: WeatherArgs) -> str:
        """Count."""
        return 3  # type: ignore[return-value]

    status, result = await run(count, {"city": "x", "when": "y"})
    assert status == "error"
    assert (
        result["content"]
        == "failed to execute action tool: action count must return a str, got int"
    )


async def test_decorated_action_validates_its_input() -> None:
    @action(model=WeatherArgs)
    async def strict(args: WeatherArgs) -> str:
        """Strict."""
        return "never"

    status, result = await run(strict, {"city": "x", "when": "y", "unit": "kelvin"})
    assert status == "error"
    assert result["content"].startswith(
        "failed to execute action tool: invalid arguments for strict"
    )
    assert "unit" in result["content"]


def test_decorator_misuse() -> None:
    with pytest.raises(ValueError, match="needs a description"):

        @action(model=WeatherArgs)
        async def undocumented(args: WeatherArgs) -> str:
            return ""

    with pytest.raises(ValueError, match="exactly one of a pydantic model"):

        @action(description="d")
        async def no_model(args: dict[str, Any]) -> str:
            return ""

    with pytest.raises(ValueError, match="exactly one of a pydantic model"):

        @action(model=WeatherArgs, parameters={"type": "object"})
        async def both(args: WeatherArgs) -> str:
            """Both."""
            return ""

    with pytest.raises(TypeError, match="exactly one argument"):

        @action(description="d", parameters={})
        async def two(a: dict[str, Any], b: int) -> str:
            return ""


def test_tool_specs_keep_the_declared_order_of_the_properties() -> None:
    # A model fills arguments in the order the schema lists them; the shared, cached spec
    # must not reorder them (two actions differing only in order get their own orders).
    def spec(order: list[str]) -> list[str]:
        act = MAILAction(
            name="send_email",
            description="Send an email.",
            parameters={
                "type": "object",
                "properties": {name: {"type": "string"} for name in order},
                "required": order,
            },
            function=echo_action,
        )
        return list(act.to_tool_dict()["parameters"]["properties"])

    assert spec(["to", "subject", "body"]) == ["to", "subject", "body"]
    assert spec(["body", "to", "subject"]) == ["body", "to", "subject"]
