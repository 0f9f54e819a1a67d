"""The MCP server object: who is calling, which member a session is, and the limits."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import HTTPException
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from mail.config import McpConfig
from mail.mcp_face import members
from mail.mcp_face.members import FaceError, Member
from mail.mcp_face.replies import ReplyCap
from mail.server.auth import Caller, unauthorized
from mail.version import __version__

INSTRUCTIONS = (
    "This server is a MAIL multi-agent swarm. Call join_swarm(name, description) to become "
    "an agent of it: the swarm's agents can then message you by name and you can message "
    "them (send_request, send_response, send_broadcast). Their messages wait in your inbox: "
    "wait_for_messages(timeout_seconds) blocks until something arrives, get_messages reads "
    "it; subscribe to mail://inbox to be notified instead. An answer holds what fits; "
    "'more' counts the messages still waiting. To use the swarm like a person instead, call post_message and answer its pauses "
    "with answer_breakpoint or review_actions. Resources mail://swarm/description, "
    "mail://swarm/agents, mail://swarm/threads and mail://tasks/{task_id}/events describe "
    "what is going on."
)
SESSION_KEY = "mail_member"
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


class Face:
    def __init__(self, app: Any, settings: McpConfig) -> None:
        self.app = app
        self.settings = settings
        self.server: MCPServer[Any] = MCPServer(
            name="mail",
            version=__version__,  # serverInfo.version: the SDK's default is ""
            instructions=INSTRUCTIONS,
            warn_on_duplicate_resources=False,
        )
        # Every answer fits [server.mcp] max_reply_bytes (the client's event limit).
        self.server.middleware.append(ReplyCap(settings.max_reply_bytes, settings.max_uri_chars))
        self.background: set[Any] = set()  # post_message(wait=false) tasks, held
        # Called with (member, connection) when a session joins (inbox notices).
        self.on_join: list[Callable[[Member, Any], None]] = []

    def tool(self, description: str) -> Callable[[_Fn], _Fn]:
        """Register a tool. Its text answer is all it sends: without structured output the
        SDK would send the text a second time, as ``{"result": text}``."""
        return self.server.tool(description=description, structured_output=False)

    # ------------------------------------------------------------------ context
    @property
    def state(self) -> Any:
        state = getattr(self.app.state, "mail", None)
        if state is None:
            raise ToolError("the server is starting; try again")
        return state

    async def caller(self, ctx: Context[Any, Any]) -> Caller:
        headers = ctx.headers or {}
        scheme, _, key = str(headers.get("authorization", "")).partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise unauthorized("no API key provided")
        return await self.state.auth.authenticate(key.strip())

    async def instance(self, caller: Caller) -> Any:
        caller_id = caller.id
        if caller.role == "agent":
            # An agent key's instance of its own, whose user id is not the agent's name.
            caller_id = f"mcp-{caller.id}"
        return await self.state.instances.get(caller.role, caller_id, caller.api_key)

    @staticmethod
    def _connection(ctx: Context[Any, Any]) -> Any:
        # The SDK's per-connection state and teardown stack (one per MCP session).
        return ctx.session._connection

    def joined(self, ctx: Context[Any, Any]) -> Member | None:
        """The member this session joined as, while it is one."""
        member: Member | None = self._connection(ctx).state.get(SESSION_KEY)
        if member is not None and not member.active:
            return None  # it left, another session took its name, or its instance stopped
        return member

    def member(self, ctx: Context[Any, Any]) -> Member:
        """The member this session joined as; a ToolError when it has not (or not any more)."""
        member = self.joined(ctx)
        if member is None:
            raise ToolError("join the swarm first: call join_swarm(name, description)")
        return member

    def clamp_wait(self, value: float | None, default: float) -> float:
        seconds = default if value is None else float(value)
        if not math.isfinite(seconds) or seconds < 0:
            raise ToolError("timeout_seconds must be a non-negative number")
        return min(seconds, self.settings.max_wait_seconds)

    # ------------------------------------------------------------------ membership
    async def join(
        self, ctx: Context[Any, Any], name: str, description: str, replace: bool = False
    ) -> Member:
        if self.joined(ctx) is not None:
            raise ToolError("this session already joined; call leave_swarm first")
        caller = await self.caller(ctx)
        if caller.role == "agent":
            # An agent key speaks for one identity: its own name.
            if name and name != caller.id:
                raise ToolError(f"this key belongs to agent '{caller.id}'; join under that name")
            name = caller.id
        state = self.state
        cap = state.config.team_tools.max_description_chars
        if len(description) > cap:
            raise ToolError(
                f"the description is {len(description)} characters; the limit is {cap} "
                "([server.team_tools] max_description_chars)"
            )
        inst = await self.instance(caller)
        team = members.ensure_team(
            inst, state.instances.team_store, state.instances.team_settings, state.swarm_name
        )
        try:
            member = await members.join(
                inst, team, name, description, caller.id, self.settings, replace
            )
        except FaceError as exc:
            raise ToolError(str(exc)) from None
        connection = self._connection(ctx)
        connection.state[SESSION_KEY] = member
        for hook in self.on_join:
            hook(member, connection)
        connection.exit_stack.callback(members.leave, member)  # the session ended
        return member

    def leave(self, ctx: Context[Any, Any]) -> str:
        member = self.member(ctx)
        members.leave(member)
        self._connection(ctx).state.pop(SESSION_KEY, None)
        return member.name


def tool_error(exc: Exception) -> ToolError:
    """A ToolError carrying what an HTTP client would have read."""
    if isinstance(exc, HTTPException):
        return ToolError(f"{exc.status_code}: {exc.detail}")
    return ToolError(str(exc))


def resource_error(exc: Exception) -> ResourceError:
    """A ResourceError carrying what an HTTP client would have read (the SDK hides others)."""
    return ResourceError(str(tool_error(exc)))
