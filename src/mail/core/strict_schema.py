"""JSON schema -> the form OpenAI's strict function calling accepts (pure functions)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel


def _resolve_ref(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local JSON schema references are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"unresolvable JSON schema reference {ref!r}")
        node = node[part]
    if not isinstance(node, dict):
        raise ValueError(f"JSON schema reference {ref!r} does not point to a schema")
    return node


def _make_strict(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one JSON schema node (in place) into the form OpenAI's strict mode accepts."""
    for defs_key in ("$defs", "definitions"):
        defs = node.get(defs_key)
        if isinstance(defs, dict):
            for sub in defs.values():
                _make_strict(sub, root)

    # Free-form dicts declare additionalProperties themselves; only closed objects get False.
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False

    properties = node.get("properties")
    if isinstance(properties, dict):
        # Strict mode wants every property required; optional ones are expressed as nullable.
        node["required"] = list(properties)
        for key, sub in properties.items():
            properties[key] = _make_strict(sub, root)

    items = node.get("items")
    if isinstance(items, dict):
        node["items"] = _make_strict(items, root)

    for union_key in ("anyOf", "oneOf"):
        variants = node.get(union_key)
        if isinstance(variants, list):
            node[union_key] = [_make_strict(v, root) for v in variants]

    all_of = node.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            node.pop("allOf")
            node.update(_make_strict(all_of[0], root))
        else:
            node["allOf"] = [_make_strict(v, root) for v in all_of]

    # A null default is implied by the nullable type; strict mode rejects it as noise.
    if "default" in node and node["default"] is None:
        node.pop("default")

    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        # A $ref with sibling keywords (e.g. a description) is not allowed: inline the target.
        target = copy.deepcopy(_resolve_ref(root, ref))
        merged = {**target, **node}
        merged.pop("$ref")
        node.clear()
        node.update(merged)
        return _make_strict(node, root)
    return node


def to_strict_json_schema(model_cls: type[BaseModel]) -> dict[str, Any]:
    """Return the JSON schema of `model_cls` rewritten for OpenAI's strict function calling."""
    schema = model_cls.model_json_schema()
    return _make_strict(schema, schema)
