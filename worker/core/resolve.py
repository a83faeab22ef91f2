"""Step 5 of the pipeline: who `target_user` names, among the people the bot can see.

Stages run in order and the first that matches anybody decides: a Matrix id, a
Discord mention or id, the conversation's participants, then (outside DMs) the
guild's member directory, one name field at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from contracts import Participant
from worker.core.model import AmbiguousUser, DirectoryMember, NoSuchUser, Resolution, ResolvedUser
from worker.core.names import normalize_name

__all__ = [
    "MAX_CANDIDATES",
    "is_current_member",
    "member_label",
    "resolve_target_user",
]

MAX_CANDIDATES: Final = 3

_MATRIX_ID: Final = re.compile(r"@[^:\s]+:\S+")
# `[0-9]`, not `\d`: the latter also accepts other scripts' digits.
_MENTION: Final = re.compile(r"<@!?([0-9]{1,20})>")
_BARE_ID: Final = re.compile(r"[0-9]{17,20}")

# Display name; the bot's stored nickname for the user; global name; username.
_DIRECTORY_FIELDS: Final[tuple[Callable[[DirectoryMember], str | None], ...]] = (
    lambda member: member.display_name,
    lambda member: member.user_nickname,
    lambda member: member.global_name,
    lambda member: member.username,
)

_Via = Literal["matrix", "mention", "participant", "directory"]


@dataclass(frozen=True, slots=True)
class _Match:
    user_id: str
    label: str
    is_bot: bool
    via: _Via


def member_label(member: DirectoryMember) -> str:
    """The member's display name, with ` (@username)` when that differs from it."""
    display = member.display_name or member.global_name or member.username
    if display.casefold() == member.username.casefold():
        return display
    return f"{display} (@{member.username})"


def is_current_member(
    user_id: str, participants: Sequence[Participant], directory: Sequence[DirectoryMember]
) -> bool:
    """In the directory, or a participant the bot saw as a member (`is_member` not false)."""
    return any(member.user_disc_id == user_id for member in directory) or any(
        participant.user_id == user_id and participant.is_member for participant in participants
    )


def resolve_target_user(
    query: str,
    participants: Sequence[Participant],
    directory: Sequence[DirectoryMember],
    *,
    is_dm: bool,
) -> Resolution:
    """The person `query` names, several candidates, or nobody."""
    trimmed = query.strip()

    # 1. A bridged Matrix user, by id.
    found = _by_matrix_id(trimmed, participants)
    if found is not None:
        return found

    # 2. A Discord mention or bare id: that account or nobody, never a name match.
    #    Bots are included here so that a mentioned bot is found, then refused.
    mention = _MENTION.fullmatch(trimmed)
    user_id = mention.group(1) if mention else trimmed if _BARE_ID.fullmatch(trimmed) else None
    if user_id is not None:
        return _by_id(user_id, participants, directory) or NoSuchUser()

    wanted = normalize_name(query)
    if not wanted:
        return NoSuchUser()  # "@" alone names nobody, even someone with a blank name

    # 3. The people of the conversation, by any of their aliases.
    found = _conclude(
        _from_participant(participant, "participant")
        for participant in participants
        if any(_same(alias, wanted) for alias in participant.aliases)
    )
    if found is not None:
        return found

    # 4. A DM has no directory to search.
    humans = [] if is_dm else [member for member in directory if not member.is_bot]

    # 5. Current human members, one name field at a time.
    for field in _DIRECTORY_FIELDS:
        found = _conclude(_from_member(member) for member in humans if _same(field(member), wanted))
        if found is not None:
            return found

    # Beyond the spec, and only where it would find nobody: a candidate label, so that
    # the LLM can call again with one of the labels an ambiguity offered it.
    found = _by_label(wanted, participants, humans)
    return found if found is not None else NoSuchUser()


def _by_label(
    wanted: str, participants: Sequence[Participant], humans: Sequence[DirectoryMember]
) -> Resolution | None:
    """The participant or member whose candidate label (as an ambiguity lists it) is `wanted`."""
    return _conclude(
        [
            *(
                _from_participant(participant, "participant")
                for participant in participants
                if _same(participant.display_label, wanted)
            ),
            *(_from_member(member) for member in humans if _same(member_label(member), wanted)),
        ]
    )


def _by_matrix_id(query: str, participants: Sequence[Participant]) -> Resolution | None:
    """The participant a Matrix id names; None when `query` is no Matrix id or names none."""
    if not _MATRIX_ID.fullmatch(query.casefold()):
        return None
    return _conclude(
        _from_participant(participant, "matrix")
        for participant in participants
        if participant.user_id.casefold() == query.casefold()
    )


def _same(name: str | None, wanted: str) -> bool:
    return name is not None and normalize_name(name) == wanted


def _by_id(
    user_id: str, participants: Sequence[Participant], directory: Sequence[DirectoryMember]
) -> ResolvedUser | None:
    members = [member for member in directory if member.user_disc_id == user_id]
    people = [participant for participant in participants if participant.user_id == user_id]
    if not members and not people:
        return None
    # The directory's label first: it is the server's own view of the account.
    label = member_label(members[0]) if members else people[0].display_label
    is_bot = any(member.is_bot for member in members) or any(p.is_bot for p in people)
    return ResolvedUser(user_id=user_id, label=label, is_bot=is_bot, via="mention")


def _from_participant(participant: Participant, via: _Via) -> _Match:
    return _Match(participant.user_id, participant.display_label, participant.is_bot, via)


def _from_member(member: DirectoryMember) -> _Match:
    return _Match(member.user_disc_id, member_label(member), member.is_bot, "directory")


def _conclude(matches: Iterable[_Match]) -> Resolution | None:
    """One distinct user resolves, several are ambiguous, none lets the next stage run."""
    distinct: dict[str, _Match] = {}
    for match in matches:
        distinct.setdefault(match.user_id, match)
    if not distinct:
        return None
    if len(distinct) == 1:
        (only,) = distinct.values()
        return ResolvedUser(
            user_id=only.user_id, label=only.label, is_bot=only.is_bot, via=only.via
        )
    ordered = sorted(distinct.values(), key=lambda match: (match.label.casefold(), match.user_id))
    labels = tuple(match.label for match in ordered[:MAX_CANDIDATES])
    return AmbiguousUser(candidates=labels)
