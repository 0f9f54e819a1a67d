"""Signing secrets and the Standard Webhooks headers, made with the ``standardwebhooks``
library (so any Standard Webhooks or Svix verifier checks them).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import secrets as _secrets
from collections.abc import Mapping, Sequence
from typing import Any

from standardwebhooks.webhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
# Standard Webhooks: symmetric secrets are 24 to 64 bytes.
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 24, 64


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode()


def check_secret(value: Any) -> str | None:
    """Why `value` is not a usable signing secret (None when it is)."""
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        return f"must be a string starting with '{SECRET_PREFIX}' (base64 after it)"
    try:
        raw = base64.b64decode(value[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "is not valid base64 after 'whsec_'"
    if not MIN_SECRET_BYTES <= len(raw) <= MAX_SECRET_BYTES:
        return f"must hold {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, it holds {len(raw)}"
    return None


def signing_secrets(sub: Mapping[str, Any], now: float) -> list[str]:
    """The secrets that sign now: the current one, and the previous one during its overlap."""
    found = [sub["secret"]] if sub.get("secret") else []
    until = sub.get("previous_secret_until")
    if sub.get("previous_secret") and until is not None and until > now:
        found.append(sub["previous_secret"])
    return found


def signature(msg_id: str, timestamp: int, body: str, secrets: Sequence[str]) -> str:
    """``v1,<base64 HMAC-SHA256>`` per secret, space-separated."""
    moment = _dt.datetime.fromtimestamp(timestamp, _dt.UTC)
    return " ".join(Webhook(s).sign(msg_id, moment, body) for s in secrets)


def headers(msg_id: str, timestamp: int, body: str, secrets: Sequence[str]) -> dict[str, str]:
    """The three Standard Webhooks headers (no signature header without a secret)."""
    found = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp)}
    if secrets:
        found["webhook-signature"] = signature(msg_id, timestamp, body, secrets)
    return found
