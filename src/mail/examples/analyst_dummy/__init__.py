"""Example analyst agent (no actions): analyses data and trends."""
