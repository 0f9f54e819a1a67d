"""``Idempotency-Key`` on the wire: the header, the request's fingerprint, the answers.

What a key is (draft-ietf-httpapi-idempotency-key-header: an RFC 8941 string; a bare token
is accepted too), what makes two requests "the same" (method, path, canonical JSON body),
and the answers a duplicate gets (409 with Retry-After, 422, the replayed outcome). The rest
is in ``mail.server.idempotency`` (routes) and ``mail.server.idempotency_guard`` (state).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import re
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import Response

from mail.server.errors import BadRequest
from mail.server.jsonio import dumps, loads
from mail.store.idempotency import KeyRecord

HEADER = "idempotency-key"
HEADER_BYTES = HEADER.encode()
REPLAYED_HEADER = "Idempotent-Replayed"
# Seconds a duplicate of a request still under way is told to wait before asking again.
IN_PROGRESS_RETRY_AFTER = 1
DOCS = "docs/api-http.md#idempotency-keys"


# SHA-256 as CPython builds it in (`_sha2`, `_sha256` before 3.12): the digest hashlib's
# OpenSSL one gives, made without an OpenSSL context per call, which in a busy server costs
# some 3 us more than hashing a small body (bench/http.py, the keyed request's fingerprint).
# OpenSSL's hashes faster (several times over at a kilobyte) and lets other threads run
# while it hashes a large input: bodies past `_BUILTIN_HASH_BYTES` go to it.
def _builtin_sha256() -> Any:
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256
        except (ImportError, AttributeError):  # pragma: no cover - the Python build's
            continue
    return hashlib.sha256  # pragma: no cover


_sha256: Any = _builtin_sha256()
_BUILTIN_HASH_BYTES = 512

_orjson: Any
try:  # not a declared dependency: used when the environment has it (as mail.server.jsonio)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


# A key as clients send it: an sf-string of printable ASCII with nothing escaped (no quote,
# no backslash inside), blanks around it allowed; `key_of` takes it with one match.
_PLAIN_KEY = re.compile(rb'[ \t]*"([ !#-\[\]-~]+)"[ \t]*')


def key_fields(request: Request) -> list[bytes]:
    """The raw values of the request's ``Idempotency-Key`` header fields (usually none).

    Read off the raw header list: building the request's `Headers` costs more than parsing
    the key on the keyed hot path, and every guarded request without a key pays this scan."""
    return [value for name, value in request.scope["headers"] if name == HEADER_BYTES]


def parse_key(request: Request, max_length: int) -> str | None:
    """The request's key, or None without the header; 400 for a malformed one (`key_of`)."""
    return key_of(key_fields(request), max_length)


def key_of(fields: list[bytes], max_length: int) -> str | None:
    """The key of the header `fields` (`key_fields`), or None without one; 400 for a
    malformed one.

    An ``sf-string`` (``"..."``, printable ASCII, ``\\"`` and ``\\\\`` escaped) as the draft
    says, or the same characters unquoted (what curl users type): at most ``max_length``
    characters, not empty, one header field.
    """
    if not fields:
        return None
    if len(fields) == 1:
        plain = _PLAIN_KEY.fullmatch(fields[0])
        if plain is not None:  # the usual key, e.g. a UUID in quotes
            usual = plain.group(1).decode("ascii")
            if not max_length or len(usual) <= max_length:
                return usual
    if len(fields) > 1:
        raise BadRequest(f"send one Idempotency-Key header, not {len(fields)} (see {DOCS})")
    raw = fields[0].decode("latin-1").strip()  # (latin-1: as Starlette decodes headers)
    if raw.startswith('"'):
        key: str | None = _sf_string(raw)  # (the usual key was matched above)
    else:
        key = raw
    if not key or not (key.isascii() and key.isprintable()):
        raise BadRequest(
            "Idempotency-Key must be a quoted string of printable ASCII characters, such as "
            f'"8e03978e-40d5-43e8-bc93-6894a57f9324" (see {DOCS})'
        )
    if max_length and len(key) > max_length:
        raise BadRequest(
            f"Idempotency-Key is {len(key)} characters long; the most this server accepts is "
            f"{max_length} ([server.settings] max_idempotency_key_length)"
        )
    return key


def _sf_string(raw: str) -> str | None:
    """The value of an RFC 8941 string (``"a \\" b"``), or None when it is not one."""
    inner = raw[1:-1]
    if len(raw) >= 2 and raw[-1] == '"' and '"' not in inner and "\\" not in inner:
        return inner  # no escapes: the usual key (a UUID)
    out: list[str] = []
    chars = iter(raw[1:])
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in ('"', "\\"):
                return None
            out.append(escaped)
        elif char == '"':
            return "".join(out) if next(chars, None) is None else None
        else:
            out.append(char)
    return None  # no closing quote


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests "the same": method, path and the body as canonical JSON
    (keys sorted, no spaces), or the raw bytes of a body that is not JSON."""
    return fingerprint_and_value(method, path, body)[0]


# The hashed prefix of a method and path ("POST /message\n"), for the first few of them.
_PREFIXES: dict[tuple[str, str], bytes] = {}
_MAX_PREFIXES = 64


def fingerprint_and_value(method: str, path: str, body: bytes) -> tuple[str, Any]:
    """`fingerprint`, and the body's JSON value it was made from (None when the body is not
    JSON): the route need not parse the body again (`PARSED_BODY`)."""
    value: Any = None
    canonical = body
    if body:  # (a body of spaces is not JSON: hashed as it is, as an empty one)
        try:
            value = _loads(body)
            canonical = (
                _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS)  # (`_canonical`, inline)
                if _orjson is not None
                else _canonical(value)
            )
        except (ValueError, TypeError, RecursionError):
            value, canonical = None, body
    prefix = _PREFIXES.get((method, path))
    if prefix is None:
        prefix = f"{method.upper()} {path}\n".encode()
        if len(_PREFIXES) < _MAX_PREFIXES:  # (paths with ids in them are not kept)
            _PREFIXES[(method, path)] = prefix
    # One hash of the prefix and the body together (the same digest as updating it twice).
    data = prefix + canonical
    hashed = _sha256 if len(data) <= _BUILTIN_HASH_BYTES else hashlib.sha256
    return hashed(data).hexdigest(), value


_loads: Any = loads if _orjson is None else _orjson.loads  # (`jsonio.loads`, without its frame)


def _canonical(value: Any) -> bytes:
    if _orjson is not None:
        return _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS)  # type: ignore[no-any-return]
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# ------------------------------------------------------------------------- answers


def in_progress(detail: str | None = None, **extra: Any) -> Response:
    """409 + Retry-After: the first request with this key is still under way."""
    body = {
        "detail": detail
        or "a request with this Idempotency-Key is still being processed; retry after "
        f"{IN_PROGRESS_RETRY_AFTER}s to get its outcome",
        **extra,
    }
    return Response(
        dumps(body),
        status_code=409,
        media_type="application/json",
        headers={"Retry-After": str(IN_PROGRESS_RETRY_AFTER)},
    )


def key_reused() -> HTTPException:
    return HTTPException(
        422,
        "this Idempotency-Key was already used for a different request (another method, "
        "path or body); send a new key with a new request",
    )


def replay(record: KeyRecord) -> Response:
    """The stored outcome of the first request, as it answered (an accepted background
    message's `Location` is its body's `status_url`)."""
    headers = {REPLAYED_HEADER: "true"}
    if record.status == 202 and record.body:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            location = _loads(record.body).get("status_url")
            if isinstance(location, str):
                headers["Location"] = location
    return Response(
        record.body or b"",
        status_code=record.status or 200,
        media_type=record.content_type,
        headers=headers,
    )
