"""Which revisions an operator means, read from text: the options of `ltm memory changes|revert`
and the fields of the console's Changes page, one reading for both.

Times are RFC 3339, or `YYYY-MM-DD HH:MM` in UTC (as is any time written without an offset).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from pydantic import TypeAdapter, ValidationError

from contracts import DiscordId, RevisionFilter

__all__ = ["FILTER_FIELDS", "BadRevisionFilter", "parse_time", "revision_filter"]

# The console's field (and query parameter) of each filter, in the order a page shows them.
FILTER_FIELDS: Final = ("actor", "guild", "channel", "tool_call", "since", "until")
_DISCORD_ID: Final = TypeAdapter(DiscordId)


class BadRevisionFilter(ValueError):
    """A filter that is not one: said in one line for a person."""


def parse_time(text: str) -> datetime:
    """A time as an operator writes it: RFC 3339, or `YYYY-MM-DD HH:MM` in UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRevisionFilter(
            f"not a time (RFC 3339, or YYYY-MM-DD HH:MM in UTC): {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _discord_id(name: str, text: str) -> str:
    try:
        return _DISCORD_ID.validate_python(text)
    except ValidationError:
        raise BadRevisionFilter(f"{name}: not a Discord id (digits): {text!r}") from None


def revision_filter(fields: Mapping[str, str]) -> RevisionFilter:
    """The filter of `FILTER_FIELDS` given (blank ones are not given)."""
    given = {name: fields.get(name, "").strip() for name in FILTER_FIELDS}
    return RevisionFilter(
        actor_disc_id=given["actor"] or None,
        guild_id=_discord_id("guild", given["guild"]) if given["guild"] else None,
        channel_id=_discord_id("channel", given["channel"]) if given["channel"] else None,
        tool_call_id=given["tool_call"] or None,
        since=parse_time(given["since"]) if given["since"] else None,
        until=parse_time(given["until"]) if given["until"] else None,
    )
