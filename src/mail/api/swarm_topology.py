"""MAILSwarm's view of its own wiring: agents and actions by name, who may message whom
(the adjacency matrix, readable and writable), and sub-swarm templates of its agents."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from mail.api.actions import MAILAction
    from mail.api.agents import MAILAgent
    from mail.core.runtime import MAILRuntime


# The settings a swarm template and its instances both hold, under the same names.
_SHARED_SETTINGS = (
    "name",
    "version",
    "entrypoint",
    "enable_interswarm",
    "breakpoint_tools",
    "exclude_tools",
    "task_message_limit",
    "description",
    "keywords",
    "enable_db_agent_histories",
    "review_ignore_ends_task",
)


def swarm_settings(source: Any) -> dict[str, Any]:
    """`source`'s settings that a template hands to its instances and an instance back to
    a template (`MAILSwarmTemplate.instantiate`, `SwarmTopology._template`)."""
    return {name: getattr(source, name) for name in _SHARED_SETTINGS}


class SwarmTopology:
    """Mixed into MAILSwarm (which provides the attributes declared here)."""

    template_type: ClassVar[Callable[..., Any]]
    name: str
    version: str
    agents: list[MAILAgent]
    actions: list[MAILAction]
    runtime: MAILRuntime
    entrypoint: str
    enable_interswarm: bool
    breakpoint_tools: list[str]
    exclude_tools: list[str]
    task_message_limit: int | None
    description: str
    keywords: list[str]
    enable_db_agent_histories: bool | None
    review_ignore_ends_task: bool

    @property
    def agents_by_name(self) -> dict[str, MAILAgent]:
        """`agents` keyed by name (the documented attribute is the list)."""
        return {a.name: a for a in self.agents}

    @property
    def actions_by_name(self) -> dict[str, MAILAction]:
        """`actions` keyed by name (the documented attribute is the list)."""
        return {a.name: a for a in self.actions}

    @property
    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]

    @property
    def supervisors(self) -> list[MAILAgent]:
        """The agents that can complete tasks."""
        return [a for a in self.agents if a.can_complete_tasks]

    @property
    def adjacency_matrix(self) -> list[list[int]]:
        """``adj[i][j]`` is 1 when agent i may message agent j (order of `agent_names`)."""
        names = self.agent_names
        return [[1 if other in a.comm_targets else 0 for other in names] for a in self.agents]

    def _template(self) -> Any:
        names = self.agent_names
        return self.template_type(
            agents=[a._to_template(names) for a in self.agents],
            actions=list(self.actions),
            **swarm_settings(self),
        )

    def get_subswarm(
        self, names: list[str], name_suffix: str, entrypoint: str | None = None
    ) -> Any:
        """A ``MAILSwarmTemplate`` of some of this instance's agents, as they are wired now."""
        return self._template().get_subswarm(names, name_suffix, entrypoint)

    def update_from_adjacency_matrix(self, adj: list[list[int]]) -> None:
        names = self.agent_names
        if len(adj) != len(names) or any(len(row) != len(names) for row in adj):
            raise ValueError(f"adjacency matrix must be {len(names)}x{len(names)}")
        for agent, row in zip(self.agents, adj, strict=True):
            targets = [n for n, flag in zip(names, row, strict=True) if flag and n != agent.name]
            remote = [t for t in agent.comm_targets if "@" in t]
            agent.comm_targets = targets + remote
            self.runtime.agents[agent.name].comm_targets = targets + remote
