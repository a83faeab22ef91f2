"""The console's decisions, without I/O: sessions and logins, the overview's series, diffs of
revisions, what the audit page shows, how a dead letter's body reads."""

__all__: list[str] = []
