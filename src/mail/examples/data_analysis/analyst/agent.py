"""Factory of the data analysis swarm's `analyst` agent."""

from mail.factories.supervisor import LiteLLMSupervisorFunction


class LiteLLMAnalystFunction(LiteLLMSupervisorFunction):
    """The `analyst` agent: plans an analysis, asks the specialists and writes the conclusion.

    A supervisor (it has `task_complete`): the swarm's entrypoint must be able to answer.
    """


__all__ = ["LiteLLMAnalystFunction"]
