"""System-prompt augmentation: tell each agent what its communication targets can do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mail.api.agents import MAILAgent

TARGETS_HEADER = "Here are details about the agents you can communicate with:"

_NO_TOOLS = (
    "- No tools: it cannot browse the internet or fetch real-time data; it answers from "
    "what it knows and what it is told."
)
_WEB = "- Web search: it can look up current information on the internet."
_CODE = "- Code interpreter: it can run code to compute or analyse data."


def _prompt_owner(fn: Any) -> Any:
    """The object whose `.system` holds the prompt (wrapper classes keep an inner fn)."""
    for attr in ("supervisor_fn", "action_agent_fn"):
        inner = getattr(fn, attr, None)
        if inner is not None and isinstance(getattr(inner, "system", None), str):
            return inner
    return fn if isinstance(getattr(fn, "system", None), str) else None


def _capabilities(agent: MAILAgent) -> list[str]:
    owner = _prompt_owner(agent.function)
    tools = getattr(owner, "tools", None) or getattr(agent.function, "tools", None) or []
    kinds = {t.get("type") for t in tools if isinstance(t, dict)}
    lines = []
    if any(k and str(k).startswith("web_search") for k in kinds):
        lines.append(_WEB)
    if "code_interpreter" in kinds:
        lines.append(_CODE)
    return lines or [_NO_TOOLS]


def augment_system_prompts(agents: list[MAILAgent]) -> None:
    """Append a section describing each agent's local comm targets to its system prompt."""
    by_name = {a.name: a for a in agents}
    for agent in agents:
        owner = _prompt_owner(agent.function)
        if owner is None:
            continue
        system: str = owner.system
        if TARGETS_HEADER in system:
            system = system[: system.index(TARGETS_HEADER)].rstrip("\n")
        peers = [
            f"Name: {other.name}\nCapabilities:\n" + "\n".join(_capabilities(other)) + "\n\n"
            for other in agents
            if other.name in agent.comm_targets and other.name in by_name
        ]
        # An agent with no local peers gets no section (not a header with nothing under it).
        owner.system = "".join([system, f"\n\n{TARGETS_HEADER}\n\n", *peers]) if peers else system
