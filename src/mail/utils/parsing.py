"""Parsing helpers for configuration strings and addresses."""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

__all__ = [
    "PYTHON_PREFIX",
    "PYTHON_STRING_PREFIX",
    "URL_PREFIX",
    "URL_STRING_PREFIX",
    "read_python_string",
    "read_url_string",
    "resolve_prefixed_string_references",
    "target_address_is_interswarm",
]

logger = logging.getLogger("mail.utils.parsing")

PYTHON_PREFIX = "python::"
URL_PREFIX = "url::"
# v1.3's names for the two prefixes.
PYTHON_STRING_PREFIX = PYTHON_PREFIX
URL_STRING_PREFIX = URL_PREFIX

# Seconds to wait for a url:: document; configuration loading must not hang forever.
URL_FETCH_TIMEOUT = 10.0


def read_python_string(string: str) -> Any:
    """Import the object named by ``"[python::]module.path:attr.path"``.

    The text before the first ``:`` is the module to import; the rest is a dotted
    attribute path followed from the module (``pkg.mod:Class.method`` works).
    """
    reference = string.removeprefix(PYTHON_PREFIX)
    module_name, sep, attr_path = reference.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not sep or not module_name or not attr_path:
        raise ValueError(f"Invalid python reference '{string}'. Expected 'module:object' format.")

    obj: Any = importlib.import_module(module_name)
    walked = module_name
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(
                f"python reference '{string}': '{walked}' has no attribute '{part}'"
            ) from None
        walked = f"{walked}.{part}"
    return obj


def read_url_string(string: str, raise_on_error: bool = False) -> str:
    """Fetch the JSON document at ``"[url::]https://..."`` and return it re-encoded as a string.

    On any failure (connection, HTTP error status, non-JSON body) the bare URL is
    returned and a warning logged, so a missing prompt server degrades instead of
    aborting the load; pass ``raise_on_error=True`` to get a RuntimeError instead.
    """
    # Imported here: httpx (and the CLI packages it pulls in) costs a server's and every
    # cluster instance host's start-up ~0.2-0.4 s, and few swarms have url:: references.
    import httpx

    url = string.removeprefix(URL_PREFIX)
    try:
        response = httpx.get(url, timeout=URL_FETCH_TIMEOUT)
        response.raise_for_status()
        return json.dumps(response.json())
    except Exception as exc:  # any failure falls back to the URL (documented behaviour)
        if raise_on_error:
            raise RuntimeError(f"error reading URL string '{url}': {exc}") from exc
        logger.warning("could not fetch url reference %r, using the URL itself: %s", url, exc)
        return url


def resolve_prefixed_string_references(value: Any) -> Any:
    """Resolve ``python::`` and ``url::`` strings anywhere inside ``value``.

    Dicts and lists are walked recursively and rebuilt (the input is not
    modified); dict keys and all other values are returned unchanged.
    """
    if isinstance(value, dict):
        return {key: resolve_prefixed_string_references(item) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_prefixed_string_references(item) for item in value]
    if isinstance(value, str):
        if value.startswith(PYTHON_PREFIX):
            return read_python_string(value)
        if value.startswith(URL_PREFIX):
            return read_url_string(value)
    return value


def target_address_is_interswarm(address: str) -> bool:
    """True when ``address`` names an agent of another swarm (``agent@swarm``)."""
    # Imported here: mail.core imports mail.utils, so a top-level import would cycle.
    from mail.core.message import parse_agent_address

    _, swarm = parse_agent_address(address)
    # "agent@" has an empty swarm part after stripping: that is not a remote address.
    return bool(swarm)
