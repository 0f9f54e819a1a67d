"""MAILAction and the `@action` decorator: custom tools agents can call."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model

from mail.core.actions import ActionCore, ActionFunction
from mail.core.review import normalize_review
from mail.core.tools import pydantic_model_to_tool
from mail.swarms_json.validation import (
    check_action_name,
    check_parameters_schema,
    validate_action_from_swarms_json,
)
from mail.utils.echo import echo
from mail.utils.parsing import read_python_string

ToolStyle = Literal["responses", "completions"]

_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}


class MAILAction:
    """A named, described tool with a JSON-schema payload and an async function."""

    def __init__(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        function: str | ActionFunction | MAILAction,
        review: list[str] | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        self.function_ref = function if isinstance(function, str) else None
        self.function = self._build_action_function(name, function)
        self._validate()
        # Decisions a person may take before this action runs (None: runs unreviewed).
        self.review: list[str] | None = normalize_review(review, f"action '{name}'")
        # Set by @action: the decorated function and the pydantic model of its payload.
        self.callback: Callable[..., Any] | None = None
        self.parameters_model: type[BaseModel] | None = None

    # ------------------------------------------------------------------ construction
    def _validate(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("action name must be a non-empty string")
        check_action_name(self.name)
        if not isinstance(self.description, str) or not self.description.strip():
            raise ValueError(f"action '{self.name}' needs a non-empty description")
        if not isinstance(self.parameters, dict):
            raise ValueError(f"action '{self.name}' parameters must be a JSON schema object")
        check_parameters_schema(self.name, self.parameters)

    @staticmethod
    def _build_action_function(
        name: str, function: str | ActionFunction | MAILAction
    ) -> ActionFunction:
        if isinstance(function, MAILAction):
            return function.function
        if isinstance(function, str):
            try:
                resolved = read_python_string(function)
            except Exception as exc:  # noqa: BLE001 - any import failure is a bad definition
                raise ValueError(
                    f"action '{echo(name)}': function '{echo(function)}' cannot be imported: "
                    f"{type(exc).__name__}: {echo(exc)}"
                ) from exc
            if isinstance(resolved, MAILAction):
                return resolved.function
            function = resolved
        if not callable(function):
            raise TypeError(
                f"action '{name}': function must be callable, got {type(function).__name__}"
            )
        return function

    @classmethod
    def from_pydantic_model(
        cls,
        model: type[BaseModel],
        function_str: str | ActionFunction | None = None,
        name: str | None = None,
        description: str | None = None,
        *,
        function: str | ActionFunction | None = None,
    ) -> MAILAction:
        """Build an action whose parameters are `model`'s JSON schema."""
        target = function if function is not None else function_str
        if target is None:
            raise ValueError("from_pydantic_model needs a function")
        doc = description or (model.__doc__ or "").strip()
        schema = model.model_json_schema()
        schema.pop("title", None)
        return cls(
            name or model.__name__, doc or f"Action {name or model.__name__}", schema, target
        )

    @classmethod
    def from_swarm_json(cls, json_dump: str | dict[str, Any]) -> MAILAction:
        """An action from a swarms.json entry (JSON text or dict), checked first: a missing
        or mistyped field is a ValueError naming it."""
        data = json.loads(json_dump) if isinstance(json_dump, str) else json_dump
        validate_action_from_swarms_json(data)
        return cls.from_swarms_json(data)

    @classmethod
    def from_swarms_json(cls, action_data: dict[str, Any]) -> MAILAction:
        """An action from an entry already checked (``build_action_from_swarms_json``)."""
        return cls(
            action_data["name"],
            action_data["description"],
            action_data["parameters"],
            action_data["function"],
            review=action_data.get("review"),
        )

    def to_core(self) -> ActionCore:
        return ActionCore(self.function, self.name, self.parameters)

    # ------------------------------------------------------------------ schema
    def to_pydantic_model(self, for_tools: bool = False) -> type[BaseModel]:
        """A pydantic model equivalent to the parameters schema (enums and formats kept)."""
        return _action_model(self.name, self.parameters)

    def to_tool_dict(self, style: ToolStyle = "responses") -> dict[str, Any]:
        """The action's tool spec (a fresh copy: callers may change it).

        Built once per definition (a pydantic model and its JSON schema: milliseconds) and
        shared by every instance of the swarm: each instance's agents are handed one.
        """
        try:
            # Not sorted: the order of the properties is the order a model fills them in.
            parameters = json.dumps(self.parameters)
            exact = json.loads(parameters) == self.parameters
        except (TypeError, ValueError):
            exact = False
        if not exact:  # not plain JSON (tuples, a caller's own objects): built each time
            model = self.to_pydantic_model(for_tools=True)
            return pydantic_model_to_tool(model, self.name, self.description, style)
        return copy.deepcopy(_tool_dict(self.name, self.description, parameters, style))

    def to_swarm_json(self) -> dict[str, Any]:
        function = self.function_ref or _qualified_name(self.function)
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "function": function,
        }
        if self.review is not None:
            data["review"] = list(self.review)
        return data

    def __repr__(self) -> str:
        return f"MAILAction(name={self.name!r})"


def _qualified_name(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        return f"python::{module}:{qualname}"
    return repr(fn)


def _field_type(
    action: str, field: str, schema: dict[str, Any], root: dict[str, Any], depth: int
) -> Any:
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        defs = root.get("$defs") or root.get("definitions") or {}
        return _field_type(action, field, defs[ref], root, depth)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            members = tuple(_field_type(action, field, s, root, depth) for s in schema[key])
            out = members[0]
            for member in members[1:]:
                out = out | member
            return out
    if "allOf" in schema:
        if len(schema["allOf"]) != 1:
            raise ValueError(
                f"parameter '{field}' uses allOf with more than one member (not supported)"
            )
        return _field_type(action, field, schema["allOf"][0], root, depth)
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        out = _field_type(action, field, {**schema, "type": kind[0]}, root, depth)
        for k in kind[1:]:
            out = out | _field_type(action, field, {**schema, "type": k}, root, depth)
        return out
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        items = schema.get("items")
        if not items:
            return list[Any]
        item_type = _field_type(action, field, items, root, depth + 1)
        return list[item_type]  # type: ignore[valid-type]
    if kind == "object":
        if schema.get("properties"):
            return _model_from_schema(f"{action}_{field}_{depth + 1}", schema, root, depth + 1)
        return dict[str, Any]
    if kind is None:
        return Any
    raise ValueError(f"parameter '{field}' has unsupported JSON schema type '{kind}'")


@functools.lru_cache(maxsize=256)
def _tool_dict(name: str, description: str, parameters: str, style: ToolStyle) -> dict[str, Any]:
    params = json.loads(parameters)
    return pydantic_model_to_tool(
        _action_model(name, params),
        name=name,
        description=description,
        style=style,
    )


def _action_model(action: str, parameters: dict[str, Any]) -> type[BaseModel]:
    """The pydantic model of an action's parameters; ValueError naming the action if the
    schema uses something this conversion does not support."""
    try:
        return _model_from_schema(action, parameters, parameters, 0)
    except ValueError as exc:
        raise ValueError(f"action '{action}': {exc}") from exc


def _model_from_schema(
    name: str, schema: dict[str, Any], root: dict[str, Any], depth: int
) -> type[BaseModel]:
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields: dict[str, Any] = {}
    for field, sub in properties.items():
        annotation = _field_type(name, field, sub, root, depth)
        extra: dict[str, Any] = {}
        if "format" in sub:
            extra["format"] = sub["format"]
        kwargs: dict[str, Any] = {"description": sub.get("description")}
        if extra:
            kwargs["json_schema_extra"] = extra
        if field in required:
            fields[field] = (annotation, Field(..., **kwargs))
        elif "default" in sub:
            fields[field] = (annotation, Field(sub["default"], **kwargs))
        else:
            fields[field] = (annotation | None, Field(None, **kwargs))
    return create_model(name, **fields)  # type: ignore[call-overload,no-any-return]


# ---------------------------------------------------------------------------- decorator
def action(
    _fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    model: type[BaseModel] | None = None,
    parameters: dict[str, Any] | None = None,
    style: ToolStyle = "responses",
    review: list[str] | None = None,
) -> Any:
    """Turn `fn(payload)` into a MAILAction whose input is validated by a pydantic model.

    `review` lists the decisions ("accept", "edit", "ignore", "respond") a person may take
    before each call runs; see docs/review.md.
    """

    if model is not None and not (inspect.isclass(model) and issubclass(model, BaseModel)):
        raise TypeError(f"model must be a subclass of pydantic.BaseModel, got {model!r}")

    def decorate(fn: Callable[..., Any]) -> MAILAction:
        params = list(inspect.signature(fn).parameters.values())
        if len(params) != 1:
            raise TypeError(
                f"@action functions take exactly one argument; {fn.__name__} takes {len(params)}"
            )
        desc = description or (inspect.getdoc(fn) or "").strip()
        if not desc:
            raise ValueError(f"@action '{fn.__name__}' needs a description (argument or docstring)")
        payload_model = model
        annotation = params[0].annotation
        if isinstance(annotation, str):
            try:
                annotation = typing.get_type_hints(fn).get(params[0].name, annotation)
            except Exception:  # noqa: BLE001 - unresolvable hints: fall back to model=/parameters=
                pass
        if (
            payload_model is None
            and inspect.isclass(annotation)
            and issubclass(annotation, BaseModel)
        ):
            payload_model = annotation
        if (payload_model is None) == (parameters is None):
            raise ValueError(
                f"@action '{fn.__name__}' needs exactly one of a pydantic model (argument or "
                "annotation) or a `parameters` JSON schema"
            )
        schema = parameters if parameters is not None else payload_model.model_json_schema()  # type: ignore[union-attr]
        schema = dict(schema)
        schema.pop("title", None)

        async def runner(args: dict[str, Any]) -> str:
            if payload_model is not None:
                try:
                    value: Any = payload_model.model_validate(args)
                except ValidationError as exc:
                    raise ValueError(f"invalid arguments for {fn.__name__}: {exc}") from exc
            else:
                value = args
            result = fn(value)
            if inspect.isawaitable(result):
                result = await result
            if not isinstance(result, str):
                raise TypeError(
                    f"action {fn.__name__} must return a str, got {type(result).__name__}"
                )
            return result

        runner.__name__ = fn.__name__
        runner.__qualname__ = fn.__qualname__
        runner.__module__ = fn.__module__
        built = MAILAction(name or fn.__name__, desc, schema, runner, review=review)
        built.style = style  # type: ignore[attr-defined]
        built.callback = fn
        built.parameters_model = payload_model
        return built

    if _fn is not None:
        return decorate(_fn)
    return decorate
