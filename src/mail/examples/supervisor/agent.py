"""Factory of the example supervisor (the stock LiteLLM supervisor)."""

from mail.factories.supervisor import LiteLLMSupervisorFunction

factory = LiteLLMSupervisorFunction

__all__ = ["LiteLLMSupervisorFunction", "factory"]
