"""v1.3's SwarmRegistry methods that ours does not otherwise have: `get_public_endpoints`
and `from_dict` (the inverse of `to_dict`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mail.net.registry_store import entries_from_document

if TYPE_CHECKING:
    from mail.net.types import SwarmEndpoint


class V13RegistryMethods:
    """Mixed into SwarmRegistry (which provides the attributes used here)."""

    local_swarm_name: str
    endpoints: dict[str, SwarmEndpoint]
    _tokens: dict[str, str]

    if TYPE_CHECKING:

        def __init__(
            self,
            local_swarm_name: str,
            local_base_url: str,
            persistence_file: str | None = None,
            local_swarm_description: str = "",
            local_swarm_keywords: list[str] | None = None,
            local_swarm_public: bool = False,
        ) -> None: ...

        def _refresh(self, *, force: bool = False) -> None: ...

    def get_public_endpoints(self) -> dict[str, SwarmEndpoint]:
        """The endpoints marked public, by swarm name (the local one included, if public).
        `get_public_endpoints_cleaned` gives the same without token information."""
        self._refresh()
        return {name: ep for name, ep in self.endpoints.items() if ep.get("public")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """A registry from `to_dict()`'s shape: the local swarm's settings and the remote
        endpoints (a raw token found in ``auth_token_ref`` is kept in memory only)."""
        registry = cls(
            data.get("local_swarm_name", ""),
            data.get("local_base_url", ""),
            data.get("persistence_file"),
            local_swarm_description=data.get("local_swarm_description", ""),
            local_swarm_keywords=data.get("local_swarm_keywords") or [],
            local_swarm_public=bool(data.get("local_swarm_public", False)),
        )
        entries, tokens = entries_from_document(data, registry.local_swarm_name, True)
        registry._tokens.update(tokens)
        registry.endpoints.update(entries)
        return registry
