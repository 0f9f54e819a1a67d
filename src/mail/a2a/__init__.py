"""MAIL <-> A2A bridge (see docs/a2a.md)."""
