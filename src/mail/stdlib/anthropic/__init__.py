"""Placeholder, empty on purpose (as in the original, which ships this package with nothing in it).

For Claude models use the LiteLLM agent functions, which have a native Anthropic path:
``"factory": "python::mail.factories:LiteLLMAgentFunction"`` with ``"llm": "anthropic/<model>"``.
"""

__all__: list[str] = []
