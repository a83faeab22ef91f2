"""Name normalization: the one way every name is compared when resolving `target_user`."""

from __future__ import annotations

__all__ = ["normalize_name"]


def normalize_name(name: str) -> str:
    """Trim, drop one leading `@`, trim again, collapse white space, case-fold.

    `str.split()` with no separator splits on runs of Unicode white space and drops
    the ends, so joining its parts both collapses the runs and trims.
    """
    trimmed = name.strip()
    if trimmed.startswith("@"):
        trimmed = trimmed[1:]
    return " ".join(trimmed.split()).casefold()
