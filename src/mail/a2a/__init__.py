"""MAIL <-> A2A bridge (see docs/a2a.md).

Inbound: the server's Agent Card and JSON-RPC binding (``routes``, ``bridge``, ``executor``,
``card``, ``mapping``), on the SDK ``a2a-sdk``; task cancel (``cancel``).
Outbound: A2A agents as interswarm peers (``peer``).
"""
