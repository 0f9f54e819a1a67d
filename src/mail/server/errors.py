"""Error shaping: 400 for bad input (naming the field), 500 with a correlation id for our bugs.

Every error body is ``{"detail": "<message>"}``; unexpected exceptions add
``"correlation_id"``, which also appears in the server log next to the traceback.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("mail.server")


class BadRequest(HTTPException):
    """A 400 whose detail names the offending field."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=400, detail=detail)


def type_name(value: Any) -> str:
    return type(value).__name__


def _describe_validation_error(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    err = errors[0]
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
    field = ".".join(loc)
    kind = err.get("type", "")
    if kind == "missing":
        return f"parameter '{field}' is required"
    if kind in ("json_invalid", "model_attributes_type") or not field:
        return f"error parsing request: {err.get('msg', 'invalid body')}"
    return f"parameter '{field}' is invalid: {err.get('msg')}"


async def _validation_error_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    # FastAPI's default is a 422 with a list; clients of MAIL expect 400 and a readable detail.
    return JSONResponse({"detail": _describe_validation_error(exc)}, status_code=400)


class CorrelationIdMiddleware:
    """Turn an unhandled exception into a 500 with an id that can be found in the log.

    Written as plain ASGI (not BaseHTTPMiddleware) so it costs nothing on the happy path.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            correlation_id = uuid.uuid4().hex[:16]
            logger.exception(
                "unhandled error [correlation_id=%s] %s %s",
                correlation_id,
                scope.get("method"),
                scope.get("path"),
            )
            if started:
                # Headers already went out (e.g. mid-stream); all we can do is end the response.
                return
            response = JSONResponse(
                {
                    "detail": f"internal server error (correlation id {correlation_id})",
                    "correlation_id": correlation_id,
                },
                status_code=500,
            )
            await response(scope, receive, send)


async def _store_unavailable_handler(request: Request, exc: Exception) -> JSONResponse:
    # The database is failing (a full disk, PostgreSQL down): a failing dependency, worth
    # retrying later, and nothing of this request was stored.
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})


def install_error_handling(app: FastAPI) -> None:
    from mail.store.base import StoreUnavailableError

    app.add_exception_handler(RequestValidationError, _validation_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(StoreUnavailableError, _store_unavailable_handler)
    app.add_middleware(CorrelationIdMiddleware)
