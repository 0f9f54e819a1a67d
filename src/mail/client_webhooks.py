"""What `MAILClient` gains for push delivery: the `/webhooks` routes (docs/webhooks.md).

Mixed into `MAILClient`; needs its `_request_json`, `_open` and `_open_work`. Errors follow
the client's contract (`MAILClientError` with the server's status and detail). The calls that
change something (create, change, delete, rotate, test, retry a delivery) carry a fresh
Idempotency-Key and are retried with it after a transient failure, like `post_message`: a
create whose answer was lost must not leave a second webhook with a secret nobody saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote


def _path(webhook_id: str, rest: str = "") -> str:
    return f"/webhooks/{quote(webhook_id, safe='')}{rest}"


class WebhookClientMethods:
    if TYPE_CHECKING:  # provided by MAILHTTPConnection

        async def _request_json(
            self,
            method: str,
            path: str,
            *,
            payload: Any = None,
            params: Any = None,
            starts_work: bool = False,
        ) -> Any: ...

        async def _open(
            self,
            method: str,
            path: str,
            *,
            payload: Any = None,
            params: Any = None,
            accept: str = "application/json",
        ) -> Any: ...

        async def _open_work(
            self,
            method: str,
            path: str,
            *,
            payload: Any = None,
            accept: str = "application/json",
        ) -> Any: ...

    async def create_webhook(
        self,
        url: str,
        events: list[str] | None = None,
        *,
        description: str | None = None,
        scope: str | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """POST /webhooks — subscribe `url` to your tasks' events (default: every event).
        The answer's `secret` (`whsec_...`) is shown this once."""
        payload: dict[str, Any] = {"url": url, "events": events or ["*"]}
        for name, value in (("description", description), ("scope", scope), ("secret", secret)):
            if value is not None:
                payload[name] = value
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", "/webhooks", payload=payload, starts_work=True
        )

    async def list_webhooks(self) -> list[dict[str, Any]]:
        """GET /webhooks — your webhooks (never their secrets)."""
        found = await self._request_json("GET", "/webhooks")
        return list(found["webhooks"])

    async def get_webhook(self, webhook_id: str) -> dict[str, Any]:
        """GET /webhooks/{id}."""
        return await self._request_json("GET", _path(webhook_id))  # type: ignore[no-any-return]

    async def update_webhook(self, webhook_id: str, **changes: Any) -> dict[str, Any]:
        """PATCH /webhooks/{id} — `url`, `events`, `description`, `active`."""
        return await self._request_json(  # type: ignore[no-any-return]
            "PATCH", _path(webhook_id), payload=changes, starts_work=True
        )

    async def delete_webhook(self, webhook_id: str) -> None:
        """DELETE /webhooks/{id} — with its delivery log."""
        response = await self._open_work("DELETE", _path(webhook_id))
        response.release()

    async def test_webhook(self, webhook_id: str) -> dict[str, Any]:
        """POST /webhooks/{id}/test — queue a `webhook.ping` delivery."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST", _path(webhook_id, "/test"), starts_work=True
        )

    async def rotate_webhook_secret(
        self, webhook_id: str, overlap_seconds: float = 86400
    ) -> dict[str, Any]:
        """POST /webhooks/{id}/rotate-secret — a new secret (shown once); the old one keeps
        signing for `overlap_seconds`."""
        return await self._request_json(  # type: ignore[no-any-return]
            "POST",
            _path(webhook_id, "/rotate-secret"),
            payload={"overlap_seconds": overlap_seconds},
            starts_work=True,
        )

    async def webhook_deliveries(
        self, webhook_id: str, *, status: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """GET /webhooks/{id}/deliveries — newest first, each with its attempts."""
        params = {"limit": str(limit)}
        if status:
            params["status"] = status
        found = await self._request_json("GET", _path(webhook_id, "/deliveries"), params=params)
        return list(found["deliveries"])

    async def retry_webhook_delivery(self, webhook_id: str, delivery_id: str) -> dict[str, Any]:
        """POST /webhooks/{id}/deliveries/{delivery_id}/retry — send it again now."""
        path = _path(webhook_id, f"/deliveries/{quote(delivery_id, safe='')}/retry")
        return await self._request_json("POST", path, starts_work=True)  # type: ignore[no-any-return]
