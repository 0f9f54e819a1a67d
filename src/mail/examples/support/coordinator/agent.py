"""Factory of the customer support swarm's `coordinator` agent."""

from mail.factories.supervisor import LiteLLMSupervisorFunction


class LiteLLMCoordinatorFunction(LiteLLMSupervisorFunction):
    """The `coordinator` agent: routes a customer's query to the specialists and writes the answer.

    A supervisor (it has `task_complete`): the swarm's entrypoint must be able to answer.
    """


__all__ = ["LiteLLMCoordinatorFunction"]
