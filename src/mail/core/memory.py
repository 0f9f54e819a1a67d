"""Agent memory: where acknowledge_broadcast keeps what an agent chose to remember."""

from __future__ import annotations

from typing import Any, Protocol


def memory_namespace(agent_name: str) -> tuple[str]:
    return (f"{agent_name}_memory",)


class AgentMemory(Protocol):
    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None: ...

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]: ...


class InMemoryAgentMemory:
    """Process-local memory with a simple lexical search (no embeddings, no network)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str], dict[str, dict[str, Any]]] = {}

    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None:
        self._items.setdefault(memory_namespace(agent_name), {})[key] = dict(value)

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        items = list(self._items.get(memory_namespace(agent_name), {}).values())
        terms = [t for t in query.lower().split() if t]
        if not terms:
            return items[:limit]
        scored = []
        for item in items:
            text = str(item).lower()
            score = sum(text.count(t) for t in terms)
            if score:
                scored.append((score, item))
        scored.sort(key=lambda pair: -pair[0])
        return [item for _, item in scored[:limit]]


def acknowledgement_entries(incoming_xml: str, note: str | None) -> list[dict[str, str]]:
    """The two entries stored when an agent acknowledges a broadcast."""
    acknowledged = "<acknowledged broadcast/>"
    if note:
        acknowledged = f"{acknowledged}\n{note}"
    return [
        {"role": "user", "content": incoming_xml},
        {"role": "assistant", "content": acknowledged},
    ]
