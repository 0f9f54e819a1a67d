"""Checking an agent's factory when its template is built, not when a caller first needs it."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

from mail.swarms_json.suggestions import suggest
from mail.utils.parsing import read_python_string

# Supplied per instance (``instantiate(instance_params=...)``), not by the template.
INSTANCE_PARAMS = frozenset({"user_token"})
_SIMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
}


def resolve_factory(agent: str, factory: Any) -> Callable[..., Any]:
    """The factory callable, or ValueError saying why it cannot be used."""
    if not isinstance(factory, str):
        if not callable(factory):
            raise ValueError(f"agent '{agent}': factory {factory!r} is not callable")
        return factory  # type: ignore[no-any-return]
    if ":" not in factory.removeprefix("python::"):
        raise ValueError(
            f"agent '{agent}': factory '{factory}' must look like 'python::module:object'"
        )
    try:
        resolved = read_python_string(factory)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bad definition
        raise ValueError(
            f"agent '{agent}': factory '{factory}' cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(resolved):
        raise ValueError(f"agent '{agent}': factory '{factory}' is not callable")
    return resolved  # type: ignore[no-any-return]


# callable -> its parameters: a template is built per swarm instance, its factories rarely
# change, and reading a signature costs more than the rest of the check.
_SIGNATURES: weakref.WeakKeyDictionary[Any, dict[str, inspect.Parameter] | None] = (
    weakref.WeakKeyDictionary()
)


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter] | None:
    """`fn`'s parameters (None: it has no signature to read); not to be changed."""
    try:
        return _SIGNATURES[fn]
    except KeyError:
        params = _SIGNATURES[fn] = _read_parameters(fn)
        return params
    except TypeError:  # not weakly referable (or unhashable): read each time
        return _read_parameters(fn)


def _read_parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter] | None:
    target = fn.__init__ if inspect.isclass(fn) else fn  # type: ignore[misc]
    try:
        params = dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None  # builtins and C callables: nothing to compare against
    if inspect.isclass(fn):
        params.pop(next(iter(params), ""), None)  # self
    return params


def check_factory_params(
    agent: str, factory: Any, supplied: dict[str, Any], params_field: str = "agent_params"
) -> None:
    """Raise ValueError unless ``factory`` accepts the keyword arguments ``supplied``."""
    fn = resolve_factory(agent, factory)
    params = _parameters(fn)
    if params is None:
        return
    named = {k: p for k, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepted = dict(named)
    forwarded = getattr(fn, "accepted_settings", None)
    if takes_any and callable(forwarded):
        extra = _parameters(forwarded)
        if extra is not None:
            takes_any = any(p.kind is p.VAR_KEYWORD for p in extra.values())
            for key, param in extra.items():
                if param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                    accepted.setdefault(key, param)
    label = getattr(fn, "__name__", repr(fn))
    if not takes_any:
        unknown = [key for key in supplied if key not in accepted]
        if unknown:
            key = unknown[0]
            raise ValueError(
                f"agent '{agent}': {params_field} '{key}' is not a parameter of factory "
                f"{label}.{suggest(key, list(accepted))}"
            )
    for key, param in named.items():
        if (
            param.default is param.empty
            and param.kind is not param.POSITIONAL_ONLY
            and key not in supplied
            and key not in INSTANCE_PARAMS
        ):
            raise ValueError(
                f"agent '{agent}': factory {label} needs '{key}' in {params_field}, "
                "which is missing"
            )
    for key, value in supplied.items():
        declared = accepted.get(key)
        if declared is not None:
            _check_simple_type(agent, params_field, key, value, declared)


def setting_of(factory: Any, supplied: dict[str, Any], key: str) -> Any:
    """The value ``key`` will have: as supplied, else the factory's declared default (or
    the default of what it forwards its settings to); None when neither says."""
    if key in supplied:
        return supplied[key]
    try:
        fn = resolve_factory("?", factory)
    except ValueError:
        return None
    for target in (fn, getattr(fn, "accepted_settings", None)):
        params = _parameters(target) if callable(target) else None
        param = (params or {}).get(key)
        if param is not None and param.default is not param.empty:
            return param.default
    return None


def _check_simple_type(
    agent: str, params_field: str, key: str, value: Any, param: inspect.Parameter
) -> None:
    annotation = param.annotation
    if not isinstance(annotation, str):
        annotation = getattr(annotation, "__name__", "")
    optional = annotation.endswith(" | None") or annotation.startswith("None | ")
    base = annotation.removesuffix(" | None").removeprefix("None | ").strip()
    types = _SIMPLE_TYPES.get(base)
    if types is None or (value is None and optional):
        return
    wrong_bool = isinstance(value, bool) and bool not in types
    if wrong_bool or not isinstance(value, types):
        want = f"{base} or null" if optional else base
        raise ValueError(
            f"agent '{agent}': {params_field} '{key}' must be a {want}, got {type(value).__name__}"
        )
