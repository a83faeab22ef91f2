"""The tools the worker runs: one module per tool, each a `Tool` over the shared transaction.

`registry.TOOLS` maps every tool name the worker's queue is bound to onto its tool; the
batch around them (claim, idempotency record, outbox, retries, dead-lettering) is the same
for all (`worker.service`, `worker.runtime`).
"""
