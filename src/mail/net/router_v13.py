"""v1.3's InterswarmRouter methods, as thin wrappers over the router's own.

v1.3 code sends envelopes with ``send_interswarm_message_forward`` / ``_back``, converts a
message with ``convert_local_message_to_interswarm``, posts a user message from an envelope
and reads ``get_routing_stats()``. Each is written here over `InterswarmRouter.send_interswarm`,
`wrap_message` and `post_interswarm_user_message`, with v1.3's error type (ValueError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mail.core.message import parse_agent_address

if TYPE_CHECKING:
    from mail.core.message import MAILInterswarmMessage, MAILMessage

# v1.3's body fields of POST /interswarm/message that an envelope's routing_info may carry.
_ROUTING_FLAGS = ("stream", "ignore_stream_pings")


class V13RouterMethods:
    """Mixed into InterswarmRouter (which provides the attributes used here)."""

    local_swarm_name: str
    swarm_registry: Any
    message_handlers: dict[str, Any]

    if TYPE_CHECKING:  # InterswarmRouter's own methods, used below

        async def send_interswarm(self, envelope: Any, direction: Any) -> dict[str, Any]: ...

        async def post_interswarm_user_message(
            self, base_url_or_swarm: Any, body: Any = None, user_token: Any = None
        ) -> Any: ...

        def wrap_message(self, *args: Any, **kwargs: Any) -> Any: ...

    async def send_interswarm_message_forward(self, message: MAILInterswarmMessage) -> None:
        """POST an envelope to its target's ``/interswarm/forward`` (a new task there)."""
        await self._send_v13(message, "forward")

    async def send_interswarm_message_back(self, message: MAILInterswarmMessage) -> None:
        """POST an envelope to its target's ``/interswarm/back`` (work it takes part in)."""
        await self._send_v13(message, "back")

    async def _send_v13(self, message: MAILInterswarmMessage, direction: str) -> None:
        try:
            await self.send_interswarm(message, direction)
        except Exception as exc:
            raise ValueError(f"failed to send interswarm message {direction}: {exc}") from exc

    def convert_local_message_to_interswarm(
        self,
        message: MAILMessage,
        task_owner: str,
        task_contributors: list[str],
        metadata: dict[str, Any] | None = None,
    ) -> MAILInterswarmMessage:
        """`message` in an envelope for the swarm of its first remote recipient."""
        payload: Any = message["message"]
        recipients = payload.get("recipients") or [payload.get("recipient")]
        swarms = [
            swarm
            for r in recipients
            if isinstance(r, dict)
            for swarm in [parse_agent_address(r.get("address", ""))[1]]
            if swarm
        ]
        if not swarms:
            raise ValueError("the message has no recipient in another swarm (agent@swarm)")
        envelope = self.wrap_message(message, swarms[0], task_owner, task_contributors)
        envelope["metadata"] = dict(metadata or {})
        return envelope  # type: ignore[no-any-return]

    async def post_envelope_as_user_message(self, message: MAILInterswarmMessage) -> Any:
        """v1.3's ``post_interswarm_user_message(envelope)``: the envelope's request or
        broadcast, sent as a user message to its target's ``/interswarm/message`` with the
        envelope's ``auth_token`` as the user's token; returns the remote's answer."""
        try:
            token = message.get("auth_token")
            if not token:
                raise ValueError("user token is required for interswarm user messages")
            payload: Any = message.get("payload")
            if not isinstance(payload, dict):
                raise ValueError("invalid interswarm payload")
            msg_type = message.get("msg_type")
            if msg_type not in ("request", "broadcast"):
                raise ValueError(
                    f"msg_type '{msg_type}' is not supported for interswarm user messages"
                )
            body = payload.get("body")
            if not isinstance(body, str):
                raise ValueError("body is required for interswarm user messages")
            recipients = payload.get("recipients") or [payload.get("recipient")]
            targets = [r["address"] for r in recipients if isinstance(r, dict) and r.get("address")]
            if not targets:
                raise ValueError("targets are required for interswarm user messages")
            request: dict[str, Any] = {"body": body, "targets": targets, "msg_type": msg_type}
            for key in ("subject", "task_id"):
                if isinstance(payload.get(key), str):
                    request[key] = payload[key]
            routing = payload.get("routing_info")
            if isinstance(routing, dict) and routing:
                request["routing_info"] = routing
                for flag in _ROUTING_FLAGS:
                    if flag in routing:
                        request[flag] = bool(routing[flag])
            return await self.post_interswarm_user_message(message["target_swarm"], request, token)
        except Exception as exc:
            raise ValueError(f"error posting interswarm user message: {exc}") from exc

    def get_routing_stats(self) -> dict[str, Any]:
        """The local swarm's name, how many endpoints are known and active, the handlers."""
        return {
            "local_swarm_name": self.local_swarm_name,
            "total_endpoints": len(self.swarm_registry.get_all_endpoints()),
            "active_endpoints": len(self.swarm_registry.get_active_endpoints()),
            "registered_handlers": list(self.message_handlers),
        }
