"""The operator commands (`ltm call`, `ltm dlq …`, `ltm audit …`, `ltm memory …`,
`ltm broker-definitions`): each takes its typed arguments (`worker.ops.commands`), runs a use
case of `operators`, and prints what it did (`worker.ops.output`)."""

__all__: list[str] = []
