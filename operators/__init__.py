"""The operators' use cases: what `ltm` commands and the console do to the database and the
broker (restore a revision, replay or purge dead letters, read the audit stream, list
memories, a memory's history). They decide and do; they never print. How the commands and
the console show what they did is `operators.display`, the one module of them both."""

__all__: list[str] = []
