"""Bounds on the shape of what arrives on /interswarm/* (``[server.settings]``)."""

from __future__ import annotations

from typing import Any

from mail.server.errors import BadRequest
from mail.server.json_bounds import excess

# Envelope and payload fields holding one address or swarm name, and those holding a list.
_ENVELOPE_ADDRESSES = ("source_swarm", "target_swarm", "task_owner")
_ENVELOPE_LISTS = ("task_contributors",)
_PAYLOAD_ADDRESSES = ("sender", "recipient", "sender_swarm", "recipient_swarm")
_PAYLOAD_LISTS = ("recipients", "recipient_swarms")


def check_body_shape(data: Any, settings: Any) -> None:
    """400 when the whole body holds too many JSON values or nests too deep."""
    values = settings.max_interswarm_json_values
    depth = settings.max_interswarm_json_depth
    found = excess(data, values, depth)
    if found == "values":
        raise BadRequest(
            f"the body holds more than {values} JSON values (array items and object members, "
            "at any depth) ([server.settings] max_interswarm_json_values)"
        )
    if found == "depth":
        raise BadRequest(
            f"the body nests arrays and objects more than {depth} deep "
            "([server.settings] max_interswarm_json_depth)"
        )


def check_address(field: str, value: Any, settings: Any) -> None:
    """``value``: a string, or a MAIL address object (its ``address``)."""
    if isinstance(value, dict):
        field, value = f"{field}.address", value.get("address")
    limit = settings.max_address_chars
    if limit and isinstance(value, str) and len(value) > limit:
        raise BadRequest(
            f"parameter '{field}' is {len(value)} characters; the limit is {limit} "
            "([server.settings] max_address_chars)"
        )


def check_address_list(field: str, value: Any, settings: Any) -> None:
    if not isinstance(value, list):
        return
    limit = settings.max_interswarm_addresses
    if limit and len(value) > limit:
        raise BadRequest(
            f"parameter '{field}' has {len(value)} entries; the limit is {limit} "
            "([server.settings] max_interswarm_addresses)"
        )
    for i, item in enumerate(value):
        check_address(f"{field}[{i}]", item, settings)


def check_envelope(data: dict[str, Any], settings: Any) -> None:
    """The bounds of a POST /interswarm/forward or /back body (``{"message": envelope}``):
    the address fields first (their errors say more), then the shape of the whole body."""
    envelope = data.get("message")
    if isinstance(envelope, dict):
        _check_envelope_addresses(envelope, settings)
    check_body_shape(data, settings)


def _check_envelope_addresses(envelope: dict[str, Any], settings: Any) -> None:
    for name in _ENVELOPE_ADDRESSES:
        check_address(f"message.{name}", envelope.get(name), settings)
    for name in _ENVELOPE_LISTS:
        check_address_list(f"message.{name}", envelope.get(name), settings)
    payload = envelope.get("payload")
    if not isinstance(payload, dict):
        return
    for name in _PAYLOAD_ADDRESSES:
        check_address(f"message.payload.{name}", payload.get(name), settings)
    for name in _PAYLOAD_LISTS:
        check_address_list(f"message.payload.{name}", payload.get(name), settings)


def check_user_message(data: dict[str, Any], settings: Any) -> None:
    """The bounds of a caller's POST /interswarm/message body."""
    targets = data.get("targets")
    limit = settings.max_interswarm_addresses
    if isinstance(targets, str):
        # Counted before it is split: a 4 MiB "a,a,a,..." would be two million strings.
        if limit and targets.count(",") >= limit:
            count = targets.count(",") + 1
            raise BadRequest(
                f"parameter 'targets' has {count} entries; the limit is {limit} "
                "([server.settings] max_interswarm_addresses)"
            )
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    check_address_list("targets", targets, settings)
    check_body_shape(data, settings)
