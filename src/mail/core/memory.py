"""Agent memory: where acknowledge_broadcast keeps what an agent chose to remember."""

from __future__ import annotations

import datetime
from typing import Any, Protocol


def memory_namespace(agent_name: str) -> tuple[str]:
    return (f"{agent_name}_memory",)


class AgentMemory(Protocol):
    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None: ...

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]: ...


class InMemoryAgentMemory:
    """Process-local memory with a simple lexical search (no embeddings, no network).

    Search results have the shape of LangGraph store items, like the PostgreSQL-backed
    memory: `{"namespace", "key", "value", "created_at", "updated_at", "score"}`.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[str], dict[str, dict[str, Any]]] = {}

    async def put(self, agent_name: str, key: str, value: dict[str, Any]) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        namespace = memory_namespace(agent_name)
        previous = self._items.get(namespace, {}).get(key)
        self._items.setdefault(namespace, {})[key] = {
            "namespace": list(namespace),
            "key": key,
            "value": dict(value),
            "created_at": previous["created_at"] if previous else now,
            "updated_at": now,
        }

    async def search(self, agent_name: str, query: str, limit: int = 5) -> list[dict[str, Any]]:
        items = list(self._items.get(memory_namespace(agent_name), {}).values())
        terms = [t for t in query.lower().split() if t]
        scored = []
        for item in items:
            text = str(item["value"]).lower()
            score = sum(text.count(t) for t in terms) if terms else None
            if score is None or score > 0:
                scored.append((score or 0, item))
        scored.sort(key=lambda pair: (pair[0], pair[1]["updated_at"]), reverse=True)
        return [{**item, "score": score if terms else None} for score, item in scored[:limit]]

    async def close(self) -> None:
        self._items.clear()


def acknowledgement_entries(incoming_xml: str, note: str | None) -> list[dict[str, str]]:
    """The two entries stored when an agent acknowledges a broadcast."""
    acknowledged = "<acknowledged broadcast/>"
    if note:
        acknowledged = f"{acknowledged}\n{note}"
    return [
        {"role": "user", "content": incoming_xml},
        {"role": "assistant", "content": acknowledged},
    ]
