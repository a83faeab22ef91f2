"""How a person is named in an embed: the name people see, not a label with a handle."""

from __future__ import annotations

from collections.abc import Sequence

from contracts import Participant
from worker.core.model import DirectoryMember

__all__ = ["name_of"]


def name_of(
    user_id: str, participants: Sequence[Participant], directory: Sequence[DirectoryMember] = ()
) -> str:
    """The directory's display name, else the name the conversation used, else a mention."""
    for member in directory:
        if member.user_disc_id == user_id:
            return member.display_name or member.global_name or member.username
    for participant in participants:
        if participant.user_id == user_id:
            return participant.aliases[0] if participant.aliases else participant.display_label
    return f"<@{user_id}>"
