"""What a persona sees of its memories, as the LLM reads them: the use case behind
`ltm memory list` and the console's "as the LLM sees it"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from contracts import MemoryListing, UnknownServer
from infra.storage.memories import MemoryQueries

__all__ = ["PersonaListing", "every_persona_listing", "persona_listing"]


@dataclass(frozen=True, slots=True)
class PersonaListing:
    """One persona's memories on a server, and the given people's personal ones."""

    persona_id: int
    lineage: int
    listing: MemoryListing


async def persona_listing(
    engine: AsyncEngine, server_disc_id: str, persona_id: int, user_ids: Sequence[str] = ()
) -> PersonaListing:
    """Raises `UnknownServer`, or `UnknownPersona` when the server has no such persona."""
    queries = MemoryQueries(engine)
    server = await queries.server(server_disc_id)
    if server is None:
        raise UnknownServer(server_disc_id)
    lineage = server.lineage_of(persona_id)
    listing = server.listing(persona_id, await queries.personal(user_ids))
    return PersonaListing(persona_id, lineage, listing)


async def every_persona_listing(
    engine: AsyncEngine, server_disc_id: str, user_ids: Sequence[str] = ()
) -> list[PersonaListing] | None:
    """Each persona of the server, in persona-id order; None for an unknown server."""
    queries = MemoryQueries(engine)
    server = await queries.server(server_disc_id)
    if server is None:
        return None
    personal = await queries.personal(user_ids)
    return [
        PersonaListing(persona_id, lineage, server.listing(persona_id, personal))
        for persona_id, lineage in sorted(server.persona_lineages.items())
    ]
