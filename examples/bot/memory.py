"""The persona's context (its memories as `ID:N` lines, read through the gateway), the tool
runner (each call through the gateway's tool client, saying what the LLM was shown as `seen`),
and one message answered with both, whether it came from Discord or the terminal."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts import MemoryListing, MemoryStatus
from examples.bot.llm import ChatCompletions, answer_with_tools
from gateway import Gateway, MemoryReader, MessageContext, ToolClient
from gateway.tool_client import seen_revisions
from infra.observability.logs import get_logger

__all__ = ["Persona", "ToolRunner", "build_context", "seen_after"]

log = get_logger(__name__)

INSTRUCTIONS = (
    "You are {name}, a member of this Discord server. Below are your long-term memories, each "
    "as ID:N and its text. When someone tells you something worth keeping, save it with "
    "create_long_term_memory; when a memory is wrong or outdated, change or delete it by its N "
    "with update_long_term_memory. In a memory {{user}} stands for the person it is about (in "
    "a server memory, who taught it) and {{bot}} for you: write new ones the same way."
)


async def build_context(
    memories: MemoryReader, where: MessageContext, name: str
) -> tuple[str, MemoryListing]:
    """The system prompt of persona `name`, with the server's memories and each participant's,
    and the listing it shows (the calls' `seen`). A server or persona the service does not
    know has no memories yet."""
    people = where.participants
    server_key = str(where.guild_id or where.triggerer_id)  # a DM is a server of its own
    try:
        listing = await memories.read(server_key, where.persona_id, [p.user_id for p in people])
    except LookupError:
        listing = MemoryListing()
    lines = [INSTRUCTIONS.format(name=name), "", "Server memories:"]
    lines += listing.server_lines() or ["(none)"]
    for person in people:
        lines += ["", f"Personal memories of {person.display_label}:"]
        lines += listing.personal_lines(person.user_id) or ["(none)"]
    return "\n".join(lines), listing


def seen_after(
    seen: MemoryListing | Mapping[int | str, int] | None, answer: dict[str, Any]
) -> dict[int | str, int]:
    """What the LLM has been shown once it read `answer`: a conflict quoted the memory's new
    revision; a change of its own is the newest (a second change of it is not refused)."""
    revisions: dict[int | str, int] = {k: r for k, r in (seen_revisions(seen) or {}).items()}
    memory_id = answer.get("memory_id")
    if answer.get("status") == MemoryStatus.CONFLICT.value and memory_id is not None:
        revisions[str(memory_id)] = int(answer["current_revision_id"])
    elif answer.get("success") and memory_id is not None:
        revisions.pop(str(memory_id), None)
    return revisions


@dataclass(slots=True)
class ToolRunner:
    """Runs one reply's tool calls through the gateway's tool client (a `RunTool`)."""

    tool_client: ToolClient
    where: MessageContext
    reply_id: str  # unique per reply (the message's id): the worker keys idempotency on it
    calls: int = 0
    changed: list[str] = field(default_factory=list)  # the calls that changed a memory

    async def __call__(self, tool_name: str, arguments: str) -> dict[str, Any]:
        self.calls += 1
        tool_call_id = f"{self.reply_id}-{self.calls}"
        answer = await self.tool_client.call(tool_call_id, tool_name, arguments, self.where)
        log.info("bot.tool_call_answered", tool_call_id=tool_call_id, status=answer.get("status"))
        self.where = dataclasses.replace(self.where, seen=seen_after(self.where.seen, answer))
        if answer.get("success"):
            self.changed.append(tool_call_id)
        return answer


@dataclass(frozen=True, slots=True)
class Persona:
    """The character the bot plays, its memories through `gateway`, its words from `llm`."""

    name: str
    gateway: Gateway
    llm: ChatCompletions

    async def reply(self, where: MessageContext, text: str, reply_id: str) -> tuple[str, list[str]]:
        """The reply to `text`, written in `where`, and the calls that changed a memory (their
        notices follow). Raises `LlmUnavailable`."""
        prompt, listing = await build_context(self.gateway.memories, where, self.name)
        where = dataclasses.replace(where, seen=listing)
        run_tool = ToolRunner(self.gateway.tool_client, where, reply_id)
        return await answer_with_tools(self.llm, prompt, text, run_tool), run_tool.changed
