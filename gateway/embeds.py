"""The contract's embed (`EmbedPayload`) as a hikari `Embed`, ready for `rest.create_message`."""

from __future__ import annotations

import hikari

from contracts import EmbedPayload

__all__ = ["to_hikari_embed"]


def to_hikari_embed(payload: EmbedPayload) -> hikari.Embed:
    """Title, description, colour, footer (when there is one) and fields, in their order."""
    embed = hikari.Embed(
        title=payload.title,
        description=payload.description,
        colour=hikari.Colour(payload.color),
    )
    if payload.footer:
        embed.set_footer(payload.footer)
    for field in payload.fields:
        embed.add_field(field.name, field.value, inline=field.inline)
    return embed
