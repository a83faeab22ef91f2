"""`make chat` (examples/chat.py) as a process, its stdin a pipe: the demo data `make run` puts
back, a real worker on it, and a scripted OpenAI-compatible endpoint as the LLM."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from contracts import CREATE_LONG_TERM_MEMORY
from harness.broker import own_topology
from harness.processes import LtmProcess
from harness.services import TestServices, own_database
from infra.run_local import load_demo
from infra.settings import Settings
from tests.support.scripted_llm import ScriptedLlm, running_llm, says, tool_answers, tool_calls

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_database(services: TestServices) -> Iterator[str]:
    # The demo's ids are fixed: they stay out of the shared database.
    with own_database(services, "chat") as url:
        load_demo(Settings(database_url=url))
        yield url


@pytest.fixture(scope="module")
async def chat_settings(settings: Settings, demo_database: str) -> AsyncIterator[Settings]:
    """The demo database, and a topology of the module's own (its worker takes only these)."""
    async with own_topology(settings, "chat") as (own, _, _):
        yield own.model_copy(update={"database_url": demo_database})


@pytest.fixture(scope="module")
def demo_worker(
    services: TestServices, chat_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LtmProcess]:
    log = tmp_path_factory.mktemp("chat") / "worker.log"
    env = {
        "LTM_DATABASE_URL": chat_settings.database_url,
        "LTM_AMQP_PREFIX": chat_settings.amqp_prefix,
    }
    with LtmProcess(services, ("worker",), log, env=env) as worker:
        worker.wait_ready()
        yield worker


@pytest.fixture
async def llm() -> AsyncIterator[ScriptedLlm]:
    async with running_llm() as scripted:
        yield scripted


async def make_chat(env: dict[str, str], typed: str) -> tuple[int, str, str]:
    """`python -m examples.chat` with `typed` on its stdin: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "examples.chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(typed.encode()), 60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _without_llm(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(("LTM_LLM_", "LTM_LOG_LEVEL"))}


async def test_a_fact_taught_in_make_chat_comes_back_in_the_next_message(
    services: TestServices, chat_settings: Settings, demo_worker: LtmProcess, llm: ScriptedLlm
) -> None:
    quiz = "{user} hosts the quiz on Mondays."
    llm.script(
        tool_calls(
            (CREATE_LONG_TERM_MEMORY, {"memory_content": quiz, "memory_scope": "server_wide"})
        ),
        says("Noted!"),
        says("You host it on Mondays."),
    )
    env = _without_llm(services.env()) | {
        "LTM_DATABASE_URL": chat_settings.database_url,
        "LTM_AMQP_PREFIX": chat_settings.amqp_prefix,
        "LTM_LLM_BASE_URL": llm.base_url,
    }

    code, out, err = await make_chat(env, "remember that I host the quiz on Mondays\nwhen is it?\n")

    assert code == 0, err
    # The demo as `make run` puts it back, then the fact saved as the first new memory.
    first = llm.system_prompt(0)
    assert "ID:24 The server's movie night is on Fridays." in first
    assert "Personal memories of Alice:\nID:25 {user} is learning the violin." in first
    assert "Bob: remember that I host the quiz on Mondays" in str(llm.requests[0]["messages"])
    [saved] = tool_answers(llm.requests[1])
    assert (saved["status"], saved["memory_id"]) == ("memory_saved_successfully", 1001)
    assert "ID:1001 {user} hosts the quiz on Mondays." in llm.system_prompt(2)
    assert "model" not in llm.requests[0]  # LTM_LLM_MODEL unset: none named
    assert llm.authorizations == [None, None, None]
    # The transcript: each line echoed, the notice drawn as the console gateway draws it,
    # before the reply of the message that caused it.
    expected = [
        "Bob> remember that I host the quiz on Mondays",
        "[embed to channel 444444444444444444 · memory_created]",
        "| Tomori learned something new",
        "| Bob hosts the quiz on Mondays.",
        "| ID:1001 · Manage server memories with /memory server",
        "Tomori: Noted!",
        "Bob> when is it?",
        "Tomori: You host it on Mondays.",
    ]
    lines = out.splitlines()
    positions = [lines.index(line) for line in expected]
    assert positions == sorted(positions), out


async def test_make_chat_without_an_llm_says_what_to_set(services: TestServices) -> None:
    code, out, err = await make_chat(_without_llm(services.env()), "hello\n")

    assert code == 2
    assert out == ""
    assert "LTM_LLM_BASE_URL" in err and "OpenAI-compatible" in err
