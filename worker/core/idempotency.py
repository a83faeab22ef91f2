"""Before step 1: whether the idempotency record of a tool_call_id answers this call.

The record keeps a fingerprint of the call it answered. A second delivery of that call (a
redelivery, a replay, a duplicate publish) has the same fingerprint and is answered from the
record; a different call under the same id is refused, and nothing of it is written.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

from contracts import MemoryStatus, ResultData, ToolCallRequested
from worker.core import messages
from worker.core.model import Rejection

__all__ = ["TOOL_CALL_ID_REUSED", "call_fingerprint", "check_same_call"]

TOOL_CALL_ID_REUSED: Final = "tool_call_id_reused"


def call_fingerprint(call: ToolCallRequested) -> str:
    """The SHA-256 (hex) of the call's canonical JSON: tool, arguments, guild, channel,
    triggerer and persona (docs/behaviour.md, "Idempotency").

    Records outlive processes and versions, so the form is fixed: sorted keys, no spaces,
    non-ASCII escaped, ids as strings, the arguments as decoded (not normalized: a redelivery
    carries the same bytes). The standard library's encoder takes any decoded value, integers
    beyond 64 bits and NaN included. Never Python's `hash()`, which differs per process.
    """
    context = call.context
    canonical = json.dumps(
        {
            "arguments": call.arguments,
            "channel_id": context.channel_id,
            "guild_id": context.guild_id,
            "persona_id": str(context.persona_id),
            "tool_name": call.tool_name,
            "triggerer_id": context.triggerer_id,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_same_call(
    call: ToolCallRequested, *, recorded: str | None, invalid_args: MemoryStatus
) -> Rejection | None:
    """None: the record of the call's id answers it. A Rejection with the tool's `…_invalid_args`
    status (`invalid_args`): the id was used for a different call. A record from before
    fingerprints (`recorded` None) answers any call."""
    if recorded is None or recorded == call_fingerprint(call):
        return None
    return Rejection(
        status=invalid_args,
        message=messages.tool_call_id_reused(),
        data=ResultData(reason=TOOL_CALL_ID_REUSED),
    )
