"""A scripted OpenAI-compatible chat completions endpoint on 127.0.0.1, for the example bot's
tests: `POST /v1/chat/completions` records the request and answers with the script's next
step, an assistant message (text, or tool calls) or a function of the request that returns
one. With the script spent it answers 500, so that a test whose loop asked once too often
fails there."""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from harness.loopback import serve_on_loopback

__all__ = ["ScriptedLlm", "Step", "running_llm", "says", "tool_answers", "tool_calls"]

Message = dict[str, Any]
Step = Message | Callable[[Message], Awaitable[Message]]

_ids = itertools.count()


def says(text: str) -> Message:
    """An assistant message of text only: the end of a loop."""
    return {"role": "assistant", "content": text}


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> Message:
    """An assistant message calling these tools with these arguments (as a JSON string, as
    OpenAI's API gives them). Its ids begin again at `call_0`, as some servers' do."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for index, (name, arguments) in enumerate(calls)
        ],
    }


def tool_answers(request: Message) -> list[dict[str, Any]]:
    """The tool answers a request gives the model, in order, as the loop wrote them."""
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


class ScriptedLlm:
    def __init__(self) -> None:
        self.requests: list[Message] = []
        self.authorizations: list[str | None] = []
        self._steps: deque[Step] = deque()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        """`LTM_LLM_BASE_URL`: up to the `/v1` that `/chat/completions` follows."""
        assert self._port is not None, "not started"
        return f"http://127.0.0.1:{self._port}/v1"

    def script(self, *steps: Step) -> None:
        """Answers to the next requests, one each, after those scripted before."""
        self._steps.extend(steps)

    def drop_script(self) -> int:
        """Forgets the steps not used yet; how many there were."""
        unused = len(self._steps)
        self._steps.clear()
        return unused

    def system_prompt(self, index: int) -> str:
        """The system prompt of request `index` (negative: from the end)."""
        [system] = [m["content"] for m in self.requests[index]["messages"] if m["role"] == "system"]
        return str(system)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner, self._port = await serve_on_loopback(app)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        if not self._steps:
            return web.json_response({"error": {"message": "the script is spent"}}, status=500)
        step = self._steps.popleft()
        message = step if isinstance(step, dict) else await step(body)
        return web.json_response(
            {
                "id": f"chatcmpl-{next(_ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
            }
        )


@asynccontextmanager
async def running_llm() -> AsyncIterator[ScriptedLlm]:
    llm = ScriptedLlm()
    await llm.start()
    try:
        yield llm
    finally:
        await llm.close()
