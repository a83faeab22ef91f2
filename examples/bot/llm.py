"""The LLM loop, without Discord: an OpenAI-compatible chat completions endpoint is offered the
memory tools; each tool call it makes is run and answered, until it replies in text."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp

from contracts import openai_tools
from infra.settings import Settings

__all__ = ["ChatCompletions", "LlmUnavailable", "RunTool", "answer_with_tools"]

# A model still calling tools after this many rounds is asked once more, without tools.
MAX_TOOL_ROUNDS: Final = 4

RunTool = Callable[[str, str], Awaitable[dict[str, Any]]]  # (tool name, JSON arguments)


class LlmUnavailable(RuntimeError):
    """The endpoint could not be reached, or did not answer with a completion."""


class ChatCompletions:
    """`POST <base URL>/chat/completions` with aiohttp (the gateway's already: no client SDK)."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatCompletions | None:
        """From `LTM_LLM_BASE_URL`, `LTM_LLM_MODEL`, `LTM_LLM_API_KEY`; None without the URL."""
        if not settings.llm_base_url:
            return None
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(settings.llm_base_url, settings.llm_model, key)

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: bool = True
    ) -> dict[str, Any]:
        """The first choice's message; raises `LlmUnavailable`."""
        body: dict[str, Any] = {"messages": messages}
        if self.model:
            body["model"] = self.model
        if tools:
            body["tools"] = openai_tools()
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
                session.post(self.url, json=body, headers=self.headers) as response,
            ):
                if response.status != 200:
                    raise LlmUnavailable(f"{self.url} answered HTTP {response.status}")
                completion = await response.json(content_type=None)
            message: dict[str, Any] = completion["choices"][0]["message"]
        except (aiohttp.ClientError, TimeoutError, ValueError, LookupError, TypeError) as error:
            raise LlmUnavailable(f"{self.url}: {type(error).__name__}") from error
        return message


async def answer_with_tools(
    llm: ChatCompletions, system_prompt: str, user_text: str, run_tool: RunTool
) -> str:
    """The model's reply to `user_text`; each tool call it makes goes through `run_tool`, whose
    answer (what the memory service said) it is given back."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": user_text},
    ]
    for _ in range(MAX_TOOL_ROUNDS):
        reply = await llm.complete(messages)
        if not reply.get("tool_calls"):
            return str(reply.get("content") or "")
        messages.append({"role": "assistant", **reply})
        for call in reply["tool_calls"]:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            # Most endpoints give the arguments as a JSON string, some as an object.
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
            answer = await run_tool(str(function.get("name")), arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(answer)}
            )
    return str((await llm.complete(messages, tools=False)).get("content") or "")
