"""What the console reads and does outside itself: SQL, the broker, the audit stream."""

__all__: list[str] = []
