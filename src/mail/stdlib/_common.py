"""Pieces shared by the stdlib actions: settings, argument checks, the action decorator."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from mail.api.actions import MAILAction, action
from mail.config import StdlibConfig, current_stdlib_config

ActionCallback = Callable[[dict[str, Any]], Awaitable[str]]


def settings() -> StdlibConfig:
    """The effective ``[stdlib]`` settings: mail.toml, then ``MAIL_STDLIB_*`` variables.

    Taken on every call: the environment is read each time and mail.toml is re-read when it
    changed on disk (see :func:`mail.config.current_stdlib_config`).
    """
    return current_stdlib_config().with_env_overrides()


def stdlib_action(
    name: str, description: str, parameters: dict[str, Any]
) -> Callable[[ActionCallback], MAILAction]:
    """``@action`` with a JSON schema, keeping the original's extra attributes.

    ``.callback`` is the undecorated coroutine function and ``.parameters_model`` is None
    (the schema is a plain dict), as on the original's stdlib objects.
    """

    def decorate(fn: ActionCallback) -> MAILAction:
        @functools.wraps(fn)
        async def checked(args: dict[str, Any]) -> str:
            # Bad arguments never raise: not even arguments that are not an object at all.
            if not isinstance(args, dict):
                return error(f"the arguments must be an object, got {_json_type(args)}")
            return await fn(args)

        built: MAILAction = action(name=name, description=description, parameters=parameters)(
            checked
        )
        built.callback = fn  # type: ignore[attr-defined]
        built.parameters_model = None  # type: ignore[attr-defined]
        return built

    return decorate


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def error(message: str) -> str:
    return f"Error: {message}"


def exception_text(exc: BaseException) -> str:
    """``Error: <text>`` for an exception, never an empty text (the original could give one)."""
    text = str(exc).strip()
    return error(text or type(exc).__name__)


def missing(args: dict[str, Any], *keys: str) -> str | None:
    """The original's presence check: the first key that is absent or None."""
    for key in keys:
        if args.get(key) is None:
            return error(f"`{key}` is required")
    return None


def not_string(args: dict[str, Any], *keys: str) -> str | None:
    """The first present key whose value is not a string."""
    for key in keys:
        if key in args and args[key] is not None and not isinstance(args[key], str):
            return error(f"`{key}` must be a string")
    return None


def not_dict(args: dict[str, Any], *keys: str) -> str | None:
    """The first present key whose value is not a JSON object."""
    for key in keys:
        if key in args and args[key] is not None and not isinstance(args[key], dict):
            return error(f"`{key}` must be a dictionary")
    return None


def bad_args(
    args: dict[str, Any],
    required: tuple[str, ...] = (),
    strings: tuple[str, ...] = (),
    dicts: tuple[str, ...] = (),
) -> str | None:
    """The original's checks in its order: the first `required` key that is missing, then
    the first of `strings` that is not a string, then the first of `dicts` that is not an
    object; None when the arguments pass."""
    return missing(args, *required) or not_string(args, *strings) or not_dict(args, *dicts)
