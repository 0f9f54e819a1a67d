"""Test helpers shared by several test modules (scripted LLM provider, ...)."""
