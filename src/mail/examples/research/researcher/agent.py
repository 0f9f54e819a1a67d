"""Factory of the research assistant swarm's `researcher` agent."""

from mail.factories.supervisor import LiteLLMSupervisorFunction


class LiteLLMResearcherFunction(LiteLLMSupervisorFunction):
    """The `researcher` agent: breaks a question down, asks the specialists and writes the answer.

    A supervisor (it has `task_complete`): the swarm's entrypoint must be able to answer.
    """


__all__ = ["LiteLLMResearcherFunction"]
