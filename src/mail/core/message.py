"""MAIL message shapes and pure helpers (addresses, constructors, the XML agents read)."""

from __future__ import annotations

import datetime
import operator
import os
import time
from typing import Any, Literal, TypedDict

AddressType = Literal["admin", "agent", "system", "user"]

MAIL_MESSAGE_TYPES: tuple[str, ...] = (
    "request",
    "response",
    "broadcast",
    "interrupt",
    "broadcast_complete",
)
INTERSWARM_MESSAGE_TYPES: tuple[str, ...] = ("request", "response", "broadcast", "interrupt")
ALL_AGENTS = "all"


class MAILAddress(TypedDict):
    address_type: AddressType
    address: str


class MAILRequest(TypedDict):
    task_id: str
    request_id: str
    sender: MAILAddress
    recipient: MAILAddress
    subject: str
    body: str
    sender_swarm: str | None
    recipient_swarm: str | None
    routing_info: dict[str, Any] | None


class MAILResponse(MAILRequest):
    """The fields of a request; a response carries a fresh `request_id`."""


class _FanoutFields(TypedDict):
    """What broadcasts and interrupts share: one sender, many recipients."""

    task_id: str
    sender: MAILAddress
    recipients: list[MAILAddress]
    subject: str
    body: str
    sender_swarm: str | None
    recipient_swarms: list[str] | None
    routing_info: dict[str, Any] | None


class MAILBroadcast(_FanoutFields):
    broadcast_id: str


class MAILInterrupt(_FanoutFields):
    interrupt_id: str


MAILPayload = MAILRequest | MAILResponse | MAILBroadcast | MAILInterrupt


class MAILMessage(TypedDict):
    id: str
    timestamp: str
    message: MAILPayload
    msg_type: str


class MAILInterswarmMessage(TypedDict):
    message_id: str
    source_swarm: str
    target_swarm: str
    timestamp: str
    payload: MAILPayload
    msg_type: Literal["request", "response", "broadcast", "interrupt"]
    auth_token: str | None
    task_owner: str
    task_contributors: list[str]
    metadata: dict[str, Any] | None


# --------------------------------------------------------------------------- addresses


def create_address(address: str, address_type: AddressType) -> MAILAddress:
    return {"address_type": address_type, "address": address}


def create_admin_address(address: str) -> MAILAddress:
    return create_address(address, "admin")


def create_agent_address(address: str) -> MAILAddress:
    return create_address(address, "agent")


def create_system_address(address: str) -> MAILAddress:
    return create_address(address, "system")


def create_user_address(address: str) -> MAILAddress:
    return create_address(address, "user")


# The address that means every agent of the local swarm (v1.3 kept this name).
MAIL_ALL_LOCAL_AGENTS: MAILAddress = create_agent_address(ALL_AGENTS)


def get_address_string(address: MAILAddress) -> str:
    return address["address"]


def get_address_type(address: MAILAddress) -> str:
    return address["address_type"]


def parse_agent_address(address: str) -> tuple[str, str | None]:
    """Split `name@swarm` at the first `@`; both parts are stripped."""
    name, sep, swarm = address.partition("@")
    if not sep:
        return address.strip(), None
    return name.strip(), swarm.strip()


def is_valid_swarm_name(name: str) -> bool:
    """A swarm name is non-empty, without '@', ':' or whitespace: it is written after the '@'
    of agent addresses and of ``role:id@swarm`` task contributors."""
    return bool(name) and "@" not in name and ":" not in name and not any(c.isspace() for c in name)


def format_agent_address(agent_name: str, swarm_name: str | None = None) -> MAILAddress:
    """The agent address ``agent_name@swarm_name`` (just ``agent_name`` without a swarm)."""
    return create_agent_address(f"{agent_name}@{swarm_name}" if swarm_name else agent_name)


def parse_task_contributor(contributor: str) -> tuple[str, str, str]:
    """`role:id@swarm` -> (role, id, swarm)."""
    role, colon, rest = contributor.partition(":")
    if not colon or "@" not in rest:
        raise ValueError(
            f"invalid task contributor '{contributor}': expected the form 'role:id@swarm'"
        )
    ident, _, swarm = rest.partition("@")
    return role, ident, swarm


def owner_swarm(task_owner: str) -> str:
    """The swarm part of a `role:id@swarm` owner ('' when malformed)."""
    try:
        return parse_task_contributor(task_owner)[2]
    except ValueError:
        return ""


def parse_task_contributors(contributors: list[str]) -> list[tuple[str, str, str]]:
    """`parse_task_contributor` for each of a list of `role:id@swarm` strings."""
    return [parse_task_contributor(contributor) for contributor in contributors]


def format_task_contributor(role: str, ident: str, swarm: str) -> str:
    return f"{role}:{ident}@{swarm}"


# --------------------------------------------------------------------------- constructors


_IDS_PER_READ = 64
# The next ids, made 64 at a time from one read of random bytes, every step in C: the version
# and variant bits set on all 64 at once (one integer AND and OR), the hex text cut into the
# 5 groups of each id (one itemgetter of 320 slices) and joined with dashes (one format).
# A list: pop and extend are atomic, so threads never share an id.
_ready_ids: list[str] = []
if hasattr(os, "register_at_fork"):  # a forked child must not reuse its parent's ids
    os.register_at_fork(after_in_child=_ready_ids.clear)
_ID_BYTES = 16 * _IDS_PER_READ
# version 4: the high nibble of byte 6 is 4; variant RFC 4122: the top bits of byte 8 are 10
_ID_KEEP = int.from_bytes(bytes.fromhex("ffffffffffff0fff3fffffffffffffff") * _IDS_PER_READ)
_ID_SET = int.from_bytes(bytes.fromhex("00000000000040008000000000000000") * _IDS_PER_READ)
_ID_GROUPS = operator.itemgetter(
    *[
        slice(start + a, start + b)
        for start in range(0, 32 * _IDS_PER_READ, 32)
        for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
    ]
)
_ID_TEXT = "%s-%s-%s-%s-%s " * _IDS_PER_READ


def _more_ids() -> str:
    bits = int.from_bytes(os.urandom(_ID_BYTES)) & _ID_KEEP | _ID_SET
    ids = (_ID_TEXT % _ID_GROUPS(bits.to_bytes(_ID_BYTES).hex())).split()
    _ready_ids.extend(ids[1:])
    return ids[0]


def new_id() -> str:
    """A random (version 4) UUID string, like str(uuid.uuid4()) at a fraction of the cost."""
    try:
        return _ready_ids.pop()
    except IndexError:
        return _more_ids()


def new_task_id() -> str:
    """A time-ordered (version 7, RFC 9562) UUID string for a task the server names: the
    Unix time in milliseconds in its first 48 bits, then 74 random bits (a `new_id`'s).

    Stores keep several indexes by task id; ids made one after the other sort one after the
    other there, so a batch of new tasks lands in one index page instead of one page each."""
    random = new_id()  # "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", y one of 8, 9, a, b
    stamp = "%012x" % (time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF)
    return f"{stamp[:8]}-{stamp[8:]}-7{random[15:]}"


class _UtcStamps:
    """ISO 8601 UTC text of epoch nanoseconds, as ``datetime.isoformat`` writes it (to the
    microsecond, truncated). The text up to the seconds is computed once per second: events
    of a busy server share it, and an event's text costs a division and an f-string."""

    __slots__ = ("cached",)

    def __init__(self) -> None:
        self.cached: tuple[int, str] = (-1, "")  # (second, its text without the offset)

    def iso(self, ns: int) -> str:
        second, rest = divmod(ns, 1_000_000_000)
        cached = self.cached  # one tuple: a thread never pairs one second with another's text
        if cached[0] != second:
            stamp = datetime.datetime.fromtimestamp(second, datetime.UTC).isoformat()
            cached = self.cached = (second, stamp[:-6])  # without "+00:00"
        micro = rest // 1000
        if micro:
            return f"{cached[1]}.{micro:06d}+00:00"
        return f"{cached[1]}+00:00"  # isoformat leaves out a zero fraction


_stamps = _UtcStamps()


def utc_iso(ns: int) -> str:
    """Epoch nanoseconds (``time.time_ns()``) as ISO 8601 UTC text with microseconds."""
    return _stamps.iso(ns)


def utc_now_iso() -> str:
    """Now as ISO 8601 UTC text, as ``datetime.datetime.now(datetime.UTC).isoformat()``."""
    return _stamps.iso(time.time_ns())


def make_request(
    task_id: str,
    sender: MAILAddress,
    recipient: MAILAddress,
    subject: str,
    body: str,
    *,
    sender_swarm: str | None = None,
    recipient_swarm: str | None = None,
    routing_info: dict[str, Any] | None = None,
    request_id: str | None = None,
) -> MAILRequest:
    return {
        "task_id": task_id,
        "request_id": request_id or new_id(),
        "sender": sender,
        "recipient": recipient,
        "subject": subject,
        "body": body,
        "sender_swarm": sender_swarm,
        "recipient_swarm": recipient_swarm,
        "routing_info": routing_info if routing_info is not None else {},
    }


make_response = make_request  # identical shape; a response carries a fresh request_id


def _make_fanout(
    id_key: str,
    fanout_id: str | None,
    task_id: str,
    sender: MAILAddress,
    recipients: list[MAILAddress],
    subject: str,
    body: str,
    sender_swarm: str | None,
    recipient_swarms: list[str] | None,
    routing_info: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        id_key: fanout_id or new_id(),
        "sender": sender,
        "recipients": recipients,
        "subject": subject,
        "body": body,
        "sender_swarm": sender_swarm,
        "recipient_swarms": recipient_swarms,
        "routing_info": routing_info if routing_info is not None else {},
    }


def make_broadcast(
    task_id: str,
    sender: MAILAddress,
    recipients: list[MAILAddress],
    subject: str,
    body: str,
    *,
    sender_swarm: str | None = None,
    recipient_swarms: list[str] | None = None,
    routing_info: dict[str, Any] | None = None,
    broadcast_id: str | None = None,
) -> MAILBroadcast:
    fields = (sender_swarm, recipient_swarms, routing_info)
    return _make_fanout(
        "broadcast_id", broadcast_id, task_id, sender, recipients, subject, body, *fields
    )  # type: ignore[return-value]


def make_interrupt(
    task_id: str,
    sender: MAILAddress,
    recipients: list[MAILAddress],
    subject: str,
    body: str,
    *,
    sender_swarm: str | None = None,
    recipient_swarms: list[str] | None = None,
    routing_info: dict[str, Any] | None = None,
    interrupt_id: str | None = None,
) -> MAILInterrupt:
    fields = (sender_swarm, recipient_swarms, routing_info)
    return _make_fanout(
        "interrupt_id", interrupt_id, task_id, sender, recipients, subject, body, *fields
    )  # type: ignore[return-value]


def make_message(payload: Any, msg_type: str, *, message_id: str | None = None) -> MAILMessage:
    return {
        "id": message_id or new_id(),
        "timestamp": utc_now_iso(),
        "message": payload,
        "msg_type": msg_type,
    }


def message_recipients(message: MAILMessage) -> list[MAILAddress]:
    """The recipients of any message type as a list."""
    payload: Any = message["message"]
    if "recipients" in payload:
        return list(payload["recipients"])
    return [payload["recipient"]]


# --------------------------------------------------------------------------- XML rendering


def _xml_lines(key: str, value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append(f"<{key}>")
        for k, v in value.items():
            _xml_lines(str(k), v, out)
        out.append(f"</{key}>")
    elif isinstance(value, list):
        for item in value:
            _xml_lines(key, item, out)
    else:
        out.append(f"<{key}>{value}</{key}>")


def build_body_xml(content: dict[str, Any]) -> str:
    """Render a dict as unindented XML inside `<body>`; list items repeat their tag."""
    lines: list[str] = ["<body>"]
    for key, value in content.items():
        _xml_lines(str(key), value, lines)
    lines.append("</body>")
    return "\n".join(lines)


def _render_timestamp(timestamp: str) -> str:
    if len(timestamp) in (25, 32) and timestamp.endswith("+00:00") and timestamp[10] == "T":
        return timestamp  # already UTC in isoformat (what utc_now_iso produces)
    try:
        parsed = datetime.datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.astimezone(datetime.UTC).isoformat()


def _address_xml(address: MAILAddress, forced_type: str | None = None) -> str:
    kind = forced_type or address["address_type"]
    return f'<address type="{kind}">{address["address"]}</address>'


def _python_list_text(items: list[str]) -> str:
    """``repr(items)``, written directly when no item needs quoting other than in '...'."""
    joined = "', '".join(items)
    if joined.isprintable() and "\\" not in joined and joined.count("'") == 2 * (len(items) - 1):
        return f"['{joined}']"
    return repr(items)


# (address type, address) -> the `<to>` text of a message to that one recipient. Bounded: the
# addresses are the swarm's agents (and "all") in practice, but any text may be an address.
_one_recipient_text: dict[tuple[str, str], str] = {}
_ONE_RECIPIENT_TEXTS = 1024


def _remember_one_recipient(key: tuple[str, str]) -> str:
    text = _python_list_text([f'<address type="{key[0]}">{key[1]}</address>'])
    if len(_one_recipient_text) >= _ONE_RECIPIENT_TEXTS:
        _one_recipient_text.clear()
    _one_recipient_text[key] = text
    return text


def build_mail_xml(message: MAILMessage, is_manual: bool = False) -> dict[str, str]:
    """The user-role chat entry an agent receives for `message`.

    The `<to>` element holds a Python-style list of address elements, matching the text
    agents of the original implementation were prompted with.
    """
    payload: Any = message["message"]
    if is_manual:
        return {"role": "user", "content": payload["body"]}
    sender = payload["sender"]
    recipients = payload["recipients"] if "recipients" in payload else (payload["recipient"],)
    if len(recipients) == 1:  # a request, a response, a broadcast to all: rendered once
        only = recipients[0]
        key = (only["address_type"], only["address"])
        to_list = _one_recipient_text.get(key) or _remember_one_recipient(key)
    else:
        to_list = _python_list_text([_address_xml(r) for r in recipients])
    content = (
        "\n<incoming_message>\n"
        f"<timestamp>{_render_timestamp(message['timestamp'])}</timestamp>\n"
        f'<from type="{sender["address_type"]}">{sender["address"]}</from>\n'
        f"<to>\n{to_list}\n</to>\n"
        f"<subject>{payload['subject']}</subject>\n"
        f"<body>{payload['body']}</body>\n"
        "</incoming_message>\n"
    )
    return {"role": "user", "content": content}


def build_interswarm_mail_xml(message: MAILInterswarmMessage) -> str:
    """Readable rendering of an interswarm envelope, used in event descriptions."""
    envelope = message
    payload: Any = envelope["payload"]
    if "recipients" in payload:
        to = repr([_address_xml(r, "agent") for r in payload["recipients"]])
    else:
        to = _address_xml(payload["recipient"], "agent")
    return (
        "<interswarm_message>\n"
        f"<source_swarm>{envelope['source_swarm']}</source_swarm>\n"
        f"<target_swarm>{envelope['target_swarm']}</target_swarm>\n"
        f"<timestamp>{_render_timestamp(envelope['timestamp'])}</timestamp>\n"
        f'<from type="agent">{payload["sender"]["address"]}</from>\n'
        f"<to>\n{to}\n</to>\n"
        f"<subject>{payload['subject']}</subject>\n"
        f"<body>{payload['body']}</body>\n"
        "</interswarm_message>"
    )
