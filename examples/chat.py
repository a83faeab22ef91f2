"""`make chat`: the example bot's loop (`examples.bot`) in the terminal, without Discord. You
write as Bob (or Alice: `--as alice`) in the demo server `make run` puts back; Tomori answers,
her tool calls go through `make run`'s worker, and the notices are drawn as the console gateway
draws them. A line is a message, answered from the memories alone; EOF (Ctrl-D) ends it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Final

from contracts import EmbedRequested, Participant
from examples.bot.llm import ChatCompletions, LlmUnavailable
from examples.bot.memory import Persona
from gateway import ConsoleSender, Gateway, MessageContext, SendResult
from infra.observability.logs import configure_logging
from infra.settings import Settings

__all__ = ["NoticePrinter", "chat", "main", "typed_lines"]

# examples/demo.sql's server, channel, persona and people, as the example call files name them.
GUILD, CHANNEL, BOT_USER = "111111111111111111", "444444444444444444", "555555555555555555"
PERSONA_ID: Final = 900001
PEOPLE: Final = {
    "bob": Participant(user_id="222222222222222222", display_label="Bob", aliases=("Bob", "bob")),
    "alice": Participant(user_id="333333333333333333", display_label="Alice", aliases=("Alice",)),
}
# `make run`'s console gateway consumes shard 0: the chat's answers and notices come to a shard
# of its own, which that gateway never takes.
CHAT_SHARD: Final = 1
NO_LLM: Final = (
    "make chat needs an LLM: set LTM_LLM_BASE_URL to an OpenAI-compatible endpoint up to its /v1 "
    "(http://127.0.0.1:8080/v1 for llama.cpp's server, https://api.openai.com/v1), and "
    "LTM_LLM_MODEL and LTM_LLM_API_KEY where it needs them."
)


class NoticePrinter(ConsoleSender):
    """Draws each notice as the console gateway does, and knows whose it drew."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn: set[str] = set()
        self._more = asyncio.Event()

    async def send(self, request: EmbedRequested) -> SendResult:
        result = await super().send(request)
        self.drawn.add(request.tool_call_id)
        self._more.set()
        return result

    async def wait_for(self, tool_call_ids: Iterable[str], timeout_s: float = 10.0) -> None:
        """Until the notices of these calls are drawn, or the timeout."""
        with contextlib.suppress(TimeoutError):  # a later one is drawn when it comes
            async with asyncio.timeout(timeout_s):
                while not set(tool_call_ids) <= self.drawn:
                    self._more.clear()
                    await self._more.wait()


async def chat(
    settings: Settings, llm: ChatCompletions, me: str, lines: AsyncIterator[str]
) -> None:
    """Answers each line as the bot answers a mention; its notices come before the reply."""
    printer, people = NoticePrinter(), list(PEOPLE.values())
    author = PEOPLE[me]
    async with Gateway(settings, sender=printer, shards=(CHAT_SHARD,)) as gateway:
        tomori = Persona("Tomori", gateway, llm)
        where = MessageContext(
            GUILD, CHANNEL, author.user_id, BOT_USER, PERSONA_ID, CHAT_SHARD, people
        )
        async for text in lines:
            try:
                reply, changed = await tomori.reply(
                    where, f"{author.display_label}: {text}", f"chat-{uuid.uuid4()}"
                )
            except LlmUnavailable as error:
                print(f"make chat: the LLM did not answer: {error}", file=sys.stderr)
                continue
            await printer.wait_for(changed)
            print(f"{tomori.name}: {reply}", flush=True)


async def typed_lines(prompt: str) -> AsyncIterator[str]:
    """Stdin's lines: each after a prompt in a terminal, echoed when piped (a transcript)."""
    loop, lines = asyncio.get_running_loop(), asyncio.Queue[str | None]()

    def read() -> None:  # in a daemon thread, whose blocked read never holds up the exit
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    terminal = sys.stdin.isatty()
    while True:
        if terminal:
            print(prompt, end="", flush=True)
        line = await lines.get()
        if line is None:
            return
        if not terminal:
            print(prompt + line, flush=True)
        if line.strip():
            yield line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chat", description=__doc__)
    parser.add_argument("--as", dest="me", choices=sorted(PEOPLE), default="bob")
    me = parser.parse_args(argv).me
    settings = Settings()
    llm = ChatCompletions.from_settings(settings)
    if llm is None:
        print(NO_LLM, file=sys.stderr)
        return 2
    # The gateway's own lines would bury the conversation: warnings only, unless asked for.
    configure_logging(os.environ.get("LTM_LOG_LEVEL", "WARNING"), settings.log_format)
    print(f"Tomori, in the demo server; you are {PEOPLE[me].display_label}. Ctrl-D ends.")
    try:
        asyncio.run(chat(settings, llm, me, typed_lines(f"{PEOPLE[me].display_label}> ")))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
