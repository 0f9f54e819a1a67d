"""Text returned by the MAIL `help` tool."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger("mail.tools")

# Tools an agent can ask about through `help(get_tool_help=[...])`, in the order of the enum
# offered in the tool schema.
TOOL_HELP_NAMES: tuple[str, ...] = (
    "send_request",
    "send_response",
    "send_broadcast",
    "send_interrupt",
    "acknowledge_broadcast",
    "ignore_broadcast",
    "await_message",
    "task_complete",
)

SUMMARY_TEXT = """\
MAIL (Multi-Agent Interface Layer) lets the agents of a swarm work together by exchanging \
messages, much like colleagues exchanging e-mail.

- Every message has a sender, one or more recipients, a subject and a body. Messages addressed \
to you arrive as <incoming_message> blocks in your conversation.
- There are four kinds of message: a request asks another agent for something; a response \
answers a request; a broadcast informs every agent at once; an interrupt is an urgent message \
that is handled before ordinary traffic.
- You act only by calling tools. Use `send_request` to delegate or ask, `send_response` to \
answer whoever asked you, and `await_message` to end your turn while you wait for replies.
- Broadcasts do not need an answer: use `acknowledge_broadcast` to keep one in memory or \
`ignore_broadcast` to drop it.
- You may only message the agents listed in your tools' `target` parameter. Agents in other \
swarms, when allowed, are addressed as agent-name@swarm-name.
- A task ends when an agent that is allowed to finish tasks calls `task_complete` with the final \
answer for the user. Nobody replies to the user in any other way.
- Tool results tell you whether an action worked (SUCCESS: ... or ERROR: ...). Read them before \
deciding what to do next."""

# One worked example per tool: when to use it, and a concrete call with its arguments.
TOOL_EXAMPLES: dict[str, str] = {
    "send_request": """\
Ask another agent to do something or to give you information. The recipient sees your subject \
and body and is expected to answer with `send_response`.

Example: you are the supervisor and need a forecast from the `weather` agent.
send_request(target="weather", subject="Forecast for Paris", \
body="What will the weather be in Paris tomorrow? Reply with the temperature range and the \
chance of rain.")

Afterwards call `await_message` if you have nothing else to do until the answer arrives.""",
    "send_response": """\
Answer an agent that sent you a request. Address the response to the agent that asked, and put \
everything it needs in the body: it cannot see your tool results or your reasoning.

Example: `supervisor` asked you for a forecast.
send_response(target="supervisor", subject="Re: Forecast for Paris", \
body="Tomorrow in Paris: 14-19 °C, 30% chance of rain in the afternoon.")""",
    "send_broadcast": """\
Tell every agent in the swarm the same thing at once. A broadcast is informational: \
recipients usually acknowledge or ignore it rather than reply.

Example: you are coordinating and the plan has changed.
send_broadcast(subject="Plan update", body="We now only need figures for 2024; \
drop any work on earlier years.", targets=["all"])""",
    "send_interrupt": """\
Interrupt an agent with an urgent message. Interrupts are delivered ahead of ordinary \
requests and responses, so use them to stop or redirect work that is already under way.

Example: the `researcher` is working on the wrong question.
send_interrupt(target="researcher", subject="Stop: wrong company", \
body="Please stop researching Acme Ltd; the user meant Acme Inc. (US). Restart with that one.")""",
    "acknowledge_broadcast": """\
Record that you received a broadcast without answering it. The broadcast is kept in your \
memory; nobody is notified. Use it only while handling a broadcast.

Example: the supervisor broadcast a glossary you may need later.
acknowledge_broadcast(note="Glossary of project terms; useful for the final report.")""",
    "ignore_broadcast": """\
Drop a broadcast that does not concern you. Nothing is stored and no message is sent.

Example: a broadcast about billing reaches you, the weather agent.
ignore_broadcast(reason="Billing is outside my role.")""",
    "await_message": """\
End your turn and wait for the next message addressed to you, typically the response to a \
request you sent. It fails when you have no outstanding requests and no messages are waiting, \
because then nothing would ever wake you up.

Example: you asked `math` to check a calculation and have nothing else to do meanwhile.
await_message(reason="Waiting for math to verify the total.")""",
    "task_complete": """\
Finish the task and hand the final answer to the user. Only agents allowed to complete tasks \
have this tool. The finish message is the only thing the user sees, so make it complete and \
self-contained. Call it once, after all the work you depend on has come back.

Example: the weather and math agents have both answered.
task_complete(finish_message="Tomorrow in Paris will be 14-19 °C with a 30% chance of rain; \
the average of those two temperatures is 16.5 °C.")""",
}

_PROTOCOL_NOT_FOUND = "The MAIL protocol specification could not be found in this installation."


def _section(title: str, content: str) -> str:
    return f"===== {title} =====\n\n{content}\n\n"


def tool_help_text(tool_names: Iterable[str]) -> str:
    parts: list[str] = []
    for name in tool_names:
        example = TOOL_EXAMPLES.get(name)
        if example is None:
            # Models that ignore the schema's enum can ask for anything; answering with a note
            # is more useful to them than failing the whole help call.
            known = ", ".join(TOOL_HELP_NAMES)
            example = f"No help is available for `{name}`. Tools with help: {known}."
        parts.append(f"===== Tool `{name}` =====\n{example}\n\n")
    return "".join(parts)


def build_help_text(
    agent_name: str,
    swarm_name: str,
    get_summary: bool = True,
    get_identity: bool = False,
    get_tool_help: Iterable[str] | None = (),
    get_full_protocol: bool = False,
    protocol_text: str | None = None,
) -> str:
    """Build the help text for `agent_name` in `swarm_name` from the selected sections.

    Sections appear in a fixed order (summary, identity, tool help, full protocol) and only when
    selected. `protocol_text` is the specification to include; when it is None the section holds
    a one-line note saying the specification is unavailable.
    """
    sections: list[str] = []
    if get_summary:
        sections.append(_section("SUMMARY", SUMMARY_TEXT))
    if get_identity:
        identity = (
            f"**Name**: {agent_name}\n"
            f"**Swarm**: {swarm_name}\n"
            f"**Local Address**: {agent_name} (same as name)\n"
            f"**Interswarm Address**: {agent_name}@{swarm_name}"
        )
        sections.append(_section("YOUR IDENTITY", identity))
    tool_names = list(get_tool_help or ())
    if tool_names:
        sections.append(_section("TOOL HELP", tool_help_text(tool_names)))
    if get_full_protocol:
        text = protocol_text if protocol_text is not None else _PROTOCOL_NOT_FOUND
        sections.append(_section("FULL MAIL PROTOCOL SPECIFICATION", text))
    return "".join(sections).strip()


def find_protocol_spec(start: Path | None = None) -> Path | None:
    """Locate `spec/SPEC.md` by walking up from `start` (default: this module's directory).

    The search is anchored to the package's location, never to the working directory, so it
    behaves the same wherever the server or CLI is started from.
    """
    origin = (start or Path(__file__)).resolve()
    directory = origin if origin.is_dir() else origin.parent
    for candidate_dir in (directory, *directory.parents):
        candidate = candidate_dir / "spec" / "SPEC.md"
        if candidate.is_file():
            return candidate
    return None


def load_protocol_text(start: Path | None = None) -> str | None:
    """Return the text of the MAIL specification shipped with the package, or None if absent."""
    path = find_protocol_spec(start)
    if path is None:
        logger.debug("no spec/SPEC.md found above %s", start or Path(__file__).parent)
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        logger.warning("could not read protocol specification %s: %s", path, exc)
        return None
