"""An embed within each of Discord's limits can still exceed their total: it is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts import EmbedField, EmbedPayload
from contracts.embeds import (
    DESCRIPTION_LIMIT,
    FIELD_VALUE_LIMIT,
    FOOTER_LIMIT,
    TITLE_LIMIT,
    TOTAL_LIMIT,
)


def test_parts_each_within_their_limit_but_over_the_total_are_refused() -> None:
    with pytest.raises(ValidationError, match="over Discord's total of 6000"):
        EmbedPayload(
            title="t" * TITLE_LIMIT,
            description="d" * DESCRIPTION_LIMIT,
            color=0,
            footer="f" * FOOTER_LIMIT,
        )


def test_an_embed_of_exactly_the_total_is_accepted() -> None:
    field = EmbedField(name="Before", value="v" * FIELD_VALUE_LIMIT)
    title, footer = "t" * TITLE_LIMIT, "f" * 700
    rest = TOTAL_LIMIT - TITLE_LIMIT - 700 - len(field.name) - len(field.value)
    embed = EmbedPayload(
        title=title, description="d" * rest, color=0, footer=footer, fields=(field,)
    )
    assert embed.total_length() == TOTAL_LIMIT
