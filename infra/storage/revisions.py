"""`memory_revisions`, append-only: the insert every writer of a revision shares (the worker's
tools and the operators' restore), so that the columns are named once."""

from __future__ import annotations

from typing import Final

__all__ = ["REVISION_INSERT", "REVISION_INSERT_WITH_ID"]

REVISION_INSERT: Final = """
    INSERT INTO memory_revisions
        (scope, memory_id, action, content_before, content_after, server_id, owner_user_id,
         persona_lineage_id, actor_disc_id, tool_call_id, occurred_at)
"""

# The same with the revision's id taken beforehand (the create tool's, read with its scope).
REVISION_INSERT_WITH_ID: Final = """
    INSERT INTO memory_revisions
        (revision_id, scope, memory_id, action, content_before, content_after, server_id,
         owner_user_id, persona_lineage_id, actor_disc_id, tool_call_id, occurred_at)
"""
