"""`ltm console`: the operators' web console (overview, dead letters, memories, audit)."""

__all__: list[str] = []
