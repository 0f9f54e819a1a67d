"""Example consultant agent (no actions): gives recommendations."""
